"""``ltr pack``'s copy of the source tree (:func:`pipelines.app.pack._copy_source`): in a git work tree, what git
would carry, less the parts never built; elsewhere, the tree less those parts. The whole command runs in
``tests/scenarios/test_cluster.py`` (its archive runs a study on a standalone cluster)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipelines.app.pack import _copy_source


def _tree(root: Path) -> None:
    for rel, text in {
        "setup.py": "x",
        "pipelines/a.py": "a",
        "udfs/b.py": "b",
        "tests/test_a.py": "t",  # never built
        "bench-out/run/big.bin": "ignored by git",
        "notes.txt": "untracked, not ignored",
        ".venv/pyvenv.cfg": "home = /usr",
        "pipelines/__pycache__/a.cpython-311.pyc": "c",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "link.py").symlink_to("setup.py")


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.mark.parametrize("git", [True, False])
def test_the_source_is_copied_without_outputs_caches_or_tests(tmp_path, git):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    _tree(src)
    if git:
        (src / ".gitignore").write_text("/bench-out/\n.venv/\n__pycache__/\n")
        subprocess.run(["git", "init", "-q", str(src)], check=True)
        subprocess.run(["git", "-C", str(src), "add", "setup.py", "pipelines/a.py", "tests", "link.py"], check=True)
    _copy_source(src, dest)
    want = {"setup.py", "pipelines/a.py", "udfs/b.py", "notes.txt", "link.py"} | ({".gitignore"} if git else set())
    if not git:  # without git's rules: SOURCE_IGNORE alone, which does not name bench-out
        want |= {"bench-out/run/big.bin"}
    assert _files(dest) == want
    assert (dest / "link.py").is_symlink() and (dest / "udfs/b.py").read_text() == "b"
