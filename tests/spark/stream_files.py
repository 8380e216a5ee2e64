"""Adding files to a directory a streaming file source watches, the way a stream can rely on.

Spark's file source reads new files in the order of their modification times (ties in
the directory's order) and may list the directory at any moment.  A file written in place
can be listed half-written, or with the modification time of its writing rather than the
one it is given next -- so a later file can be read before an earlier one, whose rows are
then late.  A file is therefore written beside the directory, given its time, and renamed
into it (atomic, keeping the time): each file a later time than the one before."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


class OrderedFiles:
    """Adds Parquet files to ``directory``, each with a later modification time."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.staging = self.directory.parent / f".{self.directory.name}-staging"
        self.stamp = 0

    def add(self, table: pa.Table, name: str) -> Path:
        self.staging.mkdir(parents=True, exist_ok=True)
        staged = self.staging / name
        pq.write_table(table, staged)
        self.stamp = max(time.time_ns(), self.stamp + 10_000_000)
        os.utime(staged, ns=(self.stamp, self.stamp))
        target = self.directory / name
        os.replace(staged, target)
        return target
