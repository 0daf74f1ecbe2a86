"""A worker's rows: Arrow batches in, bin codes and XGBoost's quantised matrices out.

This module is the whole data path of a training worker, and where its memory goes:

1. :func:`from_batches`: the barrier task's Arrow batches (any order) are binned on the fold's
   cuts as they arrive (:class:`udfs.trees.Binner`, one batch of float32 at a time): each split
   is kept as uint16 bin codes (half of float32) plus labels, qids and positions; no split is
   ever held as float32. Each split's rows are then put in (qid, doc) order in place, and the
   training split's codes go to a local file when they are more than ``train.codes_in_memory_gib``
   (:class:`SpilledCodes`: XGBoost's matrix holds its own bin indexes, so the codes are only read
   again when a matrix is built or a subset's complement is walked; codes that came in (qid, doc) order go
   there batch by batch, never joined in memory).
2. :func:`training_matrix`: XGBoost's ``QuantileDMatrix`` on the fold's cuts (``ref=``), fed
   by a ``DataIter`` that decodes one chunk of whole queries at a time into each bin's
   representative value (a value that falls in that bin: the cut below it). The matrix's bins,
   and so the trees, are those of the original floats (tested); the float chunk is freed
   after XGBoost has binned it. Curriculum subsets get their matrix the same way; the boosting
   loop keeps one training matrix at a time (:meth:`pipelines.kernel.loop._Worker.training_matrix`).
3. Vali, test and a subset's complement are walked as codes by :func:`udfs.trees.add_tree`.
   Every split of a ``hist`` tree on the fold's cuts is at a cut, so the codes decide it
   exactly; a tree with a split that is not a cut (not ``hist``, other cuts) cannot be walked
   without the floats, and :func:`walkable` raises instead of guessing.

After loading, a worker holds: the codes of its three splits (2 bytes a value; the training split's in a
local file beyond ``train.codes_in_memory_gib``), XGBoost's quantised training matrix of the node it trains,
all rows or a subset's (about 2 bytes a value with at most 256 bins: a row-wise and a column-wise bin index),
labels, qids, offsets and margins.
The buffers freed while loading and while a matrix is built go back to the OS: both run inside
:func:`pipelines.kernel.env.returning_freed_memory`. RESULTS.md ("Memory") has the measured figures.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numba
import numpy as np
import pyarrow as pa
import xgboost as xgb

from pipelines.core.errors import LtrError, UserError, crosses_tasks
from pipelines.kernel.env import without_huge_pages
from udfs import schema
from udfs.metrics import offsets_from_qids
from udfs.trees import MISSING, Binner, Cuts, add_tree

log = logging.getLogger(__name__)

SPLIT_COL = "_split"
FEATURES_COL = "_features"  # a row's features as one array<float> column (pipelines.execution.barrier_job)
SPLITS = ("train", "vali", "test")
CHUNK_ROWS = 65_536  # rows decoded to float32 at a time for XGBoost (whole queries; 35 MB at 136 features)


@crosses_tasks
class DataError(UserError):
    """Rows a worker cannot train on (the message names the column and the curriculum)."""


class ResumeError(LtrError):
    """A checkpoint's margins that do not fit this worker's rows (written for other data)."""


# ------------------------------------------------------------ codes on local disk
class SpilledCodes:
    """A split's uint16 bin codes [rows, features] in a local file, read a block of rows at a time.

    Why: XGBoost's quantised training matrix holds two bin indexes of its own (row-wise and column-wise, a byte
    a value each with at most 256 bins), and it is built from the codes in three passes (count, row index,
    column index), so codes and matrix would be in memory together for the whole training, each as large as
    the other. The training split's codes are
    read only when a matrix is built and when a curriculum subset's complement is walked, a chunk at a time,
    so a local file serves them: the page cache keeps it where memory is free, and the kernel can drop it and
    read it again where memory is short (a process's own memory it cannot). Vali and test, walked every tree,
    stay in memory.

    The file is unlinked as soon as it is made: it lives as long as this object's descriptor, and nothing is left
    on disk when the worker ends, a kill included. Reads are ``os.preadv`` into fresh arrays (no ``mmap``: mapped
    pages would count as the process's memory while it runs)."""

    #: rows read at most in one block by :meth:`take` (a subset's rows are sparse: its block is bounded)
    WINDOW = 65_536

    def __init__(self, n_rows: int, n_features: int, where: str | None = None) -> None:
        self.fd: int | None = None  # before mkstemp, which may fail: __del__ then has nothing to close
        fd, path = tempfile.mkstemp(prefix="ltr-codes-", suffix=".u16", dir=where)
        os.unlink(path)
        self.fd = fd
        self.shape = (n_rows, n_features)
        self.dtype = np.dtype(np.uint16)
        self.row_bytes = n_features * self.dtype.itemsize

    def write(self, start: int, block: np.ndarray) -> None:
        """Rows ``start..start + len(block)`` of the file are ``block`` (uint16, [rows, features])."""
        view = np.ascontiguousarray(block, self.dtype).data.cast("B")
        at = start * self.row_bytes
        while view.nbytes:
            n = os.pwrite(self._fd(), view, at)
            view, at = view[n:], at + n

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo..hi`` (exclusive) as a new array."""
        out = np.empty((max(hi - lo, 0), self.shape[1]), self.dtype)
        view, at = out.data.cast("B"), lo * self.row_bytes
        while view.nbytes:
            n = os.preadv(self._fd(), [view], at)
            if n == 0:
                raise DataError(f"the bin codes' file ended at byte {at} (rows {lo}..{hi} of {self.shape[0]})")
            view, at = view[n:], at + n
        return out

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The codes of ``rows`` (ascending row numbers), in that order: read in blocks of at most
        :attr:`WINDOW` rows of the file."""
        out = np.empty((rows.size, self.shape[1]), self.dtype)
        i = 0
        while i < rows.size:
            lo = int(rows[i])
            j = int(np.searchsorted(rows, lo + self.WINDOW, side="left"))
            block = self.read(lo, int(rows[j - 1]) + 1)
            out[i:j] = block[rows[i:j] - lo]
            i = j
        return out

    def close(self) -> None:
        """Close the descriptor (and so free the file's blocks)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _fd(self) -> int:
        if self.fd is None:
            raise DataError("the bin codes' file was closed")
        return self.fd

    def __del__(self) -> None:
        self.close()


def spill(codes: np.ndarray, where: str | None = None, chunk_rows: int = 65_536) -> SpilledCodes:
    """``codes`` written to a :class:`SpilledCodes` file, ``chunk_rows`` rows at a time."""
    blocks = (codes[a : a + chunk_rows] for a in range(0, codes.shape[0], chunk_rows))
    return spill_blocks(blocks, codes.shape[0], codes.shape[1], where)


def spill_blocks(blocks: Iterable[np.ndarray], n_rows: int, n_features: int, where: str | None = None) -> SpilledCodes:
    """``blocks`` (uint16 [rows, features], ``n_rows`` in all) written one after the other to a
    :class:`SpilledCodes` file."""
    nbytes = n_rows * n_features * np.dtype(np.uint16).itemsize
    try:
        out = SpilledCodes(n_rows, n_features, where)
        at = 0
        for block in blocks:
            out.write(at, block)
            at += block.shape[0]
    except OSError as e:  # a full or read-only local directory: say which, how much, and the way out
        raise DataError(
            f"could not write the training rows' bin codes ({nbytes / 2**30:.2f} GiB) to a local file in "
            f"{where or tempfile.gettempdir()}: {e.strerror or e}; free space there (spark.local.dir), or keep "
            f"them in memory with --set train.codes_in_memory_gib={nbytes / 2**30 + 1:.0f}"
        ) from None
    if at != n_rows:
        raise DataError(f"{at} rows of bin codes written to the local file, {n_rows} expected")
    return out


def codes_of_rows(codes: np.ndarray | SpilledCodes, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(array, index): ``array[index]`` are the codes of ``rows`` (ascending), without a copy where the codes are
    in memory, read from the file where they are spilled."""
    if isinstance(codes, SpilledCodes):
        return codes.take(rows), np.arange(rows.size, dtype=np.int64)
    return codes, rows


def add_trees_to_rows(
    codes: np.ndarray | SpilledCodes, trees: list[tuple[np.ndarray, ...]], out: np.ndarray, rows: np.ndarray
) -> None:
    """``out[rows] += tree(codes[rows])`` for each of ``trees`` in order (``rows`` ascending): in place where the
    codes are in memory; a chunk of rows at a time where they are in a file, every tree on a chunk (each row gets
    the same sums in the same order)."""
    if not isinstance(codes, SpilledCodes):
        for tree in trees:
            add_tree(codes, tree, out, rows, codes=codes)
        return
    for a in range(0, rows.size, CHUNK_ROWS):
        idx = rows[a : a + CHUNK_ROWS]
        block, part = codes.take(idx), out[idx]
        for tree in trees:
            add_tree(block, tree, part, codes=block)
        out[idx] = part


def local_dir() -> str | None:
    """Where a worker writes scratch files: the executor's first local directory (``SPARK_LOCAL_DIRS``, set for
    PySpark's workers, Spark's ``spark.local.dir``), else the system's temporary directory."""
    return os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None


# ------------------------------------------------------------ splits
@dataclass
class SplitData:
    """Rows of one split held by this worker, queries contiguous in (qid, doc) order.

    ``codes``: the rows' bin codes on the fold's cuts (what training keeps). ``X``: float32 rows, only
    where a caller hands rows in memory (tests, the local twin); :func:`encode` turns them into codes.
    """

    X: np.ndarray | None  # float32 [rows, features], or None once coded
    y: np.ndarray  # float32 labels
    qid: np.ndarray  # int32
    doc: np.ndarray | None = None  # int32 position of the row in its query as stored (default: row order)
    codes: np.ndarray | SpilledCodes | None = None  # uint16 [rows, features] (udfs.trees.bin_codes)

    def __post_init__(self) -> None:
        self.offsets = offsets_from_qids(self.qid)
        if self.doc is None:
            self.doc = (np.arange(self.qid.size) - np.repeat(self.offsets[:-1], np.diff(self.offsets))).astype(np.int32)

    @property
    def docs(self) -> np.ndarray:
        """``doc``, which ``__post_init__`` fills (never None once the split is built)."""
        if self.doc is None:
            raise DataError("a split without doc positions (built around __post_init__?)")
        return self.doc

    def coded(self) -> np.ndarray:
        """``codes`` in memory; a :class:`DataError` when the split still holds float rows (:func:`encode` it
        first) or its codes are in a file (:meth:`codes_or_file`)."""
        codes = self.codes_or_file()
        if isinstance(codes, SpilledCodes):
            raise DataError("this split's bin codes are in a local file: read them with codes_of_rows()")
        return codes

    def codes_or_file(self) -> np.ndarray | SpilledCodes:
        """``codes``, in memory or spilled; a :class:`DataError` when the split still holds float rows."""
        if self.codes is None:
            raise DataError("this split holds float rows, not bin codes: encode() it against the fold's cuts first")
        return self.codes

    @property
    def n_queries(self) -> int:
        """Number of queries in the split."""
        return int(self.offsets.size - 1)

    @property
    def nbytes(self) -> int:
        """Bytes held in memory by the split's arrays (rows or codes, labels, qids, positions, offsets; codes in a
        file are not counted)."""
        arrays = (self.X, self.y, self.qid, self.doc, self.codes, self.offsets)
        return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))


@dataclass
class WorkerData:
    """What one worker trains on: train rows plus optional vali/test, and for every
    curriculum the first stage of each train row (``stages[name]``)."""

    train: SplitData
    vali: SplitData | None = None
    test: SplitData | None = None
    stages: dict[str, np.ndarray] = field(default_factory=dict)
    label_filters: dict[str, dict[int, list[int]]] = field(default_factory=dict)

    def rows(self, data: str) -> np.ndarray | None:
        """Train rows of a segment's data (None = all)."""
        if data == "all":
            return None
        name, stage = data.split(".")
        st = int(stage)
        mask = self.stages[name] <= st
        labels = self.label_filters.get(name, {}).get(st)
        if labels is not None:
            mask &= np.isin(self.train.y, labels)
        # Never None here, even if the mask covers every local row: the decision must be
        # the same on all workers (their collective calls must match).
        return np.flatnonzero(mask)

    @property
    def coded(self) -> bool:
        """Whether every split present is held as bin codes (training needs them: :func:`encode`)."""
        return all(sp.codes is not None for sp in (self.train, self.vali, self.test) if sp is not None)


def encode(data: WorkerData, cuts: Cuts) -> WorkerData:
    """``data`` with every split's floats replaced by their bin codes (a new object: the caller's keeps its X)."""

    binner = Binner(cuts)

    def one(sp: SplitData) -> SplitData:
        """``sp`` as codes: a new :class:`SplitData` without ``X``; ``sp`` itself when already coded."""
        if sp.codes is not None:
            return sp
        return SplitData(None, sp.y, sp.qid, sp.doc, binner(np.asarray(sp.X, np.float32)))

    return replace(
        data,
        train=one(data.train),
        vali=None if data.vali is None else one(data.vali),
        test=None if data.test is None else one(data.test),
    )


# ------------------------------------------------------------ Arrow batches -> codes
class _Columns:
    """A batch's feature columns, one after the other ([features, rows] float32), in one buffer kept for every
    batch: copying a column is then one contiguous copy, and the buffer's pages are touched once, not once a
    batch (:class:`udfs.trees.Binner` bins it column by column)."""

    def __init__(self, n_features: int) -> None:
        self.n_features = n_features
        self.buf = np.empty(0, np.float32)

    def of(self, batch: pa.RecordBatch, feats: list[str]) -> np.ndarray:
        """``batch``'s features as [rows, features] (a column-order view of the buffer, valid until the next
        call)."""
        n = batch.num_rows * self.n_features
        if self.buf.size < n:
            self.buf = np.empty(n, np.float32)
        XT = self.buf[:n].reshape(self.n_features, batch.num_rows)
        for j, f in enumerate(feats):
            XT[j] = batch.column(f).to_numpy(zero_copy_only=False)
        return XT.T


class _Builder:
    """One split's rows as they stream in: lists of per-batch arrays, joined once at the end."""

    def __init__(self, n_features: int, curricula: list[str], columns: _Columns) -> None:
        self.n_features = n_features
        self.columns = columns
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in ("codes", "y", "qid", "doc", *curricula)}
        self.curricula = curricula

    def add(self, batch: pa.RecordBatch, feats: list[str], binner: Binner) -> None:
        """Keep the rows of ``batch`` (all of this split): their bin codes on ``cuts``, labels, qids, positions
        and curriculum stages.

        Parameters
        ----------
        batch : pa.RecordBatch
            Rows of this split.
        feats : list[str]
            The feature columns, in feature order.
        binner : Binner
            The fold's cuts the features are binned on.

        Raises
        ------
        DataError
            When a row has no stage in one of the curriculum columns.
        """
        if FEATURES_COL in batch.schema.names:  # one list column: its values are the rows, row after row
            X = features_of_column(batch.column(FEATURES_COL), self.n_features)
        else:
            X = self.columns.of(batch, feats)
        self.parts["codes"].append(binner(X))
        del X
        self.parts["y"].append(batch.column(schema.LABEL).to_numpy(zero_copy_only=False).astype(np.float32))
        self.parts["qid"].append(batch.column(schema.QID).to_numpy(zero_copy_only=False).astype(np.int32))
        self.parts["doc"].append(batch.column(schema.DOC).to_numpy(zero_copy_only=False).astype(np.int32))
        for c in self.curricula:
            col = batch.column(c)
            if col.null_count:
                raise DataError(
                    f"{col.null_count} training rows have no stage in curriculum column {c} "
                    "(their queries are missing from the curriculum); rebuild it with `ltr curriculum`"
                )
            self.parts[c].append(col.to_numpy(zero_copy_only=False).astype(np.int32))

    def finish(
        self, spill_over: float = float("inf"), where: str | None = None
    ) -> tuple[SplitData, dict[str, np.ndarray]]:
        """The split's rows joined and put in (qid, doc) order, the per-batch parts freed as they are copied.

        Parameters
        ----------
        spill_over : float
            Codes of more bytes than this go to a local file (:class:`SpilledCodes`, in ``where``) once ordered.
        where : str, optional
            The file's directory (default: the system's temporary directory).

        Returns
        -------
        tuple[SplitData, dict[str, np.ndarray]]
            The split (codes, no floats) and, per curriculum column, each row's first stage in the same order.
        """
        parts = self.parts.pop("codes")
        n_rows = sum(p.shape[0] for p in parts)
        nbytes = n_rows * self.n_features * np.dtype(np.uint16).itemsize
        cols = {k: _join(v, (0,), np.int32 if k != "y" else np.float32) for k, v in self.parts.items()}
        order = np.lexsort((cols["doc"], cols["qid"]))
        in_order = np.array_equal(order, np.arange(order.size))
        kept: np.ndarray | SpilledCodes
        if in_order and nbytes > spill_over:
            # rows that came in (qid, doc) order (a split of one file) go to the file batch by batch: the codes
            # are never joined in memory
            kept = spill_blocks(_emptied(parts), n_rows, self.n_features, where)
        else:
            codes = _join(parts, (0, self.n_features), np.uint16)
            if not in_order:
                _permute_rows(codes, order.astype(np.int64))  # in place: no second copy of the codes
                cols = {k: v[order] for k, v in cols.items()}
            kept = spill(codes, where) if nbytes > spill_over else codes
            del codes
        if isinstance(kept, SpilledCodes):
            log.info("training rows' bin codes (%.2f GiB) in a local file in %s", nbytes / 2**30, where or "tmp")
        stages = {c: cols.pop(c) for c in self.curricula}
        return SplitData(None, cols["y"], cols["qid"], cols["doc"], kept), stages


def _emptied(parts: list[np.ndarray]) -> Iterator[np.ndarray]:
    """The parts in order, each dropped from the list as it is handed out (freed once the caller lets go)."""
    parts.reverse()
    while parts:
        yield parts.pop()


def _join(parts: list[np.ndarray], empty: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The parts one after the other, each freed once copied (the list is emptied)."""
    if not parts:
        return np.zeros(empty, dtype)
    n = sum(p.shape[0] for p in parts)
    out = np.empty((n, *parts[0].shape[1:]), parts[0].dtype)
    at = 0
    for p in _emptied(parts):
        out[at : at + p.shape[0]] = p
        at += p.shape[0]
    return out


@numba.njit(cache=True, nogil=True)
def _permute_rows(A, order):  # pragma: no cover - compiled
    """``A[:] = A[order]`` in place, following the permutation's cycles with one row of buffer."""
    n = A.shape[0]
    done = np.zeros(n, np.bool_)
    tmp = np.empty(A.shape[1], A.dtype)
    for i in range(n):
        if done[i] or order[i] == i:
            done[i] = True
            continue
        tmp[:] = A[i]
        j = i
        while True:
            done[j] = True
            k = order[j]
            if k == i:
                A[j] = tmp
                break
            A[j] = A[k]
            j = k


def features_of_column(arr: pa.Array, n_features: int) -> np.ndarray:
    """The float32 rows [rows, n_features] of a :data:`FEATURES_COL` list column (a view of Arrow's values where
    it can be: no null element); a :class:`DataError` when a row is null or not ``n_features`` long."""
    if arr.null_count:
        raise DataError(f"{arr.null_count} rows without features in {FEATURES_COL}")
    if (arr.value_lengths().to_numpy(zero_copy_only=False) != n_features).any():
        raise DataError(f"{FEATURES_COL} rows are not {n_features} features each")
    values = arr.flatten()  # the values of this (maybe sliced) array's rows only
    return values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(len(arr), n_features)


def from_batches(
    batches: Iterable[pa.RecordBatch],
    n_features: int,
    cuts: Cuts,
    curricula: list[dict[str, Any]],
    spill_over: float = float("inf"),
    where: str | None = None,
) -> WorkerData:
    """A worker's :class:`WorkerData` from its Arrow batches (columns: the split code ``_split``, qid, doc,
    label, the features, one column each or all in :data:`FEATURES_COL`, and each curriculum's first-stage
    column), binned on ``cuts`` as they stream in. The training split's codes go to a local file in ``where``
    when they are more than ``spill_over`` bytes (:class:`SpilledCodes`); vali's and test's stay in memory."""
    feats = schema.feature_cols(n_features)
    cols = [c["column"] for c in curricula]
    columns = _Columns(n_features)
    builders = [_Builder(n_features, cols if i == 0 else [], columns) for i in range(len(SPLITS))]
    binner = Binner(cuts)  # its tables built once for every batch
    with without_huge_pages():  # arrays written once here: no wait for the kernel's compaction
        for batch in batches:
            if not batch.num_rows:
                continue
            split = batch.column(SPLIT_COL).to_numpy(zero_copy_only=False)
            for code in np.unique(split):
                part = batch if (split == code).all() else batch.filter(pa.array(split == code))
                builders[int(code)].add(part, feats, binner)
        out = [b.finish(spill_over if i == 0 else float("inf"), where) for i, b in enumerate(builders)]
    stages = {c["name"]: out[0][1][c["column"]] for c in curricula}
    return WorkerData(
        train=out[0][0],
        vali=out[1][0],
        test=out[2][0],
        stages=stages,
        label_filters={c["name"]: {int(k): v for k, v in c["label_filters"].items()} for c in curricula},
    )


# ------------------------------------------------------------ codes -> XGBoost
def representatives(cuts: Cuts) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, values): per feature, for every bin code ``c``, a float32 whose code is ``c``:
    just below the first cut for 0, else the ``c``-th cut (XGBoost bins ``x`` by the first cut above it)."""
    indptr, values = cuts
    n = np.diff(indptr)
    rptr = np.concatenate([[0], np.cumsum(n + 1)]).astype(np.int64)
    reps = np.zeros(int(rptr[-1]), np.float32)
    for j in range(n.size):
        v = values[indptr[j] : indptr[j + 1]]
        if v.size:
            reps[rptr[j]] = np.nextafter(v[0], np.float32(-np.inf))
            reps[rptr[j] + 1 : rptr[j + 1]] = v
    return rptr, reps


@numba.njit(cache=True, nogil=True, parallel=True)
def _decode(C, rows, rptr, reps, out):  # pragma: no cover - compiled
    for i in numba.prange(rows.size):
        r = rows[i]
        for j in range(C.shape[1]):
            c = C[r, j]
            out[i, j] = np.nan if c == 65535 else reps[rptr[j] + c]


def decode(codes: np.ndarray, rows: np.ndarray, reps: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """float32 representatives of ``codes[rows]`` (NaN where the code is :data:`MISSING`)."""
    out = np.empty((rows.size, codes.shape[1]), np.float32)
    if rows.size:
        _decode(codes, rows.astype(np.int64, copy=False), reps[0], reps[1], out)
    return out


class _CodesIter(xgb.DataIter):
    """Chunks of whole queries of ``split`` (``rows`` of it, or all), decoded for XGBoost one at a time."""

    def __init__(
        self, split: SplitData, rows: np.ndarray | None, reps: tuple[np.ndarray, np.ndarray], chunk_rows: int
    ) -> None:
        self.split, self.reps = split, reps
        self.rows = np.arange(split.y.size, dtype=np.int64) if rows is None else rows.astype(np.int64, copy=False)
        offsets = offsets_from_qids(split.qid[self.rows])
        ends = offsets[
            np.unique(
                np.searchsorted(offsets, np.arange(1, offsets[-1] // max(chunk_rows, 1) + 2) * chunk_rows, side="right")
                - 1
            )
        ]
        self.bounds = np.unique(np.concatenate([[0], ends, [offsets[-1]]])).astype(np.int64)
        self.i = 0
        super().__init__(release_data=True)

    def next(self, input_data: Any) -> bool:
        """Hand XGBoost the next chunk of whole queries, decoded to float32, with its labels and qids.

        Returns
        -------
        bool
            False when every chunk has been handed (XGBoost's ``DataIter`` protocol), else True.
        """
        if self.i + 1 >= self.bounds.size:
            return False
        idx = self.rows[self.bounds[self.i] : self.bounds[self.i + 1]]
        sp = self.split
        codes, at = codes_of_rows(sp.codes_or_file(), idx)
        input_data(data=decode(codes, at, self.reps), label=sp.y[idx], qid=sp.qid[idx])
        self.i += 1
        return True

    def reset(self) -> None:
        """Start again from the first chunk (XGBoost iterates more than once)."""
        self.i = 0


def training_matrix(
    split: SplitData,
    ref: Any,
    max_bin: int,
    nthread: int = 0,
    rows: np.ndarray | None = None,
    reps: tuple[np.ndarray, np.ndarray] | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> Any:
    """XGBoost's ``QuantileDMatrix`` of ``split`` (``rows`` of it: a curriculum subset) on ``ref``'s cuts,
    from its bin codes; the same bins as a matrix of the original floats."""
    if split.codes is None:
        raise ValueError("training_matrix needs the split's bin codes (worker_data.encode)")
    if reps is None:
        reps = representatives(_cuts_of(ref))
    n = split.y.size if rows is None else rows.size
    if n == 0:  # a worker with no row of this subset: XGBoost's iterator wants at least one batch
        return xgb.QuantileDMatrix(
            np.zeros((0, split.codes_or_file().shape[1]), np.float32),
            label=np.zeros(0, np.float32),
            qid=np.zeros(0, np.int32),
            ref=ref,
            max_bin=max_bin,
            nthread=nthread,
        )
    return xgb.QuantileDMatrix(_CodesIter(split, rows, reps, chunk_rows), ref=ref, max_bin=max_bin, nthread=nthread)


def _cuts_of(matrix: Any) -> Cuts:
    indptr, values = matrix.get_quantile_cut()
    return np.asarray(indptr, np.int64), np.asarray(values, np.float32)


def matrix_cuts(matrix: Any) -> Cuts:
    """The cuts of a ``QuantileDMatrix`` (the fold's reference matrix) as :func:`udfs.trees.bin_codes` wants them."""
    cuts = _cuts_of(matrix)
    if np.diff(cuts[0]).max(initial=0) >= int(MISSING):
        raise ValueError(
            f"a feature has {int(np.diff(cuts[0]).max())} cuts: bin codes hold at most "
            f"{int(MISSING) - 1} (lower train.max_bin)"
        )
    return cuts


def walkable(tree: tuple[np.ndarray, ...], index: int) -> tuple[np.ndarray, ...]:
    """``tree`` if every split is at one of the fold's cuts (six arrays: :func:`udfs.trees.tree_arrays` found
    each split's cut), else an error: the worker keeps codes, not floats, so such a tree cannot be walked."""
    if len(tree) != 6:
        raise RuntimeError(
            f"tree {index} splits at a value that is not one of the fold's cuts; the worker keeps "
            "bin codes, not floats, so it cannot add the tree to its margins (XGBoost's hist trees "
            "split only at their matrix's cuts: is train.tree_method another?)"
        )
    return tree


def margins_of_rows(shards: list[dict[str, np.ndarray]], split: str, qid: np.ndarray) -> np.ndarray:
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
        raise ResumeError(
            f"the checkpoint holds {got_q.size} {split} rows of this worker's queries, the data "
            f"{qid.size}: it was written for other data"
        )
    order = np.argsort(got_q, kind="stable")  # shards are qid ranges; a worker's queries are sorted by qid
    if not np.array_equal(got_q[order], qid):
        raise ResumeError(f"the checkpoint's {split} rows do not match this worker's queries")
    return all_m[mine][order]
