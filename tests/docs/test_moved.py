"""Nothing of the old README was lost when it moved into the site (issue 57): every sentence of README.md as it was
at commit 2fa210e (1,244 lines) is found, word for word, in today's README.md or a page of docs/, but for the few
listed in :data:`REWORDED`, each with where its fact lives now.

Sentences are compared with Markdown links reduced to their text and whitespace collapsed, so a sentence whose
link now points at a page instead of a README section still counts as found. Skipped where git or that commit is
not at hand (a shallow clone).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from pipelines.testing.processes import ROOT

BEFORE = "2fa210e"

#: Sentences of the old README that were reworded on the move, not copied: its start -> where the fact is now.
REWORDED: dict[str, str] = {
    "The layers of `pipelines`, from the commands down": "docs/contributing.md: it names the architecture's new page",
    "The code identity (README,": "docs/contributing.md: it links to explanation/keys.md",
    "`.ci/run` runs the test command above, taken from this file": "docs/contributing.md: taken from README.md",
    "What it does: an MSLR-shaped data generator": "docs/index.md: the objectives by today's names (issue 55)",
}
#: Lines of the old README's code blocks that changed on purpose: its start -> why.
CHANGED_CODE: dict[str, str] = {
    "python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt uv": "the test command installs the docs "
    "extra too (README.md)",
}


def normalise(text: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"^\s*([-*>]|\d+\.)\s+", " ", text, flags=re.M)  # list and quote markers
    text = text.replace("**", "").replace("\\|", "|")
    return " ".join(text.split())


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` outside code blocks, with five words or more."""
    prose = re.sub(r"^```.*?^```", " ", text, flags=re.S | re.M)
    prose = re.sub(r"^#+ .*$", " ", prose, flags=re.M)  # headings were renamed into page titles
    out = []
    for para in re.split(r"\n\s*\n", prose):
        for s in re.split(r"(?<=[.;:!?])\s+(?=[A-Z`(])", normalise(para)):
            if len(s.split()) >= 5:
                out.append(s)
    return out


def code_lines(text: str) -> list[str]:
    """The lines of ``text``'s code blocks (fenced or indented by four spaces), stripped, with two words or more."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    blocks += re.findall(r"(?:^    \S.*\n)+", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), flags=re.M)
    return [line.strip() for b in blocks for line in b.splitlines() if len(line.split()) >= 2]


def old_readme() -> str:
    try:
        done = subprocess.run(["git", "show", f"{BEFORE}:README.md"], capture_output=True, text=True, cwd=ROOT)
    except OSError:
        done = None
    if done is None or done.returncode != 0:
        pytest.skip(f"git or commit {BEFORE} not at hand (a shallow clone?)")
    return done.stdout


def test_every_sentence_of_the_old_readme_is_in_the_site():
    now = normalise("\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]))
    missing = [s for s in sentences(old_readme()) if s not in now and not any(s.startswith(k) for k in REWORDED)]
    assert not missing, f"{len(missing)} sentences of the old README are nowhere now:\n" + "\n".join(missing[:40])
    raw = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])
    lines = {line.strip() for line in raw.splitlines()}
    gone = [
        line
        for line in code_lines(old_readme())
        if line not in lines and not any(line.startswith(k) for k in CHANGED_CODE)
    ]
    assert not gone, f"{len(gone)} lines of the old README's code blocks are nowhere now:\n" + "\n".join(gone[:40])
