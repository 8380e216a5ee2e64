-- q2 (report §1, ride sharing): for each driver, the number of Uber pool trips (an Accept,
-- one or more Call-Cancel pairs, a Finish, all with the same driver) in 10-minute windows
-- sliding every 30 seconds; skip-till-next-match skips irrelevant events (InTransit, ...).
SELECT * FROM MATCH_TREND(TABLE(rides), '
RETURN driver, COUNT(*)
PATTERN SEQ(Accept, (SEQ(Call, Cancel))+, Finish)
SEMANTICS skip-till-next-match
WHERE [driver] GROUP-BY driver
WITHIN 10 minutes SLIDE 30 seconds
');
