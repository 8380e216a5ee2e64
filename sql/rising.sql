-- Heart rate rising for at least five measurements in a row during passive activity, per
-- patient, in 10-minute windows (a bounded quantifier: docs/language.md, Bounded
-- quantifiers).
SELECT * FROM MATCH_TREND(TABLE(activity), '
RETURN patient, COUNT(*), MAX(M.rate)
PATTERN Measurement M{5,}
SEMANTICS contiguous
WHERE [patient] AND M.rate < NEXT(M).rate AND M.activity = passive
GROUP-BY patient
WITHIN 10 minutes
');
