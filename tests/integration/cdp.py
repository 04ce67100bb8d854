"""A small Chrome DevTools Protocol client for the browser tests: Debian's chromium, headless, driven
over ``--remote-debugging-pipe`` (JSON messages on file descriptors 3 and 4, NUL-terminated), so no
WebDriver, websocket library or network port is needed.

Only what the report tests use: open a page at a window size, evaluate JavaScript, poll for a
condition (never a fixed sleep), click at a point like a mouse does, take a screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless chromium with one page (a tab), attached in flat-session mode."""

    def __init__(self, width: int = 1400, height: int = 900, timeout: float = 60.0) -> None:
        if CHROMIUM is None:
            raise BrowserError("chromium is not installed")
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="sb-fleet-cdp-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # the child's ends moved out of the way first, so that placing them at 3 and 4 clobbers neither
        hi_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 100)
        hi_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 100)
        os.close(to_child_r)
        os.close(from_child_w)

        def place() -> None:
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        self.log = Path(self._profile.name) / "chromium.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(  # noqa: S603 (a fixed local binary)
                [
                    CHROMIUM,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--hide-scrollbars",
                    "--remote-debugging-pipe",
                    f"--user-data-dir={self._profile.name}",
                    "about:blank",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                # Not pass_fds=(3, 4): that needs 3 and 4 open here, and closes what place() made. The
                # parent's own descriptors are close-on-exec (Python's default), so none leaks.
                close_fds=False,
                preexec_fn=place,  # noqa: PLW1509 (single-threaded test process)
            )
        os.close(hi_r)
        os.close(hi_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.resize(width, height)

    # -- the protocol
    def _write(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self._to_child, data)
            data = data[n:]

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise BrowserError(
                        "chromium closed the pipe: " + self.log.read_text(errors="replace")[-2000:]
                    )
                self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        return json.loads(raw)

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._write(msg)
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A command to the page's session."""
        return self.send(method, params, self.session)

    # -- what the tests use
    def resize(self, width: int, height: int) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def eval(self, expression: str, await_promise: bool = False) -> Any:
        r = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": await_promise},
        )
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression[:80]}: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll ``expression`` until it is truthy (every 20 ms; never a fixed sleep)."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.eval(expression)
            if v:
                return v
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression}")
            time.sleep(0.02)

    def open(self, url: str, timeout: float = 60.0) -> float:
        """Navigate and wait for the page's script to finish (``data-ready``); seconds it took."""
        t0 = time.monotonic()
        self.call("Page.navigate", {"url": url})
        self.wait_for(
            "document.readyState === 'complete' && document.documentElement.getAttribute('data-ready') === '1'",
            timeout,
        )
        return time.monotonic() - t0

    def click_at(self, x: float, y: float) -> None:
        """A real mouse click (press and release) at a point of the viewport."""
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}
            )

    def screenshot(self, path: Path, full_page: bool = False) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            w, h = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": w, "height": min(h, 16000), "scale": 1}
        data = self.call("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def exceptions(self) -> list[str]:
        return [
            json.dumps(e.get("params", {}).get("exceptionDetails", {}))[:500]
            for e in self.events
            if e.get("method") == "Runtime.exceptionThrown"
        ]

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
