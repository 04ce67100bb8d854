"""Layers point one way: the config layer loads without the analysis (or numpy), and every default of
the detector is declared once."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from sb_fleet.config.gatespec import DetectionSettings, FleetGate


def test_loading_a_config_imports_neither_the_analysis_nor_numpy():
    code = (
        "import sys; from sb_fleet.config.fleet_config import load_config; load_config('configs/cpu.yaml'); "
        "bad = [m for m in sys.modules if m == 'numpy' or m.startswith('sb_fleet.analysis')]; print(bad)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_the_gate_schema_takes_the_detector_defaults_from_one_place():
    gate = FleetGate()
    for f in dataclasses.fields(DetectionSettings):
        assert getattr(gate, f.name) == f.default, f.name
    assert gate.settings() == DetectionSettings()
