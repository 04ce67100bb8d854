"""Fleet analysis: judge every host of a run from its benchmark results.

Data flows one way through small modules:

``results`` (load a run directory or a results-summary.jsonl into a host x
metric matrix) -> ``rules`` (SuperBench rules, with ``criteria`` parsed
safely) and ``detect`` (fleet-relative detection, no rules needed) and
``gates`` (floors, ceilings, baseline) -> ``verdict`` (one verdict per host)
-> ``writers`` (report.json, report.md, report.html, junit.xml,
quarantine.txt). ``api`` strings them together.
"""
