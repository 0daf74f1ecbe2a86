"""Teacher-based curricula (issue 64 item 3): the teachers trained by the plan, cross-fitted, their per-query scores
against numpy arithmetic over the teachers' own predictions, and an edit of the teacher's path retraining exactly the
teachers and what is built on them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import xgboost as xgb

from pipelines.app.grid import run_grid
from pipelines.core.config import ConfigError, ReportConfig, load_config
from pipelines.core.layout import Layout
from pipelines.data.curricula import QUERIES
from pipelines.data.dataset import open_dataset, scan_subsets
from pipelines.data.teacher_scores import read_teacher_scores
from pipelines.report import build_report
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.results import path_result
from pipelines.study.design import plan_fold, show_plan
from pipelines.study.teachers import check_teacher, teacher_data, teacher_paths
from pipelines.tracking.runs import Tracker
from tests.helpers import tiny_study
from udfs import schema
from udfs.metrics import NdcgSpec, ndcg

pytestmark = pytest.mark.spark


def _cfg(tmp_path, data, *extra):
    return load_config(
        None,
        tiny_study(
            f"work_dir={tmp_path / 'work'}",
            f"grid.data={data}",
            "grid.experiment=teachers",
            "grid.strategies=[q_nrel,teacher_margin]",
            "grid.mse=false",
            "teacher.path=lambdamart:3",
            "teacher.crossfit=2",
            *extra,
        ),
    )


def _hand_scores(rows: pd.DataFrame, boosters: dict[int, xgb.Booster], group: dict[int, int]) -> pd.DataFrame:
    """Per query, by brute force over every ordered pair of documents: margin and loss of its group's teacher."""
    out = []
    feats = [c for c in rows.columns if c.startswith("f")]
    for q, d in rows.groupby(schema.QID, sort=True):
        s = boosters[group[q]].predict(xgb.DMatrix(d[feats].to_numpy(np.float32)), output_margin=True).astype(float)
        y = d[schema.LABEL].to_numpy()
        diffs = [s[i] - s[j] for i in range(len(y)) for j in range(len(y)) if y[i] > y[j]]
        off = np.array([0, len(y)])
        out.append(
            {
                "qid": q,
                "margin": np.mean(diffs) if diffs else np.nan,
                "loss": np.mean([np.log1p(np.exp(-x)) for x in diffs]) if diffs else np.nan,
                "ndcg": float(ndcg(off, y.astype(float), s.astype(np.float32), NdcgSpec())[0]),
            }
        )
    return pd.DataFrame(out).set_index("qid")


def test_teachers_are_cross_fitted_plan_nodes_and_an_edit_of_their_path_retrains_only_what_they_teach(
    spark, small_dataset, tmp_path
):
    cfg = _cfg(tmp_path, small_dataset)
    ds = open_dataset(small_dataset)
    first = run_grid(spark, cfg)
    layout, store = Layout.of(cfg), CheckpointStore(Layout.of(cfg).checkpoints)
    fp = plan_fold(cfg, ds, 1)
    assert [p.label for p in fp.teachers] == ["teacher-0of2", "teacher-1of2"]
    assert not fp.provisional  # the taught curriculum is built: its nodes have their real keys
    shown = show_plan(cfg)  # ltr grid --plan: the teachers' nodes beside the children's, done
    assert "lambdamart@teacher_xfit0of2.0" in shown and "lambdamart@teacher_xfit1of2.0" in shown, shown
    scores = read_teacher_scores(layout.teacher_scores(1)).set_index(schema.QID)
    # cross-fitting: each query scored by the teacher whose training queries do not hold it
    trained_on = {}
    for g, name in enumerate(teacher_data(cfg)):
        q = pq.read_table(f"{layout.curriculum(1, name)}/{QUERIES}").to_pandas()
        trained_on[g] = set(q[schema.QID][q["first_stage"] == 0])
        assert set(q[schema.QID]) == set(scores.index)
    for qid, g in scores["group"].items():
        assert qid not in trained_on[g] and all(qid in trained_on[h] for h in trained_on if h != g)
    assert set(scores["group"]) == {0, 1}
    # the scores against the teachers' own predictions, pair by pair
    boosters = {}
    for g, p in enumerate(fp.teachers):
        b = xgb.Booster()
        b.load_model(bytearray(path_result(store, p.label, fp.plan.chains[p.label]).model))
        boosters[g] = b
    cols = [schema.QID, schema.LABEL, *schema.feature_cols(ds.n_features)]
    rows = pd.concat(
        b.to_pandas() for b in scan_subsets(small_dataset, ds.subsets(1, "train"), [*cols, schema.DOC])
    ).sort_values([schema.QID, schema.DOC])
    hand = _hand_scores(rows, boosters, scores["group"].to_dict())
    np.testing.assert_allclose(scores["teacher_margin"], hand["margin"].loc[scores.index], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scores["teacher_loss"], hand["loss"].loc[scores.index], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scores["teacher_ndcg"], hand["ndcg"].loc[scores.index], rtol=1e-6)
    assert scores["teacher_margin"].isna().sum() == (scores["n_pairs"] == 0).sum() > 0
    # the curriculum's first stage: the queries the teachers separate best (ties broken by qid)
    cur = pq.read_table(f"{layout.curriculum(1, 'teacher_margin')}/{QUERIES}").to_pandas().set_index(schema.QID)
    m = scores["teacher_margin"].loc[cur.index]
    first_stage = m[(cur["first_stage"] == 0).to_numpy()]
    later = m[(cur["first_stage"] == 1).to_numpy()]
    assert first_stage.notna().all() and first_stage.min() >= later.max()
    # the teachers' trees are the study's cost: 2 teachers x 3 trees beside the children's
    assert first["trees_built"] == 2 * 3 + sum(
        n.trees for n in fp.plan.nodes if n.key not in fp.teacher_keys().values()
    )

    # the parent run records the teachers: their nodes, trees, cost and scores
    doc = Tracker.for_config(cfg).load_json(first["parent_run_id"], "teachers/fold1.json")
    assert doc["trees"] == 6 and doc["nodes"] == {p.label: list(fp.plan.chains[p.label]) for p in fp.teachers}
    assert doc["scores"]["queries"] == len(scores) and doc["cost_seconds"]["boost"] > 0
    # the report states the teachers' trees beside the result they teach, and counts them in its convergence
    rep = build_report(
        Tracker.for_config(cfg),
        str(tmp_path / "report"),
        first["parent_run_id"],
        report=ReportConfig(permutations=100, bootstrap=100),
        metric_name="ndcg_at_10",
        difficulty=None,
    )
    controls = {c["system"]: c for c in json.loads((tmp_path / "report" / "report.json").read_text())["controls"]}
    assert controls["teacher_margin-2"]["teacher_trees"] == 6 and controls["q_nrel-2"]["teacher_trees"] == 0
    conv = {c["label"]: c for c in rep["convergence"]}
    assert conv["teacher_margin-2"]["teacher_trees"] == 6 and conv["LambdaMART"]["teacher_trees"] == 0
    assert "teacher_margin-2 (its teachers: 6 trees)" in (tmp_path / "report" / "report.md").read_text()

    before = {n.key for n in fp.plan.nodes}
    edited = _cfg(tmp_path, small_dataset, "teacher.path=lambdamart:2")
    again = run_grid(spark, edited)
    fp2 = plan_fold(edited, ds, 1)
    changed = {n.key for n in fp2.plan.nodes} - before
    taught = {k for p in fp2.paths if "teacher_margin" in p.label for k in fp2.plan.chains[p.label]}
    teachers = {k for p in fp2.teachers for k in fp2.plan.chains[p.label]}
    assert changed == taught | teachers  # q_nrel, the baseline: the same nodes, reused
    assert again["trees_built"] == 2 * 2 + sum(fp2.plan.node(k).trees for k in taught)


def test_bad_teacher_settings_exit_2_in_one_line(small_dataset, tmp_path):
    ds = open_dataset(small_dataset)
    with pytest.raises(ConfigError, match=r"teacher.crossfit must be 0 .* got 1"):
        _cfg(tmp_path, small_dataset, "teacher.crossfit=1")
    with pytest.raises(ConfigError, match=r"teacher.crossfit must be 0 .* got -3"):
        _cfg(tmp_path, small_dataset, "teacher.crossfit=-3")
    with pytest.raises(ConfigError, match=r"curriculum teacher_loss is ordered by the teacher's own scores, a cycle"):
        _cfg(tmp_path, small_dataset, "teacher.path='lambdamart@teacher_loss:10'")
    n = ds.manifest["splits"]["1"]["train"]["queries"]
    with pytest.raises(ConfigError, match=rf"teacher.crossfit {n + 1}: fold 1 has {n} training queries"):
        check_teacher(_cfg(tmp_path, small_dataset, f"teacher.crossfit={n + 1}"), ds, [1])
    assert [p.shorthand() for p in teacher_paths(_cfg(tmp_path, small_dataset, "teacher.crossfit=0"))] == [
        "lambdamart@teacher_all.0:3"
    ]


def test_one_and_two_workers_train_the_same_teachers_and_give_the_same_scores(spark, small_dataset, tmp_path):
    """``ltr grid --setup-only`` trains the teachers and builds the curricula they teach, no child; with 1 and with 2
    training workers the teachers' models, their per-query scores and the curriculum built on them are the same
    bytes (the fold's global cuts: :mod:`pipelines.store.cuts`)."""
    out = {}
    for w in (1, 2):
        cfg = _cfg(tmp_path / f"w{w}", small_dataset, f"train.workers={w}", "grid.strategies=[teacher_loss]")
        summary = run_grid(spark, cfg, setup_only=True)
        layout = Layout.of(cfg)
        fp = plan_fold(cfg, open_dataset(small_dataset), 1)
        store = CheckpointStore(layout.checkpoints)
        models = [path_result(store, p.label, fp.plan.chains[p.label]).model for p in fp.teachers]
        cur = pq.read_table(f"{layout.curriculum(1, 'teacher_loss')}/{QUERIES}").to_pandas()
        out[w] = (summary["trees_built"], models, read_teacher_scores(layout.teacher_scores(1)), cur)
        assert not any(fp.plan.node(k).trees for k in fp.plan.chains["lambdamart"] if store.latest(k) is not None)
    assert out[1][0] == out[2][0] == 2 * 3  # the two teachers' trees, no child's
    assert out[1][1] == out[2][1]
    pd.testing.assert_frame_equal(out[1][2], out[2][2])
    pd.testing.assert_frame_equal(out[1][3], out[2][3])
