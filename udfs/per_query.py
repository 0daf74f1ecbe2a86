"""Thin Spark wrapper: apply a pandas function to *whole queries*, many at a time.

``mapInPandas`` hands a function Arrow batches of ``maxRecordsPerBatch`` rows,
which can cut a query in two (a scalar pandas UDF is worse: it never sees
queries at all). :func:`map_queries` carries the trailing, possibly partial
query of each batch over to the next one, so the function always receives
complete queries, in input order, and can work on thousands of them with
numpy segment operations (no Python loop per query).

Input must hold each query's rows contiguously within a partition. Datasets
written by ``ltr ingest`` are stored that way (a query is never split across
files, files are sorted by qid), so they are read with ``arranged=True`` and no
shuffle. Anything else is arranged first (``repartition`` by the keys, then
``sortWithinPartitions``). A query key that shows up again after its run ended
raises, instead of silently scoring half a query.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from udfs import schema


class QueryOrderError(RuntimeError):
    """Rows of a query are not contiguous within a partition."""


def run_starts(pdf: pd.DataFrame, keys: Sequence[str]) -> np.ndarray:
    """Row positions where a new run of equal ``keys`` starts (always includes 0 if non-empty)."""
    n = len(pdf)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    change = np.zeros(n - 1, dtype=bool)
    for k in keys:
        col = pdf[k].to_numpy()
        change |= col[1:] != col[:-1]
    return np.concatenate(([0], np.flatnonzero(change) + 1)).astype(np.int64)


def whole_query_batches(batches: Iterator[pd.DataFrame], keys: Sequence[str]) -> Iterator[pd.DataFrame]:
    """Re-cut a stream of batches so that each yielded frame holds only complete runs of ``keys``.

    Raises QueryOrderError if a key's run appears twice in the stream.
    """
    keys = list(keys)
    carry: pd.DataFrame | None = None
    finished: set = set()

    def check(done: pd.DataFrame) -> None:
        """Record the key of every run in ``done`` as finished.

        Raises
        ------
        QueryOrderError
            When one of them was already finished in an earlier frame (its rows are not contiguous).
        """
        starts = run_starts(done, keys)
        heads = done.iloc[starts][keys].itertuples(index=False, name=None)
        for key in heads:
            if key in finished:
                raise QueryOrderError(
                    f"query {dict(zip(keys, key, strict=True))} appears in two separate runs of one partition; "
                    "its rows must be contiguous (arrange the input with arranged=False)"
                )
            finished.add(key)

    for pdf in batches:
        if carry is not None and len(carry):
            pdf = pd.concat([carry, pdf], ignore_index=True)
        if pdf.empty:
            continue
        starts = run_starts(pdf, keys)
        cut = int(starts[-1])  # the last run may continue in the next batch
        done, carry = pdf.iloc[:cut], pdf.iloc[cut:].reset_index(drop=True)
        if len(done):
            check(done)
            yield done
    if carry is not None and len(carry):
        check(carry)
        yield carry


def map_queries(
    df: DataFrame,
    fn: Callable[[pd.DataFrame], pd.DataFrame],
    out_schema: StructType | str,
    *,
    keys: Sequence[str] = (schema.QID,),
    order: Sequence[str] = (schema.DOC,),
    arranged: bool = False,
    partitions: int | None = None,
) -> DataFrame:
    """``fn(pdf) -> pdf`` over whole queries of ``df``; see the module docstring.

    Parameters
    ----------
    df : input rows.
    fn : called with a frame of complete queries (rows of each query contiguous, in
        ``order`` when the input was arranged here); returns result rows in ``out_schema``.
    keys : columns that identify a query (e.g. ``("subset", "qid")``).
    order : columns that order rows within a query when arranging.
    arranged : the input already holds every query contiguously in one partition.
    partitions : partitions to arrange into (default: ``spark.sql.shuffle.partitions``).
    """
    keys, order = list(keys), list(order)
    if not arranged:
        n = partitions or int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 200)
        df = df.repartition(n, *keys).sortWithinPartitions(*keys, *order)

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """One partition: ``fn`` over each frame of whole queries (:func:`whole_query_batches`), its result yielded."""
        for part in whole_query_batches(batches, keys):
            yield fn(part)

    return df.mapInPandas(run, out_schema)
