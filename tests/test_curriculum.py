"""Curricula: pacing arithmetic, deterministic order, nested stages, train split only, reproducible."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from pipelines.config import ConfigError, CurriculumConfig
from pipelines.curriculum import build_curriculum
from pipelines.dataset import DatasetError, load_split, open_dataset
from udfs import schema
from udfs.curriculum import assign_first_stage, easiest_first, pacing_shares, stage_sizes


def test_pacing_shares_by_hand():
    x = np.array([0, 1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(pacing_shares("linear", 4, 0.25), [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(pacing_shares("root_n", 4, 0.25, 2.0), np.sqrt(0.0625 + 0.9375 * x))
    np.testing.assert_allclose(pacing_shares("geometric", 4, 0.25),
                               [0.25, 0.25 * 4 ** (1 / 3), 0.25 * 4 ** (2 / 3), 1])
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


@pytest.mark.parametrize("strategy, pacing", [("q_nrel", ""), ("q_bm25", ""), ("q_pagerank", "root_n"),
                                              ("random", "geometric"), ("q_bm25", "step"), ("none", "")])
def test_stage_properties(spark, small_dataset, small_difficulty, tmp_path, strategy, pacing):
    cfg = CurriculumConfig(strategy=strategy, pacing=pacing, stages=4, delta=0.2, fraction=0.3)
    fold = 2
    ds = open_dataset(small_dataset)
    train_qids = {r[0] for r in load_split(spark, ds, fold, "train", [schema.QID]).distinct().collect()}
    other = {r[0] for r in spark.read.parquet(small_dataset).where(
        ~F.col(schema.SUBSET).isin(ds.subsets(fold, "train"))).select(schema.QID).distinct().collect()}
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
        sorted(tied[schema.QID])[: (first.score == first.score.min()).sum()])  # ties: lower qid first


def test_random_control_is_seeded_and_same_size(spark, small_dataset, small_difficulty, tmp_path):
    q = build_curriculum(spark, small_dataset, small_difficulty, 1, CurriculumConfig(strategy="q_nrel"),
                         str(tmp_path / "q"))
    r1 = build_curriculum(spark, small_dataset, small_difficulty, 1, CurriculumConfig(strategy="random", seed=1),
                          str(tmp_path / "r1"))
    build_curriculum(spark, small_dataset, small_difficulty, 1, CurriculumConfig(strategy="random", seed=2),
                     str(tmp_path / "r2"))
    assert [s["queries"] for s in r1["stages"]] == [s["queries"] for s in q["stages"]]
    assert _stage_qids(tmp_path / "r1")[1][0] != _stage_qids(tmp_path / "r2")[1][0]


def test_l_hrel_label_filter(spark, small_dataset, small_difficulty, tmp_path):
    s = build_curriculum(spark, small_dataset, small_difficulty, 3, CurriculumConfig(strategy="l_hrel"),
                         str(tmp_path / "c"))
    ds = open_dataset(small_dataset)
    train = load_split(spark, ds, 3, "train", [schema.LABEL])
    assert s["stages"][0]["label_filter"] == [0, 3, 4]
    assert s["stages"][0]["documents"] == train.where(F.col(schema.LABEL).isin(0, 3, 4)).count()
    assert s["stages"][1]["documents"] == train.count() and s["stages"][1]["label_filter"] is None


def test_errors(spark, small_dataset, small_difficulty, tmp_path):
    out = str(tmp_path / "x")

    def build(cfg, fold=1, difficulty=small_difficulty):
        build_curriculum(spark, small_dataset, difficulty, fold, cfg, out)

    with pytest.raises(ConfigError, match="unknown curriculum strategy 'q_hard'"):
        build(CurriculumConfig(strategy="q_hard"))
    with pytest.raises(ConfigError, match="l_hrel is a document label filter, not a query order"):
        build(CurriculumConfig(strategy="l_hrel", pacing="linear"))
    with pytest.raises(ConfigError, match=r"fraction must be in \(0, 1\], got 1.5"):
        build(CurriculumConfig(fraction=1.5))
    with pytest.raises(DatasetError, match="no fold 9"):
        build(CurriculumConfig(), fold=9)
    with pytest.raises(DatasetError, match="no _difficulty.json"):
        build(CurriculumConfig(), difficulty=small_dataset)
