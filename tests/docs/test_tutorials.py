"""The tutorials' commands run as a reader types them: every fenced block a tutorial marks with
``<!-- tested: PATH ... -->`` is run, page after page in the reader's order, in one scratch folder that holds what a
checkout holds (``.venv``, ``conf/``, ``examples/``), and each PATH must have been written by it; ``PATH~TEXT``:
and hold TEXT (the block's key output: ``report.json~"listnet"`` for the report of a study with a ``listnet`` path).

On tiny data: the scratch ``conf/default.yaml`` is the project's with the tests' tiny study over it
(``tests/tiny_study.yaml``, 20 queries), so ``.venv/bin/ltr run`` runs the whole main job in seconds. Each command
runs in its own process in the scratch folder, as a reader's shell runs it (a shell block line by line with bash,
a ``python`` block with the venv's Python): not in the suite's Spark session, whose JVM would resolve the
tutorials' relative paths (``work/...``) against the folder the suite started in.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pipelines.core.config import config_data
from pipelines.testing.processes import ROOT
from tests.helpers import tiny_study

pytestmark = [pytest.mark.spark, pytest.mark.slow(minutes=1)]  # `ltr` processes and a Connect server, one after another

#: The pages with tested commands, in the order a reader follows them (later ones use the first study): the tutorials,
#: then the how-to of the warm local server, whose ``ltr run`` is a client of it on the first study's work_dir.
TUTORIALS = (
    "tutorials/first-study.md",
    "tutorials/your-data.md",
    "tutorials/your-idea.md",
    "tutorials/notebook.md",
    "how-to/spark-connect.md",
)
MARK = re.compile(r"<!--\s*tested:\s*(.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    """A tested block: its page and line, its language, its code, and the paths it must create."""

    page: str
    line: int
    lang: str
    code: str
    creates: tuple[str, ...]


def marked_blocks(page: str) -> list[Block]:
    """The blocks of ``docs/<page>`` marked as tested (a mark must sit right above an ``sh`` or ``python`` fence)."""
    lines = (ROOT / "docs" / page).read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = MARK.search(line)
        if not m:
            continue
        fence = lines[i + 1].strip() if i + 1 < len(lines) else ""
        lang = fence.removeprefix("```")
        assert fence.startswith("```") and lang in ("sh", "python"), f"{page}:{i + 1}: a tested mark above {fence!r}"
        end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
        out.append(Block(page, i + 1, lang, "\n".join(lines[i + 2 : end]), tuple(m.group(1).split())))
    return out


def commands(code: str) -> list[str]:
    """A shell block's commands: one per line, ``\\`` continuations joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [c for c in (line.split(" #")[0].strip() for line in joined.splitlines()) if c and not c.startswith("#")]


def test_every_tutorial_with_commands_marks_what_it_tests():
    for page in TUTORIALS:
        blocks = marked_blocks(page)
        assert blocks, f"docs/{page} marks no block as tested"
        assert all(b.creates for b in blocks), page


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A folder as a checkout looks to a reader, with the tiny study as its conf/default.yaml."""
    conf = tmp_path / "conf"
    (conf / "datasets").mkdir(parents=True)
    for f in (ROOT / "conf" / "datasets").glob("*.yaml"):
        (conf / "datasets" / f.name).write_text(f.read_text())
    for f in (ROOT / "conf").glob("*.yaml"):
        (conf / f.name).write_text(f.read_text())
    _, data = config_data(ROOT / "conf" / "default.yaml", tiny_study("generate.queries=20"))
    (conf / "default.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LTR_CONF_DIR", str(conf))
    return tmp_path


def run_block(block: Block, where: Path) -> None:
    env = {**os.environ, "PATH": f"{where / '.venv' / 'bin'}:{os.environ['PATH']}"}
    if block.lang == "python":
        runs = [[str(where / ".venv" / "bin" / "python"), "-c", block.code]]
    else:
        runs = [["bash", "-c", cmd] for cmd in commands(block.code)]
    for cmd in runs:
        done = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"docs/{block.page}:{block.line}: {cmd[-1]}\n{done.stderr[-3000:]}"


def test_the_tutorials_commands_run_on_tiny_data(scratch):
    for page in TUTORIALS:
        for block in marked_blocks(page):
            start, since = time.monotonic(), time.time() - 1
            run_block(block, scratch)
            print(f"docs/{page}:{block.line}: {time.monotonic() - start:.1f} s")
            for want in block.creates:
                path, _, text = want.partition("~")
                where = f"docs/{page}:{block.line}: {path}"
                assert (scratch / path).exists(), f"{where} was not written"
                assert (scratch / path).stat().st_mtime >= since, f"{where} is older than the block"
                assert text in (scratch / path).read_text(errors="replace"), f"{where} does not hold {text}"
