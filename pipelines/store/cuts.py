"""A fold's histogram cuts: global, deterministic, computed once and given to every worker.

XGBoost's ``hist`` trees split only at the training matrix's quantile cuts. Built
by each worker from its own rows (``QuantileDMatrix`` in a collective merges the
workers' sketches), the cuts, and so the trees, depended on how many workers
built them: a checkpoint written by 2 workers and resumed by 1 mixed two models.
Here the cuts of a fold are computed once, from a deterministic sample of the
fold's training rows, and every worker builds its matrix with them (``ref=``):
1, 2 or N workers, ``--parallel`` or all-reduce, build the same trees, up to the
summation order of histogram sums.

The sample: every training query whose ``xxhash64(qid)`` falls under a threshold
chosen so that about ``sample_rows`` rows are kept (whole queries, like
LightGBM's 200,000-row bin sample, but chosen by qid so that it does not depend
on the input's partitioning); all rows when the split has no more than
``sample_rows``. The driver reads it from the split's Parquet with pyarrow (no Spark job) and
sketches it, rows sorted by (qid, doc) (XGBoost's sketch depends on row order, not on its thread count), so the cuts
are a function of the data alone. They are stored under their key
(:func:`pipelines.core.keys.cuts_key`) in the checkpoint store, ``ROOT/_cuts/<key>.npz``
(:meth:`pipelines.store.checkpoints.CheckpointStore.cuts_path`), and reused by every later job of the fold.

Handing the cuts to a worker: XGBoost has no setter for cuts, so the worker
builds a tiny reference matrix that sketches to exactly these cuts (per feature:
its minimum, the inner cut values and its maximum: at most ``max_bin + 1``
distinct values, which the sketch keeps exactly) and checks that it does
(:func:`reference_matrix` raises :class:`CutsError` otherwise).
"""

from __future__ import annotations

import io
import logging
import time
import warnings
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from pipelines.core.errors import UserError
from udfs.spark_hashes import xxhash64

if TYPE_CHECKING:
    from pipelines.store.checkpoints import CheckpointStore

log = logging.getLogger(__name__)


class CutsError(UserError, RuntimeError):
    """Cuts that cannot be handed to XGBoost exactly, or a stored cuts file that does not fit."""


@dataclass(frozen=True)
class FoldCuts:
    """XGBoost's cuts of every feature (``ptr``, ``values`` as ``get_quantile_cut`` returns them) and
    each feature's minimum and maximum over the sample (NaN: a feature with no value)."""

    key: str
    ptr: np.ndarray  # uint64 [features + 1]
    values: np.ndarray  # float32
    lo: np.ndarray  # float32 [features]
    hi: np.ndarray  # float32 [features]
    rows: int  # sample rows they were computed from
    max_bin: int

    @property
    def n_features(self) -> int:
        """Number of features the cuts are for."""
        return int(self.ptr.size - 1)

    def to_bytes(self) -> bytes:
        """The cuts as an ``.npz`` archive (arrays, ``rows`` and ``max_bin``, key), read by :meth:`from_bytes`."""
        buf = io.BytesIO()
        np.savez(
            buf,
            ptr=self.ptr,
            values=self.values,
            lo=self.lo,
            hi=self.hi,
            meta=np.array([self.rows, self.max_bin], np.int64),
            key=np.array(self.key),
        )
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> FoldCuts:
        """The cuts :meth:`to_bytes` wrote.

        Parameters
        ----------
        data : bytes
            An ``.npz`` archive as :meth:`to_bytes` makes it.

        Returns
        -------
        FoldCuts
            Equal to the cuts that were written.

        Raises
        ------
        ValueError, KeyError, OSError, zipfile.BadZipFile
            When ``data`` is not such an archive (:func:`load_cuts` turns these into :class:`CutsError`).
        """
        with np.load(io.BytesIO(data)) as z:
            rows, max_bin = (int(v) for v in z["meta"])
            return cls(str(z["key"]), z["ptr"], z["values"], z["lo"], z["hi"], rows, max_bin)


# ------------------------------------------------------------ pure: arrays -> cuts -> reference matrix
def cuts_of(X: np.ndarray, max_bin: int, key: str = "", nthread: int = 0) -> FoldCuts:
    """The cuts XGBoost sketches from ``X`` (rows in a fixed order: the sketch depends on it)."""
    import xgboost as xgb

    d = xgb.QuantileDMatrix(np.ascontiguousarray(X, np.float32), max_bin=max_bin, nthread=nthread)
    ptr, values = d.get_quantile_cut()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN feature: NaN bounds, on purpose
        lo = np.nanmin(X, axis=0).astype(np.float32) if X.shape[0] else np.full(X.shape[1], np.nan, np.float32)
        hi = np.nanmax(X, axis=0).astype(np.float32) if X.shape[0] else np.full(X.shape[1], np.nan, np.float32)
    return FoldCuts(
        key, np.asarray(ptr, np.uint64), np.asarray(values, np.float32), lo, hi, int(X.shape[0]), int(max_bin)
    )


def reference_matrix(cuts: FoldCuts, nthread: int = 0) -> Any:
    """A small ``QuantileDMatrix`` whose cuts are exactly ``cuts`` (for ``ref=``); build it outside
    XGBoost's collective (inside one, the sketch would be merged across workers)."""
    import xgboost as xgb

    m = cuts.n_features
    counts = np.diff(cuts.ptr.astype(np.int64))
    R = np.full((int(counts.max(initial=1)) + 1, m), np.nan, np.float32)
    for j in range(m):
        if np.isnan(cuts.lo[j]):
            continue
        inner = cuts.values[int(cuts.ptr[j]) + 1 : int(cuts.ptr[j + 1]) - 1]
        col = np.concatenate([[cuts.lo[j]], inner, [cuts.hi[j]]]).astype(np.float32)
        R[: col.size, j] = col
    ref = xgb.QuantileDMatrix(R, max_bin=cuts.max_bin, nthread=nthread)
    ptr, values = ref.get_quantile_cut()
    if not (np.array_equal(np.asarray(ptr, np.uint64), cuts.ptr) and np.array_equal(values, cuts.values)):
        raise CutsError(
            f"the cuts {cuts.key or '(unkeyed)'} cannot be handed to this XGBoost {xgb.__version__} "
            "exactly (its sketch changed?); delete the checkpoint store's _cuts folder to compute them "
            "again with this version"
        )
    return ref


# ------------------------------------------------------------ the sample and its cuts
#: The sample keeps a query when its hash modulo 2**30 is under ``fraction * 2**30``.
_SCALE = 1 << 30


def in_sample(qid: np.ndarray, fraction: float) -> np.ndarray:
    """Which rows the cuts' sample keeps: whole queries, by a hash of the qid alone (the same sample whatever
    the files' layout), ``pmod(xxhash64(qid), 2**30) < int(fraction * 2**30)``."""
    if fraction >= 1.0:
        return np.ones(qid.shape, bool)
    # Spark's xxhash64, in numpy (udfs.spark_hashes): the sample a Spark job chose when it computed the cuts
    return (xxhash64(qid) & np.uint64(_SCALE - 1)) < np.uint64(int(fraction * _SCALE))


def sample_fraction(train_rows: int, sample_rows: int) -> float:
    """Share of the training queries the sample keeps (1.0: all of them)."""
    if sample_rows < 1:
        raise ValueError(f"train.cuts_sample_rows must be >= 1, got {sample_rows}")
    return 1.0 if train_rows <= sample_rows else sample_rows / train_rows


def sample_rows_of(ds: Any, fold: int, fraction: float) -> tuple[np.ndarray, int]:
    """The sampled training rows of ``fold`` in (qid, doc) order as a float32 matrix, and the split's rows read.

    Read on the driver with pyarrow (any URI it understands, as the manifest is), a record batch at a time,
    each batch filtered to the sampled queries at once: the driver holds one batch and the sample. Before, a
    Spark job read the split and sent the sample to the driver as Arrow: at paper scale (2.27M training rows x
    136) 22 s of a 133 s wait for the first tree, most of it the job and the JVM's row-to-Arrow conversion of
    rows thrown away after.
    """
    from pipelines.data.dataset import scan_subsets
    from udfs import schema

    feats = schema.feature_cols(ds.n_features)
    columns = [schema.QID, schema.DOC, *feats]
    kept, seen = [], 0
    for batch in scan_subsets(ds.path, ds.subsets(fold, "train"), columns):
        seen += batch.num_rows
        mask = in_sample(batch.column(0).to_numpy(zero_copy_only=False), fraction)
        if mask.all():  # a split no larger than the sample: every row, no copy
            kept.append(batch)
        elif mask.any():
            kept.append(batch.filter(pa.array(mask)))
    table = pa.Table.from_batches(kept) if kept else None
    if table is None:
        return np.empty((0, len(feats)), np.float32), seen
    order = np.lexsort((table.column(schema.DOC).to_numpy(), table.column(schema.QID).to_numpy()))
    X = np.empty((table.num_rows, len(feats)), np.float32)
    for j, f in enumerate(feats):
        X[:, j] = table.column(f).to_numpy()[order]
    return X, seen


def compute_cuts(ds: Any, fold: int, max_bin: int, sample_rows: int, key: str, nthread: int = 0) -> FoldCuts:
    """The cuts of ``fold``'s training split from its deterministic sample (:func:`sample_rows_of`), rows in
    (qid, doc) order: XGBoost's sketch depends on row order, not on its thread count."""
    train_rows = sum(int(ds.manifest["subsets"][s]["rows"]) for s in ds.subsets(fold, "train"))
    t0 = time.perf_counter()
    X, seen = sample_rows_of(ds, fold, sample_fraction(train_rows, sample_rows))
    if seen != train_rows:
        raise CutsError(
            f"{ds.path}: fold {fold}'s training split holds {seen} rows, its manifest says {train_rows}; "
            "the dataset changed after it was ingested: ingest it again"
        )
    pa.default_memory_pool().release_unused()
    t_read = time.perf_counter() - t0
    cuts = cuts_of(X, max_bin, key, nthread)
    del X
    if cuts.rows == 0:
        raise CutsError(
            f"fold {fold}: the cuts' sample holds no training row (train.cuts_sample_rows={sample_rows}, "
            f"{train_rows} training rows: its queries are few and large); raise train.cuts_sample_rows"
        )
    log.info(
        "fold %d: histogram cuts from %d of %d training rows (%d bins at most) in %.1f s (%.1f s reading)",
        fold,
        cuts.rows,
        train_rows,
        max_bin,
        time.perf_counter() - t0,
        t_read,
    )
    return cuts


# ------------------------------------------------------------ stored under their key
def _store(root: str) -> CheckpointStore:
    """The checkpoint store at ``root``: it names the cuts' path (:meth:`CheckpointStore.cuts_path`)."""
    from pipelines.store.checkpoints import CheckpointStore

    return CheckpointStore(root)


def load_cuts(root: str, key: str) -> FoldCuts | None:
    """The cuts stored under ``key`` in the checkpoint store at ``root`` (None: not there)."""
    store = _store(root)
    path = store.cuts_path(key)
    try:
        with store.fs.open_input_stream(path) as f:
            cuts = FoldCuts.from_bytes(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise CutsError(f"{path} is unreadable ({e}); delete it to compute the cuts again") from None
    if cuts.key != key:
        raise CutsError(f"{path} holds the cuts {cuts.key}, not {key}; delete it to compute the cuts again")
    return cuts


def save_cuts(root: str, cuts: FoldCuts) -> None:
    """Write the cuts whole (:meth:`pipelines.store.checkpoints.CheckpointStore.put`). Two processes computing a
    fold's cuts at once compute the same bytes: whichever renames second keeps the file it finds."""
    store = _store(root)
    store.put(store.cuts_path(cuts.key), cuts.to_bytes(), replace=False)


def fold_cuts(root: str, ds: Any, fold: int, max_bin: int, sample_rows: int, nthread: int = 0) -> FoldCuts:
    """The fold's cuts from the store under their key (:func:`pipelines.core.keys.cuts_key`, the one every node
    key of the fold holds), else computed (:func:`compute_cuts`) and stored."""
    from pipelines.core.keys import cuts_key

    key = cuts_key(ds.fingerprint, fold, max_bin, sample_rows)
    cuts = load_cuts(root, key)
    if cuts is None:
        cuts = compute_cuts(ds, fold, max_bin, sample_rows, key, nthread)
        save_cuts(root, cuts)
    reference_matrix(cuts)  # on the driver too: a CutsError here is one line, not a failed barrier job
    return cuts
