"""Curricula: pacing arithmetic, deterministic order, nested stages, train split only, reproducible."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from pipelines.core.config import ConfigError, CurriculumConfig
from pipelines.data.curricula import build_curriculum
from pipelines.data.dataset import DatasetError, load_split, open_dataset
from tests.helpers import component_settings
from udfs import schema
from udfs.curriculum import assign_first_stage, easiest_first, pacing_shares, stage_sizes


def test_pacing_shares_by_hand():
    x = np.array([0, 1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(pacing_shares("linear", 4, 0.25), [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(pacing_shares("root_n", 4, 0.25), np.sqrt(0.0625 + 0.9375 * x))
    with component_settings(root_n={"n": 3.0}):  # root_n's own setting, components.root_n.n
        np.testing.assert_allclose(pacing_shares("root_n", 4, 0.25), np.cbrt(0.25**3 + (1 - 0.25**3) * x))
    np.testing.assert_allclose(pacing_shares("geometric", 4, 0.25), [0.25, 0.25 * 4 ** (1 / 3), 0.25 * 4 ** (2 / 3), 1])
    np.testing.assert_allclose(pacing_shares("step", 4, 0.25), [0.25, 0.625, 1.0, 1.0])
    for p in ("linear", "root_n", "geometric", "step"):
        s = pacing_shares(p, 7, 0.1)
        assert s[0] == pytest.approx(0.1) and s[-1] == 1.0 and np.all(np.diff(s) >= 0)
    with pytest.raises(ValueError, match="unknown pacing function 'cosine'"):
        pacing_shares("cosine", 3, 0.2)
    with pytest.raises(ValueError, match="at least 2 stages"):
        pacing_shares("linear", 1, 0.2)


def test_sizes_order_and_assignment():
    assert stage_sizes(10, np.array([0.25, 1.0])).tolist() == [3, 10]
    assert stage_sizes(3, np.array([0.01, 0.5, 1.0])).tolist() == [1, 2, 3]
    # higher score first, ties by lower qid
    order = easiest_first(np.array([1.0, 2.0, 2.0, 0.0]), np.array([4, 9, 3, 1]))
    assert order.tolist() == [2, 1, 0, 3]
    first = assign_first_stage(order, np.array([1, 3, 4]))
    assert first.tolist() == [1, 1, 0, 2]  # query 2 (score 2, qid 3) is the easiest


def _stage_qids(out: Path) -> tuple[dict, list[set[int]]]:
    summary = json.loads((out / "_curriculum.json").read_text())
    t = pq.read_table(out / "queries.parquet").to_pandas()
    return summary, [set(t.loc[t.first_stage <= i, schema.QID]) for i in range(summary["n_stages"])]


@pytest.mark.parametrize(
    "strategy, pacing",
    [
        ("q_nrel", ""),
        ("q_bm25", ""),
        ("q_pagerank", "root_n"),
        ("random", "geometric"),
        ("q_bm25", "step"),
        ("none", ""),
    ],
)
def test_stage_properties(spark, small_dataset, small_difficulty, tmp_path, strategy, pacing):
    cfg = CurriculumConfig(strategy=strategy, pacing=pacing, stages=4, delta=0.2, fraction=0.3)
    fold = 2
    ds = open_dataset(small_dataset)
    train_qids = {r[0] for r in load_split(spark, ds, fold, "train", [schema.QID]).distinct().collect()}
    other = {
        r[0]
        for r in spark.read.parquet(small_dataset)
        .where(~F.col(schema.SUBSET).isin(ds.subsets(fold, "train")))
        .select(schema.QID)
        .distinct()
        .collect()
    }
    s = build_curriculum(spark, small_dataset, small_difficulty, fold, cfg, str(tmp_path / "c1"))
    summary, stages = _stage_qids(tmp_path / "c1")
    assert summary == json.loads(json.dumps(s))
    n = len(train_qids)
    for a, b in zip(stages, stages[1:], strict=False):
        assert a <= b  # nested
    assert stages[-1] == train_qids  # the last stage is the whole training split
    assert not stages[-1] & other  # vali / test never touched
    if strategy == "none":
        shares = [1.0]
    elif pacing:
        shares = pacing_shares(pacing, 4, 0.2).tolist()
    else:
        shares = [0.3, 1.0]
    assert [len(x) for x in stages] == [min(n, max(1, math.ceil(f * n - 1e-9))) for f in shares]
    assert [st["queries"] for st in summary["stages"]] == [len(x) for x in stages]
    # same inputs, same selection
    build_curriculum(spark, small_dataset, small_difficulty, fold, cfg, str(tmp_path / "c2"))
    assert _stage_qids(tmp_path / "c2")[1] == stages


def test_easiest_queries_really_come_first(spark, small_dataset, small_difficulty, tmp_path):
    cfg = CurriculumConfig(strategy="q_nrel")
    build_curriculum(spark, small_dataset, small_difficulty, 1, cfg, str(tmp_path / "c"))
    t = pq.read_table(tmp_path / "c" / "queries.parquet").to_pandas()
    first, rest = t[t.first_stage == 0], t[t.first_stage == 1]
    assert first.score.min() >= rest.score.max()
    tied = t[t.score == first.score.min()]
    assert set(first[first.score == first.score.min()][schema.QID]) == set(
        sorted(tied[schema.QID])[: (first.score == first.score.min()).sum()]
    )  # ties: lower qid first


def test_random_control_is_seeded_and_same_size(spark, small_dataset, small_difficulty, tmp_path):
    q = build_curriculum(
        spark, small_dataset, small_difficulty, 1, CurriculumConfig(strategy="q_nrel"), str(tmp_path / "q")
    )
    r1 = build_curriculum(
        spark, small_dataset, small_difficulty, 1, CurriculumConfig(strategy="random", seed=1), str(tmp_path / "r1")
    )
    build_curriculum(
        spark, small_dataset, small_difficulty, 1, CurriculumConfig(strategy="random", seed=2), str(tmp_path / "r2")
    )
    assert [s["queries"] for s in r1["stages"]] == [s["queries"] for s in q["stages"]]
    assert _stage_qids(tmp_path / "r1")[1][0] != _stage_qids(tmp_path / "r2")[1][0]


def test_l_hrel_label_filter(spark, small_dataset, small_difficulty, tmp_path):
    s = build_curriculum(
        spark, small_dataset, small_difficulty, 3, CurriculumConfig(strategy="l_hrel"), str(tmp_path / "c")
    )
    ds = open_dataset(small_dataset)
    train = load_split(spark, ds, 3, "train", [schema.LABEL])
    assert s["stages"][0]["label_filter"] == [0, 3, 4]
    assert s["stages"][0]["documents"] == train.where(F.col(schema.LABEL).isin(0, 3, 4)).count()
    assert s["stages"][1]["documents"] == train.count() and s["stages"][1]["label_filter"] is None


def test_errors(spark, small_dataset, small_difficulty, tmp_path):
    out = str(tmp_path / "x")

    def build(cfg, fold=1, difficulty=small_difficulty):
        build_curriculum(spark, small_dataset, difficulty, fold, cfg, out)

    with pytest.raises(
        ConfigError,
        match=r"curriculum.strategy \(--strategy\): unknown curriculum strategy 'q_hard' \(one of: q_nrel, .*none\)",
    ):
        build(CurriculumConfig(strategy="q_hard"))
    with pytest.raises(ConfigError, match="l_hrel is a document label filter, not a query order"):
        build(CurriculumConfig(strategy="l_hrel", pacing="linear"))
    with pytest.raises(ConfigError, match=r"fraction \(--fraction\) must be in \(0, 1\] \(a share .*\), got 1.5"):
        build(CurriculumConfig(fraction=1.5))
    with pytest.raises(DatasetError, match="no fold 9"):
        build(CurriculumConfig(), fold=9)
    with pytest.raises(DatasetError, match="no _difficulty.json"):
        build(CurriculumConfig(), difficulty=small_dataset)


# ------------------------------------------------- queries without relevant documents, l_hrel labels
def test_empty_queries_last_and_held_back_by_hand():
    score = np.array([1.0, 0.6, np.nan, 0.7, np.nan])  # queries 2 and 4 have no relevant document
    qid = np.array([10, 20, 30, 40, 5])
    empty = np.isnan(score)
    # easiest first: 1.0 (qid 10), 0.7 (qid 40), 0.6 (qid 20), then the empty ones by qid: 5, 30
    assert easiest_first(score, qid, last=empty).tolist() == [0, 3, 1, 4, 2]
    # with metric.empty = 1.0 they would tie with the best query and win on qid: qid 5 first
    assert easiest_first(np.where(empty, 1.0, score), qid).tolist() == [4, 0, 2, 3, 1]
    order = easiest_first(score, qid, last=empty)
    # held back: shares 0.5, 1 of the 3 other queries -> sizes ceil(1.5) = 2, 3; the empty ones only in stage 1
    first = assign_first_stage(order, stage_sizes(3, np.array([0.5, 1.0])), held_back=empty)
    assert first.tolist() == [0, 1, 1, 0, 1]
    with pytest.raises(ValueError, match="stage sizes end at 5, but 3 queries are not held back"):
        assign_first_stage(order, stage_sizes(5, np.array([0.5, 1.0])), held_back=empty)


# qid -> (labels, feature value per document); features 25 (BM25) and 41 (PageRank) of LETOR 4.0 are equal.
# NDCG@10 of the feature ranking, gain 2^label - 1:
#   qid 5: labels by the ranking 0, 1, 1 -> (1/log2(3) + 1/log2(4)) / (1 + 1/log2(3)) = 0.693
#   qid 2: 0, 1 -> 1/log2(3) = 0.631;  qid 4: 0, 0, 1 -> 1/log2(4) = 0.5;  qid 6: 0, 0, 0, 1 -> 1/log2(5) = 0.431
#   qids 1 and 3: no relevant document, NDCG undefined (metric.empty = 1.0 would make them the easiest)
TINY = {
    1: ([0, 0], [0.5, 0.4]),
    2: ([0, 1], [0.9, 0.1]),
    3: ([0, 0, 0], [0.3, 0.2, 0.1]),
    4: ([0, 0, 1], [0.9, 0.5, 0.1]),
    5: ([1, 0, 1], [0.1, 0.9, 0.5]),
    6: ([0, 0, 0, 1], [0.9, 0.8, 0.1, 0.0]),
}
EASIEST_BM25 = [5, 2, 4, 6]


@pytest.fixture(scope="module")
def tiny(spark_holder, tmp_path_factory):
    """(dataset, difficulty) of TINY as a one-fold LETOR 4.0 set (labels 0..2; only 0 and 1 occur)."""
    spark = spark_holder.get()
    from pipelines.core.config import DifficultyConfig, IngestConfig, load_dataset_spec
    from pipelines.data.ingest import ingest
    from pipelines.data.scoring import run_difficulty
    from udfs.metrics import NdcgSpec

    root = tmp_path_factory.mktemp("tiny")
    (root / "src").mkdir()
    (root / "src" / "train.txt").write_text(
        "".join(
            f"{lab} qid:{q} 25:{v} 41:{v}\n"
            for q, (labels, values) in TINY.items()
            for lab, v in zip(labels, values, strict=True)
        )
    )
    ingest(spark, str(root / "src"), str(root / "ds"), load_dataset_spec("letor4"), IngestConfig())
    run_difficulty(spark, str(root / "ds"), str(root / "diff"), DifficultyConfig(), NdcgSpec(empty=1.0))
    return str(root / "ds"), str(root / "diff")


def _stages_of(spark, tiny, tmp_path, policy: str, **cfg) -> tuple[dict, list[list[int]], dict[int, float]]:
    out = tmp_path / f"{cfg.get('strategy')}-{policy}-{cfg.get('fraction', '')}-{cfg.get('seed', '')}"
    s = build_curriculum(spark, *tiny, 1, CurriculumConfig(**cfg), str(out), empty_queries=policy)
    t = pq.read_table(out / "queries.parquet").to_pandas()
    stages = [sorted(t.loc[t.first_stage <= i, schema.QID]) for i in range(s["n_stages"])]
    return s, stages, dict(zip(t[schema.QID], t.score, strict=True))


@pytest.mark.parametrize("strategy", ["q_bm25", "q_pagerank"])
def test_empty_queries_policy_orders_ndcg_strategies(spark, tiny, tmp_path, strategy):
    # as_metric: the old behaviour; the two queries with nothing to learn fill the first stage
    s, stages, score = _stages_of(spark, tiny, tmp_path, "as_metric", strategy=strategy, fraction=0.25)
    assert stages[0] == [1, 3]  # ceil(0.25 * 6) = 2 queries
    assert score[1] == score[3] == 1.0
    # last (the default): the hardest queries; ceil(0.25 * 6) = 2 of the others first
    s, stages, score = _stages_of(spark, tiny, tmp_path, "last", strategy=strategy, fraction=0.25)
    assert stages[0] == sorted(EASIEST_BM25[:2]) and stages[1] == [1, 2, 3, 4, 5, 6]
    assert math.isnan(score[1]) and math.isnan(score[3])  # undefined, not metric.empty
    assert score[5] == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3)))
    assert s["empty_queries"] == "last" and s["queries_without_relevant"] == 2
    assert [st["queries_without_relevant"] for st in s["stages"]] == [0, 2]
    assert s["order"] == "queries without a relevant document last, then score descending, then qid ascending"
    # last with a share larger than the queries that have a relevant document: ceil(0.75 * 6) = 5, the 5th is
    # the empty query with the lower qid
    _, stages, _ = _stages_of(spark, tiny, tmp_path, "last", strategy=strategy, fraction=0.75)
    assert stages[0] == sorted(EASIEST_BM25 + [1])
    # exclude: never before the last stage; the share counts the 4 other queries: ceil(0.75 * 4) = 3
    s, stages, _ = _stages_of(spark, tiny, tmp_path, "exclude", strategy=strategy, fraction=0.75)
    assert stages[0] == sorted(EASIEST_BM25[:3]) and stages[1] == [1, 2, 3, 4, 5, 6]
    assert s["empty_queries"] == "exclude" and [st["queries_without_relevant"] for st in s["stages"]] == [0, 2]


def test_empty_queries_policy_in_other_strategies(spark, tiny, tmp_path):
    # q_nrel: n_rel = 0 is its lowest score, so last == as_metric; exclude holds them back
    for policy in ("last", "as_metric"):
        _, stages, score = _stages_of(spark, tiny, tmp_path, policy, strategy="q_nrel", fraction=0.75)
        assert stages[0] == [1, 2, 4, 5, 6] and score[1] == 0.0  # qid 5 (2 relevant), then 2, 4, 6, then 1
    _, stages, _ = _stages_of(spark, tiny, tmp_path, "exclude", strategy="q_nrel", fraction=0.75)
    assert stages[0] == [2, 4, 5]
    # random: last does not reorder a random sample (same stage sizes as the others); exclude samples only
    # queries that have a relevant document, ceil(0.75 * 4) = 3 of them
    for seed in (1, 2, 3):
        _, stages, _ = _stages_of(spark, tiny, tmp_path, "exclude", strategy="random", fraction=0.75, seed=seed)
        assert len(stages[0]) == 3 and not {1, 3} & set(stages[0])
        s, stages, _ = _stages_of(spark, tiny, tmp_path, "last", strategy="random", fraction=0.75, seed=seed)
        assert len(stages[0]) == 5 and s["order"] == "seeded random permutation"
    # none: one stage, all data, whatever the policy
    _, stages, _ = _stages_of(spark, tiny, tmp_path, "exclude", strategy="none")
    assert stages == [[1, 2, 3, 4, 5, 6]]


def test_label_free_strategies_and_anti_curricula_by_hand(spark, tiny, tmp_path):
    # documents per query (q_size: fewer is easier): qids 1, 2: 2; 3, 4, 5: 3; 6: 4. The sample sd of BM25
    # (sigma_bm25: lower is easier): 1 0.1/sqrt(2) = 0.071, 3 0.1, 4 and 5 0.4 (the same values), 6 sqrt(0.65/3)
    # = 0.465, 2 0.8/sqrt(2) = 0.566. Label-free: the queries without a relevant document (1, 3) are ordered by the
    # score like the others, whatever the policy "last" says (it would read their labels).
    for policy in ("last", "as_metric"):
        s, stages, _ = _stages_of(spark, tiny, tmp_path, policy, strategy="q_size", fraction=0.25)
        assert stages[0] == [1, 2] and s["order"] == "score descending, then qid ascending"
        _, stages, _ = _stages_of(spark, tiny, tmp_path, policy, strategy="anti_q_size", fraction=0.25)
        assert stages[0] == [3, 6]  # 4 documents, then the first of the 3-document queries by qid
    s, stages, score = _stages_of(spark, tiny, tmp_path, "last", strategy="sigma_bm25", fraction=0.25)
    assert stages[0] == [1, 3] and score[2] == pytest.approx(-0.8 / math.sqrt(2), rel=1e-6)  # stored: higher easier
    assert score[6] == pytest.approx(-math.sqrt(0.65 / 3), rel=1e-6)
    _, stages, _ = _stages_of(spark, tiny, tmp_path, "last", strategy="sigma_bm25", fraction=0.6)  # ceil(3.6) = 4
    assert stages[0] == [1, 3, 4, 5]
    s, stages, _ = _stages_of(spark, tiny, tmp_path, "last", strategy="anti_sigma_bm25", fraction=0.6)
    assert stages[0] == [2, 4, 5, 6] and s["strategy"] == "anti_sigma_bm25"
    assert s["order"] == "score ascending (the hardest first: an anti-curriculum), then qid ascending"
    # an oracle's anti-curriculum keeps the queries without a relevant document last (their NDCG is undefined):
    # q_bm25 easiest first 5, 2, 4, 6 (module comment above); reversed 6, 4, 2, 5, then 1 and 3
    s, stages, _ = _stages_of(spark, tiny, tmp_path, "last", strategy="anti_q_bm25", fraction=0.5)
    assert stages[0] == [2, 4, 6] and s["order"].startswith("queries without a relevant document last, then score asc")


def test_a_strategy_on_a_feature_the_dataset_lacks_is_refused_naming_the_preset():
    from pipelines.core.config import ConfigError
    from pipelines.data.curricula import check_roles

    check_roles(["sigma_bm25", "anti_q_size"], {"bm25": 110}, "mslr")
    with pytest.raises(ConfigError) as e:
        check_roles(["q_size", "sigma_bm25"], {"bm25": 0}, "istella")
    assert str(e.value).startswith("sigma_bm25 ranks queries by BM25, and dataset istella (conf/datasets/istella.yaml)")
    assert "it supports" in str(e.value) and "q_size" in str(e.value) and "sigma_bm25," not in str(e.value)


def test_l_hrel_with_empty_queries_and_labels_of_the_dataset(spark, tiny, tmp_path):
    # 2 + 2 + 3 + 3 + 3 + 4 = 17 documents, all labelled 0 or 1; 5 relevant
    s, stages, _ = _stages_of(spark, tiny, tmp_path, "last", strategy="l_hrel", hrel_labels=[0, 1])
    assert stages[0] == [1, 2, 3, 4, 5, 6]
    assert (s["stages"][0]["documents"], s["stages"][0]["relevant_documents"]) == (17, 5)
    # exclude: the first stage drops the 2 + 3 documents of queries 1 and 3
    s, stages, _ = _stages_of(spark, tiny, tmp_path, "exclude", strategy="l_hrel", hrel_labels=[0, 1])
    assert stages == [[2, 4, 5, 6], [1, 2, 3, 4, 5, 6]]
    assert (s["stages"][0]["documents"], s["stages"][0]["relevant_documents"]) == (12, 5)
    assert s["stages"][1]["documents"] == 17
    # LETOR 4.0 labels are 0..2: MSLR's default [0, 3, 4] is an error naming the key and the range
    with pytest.raises(
        ConfigError,
        match=r"^curriculum.hrel_labels \[0, 3, 4\]: label 3 is outside the label "
        r"range 0..2 of .*ds \(dataset letor4, conf/datasets/letor4.yaml\); "
        r"choose labels in 0..2, e.g. --set curriculum.hrel_labels=\[0,2\]$",
    ):
        _stages_of(spark, tiny, tmp_path, "last", strategy="l_hrel")
    # in range, but no training document has label 2: the first stage would hold no relevant document
    with pytest.raises(
        ConfigError,
        match=r"^fold 1: no training document has a relevant label \(> 0\) in "
        r"curriculum.hrel_labels \[0, 2\], so l_hrel's first stage would hold "
        r"no relevant document; the training labels are \[0, 1\]$",
    ):
        _stages_of(spark, tiny, tmp_path, "last", strategy="l_hrel", hrel_labels=[0, 2])
    assert not list(tmp_path.glob(".*tmp*"))  # failed builds leave nothing behind


def test_hrel_labels_and_policy_checked_without_data():
    from pipelines.core.config import DifficultyConfig, load_config

    with pytest.raises(
        ConfigError,
        match=r"curriculum.hrel_labels \[0\] holds no relevant label \(> 0\): l_hrel's "
        r"first stage would have no relevant document",
    ):
        CurriculumConfig(hrel_labels=[0])
    with pytest.raises(ConfigError, match=r"curriculum.hrel_labels is empty"):
        CurriculumConfig(hrel_labels=[])
    with pytest.raises(ConfigError, match=r"curriculum.hrel_labels \[0, 4, 4\] lists label 4 twice"):
        CurriculumConfig(hrel_labels=[0, 4, 4])
    with pytest.raises(ConfigError, match=r"default.yaml: curriculum.hrel_labels \[0, -1\] holds no relevant label"):
        load_config(None, ["curriculum.hrel_labels=[0, -1]"])
    with pytest.raises(
        ConfigError,
        match=r"difficulty.empty_queries \(--empty-queries\) must be one of last, "
        r"exclude, as_metric, got 'first'",
    ):
        DifficultyConfig(empty_queries="first")
    assert DifficultyConfig().empty_queries == "last"


def test_exclude_needs_a_query_with_a_relevant_document(spark, tiny, tmp_path):
    from pipelines.core.config import DifficultyConfig
    from pipelines.data.scoring import run_difficulty
    from udfs.metrics import NdcgSpec

    with pytest.raises(ConfigError, match=r"difficulty.empty_queries \(--empty-queries\) must be one of last, exclude"):
        build_curriculum(spark, *tiny, 1, CurriculumConfig(), str(tmp_path / "x"), empty_queries="first")
    # a dataset whose queries all lack a relevant document
    from pipelines.core.config import IngestConfig, load_dataset_spec
    from pipelines.data.ingest import ingest

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.txt").write_text("0 qid:1 25:1 41:1\n0 qid:2 25:1 41:1\n")
    ingest(spark, str(tmp_path / "src"), str(tmp_path / "ds"), load_dataset_spec("letor4"), IngestConfig())
    run_difficulty(spark, str(tmp_path / "ds"), str(tmp_path / "diff"), DifficultyConfig(), NdcgSpec())
    with pytest.raises(
        DatasetError,
        match=r"fold 1: none of the 2 training queries has a relevant document, so "
        r"with difficulty.empty_queries=exclude every stage but the last",
    ):
        build_curriculum(
            spark,
            str(tmp_path / "ds"),
            str(tmp_path / "diff"),
            1,
            CurriculumConfig(),
            str(tmp_path / "c"),
            empty_queries="exclude",
        )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--strategy", "l_hrel"], "curriculum.hrel_labels [0, 3, 4]: label 3 is outside the label range 0..2 of "),
        (
            ["--empty-queries", "first"],
            "difficulty.empty_queries (--empty-queries) must be one of last, exclude, as_metric, got 'first'",
        ),
        (
            ["--fraction", "0"],
            "curriculum.fraction (--fraction) must be in (0, 1] (a share of the training queries), got 0.0",
        ),
        (
            ["--pacing", "linear", "--stages", "1"],
            "curriculum.stages (--stages) must be >= 2 (stages of a paced curriculum), got 1",
        ),
        (
            ["--pacing", "cosine"],
            "curriculum.pacing (--pacing): unknown pacing function 'cosine' (one of: linear, root_n, geometric, step), "
            "or empty for two stages",
        ),
        (["--fold", "7"], "no fold 7; folds: [1]"),
    ],
)
def test_cli_checks_before_spark_starts(tiny, tmp_path, capsys, monkeypatch, flags, message):
    from pipelines.app import cli

    def no_spark(cfg):
        raise AssertionError("Spark started before the options were checked")

    monkeypatch.setattr(cli, "_session", no_spark)
    args = ["curriculum", "--data", tiny[0], "--difficulty", tiny[1], "--out", str(tmp_path / "c")]
    code = cli.main(args + (flags if "--fold" in flags else ["--fold", "1", *flags]))
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ltr curriculum: error:")]
    assert code == 2 and len(err) == 1 and message in err[0]


def test_cli_passes_the_policy(spark, tiny, tmp_path):
    from pipelines.app.cli import main

    out = tmp_path / "c"
    assert (
        main(
            [
                "curriculum",
                "--data",
                tiny[0],
                "--difficulty",
                tiny[1],
                "--fold",
                "1",
                "--strategy",
                "q_bm25",
                "--fraction",
                "0.75",
                "--empty-queries",
                "exclude",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary, stages = _stage_qids(out)
    assert summary["empty_queries"] == "exclude" and stages[0] == set(EASIEST_BM25[:3])
