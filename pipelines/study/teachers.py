"""The teachers of a study's ``model`` difficulty scores, planned: which training paths teach, on which queries,
and the keys that tie a teacher-based curriculum to its teachers (no Spark but in :func:`build_teacher_queries`).

A curriculum ordered by ``teacher_margin``, ``teacher_loss`` or ``teacher_ndcg`` (:mod:`udfs.teacher`) needs a
fold's teacher scores, which need the fold's teachers: ``teacher.path`` trained by the plan like any node
(checkpointed, leased, resumed, shown by ``ltr grid --plan`` and ``ltr keys``). With ``teacher.crossfit`` K >= 2
there are K teachers: teacher g trains on the one-stage curriculum ``teacher_xfit<g>of<K>``, the training queries
outside cross-fitting group g (:func:`udfs.teacher.crossfit_groups`), and scores only group g's queries; with 0,
one teacher trains on ``teacher_all`` (every training query) and scores them all. The teachers' data is their own,
so their nodes never share a prefix with the study's paths: editing ``teacher.path`` retrains the teachers and
what is built on their scores, nothing else.

The graph, per fold: teacher curricula (here) -> teacher nodes (the plan) -> teacher scores
(:mod:`pipelines.data.teacher_scores`) -> the curricula ordered by them (their key holds the scores' key, which
holds the teachers' node keys) -> the nodes that train on those.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.core import keys
from pipelines.core.config import Config, ConfigError
from pipelines.core.layout import Layout
from pipelines.core.storage import atomic_output
from pipelines.data.curricula import QUERIES, QUERIES_SHA256, SUMMARY, stored_curriculum
from pipelines.data.dataset import Dataset, DatasetError
from pipelines.plan.paths import TrainingPath, parse_path
from udfs import schema
from udfs.curriculum import STRATEGIES
from udfs.teacher import crossfit_groups

log = logging.getLogger(__name__)

#: The label of a teacher's path (``teacher-2of5``: the teacher of group 2 of 5; ``teacher``: the one of crossfit 0).
LABEL = "teacher"


def model_curricula(strategies: Iterable[str]) -> list[str]:
    """The strategies of ``strategies`` ordered by a teacher's score (kind ``model``), each once, sorted."""
    return sorted({s for s in strategies if STRATEGIES[s].kind == "model"})


def teacher_data(cfg: Config) -> list[str]:
    """The teachers' curricula: ``teacher_xfit<g>of<K>`` per group, or ``teacher_all`` for crossfit 0."""
    k = cfg.teacher.crossfit
    return [f"teacher_xfit{g}of{k}" for g in range(k)] if k else ["teacher_all"]


def teacher_paths(cfg: Config) -> list[TrainingPath]:
    """One training path per teacher (group order): ``teacher.path`` with every segment on the teacher's own
    queries (stage 0 of its curriculum, :func:`teacher_data`)."""
    base = parse_path(cfg.teacher.path, LABEL)
    k = cfg.teacher.crossfit
    out = []
    for g, data in enumerate(teacher_data(cfg)):
        label = f"{LABEL}-{g}of{k}" if k else LABEL
        out.append(TrainingPath(tuple(replace(s, data=f"{data}.0") for s in base.segments), label))
    return out


def check_teacher(cfg: Config, ds: Dataset, folds: Iterable[int]) -> None:
    """Before any Spark job: the teacher's path parses, and ``teacher.crossfit`` is not above the number of any
    fold's training queries (each group must hold a query); ConfigError / PathError, exit 2."""
    teacher_paths(cfg)
    k = cfg.teacher.crossfit
    for f in folds:
        n = ((ds.manifest.get("splits") or {}).get(str(f)) or {}).get("train", {}).get("queries")
        if k and n is not None and k > int(n):
            raise ConfigError(
                f"teacher.crossfit {k}: fold {f} has {n} training queries, fewer than the cross-fitting groups; "
                f"choose at most {n}, or 0 (one teacher trained on every training query)"
            )


def teacher_query_key(cfg: Config, ds: Dataset, fold: int, name: str) -> str:
    """The key of teacher curriculum ``name`` of ``fold``: the cross-fitting, the dataset, the fold, the code."""
    return keys.curriculum_key(
        settings={"crossfit": cfg.teacher.crossfit, "seed": cfg.teacher.seed},
        dataset=ds.fingerprint,
        fold=fold,
        name=name,
        difficulty="",
        empty_queries="",
        scores="",
        code=keys.code_identity("teacher_scores"),
    )


def stored_teacher_query_keys(cfg: Config, ds: Dataset, fold: int) -> dict[str, str]:
    """Content key of each teacher curriculum as built in the work directory (``unbuilt:...`` where it is not)."""
    layout = Layout.of(cfg)
    out = {}
    for name in teacher_data(cfg):
        key = teacher_query_key(cfg, ds, fold, name)
        summary = stored_curriculum(layout.curriculum(fold, name), key)
        out[name] = keys.curriculum_content_key(summary) if summary is not None else f"unbuilt:{key}"
    return out


def build_teacher_queries(
    queries: Any, ds: Dataset, fold: int, cfg: Config, name: str, out: str, key: str
) -> dict[str, Any]:
    """Write teacher curriculum ``name`` of ``fold`` to ``out`` from ``queries`` (the fold's training queries: a
    pandas frame of ``subset, qid, n_docs`` sorted by qid): stage 0 the teacher's queries, stage 1 all; return its
    summary."""
    k = cfg.teacher.crossfit
    n = len(queries)
    qid = queries[schema.QID].to_numpy()
    if k:
        g = teacher_data(cfg).index(name)
        held = crossfit_groups(qid, k, cfg.teacher.seed) == g
    else:
        held = np.zeros(n, bool)
    if held.all() or n == 0:
        raise DatasetError(f"fold {fold}: teacher curriculum {name} would train on no query")
    n_docs = queries["n_docs"].to_numpy()
    first = held.astype(np.int32)
    stages = [
        {
            "stage": i,
            "share": float((first <= i).mean()),
            "queries": int((first <= i).sum()),
            "queries_without_relevant": None,
            "documents": int(n_docs[first <= i].sum()),
            "label_filter": None,
        }
        for i in range(2 if k else 1)
    ]
    summary = {
        "name": name,
        "key": key,
        "strategy": "teacher",
        "fold": fold,
        "train_subsets": ds.subsets(fold, "train"),
        "teacher": {**asdict(cfg.teacher), "group": teacher_data(cfg).index(name) if k else None},
        "order": "the teacher's queries (outside its cross-fitting group), then all" if k else "every query",
        "stages": stages,
        "n_stages": len(stages),
        "queries": n,
        "dataset_fingerprint": ds.fingerprint,
    }
    table = pa.table(
        {
            schema.SUBSET: pa.array(queries[schema.SUBSET].astype(str)),
            schema.QID: pa.array(qid.astype(np.int32)),
            "first_stage": pa.array(first),
            "score": pa.array(np.full(n, np.nan)),
        }
    )
    with atomic_output(out, SUMMARY) as tmp:
        summary[QUERIES_SHA256] = tmp.write_parquet(QUERIES, table)
        tmp.write_json(SUMMARY, summary)
    log.info("teacher curriculum %s of fold %d: %d of %d training queries", name, fold, stages[0]["queries"], n)
    return summary


def teacher_scores_key(cfg: Config, ds: Dataset, fold: int, teachers: Mapping[int, str]) -> str:
    """The key of fold ``fold``'s teacher scores: the teachers' last node keys by group, the cross-fitting, the
    metric, the dataset, the scoring code."""
    return keys.make_key(
        "teacher_scores",
        {
            "teachers": {str(g): k for g, k in sorted(teachers.items())},
            "crossfit": cfg.teacher.crossfit,
            "seed": cfg.teacher.seed,
            "metric": cfg.metric.to_dict(),
            "dataset": ds.fingerprint,
            "fold": fold,
            "code": keys.code_identity("teacher_scores"),
        },
    )


def teacher_identity(scores_key: str, summary: Mapping[str, Any] | None) -> str:
    """What a teacher-based curriculum's key holds of its teacher scores: their key and content fingerprint (""
    when they are not computed: the curriculum is then unbuilt)."""
    return f"teacher:{scores_key}:{summary['content_fingerprint']}" if summary is not None else ""
