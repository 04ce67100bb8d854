"""The benchmark config: SuperBench's shape, validated, plus sb-fleet's own sections.

A SuperBench config loads as it is::

    version: v0.4
    superbench:
      enable: null            # or a list of benchmark names to run
      monitor: {...}
      var: {...}              # anchors live here
      benchmarks:
        gemm-flops:
          enable: true
          modes: [{name: local, proc_num: 8, prefix: CUDA_VISIBLE_DEVICES={proc_rank}, parallel: yes}]
          parameters: {...}
          timeout: 600

sb-fleet adds optional top-level sections: ``fleet`` (how to reach and
prepare hosts), ``collect`` (what one host may cost the control node at collect,
sb_fleet/config/collect_budgets.py) and ``gates`` (pass/fail policy of the report). Unknown keys
are errors everywhere except under ``superbench.var``, which exists to hold
YAML anchors, and a benchmark's ``parameters``, which each benchmark checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sb_fleet.config.collect_budgets import CollectBudgets, default_budgets
from sb_fleet.config.container_settings import ContainerSettings
from sb_fleet.config.gatespec import Gates
from sb_fleet.config.traffic_patterns import PatternSpec
from sb_fleet.config.yamlsrc import load_yaml, pydantic_error
from sb_fleet.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mode(_Strict):
    """How a benchmark is launched on a node, as in SuperBench."""

    name: Literal["local", "torch.distributed", "mpi"]
    proc_num: int = Field(1, ge=1, le=1024)
    node_num: int | Literal["all"] = 1
    prefix: str = ""
    parallel: bool = True
    env: dict[str, str | int | float | bool] = Field(default_factory=dict)
    # SuperBench's mpi mode keys; `pattern` (mpi and torch.distributed) is expanded in sb_fleet/plan/pattern_plan.py.
    mca: dict[str, Any] | None = None
    pattern: PatternSpec | None = None

    @field_validator("node_num")
    @classmethod
    def _node_num(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("node_num must be >= 1 or 'all'")
        return v

    @property
    def multi_node(self) -> bool:
        if self.pattern is not None:
            return True
        if self.name == "mpi":  # SuperBench: an mpi mode without node_num runs across every node
            return "node_num" not in self.model_fields_set or self.node_num != 1
        return self.name == "torch.distributed" and self.node_num != 1


class BenchmarkEntry(_Strict):
    enable: bool = True
    modes: list[Mode] = Field(default_factory=lambda: [Mode.model_validate({"name": "local"})])
    parameters: dict[str, Any] = Field(default_factory=dict)
    timeout: int | None = Field(None, ge=1)
    models: list[str] | None = None
    frameworks: list[str] | None = None


class Monitor(_Strict):
    enable: bool = False
    sample_duration: float = 1
    sample_interval: float = 10


class SuperBenchSection(_Strict):
    enable: list[str] | str | None = None
    monitor: Monitor | None = None
    var: dict[str, Any] | None = None
    benchmarks: dict[str, BenchmarkEntry] = Field(default_factory=dict)

    def enabled(self) -> dict[str, BenchmarkEntry]:
        """The benchmark entries to run: ``enable`` (a name or list) overrides each entry's own flag."""
        if self.enable:
            names = [self.enable] if isinstance(self.enable, str) else list(self.enable)
            return {n: self.benchmarks[n] for n in names if n in self.benchmarks}
        return {n: b for n, b in self.benchmarks.items() if b.enable}


class FleetSettings(_Strict):
    """How sb-fleet reaches and prepares hosts. Inventory variables override per host:
    ``sb_workspace``, ``sb_python``."""

    # {host} is the inventory name: hosts that share a home (NFS) never share a workspace (see README).
    workspace: str = "~/.sb-fleet/hosts/{host}"
    # Caches hosts may share on purpose, under a lock (the venv, keyed by its requirements' digest);
    # empty: each workspace builds its own venv.
    cache: str = "~/.sb-fleet/cache"
    runtime: Literal["none", "docker", "podman", "enroot"] = "none"
    python: str = "/usr/bin/python3"
    venv: bool = True
    install_requirements: Literal["auto", "always", "never"] = "auto"
    forks: int = Field(64, ge=1, le=5000)
    default_timeout: int = Field(1800, ge=1)
    deploy_timeout: int = Field(3600, ge=1)
    min_free_disk_gb: float = Field(1.0, ge=0)
    require_gpu: bool = False
    master_port: int = Field(29500, ge=1024, le=65000)
    known_hosts: str | None = None
    host_key_checking: Literal["strict", "accept-new"] = "strict"
    ssh_connect_timeout: int = Field(10, ge=1)
    collect_timeout: int = Field(
        300, ge=1
    )  # s: the longest stall of one read at collect (per host: collect.host_timeout)
    # Environment of every benchmark process on the hosts, e.g. NCCL_IB_HCA, NCCL_SOCKET_IFNAME,
    # GLOO_SOCKET_IFNAME (set it to the interface the hosts reach each other on for multi-node runs).
    env: dict[str, str | int | float | bool] = Field(default_factory=dict)
    container: ContainerSettings | None = (
        None  # with runtime docker/podman/enroot: see sb_fleet/plan/container_commands.py
    )
    history: str | None = None  # the history store (a DuckDB file) every validate/report records into

    @model_validator(mode="after")
    def _container(self) -> FleetSettings:
        if self.runtime != "none" and self.container is None:
            raise ValueError(f"runtime {self.runtime} needs a 'container' section (at least container.image)")
        return self


class Config(_Strict):
    version: str | None = None
    fleet: FleetSettings = Field(default_factory=lambda: FleetSettings.model_validate({}))
    superbench: SuperBenchSection
    collect: CollectBudgets = Field(default_factory=default_budgets)
    gates: Gates = Field(default_factory=Gates)


def load_config(path: Path) -> Config:
    """Load and validate a config file; any problem is a :class:`ConfigError` naming file, line and field."""
    data, lines = load_yaml(Path(path), "config")
    if not isinstance(data, dict):
        raise ConfigError(
            path,
            None,
            "the config must be a YAML mapping with a 'superbench' key",
            "see configs/cpu.yaml for an example",
        )
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise pydantic_error(Path(path), lines, exc, ConfigError) from None
