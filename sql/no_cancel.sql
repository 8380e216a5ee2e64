-- Rides that got under way (InTransit) with no Cancel since the driver accepted them, per
-- driver, in 10-minute windows (a negated sub-pattern: docs/language.md, Negation).
SELECT * FROM MATCH_TREND(TABLE(rides), '
RETURN driver, COUNT(*)
PATTERN SEQ(Accept A, NOT Cancel C, InTransit I)
SEMANTICS skip-till-next-match
WHERE [driver]
GROUP-BY driver
WITHIN 10 minutes
');
