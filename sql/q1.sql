-- q1 (report §1, health care analytics): for each patient, the minimal and maximal heart
-- rate over contiguously increasing runs of measurements taken during passive activities,
-- in 10-minute windows sliding every 30 seconds.  The bare word passive is a string;
-- in cogra.datasets.activity the activity column holds passive or active.
SELECT * FROM MATCH_TREND(TABLE(activity), '
RETURN patient, MIN(M.rate), MAX(M.rate)
PATTERN Measurement M+
SEMANTICS contiguous
WHERE [patient] AND M.rate < NEXT(M).rate AND M.activity = passive
GROUP-BY patient
WITHIN 10 minutes SLIDE 30 seconds
');
