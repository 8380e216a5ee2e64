# The two quick-start commands (see README): `make demo` and `make test`.
.PHONY: setup demo test test-all bench clean-kernels

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/cogra demo

test: setup
	.venv/bin/python -m pytest -q -m "not slow"

test-all: setup
	.venv/bin/python -m pytest -q

bench: setup
	.venv/bin/cogra bench

# numba caches machine code per source file; a kernel that inlines a helper from another
# file keeps the old helper until its own cache goes (README, "Compiled kernels").
clean-kernels:
	find python -name '*.nbi' -delete -o -name '*.nbc' -delete
