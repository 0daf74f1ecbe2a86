"""``ltr curriculum``: which training queries (or documents) each curriculum stage uses.

Strategies (Ferro et al. 2018, plus the controls a fair comparison needs):

* ``q_nrel``: queries with the most relevant documents first;
* ``q_bm25`` / ``q_pagerank``: queries whose ranking by the BM25 / PageRank
  feature has the highest NDCG@k first;
* ``l_hrel``: document level: the first stage keeps only documents whose label
  is in ``hrel_labels`` (default 0, 3, 4: not relevant or highly relevant);
* ``q_size``: queries with the fewest documents first; ``sigma_bm25``: queries whose BM25 values spread least
  (sample standard deviation) first (Penha & Hauff's label-free scores; the scores' kinds: :mod:`udfs.scores`);
* ``random``: a seeded uniform sample of queries, of the same sizes;
* ``none``: all training data in one stage;
* ``anti_<strategy>``: the anti-curriculum of every strategy that orders queries by a score (built-in or
  plug-in): the same score, hardest first (the control of Wu, Dyer & Neyshabur 2021 beside ``random``).

Ties are ordered deterministically: higher score first, then lower qid. Only
the fold's training split is read; vali and test are never touched.

Queries with no relevant document (``n_rel = 0``; their IDCG is 0, so the NDCG
of any ranking of them is undefined and ``metric.empty`` only fills it in) are
handled by ``difficulty.empty_queries`` (``build_curriculum(empty_queries=...)``):

=============  =========================================  ==================================
policy         q_bm25, q_pagerank                         q_nrel / random / l_hrel / none
=============  =========================================  ==================================
``last``       after every other query (by qid); their    q_nrel: the same (n_rel = 0 is its
               score is stored as NaN (undefined)         lowest score anyway); random,
                                                          l_hrel, none: no order, unchanged;
                                                          label-free scores (q_size,
                                                          sigma_bm25): unchanged, ordered by
                                                          the score alone (placing them by
                                                          their labels would make the order
                                                          read the labels)
``exclude``    enter only the last stage (all data); the  the same for q_nrel, random and
               earlier stages hold ``share`` of the other l_hrel (its first stage drops them);
               queries; score stored as NaN               none: one stage, unchanged
``as_metric``  ordered by ``metric.empty`` like any       unchanged
               score (1.0: first, as before this option)
=============  =========================================  ==================================

With ``last`` a stage whose share exceeds the queries that have a relevant
document still takes some empty ones; with ``exclude`` no stage but the last
ever does (and a fold whose training queries all lack one is an error). The
summary records the policy and, per stage, ``queries_without_relevant``.

Output (small: one row per training query): ``CURRICULUM/queries.parquet`` with
``subset, qid, first_stage, score`` (stage ``i`` = queries with
``first_stage <= i``) and ``CURRICULUM/_curriculum.json`` (stages with their
shares, sizes and score ranges, the label filter, conventions, fingerprints).
Training joins it with the dataset; features are never copied.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.core.config import ConfigError, CurriculumConfig, DifficultyConfig
from pipelines.core.secrets import redact
from pipelines.core.storage import atomic_output, file_sha256, read_json
from pipelines.data.dataset import MANIFEST, Dataset, DatasetError, load_split, open_dataset
from pipelines.data.scoring import SUMMARY as DIFFICULTY_SUMMARY
from pipelines.data.scoring import plugin_scores
from udfs import schema
from udfs.curriculum import PACINGS, STRATEGIES, HeldBackError, place_queries, ranked_by, stage_shares
from udfs.scores import SCORES
from udfs.uris import to_uri

log = logging.getLogger(__name__)

SUMMARY = "_curriculum.json"
QUERIES = "queries.parquet"
#: The summary's record of the sha256 of ``queries.parquet``, checked whenever the curriculum is used.
QUERIES_SHA256 = "queries_sha256"


def _read_json(path: str, name: str) -> dict[str, Any]:
    try:
        return read_json(path, name)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no {name}; is it the output of the right ltr step?") from None


def shares_for(cfg: CurriculumConfig) -> np.ndarray:
    """Stage shares for the configured strategy and pacing (the settings were checked when ``cfg`` was made:
    :class:`pipelines.core.config.CurriculumConfig`)."""
    return stage_shares(cfg.strategy, cfg.pacing, cfg.stages, cfg.delta, cfg.fraction)


def check_hrel_labels(labels: list[int], ds: Dataset) -> None:
    """``curriculum.hrel_labels`` must be labels of the dataset (its manifest's ``label_range``)."""
    if "label_range" not in ds.manifest:
        raise DatasetError(f"{ds.path}: its {MANIFEST} has no label_range; ingest it again with `ltr ingest`")
    lo, hi = (int(v) for v in ds.manifest["label_range"])
    bad = [v for v in labels if not lo <= v <= hi]
    if bad:
        name = ds.manifest.get("dataset", "?")
        raise ConfigError(
            f"curriculum.hrel_labels {list(labels)}: label {bad[0]} is outside the label range "
            f"{lo}..{hi} of {ds.path} (dataset {name}, conf/datasets/{name}.yaml); choose labels "
            f"in {lo}..{hi}, e.g. --set curriculum.hrel_labels=[{lo},{hi}]"
        )


_ROLE_NAME = {"bm25": "BM25", "pagerank": "PageRank"}


def supported_strategies(roles: dict[str, int]) -> list[str]:
    """The strategies a dataset with these feature roles supports (0 or absent: it has no such feature)."""
    return [name for name, s in STRATEGIES.items() if s.role is None or roles.get(s.role)]


def check_roles(strategies: list[str], roles: dict[str, int], dataset: str) -> None:
    """Refuse, in one line naming the preset, the strategies whose feature the dataset does not have."""
    bad = [s for s in strategies if s not in supported_strategies(roles)]
    if bad:
        # not the one-stage none, nor the anti-curricula (each ordered one has its own)
        ok = [s for s in supported_strategies(roles) if STRATEGIES[s].shares != (1.0,) and not STRATEGIES[s].reverse]
        keep = ",".join(s for s in strategies if s in ok) or ",".join(ok)
        needs = " and ".join(
            f"{s} ranks queries by {_ROLE_NAME.get(str(STRATEGIES[s].role), STRATEGIES[s].role)}" for s in bad
        )
        raise ConfigError(
            f"{needs}, and dataset {dataset} (conf/datasets/{dataset}.yaml) has no such feature: "
            f"it supports {', '.join(ok)} (a grid: --set grid.strategies=[{keep}])"
        )


def missing_features(score: str, ds: Dataset) -> None:
    """Refuse, in one line, a plug-in difficulty score whose ``features=`` names columns ``ds`` does not have."""
    info = SCORES[score]
    bad = [c for c in info.features or () if int(c[1:]) > ds.n_features]
    if bad:
        name = ds.manifest.get("dataset", "?")
        raise DatasetError(
            f"difficulty score {score!r} reads {', '.join(bad)} (features=), and {ds.path} (dataset {name}) has "
            f"{ds.n_features} features, f1..f{ds.n_features}"
        )


def check_curriculum(
    cfg: CurriculumConfig,
    ds: Dataset,
    empty_queries: str = DifficultyConfig.empty_queries,
    roles: dict[str, int] | None = None,
) -> np.ndarray:
    """Check a curriculum's settings against the dataset (no Spark needed); return its stage shares.

    The settings themselves are checked where they are configured (:class:`pipelines.core.config.CurriculumConfig`;
    ``empty_queries`` by :class:`~pipelines.core.config.DifficultyConfig`, made here when it comes as a string);
    what is left is what depends on the dataset (``hrel_labels`` against its label range; a strategy that ranks
    by a feature the dataset lacks: ``roles``, default the manifest's, as the difficulty scores resolved them).
    """
    check_roles([cfg.strategy], ds.feature_roles if roles is None else roles, ds.manifest.get("dataset", "?"))
    score = STRATEGIES[cfg.strategy].score
    if score is not None:
        missing_features(score, ds)
    shares = shares_for(cfg)
    DifficultyConfig(empty_queries=empty_queries)  # the section's one check of the policy (ConfigError)
    if cfg.strategy == "l_hrel":
        check_hrel_labels(cfg.hrel_labels, ds)
    return shares


def build_curriculum(
    spark: SparkSession,
    data: str,
    difficulty: str,
    fold: int,
    cfg: CurriculumConfig,
    out: str,
    name: str = "",
    key: str = "",
    *,
    empty_queries: str = DifficultyConfig.empty_queries,
    teacher: str | None = None,
) -> dict[str, Any]:
    """Select the stages of fold ``fold``'s training queries; write ``out``; return the summary.

    ``name``: what training paths call it (default: the strategy); ``key``: an
    opaque version stamp recorded in the summary (the grid uses it to reuse it);
    ``empty_queries``: ``difficulty.empty_queries``, how queries without a relevant
    document are placed (see the module docstring); ``teacher``: the fold's teacher scores
    (:mod:`pipelines.data.teacher_scores`), which a strategy ordered by a ``model`` score reads."""
    t0 = time.perf_counter()
    ds = open_dataset(data)
    diff_meta = _read_json(difficulty, DIFFICULTY_SUMMARY)
    shares = check_curriculum(cfg, ds, empty_queries, diff_meta.get("feature_roles"))
    train_parts = ds.subsets(fold, "train")
    if diff_meta.get("dataset_fingerprint") != ds.fingerprint:
        raise DatasetError(
            f"{difficulty} was computed for another dataset (fingerprint "
            f"{str(diff_meta.get('dataset_fingerprint'))[:19]}, {data} has {ds.fingerprint[:19]}); "
            "rerun `ltr difficulty`"
        )
    # One row per training query: small enough for the driver (31,531 rows for all of MSLR-WEB30K).
    scores: Any = spark.read.parquet(to_uri(difficulty)).where(F.col(schema.SUBSET).isin(train_parts)).toPandas()
    pdf = scores.sort_values([schema.QID, schema.SUBSET], kind="stable").reset_index(drop=True)
    dup = pdf[schema.QID].duplicated()
    if dup.any():
        raise DatasetError(
            f"fold {fold}: qid {int(pdf[schema.QID][dup].iloc[0])} appears in several training "
            "subsets; queries must be unique within a split"
        )
    n = len(pdf)
    if n == 0:
        raise DatasetError(f"fold {fold}: the training split has no queries in {difficulty}")
    qid = pdf[schema.QID].to_numpy()
    empty = pdf["n_rel"].to_numpy() == 0
    columns = {c: pdf[c].to_numpy() for c in ("n_rel", *ranked_by()) if SCORES[c].fn is None and c in pdf}
    ranked = STRATEGIES[cfg.strategy].score
    if ranked is not None and SCORES[ranked].kind == "model":  # a teacher's judgement: the fold's teacher scores
        from pipelines.data.teacher_scores import read_teacher_scores

        if teacher is None:
            raise ConfigError(
                f"curriculum {name or cfg.strategy}: strategy {cfg.strategy} is ordered by a teacher's judgement; "
                "`ltr grid` trains its teachers and builds it"
            )
        judged = pdf[[schema.SUBSET, schema.QID]].merge(
            read_teacher_scores(teacher)[[schema.SUBSET, schema.QID, ranked]],
            on=[schema.SUBSET, schema.QID],
            how="left",
            indicator=True,
        )
        missing = judged[schema.QID][judged["_merge"] != "both"]
        if len(missing):
            raise DatasetError(
                f"{teacher}: no teacher score for qid {int(missing.iloc[0])} ({len(missing)} of fold {fold}'s "
                f"{n} training queries); the teacher scores are another fold's or dataset's"
            )
        columns[ranked] = judged[ranked].to_numpy()
    if ranked is not None and SCORES[ranked].fn is not None:  # a plug-in's score: computed from the fold's rows
        computed = plugin_scores(spark, ds, fold, ranked)
        merged = pdf[[schema.SUBSET, schema.QID]].merge(computed, on=[schema.SUBSET, schema.QID], how="left")
        if merged["score"].isna().any():
            raise RuntimeError(f"internal error: difficulty score {ranked!r} missed training queries of fold {fold}")
        columns[ranked] = merged["score"].to_numpy()
    try:
        first, score, _ = place_queries(cfg.strategy, columns, qid, shares, empty_queries, cfg.seed)
    except HeldBackError:
        raise DatasetError(
            f"fold {fold}: none of the {n} training queries has a relevant document, so with "
            "difficulty.empty_queries=exclude every stage but the last would be empty; "
            "use last or as_metric"
        ) from None
    label_filter = list(cfg.hrel_labels) if cfg.strategy == "l_hrel" else None
    stages = _stage_summaries(spark, ds, fold, pdf, first, score, empty, shares, label_filter)
    summary = {
        "name": name or cfg.strategy,
        "key": key,
        "strategy": cfg.strategy,
        "fold": fold,
        "train_subsets": train_parts,
        "pacing": cfg.pacing or ("two_stage" if len(shares) == 2 else "none"),
        "fraction": cfg.fraction if not cfg.pacing else None,
        "delta": cfg.delta if cfg.pacing else None,
        "pacing_settings": PACINGS[cfg.pacing].settings() if cfg.pacing else None,
        "seed": cfg.seed if STRATEGIES[cfg.strategy].seeded else None,
        "score": STRATEGIES[cfg.strategy].score,
        "order": _order_text(cfg.strategy, empty_queries),
        "empty_queries": empty_queries,
        "queries_without_relevant": int(empty.sum()),
        "stages": stages,
        "n_stages": len(stages),
        "queries": n,
        "dataset": redact(data),
        "dataset_fingerprint": ds.fingerprint,
        "difficulty": redact(difficulty),
        "difficulty_conventions": diff_meta.get("conventions"),
        **({"teacher": redact(teacher)} if teacher and STRATEGIES[cfg.strategy].kind == "model" else {}),
    }
    table = pa.table(
        {
            schema.SUBSET: pa.array(pdf[schema.SUBSET].astype(str)),
            schema.QID: pa.array(qid.astype(np.int32)),
            "first_stage": pa.array(first),
            "score": pa.array(score),
        }
    )
    with atomic_output(out, SUMMARY) as tmp:
        summary[QUERIES_SHA256] = tmp.write_parquet(QUERIES, table)
        tmp.write_json(SUMMARY, summary)
    log.info(
        "curriculum %s fold %d (empty queries: %s, %d of %d): %d stages, queries per stage %s, in %.1f s",
        cfg.strategy,
        fold,
        empty_queries,
        int(empty.sum()),
        n,
        len(stages),
        [s["queries"] for s in stages],
        time.perf_counter() - t0,
    )
    return summary


def _order_text(strategy: str, empty_queries: str) -> str:
    """How the queries were placed in the stages, in words (recorded in the summary)."""
    s = STRATEGIES[strategy]
    held = empty_queries == "exclude" and s.shares != (1.0,)
    tail = "; queries without a relevant document enter only the last stage" if held else ""
    if s.seeded:
        return "seeded random permutation" + tail
    if s.score is None:  # none, l_hrel
        return (
            "every query with a relevant document in every stage" + tail
            if held
            else "no order: every query in every stage"
        )
    label_free = s.kind == "label_free"  # ordered by the score alone: "last" would read the labels
    first = "queries without a relevant document last, then " if empty_queries == "last" and not label_free else ""
    way = "ascending (the hardest first: an anti-curriculum)" if s.reverse else "descending"
    return f"{first}score {way}, then qid ascending{tail}"


def _stage_summaries(
    spark: SparkSession,
    ds: Dataset,
    fold: int,
    pdf,
    first: np.ndarray,
    score: np.ndarray,
    empty: np.ndarray,
    shares: np.ndarray,
    label_filter: list[int] | None,
) -> list[dict]:
    n_docs = pdf["n_docs"].to_numpy()
    out = []
    for i, share in enumerate(shares):
        sel = first <= i
        st: dict[str, Any] = {
            "stage": i,
            "share": float(share),
            "queries": int(sel.sum()),
            "queries_without_relevant": int(empty[sel].sum()),
            "documents": int(n_docs[sel].sum()),
            "label_filter": None,
        }
        if np.isfinite(score[sel]).any():
            st["score_min"], st["score_max"] = float(np.nanmin(score[sel])), float(np.nanmax(score[sel]))
        out.append(st)
    if label_filter is not None:
        # Per query: documents the filter keeps, and how many of them are relevant (one row per query).
        lab = F.col(schema.LABEL)
        kept = (
            load_split(spark, ds, fold, "train", [schema.QID, schema.LABEL])
            .where(lab.isin(label_filter))
            .groupBy(schema.SUBSET, schema.QID)
            .agg(F.count("*").alias("kept"), F.sum((lab > 0).cast("int")).alias("kept_rel"))
            .toPandas()
        )
        per_q = pdf[[schema.SUBSET, schema.QID]].merge(kept, on=[schema.SUBSET, schema.QID], how="left")
        sel = first == 0
        rel = int(per_q["kept_rel"].fillna(0).to_numpy()[sel].sum())
        if rel == 0:
            labels = sorted(
                r[0]
                for r in load_split(spark, ds, fold, "train", [schema.LABEL]).select(schema.LABEL).distinct().collect()
            )
            raise ConfigError(
                f"fold {fold}: no training document has a relevant label (> 0) in "
                f"curriculum.hrel_labels {label_filter}, so l_hrel's first stage would hold no "
                f"relevant document; the training labels are {labels}"
            )
        out[0].update(
            label_filter=label_filter,
            documents=int(per_q["kept"].fillna(0).to_numpy()[sel].sum()),
            relevant_documents=rel,
        )
    return out


def read_curriculum(path: str) -> dict[str, Any]:
    """The summary of a curriculum written by :func:`build_curriculum`."""
    return _read_json(path, SUMMARY)


def changed_on_disk(path: str, summary: dict[str, Any]) -> bool:
    """Whether the curriculum's ``queries.parquet`` no longer has the sha256 its summary recorded (a curriculum
    built before the record existed is taken as it is)."""
    want = summary.get(QUERIES_SHA256)
    return want is not None and file_sha256(path, QUERIES) != want


def stored_curriculum(path: str, key: str) -> dict[str, Any] | None:
    """The summary of the curriculum at ``path`` when it was built from the inputs whose
    :func:`pipelines.core.keys.curriculum_key` is ``key`` and its queries are the bytes it wrote; None when missing,
    unreadable, built from other inputs or changed on disk (the freshness check of
    :func:`pipelines.study.steps.curriculum_state`: it is built again)."""
    try:
        summary = read_curriculum(path)
    except DatasetError:
        return None
    if summary.get("key") != key:
        return None
    if changed_on_disk(path, summary):
        log.warning(
            "curriculum %s: %s does not match the checksum it was written with; it is built again", path, QUERIES
        )
        return None
    return summary


@dataclass(frozen=True)
class Curriculum:
    """A curriculum passed to training: its directory and summary."""

    path: str
    summary: dict[str, Any]

    @property
    def name(self) -> str:
        """The curriculum's name: the summary's ``name``, else its ``strategy``."""
        return str(self.summary.get("name") or self.summary["strategy"])

    @property
    def n_stages(self) -> int:
        """Number of stages of the curriculum (the summary's ``n_stages``)."""
        return int(self.summary["n_stages"])

    @property
    def column(self) -> str:
        """Name of the training frame's column holding each train row's first stage (``_cur_<name>``)."""
        return f"_cur_{self.name}"

    def label_filters(self) -> dict[int, list[int]]:
        """Stage -> the labels a stage's rows are restricted to, for the stages that have a label filter.

        Returns
        -------
        dict[int, list[int]]
            Only the stages whose summary has a non-empty ``label_filter`` (``l_hrel``'s); the other stages
            train on every label of their queries.
        """
        return {s["stage"]: s["label_filter"] for s in self.summary["stages"] if s.get("label_filter")}


def load_curricula(paths: list[str], ds: Dataset, fold: int) -> list[Curriculum]:
    """Curricula named by their strategy; each must belong to this dataset and fold."""
    out: dict[str, Curriculum] = {}
    for p in paths:
        c = Curriculum(to_uri(p), read_curriculum(p))
        if changed_on_disk(p, c.summary):
            raise DatasetError(
                f"curriculum {p}: {QUERIES} does not match the checksum it was written with (it changed on disk); "
                "build it again with `ltr curriculum`"
            )
        if c.summary.get("dataset_fingerprint") != ds.fingerprint:
            raise DatasetError(f"curriculum {p} was built for another dataset; rebuild it with `ltr curriculum`")
        if int(c.summary.get("fold", -1)) != fold:
            raise DatasetError(f"curriculum {p} is for fold {c.summary.get('fold')}, not fold {fold}")
        if c.name in out:
            raise ConfigError(f"two curricula named {c.name!r} ({out[c.name].path} and {p})")
        out[c.name] = c
    return list(out.values())
