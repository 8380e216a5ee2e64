"""Kernels generated per query shape: their sources, their cache, their background compiles."""
