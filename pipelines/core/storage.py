"""The filesystem module: the atomic writers of files and of directories.

Paths may be local or any URI ``pyarrow.fs`` understands (:func:`udfs.uris.resolve`, the one place URIs are
handled). Two writers, one rule each:

* :func:`atomic_file` / :func:`write_file_atomic` / :func:`put_atomic`: one file written under a temporary
  name in its folder, then renamed into place (:func:`udfs.atomic.atomic_stream` and
  :func:`udfs.atomic.rename_into_place`, the one atomic file writer, which ``udfs`` shares with this module:
  a local rename replaces the old file; HDFS does not rename onto an existing file, so there the old one is
  deleted first, or kept when ``replace=False``; on object stores the rename is a copy of a whole object).
  Checkpoints, cuts, run records, lease renewals, the generated LETOR files, ``ltr pack``'s archive and the
  DAG's ingest record go through it, and so do the ingest's Parquet parts (:mod:`udfs.letor_chunks`).
* :func:`atomic_output`: a directory output (below).

Apart on purpose: the lease's exclusive create (:mod:`pipelines.store.lease`, which needs ``O_EXCL``, not a
rename).

Atomic directory outputs: write to a hidden temporary directory, then rename into place.
Every step that writes a directory (a dataset, difficulty scores, a curriculum,
a model) goes through :func:`atomic_output`, so a reader never sees a
half-written result, a failed run leaves no debris, and an existing output is
replaced only once the new one is complete. Paths may be local or any URI
``pyarrow.fs`` understands (the rename is atomic on local and HDFS file
systems; on object stores the marker file, written last, is the commit point).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, Protocol

import pyarrow.fs as pafs

from pipelines.core.errors import UserError
from udfs.atomic import atomic_stream
from udfs.atomic import rename_into_place as rename_into_place  # re-exported: the one rename
from udfs.uris import resolve, to_uri

log = logging.getLogger(__name__)


class FsRoot(Protocol):
    """A folder on a filesystem: what the lease needs of the checkpoint store (its filesystem, its path, and
    where the lease of a key lies: :meth:`pipelines.store.checkpoints.CheckpointStore.lease_path`)."""

    fs: pafs.FileSystem
    path: str

    def lease_path(self, key: str) -> str:
        """The lease file of ``key``, a path on ``fs``."""
        ...


@contextmanager
def atomic_file(path: str, *, replace: bool = True, fs: pafs.FileSystem | None = None) -> Iterator[IO[bytes]]:
    """A binary stream to write ``path`` (local path or URI; with ``fs``, a path on that filesystem) whole: a
    reader sees the old content or the new, never a part. Its folder is created; on an error nothing is left
    (the temporary file is removed) and the old file stays (:func:`udfs.atomic.atomic_stream`)."""
    if fs is None:
        fs, path = resolve(path)
    with atomic_stream(fs, path, replace=replace) as f:
        yield f


def write_file_atomic(path: str, data: bytes, *, replace: bool = True) -> None:
    """Write ``data`` to ``path`` (local path or URI) whole (:func:`atomic_file`)."""
    with atomic_file(path, replace=replace) as f:
        f.write(data)


def put_atomic(fs: pafs.FileSystem, path: str, data: bytes, *, replace: bool = True) -> None:
    """:func:`write_file_atomic` with the filesystem already resolved (``path`` is a path on ``fs``)."""
    with atomic_file(path, replace=replace, fs=fs) as f:
        f.write(data)


class OutputError(UserError):
    """An output path that must not be replaced."""


@dataclass(frozen=True)
class Output:
    """A temporary output directory: ``uri`` for Spark and tasks, ``path`` for ``fs``."""

    fs: pafs.FileSystem
    path: str
    uri: str

    def write_json(self, name: str, doc: Any) -> None:
        """Write ``doc`` as indented JSON, keys sorted, to the file ``name`` of the output directory."""
        with self.fs.open_output_stream(f"{self.path}/{name}") as f:
            f.write(json.dumps(doc, indent=2, sort_keys=True).encode())

    def write_parquet(self, name: str, table: Any) -> str:
        """Write the Arrow ``table`` as the Parquet file ``name`` of the output directory; return the sha256 of its
        bytes, which its summary records and a reader checks (:func:`file_sha256`)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        data = sink.getvalue().to_pybytes()
        with self.fs.open_output_stream(f"{self.path}/{name}") as f:
            f.write(data)
        return hashlib.sha256(data).hexdigest()


def _check_replaceable(fs: pafs.FileSystem, path: str, shown: str, marker: str) -> None:
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return
    if info.type != pafs.FileType.Directory:
        raise OutputError(f"--out {shown} exists and is not a directory")
    has_marker = fs.get_file_info(f"{path}/{marker}").type == pafs.FileType.File
    empty = not fs.get_file_info(pafs.FileSelector(path))
    if not (has_marker or empty):
        raise OutputError(
            f"refusing to replace --out {shown}: it exists and is not an ltr output "
            f"(no {marker}); choose another path or remove it"
        )


def file_sha256(path: str, name: str) -> str | None:
    """The sha256 of ``path/name``'s bytes (``path`` local or a URI); None when it cannot be read."""
    fs, p = resolve(path)
    try:
        with fs.open_input_stream(f"{p}/{name}") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def files_sha256(path: str, suffix: str = ".parquet") -> dict[str, str]:
    """The sha256 of each file named ``*<suffix>`` directly in ``path`` (Spark's part files), by name."""
    fs, p = resolve(path)
    out = {}
    for info in fs.get_file_info(pafs.FileSelector(p)):
        if info.type == pafs.FileType.File and info.base_name.endswith(suffix):
            with fs.open_input_stream(info.path) as f:
                out[info.base_name] = hashlib.sha256(f.read()).hexdigest()
    return dict(sorted(out.items()))


def read_json(path: str, name: str) -> Any:
    """``path/name`` parsed as JSON (``path`` local or a URI); FileNotFoundError if it is missing."""
    fs, p = resolve(path)
    with fs.open_input_stream(f"{p}/{name}") as f:
        return json.loads(f.read().decode())


def delete_quietly(fs: pafs.FileSystem, path: str) -> None:
    """Remove a directory if it exists; log (do not raise) if that fails."""
    try:
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            fs.delete_dir(path)
    except OSError as e:  # best effort: leave a hidden temporary directory behind
        log.warning("could not remove %s: %s", path, e)


@contextmanager
def atomic_output(out: str, marker: str) -> Iterator[Output]:
    """Yield a temporary directory next to ``out``; on success move it to ``out``.

    ``marker`` is the file that identifies this kind of output (e.g.
    ``_manifest.json``): an existing ``out`` is replaced only if it has one (or
    is empty), so a typo cannot wipe an unrelated directory.
    """
    out_uri = to_uri(out.rstrip("/"))
    fs, out_path = pafs.FileSystem.from_uri(out_uri)
    _check_replaceable(fs, out_path, out, marker)
    parent, name = out_path.rsplit("/", 1)
    tmp_path = f"{parent}/.{name}.tmp-{uuid.uuid4().hex[:12]}"
    tmp = Output(fs, tmp_path, out_uri[: len(out_uri) - len(out_path)] + tmp_path)
    fs.create_dir(tmp_path, recursive=True)
    try:
        yield tmp
        _check_still_there(fs, tmp_path, out, None)
        if fs.get_file_info(f"{tmp_path}/{marker}").type != pafs.FileType.File:
            raise RuntimeError(f"internal error: {marker} was not written to {tmp_path}")
        if fs.get_file_info(out_path).type == pafs.FileType.NotFound:
            fs.move(tmp_path, out_path)
        else:
            old = f"{tmp_path}.old"
            fs.move(out_path, old)
            fs.move(tmp_path, out_path)
            delete_quietly(fs, old)
    except Exception as e:
        delete_quietly(fs, tmp_path)
        _check_still_there(fs, tmp_path, out, e)
        raise
    except BaseException:
        delete_quietly(fs, tmp_path)
        raise


def _check_still_there(fs: pafs.FileSystem, tmp_path: str, out: str, cause: BaseException | None) -> None:
    """Raise :class:`StorageError` (exit 74) when the folder an output is written in went away while the command
    wrote it (deleted, unmounted), or, after a block that ended well (``cause`` None), its temporary folder did:
    not the input's fault, and not an internal error."""
    from pipelines.core.errors import StorageError

    folder = tmp_path.rsplit("/", 1)[0]
    if _missing(fs, folder):
        path, what = folder, "its folder"
    elif cause is None and _missing(fs, tmp_path):
        path, what = tmp_path, "its temporary folder"
    else:
        return
    raise StorageError(
        f"{out}: {what} {path} vanished while the command wrote it (deleted or unmounted); nothing of it was kept"
    ) from cause


def _missing(fs: pafs.FileSystem, path: str) -> bool:
    try:
        return fs.get_file_info(path).type == pafs.FileType.NotFound
    except OSError:
        return True
