"""Checkpoints of plan nodes: durable, atomic, readable by every executor and the driver.

Layout under the store's root (a local path or any URI ``pyarrow.fs`` reads,
e.g. ``hdfs://`` or ``s3://``; on a cluster it must be storage that every
executor and the driver reach)::

    ROOT/<node key>/trees-000000-000040.json  the trees of one segment (XGBoost JSON; rank 0)
                   /t000040/shard-00000.npz   one per worker: margins of its rows after tree 40
                           /_checkpoint.json  meta: the node's segments, curve points, score
                                              distributions, rank 0's seconds so far ("cost");
                                              written last, by rename: the commit point

A checkpoint at tree ``k`` exists only once its ``_checkpoint.json`` does; a
directory without it (a crash while writing) is ignored and overwritten.
When a newer checkpoint of a node commits, the older ones are removed; the
one at the node's last tree is its output.

Shards hold, per split, the qids of the worker's rows (queries contiguous, in
stored document order) and their float32 margins, so that a run with another
number of workers can take each of its queries' rows from whichever shard has
them (:func:`take_rows`).
"""

from __future__ import annotations

import io
import json
import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from udfs.letor_chunks import to_uri

log = logging.getLogger(__name__)

MARKER = "_checkpoint.json"
_TREE_DIR = re.compile(r"t(\d{6,})$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not fit the data."""


class CheckpointStore:
    """Checkpoints of plan nodes under ``root`` (a path or URI)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self.fs, self.path = pafs.FileSystem.from_uri(to_uri(self.root))

    def __reduce__(self) -> tuple[Any, ...]:  # pickled into Spark tasks by its root only
        return (CheckpointStore, (self.root,))

    def _dir(self, key: str, tree: int | None = None) -> str:
        return f"{self.path}/{key}" if tree is None else f"{self.path}/{key}/t{tree:06d}"

    # -- listing ---------------------------------------------------------
    def trees(self, key: str) -> list[int]:
        """Trees of the committed checkpoints of node ``key``, ascending."""
        infos = self.fs.get_file_info(pafs.FileSelector(self._dir(key), allow_not_found=True))
        out = []
        for info in infos:
            m = _TREE_DIR.match(info.base_name)
            if m and info.type == pafs.FileType.Directory and \
                    self.fs.get_file_info(f"{info.path}/{MARKER}").type == pafs.FileType.File:
                out.append(int(m.group(1)))
        return sorted(out)

    def latest(self, key: str) -> int | None:
        t = self.trees(key)
        return t[-1] if t else None

    def latest_all(self, keys: list[str]) -> dict[str, int | None]:
        return {k: self.latest(k) for k in keys}

    # -- writing (inside the barrier tasks) ------------------------------
    def write_shard(self, key: str, tree: int, rank: int, arrays: Mapping[str, np.ndarray]) -> None:
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        d = self._dir(key, tree)
        self.fs.create_dir(d, recursive=True)
        with self.fs.open_output_stream(f"{d}/shard-{rank:05d}.npz") as f:
            f.write(buf.getvalue())

    def write_segment(self, key: str, t_start: int, t_end: int, model: bytes) -> None:
        """The trees ``t_start..t_end`` of a node (a booster's XGBoost JSON)."""
        self.fs.create_dir(self._dir(key), recursive=True)
        with self.fs.open_output_stream(f"{self._dir(key)}/trees-{t_start:06d}-{t_end:06d}.json") as f:
            f.write(model)

    def commit(self, key: str, tree: int, meta: Mapping[str, Any]) -> None:
        """Write the marker (by rename: the commit point), then drop older checkpoints of the node."""
        d = self._dir(key, tree)
        self.fs.create_dir(d, recursive=True)
        tmp = f"{d}/.{MARKER}.{uuid.uuid4().hex[:8]}"
        with self.fs.open_output_stream(tmp) as f:
            f.write(json.dumps({**meta, "tree": tree}, sort_keys=True).encode())
        self.fs.move(tmp, f"{d}/{MARKER}")
        for old in self.trees(key):
            if old < tree:
                self.delete(key, old)

    def delete(self, key: str, tree: int) -> None:
        try:
            self.fs.delete_dir(self._dir(key, tree))
        except OSError as e:  # best effort: an older checkpoint left behind is only disk space
            log.warning("could not remove checkpoint %s/t%06d: %s", key, tree, e)

    # -- reading ---------------------------------------------------------
    def meta(self, key: str, tree: int) -> dict[str, Any]:
        try:
            with self.fs.open_input_stream(f"{self._dir(key, tree)}/{MARKER}") as f:
                return json.loads(f.read().decode())
        except (OSError, ValueError) as e:
            raise CheckpointError(f"checkpoint {self.root}/{key}/t{tree:06d} is unreadable: {e}") from None

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
        with self.fs.open_input_stream(f"{self._dir(key)}/trees-{t_start:06d}-{t_end:06d}.json") as f:
            return f.read()

    def shards(self, key: str, tree: int) -> list[dict[str, np.ndarray]]:
        """Every worker's shard of a checkpoint, in rank order."""
        n = int(self.meta(key, tree)["shards"])
        out = []
        for r in range(n):
            with self.fs.open_input_stream(f"{self._dir(key, tree)}/shard-{r:05d}.npz") as f:
                with np.load(io.BytesIO(f.read())) as z:
                    out.append({k: z[k] for k in z.files})
        return out


def take_rows(shards: list[dict[str, np.ndarray]], split: str, qid: np.ndarray) -> np.ndarray:
    """Margins of ``split`` for this worker's rows (``qid``: its rows' qids, queries contiguous).

    Shards hold whole queries in stored document order, as workers do, so each of
    this worker's queries takes the rows of that query from the shards in order.
    """
    if len(shards) == 1 and np.array_equal(shards[0][f"{split}_qid"], qid):  # same worker layout
        return shards[0][f"{split}_margin"]
    all_q = np.concatenate([s[f"{split}_qid"] for s in shards]) if shards else np.empty(0, np.int32)
    all_m = np.concatenate([s[f"{split}_margin"] for s in shards]) if shards else np.empty(0, np.float32)
    mine = np.isin(all_q, np.unique(qid))
    got_q = all_q[mine]
    if got_q.size != qid.size:
        raise CheckpointError(f"the checkpoint holds {got_q.size} {split} rows of this worker's queries, the data "
                              f"{qid.size}: it was written for other data")
    order = np.argsort(got_q, kind="stable")  # shards are qid ranges; a worker's queries are sorted by qid
    if not np.array_equal(got_q[order], qid):
        raise CheckpointError(f"the checkpoint's {split} rows do not match this worker's queries")
    return all_m[mine][order]
