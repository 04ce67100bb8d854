# Quick start (README):  make demo   |   make test
.PHONY: setup demo test test-fast lint

setup:
	bash scripts/setup.sh

## Set up, then validate the built-in default fleet (this machine) and print where the report is.
demo: setup
	.venv/bin/sb-fleet validate

## Set up, then run every test (unit, integration on a loopback SSH fleet, long fuzzing runs).
test: setup
	.venv/bin/python -m pytest -q

## Unit tests only (no fleet, seconds).
test-fast: setup
	.venv/bin/python -m pytest -q tests/unit

lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy
