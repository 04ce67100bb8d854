#!/usr/bin/env bash
# Every test (the README's `make test`, after setup), on a 2-core machine, in two parts:
#
#   first, three workers at once, each taking integration files from one queue when it is free:
#     worker 1:    the on-host suite first (tests/suite, its own pytest process: Ansible, imported by the
#                  control-node tests, patches sys.intern in a way torch's compiler rejects);
#     worker 2:    the unit and fuzz tests first;
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
rm -rf "$Q" "$ART"/lane-*.log "$ART"/lane-*.rc
mkdir -p "$Q"

# run NAME ARGS...: one pytest process, its output to lane-NAME.log, its exit status to lane-NAME.rc.
run() {
  local name=$1
  shift
  local t0=$SECONDS
  "$PY" -m pytest -q "$@" > "$ART/lane-$name.log" 2>&1
  local rc=$?
  echo "$rc" > "$ART/lane-$name.rc"
  echo "== $name: exit $rc, $((SECONDS - t0)) s" >> "$ART/lane-$name.log"
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

echo "tests: three workers (the suite, then the queue; unit and fuzz, then the queue; the queue) over" \
  "${#queued[@]} integration files (${#ORDER[@]} items); then ${#quiet[@]} integration files alone"
t0=$SECONDS
worker suite --durations=10 tests/suite &
w1=$!
worker unit-fuzz --durations=20 tests/unit tests/fuzz &
w2=$!
worker &
w3=$!
wait "$w1" "$w2" "$w3"
echo "tests: the three workers took $((SECONDS - t0)) s"

fail=0
for name in suite unit-fuzz "${ORDER[@]}"; do
  echo "== lane-$name.log:"
  cat "$ART/lane-$name.log" 2> /dev/null || echo "(no output: it never ran)"
  rc=$(cat "$ART/lane-$name.rc" 2> /dev/null || echo 1)
  [ "$rc" -eq 0 ] || { fail=1; echo "tests: $name FAILED (exit $rc)"; }
done

t1=$SECONDS
"$PY" -m pytest -q --durations=30 "${quiet[@]}"
q=$?
echo "tests: the quiet part took $((SECONDS - t1)) s, exit $q"
for name in suite unit-fuzz "${ORDER[@]}"; do
  rc=$(cat "$ART/lane-$name.rc" 2> /dev/null || echo 1)
  tail -n 1 "$ART/lane-$name.log" 2> /dev/null | sed 's/^== /tests: /'
  [ "$rc" -eq 0 ] || fail=1
done
[ "$fail" -eq 0 ] && [ "$q" -eq 0 ]
