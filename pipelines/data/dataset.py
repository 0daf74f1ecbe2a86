"""Stored datasets: the ``_manifest.json`` contract and fold/split selection.

A dataset written by ``ltr ingest`` is a directory of Parquet files partitioned
by ``subset=<name>``, plus ``_manifest.json``. The manifest says which subsets
make up each fold's ``train`` / ``vali`` / ``test`` split, so selecting a split
is a partition filter. For MSLR the subsets are ``S1`` .. ``S5`` and every row
is stored once (:data:`MSLR_ROTATION`); data whose folds are not such a
rotation is stored as given, one subset per file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.core.errors import UserError, crosses_tasks
from pipelines.core.storage import read_json
from udfs import schema
from udfs.uris import resolve, to_uri

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"
QUARANTINE = "_quarantine"
SPLITS = ("train", "vali", "test")

#: MSLR's five folds rotate five query subsets (MSLR.md): fold -> split -> subsets.
MSLR_ROTATION: dict[int, dict[str, list[str]]] = {
    1: {"train": ["S1", "S2", "S3"], "vali": ["S4"], "test": ["S5"]},
    2: {"train": ["S2", "S3", "S4"], "vali": ["S5"], "test": ["S1"]},
    3: {"train": ["S3", "S4", "S5"], "vali": ["S1"], "test": ["S2"]},
    4: {"train": ["S4", "S5", "S1"], "vali": ["S2"], "test": ["S3"]},
    5: {"train": ["S5", "S1", "S2"], "vali": ["S3"], "test": ["S4"]},
}


@crosses_tasks
class DatasetError(UserError):
    """A dataset path that is not a readable ``ltr`` dataset, or a bad fold/split."""


@dataclass(frozen=True)
class Dataset:
    """An ingested dataset: its location and manifest."""

    path: str
    manifest: dict[str, Any]

    @property
    def n_features(self) -> int:
        """Number of features of every row (the manifest's ``n_features``)."""
        return int(self.manifest["n_features"])

    @property
    def folds(self) -> dict[int, dict[str, list[str]]]:
        """Fold number -> split (``train``, ``vali``, ``test``) -> the subsets that make it up."""
        return {int(k): v for k, v in self.manifest["folds"].items()}

    @property
    def fingerprint(self) -> str:
        """The manifest's content fingerprint of the stored data (in every key computed from it)."""
        return str(self.manifest["fingerprint"])

    @property
    def feature_roles(self) -> dict[str, int]:
        """Role (``bm25``, ``pagerank``) -> feature id, as recorded at ingest; empty when none was."""
        return {k: int(v) for k, v in self.manifest.get("feature_roles", {}).items()}

    def subsets(self, fold: int, split: str) -> list[str]:
        """Subsets that make up ``split`` of ``fold`` (raises DatasetError if there are none)."""
        folds = self.folds
        if fold not in folds:
            raise DatasetError(f"{self.path}: no fold {fold}; folds: {sorted(folds)}")
        if split not in SPLITS:
            raise DatasetError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        parts = folds[fold].get(split) or []
        if not parts:
            raise DatasetError(f"{self.path}: fold {fold} has no {split} split")
        return list(parts)


def open_dataset(path: str) -> Dataset:
    """Read ``path/_manifest.json``; a directory without one is not (yet) a dataset."""
    try:
        manifest = read_json(path, MANIFEST)
    except FileNotFoundError:
        raise DatasetError(f"{path} is not an ltr dataset (no {MANIFEST}); create it with `ltr ingest`") from None
    return Dataset(path=to_uri(path), manifest=manifest)


def load_split(spark: SparkSession, ds: Dataset, fold: int, split: str, columns: list[str] | None = None) -> DataFrame:
    """Rows of ``split`` of ``fold``: a partition filter on ``subset``, reading only ``columns``.

    The ``subset`` column is always included (it tells the subsets of a
    training split apart).
    """
    parts = ds.subsets(fold, split)
    df = spark.read.parquet(ds.path).where(F.col(schema.SUBSET).isin(parts))
    if columns is not None:
        cols = list(dict.fromkeys([*columns, schema.SUBSET]))
        df = df.select(*cols)
    return df


def scan_subsets(
    path: str, subsets: list[str], columns: list[str], batch_rows: int = 1 << 16, threads: bool = True
) -> Iterator[pa.RecordBatch]:
    """Rows of ``subsets`` of the dataset at ``path`` read with pyarrow, without Spark, a record batch at a time
    (``columns`` only; ``subset`` may be one of them). For a process that is not a Spark job and reads a split
    whole or nearly (the cuts' sample on the driver, a training worker's rows): Spark's reader is for the jobs.

    The partition column is read as a string whatever the subsets' names look like ("1" stays "1").
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    fs, where = resolve(path)
    part = pads.partitioning(pa.schema([(schema.SUBSET, pa.string())]), flavor="hive")
    data = pads.dataset(where, filesystem=fs, format="parquet", partitioning=part)
    # pyarrow reads ahead 16 batches of 4 files by default: at 220 features that is up to 0.9 GB held beside a
    # worker's codes; 4 batches of 2 files keep the reads parallel at a quarter of it
    scan = data.scanner(
        columns=columns,
        filter=pc.field(schema.SUBSET).isin(subsets),
        batch_size=batch_rows,
        batch_readahead=4,
        fragment_readahead=2,
        use_threads=threads,
    )
    yield from scan.to_batches()
