"""Checkpoints of plan nodes: durable, atomic, readable by every executor and the driver.

Layout under the store's root (a local path or any URI ``pyarrow.fs`` reads,
e.g. ``hdfs://`` or ``s3://``; on a cluster it must be storage that every
executor and the driver reach). :class:`CheckpointStore` is the one place that
names a path under it (its "layout" methods); other modules ask it::

    ROOT/<node key>/_lease.json                one writer per node (:mod:`pipelines.store.lease`)
                   /trees-000000-000040.json   the trees of one segment (XGBoost JSON; rank 0)
                   /t000040/shard-00000.npz    one per worker: margins of its rows after tree 40
                           /_checkpoint.json   meta: the node's segments, curve points, score
                                               distributions, rank 0's seconds so far ("cost");
                                               written last: the commit point
                   /.<name>.<uuid8>.tmp        a file being written (shard, segment, meta)
    ROOT/_cuts/<cuts key>.npz                  a fold's histogram cuts (:mod:`pipelines.store.cuts`)
    ROOT/_runs/<name>/_lease.json              the lock of a study's MLflow runs (:mod:`pipelines.tracking.live`)
    ROOT/_plans/<digest>-fold<f>.json          a fold's plan record (:mod:`pipelines.study.design`)

Every file is written under a temporary name (``.shard-00000.npz.1a2b3c4d.tmp``)
in its directory and renamed into place, so a reader never sees a half-written
file; listings and readers ignore temporary names. A checkpoint at tree ``k``
exists only once its ``_checkpoint.json`` does; a directory without it (a crash
while writing) is ignored and overwritten.

When a checkpoint of a node commits, the one committed before it is kept and
older ones are removed: a reader that listed the previous newest checkpoint can
still load it. A reader that is slower than two commits finds its checkpoint
gone and gets a :class:`CheckpointError` saying so (list again). The newest
checkpoint at the node's last tree is its output. A commit can be fenced by the
node's lease (``lease_token=``): a writer whose lease was taken over cannot commit.

Shards hold, per split, the qids of the worker's rows (queries contiguous, in
stored document order) and their float32 margins, so that a run with another
number of workers can take each of its queries' rows from whichever shard has
them (:func:`pipelines.kernel.matrices.margins_of_rows`).
"""

from __future__ import annotations

import io
import json
import logging
import re
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from pipelines.core import keys
from pipelines.core.errors import LtrError
from pipelines.core.storage import put_atomic
from pipelines.store.lease import LEASE, verify_token
from udfs.uris import resolve

log = logging.getLogger(__name__)

MARKER = "_checkpoint.json"
CUTS_DIR = "_cuts"  # beside the nodes: ``_cuts/<key>.npz``
RUNS_DIR = "_runs"  # beside the nodes: ``_runs/<name>/_lease.json``
PLANS_DIR = "_plans"  # beside the nodes: ``_plans/<digest>-fold<f>.json``
_TREE_DIR = re.compile(r"t(\d{6,})$")


class CheckpointError(LtrError, RuntimeError):
    """A checkpoint that cannot be read or does not fit the data."""


class CheckpointStore:
    """Checkpoints of plan nodes under ``root`` (a path or URI)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self.fs, self.path = resolve(self.root)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled into Spark tasks by its root only
        return (CheckpointStore, (self.root,))

    # -- layout: every path under the root is named here --------------------
    def node_dir(self, key: str, tree: int | None = None) -> str:
        """The folder of node ``key`` (``ROOT/<key>``), or of its checkpoint at tree ``tree``
        (``ROOT/<key>/t<tree:06d>``): paths on :attr:`fs`."""
        return f"{self.path}/{key}" if tree is None else f"{self.path}/{key}/t{tree:06d}"

    def _where(self, key: str, tree: int) -> str:
        return f"{self.root}/{key}/t{tree:06d}"

    def segment_path(self, key: str, t_start: int, t_end: int) -> str:
        """The trees ``t_start..t_end`` of node ``key``: ``ROOT/<key>/trees-<t_start:06d>-<t_end:06d>.json``."""
        return f"{self.node_dir(key)}/trees-{t_start:06d}-{t_end:06d}.json"

    def lease_path(self, key: str) -> str:
        """The lease file of node ``key`` (or of a lock named like one, :meth:`runs_lock`):
        ``ROOT/<key>/_lease.json``, a path on :attr:`fs` (:mod:`pipelines.store.lease`)."""
        return f"{self.node_dir(key)}/{LEASE}"

    def runs_lock(self, name: str) -> str:
        """The lease key of the lock of the MLflow runs ``name`` (:func:`pipelines.tracking.live.children_lock`):
        ``_runs/<name>``, whose lease file is ``ROOT/_runs/<name>/_lease.json``."""
        return f"{RUNS_DIR}/{name}"

    def cuts_path(self, key: str) -> str:
        """The fold's histogram cuts stored under their key (:mod:`pipelines.store.cuts`): ``ROOT/_cuts/<key>.npz``,
        a path on :attr:`fs`."""
        return f"{self.path}/{CUTS_DIR}/{key}.npz"

    def plan_record_path(self, experiment: str, fold: int) -> str:
        """The plan record of ``experiment`` and ``fold`` (:func:`pipelines.study.design.record_plan`):
        ``ROOT/_plans/<12 hex digits of the experiment's digest>-fold<fold>.json``, a path on :attr:`fs`."""
        return f"{self.path}/{PLANS_DIR}/{keys.digest(experiment, 12)}-fold{fold}.json"

    # -- listing ---------------------------------------------------------
    def trees(self, key: str) -> list[int]:
        """Trees of the committed checkpoints of node ``key``, ascending."""
        for attempt in range(3):  # a checkpoint removed while listing can fail the listing: list again
            try:
                infos = self.fs.get_file_info(pafs.FileSelector(self.node_dir(key), allow_not_found=True))
                out = []
                for info in infos:
                    m = _TREE_DIR.match(info.base_name)
                    if (
                        m
                        and info.type == pafs.FileType.Directory
                        and self.fs.get_file_info(f"{info.path}/{MARKER}").type == pafs.FileType.File
                    ):
                        out.append(int(m.group(1)))
                return sorted(out)
            except FileNotFoundError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def latest(self, key: str) -> int | None:
        """Tree of the newest committed checkpoint of node ``key``; None when it has none."""
        t = self.trees(key)
        return t[-1] if t else None

    def latest_all(self, keys: list[str]) -> dict[str, int | None]:
        """Node key -> :meth:`latest` for each of ``keys``."""
        return {k: self.latest(k) for k in keys}

    # -- writing (inside the barrier tasks) ------------------------------
    def put(self, path: str, data: bytes, *, replace: bool = True) -> None:
        """Write ``data`` to ``path`` (a path on :attr:`fs` that a layout method named) whole
        (:func:`pipelines.core.storage.put_atomic`). ``replace``: a crashed attempt's file is replaced (its content
        is the same, training being bit-identical); False keeps a file found in place on filesystems that do not
        rename onto one (two writers of the same bytes)."""
        put_atomic(self.fs, path, data, replace=replace)

    def write_shard(
        self, key: str, tree: int, rank: int, arrays: Mapping[str, np.ndarray], *, lease_token: str | None = None
    ) -> None:
        """Worker ``rank``'s margins (and qids) after tree ``tree`` of node ``key`` (refused, like a commit,
        when ``lease_token`` no longer holds the node's lease: a writer taken over writes nothing more)."""
        if lease_token is not None:
            verify_token(self, key, lease_token)
        buf = io.BytesIO()
        named: dict[str, Any] = dict(arrays)  # numpy's stub reads **kwargs as its allow_pickle flag
        np.savez(buf, **named)
        self.put(f"{self.node_dir(key, tree)}/shard-{rank:05d}.npz", buf.getvalue())

    def write_segment(
        self, key: str, t_start: int, t_end: int, model: bytes, *, lease_token: str | None = None
    ) -> None:
        """The trees ``t_start..t_end`` of a node (a booster's XGBoost JSON); ``lease_token`` as for shards."""
        if lease_token is not None:
            verify_token(self, key, lease_token)
        self.put(self.segment_path(key, t_start, t_end), model)

    def commit(self, key: str, tree: int, meta: Mapping[str, Any], *, lease_token: str | None = None) -> None:
        """Write the marker (by rename: the commit point), then drop checkpoints older than the previous one.

        Parameters
        ----------
        key, tree
            The node and the tree of the checkpoint whose shards and segment are written.
        meta
            Its metadata (``tree`` is added).
        lease_token
            The token of the node's lease held for this writer (:mod:`pipelines.store.lease`); if given, the
            commit is refused unless the node's lease file names it.

        Raises
        ------
        pipelines.store.lease.LeaseLost
            ``lease_token`` is given and the lease now names another owner (or is gone).
        """
        if lease_token is not None:
            verify_token(self, key, lease_token)
        self.put(f"{self.node_dir(key, tree)}/{MARKER}", json.dumps({**meta, "tree": tree}, sort_keys=True).encode())
        older = [t for t in self.trees(key) if t < tree]
        for old in older[:-1]:  # keep the previous checkpoint: a reader may be loading it
            self.delete(key, old)

    def delete(self, key: str, tree: int) -> None:
        """Remove checkpoint ``tree`` of node ``key`` (its directory); best effort.

        A failure to remove is logged as a warning, never raised: a checkpoint left behind only takes space.
        """
        try:
            self.fs.delete_dir(self.node_dir(key, tree))
        except OSError as e:  # best effort: an older checkpoint left behind is only disk space
            log.warning("could not remove checkpoint %s/t%06d: %s", key, tree, e)

    # -- reading ---------------------------------------------------------
    def _read(self, key: str, tree: int, name: str) -> bytes:
        """A file of checkpoint ``tree``; a clear :class:`CheckpointError` if the checkpoint is gone."""
        try:
            with self.fs.open_input_stream(f"{self.node_dir(key, tree)}/{name}") as f:
                return f.read()
        except OSError as e:
            if self.fs.get_file_info(f"{self.node_dir(key, tree)}/{MARKER}").type != pafs.FileType.File:
                newer = [t for t in self.trees(key) if t > tree]
                if newer:
                    raise CheckpointError(
                        f"checkpoint {self._where(key, tree)} is gone: it was replaced by a newer "
                        f"checkpoint of the node (tree {newer[-1]}) after it was listed; list the "
                        "checkpoints again (store.latest) and read the newest"
                    ) from None
                raise CheckpointError(
                    f"checkpoint {self._where(key, tree)} does not exist (not committed, or the node was deleted)"
                ) from None
            raise CheckpointError(f"checkpoint {self._where(key, tree)}: {name} is unreadable: {e}") from None

    def meta(self, key: str, tree: int) -> dict[str, Any]:
        """The metadata (``_checkpoint.json``) of checkpoint ``tree`` of node ``key``.

        Returns
        -------
        dict[str, Any]
            What :meth:`commit` wrote: the caller's ``meta`` plus ``tree``.

        Raises
        ------
        CheckpointError
            When the checkpoint does not exist, was replaced by a newer one since it was listed, or its
            metadata is unreadable or not JSON.
        """
        raw = self._read(key, tree, MARKER)
        try:
            return json.loads(raw.decode())
        except ValueError as e:
            raise CheckpointError(f"checkpoint {self._where(key, tree)} is unreadable: {e}") from None

    def cost(self, keys: list[str]) -> dict[str, float]:
        """Rank 0's seconds (boost, objective, eval, checkpoint) and trees over the newest checkpoints of
        ``keys``: what the committed trees cost, resumed attempts included (work lost to a crash is not)."""
        total: dict[str, float] = {}
        for key, tree in self.latest_all(keys).items():
            if tree is not None:
                for k, v in self.meta(key, tree).get("cost", {}).items():
                    total[k] = total.get(k, 0.0) + v
        return total

    def segment(self, key: str, t_start: int, t_end: int) -> bytes:
        """The trees ``t_start..t_end`` of node ``key`` as :meth:`write_segment` wrote them (XGBoost JSON).

        Raises
        ------
        CheckpointError
            When the segment cannot be read (removed with its node, or never written).
        """
        path = self.segment_path(key, t_start, t_end)
        try:
            with self.fs.open_input_stream(path) as f:
                return f.read()
        except OSError as e:
            raise CheckpointError(
                f"segment {self.root}/{key}/trees-{t_start:06d}-{t_end:06d}.json of node {key} is "
                f"unreadable (is the node's checkpoint still there? list again): {e}"
            ) from None

    def shards(self, key: str, tree: int) -> list[dict[str, np.ndarray]]:
        """Every worker's shard of a checkpoint, in rank order."""
        n = int(self.meta(key, tree)["shards"])
        out = []
        for r in range(n):
            raw = self._read(key, tree, f"shard-{r:05d}.npz")
            try:
                with np.load(io.BytesIO(raw)) as z:
                    out.append({k: z[k] for k in z.files})
            except (OSError, ValueError, zipfile.BadZipFile) as e:
                raise CheckpointError(
                    f"checkpoint {self._where(key, tree)}: shard-{r:05d}.npz is unreadable: {e}"
                ) from None
        return out
