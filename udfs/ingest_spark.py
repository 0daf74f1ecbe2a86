"""Thin Spark wrapper: run :func:`udfs.letor_chunks.run_chunk` for many chunks, one Spark task each.

Tasks are the ids of a ``spark.range`` with one partition per chunk, mapped
with ``mapInArrow`` (works on classic Spark and Spark Connect alike). Each task
parses its byte range and writes its Parquet file itself, so the text never
travels through the JVM; only a small metadata row per chunk comes back.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from udfs.letor_chunks import RESULT_SCHEMA, ChunkTask, run_chunk

#: RESULT_SCHEMA plus the error text of a chunk that failed.
TASK_SCHEMA = RESULT_SCHEMA.append(pa.field("error", pa.string()))


def _spark_type(t: pa.DataType) -> str:
    return {
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.binary(): "binary",
        pa.string(): "string",
        pa.float64(): "double",
    }[t]


TASK_DDL = ", ".join(f"{f.name} {_spark_type(f.type)}" for f in TASK_SCHEMA)


def run_chunk_tasks(spark: SparkSession, tasks: list[ChunkTask], counters: tuple[Any, Any] | None = None) -> pa.Table:
    """Run every task on the cluster; return one metadata row per task (``TASK_SCHEMA``).

    An exception inside a task does not fail the Spark job: it comes back in the
    ``error`` column, so the driver can name the file and byte range.
    ``counters``: two Spark accumulators (classic Spark only) that each finished task adds
    its text bytes and its rows to, so the driver can show progress while the job runs.
    """
    if not tasks:
        return TASK_SCHEMA.empty_table()
    by_id = {t.chunk_id: t for t in tasks}
    ids = sorted(by_id)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Run the chunk tasks whose indices (into the sorted chunk ids) the batches' first column holds.

        Yields
        ------
        pa.RecordBatch
            One row of ``TASK_SCHEMA`` per task: its metadata with ``error`` None, or, if the task raised, its
            ``chunk_id`` and the exception with a short traceback in ``error`` (the other fields None).
        """
        for batch in batches:
            for k in batch.column(0).to_pylist():
                task = by_id[ids[k]]
                try:
                    row = run_chunk(task)
                    row["error"] = None
                    if counters is not None:
                        counters[0].add(row["end"] - row["begin"])
                        counters[1].add(row["n_rows"])
                except Exception as exc:  # reported by the driver with file and range
                    row = {f.name: None for f in TASK_SCHEMA}
                    row["chunk_id"] = task.chunk_id
                    row["error"] = (
                        "".join(traceback.format_exception_only(type(exc), exc)).strip()
                        + "\n"
                        + traceback.format_exc(limit=6)
                    )
                yield pa.RecordBatch.from_pylist([row], schema=TASK_SCHEMA)

    df = spark.range(0, len(ids), 1, numPartitions=len(ids)).mapInArrow(run, TASK_DDL)
    return df.toArrow()
