"""The one atomic file writer: a file written under a temporary name in its folder, then renamed into place.

A reader sees the old file or the new one, never a part. The rename (:func:`rename_into_place`) replaces the
old file on local filesystems; HDFS does not rename onto an existing file, so there the old one is deleted
first (or kept, with ``replace=False``); on object stores the rename is a copy of a whole object.

Plain Python (``udfs`` never imports ``pipelines``): the ingest's Spark tasks write their Parquet parts with it
(:mod:`udfs.letor_chunks`), and :mod:`pipelines.core.storage` builds every other file writer of the project
on it (checkpoints, cuts, leases, run records, generated LETOR files, archives).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import pyarrow.fs as pafs

log = logging.getLogger(__name__)


def rename_into_place(fs: pafs.FileSystem, tmp: str, path: str, *, replace: bool = True) -> None:
    """Move the finished file ``tmp`` to ``path``.

    Parameters
    ----------
    fs
        The filesystem of both paths.
    tmp, path
        The finished file and its final name (paths on ``fs``).
    replace
        Where the filesystem does not rename onto an existing file (HDFS): delete the existing one first
        (True: a crashed or retried attempt's file, an older record), or keep it and remove ``tmp`` (False:
        two writers of the same bytes, such as two processes computing a fold's cuts).

    Raises
    ------
    OSError
        The move failed for another reason than an existing ``path``.
    """
    try:
        fs.move(tmp, path)  # replaces ``path`` on local filesystems (rename) and object stores (a copy)
    except OSError:
        if fs.get_file_info(path).type != pafs.FileType.File:
            raise
        if replace:
            log.debug("%s exists and the filesystem does not rename onto it: replacing it", path)
            fs.delete_file(path)
            fs.move(tmp, path)
        else:
            fs.delete_file(tmp)


def _discard(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except OSError:
        pass


@contextmanager
def atomic_stream(fs: pafs.FileSystem, path: str, *, replace: bool = True) -> Iterator[IO[bytes]]:
    """A binary stream that writes the file ``path`` on ``fs`` whole.

    The stream writes ``.<name>.<8 hex digits>.tmp`` in the file's folder (created if missing); on leaving the
    block it is renamed into place (:func:`rename_into_place`). On an error the temporary file is removed and
    the old file, if any, stays.

    Parameters
    ----------
    fs
        The filesystem.
    path
        The file's path on ``fs``.
    replace
        What to do where the filesystem does not rename onto an existing file (:func:`rename_into_place`).

    Yields
    ------
    IO[bytes]
        The stream to write (closed before the rename).
    """
    parent, name = path.rsplit("/", 1)
    fs.create_dir(parent, recursive=True)
    tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with fs.open_output_stream(tmp) as f:
            yield f
        rename_into_place(fs, tmp, path, replace=replace)
    except BaseException:
        _discard(fs, tmp)
        raise
