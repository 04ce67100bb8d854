#!/usr/bin/env bash
# Set up everything sb-fleet and its tests need on a fresh Debian machine:
# the Debian packages listed in .ci/apt-packages.txt (when run as root) and
# the Python venv .venv with sb-fleet, its test tools and the on-host suite
# (torch, torchvision, transformers). Safe to run again: it skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."

want_apt() { grep -v '^\s*#' .ci/apt-packages.txt | awk 'NF {print $1}'; }

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in $(want_apt); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
else
  echo "setup: not root: skipping Debian packages (${PWD}/.ci/apt-packages.txt); the SSH fleet tests need them"
fi

# A system Python (not a per-user pyenv): the test fleet's unprivileged login user runs the suite with it.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for c in /usr/bin/python3 python3; do command -v "$c" >/dev/null && { PY=$c; break; }; done
fi
stamp=.venv/.sb-fleet-setup
digest=$(cat pyproject.toml benchmarks/pyproject.toml benchmarks/requirements.txt | sha256sum | cut -c1-16)
# compile_own: bytecode for sb-fleet's and the suite's own modules (installed editable, so no installer
# compiles them). Where PYTHONDONTWRITEBYTECODE is set (this machine kind's environment sets it) no import
# writes a cache, and without one every process compiles every module it imports, each time: `import
# torch` took 3.5-3.7 s of CPU against 1.7-1.9 s with its caches (2026-11-29). compileall writes them
# whatever the variable says; a cache older than its source is ignored by the import, so a stale one is
# only a lost saving. Quick when they are current.
compile_own() { .venv/bin/python -m compileall -q -j 0 sb_fleet benchmarks/sb_bench > /dev/null || true; }
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ] && .venv/bin/python -c 'import sb_fleet, sb_bench, torch' 2>/dev/null; then
  compile_own
  echo "setup: .venv is up to date"
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv

# uv_args: uv's options for the package sources pip is configured with (pip.conf and PIP_* variables, as
# `pip config list` shows them: find-links, index-url, extra-index-url, constraint), one a line. uv reads
# no pip configuration of its own, and takes the best version across the indexes as pip does.
uv_args() {
  .venv/bin/python -m pip config list 2> /dev/null | .venv/bin/python -c '
import shlex, sys
flags = {"find-links": "--find-links", "index-url": "--index-url", "extra-index-url": "--extra-index-url",
         "constraint": "--constraint"}
seen = set()
for line in sys.stdin:
    key, _, value = line.strip().partition("=")
    flag = flags.get(key.rsplit(".", 1)[-1])
    for v in shlex.split(value.strip().strip("\x27\x22")) if flag else ():
        if (flag, v) not in seen:
            seen.add((flag, v))
            print(flag)
            print(v)
print("--index-strategy")
print("unsafe-best-match")'
}

echo "setup: installing sb-fleet, test tools and the on-host suite into .venv (torch takes a while)"
# uv installs the same packages from the same sources several times faster than pip (2026-11-29, this
# machine kind: 14 s against 99 s); pip where uv cannot be installed or fails. pip's notes about local
# package mirrors are noise; with pipefail a pip failure still fails the script.
installed=no
if .venv/bin/python -m pip install -q uv > /dev/null 2>&1 && [ -x .venv/bin/uv ]; then
  mapfile -t src < <(uv_args)
  # --compile-bytecode: the packages' bytecode written at install, as pip does by default (see compile_own)
  if .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "${src[@]}" -e ".[test]" -e ./benchmarks; then
    installed=yes
  else
    echo "setup: uv could not install them; pip tries"
  fi
fi
if [ "$installed" = no ]; then
  .venv/bin/python -m pip install -q --upgrade pip > /dev/null 2>&1 || true
  .venv/bin/pip install -q -e ".[test]" -e ./benchmarks 2>&1 | { grep -vE "^WARNING: Location|BuildBackendWarning|^ *!!|^ *\*+$|^ *$" || true; }
fi
compile_own
echo "$digest" > "$stamp"
echo "setup: done"
