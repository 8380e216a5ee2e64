-- Trips of a driver's clean start: per driver and 10-minute window, Accept-then-Finish
-- trips with no Cancel earlier in the window (absence at the pattern's start).
SELECT * FROM MATCH_TREND(TABLE(rides), '
RETURN driver, COUNT(*)
PATTERN SEQ(NOT Cancel C, Accept A, Finish F)
SEMANTICS skip-till-next-match
WHERE [driver]
GROUP-BY driver
WITHIN 10 minutes
');
