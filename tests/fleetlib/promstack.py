"""Real Prometheus, Pushgateway and node_exporter servers on loopback ports, from Debian's packages
(``prometheus``, ``prometheus-pushgateway``, ``prometheus-node-exporter``), for the tests of sb-fleet's
Prometheus outputs. Each server gets a free port and a directory of its own; readiness is polled (never a
fixed sleep); ``stop`` ends only the processes this object started, by pid."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from . import free_port

BINARIES = {
    "prometheus": "prometheus",
    "pushgateway": "prometheus-pushgateway",
    "node_exporter": "prometheus-node-exporter",
}


def missing() -> list[str]:
    """The servers not on PATH (each binary is named as its Debian package)."""
    return [b for b in BINARIES.values() if not shutil.which(b)]


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback test servers
        return r.read()


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    """Poll ``url`` until it answers 200; fail with the server's log when it exits or never answers."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            http_get(url, timeout=2)
            return
        except OSError as exc:
            last = exc
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout}s ({last}): {log.read_text()[-2000:]}")


def _end(p: subprocess.Popen) -> None:
    """Stop a server of the stack: SIGTERM, then SIGKILL after 20 s."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


class BackfilledPrometheus:
    """A Prometheus on a loopback port that scrapes nothing, serving the TSDB blocks in ``tsdb`` (made by
    ``promtool tsdb create-blocks-from``)."""

    def __init__(self, root: Path, tsdb: Path):
        self.root, self.tsdb = Path(root), Path(tsdb)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> BackfilledPrometheus:
        cfg = self.root / "backfill.yml"
        cfg.write_text("global: {scrape_interval: 1m}\n")
        log = self.root / "backfill-prometheus.log"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    BINARIES["prometheus"],
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={self.tsdb}",
                    "--storage.tsdb.retention.time=3650d",  # the backfilled past stays
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        try:
            wait_http(f"{self.url}/-/ready", self.proc, log)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None:
            _end(self.proc)
        self.proc = None

    def query_at(self, promql: str, t: float) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": promql, "time": f"{t:.3f}"})
        doc = json.loads(http_get(f"{self.url}/api/v1/query?{q}"))
        assert doc.get("status") == "success", doc
        return doc["data"]["result"]


class PromStack:
    """A Pushgateway, a node_exporter reading ``textfile_dir``, and a Prometheus scraping both every
    second and evaluating ``rule_files`` every second."""

    def __init__(self, root: Path, textfile_dir: Path, rule_files: list[Path]):
        self.root = Path(root)
        self.textfile_dir = Path(textfile_dir)
        self.rule_files = rule_files
        self.procs: list[subprocess.Popen] = []
        self.pushgateway_port = free_port()
        self.node_port = free_port()
        self.prometheus_port = free_port()

    @property
    def pushgateway_url(self) -> str:
        return f"http://127.0.0.1:{self.pushgateway_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    def _start(self, name: str, args: list[str], ready: str) -> None:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen([BINARIES[name], *args], stdout=out, stderr=subprocess.STDOUT, cwd=self.root)
        self.procs.append(p)
        wait_http(ready, p, log)

    def start(self) -> PromStack:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._start(
                "pushgateway",
                [
                    f"--web.listen-address=127.0.0.1:{self.pushgateway_port}",
                    # its own state: Debian's default persists every group in /var/lib/prometheus
                    f"--persistence.file={self.root / 'pushgateway.data'}",
                ],
                f"{self.pushgateway_url}/-/ready",
            )
            self._start(
                "node_exporter",
                [
                    f"--web.listen-address=127.0.0.1:{self.node_port}",
                    "--collector.disable-defaults",
                    "--collector.textfile",
                    f"--collector.textfile.directory={self.textfile_dir}",
                ],
                f"http://127.0.0.1:{self.node_port}/metrics",
            )
            cfg = self.root / "prometheus.yml"
            cfg.write_text(
                json.dumps(  # YAML is a superset of JSON
                    {
                        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                        "rule_files": [str(p) for p in self.rule_files],
                        "scrape_configs": [
                            {
                                "job_name": "pushgateway",
                                "honor_labels": True,  # keep the pushed job="sb-fleet" and fleet labels
                                "static_configs": [{"targets": [f"127.0.0.1:{self.pushgateway_port}"]}],
                            },
                            {
                                "job_name": "node",
                                "static_configs": [{"targets": [f"127.0.0.1:{self.node_port}"]}],
                            },
                        ],
                    },
                    indent=1,
                )
            )
            self._start(
                "prometheus",
                [
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={self.root / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
                ],
                f"{self.prometheus_url}/-/ready",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            _end(p)
        self.procs.clear()

    def api(self, path: str, **params: str) -> Any:
        """``/api/v1/<path>``'s data (an error status raises)."""
        q = urllib.parse.urlencode(params)
        doc = json.loads(http_get(f"{self.prometheus_url}/api/v1/{path}" + (f"?{q}" if q else "")))
        if doc.get("status") != "success":
            raise AssertionError(f"{path} {params}: {doc}")
        return doc["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant PromQL query's vector."""
        return self.api("query", query=promql)["result"]

    def wait_query(self, promql: str, want: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll an instant query until it returns at least ``want`` series."""
        deadline = time.monotonic() + timeout
        got: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            got = self.query(promql)
            if len(got) >= want:
                return got
            time.sleep(0.25)
        raise TimeoutError(f"{promql}: {len(got)} series after {timeout}s, wanted {want}: {got}")
