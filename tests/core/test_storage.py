"""The one atomic file writer (:mod:`udfs.atomic`, which :mod:`pipelines.core.storage` and the ingest's chunk
writer build on) and the one URI helper (:mod:`udfs.uris`); no Spark. Object stores and HDFS are stood in for by
a filesystem that, like HDFS, refuses to rename onto an existing file."""

from __future__ import annotations

import types

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from pipelines.core.storage import atomic_file, put_atomic, rename_into_place, write_file_atomic
from udfs import letor_chunks
from udfs.atomic import atomic_stream
from udfs.uris import resolve, to_uri


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


def test_to_uri_makes_paths_absolute_and_keeps_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert to_uri("a/b") == f"{tmp_path}/a/b"
    assert to_uri("hdfs://nn:8020/x/") == "hdfs://nn:8020/x/"


def test_atomic_stream_renames_onto_an_existing_file_where_the_filesystem_refuses(tmp_path):
    fs = NoRenameOver()
    target = str(tmp_path / "d" / "part-000000.parquet")
    for data in (b"first attempt", b"retried attempt"):
        with atomic_stream(fs, target) as f:
            f.write(data)
    assert (tmp_path / "d" / "part-000000.parquet").read_bytes() == b"retried attempt"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["part-000000.parquet"]
    assert fs.moves == 3  # the first move, the refused one, the one after deleting the old file


def test_a_retried_ingest_task_replaces_its_part_on_a_filesystem_that_does_not_rename_over(tmp_path, monkeypatch):
    """The chunk writer's part names are deterministic: a retried task writes the name its first attempt wrote.
    On HDFS the move onto it fails; the shared writer deletes the old part first."""
    fs = NoRenameOver()
    monkeypatch.setattr(
        letor_chunks, "pafs", types.SimpleNamespace(FileSystem=types.SimpleNamespace(from_uri=lambda u: (fs, u)))
    )
    out = str(tmp_path / "subset=S1")
    letor_chunks._write_atomic(pa.table({"qid": [1]}), out, "part-000007.parquet", "zstd")
    got = letor_chunks._write_atomic(pa.table({"qid": [2, 3]}), out, "part-000007.parquet", "zstd")
    assert got == f"{out}/part-000007.parquet"
    assert pq.read_table(got).column("qid").to_pylist() == [2, 3]
    assert [p.name for p in (tmp_path / "subset=S1").iterdir()] == ["part-000007.parquet"]
    assert fs.moves == 3
