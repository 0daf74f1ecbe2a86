"""Merging: a subset whose queries were not contiguous in the source is rewritten by a Spark shuffle, so that no
query is ever split across files."""

from __future__ import annotations

import logging
import time

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from pipelines.core.connect import default_parallelism
from pipelines.core.storage import delete_quietly
from udfs import schema
from udfs.letor_parse import row_hashes_sum

log = logging.getLogger(__name__)


def merge_subset(
    spark: SparkSession, fs: pafs.FileSystem, tmp: str, tmp_path: str, subset: str, n_features: int, compression: str
) -> int:
    """Rewrite one subset so that every query is contiguous in one file (Spark shuffle).

    Rows keep their source order within a query: chunk (file order), then the
    position the chunk gave them. Returns the subset's new content hash.
    """
    t0 = time.perf_counter()
    part = f"{tmp}/{schema.SUBSET}={subset}"
    df = spark.read.parquet(part).withColumn(
        "_chunk", F.regexp_extract(F.input_file_name(), r"part-(\d+)\.parquet", 1).cast("int")
    )
    w = Window.partitionBy(schema.QID).orderBy("_chunk", schema.DOC)
    cols = [schema.QID, schema.LABEL, schema.DOC, *schema.feature_cols(n_features)]
    merged = (
        df.withColumn(schema.DOC, (F.row_number().over(w) - 1).cast("int"))
        .select(*cols)
        .repartitionByRange(max(1, default_parallelism(spark)), schema.QID)
        .sortWithinPartitions(schema.QID, schema.DOC)
    )
    out = f"{tmp}/_merged/{schema.SUBSET}={subset}"
    merged.write.option("compression", compression).parquet(out)

    def hashes(batches):
        """Content hash of each Arrow batch of merged rows (:func:`udfs.letor_parse.row_hashes_sum`).

        Yields
        ------
        pyarrow.RecordBatch
            One row per input batch: its hash as a decimal string (``h``), summed mod 2**64 by the caller.
        """
        for b in batches:
            X = (
                np.column_stack([b.column(c).to_numpy() for c in schema.feature_cols(n_features)])
                if b.num_rows
                else np.zeros((0, n_features), np.float32)
            )
            h = row_hashes_sum(
                b.column(schema.QID).to_numpy(),
                b.column(schema.LABEL).to_numpy(),
                b.column(schema.DOC).to_numpy(),
                X.astype(np.float32),
            )
            yield pa.RecordBatch.from_pydict({"h": [str(h)]})

    total = sum(int(r["h"]) for r in spark.read.parquet(out).mapInArrow(hashes, "h string").collect()) % 2**64
    delete_quietly(fs, f"{tmp_path}/{schema.SUBSET}={subset}")
    fs.move(f"{tmp_path}/_merged/{schema.SUBSET}={subset}", f"{tmp_path}/{schema.SUBSET}={subset}")
    delete_quietly(fs, f"{tmp_path}/_merged")
    log.info("merged non-contiguous queries of subset %s in %.1f s", subset, time.perf_counter() - t0)
    return total
