"""The benchmark registry: one module per benchmark, registered by name.

Modules are imported lazily by name (``MODULES``), so ``list`` and the
runner do not import torch, and one benchmark whose import fails (a missing
optional library) does not take the others down.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sb_bench.core.benchmark import Benchmark


def _modules() -> dict[str, str]:
    """Benchmark name -> the module that defines and registers it.

    Each family keeps its own table (``sb_bench/micro/__init__.py``,
    ``sb_bench/model/__init__.py``): adding a benchmark is one module plus
    one line in its family's table.
    """
    from sb_bench import micro, model

    return {**micro.MODULES, **model.MODULES}


def _aliases() -> dict[str, str]:
    """Config entry name -> registry name, where SuperBench's result group differs from its entry
    name (``sharding-matmul`` runs ``pytorch-sharding-matmul``). Optional per family."""
    from sb_bench import micro, model

    return {**getattr(micro, "ALIASES", {}), **getattr(model, "ALIASES", {})}


MODULES: dict[str, str] = _modules()
ALIASES: dict[str, str] = _aliases()

_REGISTRY: dict[str, type[Benchmark]] = {}


def register(cls: type[Benchmark]) -> type[Benchmark]:
    """Class decorator: make a benchmark known by its ``name``."""
    if not getattr(cls, "name", None):
        raise TypeError(f"{cls.__name__} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    return sorted(set(MODULES) | set(_REGISTRY))


def get(name: str) -> type[Benchmark]:
    """The benchmark class registered as ``name`` (imports its module on first use)."""
    name = ALIASES.get(name, name)
    if name not in _REGISTRY:
        module = MODULES.get(name)
        if module is None:
            raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(names())}")
        importlib.import_module(module)
        if name not in _REGISTRY:
            raise KeyError(f"module {module} did not register benchmark {name!r}")
    return _REGISTRY[name]


def resolve(entry: str, model: str | None = None) -> str:
    """The registry name for a config entry, as SuperBench resolves it.

    ``gemm-flops`` -> ``gemm-flops``; ``nccl-bw:ib`` -> ``nccl-bw`` (an alias
    after the colon); an entry with ``models`` runs ``pytorch-<model>``.
    """
    if model is not None:
        return model if model.startswith("pytorch-") else f"pytorch-{model}"
    name = entry.split(":", 1)[0]
    return ALIASES.get(name, name)
