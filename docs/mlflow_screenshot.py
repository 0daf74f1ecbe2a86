"""Photograph the MLflow UI of a grid, as README shows it: starts ``mlflow ui`` on the tracking
store, opens the experiment's chart view in headless Chromium (model-training view, runs
filtered, the grid's parent run expanded so that its children's NDCG curves are drawn), saves
a PNG and stops everything it started.

    python docs/mlflow_screenshot.py [--tracking-uri sqlite:///work/mlflow.db] [--experiment ltr-default]
                                     [--filter "tags.\\`ltr.strategy\\` = 'mse'"] [--out docs/mlflow-ui.png]

Needs Chromium (Debian: ``apt-get install chromium``). Chromium is driven over its DevTools
protocol on a pipe (``--remote-debugging-pipe``: no extra Python package, no open port);
clicks are plain JavaScript on the page. Nothing is downloaded; the UI is served from the
installed MLflow package on loopback.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

EXPAND_PARENTS = """(() => { let n = 0;
  document.querySelectorAll('button[data-component-id*=runnamecellrenderer]').forEach(b => { b.click(); n++; });
  return n; })()"""
CLOSE_ASSISTANT = """(() => { const h = Array.from(document.querySelectorAll('*')).find(e =>
    e.childElementCount === 0 && e.textContent.trim() === 'MLflow Assistant');
  if (!h) return false;
  let p = h; for (let i = 0; i < 6 && p; i++) { const bs = p.querySelectorAll('button');
    if (bs.length) { bs[bs.length - 1].click(); return true; } p = p.parentElement; }
  return false; })()"""
ROWS = "document.querySelectorAll('button[data-component-id*=runnamecellrenderer]').length"
ROW_IDS = "new Set(Array.from(document.querySelectorAll('.ag-row')).map(e => e.getAttribute('row-id'))).size"


class Chromium:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out, NUL-separated JSON)."""

    def __init__(self, binary: str, width: int, height: int) -> None:
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def fds() -> None:
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=fds,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf, self._id = b"", 0
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            self.session,
        )

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self._buf:
                chunk = os.read(self._r, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def js(self, expression: str):
        return (
            self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.session)
            .get("result", {})
            .get("value")
        )

    def wait_js(self, expression: str, seconds: float) -> None:
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.js(expression):
                return
            time.sleep(0.5)
        raise TimeoutError(f"the page did not reach `{expression}` within {seconds:.0f} s")

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {seconds:.0f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tracking-uri", default="sqlite:///work/mlflow.db")
    p.add_argument("--experiment", default="ltr-default")
    p.add_argument(
        "--filter",
        default="tags.`ltr.strategy` = 'mse'",
        help="MLflow search filter of the runs shown (default: the MSE-t children, one per switch point)",
    )
    p.add_argument("--out", default=str(Path(__file__).with_name("mlflow-ui.png")))
    p.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    p.add_argument("--size", default="1600,1000")
    args = p.parse_args()

    from mlflow.tracking import MlflowClient

    exp = MlflowClient(args.tracking_uri).get_experiment_by_name(args.experiment)
    if exp is None:
        print(f"no experiment {args.experiment!r} at {args.tracking_uri}", file=sys.stderr)
        return 2
    port = free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "ui",
            "--backend-store-uri",
            args.tracking_uri,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    browser = None
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/health", 90)
        query = {"workflowType": "machine_learning", "compareRunsMode": "CHART"}
        if args.filter:
            query["searchFilter"] = args.filter
        url = f"{base}/#/experiments/{exp.experiment_id}/runs?{urllib.parse.urlencode(query)}"
        width, height = (int(x) for x in args.size.split(","))
        browser = Chromium(args.chromium, width, height)
        browser.call("Page.navigate", {"url": url}, browser.session)
        browser.wait_js(f"{ROWS} > 0", 60)
        parents = browser.js(ROW_IDS)
        browser.js(EXPAND_PARENTS)
        browser.wait_js(f"{ROW_IDS} > {parents}", 30)
        browser.js(CLOSE_ASSISTANT)
        time.sleep(4)  # the charts draw their curves
        png = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, browser.session)["data"])
        Path(args.out).write_bytes(png)
        print(f"{os.path.abspath(args.out)} ({len(png)} bytes): {url}")
    finally:
        if browser is not None:
            browser.close()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
