-- q3 (report §1, algorithmic trading): for each sector and pair of its companies A, B,
-- the average price of the B trends that follow a down-trend of A (each A tick priced
-- above the next A tick in the trend), in 10-minute windows sliding every 10 seconds;
-- skip-till-any-match counts every such trend, skipping fluctuations.
SELECT * FROM MATCH_TREND(TABLE(stock), '
RETURN sector, A.company, B.company, AVG(B.price)
PATTERN SEQ(Stock A+, Stock B+)
SEMANTICS skip-till-any-match
WHERE [A.company] AND [B.company] AND A.price > NEXT(A).price
GROUP-BY sector, A.company, B.company
WITHIN 10 minutes SLIDE 10 seconds
');
