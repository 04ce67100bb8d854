"""Helpers for the SuperBench parity tests: run sb-fleet's rules on SuperBench's own test data."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sb_fleet.analysis.superbench.rules import RulesOutcome, apply_rules, load_rules

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


class Diagnosed:
    """The outcome of a rules run, looked up by node name."""

    def __init__(self, nodes: list[str], out: RulesOutcome):
        self.nodes = nodes
        self.out = out
        assert out.diagnosis is not None
        self.diag = out.diagnosis

    def row(self, node: str) -> int:
        return self.nodes.index(node)

    def defective(self, node: str) -> bool:
        return bool(self.diag.defective[self.row(node)])

    def categories(self, node: str) -> str:
        return self.diag.category_text(self.row(node))

    def details(self, node: str) -> str:
        return self.diag.details_text(self.row(node))

    def value(self, node: str, metric: str) -> float:
        return float(self.diag.values[self.row(node), self.diag.metrics.index(metric)])


def rows_to_matrix(rows: dict[str, dict[str, Any]]) -> tuple[list[str], list[str], np.ndarray]:
    """``{node: {metric: value}}`` -> nodes, columns (first-seen order), matrix (None: NaN)."""
    nodes = list(rows)
    cols: list[str] = []
    for r in rows.values():
        for k in r:
            if k not in cols:
                cols.append(k)
    m = np.full((len(nodes), len(cols)), np.nan)
    for i, r in enumerate(rows.values()):
        for k, v in r.items():
            if v is not None:
                m[i, cols.index(k)] = float(v)
    return nodes, cols, m


@pytest.fixture
def diagnose(tmp_path: Path) -> Callable[..., Diagnosed]:
    """Run a rules dict (SuperBench's shape) on ``{node: {metric: value}}`` with a baseline dict."""

    def run(
        rules: dict, rows: dict[str, dict[str, Any]], baseline: dict[str, float] | None = None
    ) -> Diagnosed:
        p = tmp_path / "rules.yaml"
        p.write_text(yaml.safe_dump(rules))
        nodes, cols, m = rows_to_matrix(rows)
        return Diagnosed(nodes, apply_rules(load_rules(p), cols, m, baseline))

    return run


def read_jsonl(path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            out[d.pop("node")] = d
    return out
