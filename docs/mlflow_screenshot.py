"""Photograph the MLflow UI of a grid, as README shows it: starts ``mlflow ui`` on the tracking
store, opens the experiment's chart view in headless Chromium (model-training view, runs
filtered, the grid's parent run expanded so that its children's NDCG curves are drawn), saves
a PNG and stops everything it started.

    python docs/mlflow_screenshot.py [--tracking-uri sqlite:///work/mlflow.db] [--experiment ltr-default]
                                     [--filter "tags.\\`ltr.strategy\\` = 'mse'"] [--out docs/mlflow-ui.png]

``--compare``: the run comparison of the children the filter selects (default: fold 1's baseline, MSE-t and
q_nrel children), its parallel-coordinates plot set through the UI's own controls (Clear All, then each of
``--metrics`` picked from the Metrics list, the last one colouring the lines): what ``ltr report`` logs on
the children, as README shows it in docs/mlflow-compare.png.

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
#: the compare page's parallel-coordinates controls (MLflow 3.17: Dubois selects, ids in page order)
METRICS_SELECT = "document.querySelector('#dubois-select-2')"
COMPARE_METRICS = (
    "final_ndcg_at_10_test,report.trees_to_target,report.t_p_holm,report.urisk_alpha1,report.d_z,"
    "report.delta_ndcg_at_10"
)
#: the close button of the MLflow Assistant side panel (MLflow 3.17)
ASSISTANT_CLOSE = "document.querySelector('button[data-component-id=\"mlflow.assistant.chat_panel.close\"]')"
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

    def click(self, expression: str) -> None:
        """A real mouse click (pressed, released) at the middle of the element ``expression`` finds, scrolled
        into view: what the UI's select lists listen to (a JavaScript ``click()`` does not open them)."""
        r = self.js(
            f"(() => {{ const e = {expression}; if (!e) return null; e.scrollIntoView({{block: 'center'}}); "
            "const r = e.getBoundingClientRect(); return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()"
        )
        if r is None:
            raise RuntimeError(f"no element for `{expression}` on the page")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": r["x"], "y": r["y"], "button": "left", "clickCount": 1},
                self.session,
            )
        time.sleep(0.4)

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


def compare(
    browser: Chromium,
    base: str,
    experiment_id: str,
    uri: str,
    where: str,
    metrics: list[str],
    strategies: list[str],
) -> str:
    """Open the run comparison of the runs ``where`` selects (those of ``strategies`` only, when given) and set
    its parallel-coordinates plot to ``metrics`` through the UI's controls; returns the page's URL."""
    from mlflow.tracking import MlflowClient

    runs = MlflowClient(uri).search_runs([experiment_id], where, max_results=200)
    runs = [r for r in runs if not strategies or r.data.tags.get("ltr.strategy") in strategies]
    if not runs:
        raise RuntimeError(f"no run matches {where!r}")
    ids = json.dumps([r.info.run_id for r in runs])
    exps = urllib.parse.quote(json.dumps([experiment_id]))
    url = f"{base}/#/compare-runs?runs={urllib.parse.quote(ids)}&experiments={exps}"
    browser.call("Page.navigate", {"url": url}, browser.session)
    browser.wait_js(f"!!{METRICS_SELECT}", 90)
    try:  # the assistant's side panel opens a little after the page
        browser.wait_js(f"!!{ASSISTANT_CLOSE}", 10)
        browser.click(ASSISTANT_CLOSE)
    except TimeoutError:
        pass
    browser.click("document.querySelector('[data-testid=clear-button]')")  # Clear All: no parameter, no metric
    browser.click(f"{METRICS_SELECT}.parentElement.parentElement")  # opens the Metrics list
    for m in metrics:
        option = f"document.querySelector('[class*=select-item-option][title={json.dumps(m)}]')"
        browser.wait_js(f"!!{option}", 10)
        browser.click(option)
    browser.click("Array.from(document.querySelectorAll('h1, h2')).find(e => e.textContent.startsWith('Comparing'))")
    browser.js("window.scrollTo(0, 0)")
    return url


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tracking-uri", default="sqlite:///work/mlflow.db")
    p.add_argument("--experiment", default="ltr-default")
    p.add_argument(
        "--filter",
        default="tags.`ltr.strategy` = 'mse'",
        help="MLflow search filter of the runs shown (default: the MSE-t children, one per switch point)",
    )
    p.add_argument("--out", default=None, help="default: docs/mlflow-ui.png, with --compare docs/mlflow-compare.png")
    p.add_argument("--compare", action="store_true", help="the run comparison's parallel coordinates (see above)")
    p.add_argument("--metrics", default=COMPARE_METRICS, help="--compare: the plot's metrics, comma-separated")
    p.add_argument(
        "--strategies", default="lambdamart,mse,q_nrel", help="--compare: the runs' ltr.strategy tags (empty: all)"
    )
    p.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    p.add_argument("--size", default="1600,1000")
    args = p.parse_args()
    args.out = args.out or str(Path(__file__).with_name("mlflow-compare.png" if args.compare else "mlflow-ui.png"))
    if args.compare and args.filter == p.get_default("filter"):
        args.filter = "tags.`ltr.fold` = '1' and tags.`ltr.kind` = 'child'"

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
        width, height = (int(x) for x in args.size.split(","))
        browser = Chromium(args.chromium, width, height)
        if args.compare:
            url = compare(
                browser,
                base,
                exp.experiment_id,
                args.tracking_uri,
                args.filter,
                args.metrics.split(","),
                [s for s in args.strategies.split(",") if s],
            )
        else:
            query = {"workflowType": "machine_learning", "compareRunsMode": "CHART"}
            if args.filter:
                query["searchFilter"] = args.filter
            url = f"{base}/#/experiments/{exp.experiment_id}/runs?{urllib.parse.urlencode(query)}"
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
