"""Health checks of one host, before any benchmark: GPUs, InfiniBand, the host, versions.

Standard library only (``nvidia-ml-py`` used where it is installed and a driver answers). Every read of
``/sys`` and ``/proc`` goes through a configurable root and every external tool is looked for in a
configurable directory first (:class:`sb_bench.health.record.Env`), so a test gives each host a machine of
its own. ``python -m sb_bench health --json`` prints one JSON document: each check's verdict (pass, warn,
fail), the value read, the rule and the evidence. See docs/health-checks.md.
"""
