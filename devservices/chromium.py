"""Debian's headless Chromium (``chromium-headless-shell``), driven over the DevTools protocol.

The report test opens the HTML page in a real browser, waits for its charts, takes a screenshot
and collects every console message and uncaught exception. The browser is unpacked into the
repo, not installed system-wide (``make chromium`` runs ``install``)::

    python -m devservices.chromium install     # -> var/chromium/usr/lib/chromium/...

Chromium needs about twenty shared libraries that a server image lacks (audio, codecs). They
are unpacked from their own .debs into the same folder and found through LD_LIBRARY_PATH
(``devservices._debian.missing_dependencies``); nothing is installed system-wide.

    page = render_page("file:///tmp/report.html", tmp_path / "shot.png",
                       ready_js="document.querySelectorAll('svg').length >= 6")
    page.errors        # console.error/assert calls, uncaught exceptions, error log entries
    page.ready_value   # what ready_js returned last

Chromium runs as root here, so ``--no-sandbox`` is set; pages are local files only.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.paths import VAR_DIR
from core.processes import terminate
from devservices._debian import (
    DebPackageError,
    install_tree_from_debs,
    library_path,
    missing_dependencies,
)

log = logging.getLogger("uatu.chromium")

PACKAGE = "chromium-headless-shell"
DEFAULT_ROOT = VAR_DIR / "chromium"
BINARY_MEMBER = "usr/lib/chromium/chromium-headless-shell"
START_TIMEOUT_S = 30.0


class ChromiumError(RuntimeError):
    """Chromium could not be installed or started, or the page never became ready."""


def install(root: Path = DEFAULT_ROOT) -> Path:
    """Unpack chromium-headless-shell and the libraries it lacks here into `root`; return the
    browser binary."""
    try:
        packages = missing_dependencies(PACKAGE) if not (root / BINARY_MEMBER).exists() else []
        install_tree_from_debs(packages or [PACKAGE], root, BINARY_MEMBER)
    except DebPackageError as e:
        raise ChromiumError(str(e)) from e
    return root / BINARY_MEMBER


@dataclass
class PageResult:
    """What a page did in the browser until it was ready (or the deadline passed)."""

    url: str
    screenshot: Path
    ready_value: Any
    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    exceptions: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions: a page that drew cleanly has none."""
        bad = [f"console.{lvl}: {text}" for lvl, text in self.console if lvl in ("error", "assert")]
        return bad + [f"exception: {e}" for e in self.exceptions]


def render_page(
    url: str,
    screenshot: Path,
    *,
    ready_js: str = "document.readyState === 'complete'",
    width: int = 1400,
    height: int = 1000,
    timeout: float = 60.0,
    root: Path = DEFAULT_ROOT,
) -> PageResult:
    """Open `url`, poll `ready_js` until it is truthy, then take a full-page screenshot.

    Raises ChromiumError if the page is not ready within `timeout` (with what the console said).
    """
    import websocket  # websocket-client: a dev dependency, needed only here

    binary = root / BINARY_MEMBER
    if not binary.exists():
        raise ChromiumError(f"no chromium at {binary}; run `make chromium`")
    with tempfile.TemporaryDirectory(prefix="uatu-chromium-") as profile:
        proc = subprocess.Popen(
            [
                str(binary),
                "--no-sandbox",  # root here; the page is a local file the test wrote
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            env={"LD_LIBRARY_PATH": library_path(root), "HOME": profile},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            ws_url = _page_websocket(Path(profile), proc)
            conn = websocket.create_connection(ws_url, timeout=10, suppress_origin=True)
            try:
                return _drive(conn, url, screenshot, ready_js, width, height, timeout)
            finally:
                conn.close()
        finally:
            terminate(proc, timeout=10)


def _page_websocket(profile: Path, proc: subprocess.Popen[bytes]) -> str:
    """The DevTools websocket of the browser's first page (its port is in DevToolsActivePort)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    port_file = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ChromiumError(f"chromium exited with {proc.returncode} while starting")
        if port_file.exists() and port_file.read_text().strip():
            port = port_file.read_text().split()[0]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
        time.sleep(0.1)
    raise ChromiumError(f"chromium did not open its DevTools port within {START_TIMEOUT_S} s")


class _Session:
    """Request/response over one DevTools websocket, collecting events on the way."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.conn.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.conn.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise ChromiumError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            if "method" in message:
                self.events.append(message)


def _drive(
    conn: Any, url: str, screenshot: Path, ready_js: str, width: int, height: int, timeout: float
) -> PageResult:
    session = _Session(conn)
    for domain in ("Runtime", "Log", "Page"):
        session.call(f"{domain}.enable")
    session.call(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=height,
        deviceScaleFactor=1,
        mobile=False,
    )
    session.call("Page.navigate", url=url)
    deadline = time.monotonic() + timeout
    value: Any = None
    while time.monotonic() < deadline:
        result = session.call("Runtime.evaluate", expression=ready_js, returnByValue=True)
        value = result.get("result", {}).get("value")
        if value:
            break
        time.sleep(0.25)
    page = PageResult(url, screenshot, value)
    for event in session.events:
        params = event.get("params", {})
        if event["method"] == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            page.console.append((params.get("type", "log"), text))
        elif event["method"] == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            page.exceptions.append(
                details.get("exception", {}).get("description") or details.get("text", "")
            )
        elif event["method"] == "Log.entryAdded":
            entry = params.get("entry", {})
            page.console.append((entry.get("level", "info"), entry.get("text", "")))
    if not value:
        raise ChromiumError(f"{url}: {ready_js!r} still false after {timeout} s; {page.errors}")
    shot = session.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    return page


def main(argv: Sequence[str] | None = None) -> int:
    """``install``: unpack the browser and its libraries into var/chromium (``make chromium``).

    Chromium is not a server: tests start one per page (:func:`render_page`).
    """
    parser = argparse.ArgumentParser(prog="python -m devservices.chromium", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("install", help="unpack chromium-headless-shell into var/chromium")
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        log.info("installed: %s", install())
    except ChromiumError as e:
        log.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
