"""Paths and URIs: the one place that turns a local path or a URI into what ``pyarrow.fs`` reads.

Plain Python (``udfs`` never imports ``pipelines``): the Spark tasks of the ingest use it, and so does every
module of :mod:`pipelines` that resolves a path (through :mod:`pipelines.core.storage` or directly).
"""

from __future__ import annotations

import os

import pyarrow.fs as pafs


def to_uri(path: str) -> str:
    """An absolute local path or URI accepted by ``pyarrow.fs.FileSystem.from_uri``.

    Parameters
    ----------
    path
        A local path (relative paths are made absolute against the working directory) or a URI
        (anything with ``://``, returned as it is).

    Returns
    -------
    str
        The URI or the absolute path.
    """
    if "://" in path:
        return path
    return os.path.abspath(path)


def resolve(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``path`` and the path on it.

    Parameters
    ----------
    path
        A local path or a URI; a trailing ``/`` is ignored.

    Returns
    -------
    tuple[pyarrow.fs.FileSystem, str]
        The filesystem and the path on it (no trailing ``/``).
    """
    return pafs.FileSystem.from_uri(to_uri(path.rstrip("/") or "/"))
