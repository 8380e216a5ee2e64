"""The report's three queries (its section 1), exactly as printed, with their data.

``sql/q1.sql`` .. ``sql/q3.sql`` wrap the same texts in ``MATCH_TREND``; a test keeps
them in sync.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from cogra import datasets

Q1 = """RETURN patient, MIN(M.rate), MAX(M.rate)
PATTERN Measurement M+
SEMANTICS contiguous
WHERE [patient] AND M.rate < NEXT(M).rate AND M.activity = passive
GROUP-BY patient
WITHIN 10 minutes SLIDE 30 seconds"""

Q2 = """RETURN driver, COUNT(*)
PATTERN SEQ(Accept, (SEQ(Call, Cancel))+, Finish)
SEMANTICS skip-till-next-match
WHERE [driver] GROUP-BY driver
WITHIN 10 minutes SLIDE 30 seconds"""

Q3 = """RETURN sector, A.company, B.company, AVG(B.price)
PATTERN SEQ(Stock A+, Stock B+)
SEMANTICS skip-till-any-match
WHERE [A.company] AND [B.company] AND A.price > NEXT(A).price
GROUP-BY sector, A.company, B.company
WITHIN 10 minutes SLIDE 10 seconds"""


@dataclass(frozen=True)
class Example:
    name: str
    title: str
    query: str
    table: str
    data: Callable[..., pa.Table]


EXAMPLES = (
    Example("q1", "health care: min/max of contiguously rising heart rate while passive", Q1,
            "activity", datasets.activity),
    Example("q2", "ride sharing: pool trips per driver", Q2, "rides", datasets.rides),
    Example("q3", "trading: average price of company B trends after A's down-trends", Q3,
            "stock", datasets.stock),
)
