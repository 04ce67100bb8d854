# Quick start (README):  make demo   |   make test
.PHONY: setup demo test test-fast lint

setup:
	bash scripts/setup.sh

## Set up, then validate the built-in default fleet (this machine) and print where the report is.
demo: setup
	.venv/bin/sb-fleet validate

## Set up, then run every test (unit, integration on a loopback SSH fleet, long fuzzing runs, and the
## on-host suite on CPU). The suite runs in its own pytest process, as it does on a host: Ansible,
## imported by the control-node tests, patches sys.intern in a way torch's compiler rejects.
test: setup
	.venv/bin/python -m pytest -q tests/suite; a=$$?; \
	.venv/bin/python -m pytest -q --durations=40 --ignore=tests/suite; b=$$?; \
	test $$a -eq 0 -a $$b -eq 0

## Unit tests only (no fleet, seconds).
test-fast: setup
	.venv/bin/python -m pytest -q tests/unit

## Style: ruff (lint and format), mypy on sb_fleet/, and no import cycles in sb_fleet/ or the suite.
lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy \
	  && .venv/bin/python scripts/check_imports.py sb_fleet benchmarks/sb_bench \
	  && .venv/bin/python scripts/check_layers.py
