"""Provenance: difficulty scores and curricula are reused only when everything that determines them
matches; a grid started by other code is never resumed into the same table."""

from __future__ import annotations

import json
import os

import pytest

import pipelines.app.grid as grid
import pipelines.study.steps as prepare
from pipelines.core.config import load_config
from pipelines.data.dataset import open_dataset
from pipelines.data.scoring import SUMMARY
from pipelines.tracking.runs import TAG_STUDY_KEY, Tracker
from tests.helpers import tiny_study


def _cfg(tmp_path, *over):
    return load_config(
        None,
        tiny_study(
            f"work_dir={tmp_path / 'work'}",
            "grid.experiment=prov",
            "grid.trees=2",
            "grid.switch_points=[1]",
            "grid.strategies=[q_bm25]",
            "grid.mse=false",
            "train.max_bin=16",
            "train.score_dist_trees=[1]",
            *over,
            sections=["grid", "train"],  # no report here
        ),
    )


def _no(what):
    def fail(*a, **k):
        raise AssertionError(f"{what} ran although its inputs had not changed")

    return fail


def test_difficulty_and_curricula_are_rebuilt_when_their_inputs_change(spark, small_dataset, tmp_path, monkeypatch):
    diff = str(tmp_path / "difficulty")
    cfg = _cfg(tmp_path)
    first = prepare.ensure_difficulty(spark, cfg, small_dataset, diff)
    assert first["key"].startswith("sha256:") and first["content_fingerprint"].startswith("sha256:")
    cur = prepare.ensure_curricula(spark, cfg, small_dataset, diff, 1, {"q_bm25"})
    with monkeypatch.context() as m:  # same inputs: both reused, nothing computed
        m.setattr(prepare, "run_difficulty", _no("difficulty"))
        m.setattr(prepare, "build_curriculum", _no("curriculum"))
        assert prepare.ensure_difficulty(spark, cfg, small_dataset, diff) == first
        again = prepare.ensure_curricula(spark, cfg, small_dataset, diff, 1, {"q_bm25"})
        assert again[0].summary == cur[0].summary

    # metric.empty=0 (or another BM25 id): new difficulty scores, and the curriculum follows them
    for over in ("metric.empty=0", "difficulty.bm25_feature=111"):
        other = prepare.ensure_difficulty(spark, _cfg(tmp_path, over), small_dataset, diff)
        assert other["key"] != first["key"], over
        rebuilt = prepare.ensure_curricula(spark, _cfg(tmp_path, over), small_dataset, diff, 1, {"q_bm25"})
        assert rebuilt[0].summary["key"] != cur[0].summary["key"], over
    assert other["content_fingerprint"] != first["content_fingerprint"]

    # scores recomputed into the same folder with another result (ltr run, ltr difficulty): the
    # curriculum is rebuilt although its settings did not change
    prepare.ensure_difficulty(spark, cfg, small_dataset, diff)
    prepare.ensure_curricula(spark, cfg, small_dataset, diff, 1, {"q_bm25"})
    path = os.path.join(diff, SUMMARY)
    doc = json.loads(open(path).read())
    doc["content_fingerprint"] = "sha256:0000000000000000"
    open(path, "w").write(json.dumps(doc))
    calls = []
    real = prepare.build_curriculum
    monkeypatch.setattr(prepare, "build_curriculum", lambda *a, **k: calls.append(1) or real(*a, **k))
    prepare.ensure_curricula(spark, cfg, small_dataset, diff, 1, {"q_bm25"})
    assert calls == [1]


def test_difficulty_key_covers_roles_conventions_and_code(small_dataset, monkeypatch):
    from pipelines.core.config import DifficultyConfig
    from pipelines.core.keys import difficulty_key as key_of
    from pipelines.data.scoring import difficulty_inputs
    from udfs.metrics import NdcgSpec

    def difficulty_key(*args):
        return key_of(**difficulty_inputs(*args))

    ds = open_dataset(small_dataset)
    base = difficulty_key(ds, DifficultyConfig(), NdcgSpec())
    assert difficulty_key(ds, DifficultyConfig(bm25_feature=110), NdcgSpec()) == base  # 110 is MSLR's BM25
    assert difficulty_key(ds, DifficultyConfig(bm25_feature=111), NdcgSpec()) != base
    assert difficulty_key(ds, DifficultyConfig(), NdcgSpec(k=5)) != base
    assert difficulty_key(ds, DifficultyConfig(), NdcgSpec(ties="worst")) != base
    import pipelines.core.keys as keys

    real = dict(keys.code_identity())
    monkeypatch.setattr(keys, "code_identity", lambda kind=None: {**real, "sources": "other"})
    assert difficulty_key(ds, DifficultyConfig(), NdcgSpec()) != base


def test_an_unfinished_grid_is_not_resumed_by_other_code(spark, small_dataset, tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, "grid.strategies=[]")
    code = dict(grid.code_identity())
    monkeypatch.setattr(grid, "code_identity", lambda: {**code, "sources": "aaaaaaa"})
    first = grid.run_grid(spark, cfg, data=small_dataset, only=[])  # trains nothing: the parent stays RUNNING
    tracker = Tracker.for_config(cfg)
    run = tracker.client.get_run(first["parent_run_id"])
    assert run.info.status == "RUNNING" and run.data.params["code.sources"] == "aaaaaaa"
    assert run.data.params["code.git"] == grid.code_version()["git"]  # provenance, in no key
    assert [d.dataset.digest for d in run.inputs.dataset_inputs]  # the dataset is on the parent too

    monkeypatch.setattr(grid, "code_identity", lambda: {**code, "sources": "bbbbbbb"})
    with pytest.raises(
        grid.CodeChanged,
        match=r"started by code sources aaaaaaa \(xgboost .*\), this is sources "
        r"bbbbbbb.*--new-parent",
    ):
        grid.run_grid(spark, cfg, data=small_dataset)
    second = grid.run_grid(spark, cfg, data=small_dataset, new_parent=True)
    assert second["parent_run_id"] != first["parent_run_id"] and second["trained"] == 1
    parents = tracker.parents(TAG_STUDY_KEY, run.data.tags[TAG_STUDY_KEY])
    assert len(parents) == 2

    monkeypatch.setattr(grid, "code_identity", lambda: {**code, "sources": "aaaaaaa"})  # the same code resumes
    again = grid.run_grid(spark, cfg, data=small_dataset)
    assert again["parent_run_id"] == first["parent_run_id"] and again["resumed"]


def test_fold_tasks_of_one_study_share_one_parent_run(spark, small_dataset, tmp_path):
    """A scheduler's layout: setup once, then one task per fold (any order), all under one parent run,
    which ends FINISHED only when the last fold is; a repeated task trains nothing."""
    cfg = _cfg(tmp_path, "grid.folds=[1,2]", "grid.strategies=[q_nrel]")
    setup = grid.run_grid(spark, cfg, data=small_dataset, setup_only=True)
    assert setup["trained"] == 0 and not setup["finished"]
    for f in (1, 2):  # every fold's curricula are there before any fold task runs
        assert (tmp_path / "work" / "curricula" / f"fold{f}" / "q_nrel").is_dir()
    tracker = Tracker.for_config(cfg)
    two = grid.run_grid(spark, cfg, data=small_dataset, folds=[2])
    assert two["parent_run_id"] == setup["parent_run_id"] and two["trained"] == 2 and not two["finished"]
    assert tracker.client.get_run(setup["parent_run_id"]).info.status == "RUNNING"
    one = grid.run_grid(spark, cfg, data=small_dataset, folds=[1])
    assert one["parent_run_id"] == setup["parent_run_id"] and one["trained"] == 2 and one["finished"]
    assert tracker.client.get_run(setup["parent_run_id"]).info.status == "FINISHED"
    again = grid.run_grid(spark, cfg, data=small_dataset, folds=[2])
    assert again["trained"] == 0 and again["trees_built"] == 0 and again["finished"]
    folds = sorted(r.data.tags["ltr.fold"] for r in tracker.children(setup["parent_run_id"]))
    assert folds == ["1", "1", "2", "2"]
    with pytest.raises(Exception, match=r"--fold 3: not a fold of this study"):
        grid.run_grid(spark, cfg, data=small_dataset, folds=[3])


def test_experiments_are_model_training_experiments(tmp_path):
    """MLflow 3's UI opens an experiment without a kind in its GenAI overview."""
    from pipelines.tracking.runs import MODEL_TRAINING, TAG_EXPERIMENT_KIND

    t = Tracker(f"sqlite:///{tmp_path}/m.db", "kinds", str(tmp_path / "art"))
    assert t.client.get_experiment(t.experiment_id).tags[TAG_EXPERIMENT_KIND] == MODEL_TRAINING
    old = t.client.create_experiment("older")  # made without the tag: tagged when a run opens it
    Tracker(f"sqlite:///{tmp_path}/m.db", "older", str(tmp_path / "art"))
    assert t.client.get_experiment(old).tags[TAG_EXPERIMENT_KIND] == MODEL_TRAINING
