"""``ltr curriculum``: which training queries (or documents) each curriculum stage uses.

Strategies (Ferro et al. 2018, plus the controls a fair comparison needs):

* ``q_nrel``: queries with the most relevant documents first;
* ``q_bm25`` / ``q_pagerank``: queries whose ranking by the BM25 / PageRank
  feature has the highest NDCG@k first;
* ``l_hrel``: document level: the first stage keeps only documents whose label
  is in ``hrel_labels`` (default 0, 3, 4: not relevant or highly relevant);
* ``random``: a seeded uniform sample of queries, of the same sizes;
* ``none``: all training data in one stage.

Ties are ordered deterministically: higher score first, then lower qid. Only
the fold's training split is read; vali and test are never touched.

Output (small: one row per training query): ``CURRICULUM/queries.parquet`` with
``subset, qid, first_stage, score`` (stage ``i`` = queries with
``first_stage <= i``) and ``CURRICULUM/_curriculum.json`` (stages with their
shares, sizes and score ranges, the label filter, conventions, fingerprints).
Training joins it with the dataset; features are never copied.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.config import ConfigError, CurriculumConfig
from pipelines.dataset import DatasetError, load_split, open_dataset
from pipelines.difficulty import SUMMARY as DIFFICULTY_SUMMARY
from pipelines.storage import atomic_output, read_json
from udfs import schema
from udfs.curriculum import assign_first_stage, easiest_first, pacing_shares, stage_sizes, two_stage_shares
from udfs.letor_chunks import to_uri

log = logging.getLogger(__name__)

SUMMARY = "_curriculum.json"
QUERIES = "queries.parquet"
STRATEGIES = ("q_nrel", "q_bm25", "q_pagerank", "l_hrel", "random", "none")
SCORE_OF = {"q_nrel": "n_rel", "q_bm25": "ndcg_bm25", "q_pagerank": "ndcg_pagerank"}


def _read_json(path: str, name: str) -> dict[str, Any]:
    try:
        return read_json(path, name)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no {name}; is it the output of the right ltr step?") from None


def shares_for(cfg: CurriculumConfig) -> np.ndarray:
    """Stage shares for the configured strategy and pacing."""
    if cfg.strategy not in STRATEGIES:
        raise ConfigError(f"unknown curriculum strategy {cfg.strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if cfg.strategy == "none":
        return np.array([1.0])
    if cfg.strategy == "l_hrel":
        if cfg.pacing:
            raise ConfigError("l_hrel is a document label filter, not a query order, so it takes no --pacing: "
                              "it always has two stages (the filtered documents, then all)")
        return np.array([1.0, 1.0])
    try:
        if cfg.pacing:
            return pacing_shares(cfg.pacing, cfg.stages, cfg.delta, cfg.root_n)
        return two_stage_shares(cfg.fraction)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def build_curriculum(spark: SparkSession, data: str, difficulty: str, fold: int, cfg: CurriculumConfig,
                     out: str, name: str = "", key: str = "") -> dict[str, Any]:
    """Select the stages of fold ``fold``'s training queries; write ``out``; return the summary.

    ``name``: what training paths call it (default: the strategy); ``key``: an
    opaque version stamp recorded in the summary (the grid uses it to reuse it)."""
    t0 = time.perf_counter()
    shares = shares_for(cfg)
    ds = open_dataset(data)
    train_parts = ds.subsets(fold, "train")
    diff_meta = _read_json(difficulty, DIFFICULTY_SUMMARY)
    if diff_meta.get("dataset_fingerprint") != ds.fingerprint:
        raise DatasetError(f"{difficulty} was computed for another dataset (fingerprint "
                           f"{str(diff_meta.get('dataset_fingerprint'))[:19]}, {data} has {ds.fingerprint[:19]}); "
                           "rerun `ltr difficulty`")
    # One row per training query: small enough for the driver (31,531 rows for all of MSLR-WEB30K).
    pdf = (spark.read.parquet(to_uri(difficulty)).where(F.col(schema.SUBSET).isin(train_parts))
           .toPandas().sort_values([schema.QID, schema.SUBSET], kind="stable").reset_index(drop=True))
    dup = pdf[schema.QID].duplicated()
    if dup.any():
        raise DatasetError(f"fold {fold}: qid {int(pdf[schema.QID][dup].iloc[0])} appears in several training "
                           "subsets; queries must be unique within a split")
    n = len(pdf)
    if n == 0:
        raise DatasetError(f"fold {fold}: the training split has no queries in {difficulty}")
    sizes = stage_sizes(n, shares)
    qid = pdf[schema.QID].to_numpy()
    if cfg.strategy in SCORE_OF:
        score = pdf[SCORE_OF[cfg.strategy]].to_numpy(np.float64)
        order = easiest_first(score, qid)
    elif cfg.strategy == "random":
        score = np.full(n, np.nan)
        order = np.random.default_rng(cfg.seed).permutation(n)  # of the qid-sorted queries: reproducible
    else:  # none, l_hrel: every query in every stage
        score = np.full(n, np.nan)
        order = np.arange(n)
    first = assign_first_stage(order, sizes)
    label_filter = list(cfg.hrel_labels) if cfg.strategy == "l_hrel" else None
    stages = _stage_summaries(spark, ds, fold, pdf, first, score, shares, label_filter, cfg)
    summary = {
        "name": name or cfg.strategy, "key": key,
        "strategy": cfg.strategy, "fold": fold, "train_subsets": train_parts,
        "pacing": cfg.pacing or ("two_stage" if len(shares) == 2 else "none"),
        "fraction": cfg.fraction if not cfg.pacing else None,
        "delta": cfg.delta if cfg.pacing else None, "root_n": cfg.root_n if cfg.pacing == "root_n" else None,
        "seed": cfg.seed if cfg.strategy == "random" else None,
        "score": SCORE_OF.get(cfg.strategy), "order": "score descending, then qid ascending",
        "stages": stages, "n_stages": len(stages), "queries": n,
        "dataset": data, "dataset_fingerprint": ds.fingerprint, "difficulty": difficulty,
        "difficulty_conventions": diff_meta.get("conventions"),
    }
    table = pa.table({schema.SUBSET: pa.array(pdf[schema.SUBSET].astype(str)),
                      schema.QID: pa.array(qid.astype(np.int32)),
                      "first_stage": pa.array(first), "score": pa.array(score)})
    with atomic_output(out, SUMMARY) as tmp:
        pq.write_table(table, f"{tmp.path}/{QUERIES}", filesystem=tmp.fs)
        tmp.write_json(SUMMARY, summary)
    log.info("curriculum %s fold %d: %d stages, queries per stage %s, in %.1f s", cfg.strategy, fold,
             len(stages), [s["queries"] for s in stages], time.perf_counter() - t0)
    return summary


def _stage_summaries(spark: SparkSession, ds, fold: int, pdf, first: np.ndarray, score: np.ndarray,
                     shares: np.ndarray, label_filter: list[int] | None, cfg: CurriculumConfig) -> list[dict]:
    n_docs = pdf["n_docs"].to_numpy()
    out = []
    for i, share in enumerate(shares):
        sel = first <= i
        st: dict[str, Any] = {"stage": i, "share": float(share), "queries": int(sel.sum()),
                              "documents": int(n_docs[sel].sum()), "label_filter": None}
        if np.isfinite(score[sel]).any():
            st["score_min"], st["score_max"] = float(np.nanmin(score[sel])), float(np.nanmax(score[sel]))
        out.append(st)
    if label_filter is not None:
        kept = (load_split(spark, ds, fold, "train", [schema.LABEL])
                .where(F.col(schema.LABEL).isin(label_filter)).count())
        out[0].update(label_filter=label_filter, documents=int(kept))
    return out


def read_curriculum(path: str) -> dict[str, Any]:
    """The summary of a curriculum written by :func:`build_curriculum`."""
    return _read_json(path, SUMMARY)
