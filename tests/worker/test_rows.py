"""A worker's rows read by the worker (pipelines.worker.rows): Spark's hash partitioning reproduced
(udfs.spark_hashes)."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.sql import functions as F

from pipelines.execution.barrier_job import arrange_by_qid
from udfs import schema
from udfs.spark_hashes import murmur3, partition

pytestmark = pytest.mark.spark


def test_the_hash_and_the_partition_are_sparks(spark):
    """``hash(qid)`` (Murmur3, seed 42) for int32 ids at the edges and at random, and the partition
    ``repartition(workers, qid)`` gives each row, for 2 and 3 workers: what a worker reading its own rows keeps
    is what the driver's shuffle would have sent it."""
    rng = np.random.default_rng(11)
    ids = np.r_[0, 1, 2, 255, 256, 65535, 2**31 - 1, 2**31 - 2, rng.integers(0, 2**31 - 1, 400)].astype(np.int32)
    df = spark.createDataFrame([(int(i),) for i in ids], f"{schema.QID} int")
    theirs = {int(r[0]): int(r[1]) for r in df.select(schema.QID, F.hash(schema.QID)).collect()}
    assert dict(zip(ids.tolist(), murmur3(ids).tolist(), strict=True)) == theirs
    for workers in (2, 3):
        got = arrange_by_qid(df, workers).select(schema.QID, F.spark_partition_id()).collect()
        want = dict(zip(ids.tolist(), partition(ids, workers).tolist(), strict=True))
        assert {int(r[0]): int(r[1]) for r in got} == want
        assert len(set(want.values())) == workers
