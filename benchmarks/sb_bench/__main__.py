"""Command line of the on-host suite.

python -m sb_bench list [--json]            every benchmark, its parameters and metrics
python -m sb_bench exec NAME --params JSON --out DIR
                                            run one benchmark on this rank (used by the runner)
python -m sb_bench health --json            health checks of this host (sb_bench.health.runner)
python -m sb_bench.micro.gemm_flops --help  any benchmark module standalone
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from sb_bench.core import registry
from sb_bench.core.result import rank_file, write_result

if TYPE_CHECKING:
    import argparse


def describe(name: str) -> dict[str, Any]:
    cls = registry.get(name)
    try:
        metrics = [m.to_json() for m in cls(cls.parse_params({})).metrics()]
    except Exception as exc:  # metrics that depend on the host (e.g. ranks) are listed at run time
        metrics = [{"name": f"(depends on parameters: {exc})"}]
    return {
        "name": name,
        "type": cls.kind,
        "description": cls.description,
        "parameters": {
            k: {
                "type": p.type,
                "default": p.default,
                "help": p.help,
                **({"choices": list(p.choices)} if p.choices else {}),
            }
            for k, p in cls.all_params().items()
        },
        "metrics": metrics,
    }


def cmd_list(args: argparse.Namespace) -> int:
    entries = []
    for name in registry.names():
        try:
            entries.append(describe(name))
        except Exception as exc:
            entries.append({"name": name, "error": f"{type(exc).__name__}: {exc}"})
    if args.json:
        print(json.dumps(entries, indent=1))
        return 0
    for e in entries:
        if "error" in e:
            print(f"{e['name']}: unavailable ({e['error']})")
            continue
        print(f"{e['name']} ({e['type']}): {e['description']}")
        for m in e["metrics"]:
            if "unit" in m:
                better = "higher" if m["higher_is_better"] else "lower"
                print(f"    metric {m['name']} [{m['unit']}, {better} is better, reduce {m['reduce_op']}]")
        for k, p in e["parameters"].items():
            print(f"    param  {k}: {p['type']} = {p['default']!r}  {p['help']}")
    return 0


def _rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("PROC_RANK", "0")) or 0)


def cmd_exec(args: argparse.Namespace) -> int:
    return run_exec(args.name, args.params, args.out)


def plain_exec_args(args: list[str]) -> tuple[str, str | None, str | None] | None:
    """``exec``'s arguments as the runner writes them: NAME, then ``--params V`` and ``--out V``, each at
    most once (``--opt=V`` too), no value starting with ``-``: (name, params, out). None for anything
    else (help, an option before NAME, an unknown, abbreviated or repeated option, a missing value),
    which argparse then parses and answers as it always did. Every rank starts here: argparse with its
    help formatter (gettext, locale, shutil) is ~13 ms of a rank's CPU."""
    if not args or args[0].startswith("-"):
        return None
    got: dict[str, str] = {}
    i = 1
    while i < len(args):
        opt, eq, value = args[i].partition("=")
        if opt not in ("--params", "--out") or opt in got:
            return None
        if not eq:
            if i + 1 >= len(args):
                return None
            i += 1
            value = args[i]
        if value.startswith("-"):
            return None
        got[opt] = value
        i += 1
    return args[0], got.get("--params"), got.get("--out")


def run_exec(name: str, params_json: str | None, out: str | None) -> int:
    from sb_bench.core.harness import run_benchmark

    params = json.loads(params_json) if params_json else {}
    env = run_benchmark(name, params)
    host, run_id = os.environ.get("SB_HOST"), os.environ.get("SB_RUN_ID")
    if host and run_id:  # the runner's names (its stamp then finds them and leaves the file as it is)
        env = {**env, "host": host, "run_id": run_id}
    if out:
        write_result(rank_file(out, int(os.environ.get("SB_RESULT_RANK", _rank()))), env)
    else:
        print(json.dumps(env, indent=1))
    return 0 if env["return_code"] == 0 else 1


def standalone_main(name: str, argv: list[str] | None = None) -> int:
    """``python -m <module>``: parameters as flags, the result envelope printed or written to --out."""
    import argparse

    from sb_bench.core.harness import run_benchmark

    cls = registry.get(name)
    ap = argparse.ArgumentParser(prog=f"python -m {cls.__module__}", description=cls.description)
    for pname, p in cls.all_params().items():
        kw: dict[str, Any] = {"help": f"{p.help} ({p.type}, default {p.default!r})"}
        if p.type.startswith("list"):
            kw["nargs"] = "+"
        ap.add_argument("--" + pname.replace("_", "-"), dest=pname, default=None, **kw)
    ap.add_argument("--out", help="directory for the result file (default: print it)")
    ns = ap.parse_args(argv)
    given = {k: v for k, v in vars(ns).items() if k != "out" and v is not None}
    env = run_benchmark(name, given)
    if ns.out:
        print(write_result(rank_file(ns.out, _rank()), env))
    else:
        print(json.dumps(env, indent=1))
    if env["return_code"] != 0:
        print(f"{name}: {env['status']}: {env['reason']}", file=sys.stderr)
    return 0 if env["return_code"] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["health"]:  # its own parser; imports no benchmark
        from sb_bench.health.runner import main as health_main

        return health_main(args_in[1:])
    if args_in[:1] == ["exec"]:
        plain = plain_exec_args(args_in[1:])
        if plain is not None:  # every rank's start: the runner's own arguments, without argparse
            return run_exec(*plain)
        import argparse  # anything else: exec's parser alone (each parser costs gettext lookups)

        p = argparse.ArgumentParser(prog="python -m sb_bench exec", description=EXEC_HELP)
        _exec_arguments(p)
        return cmd_exec(p.parse_args(args_in[1:]))
    import argparse

    ap = argparse.ArgumentParser(prog="python -m sb_bench", description="sb-fleet's on-host benchmark suite")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="list benchmarks, parameters and metrics")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("exec", help=EXEC_HELP)
    _exec_arguments(p)
    p.set_defaults(func=cmd_exec)
    args = ap.parse_args(argv)
    return args.func(args)


EXEC_HELP = "run one benchmark on this rank"


def _exec_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--params", help="parameters as a JSON object")
    p.add_argument("--out", help="directory for rank<N>.json (default: print)")


if __name__ == "__main__":
    from sb_bench.core.process_end import end_process

    # no finalisation where it would run nobody's code (~15 ms of a rank's CPU); torch's exit handlers
    # (distributed, CUDA) and a benchmark's own run as they always do
    end_process(main())
