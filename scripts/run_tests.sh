#!/usr/bin/env bash
# Every test (the README's `make test`, after setup), in two lanes on a 2-core machine:
#
#   lane 1 (background): the on-host suite (tests/suite, its own pytest process: Ansible, imported by the
#                        control-node tests, patches sys.intern in a way torch's compiler rejects), then the
#                        container tests (podman and docker on their own loopback fleets);
#   lane 2:              the unit and fuzz tests, then the integration tests that judge no measured
#                        performance (SHARED below: noop benchmarks, outcomes, deadlines with margins);
#   then, alone:         every other integration test (QUIET: those that judge measured figures, planted
#                        slowdowns, link shaping and the fleet statistics get the machine to themselves).
#
# An integration file not named in SHARED or CONTAINERS runs in the quiet part: a new test gets a quiet
# machine unless it is added to SHARED on purpose. Each lane's output is kept in test-artifacts/ and
# printed when the lane ends; the exit status is non-zero if any part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
ART=test-artifacts
I=tests/integration
SHARED=(collect_master data_not_code deadlines direct_exec faults health hostile_hosts interpreter_hang prometheus
  report_html report_inventory run_honesty security slurm validate_rules)
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
rm -f "$ART"/lane1.log "$ART"/lane1.rc
echo "tests: lane 1 (suite, then containers) beside lane 2 (unit and fuzz, then ${#shared[@]} integration files);" \
  "then ${#quiet[@]} integration files alone"
(
  "$PY" -m pytest -q --durations=10 tests/suite; a=$?
  "$PY" -m pytest -q --durations=10 "${containers[@]}"; b=$?
  echo $((a || b)) > "$ART"/lane1.rc
) > "$ART"/lane1.log 2>&1 &
lane1=$!
"$PY" -m pytest -q --durations=20 tests/unit tests/fuzz; u=$?
"$PY" -m pytest -q --durations=20 "${shared[@]}"; s=$?
wait "$lane1"
echo "== lane 1 (tests/suite, then ${CONTAINERS[*]}; ran beside the above):"
cat "$ART"/lane1.log
l1=$(cat "$ART"/lane1.rc 2>/dev/null || echo 1)
"$PY" -m pytest -q --durations=30 "${quiet[@]}"; q=$?
echo "tests: lane 1 exit $l1, unit+fuzz exit $u, shared integration exit $s, quiet integration exit $q"
[ "$l1" -eq 0 ] && [ "$u" -eq 0 ] && [ "$s" -eq 0 ] && [ "$q" -eq 0 ]
