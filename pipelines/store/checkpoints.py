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

Nothing changed on disk is trusted. A commit records checksums (sha256) of its own metadata and of every tree
segment it names (``segment_sha256``); :meth:`CheckpointStore.meta` and :meth:`CheckpointStore.segment` check them
when they read, and shards carry zip's CRC-32 of each array. A checkpoint whose metadata or segments fail the check
is *set aside* by :meth:`CheckpointStore.intact_latest` (its marker renamed ``_checkpoint.json.corrupt-<uuid8>``:
uncommitted, so the next commit at that tree overwrites it), with one warning naming the file and the node, and
the node goes on from its newest intact checkpoint, which the store keeps for this: the plan's states
(:func:`pipelines.plan.trie.states_of`) come from it, so what was lost is trained again, the same trees. Shards,
the bulk of a checkpoint, are checked only where a run reads them (a resumed node's newest checkpoint, a starting
node's parent's output, each path's last output: :func:`pipelines.execution.executor.execute_plan`).

Shards hold, per split, the qids of the worker's rows (queries contiguous, in
stored document order) and their float32 margins, so that a run with another
number of workers can take each of its queries' rows from whichever shard has
them (:func:`pipelines.kernel.matrices.margins_of_rows`).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import uuid
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


#: The metadata's checksum of itself (of the rest of the document, as :func:`_doc_digest` writes it).
META_DIGEST = "sha256"
#: The metadata's checksums of the node's tree segments it names: ``"<t_start>-<t_end>"`` -> sha256 hex.
SEGMENT_DIGESTS = "segment_sha256"


class CheckpointError(LtrError, RuntimeError):
    """A checkpoint that cannot be read or does not fit the data."""


class CheckpointCorrupt(CheckpointError):
    """A committed checkpoint's file whose bytes are not those its commit recorded (changed, truncated, unreadable)."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _doc_digest(doc: Mapping[str, Any]) -> str:
    """The checksum of a metadata document (without its own): of its JSON, keys sorted, as :meth:`commit` writes
    it (Python's JSON writes a float back as it read it, so a document read back has the same checksum)."""
    return _sha256(json.dumps(doc, sort_keys=True).encode())


class CheckpointStore:
    """Checkpoints of plan nodes under ``root`` (a path or URI)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self.fs, self.path = resolve(self.root)
        self._written: dict[str, str] = {}  # segment path -> checksum of what this store wrote there
        # checkpoints verified, with their shards or not (a committed checkpoint never changes)
        self._intact: set[tuple[str, int, bool]] = set()
        self._intact_segments: set[tuple[str, int, int, str | None]] = set()  # (key, start, end, checksum) read

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

    def put_record(self, path: str, doc: Mapping[str, Any]) -> None:
        """Write the JSON document ``doc`` whole to ``path`` (a diagnostic record, e.g. a plan record) with its
        checksum, which :meth:`read_record` checks: ``{"doc": doc, "sha256": ...}``."""
        doc = json.loads(json.dumps(doc, sort_keys=True, default=str))  # as it will read back
        self.put(path, json.dumps({"doc": doc, META_DIGEST: _doc_digest(doc)}, sort_keys=True).encode())

    def read_record(self, path: str) -> tuple[dict[str, Any], str | None]:
        """The document :meth:`put_record` wrote at ``path`` and None, or ``({}, why)`` when it cannot be trusted
        (unreadable, not JSON, changed on disk since it was written); ``({}, None)`` when there is none. A record
        of an older ltr (the document alone, no checksum) is taken as it is."""
        try:
            with self.fs.open_input_stream(path) as f:
                raw = json.loads(f.read().decode())
        except FileNotFoundError:
            return {}, None
        except (OSError, ValueError) as e:
            return {}, f"{path} is unreadable ({type(e).__name__}: {e})"
        if not isinstance(raw, dict):
            return {}, f"{path} is not a JSON object"
        if set(raw) != {"doc", META_DIGEST}:
            return raw, None
        if not isinstance(raw["doc"], dict) or _doc_digest(raw["doc"]) != raw[META_DIGEST]:
            return {}, f"{path} does not match the checksum it was written with (it changed on disk)"
        return raw["doc"], None

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
        path = self.segment_path(key, t_start, t_end)
        self.put(path, model)
        self._written[path] = _sha256(model)

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
        doc: dict[str, Any] = {**meta, "tree": tree}
        if "segments" in meta:
            doc[SEGMENT_DIGESTS] = self._segment_digests(key, tree, meta["segments"])
        doc[META_DIGEST] = _doc_digest(doc)
        self.put(f"{self.node_dir(key, tree)}/{MARKER}", json.dumps(doc, sort_keys=True).encode())
        older = [t for t in self.trees(key) if t < tree]
        for old in older[:-1]:  # keep the previous checkpoint: a reader may be loading it
            self.delete(key, old)

    def _segment_digests(self, key: str, tree: int, segments: list[list[int]]) -> dict[str, str]:
        """The checksums of ``segments`` of node ``key`` for its commit at ``tree``: of the bytes this store wrote,
        else as the node's previous checkpoint recorded them (a resumed node's earlier segments), else of the file
        as it is (a checkpoint committed before checksums were recorded)."""
        out = {f"{a}-{b}": self._written.get(self.segment_path(key, a, b)) for a, b in segments}
        if all(out.values()):  # a node trained by this store from its start: no read
            return {k: v for k, v in out.items() if v}
        known: dict[str, str] = {}
        older = [t for t in self.trees(key) if t < tree]
        if older:
            try:
                known = dict(self.meta(key, older[-1]).get(SEGMENT_DIGESTS, {}))
            except CheckpointError:  # gone or corrupt: the segments' own bytes below
                known = {}
        done: dict[str, str] = {}
        for a, b in segments:
            name = f"{a}-{b}"
            digest = out[name] or known.get(name)
            done[name] = digest if digest is not None else _sha256(self.segment(key, a, b))
        return done

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
            doc = json.loads(raw.decode())
            if not isinstance(doc, dict):
                raise ValueError(f"a JSON {type(doc).__name__}, not an object")
        except ValueError as e:
            raise CheckpointCorrupt(
                f"checkpoint {self._where(key, tree)} of node {key}: {MARKER} is unreadable: {e}"
            ) from None
        want = doc.pop(META_DIGEST, None)
        if want is not None and _doc_digest(doc) != want:
            raise CheckpointCorrupt(
                f"checkpoint {self._where(key, tree)} of node {key}: {MARKER} does not match the checksum it was "
                "committed with (it changed on disk)"
            )
        return doc

    def cost(self, keys: list[str]) -> dict[str, float]:
        """Rank 0's seconds (boost, objective, eval, checkpoint) and trees over the newest checkpoints of
        ``keys``: what the committed trees cost, resumed attempts included (work lost to a crash is not)."""
        total: dict[str, float] = {}
        for key, tree in self.latest_all(keys).items():
            if tree is not None:
                for k, v in self.meta(key, tree).get("cost", {}).items():
                    total[k] = total.get(k, 0.0) + v
        return total

    def segment(self, key: str, t_start: int, t_end: int, digest: str | None = None) -> bytes:
        """The trees ``t_start..t_end`` of node ``key`` as :meth:`write_segment` wrote them (XGBoost JSON), checked
        against ``digest`` (the checksum a commit recorded, ``meta[SEGMENT_DIGESTS]``) when one is given.

        Raises
        ------
        CheckpointError
            When the segment cannot be read (removed with its node, or never written); :class:`CheckpointCorrupt`
            when its bytes are not those ``digest`` was taken of.
        """
        path = self.segment_path(key, t_start, t_end)
        try:
            with self.fs.open_input_stream(path) as f:
                data = f.read()
        except OSError as e:
            raise CheckpointError(
                f"segment {self.root}/{key}/trees-{t_start:06d}-{t_end:06d}.json of node {key} is "
                f"unreadable (is the node's checkpoint still there? list again): {e}"
            ) from None
        if digest is not None and _sha256(data) != digest:
            raise CheckpointCorrupt(
                f"segment {self.root}/{key}/trees-{t_start:06d}-{t_end:06d}.json of node {key} does not match the "
                "checksum its checkpoint recorded (it changed on disk)"
            )
        return data

    def segments(self, key: str, meta: Mapping[str, Any]) -> list[tuple[bytes, int]]:
        """The tree segments a checkpoint's ``meta`` names, each checked against the checksum the commit recorded
        (none for a checkpoint committed before checksums were), and its number of trees."""
        digests = meta.get(SEGMENT_DIGESTS, {})
        return [(self.segment(key, a, b, digests.get(f"{a}-{b}")), b - a) for a, b in meta["segments"]]

    # -- integrity ---------------------------------------------------------
    def verify(self, key: str, tree: int, shards: bool = False) -> None:
        """Check checkpoint ``tree`` of node ``key``: its metadata and every segment it names against the checksums
        its commit recorded, and with ``shards`` every worker's shard against zip's CRC-32 of its arrays (once a
        store: a committed checkpoint never changes). Raises :class:`CheckpointCorrupt` (or
        :class:`CheckpointError` for a checkpoint that is gone)."""
        if (key, tree, shards) in self._intact or (key, tree, True) in self._intact:
            return
        meta = self.meta(key, tree)
        digests = meta.get(SEGMENT_DIGESTS, {})
        for a, b in meta.get("segments", []):  # a segment named by several checkpoints of the node is read once
            seen = (key, a, b, digests.get(f"{a}-{b}"))
            if seen not in self._intact_segments:
                self.segment(*seen)
                self._intact_segments.add(seen)
        if shards and "shards" in meta:
            self.shards(key, tree)
        self._intact.add((key, tree, shards))

    def set_aside(self, key: str, tree: int) -> None:
        """Uncommit checkpoint ``tree`` of node ``key``: its marker renamed ``_checkpoint.json.corrupt-<uuid8>`` (kept
        to be looked at), so that listings skip it and the node's next commit at that tree overwrites it."""
        self.set_aside_file(f"{self.node_dir(key, tree)}/{MARKER}")
        self._intact -= {(key, tree, False), (key, tree, True)}

    def set_aside_file(self, path: str) -> None:
        """Rename ``path`` (a path on :attr:`fs`) to ``<path>.corrupt-<uuid8>``, kept to be looked at; nothing when
        another reader set it aside (or replaced it) meanwhile."""
        try:
            self.fs.move(path, f"{path}.corrupt-{uuid.uuid4().hex[:8]}")
        except FileNotFoundError:
            pass

    def intact_latest(self, key: str, shards: bool = False) -> int | None:
        """Tree of the newest checkpoint of node ``key`` that passes :meth:`verify` (``shards``: its shards too);
        those newer that fail it are set aside (:meth:`set_aside`), each with one warning. None when no intact
        checkpoint is left."""
        while True:
            trees = self.trees(key)
            if not trees:
                return None
            tree = trees[-1]
            try:
                self.verify(key, tree, shards)
                return tree
            except CheckpointCorrupt as e:
                log.warning("%s: set aside, the node goes on from its newest intact checkpoint", e)
                self.set_aside(key, tree)
            except CheckpointError:
                if tree in self.trees(key):
                    raise
                # replaced by a newer commit after it was listed: list again

    def node_keys(self) -> list[str]:
        """Every node folder under the root (not ``_cuts``, ``_runs``, ``_plans``), sorted."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory and i.base_name[:1] != "_")

    def cuts_keys(self) -> list[str]:
        """The keys of every cuts file under ``_cuts`` (:meth:`cuts_path`), sorted."""
        return self._names(CUTS_DIR, ".npz")

    def plan_records(self) -> list[str]:
        """Every plan record under ``_plans`` (:meth:`plan_record_path`), as paths on :attr:`fs`, sorted."""
        return [f"{self.path}/{PLANS_DIR}/{n}.json" for n in self._names(PLANS_DIR, ".json")]

    def _names(self, folder: str, suffix: str) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(f"{self.path}/{folder}", allow_not_found=True))
        return sorted(
            i.base_name[: -len(suffix)] for i in infos if i.type == pafs.FileType.File and i.base_name.endswith(suffix)
        )

    def audit(self, key: str) -> tuple[int | None, int | None, list[str]]:
        """What :meth:`intact_latest` (with shards) would find for node ``key``, read-only: its newest committed
        checkpoint's tree, its newest intact checkpoint's tree (None: none, the node trains from its start), and
        one line for each newer checkpoint that fails its checks."""
        trees = self.trees(key)
        problems: list[str] = []
        for tree in reversed(trees):
            try:
                self.verify(key, tree, shards=True)
                return trees[-1], tree, problems
            except CheckpointCorrupt as e:
                problems.append(str(e))
        return (trees[-1] if trees else None), None, problems

    def intact_latest_all(self, keys: list[str]) -> dict[str, int | None]:
        """Node key -> :meth:`intact_latest` for each of ``keys``."""
        return {k: self.intact_latest(k) for k in keys}

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
                raise CheckpointCorrupt(
                    f"checkpoint {self._where(key, tree)} of node {key}: shard-{r:05d}.npz is unreadable: {e}"
                ) from None
        return out
