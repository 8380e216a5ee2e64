-- Rides accepted and not finished: per driver and 10-minute window, the Accept events
-- that no Finish follows in the window (absence at the pattern's end, docs/language.md,
-- Absence at the edge of a pattern).
SELECT * FROM MATCH_TREND(TABLE(rides), '
RETURN driver, COUNT(*)
PATTERN SEQ(Accept A, NOT Finish F)
WHERE [driver]
GROUP-BY driver
WITHIN 10 minutes
');
