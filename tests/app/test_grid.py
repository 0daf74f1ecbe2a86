"""Grids tracked in MLflow (runs, links, histories, resume) and the report (numbers checked)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import numpy as np
import pytest
from scipy import stats

from pipelines.app.grid import run_grid
from pipelines.core.config import ReportConfig, load_config
from pipelines.core.layout import Layout
from pipelines.data.dataset import open_dataset
from pipelines.report import ReportError, build_report
from pipelines.report.pairing import paired_differences
from pipelines.report.stats import kl_divergence, randomization_test
from pipelines.report.tables import table1, table2
from pipelines.study.design import grid_children, plan_fold, unfinished_units
from pipelines.tracking.runs import TAG_FOLD, TAG_PARENT, TAG_STRATEGY, TAG_SWITCH, Tracker
from tests.helpers import record, tiny_study


def _report(tracker: Tracker, out: str, parent: str | None = None, **report: Any) -> dict[str, Any]:
    """:func:`build_report` of the grid ``parent`` (None: the latest finished) with the metric ``ndcg_at_10``, no
    difficulty scores and the report settings ``report`` (:class:`ReportConfig` fields, its defaults else)."""
    return build_report(tracker, out, parent, report=ReportConfig(**report), metric_name="ndcg_at_10", difficulty=None)


T = 6


def _cfg(tmp_path, **extra):
    over = tiny_study(
        f"work_dir={tmp_path / 'work'}",
        "grid.experiment=test-grid",
        "grid.folds=[1,2]",
        f"grid.trees={T}",
        "grid.switch_points=[2,4]",
        "grid.strategies=[q_nrel,random]",
        "grid.extra_paths={blend: 'blend:6'}",
        "components.blend.at=3",
        "components.blend.width=2",
        "report.permutations=2000",
    )
    over += [f"{k}={v}" for k, v in extra.items()]
    return load_config(None, over)


def test_children_of_a_fold(tmp_path):
    kids = grid_children(_cfg(tmp_path), 1)
    assert [(c.strategy, c.switch, c.path.shorthand()) for c in kids] == [
        ("lambdamart", None, "lambdamart:6"),
        ("mse", 2, "mse:2,lambdamart:4"),
        ("mse", 4, "mse:4,lambdamart:2"),
        ("q_nrel", 2, "lambdamart@q_nrel.0:2,lambdamart:4"),
        ("q_nrel", 4, "lambdamart@q_nrel.0:4,lambdamart:2"),
        ("random", 2, "lambdamart@random.0:2,lambdamart:4"),
        ("random", 4, "lambdamart@random.0:4,lambdamart:2"),
        ("blend", None, "blend:6"),
    ]
    with pytest.raises(ValueError, match=r"grid.switch_points must lie strictly between 0 and grid.trees=6"):
        _cfg(tmp_path, **{"grid.switch_points": "[0, 6]"})  # refused where the config is typed


def test_grid_anti_adds_the_anti_curriculum_of_each_ordered_strategy_and_keys_only_then(tmp_path):
    from pipelines.data.dataset import Dataset
    from pipelines.study.design import grid_keys

    plain, anti = _cfg(tmp_path), _cfg(tmp_path, **{"grid.anti": "true"})
    extra = [c for c in grid_children(anti, 1) if c.name not in {k.name for k in grid_children(plain, 1)}]
    # q_nrel's anti-curriculum at each switch point; random has no order, so no anti_random
    assert [(c.strategy, c.switch, c.path.shorthand()) for c in extra] == [
        ("anti_q_nrel", 2, "lambdamart@anti_q_nrel.0:2,lambdamart:4"),
        ("anti_q_nrel", 4, "lambdamart@anti_q_nrel.0:4,lambdamart:2"),
    ]
    # named in grid.strategies and added by grid.anti: trained once
    both = _cfg(tmp_path, **{"grid.anti": "true", "grid.strategies": "[q_nrel,anti_q_nrel,random]"})
    assert sorted(c.name for c in grid_children(both, 1)) == sorted(c.name for c in grid_children(anti, 1))
    ds = Dataset(path="mem", manifest={"fingerprint": "sha256:abc", "n_features": 136, "folds": {"1": {}, "2": {}}})
    code = {"sources": "fixed"}
    assert grid_keys(plain, ds, code) != grid_keys(anti, ds, code)  # another grid: another study
    unset = load_config(None, [o for o in tiny_study() if not o.startswith("grid.anti")])
    assert grid_keys(unset, ds, code) == grid_keys(load_config(None, [*tiny_study(), "grid.anti=false"]), ds, code)


def test_the_curricula_study_holds_each_curriculum_with_both_controls():
    """conf/curricula.yaml: every curriculum of an order beside its anti-curriculum and the random one, each at
    the switch point, the random one repeated per seed, oracle, label-free and model (teacher) scores; and its noisy
    cell's override is a valid config."""
    from pipelines.core.config import conf_dir
    from pipelines.report.controls import kind_of

    cfg = load_config(conf_dir() / "curricula.yaml")
    names = {c.name for c in grid_children(cfg, 1)}
    ordered = [s for s in cfg.grid.strategies if kind_of(s)]
    assert {kind_of(s) for s in ordered} == {"oracle", "label_free", "model"}
    for s in ordered:
        assert {f"fold1/{s}-40", f"fold1/anti_{s}-40"} <= names, (s, sorted(names))
    assert {"fold1/lambdamart", "fold1/random-40", "fold1/random-40/seed1", "fold1/random-40/seed2"} <= names
    assert load_config(conf_dir() / "curricula.yaml", ["generate.label_noise=0.2"]).generate.label_noise == 0.2


def test_the_methods_study_holds_every_seed_method_in_one_grid():
    """conf/methods.yaml (README's command for comparing every method): one grid with the baseline, MSE-t, a
    curriculum and its random control, a paced curriculum, blend, sigmoid pairwise, RankNet, StochasticRank, noisy
    LambdaMART and SelGB; the seeded ones repeated per seed, and every path's objective a registered one."""
    from pipelines.core.config import conf_dir

    cfg = load_config(conf_dir() / "methods.yaml")
    children = grid_children(cfg, 1)
    names = {c.name for c in children}
    for system in ("lambdamart", "mse-40", "q_nrel-40", "random-40", "paced_root_n", "blend_linear",
                   "sigmoid_pairwise", "ranknet", "stochastic_rank", "noisy_lambdamart", "selgb"):  # fmt: skip
        assert f"fold1/{system}" in names, (system, sorted(names))
    for seeded in ("random-40", "randompaced-40", "stochastic_rank", "noisy_lambdamart"):
        assert {f"fold1/{seeded}/seed1", f"fold1/{seeded}/seed2"} <= names
    assert {"fold1/selfpaced-40", "fold1/antipaced-40"} <= names and "fold1/selfpaced-40/seed1" not in names
    objectives = {s.objective for c in children for s in c.path.segments}
    assert {"lambdamart", "mse", "blend", "sigmoid_pairwise", "ranknet", "stochastic_rank",
            "noisy_lambdamart", "selgb"} <= objectives  # fmt: skip
    assert all(c.path.trees == cfg.grid.trees for c in children)
    assert "fold1/selgb/seed1" not in names  # deterministic: one run
    assert cfg.components["selgb"] == {"negatives": 0.1}


def test_seeds_repeat_only_the_children_that_depend_on_a_seed(tmp_path):
    from pipelines.study.design import curriculum_config

    one = grid_children(_cfg(tmp_path), 1)
    cfg = _cfg(tmp_path, **{"grid.seeds": 3, "grid.extra_paths": "{blend: 'blend:6', noisy: 'noisy_lambdamart:6'}"})
    three = grid_children(cfg, 1)
    again = [c for c in three if c.seed == 0]
    assert [(c.name, c.path) for c in again if c.strategy != "noisy"] == [(c.name, c.path) for c in one]
    reps = [(c.name, c.path.shorthand()) for c in three if c.seed]
    assert reps == [
        ("fold1/random-2/seed1", "lambdamart@random_seed1.0:2,lambdamart:4"),
        ("fold1/random-2/seed2", "lambdamart@random_seed2.0:2,lambdamart:4"),
        ("fold1/random-4/seed1", "lambdamart@random_seed1.0:4,lambdamart:2"),
        ("fold1/random-4/seed2", "lambdamart@random_seed2.0:4,lambdamart:2"),
        ("fold1/noisy/seed1", "noisy_lambdamart~1:6"),
        ("fold1/noisy/seed2", "noisy_lambdamart~2:6"),
    ]
    assert curriculum_config(cfg, "random_seed2").seed == cfg.curriculum.seed + 2
    assert curriculum_config(cfg, "random_seed2").strategy == "random"
    with pytest.raises(ValueError, match=r"grid.seeds must be >= 1"):
        _cfg(tmp_path, **{"grid.seeds": 0})
    # the study's key: grid.seeds=1 leaves it as before seeds existed; more seeds make another study
    from types import SimpleNamespace

    from pipelines.core import keys
    from pipelines.study.design import grid_keys

    ds = SimpleNamespace(fingerprint="sha256:x")
    c1 = _cfg(tmp_path)
    doc = {
        "grid": {
            k: v
            for k, v in dataclasses.asdict(c1.grid).items()
            if k not in ("data", "difficulty", "seeds", "anti", "selfpaced")
        },
        "train": keys.train_inputs(c1.train),
        "metric": c1.metric.to_dict(),
        "curriculum": dataclasses.asdict(c1.curriculum),
        "difficulty": dataclasses.asdict(c1.difficulty),
        "dataset": "sha256:x",
        "folds": [1, 2],
        "components": {"blend": {"at": 3, "width": 2}},  # a study that sets components' settings holds them
    }
    assert grid_keys(c1, ds, {"sources": "s"}) == keys.study_keys(doc, {"sources": "s"})
    assert grid_keys(_cfg(tmp_path, **{"grid.seeds": 2}), ds, {"sources": "s"})[0] != grid_keys(c1, ds)[0]


@pytest.fixture(scope="module")
def grid_run(spark_holder, small_dataset, tmp_path_factory):
    spark = spark_holder.get()
    tmp = tmp_path_factory.mktemp("grid")
    # the random curriculum children twice (seeds 2018, 2019); models logged: the report replays them
    cfg = _cfg(tmp, **{"grid.seeds": 2, "grid.log_models": "true"})
    summary = run_grid(spark, cfg, data=small_dataset)
    tracker = Tracker(summary["tracking_uri"], cfg.grid.experiment, os.path.join(cfg.work_dir, "mlartifacts"))
    return cfg, summary, tracker


def test_runs_links_and_histories(grid_run, small_dataset):
    cfg, summary, tracker = grid_run
    assert summary["trained"] == 20 and summary["skipped"] == 0
    kids = tracker.children(summary["parent_run_id"])
    assert len(kids) == 20 and all(k.info.status == "FINISHED" for k in kids)
    assert all(k.data.tags[TAG_PARENT] == summary["parent_run_id"] for k in kids)
    assert sorted({k.data.tags[TAG_FOLD] for k in kids}) == ["1", "2"]
    assert sorted(k.data.tags[TAG_SWITCH] for k in kids if k.data.tags[TAG_STRATEGY] == "mse") == ["2", "2", "4", "4"]
    run = kids[0]
    for split in ("vali", "test"):
        hist = tracker.client.get_metric_history(run.info.run_id, f"ndcg_at_10_{split}")
        assert sorted(m.step for m in hist) == list(range(1, T + 1))
    assert run.data.params["data_fingerprint"].startswith("sha256:")
    assert "NDCG@10: gain 2^label-1" in run.data.params["metric"]
    assert run.inputs.dataset_inputs and run.inputs.dataset_inputs[0].dataset.digest
    arts = {a.path for a in tracker.client.list_artifacts(run.info.run_id)}
    assert {"per_query_test.json", "training.json", "curve.png"} <= arts
    final = run.data.metrics["final_ndcg_at_10_test"]
    hist = sorted(tracker.client.get_metric_history(run.info.run_id, "ndcg_at_10_test"), key=lambda m: m.step)
    assert hist[-1].value == final
    # the per-query NDCG logged is the final metric, query by query
    perq = json.loads(
        open(
            tracker.client.download_artifacts(run.info.run_id, "per_query_test.json", str(tracker.artifact_root))
        ).read()
    )
    assert np.mean(perq["ndcg_at_10"]) == pytest.approx(final, abs=1e-12)
    # ... with each query's relevant documents, as ltr difficulty counts them (the report leaves out those with 0)
    from pipelines.core.layout import Layout
    from pipelines.report.by_difficulty import load_scores

    fold = int(run.data.tags[TAG_FOLD])
    scores = load_scores(Layout.of(cfg).difficulty, small_dataset, [fold])
    assert perq["relevant"] == [int(scores[(fold, q)]["n_rel"]) for q in perq["qid"]]
    empty = [v for v, n in zip(perq["ndcg_at_10"], perq["relevant"], strict=True) if n == 0]
    assert empty == [cfg.metric.empty] * len(empty)  # the declared convention on queries without one
    # every test document's final score (the report's TREC runs): the per-query NDCG again, by the plain function
    from pipelines.report.export import load_test_scores
    from udfs import metrics

    ts = load_test_scores(tracker, run.info.run_id)
    assert ts is not None and ts["score"].dtype == np.float32
    offsets = metrics.offsets_from_qids(ts["qid"])
    assert ts["qid"][offsets[:-1]].tolist() == perq["qid"]
    assert np.add.reduceat((ts["label"] > 0).astype(int), offsets[:-1]).tolist() == perq["relevant"]
    again = metrics.ndcg(offsets, ts["label"], ts["score"], cfg.metric)
    np.testing.assert_allclose(again, perq["ndcg_at_10"], rtol=0, atol=1e-9)


def test_resume_continues_the_same_child_run_and_retrains_nothing(spark, small_dataset, grid_run):
    cfg, summary, tracker = grid_run
    kids = tracker.children(summary["parent_run_id"])
    victim = next(k for k in kids if k.data.tags[TAG_STRATEGY] == "q_nrel")
    before = sorted((m.step, m.value) for m in tracker.client.get_metric_history(victim.info.run_id, "ndcg_at_10_test"))
    tracker.client.update_run(victim.info.run_id, status="RUNNING")  # as if killed while logging it
    ds = open_dataset(small_dataset)
    plans = {f: plan_fold(cfg, ds, f) for f in (1, 2)}
    left = {f: unfinished_units(fp, tracker.child_runs(summary["parent_run_id"])) for f, fp in plans.items()}
    fold = int(victim.data.tags[TAG_FOLD])
    assert left[3 - fold] == []  # what a scheduler maps: the victim's unit alone
    assert len(left[fold]) == 1 and victim.data.params["plan_nodes"].split(",")[0] == left[fold][0][0]
    assert len(plans[fold].plan.units()) > 1
    again = run_grid(spark, cfg, data=small_dataset)
    assert again["parent_run_id"] == summary["parent_run_id"] and again["resumed"]
    assert (again["trained"], again["skipped"], again["trees_built"]) == (1, 19, 0)  # its nodes are checkpointed
    kids = tracker.children(summary["parent_run_id"])
    assert len(kids) == 20 and all(k.info.status == "FINISHED" for k in kids)  # same run ids, no new run
    after = sorted((m.step, m.value) for m in tracker.client.get_metric_history(victim.info.run_id, "ndcg_at_10_test"))
    assert after == before  # nothing logged twice
    third = run_grid(spark, cfg, data=small_dataset)
    assert (third["trained"], third["skipped"]) == (0, 20)
    assert all(unfinished_units(fp, tracker.child_runs(summary["parent_run_id"])) == [] for fp in plans.values())


def test_report_from_the_grid(grid_run, small_dataset, tmp_path):
    cfg, summary, tracker = grid_run
    splits = open_dataset(small_dataset).manifest["splits"]
    r = build_report(
        tracker,
        str(tmp_path / "report"),
        summary["parent_run_id"],
        report=ReportConfig(permutations=500, bootstrap=200),
        metric_name="ndcg_at_10",
        difficulty=Layout.of(cfg).difficulty,
    )
    names = {row["label"] for row in r["table1"]}
    assert {"LambdaMART", "MSE-2", "MSE-4", "q_nrel-2", "random-4", "blend"} <= names
    base = next(row for row in r["table1"] if row["label"] == "LambdaMART")
    assert base["folds"] == 2 and base["t_p"] is None
    # grid.seeds = 2: the random children's two seeds averaged query by query; their spread seed by seed
    assert [(s["system"], s["seeds"]) for s in r["seeds"]] == [("random-2", [0, 1]), ("random-4", [0, 1])]
    kids = tracker.children(summary["parent_run_id"])
    rand = {
        (k.data.tags[TAG_FOLD], k.data.tags.get("ltr.seed", "0")): k.data.metrics["final_ndcg_at_10_test"]
        for k in kids
        if (k.data.tags[TAG_STRATEGY], k.data.tags[TAG_SWITCH]) == ("random", "4")
    }
    per_seed = [np.mean([rand[(f, s)] for f in ("1", "2")]) for s in ("0", "1")]
    row = next(s for s in r["seeds"] if s["system"] == "random-4")
    assert [s["final"] for s in row["per_seed"]] == pytest.approx(per_seed, abs=1e-12)
    assert row["final_sd"] == pytest.approx(np.std(per_seed, ddof=1), abs=1e-12) and per_seed[0] != per_seed[1]
    r4 = next(row for row in r["table1"] if row["label"] == "random-4")
    assert r4["mean"] == pytest.approx(np.mean(per_seed), abs=1e-12) and r4["folds"] == 2
    mse2 = next(row for row in r["table1"] if row["label"] == "MSE-2")
    # paired over the test queries of folds 1 and 2, those without a relevant document counted apart (left out)
    total = splits["1"]["test"]["queries"] + splits["2"]["test"]["queries"]
    assert mse2["queries"] + mse2["queries_no_relevant"] == total and mse2["queries"] > 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Table 1" in md and "Table 2" in md and "fingerprint `sha256:" in md and "ties: input" in md
    for name in ("report.html", "figure1.png", "figure2.png", "table1.json"):
        assert (tmp_path / "report" / name).stat().st_size > 0
    logged = {a.path for a in tracker.client.list_artifacts(summary["parent_run_id"], "report")}
    assert "report/report.md" in logged and "report/figure1.png" in logged and "report/runs" in logged
    assert len(r["trec"]["runs"]) == 20 and not r["trec"]["without_scores"]  # a TREC run per child
    assert sorted(os.listdir(tmp_path / "report" / "qrels")) == [
        "fold1.exp2.qrels", "fold1.qrels", "fold2.exp2.qrels", "fold2.qrels"
    ]  # fmt: skip
    # the answer first: per family the system chosen on validation, with Table 1's test figures
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    head = rep["headline"]
    assert head["primary_test"] == "randomisation" and head["margin"] == 0.005
    rows = {row["family"]: row for row in head["rows"]}
    assert set(rows) == {"continuation", "q_nrel", "random", "blend"}
    t1 = {row["label"]: row for row in r["table1"]}
    vali = {
        label: np.mean([k.data.metrics["final_ndcg_at_10_vali"] for k in kids if _label(k) == label])
        for label in ("MSE-2", "MSE-4")
    }
    assert rows["continuation"]["system"] == max(sorted(vali), key=lambda k: vali[k])
    for row in head["rows"]:
        t = t1[row["system"]]
        assert (row["delta"], row["p_holm"], row["p_holm_other"]) == (t["delta"], t["perm_p_holm"], t["t_p_holm"])
        assert row["ci95"] == list(t["ci_boot"]) and row["baseline_trees"] == T
    # non-inferiority in trees, from the per-query curves replayed out of the logged models (each replay gives
    # back its run's logged per-query NDCG and curve, else the report fails): every system but the baseline
    ni = rep["noninferiority"]
    assert set(ni) == set(t1) - {"LambdaMART"} and rep["notes"] is None
    for v in ni.values():
        assert v["trees"] is None or (1 <= v["trees"] <= T and v["ratio"] == v["trees"] / T)
        assert v["queries"] == t1["MSE-2"]["queries"]
    # folds pooled by random effects, per-fold intervals, and the interaction with difficulty against random
    assert [f["fold"] for f in rep["per_fold"]["q_nrel-2"]] == [1, 2] and rep["meta"]["q_nrel-2"]["k"] == 2
    inter = rep["difficulty_interaction"]
    assert inter["q_nrel-2"]["n_rel"]["vs_random"]["random"] == "random-2"
    assert inter["MSE-2"]["n_rel"]["vs_random"] is None
    # the parent run answers too: the headline as metrics and as its description
    parent = tracker.client.get_run(summary["parent_run_id"])
    assert parent.data.metrics["headline.continuation.delta"] == rows["continuation"]["delta"]
    assert rows["q_nrel"]["system"] in parent.data.tags["mlflow.note.content"]
    for name in ("forest.png", "forest.pdf", "convergence.png", "convergence.pdf", "figure1.pdf"):
        assert (tmp_path / "report" / name).stat().st_size > 0


def _label(run: Any) -> str:
    """A child run's system label (``MSE-2``)."""
    from pipelines.report.records import label_of

    sw = run.data.tags[TAG_SWITCH]
    return label_of(run.data.tags[TAG_STRATEGY], int(sw) if sw else None)


# ------------------------------------------------------------ report numbers
def test_table1_numbers():
    base = [
        record(1, "lambdamart", None, [0.4, 0.5], {1: 0.5, 2: 0.4, 3: 0.6}),
        record(2, "lambdamart", None, [0.5, 0.6], {4: 0.6, 5: 0.5}),
    ]
    mse = [
        record(1, "mse", 1, [0.45, 0.55], {1: 0.6, 2: 0.5, 3: 0.6}),
        record(2, "mse", 1, [0.55, 0.7], {4: 0.8, 5: 0.6}),
    ]
    rows = {r["label"]: r for r in table1(base + mse, n_perm=4000, seed=1)}
    b, m = rows["LambdaMART"], rows["MSE-1"]
    assert b["mean"] == pytest.approx(0.55) and b["std"] == pytest.approx(math.sqrt(0.005))
    assert m["mean"] == pytest.approx(0.625) and m["std"] == pytest.approx(np.std([0.55, 0.7], ddof=1))
    d = np.array([0.1, 0.1, 0.0, 0.2, 0.1])  # per query, folds pooled
    np.testing.assert_allclose(np.sort(paired_differences(mse, base)), np.sort(d))
    assert m["delta"] == pytest.approx(d.mean()) and m["queries"] == 5 and m["paired_folds"] == [1, 2]
    assert m["t_p"] == pytest.approx(stats.ttest_rel(d + 0.5, np.full(5, 0.5)).pvalue)
    # exact (2^5 = 32 <= 4000 resamples): sum(d) >= 0.5 only with every non-zero difference positive,
    # 2 of the 32 sign patterns (the 0 flips freely); two-sided = 2 x 2/32
    assert m["perm_p"] == pytest.approx(4 / 32)
    # one comparison: Holm changes nothing
    assert (m["t_p_holm"], m["perm_p_holm"]) == (m["t_p"], m["perm_p"])
    assert b["t_p"] is None and b["t_p_holm"] is None


def test_randomization_test_extremes():
    assert randomization_test(np.zeros(5), np.zeros(5)) == 1.0
    assert randomization_test(np.empty(0), np.empty(0)) is None
    # 12 equal differences: exact test (4096 <= 5000); only "all +" reaches the mean, two-sided 2/4096
    assert randomization_test(np.ones(12), np.zeros(12), n_perm=5000, seed=3) == pytest.approx(2 / 4096)
    # 20 pairs, Monte Carlo: one non-zero sign pattern in 2^20 reaches it, so p = 2 x (0 + 1) / 1001
    assert randomization_test(np.ones(20), np.zeros(20), n_perm=1000, seed=3) == pytest.approx(2 / 1001)


def test_table2_chooses_mse_t_on_validation_and_kl():
    base = [record(1, "lambdamart", None, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], {})]
    # MSE-2 has the better final test NDCG, MSE-4 the better final validation NDCG: Table 2 takes MSE-4
    mse = [
        record(1, "mse", 2, [0.25, 0.35, 0.45, 0.5, 0.55, 0.58], {}, vali=[0.2, 0.3, 0.3, 0.3, 0.3, 0.40]),
        record(1, "mse", 4, [0.2, 0.3, 0.4, 0.45, 0.5, 0.52], {}, vali=[0.2, 0.3, 0.3, 0.3, 0.3, 0.41]),
    ]
    t2 = table2(base + mse, [1, 2, 3])
    assert t2["mse"] == "MSE-4" and t2["selected_on"] == "vali" and t2["vali"] == {"MSE-2": 0.40, "MSE-4": 0.41}
    # MSE-4 reaches 0.2 / 0.3 / 0.4 at 1 / 2 / 3 trees; LambdaMART needs 2 / 3 / 4 trees
    assert [(r["size"], r["baseline_trees"], r["ratio"]) for r in t2["rows"]] == [
        (1, 2, 2.0),
        (2, 3, 1.5),
        (3, 4, 4 / 3),
    ]
    # default sizes: MSE-4's vali curve never exceeds LambdaMART's best (0.6): evenly spaced up to T = 6
    assert [r["size"] for r in table2(base + mse)["rows"]] == [2, 4, 6]
    p, q = [3, 1, 0], [1, 1, 2]
    pp, qq = np.array([3.5, 1.5, 0.5]) / 5.5, np.array([1.5, 1.5, 2.5]) / 5.5
    assert kl_divergence(p, q) == pytest.approx(float(np.sum(pp * np.log(pp / qq))))
    assert kl_divergence(p, p) == 0.0


def test_report_header_tests_and_table2_of_the_grid(grid_run, tmp_path):
    from pipelines.core.provenance import code_version

    cfg, summary, tracker = grid_run
    r = _report(tracker, str(tmp_path / "r"), summary["parent_run_id"], permutations=200, table2_sizes=[1, 3])
    assert r["status"] == "FINISHED" and r["problems"] == []
    rows = [row for row in r["table1"] if row["label"] != "LambdaMART"]
    assert all(row["folds"] == row["folds_expected"] == 2 and row["paired_folds"] == [1, 2] for row in rows)
    # Holm over the 7 comparisons: the smallest raw p-value is multiplied by 7 (or capped at 1)
    smallest = min(rows, key=lambda row: row["t_p"])
    assert smallest["t_p_holm"] == pytest.approx(min(1.0, 7 * smallest["t_p"]))
    assert all(row["perm_p_holm"] >= row["perm_p"] for row in rows)
    assert [row["size"] for row in r["table2"]["rows"]] == [1, 3] and r["table2"]["selected_on"] == "vali"
    md = (tmp_path / "r" / "report.md").read_text()
    v = code_version()
    assert f"xgboost `{v['xgboost']}`" in md and f"numpy `{v['numpy']}`" in md and f"pyspark `{v['pyspark']}`" in md
    assert "t-test p, Holm" in md and "Holm-corrected side by side" in md and "Warning" not in md
    assert "folds]" not in md  # every cell has both folds
    html_page = (tmp_path / "r" / "report.html").read_text()
    # the primary test (report.primary_test, the randomisation test by default) first, the other as a robustness column
    assert "<th>randomisation p, Holm (primary)</th>" in html_page
    assert "<th>t-test p, Holm (robustness)</th>" in html_page


def test_report_of_an_unfinished_grid_and_the_latest_finished_one(grid_run, tmp_path):
    cfg, summary, tracker = grid_run
    parent = summary["parent_run_id"]
    newer = tracker.client.create_run(tracker.experiment_id, run_name="later-grid", tags={"ltr.kind": "grid"})
    try:
        # without --run-id: the latest FINISHED grid, not the newer one still RUNNING (with no children)
        assert _report(tracker, str(tmp_path / "a"), permutations=50)["parent"] == parent
        tracker.client.update_run(parent, status="RUNNING")
        with pytest.raises(
            ReportError,
            match=rf"has no finished grid; the latest grid run {newer.info.run_id} is "
            rf"RUNNING: .* pass --run-id {newer.info.run_id}",
        ):
            _report(tracker, str(tmp_path / "b"), permutations=50)
        r = _report(tracker, str(tmp_path / "c"), parent, permutations=50)
        assert r["problems"] == ["parent run status RUNNING"]
        md = (tmp_path / "c" / "report.md").read_text()
        assert "**Warning: this grid is unfinished**: parent run status RUNNING." in md
    finally:
        tracker.client.update_run(parent, status="FINISHED")
        tracker.client.delete_run(newer.info.run_id)


def test_report_cli_experiment_must_exist(grid_run, tmp_path, capsys):
    from pipelines.app.cli import main

    cfg, summary, tracker = grid_run
    common = ["--set", f"work_dir={cfg.work_dir}", "--out", str(tmp_path / "r")]
    assert main(["report", "--experiment", "tset-grid", *common]) == 2
    err = capsys.readouterr().err
    assert "ltr report: error: --experiment: no MLflow experiment 'tset-grid'" in err and "test-grid" in err
    assert tracker.client.get_experiment_by_name("tset-grid") is None  # not created
    assert not (tmp_path / "r").exists()
    code = main(
        [
            "report",
            "--experiment",
            "test-grid",
            *common,
            "--set",
            "report.permutations=50",
            "--set",
            "report.table2_sizes=[2]",
        ]
    )
    assert code == 0
    assert [row["size"] for row in json.loads((tmp_path / "r" / "table2.json").read_text())["rows"]] == [2]


def test_logged_model_loads_back(grid_run, tmp_path):
    import mlflow
    import xgboost as xgb

    cfg, summary, tracker = grid_run
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(50, 3)).astype(np.float32), rng.normal(size=50)
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(X, y), 3)
    run = tracker.client.create_run(tracker.experiment_id, run_name="model-check")
    tracker.log_model(run.info.run_id, bytes(booster.save_raw("json")))
    tracker.finish(run.info.run_id)
    assert tracker.client.get_run(run.info.run_id).info.status == "FINISHED"
    loaded = mlflow.xgboost.load_model(f"runs:/{run.info.run_id}/model")
    np.testing.assert_array_equal(loaded.predict(xgb.DMatrix(X)), booster.predict(xgb.DMatrix(X)))
