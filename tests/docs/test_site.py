"""The documentation site (docs/, Sphinx with MyST: docs/README.md): it builds offline in strict mode (a warning
is an error: a broken link or anchor, a missing image, a page in no table of contents, a docstring Sphinx cannot
read), and a real headless Chromium opens the built site from files: every page loads with every image decoded,
and the search page finds a word through the search index.

One build (about 15 s here) and one browser launch: a harness page written beside the built pages loads each page
in turn in an iframe (``--allow-file-access-from-files`` lets it read a ``file://`` frame, as a reader's browser
shows it) and writes what it saw on its ``<html>``, read back with ``--dump-dom``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pipelines.testing.processes import ROOT

pytest.importorskip("sphinx", reason="the docs extra (pip install -e '.[docs]') builds the site")
pytest.importorskip("myst_parser", reason="the docs extra (pip install -e '.[docs]') builds the site")

CHROMIUM = next((p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None)
DOCS = ROOT / "docs"


def build(out: Path) -> subprocess.CompletedProcess[str]:
    """``sphinx-build -W --keep-going -E`` of docs/ into ``out`` (what docs/README.md says to run)."""
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html", str(DOCS), str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    start = time.monotonic()
    done = build(out)
    print(f"site built in {time.monotonic() - start:.1f} s")
    assert done.returncode == 0, done.stderr[-5000:]
    return out


def pages(site: Path) -> list[str]:
    """The built pages, relative to the site (Sphinx's own index and search pages included)."""
    return sorted(
        p.relative_to(site).as_posix() for p in site.rglob("*.html") if not p.relative_to(site).parts[0].startswith("_")
    )


def test_the_site_builds_strictly_with_every_part(site):
    """No warning (the build above fails on one); every section of the site, and the generated references."""
    built = pages(site)
    want = ["index", "tutorials/first-study", "tutorials/notebook", "how-to/index", "reference/cli",
            "reference/config", "reference/report-json", "reference/plugins-api", "reference/results-api",
            "explanation/architecture"]  # fmt: skip
    for page in (f"{p}.html" for p in want):
        assert page in built, page
    config = (site / "reference" / "config.html").read_text()
    assert "train.codes_in_memory_gib" in config and "one of auto, worker, spark" in config
    assert "results.load" in (site / "reference" / "results-api.html").read_text()
    assert (site / "searchindex.js").stat().st_size > 10_000


def test_a_broken_link_fails_the_build(tmp_path):
    """The strict build can fail: the site's configuration on two pages, one with a link to a page that does not
    exist and one to a heading that does not exist; the same pages with the links right build."""
    src = tmp_path / "docs"
    src.mkdir()
    shutil.copy(DOCS / "conf.py", src / "conf.py")
    shutil.copytree(DOCS / "_static", src / "_static")
    (src / "other.md").write_text("# Other\n\n## A heading\n")
    index = "# Home\n\n```{toctree}\nother\n```\n\n[a page](%s) and [a heading](other.md#%s)\n"
    cmd = [
        sys.executable,
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-E",
        "-q",
        "-b",
        "dummy",
        str(src),
        str(tmp_path / "o"),
    ]
    (src / "index.md").write_text(index % ("other.md", "a-heading"))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    (src / "index.md").write_text(index % ("no-such-page.md", "no-such-heading"))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0 and "no-such-page.md" in done.stderr and "no-such-heading" in done.stderr, done.stderr


HARNESS = """<!doctype html><html><head><meta charset="utf-8"><title>harness</title></head><body>
<iframe id="f" style="width:1280px;height:900px"></iframe>
<script>
const pages = %s;
const out = {};
const f = document.getElementById("f");
let i = 0;
function finish() { document.documentElement.setAttribute("data-result", JSON.stringify(out)); }
function next() {
  if (i >= pages.length) { search(); return; }
  const url = pages[i++];
  f.onload = () => setTimeout(() => check(url), 20);
  f.src = url;
}
function check(url) {
  const r = {};
  try {
    const d = f.contentDocument;
    r.title = d.title;
    r.body = d.body ? d.body.innerText.length : 0;
    const imgs = Array.from(d.images);
    r.images = imgs.length;
    r.broken = imgs.filter(im => !(im.complete && im.naturalWidth > 0)).map(im => im.getAttribute("src"));
  } catch (e) { r.error = String(e); }
  out[url] = r;
  next();
}
function search() {
  f.onload = () => poll(0);
  f.src = "search.html?q=curriculum";
}
function poll(n) {
  let found = 0;
  try { found = f.contentDocument.querySelectorAll("#search-results li").length; } catch (e) {}
  if (found > 0 || n > 200) { out["search"] = {results: found}; finish(); return; }
  setTimeout(() => poll(n + 1), 50);
}
next();
</script></body></html>
"""


class _Root(HTMLParser):
    result: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "html" and self.result is None:
            self.result = dict(attrs).get("data-result")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium, chromium-browser or google-chrome on PATH (.ci/run installs "
                    "the Debian package chromium as root): the site's browser test needs one")  # fmt: skip
def test_every_page_loads_in_a_browser_from_files(site, tmp_path):
    built = [p for p in pages(site) if p != "search.html"]
    (site / "_broken.html").write_text('<html><head><title>x</title></head><body><img src="no.png">' + "x" * 60)
    harness = site / "_harness.html"
    harness.write_text(HARNESS % json.dumps([*built, "_broken.html"]))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--allow-file-access-from-files", f"--user-data-dir={tmp_path / 'profile'}",
           "--virtual-time-budget=120000", "--dump-dom", harness.as_uri()]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    root = _Root()
    root.feed(done.stdout)
    assert root.result, (done.returncode, done.stderr[-3000:])
    seen = json.loads(root.result)
    assert set(built) <= seen.keys()
    assert seen["_broken.html"]["broken"] == ["no.png"]  # the harness sees a missing image
    for page in built:
        r = seen[page]
        assert "error" not in r and r["title"] and r["body"] > 50, (page, r)
        assert r["broken"] == [], (page, r)  # every image decoded
    assert sum(seen[p]["images"] for p in built) >= 2  # the report's first screen, the MLflow UI
    assert seen["search"]["results"] > 0  # the search index loaded and answered
