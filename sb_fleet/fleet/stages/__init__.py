"""The stages of a run: deploy, image, run, collect, cleanup. Each is a function handed the run's inputs
(:class:`sb_fleet.rundir.runinputs.RunInputs`), the one :class:`sb_fleet.fleet.executor.Executor` and the hosts to act
on; it records one outcome per host in the run directory and returns them. Stages never import each
other: :mod:`sb_fleet.fleet.workflow` calls them in order.
"""
