"""``ltr difficulty``: one row of difficulty scores per stored query.

Reads only the columns it needs (subset, qid, doc, label and the two role
features) straight from the ingested Parquet, whose layout already keeps every
query whole and sorted within a file, so no shuffle is needed: a
``mapInPandas`` that carries partial queries across Arrow batches
(:func:`udfs.per_query.map_queries`) calls the vectorised
:func:`udfs.difficulty.difficulty_frame` on thousands of queries at a time.

Output: ``SCORES/part-*.parquet`` (``udfs.difficulty.DIFFICULTY_DDL``) and
``SCORES/_difficulty.json`` (conventions, feature roles, counts, the dataset's
fingerprint, the inputs' ``key`` and the scores' ``content_fingerprint``). For
the MSLR rotation every query appears once; a dataset stored
"as given" may hold a query in several subsets, one row each.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.core.config import DifficultyConfig
from pipelines.core.keys import difficulty_key, rows_fingerprint
from pipelines.core.secrets import redact
from pipelines.core.spark_progress import spark_progress
from pipelines.core.storage import atomic_output, files_sha256
from pipelines.data.dataset import Dataset, DatasetError, open_dataset
from udfs import schema
from udfs.difficulty import DIFFICULTY_DDL
from udfs.difficulty import difficulty_scores as scores_of_rows
from udfs.metrics import NdcgSpec

log = logging.getLogger(__name__)

SUMMARY = "_difficulty.json"
#: The summary's record of the sha256 of each part file, checked by :func:`stored_summary`.
FILES_SHA256 = "files_sha256"


@dataclass(frozen=True)
class Roles:
    """Feature ids whose rankings are scored."""

    bm25: int
    pagerank: int


def resolve_roles(ds: Dataset, cfg: DifficultyConfig) -> Roles:
    """Feature roles: the config's (flags) where set, else the ones recorded in the manifest; 0 where the
    dataset has none (its scores are then NaN and the curriculum that needs them is refused)."""
    recorded = ds.feature_roles
    roles = Roles(cfg.bm25_feature or recorded.get("bm25", 0), cfg.pagerank_feature or recorded.get("pagerank", 0))
    for name, fid in (("bm25", roles.bm25), ("pagerank", roles.pagerank)):
        if fid and not 1 <= fid <= ds.n_features:
            raise DatasetError(
                f"{ds.path}: no {name} feature id (got {fid}); pass --{name}-feature ID "
                f"(1..{ds.n_features}) or set it in conf/datasets/<name>.yaml"
            )
    return roles


def difficulty_inputs(ds: Dataset, cfg: DifficultyConfig, spec: NdcgSpec) -> dict[str, Any]:
    """Everything that determines the scores: the dataset's fingerprint, the resolved feature roles,
    the difficulty settings, the metric conventions and the code identity (:mod:`pipelines.core.keys`)."""
    from pipelines.core.keys import code_identity

    roles = resolve_roles(ds, cfg)
    # the feature ids are in through the resolved roles; the empty-query policy acts on curricula, not scores
    settings = {k: v for k, v in asdict(cfg).items() if k not in ("bm25_feature", "pagerank_feature", "empty_queries")}
    return {
        "dataset": ds.fingerprint,
        "roles": asdict(roles),
        "settings": settings,
        "metric": spec.to_dict(),
        "code": code_identity(),
    }


def stored_summary(path: str, key: str) -> dict[str, Any] | None:
    """The summary of the scores stored at ``path`` when they were computed from the inputs whose
    :func:`pipelines.core.keys.difficulty_key` is ``key`` and their part files are the bytes written then; None when
    missing, unreadable, computed from other inputs or changed on disk (what ``ltr grid`` and the Airflow DAG both
    check before they compute the scores again)."""
    from pipelines.core.storage import read_json

    try:
        summary = read_json(path, SUMMARY)
    except (OSError, ValueError):
        return None
    if summary.get("key") != key:
        return None
    want = summary.get(FILES_SHA256)  # None: scores of an older ltr, taken as they are
    if want is not None and files_sha256(path) != want:
        log.warning(
            "difficulty scores %s: their files do not match the checksums they were written with; computed again", path
        )
        return None
    return summary


def content_fingerprint(scores: DataFrame) -> str:
    """An order-independent fingerprint of the rows themselves: the row count and two sums of each
    row's xxhash64 (its low and high 32 bits, so no sum can overflow), hashed by
    :func:`pipelines.core.keys.rows_fingerprint`. Curricula record the fingerprint of the scores they were
    built from."""
    h = F.xxhash64(*[F.col(c) for c in sorted(scores.columns)])
    r = scores.agg(
        F.count("*").alias("n"),
        F.sum(h.bitwiseAND(F.lit(0xFFFFFFFF))).alias("lo"),
        F.sum(F.shiftright(h, 32)).alias("hi"),
    ).first()
    if r is None:  # a global aggregate has one row, even over no rows
        raise RuntimeError("internal error: the fingerprint's aggregate returned no row")
    return rows_fingerprint(r["n"], r["lo"], r["hi"])


def difficulty_scores(spark: SparkSession, ds: Dataset, roles: Roles, spec: NdcgSpec) -> DataFrame:
    """Difficulty rows of every stored (subset, qid): a lazy DataFrame (:func:`udfs.difficulty.difficulty_scores`)."""
    return scores_of_rows(spark.read.parquet(ds.path), roles.bm25, roles.pagerank, spec)


def run_difficulty(spark: SparkSession, data: str, out: str, cfg: DifficultyConfig, spec: NdcgSpec) -> dict[str, Any]:
    """Score every query of the dataset at ``data``; write ``out`` atomically; return the summary."""
    t0 = time.perf_counter()
    ds = open_dataset(data)
    roles = resolve_roles(ds, cfg)
    with atomic_output(out, SUMMARY) as tmp:
        scores = difficulty_scores(spark, ds, roles, spec)
        with spark_progress(spark, "difficulty", rows=int(ds.manifest["rows"])):  # tasks done, ~rows/s
            scores.write.mode("overwrite").parquet(tmp.uri)  # tmp is ours and still empty
        written = spark.read.parquet(f"{tmp.uri}/part-*")  # a glob: Spark warns on reading a hidden directory
        agg = written.agg(
            F.count("*").alias("queries"),
            F.sum("n_docs").alias("rows"),
            F.avg("ndcg_bm25").alias("bm25"),
            F.avg("ndcg_pagerank").alias("pagerank"),
            F.sum((F.col("n_rel") == 0).cast("int")).alias("no_rel"),
        ).first()
        if agg is None:  # an aggregate without grouping has one row, even over no rows
            raise DatasetError(f"{data}: the difficulty scores could not be summarised (no aggregate row)")
        per_subset = {r[schema.SUBSET]: r["count"] for r in written.groupBy(schema.SUBSET).count().collect()}
        summary = {
            "key": difficulty_key(**difficulty_inputs(ds, cfg, spec)),
            "content_fingerprint": content_fingerprint(written),
            "dataset": redact(data),
            "dataset_fingerprint": ds.fingerprint,
            "feature_roles": {"bm25": roles.bm25, "pagerank": roles.pagerank},
            "conventions": {**spec.to_dict(), "description": spec.describe()},
            "queries": int(agg["queries"]),
            "rows": int(agg["rows"] or 0),
            "queries_without_relevant": int(agg["no_rel"] or 0),
            "queries_per_subset": dict(sorted(per_subset.items())),
            "mean_ndcg_bm25": agg["bm25"] if roles.bm25 else None,  # None: the dataset has no such feature
            "mean_ndcg_pagerank": agg["pagerank"] if roles.pagerank else None,
            "columns": DIFFICULTY_DDL,
            FILES_SHA256: files_sha256(tmp.uri),
        }
        if summary["rows"] != ds.manifest["rows"]:
            raise RuntimeError(
                f"internal error: difficulty covered {summary['rows']} rows, the dataset has {ds.manifest['rows']}"
            )
        tmp.write_json(SUMMARY, summary)
    roles_of = (("BM25", roles.bm25), ("PageRank", roles.pagerank))
    means = [f"{r} (f{fid}) {summary[f'mean_ndcg_{r.lower()}']:.4f}" for r, fid in roles_of if fid]
    absent = [r for r, fid in roles_of if not fid]
    log.info(
        "difficulty of %d queries (%d rows) in %.1f s%s%s",
        summary["queries"],
        summary["rows"],
        time.perf_counter() - t0,
        f": mean {spec.name} of {', '.join(means)}" if means else "",
        f"; no {' or '.join(absent)} feature" if absent else "",
    )
    return summary


def plugin_scores(spark: SparkSession, ds: Dataset, fold: int, name: str) -> Any:
    """Difficulty score ``name`` (a function registered with :func:`pipelines.plugins.difficulty`) of each training
    query of ``fold``: a pandas frame of ``subset, qid, score``. A Spark job over the split's rows (only the
    feature columns the score declares), each task loading the driver's plug-ins; what it returns is checked per
    batch (one finite number per query: :func:`pipelines.plugins.checks.scores_of`)."""
    import numpy as np
    import pandas as pd

    from pipelines.data.dataset import load_split
    from pipelines.plugins.loading import current
    from udfs.per_query import map_queries
    from udfs.scores import SCORES

    info = SCORES[name]
    features = list(info.features) if info.features is not None else schema.feature_cols(ds.n_features)
    plugins = current()  # the features it reads were checked against the dataset before (check_curriculum)
    keys = (schema.SUBSET, schema.QID)

    def score(pdf: pd.DataFrame) -> pd.DataFrame:
        from pipelines.plugins.checks import Features, scores_of
        from pipelines.plugins.loading import activate
        from udfs.per_query import run_starts
        from udfs.scores import SCORES

        activate(plugins)
        s = SCORES[name]
        if s.fn is None:  # the driver checked it is a plug-in's: a task without it is not the driver's
            raise RuntimeError(f"internal error: difficulty score {name!r} has no function on this executor")
        starts = run_starts(pdf, keys)
        offsets = np.concatenate((starts, [len(pdf)])).astype(np.int64)
        labels = pdf[schema.LABEL].to_numpy().astype(np.float32)
        out = s.fn(labels, Features({c: pdf[c].to_numpy() for c in features}), offsets, params=s.settings())
        head = pdf.iloc[starts]
        return pd.DataFrame(
            {
                schema.SUBSET: head[schema.SUBSET].to_numpy(),
                schema.QID: head[schema.QID].to_numpy().astype(np.int32),
                "score": scores_of(name, out, len(starts), len(pdf)),
            }
        )

    rows = load_split(spark, ds, fold, "train", [schema.QID, schema.DOC, schema.LABEL, *features])
    ddl = f"{schema.SUBSET} string, {schema.QID} int, score double"
    return map_queries(rows, score, ddl, keys=keys, arranged=True).toPandas()
