"""A fold's histogram cuts: global, deterministic, computed once (:mod:`pipelines.kernel.cuts`), stored under their
key and given to every worker.

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

import hashlib
import io
import logging
import time
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from pipelines.core.errors import LtrError
from pipelines.kernel.cuts import (
    CutsError,
    FoldCuts,
    cuts_of,
    reference_matrix,
    sample_fraction,
    sample_matrix,
)

if TYPE_CHECKING:
    from pipelines.store.checkpoints import CheckpointStore

log = logging.getLogger(__name__)

DIGEST = "sha256"  # the stored archive's checksum entry (:func:`cuts_bytes`)


def sample_rows_of(ds: Any, fold: int, fraction: float) -> tuple[np.ndarray, int]:
    """The sampled training rows of ``fold`` in (qid, doc) order as a float32 matrix, and the split's rows read
    (:func:`pipelines.kernel.cuts.sample_matrix`). Read on the driver with pyarrow (any URI it understands, as the
    manifest is), a record batch at a time, without a Spark job."""
    from pipelines.data.dataset import scan_subsets
    from udfs import schema

    columns = [schema.QID, schema.DOC, *schema.feature_cols(ds.n_features)]
    return sample_matrix(scan_subsets(ds.path, ds.subsets(fold, "train"), columns), fraction, ds.n_features)


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


class CutsChanged(LtrError, ValueError):
    """A stored cuts file whose content no longer has the checksum it was written with (:func:`load_cuts` sets it
    aside and computes the cuts again: it never reaches the user)."""


def cuts_digest(cuts: FoldCuts) -> str:
    """The sha256 of the cuts' content (key, sizes and every array with its dtype): what :func:`cuts_bytes` records
    and :func:`cuts_from_bytes` checks."""
    h = hashlib.sha256(f"{cuts.key}|{cuts.rows}|{cuts.max_bin}".encode())
    for a in (cuts.ptr, cuts.values, cuts.lo, cuts.hi):
        a = np.ascontiguousarray(a)
        h.update(f"|{a.dtype.str}:{a.size}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def cuts_bytes(cuts: FoldCuts) -> bytes:
    """The stored file: the ``.npz`` archive of :meth:`FoldCuts.to_bytes` with one more array, ``sha256``
    (:func:`cuts_digest`). The store adds it, not the kernel's archive, so that the cuts' key (the kernel's code)
    does not change with how the store checks its files."""
    buf = io.BytesIO(cuts.to_bytes())
    entry = io.BytesIO()
    np.save(entry, np.array(cuts_digest(cuts)))
    with zipfile.ZipFile(buf, "a") as z:
        z.writestr(f"{DIGEST}.npy", entry.getvalue())
    return buf.getvalue()


def cuts_from_bytes(data: bytes) -> FoldCuts:
    """The cuts :func:`cuts_bytes` wrote, checked against the checksum they recorded (a file written before
    checksums were recorded has none and is taken as it is).

    Raises
    ------
    CutsChanged
        When the content does not have the checksum it was written with.
    ValueError, KeyError, OSError, zipfile.BadZipFile
        When ``data`` is not such an archive.
    """
    cuts = FoldCuts.from_bytes(data)
    with np.load(io.BytesIO(data)) as z:
        want = str(z[DIGEST]) if DIGEST in z.files else None
    if want is not None and cuts_digest(cuts) != want:
        raise CutsChanged("its content does not match the checksum it was written with (it changed on disk)")
    return cuts


def check_cuts(root: str, key: str) -> str | None:
    """Why the cuts file of ``key`` in the checkpoint store at ``root`` cannot be trusted (unreadable, changed on disk
    since it was written, another key's cuts), or None when it can or is not there."""
    return _read(_store(root), key)[1]


def _read(store: CheckpointStore, key: str) -> tuple[FoldCuts | None, str | None]:
    """(the cuts stored under ``key``, None) or (None, why they cannot be trusted); (None, None) when not there."""
    path = store.cuts_path(key)
    try:
        with store.fs.open_input_stream(path) as f:
            cuts = cuts_from_bytes(f.read())
    except FileNotFoundError:
        return None, None
    except CutsChanged as e:
        return None, f"cuts {path}: {e}"
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        return None, f"cuts {path} are unreadable ({type(e).__name__}: {e})"
    if cuts.key != key:
        return None, f"cuts {path} hold the cuts {cuts.key}, not {key}"
    return cuts, None


def load_cuts(root: str, key: str) -> FoldCuts | None:
    """The cuts stored under ``key`` in the checkpoint store at ``root`` (None: not there). A file that cannot be
    trusted (:func:`check_cuts`) is set aside (renamed ``<key>.npz.corrupt-<uuid8>``, kept to be looked at) with one
    warning, and None returned: the cuts are a function of the data, computed again to the same values."""
    store = _store(root)
    cuts, why = _read(store, key)
    if why is not None:
        log.warning("%s: set aside, the fold's cuts are computed again", why)
        store.set_aside_file(store.cuts_path(key))
    return cuts


def save_cuts(root: str, cuts: FoldCuts) -> None:
    """Write the cuts whole (:meth:`pipelines.store.checkpoints.CheckpointStore.put`). Two processes computing a
    fold's cuts at once compute the same bytes: whichever renames second keeps the file it finds."""
    store = _store(root)
    store.put(store.cuts_path(cuts.key), cuts_bytes(cuts), replace=False)


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
