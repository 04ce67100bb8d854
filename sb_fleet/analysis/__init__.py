"""The pure judgement of a fleet's results (layer 4; the report in ``sb_fleet.report`` strings it together).

- flat core: ``fleet_results`` (a run directory or a results-summary.jsonl as a host x metric matrix),
  ``detect`` and ``stats`` (fleet-relative detection, no rules needed), ``gates`` (floors, ceilings,
  baseline), ``completeness``, ``software``, ``issues`` and ``verdict`` (one verdict per host);
- ``superbench/``: SuperBench's metric names, rules (criteria parsed safely, never evaluated), baseline,
  diagnosis and summary tables;
- ``figures/``: the measured figures with unit, direction and % of peak;
- ``crossnode/``: pair results of traffic patterns and the localisation of a bad node, NIC, link or path.
"""
