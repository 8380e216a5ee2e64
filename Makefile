# The two quick-start commands (see README): `make demo` and `make test`.
.PHONY: setup demo test test-all bench clean-kernels

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/cogra demo

# Two pytest processes (pytest-xdist), each file's tests in one of them (its module
# fixtures and SparkSession built once): COGRA_TEST_WORKERS=1 for one process. The 25
# slowest tests are listed at the end (the default suite keeps to ~15 minutes).
PYTEST = .venv/bin/python -m pytest -q -n $${COGRA_TEST_WORKERS:-2} --dist loadfile --durations=25

test: setup
	$(PYTEST) -m "not slow"

test-all: setup
	$(PYTEST)

bench: setup
	.venv/bin/cogra bench

# numba caches machine code per source file; a kernel that inlines a helper from another
# file keeps the old helper until its own cache goes (README, "Compiled kernels").
clean-kernels:
	find python -name '*.nbi' -delete -o -name '*.nbc' -delete
