"""The report's executors as compiled kernels over the channels: type- and
pattern-grained (coarse) and mixed-grained (kept events)."""
