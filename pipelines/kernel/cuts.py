"""A fold's histogram cuts, computed: XGBoost's sketch of a deterministic sample of the training rows, and the
tiny reference matrix that hands exactly those cuts to every worker (:mod:`pipelines.store.cuts` stores them under
their key and explains why they are global).

The sample: every training query whose ``xxhash64(qid)`` falls under a threshold chosen so that about
``sample_rows`` rows are kept (whole queries, chosen by qid so that it does not depend on the input's
partitioning), sorted by (qid, doc): XGBoost's sketch depends on row order, not on its thread count.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.core.errors import UserError
from udfs import schema
from udfs.spark_hashes import xxhash64


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


def sample_matrix(batches: Iterable[pa.RecordBatch], fraction: float, n_features: int) -> tuple[np.ndarray, int]:
    """The sampled rows of ``batches`` (columns qid, doc, then the features) in (qid, doc) order as a float32
    matrix, and how many rows the batches held. Each batch is filtered to the sampled queries at once: the caller
    holds one batch and the sample."""
    feats = schema.feature_cols(n_features)
    kept, seen = [], 0
    for batch in batches:
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
