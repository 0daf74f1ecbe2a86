"""A fold's teacher scores: each training query's ``teacher_margin``, ``teacher_loss`` and ``teacher_ndcg``
(:mod:`udfs.teacher`), from the teachers the plan trained (:mod:`pipelines.study.teachers` says which).

Computed where the rows are: a ``mapInPandas`` over the fold's training rows (whole queries per batch,
:func:`udfs.per_query.map_queries`) scores each query's documents with the teacher of its cross-fitting group (the
one trained without that group: :func:`udfs.teacher.crossfit_groups`) and reduces them to one row per query; the
teachers' models travel to the tasks as bytes, and no document row reaches the driver.

Output: ``OUT/scores.parquet`` (``subset, qid, group, n_pairs, teacher_margin, teacher_loss, teacher_ndcg``) and
``OUT/_teacher.json`` (the inputs' ``key``, the teachers' node keys, the conventions, counts and the scores'
``content_fingerprint``).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from pipelines.core.storage import atomic_output, file_sha256, read_json
from pipelines.data.dataset import Dataset, load_split
from udfs import schema
from udfs.metrics import NdcgSpec
from udfs.uris import resolve

log = logging.getLogger(__name__)

SUMMARY = "_teacher.json"
SCORES = "scores.parquet"
SCORES_SHA256 = "scores_sha256"
DDL = (
    f"{schema.SUBSET} string, {schema.QID} int, group int, n_pairs long, "
    "teacher_margin double, teacher_loss double, teacher_ndcg double"
)


def compute_teacher_scores(
    spark: SparkSession,
    ds: Dataset,
    fold: int,
    models: Mapping[int, bytes],
    crossfit: int,
    seed: int,
    spec: NdcgSpec,
    out: str,
    key: str,
    teachers: Mapping[int, str],
) -> dict[str, Any]:
    """Score fold ``fold``'s training queries with ``models`` (group -> the teacher's model, XGBoost JSON bytes) and
    write ``out``; return the summary. ``teachers``: group -> the teacher's last node key (recorded)."""
    from udfs.per_query import map_queries
    from udfs.teacher import teacher_frame

    t0 = time.perf_counter()
    features = schema.feature_cols(ds.n_features)
    blobs = {int(g): bytes(m) for g, m in models.items()}
    cache: dict[int, Any] = {}

    def score(pdf: pd.DataFrame) -> pd.DataFrame:
        import xgboost as xgb

        if not cache:  # once per Python worker: the boosters from the bytes shipped with the function
            for g, b in blobs.items():
                booster = xgb.Booster()
                booster.load_model(bytearray(b))
                cache[g] = booster
        return teacher_frame(pdf, cache, crossfit, seed, features, spec)

    rows = load_split(spark, ds, fold, "train", [schema.QID, schema.DOC, schema.LABEL, *features])
    frame = map_queries(rows, score, DDL, keys=(schema.SUBSET, schema.QID), arranged=True)
    pdf: pd.DataFrame = frame.toPandas()
    pdf = pdf.sort_values([schema.QID, schema.SUBSET], kind="stable").reset_index(drop=True)
    table = pa.Table.from_pandas(pdf, preserve_index=False)
    content = hashlib.sha256(
        b"".join(pdf[c].to_numpy().tobytes() for c in ("qid", "group", "n_pairs", *_SCORE_COLS))
    ).hexdigest()
    summary = {
        "key": key,
        "fold": fold,
        "crossfit": crossfit,
        "seed": seed,
        "teachers": {str(g): k for g, k in sorted(teachers.items())},
        "queries": len(pdf),
        "queries_without_pair": int((pdf["n_pairs"] == 0).sum()),
        "per_group": {str(g): int(n) for g, n in pdf["group"].value_counts().sort_index().items()},
        "conventions": spec.to_dict(),
        "dataset_fingerprint": ds.fingerprint,
        "content_fingerprint": "sha256:" + content,
    }
    write_teacher_scores(table, summary, out)
    log.info(
        "teacher scores of fold %d (%s): %d queries, %d without a pair of different labels, in %.1f s",
        fold,
        f"cross-fitted over {crossfit} groups" if crossfit else "one teacher",
        len(pdf),
        summary["queries_without_pair"],
        time.perf_counter() - t0,
    )
    return summary


_SCORE_COLS = ("teacher_margin", "teacher_loss", "teacher_ndcg")


def write_teacher_scores(table: pa.Table, summary: dict[str, Any], out: str) -> None:
    """Write the scores and their summary to ``out`` at once, the summary recording the sha256 of the scores' file."""
    with atomic_output(out, SUMMARY) as tmp:
        summary[SCORES_SHA256] = tmp.write_parquet(SCORES, table)
        tmp.write_json(SUMMARY, summary)


def stored_teacher_scores(out: str, key: str) -> dict[str, Any] | None:
    """The summary of the teacher scores at ``out`` when they were computed from the inputs whose key is ``key`` and
    are the bytes written then; None when missing, unreadable, computed from others or changed on disk (they are
    computed again: the teachers themselves are checkpoints, checked as such)."""
    try:
        summary = read_json(out, SUMMARY)
    except (OSError, ValueError):
        return None
    if summary.get("key") != key:
        return None
    if file_sha256(out, SCORES) != summary.get(SCORES_SHA256):
        log.warning(
            "teacher scores %s: %s does not match the checksum it was written with; computed again", out, SCORES
        )
        return None
    return summary


def read_teacher_scores(out: str) -> pd.DataFrame:
    """The per-query teacher scores at ``out`` (one row per training query)."""
    fs, where = resolve(out)
    with fs.open_input_file(f"{where}/{SCORES}") as f:
        return pq.read_table(f).to_pandas()
