"""Issue 35 on real runs: the corpus (tests/corpus/, bench/record_corpus.py) re-judged with this code.

Each recorded run is a real ``sb-fleet validate`` on a loopback fleet of 3-8 hosts on this machine
kind (2 shared cores), quiet or loaded, with or without a planted fault (a busy process beside one
host's benchmarks, a slowed interpreter, a link shaped with tc). The verdict is the one ``validate``
gave, re-derived offline with this code: the first pass, then the confirmation runs recorded with it
(the re-run of a host failed on fleet statistics alone, and of a population split's benchmarks).

* no fault, hosts in parallel: never a gate failure (what cannot be judged is said too noisy or
  inconsistent instead);
* a planted fault: never a silent pass (the host fails, or the report names it too noisy or
  inconsistent), and on a quiet machine where the fault made the host measurably slow, it fails in at
  least 19 of 20 runs.
"""

from __future__ import annotations

import pytest

from tests.synth.corpus import CORPUS, judge_run, runs

RUNS = list(runs())


def test_the_corpus_is_there() -> None:
    assert CORPUS.is_dir(), f"{CORPUS} is missing: record it with bench/record_corpus.py --final"
    assert len(RUNS) >= 20, f"only {len(RUNS)} recorded runs in {CORPUS}"
    cases = {r.case.split("-", 1)[0] for r in RUNS}
    assert {"nofault", "slowhost"} <= cases, cases


@pytest.mark.parametrize(
    "case",
    [f"nofault-{n}h-parallel-quiet" for n in (3, 4, 6, 8)] + ["slowhost-6h-parallel-quiet"],
)
def test_issue_35s_counts_are_recorded(case: str) -> None:
    # Issue 35's done-when: 20 real runs with no fault at each of 3, 4, 6 and 8 hosts in parallel, and
    # 20 of a 2x slow host among 6 on a quiet machine.
    have = sum(r.case == case for r in RUNS)
    assert have >= 20, f"{case}: {have} runs recorded, 20 wanted (bench/record_corpus.py --case {case})"


@pytest.mark.parametrize(
    "run",
    [r for r in RUNS if r.fault_host is None and "-parallel-" in r.case],
    ids=lambda r: f"{r.case}/{r.path.name}",
)
def test_no_false_alarm_on_a_healthy_fleet_of_hosts_in_parallel(run) -> None:  # noqa: ANN001
    # Hosts one at a time (--forks 1) are reported by bench/verdict_quality.py, not held to this: the
    # last host runs while the control node handles the others' results, which it measures (tests/corpus).
    j = judge_run(run)
    assert j.outcome != "false_alarm", f"gate failed on a healthy fleet: {j.why}; failed hosts {j.failed}"


@pytest.mark.parametrize(
    "run", [r for r in RUNS if r.fault_host is not None], ids=lambda r: f"{r.case}/{r.path.name}"
)
def test_a_planted_fault_is_never_passed_over(run) -> None:  # noqa: ANN001
    j = judge_run(run)
    assert j.outcome != "silent", f"{run.fault_host} passed silently: {j.why}"


def test_a_slow_host_on_a_quiet_machine_fails_in_19_of_20() -> None:
    quiet = [
        r for r in RUNS if r.case.startswith("slowhost-") and not r.loaded and (r.slowdown() or 0) >= 1.5
    ]
    if not quiet:
        pytest.fail(
            "no quiet slow-host run in the corpus where the busy process made the host 1.5x slow or more"
        )
    caught = sum(judge_run(r).outcome == "caught" for r in quiet)
    assert caught >= 0.95 * len(quiet), f"caught {caught} of {len(quiet)}"


def test_small_fleets_with_the_corpuss_noise_shapes(tmp_path) -> None:  # noqa: ANN001
    # Synthetic fleets whose hosts deviate as the corpus's healthy hosts did (heavy tails, contended hosts
    # far off, each with the own noise it measured): still recall >= 0.95 and <= 1% false positives.
    import json

    from sb_fleet.report.analyse import report
    from tests.synth.corpus import noise_shapes
    from tests.synth.small import SEEN, UNSEEN, generate_small

    shapes = noise_shapes()
    assert shapes is not None, "no corpus to take the noise shapes from"
    found = tried = fp = healthy = 0
    seed = 6_600_000
    for n in (4, 6, 8, 12, 16):
        for kind in (*SEEN, *UNSEEN, None):
            seed += 1
            fleet, _ = generate_small(n, seed, kind, shapes=shapes)
            run = tmp_path / f"r{seed}"
            run.mkdir()
            (run / "manifest.json").write_text('{"schema_version": 1}')
            (run / "results-summary.jsonl").write_text("\n".join(fleet.lines) + "\n")
            (run / "noise-summary.jsonl").write_text("\n".join(fleet.noise_lines or []) + "\n")
            (run / "hosts.json").write_text(
                json.dumps(
                    {"schema_version": 1, "hosts": [{"name": h, "groups": ["gpu"]} for h in fleet.hosts]}
                )
            )
            verdict = {h.name: h.verdict for h in report(run).hosts}
            for h in fleet.hosts:
                if h in fleet.faults:
                    tried += 1
                    found += verdict[h] == "fail"
                else:
                    healthy += 1
                    fp += verdict[h] != "pass"
    assert found >= 0.95 * tried, (found, tried)
    assert fp <= 0.01 * healthy, (fp, healthy)
