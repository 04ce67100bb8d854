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

sb-fleet adds optional top-level sections: ``fleet`` (how to reach and prepare hosts), ``collect``
(what one host may cost the control node at collect, sb_fleet/config/collect_budgets.py), ``gates``
(pass/fail policy of the report), ``health`` (the checks before the benchmarks:
:mod:`sb_fleet.config.health_profiles`) and ``slurm`` (the fleet from Slurm). Unknown keys
are errors everywhere except under ``superbench.var``, which exists to hold
YAML anchors, and a benchmark's ``parameters``, which each benchmark checks.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sb_fleet.config.collect_budgets import CollectBudgets, default_budgets
from sb_fleet.config.container_settings import ContainerSettings
from sb_fleet.config.gatespec import Gates
from sb_fleet.config.health_profiles import HealthSettings
from sb_fleet.config.slurm_inventory import SlurmSettings
from sb_fleet.config.traffic_patterns import PatternSpec
from sb_fleet.config.yamlsrc import load_yaml, pydantic_error
from sb_fleet.errors import ConfigError


class _Strict(BaseModel):
    # inf/nan are no setting's value ("1e400" would parse to inf): refused with the field named
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# The placeholders a mode's prefix may hold (the runner formats it per process: runner.py run_local).
PREFIX_PLACEHOLDERS = ("proc_rank", "proc_num")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_prefix(prefix: str) -> str:
    """A prefix whose every ``{placeholder}`` the runner can fill (``{{``/``}}`` are literal braces)."""
    allowed = ", ".join("{" + p + "}" for p in PREFIX_PLACEHOLDERS)
    try:
        fields = [f for _lit, f, _spec, _conv in string.Formatter().parse(prefix) if f is not None]
    except ValueError as exc:
        raise ValueError(f"prefix {prefix!r} is not a valid template ({exc}); allowed: {allowed}") from None
    for f in fields:
        if f not in PREFIX_PLACEHOLDERS:
            raise ValueError(
                f"prefix {prefix!r}: unknown placeholder {{{f}}}; allowed: {allowed} "
                "(write {{ and }} for literal braces)"
            )
    try:
        prefix.format(proc_rank=0, proc_num=1)
    except (ValueError, IndexError, KeyError, AttributeError) as exc:
        raise ValueError(f"prefix {prefix!r} cannot be filled in ({exc}); allowed: {allowed}") from None
    return prefix


def check_env(env: dict[str, Any]) -> dict[str, Any]:
    for name in env:
        if not _ENV_NAME.match(name):
            raise ValueError(
                f"{name!r} is not an environment variable name (letters, digits and _, not a digit first)"
            )
    return env


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

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        return check_prefix(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_env(v)

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
    # ssh: Ansible over SSH; slurm: every step in a Slurm allocation, srun per node (the slurm section)
    launcher: Literal["ssh", "slurm"] = "ssh"
    python: str = "/usr/bin/python3"
    venv: bool = True
    install_requirements: Literal["auto", "always", "never"] = "auto"
    forks: int = Field(64, ge=1, le=5000)
    default_timeout: int = Field(1800, ge=1)
    deploy_timeout: int = Field(3600, ge=1)  # s per host for the whole deploy stage
    # s per host for hostprep where the suite is already in place (validate's nightly exec: check the
    # prerequisites, record the facts); one that starts installing (a venv built, requirements installed)
    # gets fleet.deploy_timeout instead. Enforced from the control node (sb_fleet/fleet/exec_phases.py)
    prep_timeout: int = Field(180, ge=10, le=86400)
    # s on top of a step's benchmark timeouts (process start, result writing): the step's deadline per host
    step_margin: int = Field(60, ge=1)
    # s per host for all of its benchmark runs in one validate together (every step; a campaign stage's
    # `timeout`): past it the running benchmark is stopped and those not started are not; None: no such cap
    run_timeout: int | None = Field(None, ge=1)
    min_free_disk_gb: float = Field(1.0, ge=0)
    require_gpu: bool = False
    master_port: int = Field(29500, ge=1024, le=65000)
    known_hosts: str | None = None
    host_key_checking: Literal["strict", "accept-new"] = "strict"
    ssh_connect_timeout: int = Field(10, ge=1)
    # cheap-first: OpenSSH's own key exchange algorithms, sntrup761x25519 (~65 ms of CPU per new connection on
    # OpenSSH 9.0-9.8) last; openssh: OpenSSH's order as it is (sb_fleet/fleet/ssh.py)
    ssh_kex: Literal["cheap-first", "openssh"] = "cheap-first"
    # ssh: validate's one exec per host and the suite's transfer run over sb-fleet's own OpenSSH clients
    # (Ansible's options and master; a host whose inventory needs Ansible's connection still gets it);
    # ansible: always through Ansible (sb_fleet/fleet/direct_exec.py)
    exec_via: Literal["ssh", "ansible"] = "ssh"
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

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_env(v)

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
    # -i slurm:..., sb-fleet drain, fleet.launcher: slurm
    slurm: SlurmSettings = Field(default_factory=lambda: SlurmSettings.model_validate({}))
    health: HealthSettings = Field(default_factory=lambda: HealthSettings.model_validate({}))


def load_config(path: Path) -> Config:
    """Load and validate a config file; any problem is a :class:`ConfigError` naming file, line and field."""
    data, lines = load_yaml(Path(path), "config", ConfigError)
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
