"""pipelines.core.storage: the one atomic file writer (no Spark). Object stores and HDFS are stood in for by a
filesystem that, like HDFS, refuses to rename onto an existing file."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from pipelines.core.storage import atomic_file, put_atomic, rename_into_place, resolve, write_file_atomic


class NoRenameOver:
    """``pyarrow.fs.LocalFileSystem`` whose ``move`` fails onto an existing file, as HDFS's rename does."""

    def __init__(self) -> None:
        self.local = pafs.LocalFileSystem()
        self.moves = 0

    def __getattr__(self, name):
        return getattr(self.local, name)

    def move(self, src: str, dst: str) -> None:
        self.moves += 1
        if self.local.get_file_info(dst).type != pafs.FileType.NotFound:
            raise OSError(f"rename {src} -> {dst}: destination exists")
        self.local.move(src, dst)


def test_write_file_atomic_replaces_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "a" / "b" / "result.json"
    write_file_atomic(str(target), b"one")
    write_file_atomic(str(target), b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]


def test_an_error_while_writing_keeps_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "result.json"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_file(str(target)) as f:
            f.write(b"half")
            raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


@pytest.mark.parametrize("replace, expect", [(True, b"new"), (False, b"old")])
def test_a_filesystem_that_does_not_rename_over_a_file(tmp_path, replace, expect):
    fs = NoRenameOver()
    target = str(tmp_path / "cuts.npz")
    put_atomic(fs, target, b"old")
    put_atomic(fs, target, b"new", replace=replace)  # HDFS: delete, then rename (or keep the one found)
    assert (tmp_path / "cuts.npz").read_bytes() == expect
    assert [p.name for p in tmp_path.iterdir()] == ["cuts.npz"]
    assert fs.moves == 3 if replace else fs.moves == 2


def test_rename_into_place_raises_when_the_rename_fails_for_another_reason(tmp_path):
    fs = NoRenameOver()
    with pytest.raises(OSError):
        rename_into_place(fs, str(tmp_path / "missing.tmp"), str(tmp_path / "x"))


def test_resolve_takes_paths_and_uris(tmp_path):
    fs, p = resolve(str(tmp_path) + "/")
    assert isinstance(fs, pafs.LocalFileSystem) and p == str(tmp_path)
    fs, p = resolve(f"file://{tmp_path}/x")
    assert isinstance(fs, pafs.LocalFileSystem) and p == f"{tmp_path}/x"
