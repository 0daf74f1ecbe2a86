"""The report's page (``report.html``) in a real headless Chromium: every figure loads from its data: URI, the
headline's numbers on the page are report.json's to the last bit, and a click on a column header sorts a table.

One browser launch: ``chromium --headless --dump-dom`` of the page written to a file, with one script appended
that clicks a header once the page has loaded (what a reader does) and writes the order it sees on ``<html>``.
Skipped, saying why, where no Chromium binary is installed (``.ci/run`` installs the Debian package as root).

``python -m tests.report.test_page OUT.html`` writes the same page (the screenshot docs/report-first-screen.png is
``chromium --headless --screenshot=docs/report-first-screen.png --window-size=1280,900 file://OUT.html``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import record

CHROMIUM = next((p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium, chromium-browser or google-chrome on PATH (.ci/run installs the Debian package chromium "
    "as root): the report page's browser test needs one",
)

FOLDS = (1, 2, 3, 4, 5)
TREES = 100
QUERIES = 40
#: (strategy, switch) -> (how fast its curve rises, its gain per query)
SYSTEMS = {
    ("lambdamart", None): (30.0, 0.0),
    ("mse", 10): (12.0, 0.004),
    ("mse", 20): (10.0, 0.012),
    ("mse", 50): (14.0, 0.008),
    ("mse", 100): (20.0, -0.002),
    ("q_nrel", 20): (25.0, -0.015),
    ("q_nrel", 50): (28.0, 0.001),
}


def _records() -> tuple[list[Any], dict[tuple[int, int], dict[str, float]]]:
    """A grid of 5 folds x 7 systems with 100-tree curves and 40 test queries a fold, and difficulty scores."""
    rng = np.random.default_rng(38)
    recs, scores = [], {}
    steps = np.arange(1, TREES + 1)
    for f in FOLDS:
        qids = [100 * f + i for i in range(QUERIES)]
        base = rng.uniform(0.15, 0.8, QUERIES)
        for q, b in zip(qids, base, strict=True):
            scores[(f, q)] = {"ndcg_bm25": float(b * 0.8), "ndcg_pagerank": float(rng.uniform()), "n_rel": 1 + q % 7}
        level = 0.45 + 0.01 * f
        for (strategy, switch), (speed, gain) in SYSTEMS.items():
            curve = (level + gain) * (1 - np.exp(-steps / speed)) + rng.normal(0, 0.002, TREES)
            vali = curve + 0.01 + rng.normal(0, 0.002, TREES)
            perq = np.clip(base + gain + rng.normal(0, 0.05, QUERIES) * (strategy != "lambdamart"), 0, 1)
            recs.append(
                record(
                    f, strategy, switch, curve.tolist(), dict(zip(qids, perq.tolist(), strict=True)), vali=vali.tolist()
                )
            )
    return recs, scores


def _noninferiority(recs: list[Any], pairs: Any, margin: float) -> dict[str, dict[str, Any]]:
    """Non-inferiority in trees of every system, on per-query curves that rise as the system's mean curve does (the
    report replays them from the logged models; here the records have no models)."""
    from pipelines.report.inference import noninferiority
    from pipelines.report.records import label_of

    steps = list(range(1, TREES + 1))
    out = {}
    for key, p in pairs.items():
        speed = SYSTEMS[key][0]
        rise = (1 - np.exp(-np.arange(1, TREES + 1) / speed)) / (1 - np.exp(-TREES / speed))
        out[label_of(*key)] = noninferiority(np.outer(p.x, rise), steps, p.y, TREES, margin, 200, 0)
    return out


def build_page(out: Path) -> tuple[str, dict[str, Any], dict[str, bytes]]:
    """The report's Markdown and page of the grid of :func:`_records`, as build.py writes them, and report.json
    (with its headline) in ``out``; returns (markdown, report.json, images)."""
    from pipelines.report.by_difficulty import by_difficulty
    from pipelines.report.export import comparisons, report_json
    from pipelines.report.figures import convergence_figure, difficulty_figure, figure1, forest_plot
    from pipelines.report.headline import choose_on_vali
    from pipelines.report.headline import headline as make_headline
    from pipelines.report.inference import difficulty_interaction
    from pipelines.report.pairing import pairs_with_baseline
    from pipelines.report.render import render
    from pipelines.report.tables import convergence, table1, table2

    recs, scores = _records()
    pairs = pairs_with_baseline(recs)
    t1 = table1(recs, n_perm=1000, seed=0, folds=list(FOLDS), n_boot=200, risk_alphas=(1, 5), pairs=pairs)
    t2 = table2(recs)
    conv = convergence(recs, 0.99)
    by_diff = by_difficulty(recs, scores, pairs)
    interaction = difficulty_interaction(pairs, scores, lambda key: None)
    margin = 0.005
    headline = make_headline(
        t1, recs, _noninferiority(recs, pairs, margin), primary_test="randomisation", margin=margin, metric="NDCG@10"
    )
    chosen = {s: k[1] for s, k in choose_on_vali(recs).items()}
    meta = {
        "title": "Curriculum and continuation LtR: mslr-web10k",
        "experiment": "mslr-web10k",
        "parent": "3f2a9c0d5e6b4a7f8c1d2e3f4a5b6c7d",
        "status": "FINISHED",
        "folds": list(FOLDS),
        "problems": [],
        "data": "/work/data/mslr-web10k",
        "fingerprint": "sha256:9c1e0d4b",
        "metric": "NDCG@10: gain 2^label-1, cut 10, ties input order, empty queries 1",
        "metric_warning": None,
        "metric_name": "ndcg_at_10",
        "n_perm": 1000,
        "n_boot": 200,
        "risk_alphas": [1.0, 5.0],
        "target_fraction": 0.99,
        "seed": 0,
        "versions": {"ltr": {"0.9": 35}, "git": {"3c2216c": 35}, "xgboost": {"3.0.0": 35}},
        "report_version": {"ltr": "0.9", "git": "3c2216c", "scipy": "1.15"},
        "no_table2": None,
        "split": "test",
        "convergence": conv,
        "by_difficulty": by_diff,
        "no_difficulty": None,
        "trec": None,
        "seeds": [],
        "primary_test": "randomisation",
        "margin": margin,
        "headline": headline,
    }

    images = {
        "forest.png": forest_plot(comparisons(t1), "randomisation", "NDCG@10")["png"],
        "convergence.png": convergence_figure(recs, chosen, "NDCG@10")["png"],
        "figure1.png": figure1(recs, "NDCG@10")["png"],
    }
    diff = difficulty_figure(by_diff, interaction, chosen, "random", "NDCG@10")
    if diff:
        images["by_difficulty.png"] = diff["png"]
    md, page = render(t1, t2, None, meta, images)
    rep = report_json(meta, t1, t2, conv, by_diff, None, None, [])
    rep["headline"] = headline
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(rep, indent=1))
    (out / "report.md").write_text(md)
    (out / "report.html").write_text(page)
    return md, json.loads((out / "report.json").read_text()), images


#: Appended to the page for the test only: once the page has loaded, a click on the folds table's "fold 1" header
#: (as a reader would), and the order of its rows written on <html>.
CLICK = """<script>window.addEventListener('load',function(){
var t=document.querySelector('#folds table');t.tHead.rows[0].cells[1].click();
document.documentElement.setAttribute('data-sorted',JSON.stringify(Array.prototype.map.call(t.tBodies[0].rows,
function(r){return [r.cells[0].textContent,r.cells[1].textContent];})));});</script>"""


class _Numbers(HTMLParser):
    """The elements with ``data-key`` (key -> data-value) and the <html> element's attributes of a dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.root: dict[str, str | None] = {}
        self.imgs = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "html":
            self.root = a
        if tag == "img":
            self.imgs += 1
        if a.get("data-key"):
            assert a["data-key"] not in self.values, a["data-key"]
            self.values[a["data-key"]] = a["data-value"] or ""


def _at(tree: Any, path: str) -> Any:
    for part in path.split("."):
        tree = tree[int(part)] if isinstance(tree, list) else tree[part]
    return tree


def _leaves(tree: Any, path: str = "") -> dict[str, Any]:
    """Every number of ``tree`` by its dotted path."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _leaves(sub, f"{path}{key}.").items()}
    if isinstance(tree, list):
        return {k: v for i, sub in enumerate(tree) for k, v in _leaves(sub, f"{path}{i}.").items()}
    return {path[:-1]: tree} if isinstance(tree, (int, float)) and not isinstance(tree, bool) else {}


@pytest.mark.heavy
def test_the_page_in_chromium(tmp_path):
    md, rep, images = build_page(tmp_path / "report")
    page = (tmp_path / "report" / "report.html").read_text()
    assert "http://" not in page and "https://" not in page and 'src="figure' not in page  # self-contained
    assert page.count("data:image/png;base64,") == len(images) == 4
    # the order: the answer, then the figures, then the tables, then the provenance
    marks = ['id="answer"', 'id="fig-forest"', 'id="fig-figure1"', 'id="table1"', 'id="provenance"', 'id="files"']
    assert [page.index(x) for x in marks] == sorted(page.index(x) for x in marks)
    assert md.index("## The answer") < md.index("## Forest plot") < md.index("## Table 1") < md.index("## Provenance")
    assert "![Forest plot: Δ NDCG@10 against LambdaMART](forest.png)" in md
    assert "<th>randomisation p, Holm (primary)</th>" in page and "<th>t-test p, Holm (robustness)</th>" in page
    assert page.index("randomisation p, Holm (primary)") < page.index("t-test p, Holm (robustness)")
    assert "oracle difficulty" in md and "risky, not worse on average" in md and "z = 0" in md
    assert "counted as '> T'" in md and "> 100" in md  # MSE-100 and q_nrel never reach LambdaMART's target

    test_copy = tmp_path / "clicked.html"
    test_copy.write_text(page.replace("</body></html>", CLICK + "</body></html>"))
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    cmd += ["--virtual-time-budget=5000", "--dump-dom", test_copy.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "</html>" in done.stdout, done.stderr[-2000:]
    dom = _Numbers()
    dom.feed(done.stdout)
    # every figure decoded (the page's own script: img.complete and naturalWidth > 0)
    assert dom.root.get("data-images-total") == "4" and dom.root.get("data-images-loaded") == "4", dom.root
    assert dom.imgs == 4
    # every headline number on the page is report.json's, exactly, and every number of its rows is on the page
    h = rep["headline"]
    assert dom.values, "no headline numbers on the page"
    for key, value in dom.values.items():
        assert key.startswith("headline.")
        assert json.loads(value) == _at(h, key.removeprefix("headline.")), key
        assert type(json.loads(value)) is type(_at(h, key.removeprefix("headline."))), key
    for path in _leaves(h["rows"], "rows."):
        if path.rsplit(".", 1)[-1] != "switch":
            assert f"headline.{path}" in dom.values, path
    assert {"headline.margin", "headline.baseline.mean", "headline.baseline.trees"} <= dom.values.keys()
    # the click sorted the folds table by fold 1, ascending
    sorted_rows = json.loads(dom.root["data-sorted"] or "[]")
    fold1 = [float(v) for _, v in sorted_rows]
    assert len(sorted_rows) == len(SYSTEMS) and fold1 == sorted(fold1)
    assert re.search(r'<th[^>]*aria-sort="ascending"[^>]*>fold 1</th>', done.stdout), "no header marked as sorted"


def test_the_page_without_figures_headline_or_primary_test():
    """build.py's call before it passes them: figures linked by file name, the answer saying there is none,
    both tests side by side."""
    from pipelines.report.render import render
    from pipelines.report.tables import convergence, table1

    recs, _ = _records()
    recs = [r for r in recs if r.fold < 3 and r.strategy in ("lambdamart", "mse")]
    t1 = table1(recs, n_perm=20, n_boot=20)
    meta = {"title": "t", "experiment": "e", "parent": "p", "status": "FINISHED", "folds": [1, 2], "data": "d"}
    meta |= {"fingerprint": "f", "metric": "m", "metric_name": "ndcg_at_10", "n_perm": 20, "seed": 0}
    md, page = render(t1, None, None, {**meta, "convergence": convergence(recs)})
    assert "No headline: this report was built without one" in md and 'src="figure1.png"' in page
    assert "| t-test p | t-test p, Holm | randomisation p | randomisation p, Holm |" in md
    assert "median over folds, a fold that never reaches it counted as '> T'" in md and "(primary)" not in md


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "report-example/report.html")
    build_page(target.parent)
    if target.name != "report.html":
        (target.parent / "report.html").rename(target)
    print(target.resolve().as_uri())
