"""A training worker's rows read by the worker itself from the dataset's Parquet (``train.read``).

The other way (``train.read: spark``): the driver's job reads the fold, hash-partitions it by qid into one
partition per worker (a shuffle of every row: :func:`pipelines.execution.barrier_job.arrange_by_qid`) and hands
each barrier task its partition as Arrow batches. At paper scale that shuffle and the hand-over were about 74 s
of a 133 s wait for the first tree (benchmarks/RESULTS.md, "The first tree at paper scale"): every value goes
through the JVM's rows, a shuffle file and Arrow again.

Here each barrier task reads the fold's splits from the dataset's files with pyarrow
(:func:`pipelines.data.dataset.scan_subsets`) and keeps the queries that Spark's ``repartition(workers, qid)``
would have given its partition: ``pmod(hash(qid), workers)`` with Spark's Murmur3 (:func:`udfs.spark_hashes.partition`,
checked against Spark in tests/worker/test_rows.py). So a worker holds the same rows either way, and the trees
are the same (byte for byte: tested). With more than one worker each one reads every file and keeps its share
(the files hold the queries in the text's order, not by hash): reading is cheaper than shuffling, but a
cluster's storage serves the fold once per worker.

The worker reads what the driver can: a local path, or a URI that ``pyarrow.fs`` reads on every executor (S3,
GCS; HDFS needs libhdfs and Hadoop's CLASSPATH on the executors). ``train.read: auto`` reads in the workers
for local paths and leaves other URIs to Spark's reader, which needs none of that.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipelines.data.dataset import scan_subsets
from pipelines.kernel.matrices import SPLIT_COL
from udfs import schema
from udfs.spark_hashes import partition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FoldRows:
    """Where a barrier task reads its rows (pickled into the task): the dataset, each split's code and subsets,
    each curriculum's first-stage column and its per-query table (``CURRICULUM/queries.parquet``)."""

    path: str
    n_features: int
    splits: tuple[tuple[int, tuple[str, ...]], ...]
    curricula: tuple[tuple[str, str], ...] = ()

    def batches(self, rank: int, workers: int) -> Iterator[pa.RecordBatch]:
        """This worker's rows as Arrow batches: ``_split``, qid, doc, label, the features, one column each,
        and (training rows) each curriculum's first stage (null where the curriculum lacks the query, as
        Spark's left join gives; :func:`pipelines.kernel.matrices.from_batches` refuses those)."""
        feats = schema.feature_cols(self.n_features)
        cols = [schema.SUBSET, schema.QID, schema.DOC, schema.LABEL, *feats]
        stages = [(column, _first_stages(table)) for column, table in self.curricula]
        for code, subsets in self.splits:
            for batch in scan_subsets(self.path, list(subsets), cols, threads=False):
                if workers > 1:
                    mine = partition(batch.column(schema.QID).to_numpy(zero_copy_only=False), workers) == rank
                    if not mine.any():
                        continue
                    batch = batch.filter(pa.array(mine))
                arrays = [pa.array(np.full(batch.num_rows, code, np.int8)), *batch.columns[1:]]
                names = [SPLIT_COL, *cols[1:]]
                if code == 0:
                    for column, lookup in stages:
                        arrays.append(lookup(batch.column(schema.SUBSET), batch.column(schema.QID)))
                        names.append(column)
                yield pa.RecordBatch.from_arrays(arrays, names=names)


class _Stages:
    """A curriculum's first stage per (subset, qid), looked up for a batch's rows."""

    def __init__(self, table: pa.Table) -> None:
        self.names = pa.array(sorted(set(table.column(schema.SUBSET).to_pylist())), pa.string())
        keys = self._keys(table.column(schema.SUBSET), table.column(schema.QID))
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        self.stage = table.column("first_stage").to_numpy(zero_copy_only=False).astype(np.int32)[order]

    def _keys(self, subset: pa.ChunkedArray | pa.Array, qid: pa.ChunkedArray | pa.Array) -> np.ndarray:
        import pyarrow.compute as pc

        sub = pc.fill_null(pc.index_in(pc.cast(subset, pa.string()), value_set=self.names), -1)
        return (sub.to_numpy(zero_copy_only=False).astype(np.int64) << 32) | qid.to_numpy(zero_copy_only=False).astype(
            np.int64
        )

    def __call__(self, subset: pa.Array, qid: pa.Array) -> pa.Array:
        """The first stage of each row's query; null where the curriculum does not hold the query."""
        keys = self._keys(subset, qid)
        if not self.keys.size:
            return pa.nulls(keys.size, pa.int32())
        at = np.searchsorted(self.keys, keys).clip(0, self.keys.size - 1)
        found = self.keys[at] == keys
        return pa.array(np.where(found, self.stage[at], 0).astype(np.int32), mask=~found)


def _first_stages(table_path: str) -> _Stages:
    """The per-query table of a curriculum (``CURRICULUM/queries.parquet``: subset, qid, first stage)."""
    import pyarrow.parquet as pq

    from udfs.uris import resolve

    fs, where = resolve(table_path)
    return _Stages(pq.read_table(where, filesystem=fs, columns=[schema.SUBSET, schema.QID, "first_stage"]))
