"""Health expectations: SKU profiles (built in, or the user's YAML) and the ``health:`` config section.

A profile holds the rules the host-side checks apply (``sb_bench.health``): GPU count, model, memory,
PCIe, NVLink, ECC; InfiniBand port count and rate; host limits; which XIDs fail. The config's ``health``
section picks the fleet's profile (``health.profile``; per host: inventory variable ``sb_health_profile``),
adds user profiles (``health.profiles``: YAML files, each a mapping with the fields of
:class:`HealthProfile`), pins values every host must have (``health.pin``), and says how much a difference
from the fleet's majority weighs (``health.drift``). Everything is ``extra="forbid"``: a typo is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sb_fleet.config.yamlsrc import load_yaml, pydantic_error
from sb_fleet.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuRules(_Strict):
    count: int | None = Field(None, ge=0, le=64)
    model: str | None = None  # a substring of the GPU's name, e.g. "H100"
    memory_gib_min: float | None = Field(None, ge=0)
    ecc: bool | None = None
    ecc_uncorrected_volatile_max: int = Field(0, ge=0)
    ecc_uncorrected_aggregate_max: int = Field(0, ge=0)
    persistence: bool | None = None
    mig: bool | None = None
    pcie_gen: int | None = Field(None, ge=1, le=7)
    pcie_width: int | None = Field(None, ge=1, le=32)
    nvlinks: int | None = Field(None, ge=0, le=64)
    nvlink_error_max: int = Field(0, ge=0)  # per link and counter (replay, recovery, CRC): more warns
    temperature_max_c: float | None = None
    fabric_manager: bool | None = None


class IbRules(_Strict):
    ports: int | None = Field(None, ge=0, le=64)
    rate_gbps: float | None = Field(None, gt=0)
    link_layer: Literal["InfiniBand", "Ethernet"] | None = "InfiniBand"
    exclude: list[str] = Field(default_factory=list)  # regexes over "hca/port", e.g. "^mlx5_bond"
    error_counter_max: int = Field(0, ge=0)


class HostRules(_Strict):
    cpus_min: int | None = Field(None, ge=1)
    memory_gib_min: float | None = Field(None, ge=0)
    swap: bool | None = None
    numa_nodes: int | None = Field(None, ge=1)
    free_disk_gib_min: float | None = Field(None, ge=0)
    memlock_unlimited: bool | None = None
    governor: str | None = None
    time_sync: bool = True


class XidRules(_Strict):
    fail: list[int] | None = None  # default: sb_bench.health.xid.HARDWARE_XIDS
    warn: list[int] | None = None  # default: sb_bench.health.xid.APPLICATION_XIDS


class HealthProfile(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    description: str = ""
    sources: list[str] = Field(default_factory=list)
    gpu: GpuRules = Field(default_factory=lambda: GpuRules.model_validate({}))
    ib: IbRules = Field(default_factory=lambda: IbRules.model_validate({}))
    host: HostRules = Field(default_factory=lambda: HostRules.model_validate({}))
    xid: XidRules = Field(default_factory=lambda: XidRules.model_validate({}))
    timeouts: dict[Literal["gpu", "xid", "fabric_manager", "infiniband", "host"], float] = Field(
        default_factory=dict
    )

    def expectations(self) -> dict[str, Any]:
        """What the host-side checks are handed (``--expect-b64``): the rules, unset ones left out."""
        d = self.model_dump(mode="json", exclude_none=True, exclude={"name", "description", "sources"})
        d["profile"] = self.name
        return d


Severity = Literal["fail", "warn", "off"]
# How much a difference from the fleet's majority (or from a pin) weighs, per fact (sb_bench.health facts).
DEFAULT_DRIFT: dict[str, Severity] = {
    "driver": "fail",
    "cuda": "fail",
    "gpu_model": "fail",
    "gpu_count": "fail",
    "hca_fw": "fail",
    "ecc_mode": "fail",
    "mig": "fail",
    "ib_rate_gbps": "fail",
    "vbios": "warn",
    "inforom": "warn",
    "kernel": "warn",
    "os": "warn",
    "cpu_model": "warn",
    "persistence": "warn",
    "power_limit_w": "warn",
    "governor": "warn",
    "memlock": "warn",
    "numa_nodes": "warn",
    "ib_ports": "warn",
}


class HealthSettings(_Strict):
    """The ``health:`` section of the config."""

    enabled: bool = True  # validate runs the checks first
    profile: str | None = None  # the fleet's profile (built in or from ``profiles``); none: drift and
    # the rules that need no expectation only
    profiles: list[str] = Field(default_factory=list)  # user profile files (YAML), relative to the config
    pin: dict[str, str] = Field(default_factory=dict)  # fact -> the value every host must have
    drift: dict[str, Severity] = Field(default_factory=dict)  # fact -> fail/warn/off (over DEFAULT_DRIFT)
    warn_is_unhealthy: bool = False
    run_unhealthy: bool = False  # validate benchmarks the unhealthy hosts too (as --run-unhealthy)
    timeout: float = Field(10.0, gt=0, le=600)  # seconds per probe on the host
    exec_timeout: int = Field(120, ge=1)  # the whole SSH exec

    @model_validator(mode="after")
    def _keys(self) -> HealthSettings:
        for k in [*self.pin, *self.drift]:
            if k not in DEFAULT_DRIFT:
                raise ValueError(f"unknown fact {k!r} (known: {', '.join(sorted(DEFAULT_DRIFT))})")
        return self

    def drift_weights(self) -> dict[str, str]:
        return {**DEFAULT_DRIFT, **self.drift}


_H100 = {"model": "H100", "memory_gib_min": 79, "pcie_gen": 5, "nvlinks": 18}
_A100 = {"model": "A100", "pcie_gen": 4, "nvlinks": 12}
_HGX = {"count": 8, "ecc": True, "persistence": True, "mig": False, "pcie_width": 16, "fabric_manager": True}
_BUILTIN_DATA: tuple[dict[str, Any], ...] = (
    {
        "name": "h100-sxm-8x-ib400",
        "description": "8x H100 SXM5 80GB (HGX, NVSwitch) with 8x 400 Gb/s NDR InfiniBand (e.g. Azure ND H100 v5)",
        "sources": [
            "https://github.com/Azure/azurehpc-health-checks (conf/nd96isr_h100_v5.conf: 8 GPUs, IB rate 400)",
            "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM: 80 GB, PCIe Gen5 x16, 18 NVLinks)",
        ],
        "gpu": {**_HGX, **_H100},
        "ib": {"ports": 8, "rate_gbps": 400},
        "host": {"memlock_unlimited": True},
    },
    {
        "name": "h200-sxm-8x-ib400",
        "description": "8x H200 SXM 141GB with 8x 400 Gb/s NDR InfiniBand (e.g. Azure ND H200 v5)",
        "sources": [
            "https://github.com/Azure/azurehpc-health-checks (conf/nd96isr_h200_v5.conf)",
            "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: 141 GB, PCIe Gen5 x16, 18 NVLinks)",
        ],
        "gpu": {**_HGX, **_H100, "model": "H200", "memory_gib_min": 130},
        "ib": {"ports": 8, "rate_gbps": 400},
        "host": {"memlock_unlimited": True},
    },
    {
        "name": "a100-sxm-8x-ib200",
        "description": "8x A100 SXM4 80GB (HGX, NVSwitch) with 8x 200 Gb/s HDR InfiniBand (e.g. Azure ND A100 v4 80GB)",
        "sources": [
            "https://github.com/Azure/azurehpc-health-checks (conf/nd96amsr_a100_v4.conf: 8 GPUs, IB rate 200)",
            "https://www.nvidia.com/en-us/data-center/a100/ (A100 SXM4: 80 GB, PCIe Gen4 x16, 12 NVLinks)",
        ],
        "gpu": {**_HGX, **_A100, "memory_gib_min": 79},
        "ib": {"ports": 8, "rate_gbps": 200},
        "host": {"memlock_unlimited": True},
    },
    {
        "name": "a100-sxm-40g-8x-ib200",
        "description": "8x A100 SXM4 40GB with 8x 200 Gb/s HDR InfiniBand (e.g. Azure ND A100 v4 40GB)",
        "sources": ["https://github.com/Azure/azurehpc-health-checks (conf/nd96asr_v4.conf)"],
        "gpu": {**_HGX, **_A100, "memory_gib_min": 39},
        "ib": {"ports": 8, "rate_gbps": 200},
        "host": {"memlock_unlimited": True},
    },
    {
        "name": "cpu-only",
        "description": "a host without GPUs or InfiniBand (CPU benchmarks, the loopback test fleet)",
        "gpu": {"count": 0},
        "ib": {"ports": 0},
    },
)
BUILTIN: tuple[HealthProfile, ...] = tuple(HealthProfile.model_validate(d) for d in _BUILTIN_DATA)


def load_profile_file(path: Path) -> HealthProfile:
    """A user profile (YAML mapping); a bad file is a ConfigError naming the file, line and field."""
    data, lines = load_yaml(Path(path), "health profile")
    if not isinstance(data, dict):
        raise ConfigError(path, None, "a health profile must be a YAML mapping", "see docs/health-checks.md")
    try:
        return HealthProfile.model_validate(data)
    except ValidationError as exc:
        raise pydantic_error(Path(path), lines, exc, ConfigError) from None


def resolve_profiles(settings: HealthSettings, base: Path) -> dict[str, HealthProfile]:
    """The built-in profiles and the user's (a user profile of a built-in name replaces it); the fleet's
    profile must be one of them."""
    out = {p.name: p for p in BUILTIN}
    for f in settings.profiles:
        path = Path(f) if Path(f).is_absolute() else base / f
        if not path.is_file():
            raise ConfigError(base, None, f"health.profiles: {path}: no such file", "give the profile's path")
        p = load_profile_file(path)
        out[p.name] = p
    if settings.profile is not None and settings.profile not in out:
        raise ConfigError(
            base,
            None,
            f"health.profile {settings.profile!r} is not a known profile",
            f"use one of {', '.join(sorted(out))} or add the file to health.profiles",
        )
    return out
