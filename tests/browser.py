"""Open a local, self-contained HTML file in headless Chromium and report what a person would see.

``check_page`` starts Chromium (Debian's ``chromium`` package; ``.ci/run`` installs it), loads the
file, waits for it and its images, and returns the images' decoded sizes, the console errors, every
request the page made and a full-page PNG screenshot. It talks the Chrome DevTools Protocol over a
websocket (``websockets``, in the ``test`` extra). Importable as ``browser`` (tests/ is on
``sys.path`` through tests/conftest.py).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from websockets.sync.client import connect

_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
          "--no-default-browser-check", "--remote-debugging-port=0", "--window-size=1280,800", "--hide-scrollbars")
_IMAGES_JS = """(() => ({
  ready: document.readyState === "complete" && [...document.images].every(i => i.complete),
  title: document.title,
  images: [...document.images].map(i => [i.alt || i.id, i.naturalWidth, i.naturalHeight]),
}))()"""


def find_chromium() -> str | None:
    """The Chromium executable: ``$ARENA_CHROMIUM``, else chromium / chromium-browser / google-chrome on PATH."""
    if os.environ.get("ARENA_CHROMIUM"):
        return os.environ["ARENA_CHROMIUM"]
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


@dataclass(frozen=True)
class PageCheck:
    """What the page showed: images as (alt or id, naturalWidth, naturalHeight) in document order;
    console errors, uncaught exceptions and failed requests; every URL requested other than the page
    itself and data: URLs; the document's title; the screenshot's path."""

    images: list[tuple[str, int, int]]
    console_errors: list[str]
    requests: list[str]
    title: str
    screenshot: Path


def check_page(html: Path, screenshot: Path, timeout_s: float = 60) -> PageCheck:
    """Load ``html`` in headless Chromium, write a full-page PNG to ``screenshot`` and report the page.

    Raises RuntimeError when Chromium is missing, exits early, or a step outlasts ``timeout_s`` in all.
    """
    exe = find_chromium()
    if exe is None:
        raise RuntimeError("Chromium not found: install Debian's chromium or set ARENA_CHROMIUM")
    url = Path(html).resolve().as_uri()
    deadline = time.monotonic() + timeout_s
    profile = Path(tempfile.mkdtemp(prefix="arena-chromium-"))
    errors: list[str] = []
    requests: list[str] = []
    urls: dict[str, str] = {}  # requestId -> URL, to name failed requests
    loaded: list[bool] = []
    try:
        with open(profile / "stderr.log", "wb") as log:
            proc = subprocess.Popen([exe, *_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                    env={**os.environ, "TMPDIR": str(profile)},  # its sockets go with the profile
                                    start_new_session=True)
    except OSError as e:
        shutil.rmtree(profile, ignore_errors=True)
        raise RuntimeError(f"Chromium could not start: {exe}: {e}") from e

    def timed_out(what: str) -> RuntimeError:
        return RuntimeError(f"Chromium: timed out after {timeout_s:g}s waiting for {what} of {html}")

    def left(what: str) -> float:
        if (remaining := deadline - time.monotonic()) <= 0:
            raise timed_out(what)
        return remaining

    def on_event(method: str, p: dict) -> None:
        if method == "Runtime.consoleAPICalled" and p["type"] == "error":
            errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            errors.append(d.get("exception", {}).get("description") or d["text"])
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            errors.append(p["entry"]["text"])
        elif method == "Network.loadingFailed":
            errors.append(f"request failed: {urls.get(p['requestId'], p['requestId'])}: {p['errorText']}")
        elif method == "Network.requestWillBeSent":
            urls[p["requestId"]] = p["request"]["url"]
            if p["request"]["url"] != url and not p["request"]["url"].startswith("data:"):
                requests.append(p["request"]["url"])
        elif method == "Page.loadEventFired":
            loaded.append(True)

    try:
        port_file = profile / "DevToolsActivePort"
        while not (port_file.exists() and len(lines := port_file.read_text().split()) == 2):
            if proc.poll() is not None:
                tail = (profile / "stderr.log").read_text(errors="replace").strip().splitlines()[-1:]
                raise RuntimeError(f"Chromium exited with {proc.returncode} at start: {' '.join(tail)}")
            left("DevTools to listen")
            time.sleep(0.05)
        try:
            ws = connect(f"ws://127.0.0.1:{lines[0]}{lines[1]}", max_size=None, proxy=None,
                         open_timeout=left("the DevTools websocket"))
        except TimeoutError:
            raise timed_out("the DevTools websocket") from None
        with ws:
            ids = itertools.count(1)
            session: str | None = None

            def recv(what: str) -> dict:
                try:
                    return json.loads(ws.recv(timeout=left(what)))
                except TimeoutError:
                    raise timed_out(what) from None

            def send(method: str, **params) -> dict:
                msg_id = next(ids)
                ws.send(json.dumps({"id": msg_id, "method": method, "params": params,
                                    **({"sessionId": session} if session else {})}))
                while (msg := recv(method)).get("id") != msg_id:
                    if "method" in msg:
                        on_event(msg["method"], msg.get("params", {}))
                if "error" in msg:
                    raise RuntimeError(f"Chromium: {method} failed: {msg['error'].get('message')}")
                return msg["result"]

            target = send("Target.createTarget", url="about:blank")["targetId"]
            session = send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Runtime", "Log", "Network", "Page"):
                send(f"{domain}.enable")
            send("Page.navigate", url=url)
            while not loaded:
                msg = recv("the load event")
                if "method" in msg:
                    on_event(msg["method"], msg.get("params", {}))

            def images() -> dict:
                return send("Runtime.evaluate", expression=_IMAGES_JS, returnByValue=True)["result"]["value"]

            while not (page := images())["ready"]:
                left("the images")
                time.sleep(0.05)
            size = send("Page.getLayoutMetrics")["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            png = send("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
        Path(screenshot).write_bytes(base64.b64decode(png))
        return PageCheck(images=[tuple(i) for i in page["images"]], console_errors=errors, requests=requests,
                         title=page["title"], screenshot=Path(screenshot))
    finally:  # Chromium and its helpers share one process group (start_new_session)
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
