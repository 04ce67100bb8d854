# Quick start (README):  make demo   |   make test
.PHONY: setup demo test test-fast lint

setup:
	bash scripts/setup.sh

## Set up, then validate the built-in default fleet (this machine) and print where the report is.
demo: setup
	.venv/bin/sb-fleet validate

## Set up, then run every test (unit, integration on a loopback SSH fleet, long fuzzing runs, and the
## on-host suite on CPU), in two lanes and then a quiet part: scripts/run_tests.sh says which and why.
test: setup
	bash scripts/run_tests.sh

## Unit tests only (no fleet, seconds).
test-fast: setup
	.venv/bin/python -m pytest -q tests/unit

## Style: ruff (lint and format), mypy on sb_fleet/, and no import cycles in sb_fleet/ or the suite.
lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy \
	  && .venv/bin/python scripts/check_imports.py sb_fleet benchmarks/sb_bench \
	  && .venv/bin/python scripts/check_layers.py
