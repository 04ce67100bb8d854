"""The history of every run: an embedded store (DuckDB, one file) and regressions against each
component's own past.

- :mod:`.components`: which component (GPU, NIC or the host) a value belongs to, from the facts.
- :mod:`.store`: the store on disk (record a run idempotently, the queries a report needs).
- :mod:`.regress`: pure functions: own-history deviations, fleet-median drift, repeat offenders,
  flapping, back to healthy.
- :mod:`.assess`: the narrow entry point the analysis calls (``--history PATH``).
- :mod:`.confirm`: what ``validate --confirm`` re-runs, and whether a finding reproduced.
"""
