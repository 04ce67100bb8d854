"""The history of every run: an embedded store (DuckDB, one file) and regressions against each
component's own past.

- :mod:`.components`: which component (GPU, NIC or the host) a value belongs to, from the facts.
- :mod:`.record`: what a run adds (identity, config digest, versions, verdicts, issues, facts, values).
- :mod:`.history_store`: the store on disk (record a run idempotently, the queries a report needs).
- :mod:`.regress`: pure functions: own-history deviations, fleet-median drift, repeat offenders,
  flapping, back to healthy.
- :mod:`.assess`: the narrow entry point the analysis calls (``--history PATH``).
- :mod:`.view`, :mod:`.trend_plots`: what the report shows (report.json ``history``, report.md, report.html).
- :mod:`.confirm`: what ``validate --confirm`` re-runs, and whether a finding reproduced.
"""
