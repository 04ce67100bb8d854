#!/usr/bin/env bash
# Every test (the README's `make test`, after setup), on a 2-core machine, in two parts and a filler:
#
#   first, three workers at once, each taking integration files from one queue when it is free:
#     worker 1:    the on-host suite first (tests/suite but the filler's, its own pytest process: Ansible,
#                  imported by the control-node tests, patches sys.intern in a way torch's compiler rejects);
#     worker 2:    the unit tests first (but the filler's);
#     worker 3:    the queue from the start.
#     The queue holds the integration files that judge no measured performance (noop benchmarks,
#     outcomes, deadlines with margins, synthetic nights, the traffic patterns' hangs, cut-off hosts and
#     skips: test_pattern_faults, 2026-11-29, out of the quiet part) and the container files (podman and docker,
#     their own loopback fleets), one pytest process each, an atomic mkdir claiming a file. Its order
#     (ORDER below, measured in CI on 2026-11-29): the long files that mostly wait (Slurm, the faults)
#     first, which worker 3 takes while the suite and the unit tests keep the two cores busy; the
#     container files next, which the first of those two to end takes (never three CPU-heavy parts at
#     once: on 2026-11-29 the suite, the unit tests and the containers side by side took 915, 614 and
#     721 s against 458, 330 and 523 s); the short ones last, so the workers end within about one file of
#     each other.
#   then, alone: every other integration file (QUIET: those that judge measured figures, planted
#                slowdowns, link shaping and the fleet statistics get the machine to themselves; test_accept
#                too since its soak judges a GEMM's drift: beside the suite and the containers in the queue,
#                two fresh-clone CIs of 2026-11-29 saw the drifting node's slope drowned).
#   the filler, from the start to the end, on idle CPU only (SCHED_IDLE, `chrt --idle 0`; nice 19 where
#                that is refused): tests that compute and wait for nothing, with no wall-clock deadline and
#                little memory (FILLER: the fuzz tests with their derandomised examples, the analysis's unit
#                tests, the models at their published sizes but the three largest). A task of any other
#                policy preempts it as soon as it wakes, so the workers and the quiet part run as they did
#                without it; it takes the CPU they leave (the quiet part kept half of the two cores idle,
#                2026-11-29). It runs in the quiet part's time: the test command waits for it at the end.
#
# Each queued file has its own sshd fleet on its own loopback subnet, so two of them can run at once;
# files whose hosts share state are one item, run one after the other (spine+run_honesty: the spine's
# hosts keep their venv in the test user's shared cache, which run_honesty's `cleanup --cache` removes;
# side by side, CI failed on 2026-11-29).
# An integration file not named in the queue runs in the quiet part: a new test gets a quiet machine
# unless it is queued on purpose. Each part's output is kept in test-artifacts/ and printed when the
# workers end; the exit status is non-zero if any part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
ART=test-artifacts
I=tests/integration
# The queue, in the order the workers take it (see above).
# An item a+b is one pytest process running a's file, then b's: files whose hosts share state.
ORDER=(slurm faults pattern_faults docker container spine+run_honesty interpreter_hang data_not_code
  hostile_hosts deadlines history security report_html health prometheus direct_exec collect_master validate_rules
  report_inventory)

# The filler: one pytest process (see above). The suite's lane runs the rest of tests/suite, and the
# three largest models (gpt2-xl, gpt2-large, bert-large: 18, 9 and 4 GB), which need the memory the
# quiet part's fleets would share.
BIG_MODELS="gpt2-xl or gpt2-large or bert-large"
MODELS=tests/suite/model/test_model_every.py
FILLER=(-k "not test_model_trains_and_infers_at_tiny_size or not ($BIG_MODELS)" "$MODELS" tests/fuzz tests/unit/analysis)
SUITE=(-k "not test_model_trains_and_infers_at_tiny_size or $BIG_MODELS" tests/suite)
UNIT=(tests/unit --ignore=tests/unit/analysis)

# item_files ITEM: its files, one per line
item_files() { local n; for n in ${1//+/ }; do echo "$I/test_$n.py"; done; }
queued=()
for item in "${ORDER[@]}"; do
  while read -r f; do
    [ -f "$f" ] || { echo "scripts/run_tests.sh: $f is queued but does not exist" >&2; exit 2; }
    queued+=("$f")
  done < <(item_files "$item")
done
quiet=()
for f in "$I"/test_*.py; do
  case " ${queued[*]} " in *" $f "*) ;; *) quiet+=("$f") ;; esac
done

mkdir -p "$ART"
Q="$ART/queue"
rm -rf "$Q" "$ART"/lane-*.log "$ART"/lane-*.rc "$ART"/lane-*.cpu
mkdir -p "$Q"

# run NAME ARGS...: one pytest process, its output to lane-NAME.log, its exit status to lane-NAME.rc; the
# last line gives its wall time and the CPU time it and the processes it waited for used (bash's `times`
# in the subshell: user and system, children).
run() {
  local name=$1
  shift
  local t0=$SECONDS
  (
    "$PY" -m pytest -q "$@" > "$ART/lane-$name.log" 2>&1
    rc=$?
    times > "$ART/lane-$name.cpu" # builtin: run here, not in a subshell (its own children)
    { read -r _ && read -r cu cs; } < "$ART/lane-$name.cpu"
    echo "$rc" > "$ART/lane-$name.rc"
    echo "== $name: exit $rc, $((SECONDS - t0)) s, CPU $cu user + $cs system" >> "$ART/lane-$name.log"
  )
}

# worker [FIRST_NAME FIRST_ARGS...]: its own part, if any, then queued files until the queue is empty.
worker() {
  if [ $# -gt 0 ]; then
    local name=$1
    shift
    run "$name" "$@"
  fi
  local item
  for item in "${ORDER[@]}"; do
    mkdir "$Q/$item" 2> /dev/null || continue
    mapfile -t item_paths < <(item_files "$item")
    run "$item" --durations=10 "${item_paths[@]}"
  done
}

echo "tests: three workers (the suite, then the queue; the unit tests, then the queue; the queue) over" \
  "${#queued[@]} integration files (${#ORDER[@]} items); then ${#quiet[@]} integration files alone;" \
  "the filler (models, fuzz, analysis) on idle CPU throughout"
t0=$SECONDS
(
  # this subshell, and so the pytest it starts, on idle CPU only (see above)
  chrt --idle -p 0 "$BASHPID" 2> /dev/null || renice -n 19 -p "$BASHPID" > /dev/null
  run filler --durations=20 "${FILLER[@]}"
) &
wf=$!
worker suite --durations=10 "${SUITE[@]}" &
w1=$!
worker unit --durations=20 "${UNIT[@]}" &
w2=$!
worker &
w3=$!
wait "$w1" "$w2" "$w3"
echo "tests: the three workers took $((SECONDS - t0)) s"

fail=0
for name in suite unit "${ORDER[@]}"; do
  echo "== lane-$name.log:"
  cat "$ART/lane-$name.log" 2> /dev/null || echo "(no output: it never ran)"
  rc=$(cat "$ART/lane-$name.rc" 2> /dev/null || echo 1)
  [ "$rc" -eq 0 ] || { fail=1; echo "tests: $name FAILED (exit $rc)"; }
done

t1=$SECONDS
"$PY" -m pytest -q --durations=30 "${quiet[@]}"
q=$?
echo "tests: the quiet part took $((SECONDS - t1)) s, exit $q"
wait "$wf"
echo "tests: the filler ended by $((SECONDS - t0)) s (the quiet part began at $((t1 - t0)) s)"
echo "== lane-filler.log:"
cat "$ART/lane-filler.log" 2> /dev/null || echo "(no output: it never ran)"
for name in suite unit filler "${ORDER[@]}"; do
  rc=$(cat "$ART/lane-$name.rc" 2> /dev/null || echo 1)
  tail -n 1 "$ART/lane-$name.log" 2> /dev/null | sed 's/^== /tests: /'
  [ "$rc" -eq 0 ] || fail=1
done
[ "$fail" -eq 0 ] && [ "$q" -eq 0 ]
