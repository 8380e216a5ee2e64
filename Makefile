# The two quick-start commands (see README): `make demo` and `make test`.
.PHONY: setup demo test test-all bench

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
