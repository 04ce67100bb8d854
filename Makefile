# Quick start (README):  make demo   |   make test
.PHONY: setup demo test test-fast lint

setup:
	bash scripts/setup.sh

## Set up, then validate the built-in default fleet (this machine) and print where the report is.
demo: setup
	.venv/bin/sb-fleet validate

## Set up, then run every test (unit, integration on a loopback SSH fleet, long fuzzing runs, and the
## on-host suite on CPU). The suite runs in its own pytest process, as it does on a host: Ansible,
## imported by the control-node tests, patches sys.intern in a way torch's compiler rejects. It runs beside
## the unit and fuzz tests (each keeps one core busy; neither measures time), its output shown when both
## are done; the integration tests, some of which judge timings, then run alone.
test: setup
	@mkdir -p test-artifacts; rm -f test-artifacts/suite.log test-artifacts/suite.rc
	@echo "make test: the on-host suite (tests/suite) beside the unit and fuzz tests, then the integration tests"
	( .venv/bin/python -m pytest -q tests/suite > test-artifacts/suite.log 2>&1; echo $$? > test-artifacts/suite.rc ) & \
	.venv/bin/python -m pytest -q --durations=20 tests/unit tests/fuzz; u=$$?; \
	wait; echo "== tests/suite (ran beside them):"; cat test-artifacts/suite.log; a=$$(cat test-artifacts/suite.rc); \
	.venv/bin/python -m pytest -q --durations=40 --ignore=tests/suite --ignore=tests/unit --ignore=tests/fuzz; b=$$?; \
	test "$$a" -eq 0 -a $$u -eq 0 -a $$b -eq 0

## Unit tests only (no fleet, seconds).
test-fast: setup
	.venv/bin/python -m pytest -q tests/unit

## Style: ruff (lint and format), mypy on sb_fleet/, and no import cycles in sb_fleet/ or the suite.
lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy \
	  && .venv/bin/python scripts/check_imports.py sb_fleet benchmarks/sb_bench \
	  && .venv/bin/python scripts/check_layers.py
