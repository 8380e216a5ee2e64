"""The report's executors in Python: exact over unbounded integers, for every query the
compiled kernels do not cover."""
