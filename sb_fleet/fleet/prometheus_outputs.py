"""Where a run's Prometheus series go besides its metrics.prom: a node_exporter textfile directory and a
Pushgateway (docs/prometheus.md). The I/O edge; the series themselves are made in
:mod:`sb_fleet.report.writers.report_prometheus`.

- **Textfile collector**: ``--textfile-dir DIR`` writes ``DIR/sb_fleet_<fleet>.prom`` (the whole fleet),
  atomically (a temp file beside it, renamed: node_exporter never reads half a file, and ignores the
  temp name, which does not end in ``.prom``). A ``DIR`` with ``{host}`` in it is per host: each host's
  series go to its own directory (``/nfs/textfile/{host}``: the one each host's node_exporter reads),
  created when missing (mode 0755).
- **Pushgateway**: ``--pushgateway URL`` PUTs the series to the group ``job="sb-fleet", fleet=<fleet>``,
  which replaces the whole group (last night's series of a host that left the fleet go with it).

Both get the text metrics.prom has (:meth:`sb_fleet.exposition.Series.render`, made once), not text made
again by ``prometheus_client``; a per-host textfile's series are split from the run's in one pass.

Neither changes the verdict: a gateway that cannot be reached, refuses the push or times out, or a
textfile that cannot be written, is a warning line with the reason, and the run's exit code stands. A
textfile directory that does not exist is a usage error before anything runs (:func:`check_textfile_dir`).
"""

from __future__ import annotations

import base64
import functools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sb_fleet.errors import InfraError, UsageError
from sb_fleet.exposition import Series, label_value
from sb_fleet.report.writers.report_prometheus import PromSettings, every_host_series, host_series
from sb_fleet.safe_files import atomic_write_bytes, safe_name

if TYPE_CHECKING:
    from sb_fleet.report.report_result import ReportResult
    from sb_fleet.report.writers.prom_early import BenchmarkPart

JOB = "sb-fleet"
PUSH_TIMEOUT_S = 30.0
HOST_FIELD = "{host}"


@dataclass(frozen=True)
class PromOutputs:
    """What a command was asked to expose its run to, beyond metrics.prom."""

    settings: PromSettings = field(default_factory=PromSettings)
    textfile_dir: str | None = None  # a directory, or a template with {host}
    pushgateway: str | None = None
    push_timeout: float = PUSH_TIMEOUT_S


def check_textfile_dir(template: str) -> None:
    """The textfile directory must exist (for a per-host template: the directory above the first
    ``{host}``), be a directory, and be writable; else a usage error naming it."""
    stripped = template.replace(HOST_FIELD, "")
    if "{" in stripped or "}" in stripped:
        raise UsageError(f"--textfile-dir {template!r}: the only field it may hold is {HOST_FIELD}")
    root = Path(template)
    if HOST_FIELD in template:
        head = template.split(HOST_FIELD, 1)[0]
        root = Path(head) if head.endswith("/") else Path(head).parent
    if not root.is_dir():
        raise UsageError(
            f"--textfile-dir {template}: {root} is not a directory (create it, or name the directory "
            f"node_exporter's --collector.textfile.directory reads)"
        )
    if not os.access(root, os.W_OK | os.X_OK):
        raise UsageError(f"--textfile-dir {template}: {root} is not writable by this user")


def textfile_targets(template: str, fleet: str, hosts: Sequence[str]) -> dict[Path, str | None]:
    """Each file to write -> the host whose series it holds (None: the whole fleet)."""
    name = f"sb_fleet_{fleet}.prom"
    if HOST_FIELD not in template:
        return {Path(template) / name: None}
    return {Path(template.replace(HOST_FIELD, safe_name(h))) / name: h for h in hosts}


def _mkdirs(d: Path) -> None:
    """``d`` and its missing parents, readable by node_exporter's user whatever the umask."""
    missing = []
    p = d
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for m in reversed(missing):
        m.mkdir(exist_ok=True)
        os.chmod(m, 0o755)


def write_textfiles(series: Series, template: str, fleet: str, hosts: Sequence[str]) -> list[str]:
    """Write the fleet's file (or each host's); a warning per file that could not be written."""
    warnings = []
    targets = textfile_targets(template, fleet, hosts)
    per_host = every_host_series(series) if HOST_FIELD in template else {}
    for path, host in targets.items():
        if host is None:
            data = series.render()
        else:
            mine = per_host.get(label_value(host))
            data = (mine if mine is not None else host_series(series, host)).render()
        try:
            _mkdirs(path.parent)
            atomic_write_bytes(path, data, mode=0o644)
        except (OSError, InfraError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            warnings.append(f"textfile {path}: not written ({why}); the verdict and exit code stand")
    return warnings


def _credentials(url: str) -> tuple[str, str, str] | None:
    """``http://user:pw@host:9091`` -> (``http://host:9091``, user, pw); None without a user."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if not parts.username:
        return None
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return bare, urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")


def _reason(exc: Exception) -> str:
    """Why a push failed, in a few words: the HTTP status and the gateway's own message, or the socket's."""
    import http.client
    import urllib.error

    if isinstance(exc, urllib.error.HTTPError):
        try:
            body = exc.read(300).decode("utf-8", "replace").strip()
        except (OSError, http.client.HTTPException):
            body = ""
        return f"HTTP {exc.code} {exc.reason}" + (f": {body}" if body else "")
    return str(getattr(exc, "reason", None) or exc)


def _group_path(key: str, value: str) -> str:
    """One part of a Pushgateway group's URL path, as ``prometheus_client`` writes it (base64 for a value
    that is empty or has a slash or a space)."""
    import urllib.parse

    if value == "":
        return f"/{key}@base64/="
    if "/" in value or " " in value:
        return f"/{key}@base64/{base64.urlsafe_b64encode(value.encode()).decode()}"
    return f"/{key}/{urllib.parse.quote_plus(value)}"


def _put(
    url: str,
    grouping: dict[str, str],
    body: bytes,
    timeout: float,
    handler: Callable[..., Callable[[], None]],
) -> None:
    """PUT ``body`` (the text format) to the Pushgateway group ``grouping``: what ``prometheus_client``'s
    ``push_to_gateway`` does, with text made once."""
    import urllib.parse

    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

    gateway = url
    if urllib.parse.urlparse(gateway).scheme not in ("http", "https"):
        gateway = f"http://{gateway}"
    target = gateway.rstrip("/") + "/metrics" + "".join(_group_path(k, v) for k, v in grouping.items())
    headers = [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)]
    handler(url=target, method="PUT", timeout=timeout, headers=headers, data=body)()


def push(series: Series, url: str, fleet: str, timeout: float = PUSH_TIMEOUT_S) -> str | None:
    """PUT the series to the Pushgateway group job="sb-fleet", fleet=<fleet> (replacing it); a warning
    with the reason when that fails, else None. A user and password in the URL are sent as HTTP basic
    authentication, and never shown."""
    import http.client

    from prometheus_client.exposition import basic_auth_handler, default_handler

    shown = re.sub(r"//[^/]*@", "//", url)
    try:
        handler: Callable[..., Callable[[], None]] = default_handler
        creds = _credentials(url)
        if creds is not None:
            url, user, password = creds
            handler = functools.partial(basic_auth_handler, username=user, password=password)
        _put(url, {"job": JOB, "fleet": fleet}, series.render(), timeout, handler)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = _reason(exc)
        return (
            f"pushgateway {label_value(shown)}: not pushed ({label_value(reason)}); the verdict and exit "
            f"code stand"
        )
    return None


def publish(series: Series, outputs: PromOutputs, hosts: Sequence[str]) -> list[str]:
    """The series to the textfile directory and the Pushgateway asked for; the warnings."""
    fleet = outputs.settings.fleet
    warnings: list[str] = []
    if outputs.textfile_dir:
        warnings += write_textfiles(series, outputs.textfile_dir, fleet, hosts)
    if outputs.pushgateway:
        w = push(series, outputs.pushgateway, fleet, outputs.push_timeout)
        if w:
            warnings.append(w)
    return warnings


def write_and_expose(
    result: ReportResult, out_dir: Path, outputs: PromOutputs, early: BenchmarkPart | None = None
) -> tuple[list[Path], list[str]]:
    """The report files (metrics.prom among them) written into ``out_dir``, then the same series sent
    where ``outputs`` says; the paths written and the warnings. The run's identity (a digest of a results
    file, ~0.2 s for a 10,000-host one) is worked out in a thread beside the other report files.
    ``early``: metrics.prom's benchmark families being rendered by a child already
    (:mod:`sb_fleet.report.writers.prom_early`), used when the series go nowhere else."""
    import datetime as dt
    from concurrent.futures import ThreadPoolExecutor

    from sb_fleet.report.analyse import write_reports
    from sb_fleet.report.writers.report_prometheus import identity, series

    if outputs.textfile_dir or outputs.pushgateway:
        early = None  # the series published are the whole series
    with ThreadPoolExecutor(1, thread_name_prefix="run-identity") as pool:
        run = pool.submit(identity, result, dt.datetime.now(dt.timezone.utc))
        made = series(result, outputs.settings, run.result, benchmarks=early is None)
        paths = write_reports(result, out_dir, outputs.settings, made, early)
    return paths, publish(made, outputs, [h.name for h in result.hosts])
