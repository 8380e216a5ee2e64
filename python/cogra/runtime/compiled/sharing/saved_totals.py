"""The sharing arguments of the mixed-grained kernel: a cache of one variable's totals
that one run saves and later runs read (:mod:`cogra.runtime.compiled.sharing.kept_totals` decides
when; :func:`~cogra.runtime.compiled.aggregators.mixed_grained.run_mixed_windows` takes them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cogra.runtime.compiled.codes import SHARE_NONE, SHARE_SAVE, SHARE_TAKE


@dataclass
class Share:
    """The sharing arguments of :func:`~cogra.runtime.compiled.aggregators.mixed_grained.run_mixed_windows`.

    ``take_at``: per position of the run, its cache row (read under ``SHARE_TAKE``; under
    ``SHARE_SAVE`` a batch's total goes to the row of its last position).  The cache holds
    the shared variable's live channels (``live_*``: ``[n, channel_1, ..]``) per row.
    """

    var: int
    mode: int
    take_at: np.ndarray
    ci: np.ndarray
    cf: np.ndarray
    cx: np.ndarray
    ce: np.ndarray
    cr: np.ndarray
    live_i: np.ndarray
    live_f: np.ndarray
    live_x: np.ndarray

    @classmethod
    def none(cls, driver: Any) -> "Share":
        return cls.cache(driver, 0, 0, SHARE_NONE)

    @classmethod
    def cache(cls, driver: Any, var: int, n_rows: int, mode: int = SHARE_SAVE) -> "Share":
        """An empty cache of ``n_rows`` rows for variable ``var``'s live channels."""
        li, lf, lx = driver.var_live_i[var], driver.var_live_f[var], driver.var_live_x[var]
        return cls(var if mode != SHARE_NONE else -1, mode, np.zeros(1, np.int64),
                   np.zeros((n_rows, max(1, int(li[0]))), np.uint64),
                   np.zeros((n_rows, max(1, int(lf[0]))), np.float64),
                   np.zeros((n_rows, max(1, int(lx[0]))), np.int64),
                   np.zeros(n_rows, np.int64), np.zeros(n_rows, np.bool_), li, lf, lx)

    def taking(self, take_at: np.ndarray) -> "Share":
        """The same cache, read at ``take_at``."""
        return Share(self.var, SHARE_TAKE, take_at, self.ci, self.cf, self.cx, self.ce, self.cr,
                     self.live_i, self.live_f, self.live_x)

    def arguments(self) -> tuple:
        return (self.var, self.mode, self.take_at, self.ci, self.cf, self.cx, self.ce, self.cr,
                self.live_i, self.live_f, self.live_x)


__all__ = ["Share"]
