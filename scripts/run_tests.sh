#!/usr/bin/env bash
# Every test (the README's `make test`, after setup), on a 2-core machine, in two parts:
#
#   first, three lanes at once:
#     containers:  the podman and docker tests (their own loopback fleets; mostly waiting on image loads
#                  and on containers, little CPU), one pytest process;
#     worker 1:    the on-host suite (tests/suite, its own pytest process: Ansible, imported by the
#                  control-node tests, patches sys.intern in a way torch's compiler rejects), then
#                  integration files from the SHARED queue;
#     worker 2:    the unit and fuzz tests, then integration files from the same queue.
#     The SHARED queue holds the integration files that judge no measured performance (noop benchmarks,
#     outcomes, deadlines with margins, synthetic nights), longest first; a worker that is free takes the
#     next file (an atomic mkdir claims it), so the two workers end within about one file of each other
#     whichever of the suite or the unit tests runs longer on the machine at hand.
#   then, alone: every other integration file (QUIET: those that judge measured figures, planted
#                slowdowns, link shaping and the fleet statistics get the machine to themselves).
#
# Each SHARED file has its own sshd fleet on its own loopback subnet, so two of them can run at once.
# An integration file not named in SHARED or CONTAINERS runs in the quiet part: a new test gets a quiet
# machine unless it is added to SHARED on purpose. Each lane's output is kept in test-artifacts/ and
# printed when the lanes end; the exit status is non-zero if any part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
ART=test-artifacts
I=tests/integration
# Longest first (docs/speed.md, CI's own time): the last file a worker takes is a short one.
SHARED=(slurm faults hostile_hosts run_honesty interpreter_hang report_html deadlines history health data_not_code
  prometheus security validate_rules collect_master direct_exec report_inventory)
CONTAINERS=(container docker)

files() { for n in "$@"; do echo "$I/test_$n.py"; done; }
mapfile -t shared < <(files "${SHARED[@]}")
mapfile -t containers < <(files "${CONTAINERS[@]}")
quiet=()
for f in "$I"/test_*.py; do
  case " ${shared[*]} ${containers[*]} " in *" $f "*) ;; *) quiet+=("$f") ;; esac
done
for f in "${shared[@]}" "${containers[@]}"; do
  [ -f "$f" ] || { echo "scripts/run_tests.sh: $f is named in a lane but does not exist" >&2; exit 2; }
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

# worker FIRST_NAME FIRST_ARGS...: its own part, then SHARED files until the queue is empty.
worker() {
  local name=$1
  shift
  run "$name" "$@"
  local f
  for f in "${shared[@]}"; do
    mkdir "$Q/$(basename "$f" .py)" 2> /dev/null || continue
    run "$(basename "$f" .py)" --durations=5 "$f"
  done
}

echo "tests: containers (${CONTAINERS[*]}) beside two workers (the suite; unit and fuzz; then" \
  "${#shared[@]} integration files from a queue); then ${#quiet[@]} integration files alone"
t0=$SECONDS
run containers --durations=10 "${containers[@]}" &
c=$!
worker suite --durations=10 tests/suite &
w1=$!
worker unit-fuzz --durations=20 tests/unit tests/fuzz &
w2=$!
wait "$c" "$w1" "$w2"
echo "tests: the three lanes took $((SECONDS - t0)) s"

fail=0
for name in suite unit-fuzz containers $(for f in "${shared[@]}"; do basename "$f" .py; done); do
  echo "== lane-$name.log:"
  cat "$ART/lane-$name.log" 2> /dev/null || echo "(no output: it never ran)"
  rc=$(cat "$ART/lane-$name.rc" 2> /dev/null || echo 1)
  [ "$rc" -eq 0 ] || { fail=1; echo "tests: $name FAILED (exit $rc)"; }
done

t1=$SECONDS
"$PY" -m pytest -q --durations=30 "${quiet[@]}"
q=$?
echo "tests: the quiet part took $((SECONDS - t1)) s, exit $q"
for name in suite unit-fuzz containers $(for f in "${shared[@]}"; do basename "$f" .py; done); do
  rc=$(cat "$ART/lane-$name.rc" 2> /dev/null || echo 1)
  tail -n 1 "$ART/lane-$name.log" 2> /dev/null | sed 's/^== /tests: /'
  [ "$rc" -eq 0 ] || fail=1
done
[ "$fail" -eq 0 ] && [ "$q" -eq 0 ]
