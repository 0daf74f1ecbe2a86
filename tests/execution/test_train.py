"""Training: the local loop (prefix property, prefix reuse, blend == MSE-t) and the distributed
trainer on Spark (== single-node xgb.train, 2 workers == 1 worker, split-query guard, refusals)."""

from __future__ import annotations

import json
import logging
import re
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xgboost as xgb
from pyspark.sql import functions as F

from pipelines.app.cli import main
from pipelines.core.config import CurriculumConfig, IngestConfig, TrainConfig, load_dataset_spec
from pipelines.data.curricula import build_curriculum, load_curricula
from pipelines.data.dataset import open_dataset
from pipelines.data.ingest import ingest
from pipelines.execution.barrier_job import SPLIT_COL, TrainError, make_settings, resolve_workers
from pipelines.execution.executor import Execution, execute_plan
from pipelines.kernel.loop import Settings, SplitData, WorkerData, run_nodes
from pipelines.plan.paths import parse_path
from pipelines.plan.trie import Plan, build_plan
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.results import PathResult, path_result, selections
from pipelines.testing.processes import ROOT
from tests.helpers import XGB_PARAMS, component_settings
from udfs import schema
from udfs.metrics import NdcgSpec, ndcg

PARAMS = XGB_PARAMS


def _settings(metric: NdcgSpec | None = None, **train: Any) -> Settings:
    """Worker settings of the local twin: small trees (as ``PARAMS``), the other settings the config's
    (``train``: TrainConfig fields to change), one thread, labels 0..4."""
    cfg = TrainConfig(**{"leaves": PARAMS["max_leaves"], "eta": PARAMS["eta"], "max_bin": PARAMS["max_bin"], **train})
    return Settings.of(cfg, metric or NdcgSpec(), (0, 4), PARAMS["nthread"])


def _split(rng, n_queries: int, coarse: bool = True) -> SplitData:
    sizes = rng.integers(1, 40, n_queries)
    qid = np.repeat(np.arange(n_queries) + rng.integers(0, 10**6), sizes).astype(np.int32)
    X = (
        rng.integers(0, 10, size=(qid.size, 6)).astype(np.float32) / 2
        if coarse
        else np.round(rng.normal(size=(qid.size, 6)), 3).astype(np.float32)
    )  # 3 decimals: LETOR text keeps them
    y = np.clip(np.round(X[:, 0] / 2 + X[:, 1] / 3 + rng.normal(size=qid.size) - 1), 0, 4).astype(np.float32)
    return SplitData(X, y, qid)


#: the folder of this module's checkpoint stores: under pytest's basetemp (which pytest rotates and .ci/run
#: removes), not loose in /tmp, where each run of the suite had left about 40 ``ckpt-*`` folders
_STORES: Path | None = None


@pytest.fixture(scope="module", autouse=True)
def _stores_under_basetemp(tmp_path_factory):
    global _STORES
    _STORES = tmp_path_factory.mktemp("stores")
    yield
    _STORES = None


def _new_store() -> CheckpointStore:
    return CheckpointStore(tempfile.mkdtemp(prefix="ckpt-", dir=_STORES))


@pytest.fixture(scope="module")
def local_data() -> WorkerData:
    rng = np.random.default_rng(0)
    return WorkerData(_split(rng, 120), _split(rng, 40), _split(rng, 40))


def train_plan(
    data: WorkerData, plan: Plan, settings: Settings, root: str | None = None
) -> tuple[dict[str, PathResult], dict[str, float]]:
    """The local twin: every node of ``plan`` on one worker, checkpoints in a temporary directory."""
    store = CheckpointStore(root) if root else _new_store()
    timing = run_nodes(data, plan.nodes, settings, store)
    return {p: path_result(store, p, c) for p, c in plan.chains.items()}, timing


def _predict(model: bytes, X: np.ndarray, trees: int | None = None) -> np.ndarray:
    b = xgb.Booster(model_file=bytearray(model))
    return b.predict(xgb.DMatrix(X), output_margin=True, iteration_range=(0, trees or b.num_boosted_rounds()))


@pytest.mark.heavy
def test_prefix_property_and_global_tree_count(local_data):
    paths = [parse_path("mse:6,lambdamart:8", "cm"), parse_path("mse:6", "prefix")]
    res, _ = train_plan(local_data, build_plan(paths), _settings())
    cm, prefix = res["cm"], res["prefix"]
    X = local_data.test.X
    # the final model's first t trees give exactly the stage-1 model's predictions
    assert np.array_equal(_predict(cm.model, X, 6), _predict(prefix.model, X))
    assert cm.trees == list(range(1, 15)) and [r["first_tree"] for r in cm.runs] == [0, 6]
    assert [r["objective"] for r in cm.runs] == ["mse", "lambdamart"]
    # the curve is the project's NDCG of the model's predictions
    t = local_data.test
    assert cm.test[-1] == pytest.approx(ndcg(t.offsets, t.y, _predict(cm.model, X)).mean(), abs=1e-12)
    assert cm.vali[5] == prefix.vali[-1]  # per-stage metrics kept apart, same at the switch point


@pytest.mark.heavy
def test_prefix_reuse_gives_the_same_models_as_separate_training(local_data):
    s = _settings()
    grid = [parse_path(f"mse:{t},lambdamart:{12 - t}", f"MSE-{t}") for t in (3, 6, 9)]
    together, _ = train_plan(local_data, build_plan(grid), s)
    for p in grid:
        alone, _ = train_plan(local_data, build_plan([p]), s)
        assert np.array_equal(
            _predict(together[p.label].model, local_data.test.X), _predict(alone[p.label].model, local_data.test.X)
        ), p.label
        assert together[p.label].test == alone[p.label].test


@pytest.mark.heavy  # (the blend's schedules: tests/udfs/test_objectives.py, on every Python)
def test_blend_with_a_step_equals_mse_t(local_data):
    paths = [parse_path("blend:12", "blend"), parse_path("mse:5,lambdamart:7", "m")]
    with component_settings(blend={"schedule": "step", "at": 5}):
        res, _ = train_plan(local_data, build_plan(paths), _settings())
    np.testing.assert_allclose(
        _predict(res["blend"].model, local_data.test.X), _predict(res["m"].model, local_data.test.X), atol=1e-5
    )
    np.testing.assert_allclose(res["blend"].test, res["m"].test, atol=1e-6)


def test_python_objectives_equal_builtin(local_data):
    res, timing = train_plan(
        local_data,
        build_plan([parse_path("mse:4,lambdamart:6", "py"), parse_path("xgb_mse:4,xgb_lambdamart:6", "xgb")]),
        _settings(score_dist_trees=[4]),
    )
    np.testing.assert_allclose(res["py"].test, res["xgb"].test, atol=1e-6)
    assert timing["trees"] == 20
    d = res["py"].score_dists[0]
    assert d["tree"] == 4 and d["labels"] == [0, 1, 2, 3, 4]
    assert sum(map(sum, d["counts"])) == local_data.test.y.size


@pytest.mark.parametrize(
    "obj",
    [
        "ranknet",
        "sigmoid_pairwise",
        "noisy_lambdamart",
        # (its estimators' own tests, tests/udfs/test_stochastic_rank.py, run on every Python)
        pytest.param("stochastic_rank", marks=pytest.mark.heavy),
        "blend",
    ],
)
def test_every_objective_learns(local_data, obj):
    res, _ = train_plan(local_data, build_plan([parse_path(f"{obj}:15", "p")]), _settings())
    r = res["p"]
    assert len(r.test) == 15 and np.all(np.isfinite(r.test))
    assert max(r.vali) > r.vali[0] - 1e-9


def test_eval_every(local_data):
    res, _ = train_plan(local_data, build_plan([parse_path("mse:5,lambdamart:6", "p")]), _settings(eval_every=4))
    assert res["p"].trees == [4, 5, 8, 11]  # every 4th tree, plus the switch point and the end


# ------------------------------------------------------------ on Spark
def _write_letor(path: Path, split: SplitData) -> None:
    lines = []
    for i in range(split.y.size):
        feats = " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(split.X[i]))
        lines.append(f"{int(split.y[i])} qid:{split.qid[i]} {feats}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def coarse_dataset(spark_holder, tmp_path_factory):
    """One fold of coarse features (fewer distinct values than max_bin: exact quantile cuts)."""
    spark = spark_holder.get()
    rng = np.random.default_rng(5)
    splits = {"train": _split(rng, 160), "vali": _split(rng, 40), "test": _split(rng, 40)}
    return _ingested(spark, tmp_path_factory.mktemp("coarse"), splits), splits


def _ingested(spark, root: Path, splits: dict[str, SplitData]) -> str:
    """``splits`` written as LETOR text and ingested as one fold: the dataset's path."""
    src = root / "src"
    src.mkdir()
    for name, sp in splits.items():
        _write_letor(src / f"{name}.txt", sp)
    ingest(spark, str(src), str(root / "ds"), load_dataset_spec("mslr"), IngestConfig(n_features=6))
    return str(root / "ds")


def _local_twin(splits) -> WorkerData:
    def sort(sp: SplitData) -> SplitData:
        o = np.argsort(sp.qid, kind="stable")
        return SplitData(sp.X[o], sp.y[o], sp.qid[o])

    return WorkerData(sort(splits["train"]), sort(splits["vali"]), sort(splits["test"]))


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"leaves": 8, "max_bin": 64, "eta": 0.1, "score_dist_trees": [3], **kw})


def _train(spark, data, paths, workers, curricula=(), arrange=None, cfg=None, selfpaced=None):
    from pipelines.core.config import SelfPacedConfig
    from pipelines.execution import barrier_job, executor
    from pipelines.plan.paths import paced_schedules, resolve

    ds = open_dataset(data)
    cfg = cfg or _cfg(workers=workers, nthread=1)
    if arrange is not None:  # a partitioning of the driver's frame: the workers must not read their own rows
        cfg = replace(cfg, read="spark")
    curs = load_curricula(list(curricula), ds, 1)
    tps = [resolve(parse_path(p, p), {c.name: c.n_stages for c in curs}) for p in paths]
    paced = paced_schedules(selfpaced or SelfPacedConfig(), tps)
    settings = replace(make_settings(cfg, NdcgSpec(), ds, 1), paced=paced)
    plan = build_plan(tps, fold=1, paced=paced)
    store = _new_store()
    how = Execution.from_config(
        replace(cfg, job_retries=0), workers=workers, nthread=cfg.nthread or 1, parallel=1, resume_hint="the test"
    )
    if arrange is not None:  # a partitioning under test
        real = barrier_job.run_nodes_distributed
        executor.run_nodes_distributed = lambda *a, **k: real(*a, **k, arrange=arrange)
    try:
        info = execute_plan(spark, plan, ds, {c.name: c for c in curs}, settings, store, how)
    finally:
        executor.run_nodes_distributed = barrier_job.run_nodes_distributed
    return {p: path_result(store, p, c) for p, c in plan.chains.items()}, {
        **info["jobs"][0],
        "store": store.root,
        "selections": {p: selections(store, plan, c) for p, c in plan.chains.items()},
    }


def test_two_workers_equal_single_node_xgb_train(spark, coarse_dataset, caplog):
    """...with XGBoost's tracker started in the barrier stage (``train.tracker=stage``: what a client of a remote
    Spark Connect server does), the same trees as one process's ``xgb.train``."""
    data, splits = coarse_dataset
    with caplog.at_level(logging.INFO, logger="pipelines.execution.barrier_job"):
        res, info = _train(spark, data, ["xgb_lambdamart:8"], 2, cfg=_cfg(workers=2, nthread=1, tracker="stage"))
    assert "the XGBoost tracker runs in each barrier stage (train.tracker=stage)" in caplog.text
    assert info["workers"] == 2 and {t["rank"] for t in info["worker_timings"]} == {0, 1}
    assert sum(t["rows"] for t in info["worker_timings"]) == splits["train"].y.size
    twin = _local_twin(splits)
    tr = twin.train
    params = {
        **PARAMS,
        "objective": "rank:ndcg",
        "lambdarank_pair_method": "topk",
        "lambdarank_num_pair_per_sample": 10,
        "base_score": 0.0,
    }
    single = xgb.train(params, xgb.QuantileDMatrix(tr.X, tr.y, qid=tr.qid, max_bin=64), 8)
    te = twin.test
    ours = _predict(res["xgb_lambdamart:8"].model, te.X)
    np.testing.assert_allclose(ours, single.predict(xgb.DMatrix(te.X), output_margin=True), atol=1e-5)
    assert abs(ndcg(te.offsets, te.y, ours).mean() - res["xgb_lambdamart:8"].test[-1]) < 1e-9


def test_two_workers_equal_one_worker_with_python_objectives(spark, coarse_dataset):
    data, splits = coarse_dataset
    paths = ["mse:3,lambdamart:5"]
    two, _ = _train(spark, data, paths, workers=2)
    one, _ = _train(spark, data, paths, workers=1)
    local, _ = train_plan(
        _local_twin(splits),
        build_plan([parse_path(p, p) for p in paths]),
        _settings(score_dist_trees=[3]),
    )
    X = _local_twin(splits).test.X
    for r in (one, local):
        np.testing.assert_allclose(_predict(two[paths[0]].model, X), _predict(r[paths[0]].model, X), atol=1e-5)
        np.testing.assert_allclose(two[paths[0]].test, r[paths[0]].test, atol=1e-6)


def test_one_and_two_workers_choose_the_same_queries_at_every_selection(spark, coarse_dataset):
    """A self-paced segment and its random control on 1 and 2 workers: the same choices at every selection (each
    worker scores its own queries, all choose from the gathered scores) and the same trees up to summation order."""
    from pipelines.core.config import SelfPacedConfig

    data, _ = coarse_dataset
    paths = ["lambdamart@selfpaced:6,lambdamart:2", "lambdamart@randompaced:6,lambdamart:2"]
    sp = SelfPacedConfig(every=2, delta=0.3, by="loss")
    two, i2 = _train(spark, data, paths, workers=2, selfpaced=sp)
    one, i1 = _train(spark, data, paths, workers=1, selfpaced=sp)
    assert (i2["workers"], i1["workers"]) == (2, 1)
    for p in paths:
        assert i2["selections"][p] == i1["selections"][p], p
        ((node, chosen),) = i2["selections"][p].items()
        assert node.startswith("lambdamart@") and [c[0] for c in chosen] == [0, 2, 4] and chosen[-1][1] == 1.0
        assert chosen[0][2] == chosen[0][3] and chosen[1][2] < chosen[1][3]  # all at tree 0, then a share
        np.testing.assert_allclose(two[p].test, one[p].test, atol=1e-6)
    assert two[paths[0]].model != two[paths[1]].model


@pytest.fixture(scope="module")
def fine_dataset(spark_holder, tmp_path_factory):
    """One fold of continuous features (far more distinct values than max_bin): sketches of different
    rows give different cuts, so per-worker cuts would make the trees depend on the worker count."""
    spark = spark_holder.get()
    rng = np.random.default_rng(9)
    splits = {
        "train": _split(rng, 150, coarse=False),
        "vali": _split(rng, 30, coarse=False),
        "test": _split(rng, 30, coarse=False),
    }
    return _ingested(spark, tmp_path_factory.mktemp("fine"), splits), splits


def _trees(model: bytes) -> list[dict]:
    return json.loads(model)["learner"]["gradient_booster"]["model"]["trees"]


def test_the_cuts_are_the_sketch_of_the_split_in_qid_doc_order(fine_dataset):
    """With a sample of the whole split, the cuts are XGBoost's sketch of the split's rows in (qid, doc) order
    (the sketch depends on row order), read on the driver without Spark, whatever the batches."""
    from pipelines.store.cuts import compute_cuts, cuts_of

    data, splits = fine_dataset
    ds = open_dataset(data)
    want = cuts_of(splits["train"].X, 16)
    assert want.values.size > 6 * 8  # continuous features: the cuts are quantiles, not every distinct value
    c = compute_cuts(ds, 1, 16, 10**6, "k")
    assert c.rows == splits["train"].y.size
    np.testing.assert_array_equal(c.ptr, want.ptr)
    np.testing.assert_array_equal(c.values, want.values)
    # ... on any thread count: the cuts' key has none (``ltr train`` computes them ahead on all cores, while Spark
    # starts, before it knows its workers' threads)
    for nthread in (1, 2, 3):
        other = compute_cuts(ds, 1, 16, 10**6, "k", nthread)
        np.testing.assert_array_equal(other.ptr, want.ptr)
        np.testing.assert_array_equal(other.values, want.values)


def test_cuts_ahead_stores_the_cuts_the_training_reads_and_leaves_errors_to_it(fine_dataset, tmp_path, caplog):
    """``ltr train``'s cuts while its Spark session starts (:func:`pipelines.app.train.cuts_ahead`): stored under the
    key the executor's :func:`~pipelines.store.cuts.fold_cuts` looks for, equal to what it computes; a dataset or a
    fold that is not there raises nothing there (the training reports it); the block's own error goes through."""
    import logging

    from pipelines.app.train import cuts_ahead
    from pipelines.core.config import TrainConfig
    from pipelines.core.keys import cuts_key
    from pipelines.store.cuts import compute_cuts, cuts_digest, fold_cuts, load_cuts

    data, _ = fine_dataset
    ds = open_dataset(data)
    cfg = TrainConfig(max_bin=16, cuts_sample_rows=100)  # a sample: 100 rows of a split of more
    root = str(tmp_path / "ckpt")
    key = cuts_key(ds.fingerprint, 1, 16, 100)
    with cuts_ahead(data, [1], cfg, root):
        pass  # the session's start
    ahead = load_cuts(root, key)
    assert ahead is not None and 0 < ahead.rows < ds.manifest["rows"]
    fresh = compute_cuts(ds, 1, 16, 100, key, 1)  # the executor's, with a worker's thread count
    np.testing.assert_array_equal(ahead.ptr, fresh.ptr)
    np.testing.assert_array_equal(ahead.values, fresh.values)
    caplog.clear()  # (compute_cuts just logged its line, when another test left the logger at INFO)
    with caplog.at_level(logging.INFO, logger="pipelines.store.cuts"):
        got = fold_cuts(root, ds, 1, 16, 100, 1)  # what the training calls: read, not computed again
    assert not [r for r in caplog.records if "histogram cuts from" in r.getMessage()]
    np.testing.assert_array_equal(got.values, ahead.values)
    # changed on disk (a byte of a cut value): set aside and computed again, to the same cuts
    path = tmp_path / "ckpt" / "_cuts" / f"{key}.npz"
    data = bytearray(path.read_bytes())
    data[data.index(b"values.npy") + 140] ^= 1
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.INFO, logger="pipelines.store.cuts"):
        again = fold_cuts(root, ds, 1, 16, 100, 1)
    assert [r for r in caplog.records if "set aside, the fold's cuts are computed again" in r.getMessage()]
    assert cuts_digest(again) == cuts_digest(ahead) == cuts_digest(load_cuts(root, key))

    other = str(tmp_path / "other")
    with cuts_ahead(data, [7], cfg, other), cuts_ahead(str(tmp_path / "missing"), [1], cfg, other):
        pass  # no fold 7, no dataset: nothing raised here, nothing stored
    assert load_cuts(other, cuts_key(ds.fingerprint, 7, 16, 100)) is None
    with pytest.raises(RuntimeError, match="the session failed"), cuts_ahead(data, [1], cfg, other):
        raise RuntimeError("the session failed")


def test_the_sample_is_the_one_spark_xxhash64_chose(spark, fine_dataset):
    """The oracle for the driver's sample (pipelines.store.cuts.sample_rows_of): Spark SQL's
    ``pmod(xxhash64(qid), 2**30) < fraction * 2**30``, which chose it when a Spark job computed the cuts. The
    same hashes for int32 ids at the edges and at random, and the same sampled rows of the split in the same
    (qid, doc) order: so the cuts stored before are the cuts computed now."""
    from pipelines.data.dataset import load_split
    from pipelines.store.cuts import sample_rows_of
    from udfs.spark_hashes import xxhash64

    rng = np.random.default_rng(3)
    ids = np.r_[0, 1, 2, 255, 256, 65535, 2**31 - 1, 2**31 - 2, rng.integers(0, 2**31 - 1, 300)].astype(np.int32)
    df = spark.createDataFrame([(int(i),) for i in ids], "qid int").select("qid", F.xxhash64("qid").alias("h"))
    theirs = {int(r.qid): int(r.h) for r in df.collect()}
    ours = xxhash64(ids).view(np.int64)
    assert {int(i): int(h) for i, h in zip(ids, ours, strict=True)} == theirs

    data, _ = fine_dataset
    ds = open_dataset(data)
    frac = 0.4
    X, seen = sample_rows_of(ds, 1, frac)
    feats = schema.feature_cols(ds.n_features)
    sdf = load_split(spark, ds, 1, "train", [schema.QID, schema.DOC, *feats])
    sdf = sdf.where(F.pmod(F.xxhash64(F.col(schema.QID)), F.lit(1 << 30)) < F.lit(int(frac * (1 << 30))))
    rows = sorted(sdf.select(schema.QID, schema.DOC, *feats).collect(), key=lambda r: (r[0], r[1]))
    assert seen == sum(int(ds.manifest["subsets"][s]["rows"]) for s in ds.subsets(1, "train"))
    assert 0 < X.shape[0] < seen  # a sample: some queries kept, some not
    np.testing.assert_array_equal(X, np.array([r[2:] for r in rows], np.float32))


def test_one_and_two_workers_build_the_same_trees_on_global_cuts(spark, fine_dataset):
    """Global cuts (pipelines.store.cuts, here from a 1,000-row sample of whole queries) make 1 and 2 workers
    build the same trees: same splits, leaves equal up to the summation order of histograms (3 workers:
    benchmarks/bench_workers.py on local-cluster; the session here has 2 slots)."""
    from pipelines.core.keys import cuts_key
    from pipelines.store.cuts import load_cuts, reference_matrix

    data, splits = fine_dataset
    paths = ["mse:3,lambdamart:5"]
    cfg = dict(nthread=1, max_bin=16, cuts_sample_rows=1000)
    runs = {w: _train(spark, data, paths, workers=w, cfg=_cfg(workers=w, **cfg)) for w in (1, 2)}
    assert [runs[w][1]["workers"] for w in (1, 2)] == [1, 2]
    models = {w: runs[w][0][paths[0]].model for w in runs}
    for w in (2,):
        for a, b in zip(_trees(models[1]), _trees(models[w]), strict=True):
            assert a["split_indices"] == b["split_indices"] and a["split_conditions"][:1] == b["split_conditions"][:1]
            assert a["left_children"] == b["left_children"]
            np.testing.assert_allclose(a["base_weights"], b["base_weights"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(runs[1][0][paths[0]].test, runs[w][0][paths[0]].test, atol=1e-6)
    # the sample is a sample: fewer rows than the split, so the cuts are not the full split's sketch
    ds = open_dataset(data)
    store_root = runs[1][1]["store"]
    cuts = load_cuts(store_root, cuts_key(ds.fingerprint, 1, 16, 1000))
    assert cuts is not None and 0 < cuts.rows < splits["train"].y.size
    # the local twin on the same cuts: the same trees again
    twin = _local_twin(splits)
    local, _ = train_plan(
        twin,
        build_plan([parse_path(p, p) for p in paths]),
        _settings(max_bin=16, score_dist_trees=[3]),
    )
    store = _new_store()
    plan = build_plan([parse_path(p, p) for p in paths])
    run_nodes(
        twin,
        plan.nodes,
        _settings(max_bin=16, score_dist_trees=[3]),
        store,
        ref=reference_matrix(cuts),
    )
    on_cuts = path_result(store, paths[0], plan.chains[paths[0]])
    X = twin.test.X
    np.testing.assert_allclose(_predict(models[2], X), _predict(on_cuts.model, X), atol=1e-5)
    # ...and not what a sketch of all the rows gives (the test would not see per-worker cuts otherwise)
    assert not np.allclose(_predict(local[paths[0]].model, X), _predict(on_cuts.model, X), atol=1e-5)


def test_workers_get_the_same_queries_whatever_the_input_partitioning_or_session_history(spark):
    from pipelines.execution.barrier_job import arrange_by_qid

    rows = [(q, d, q % 3) for q in range(300) for d in range(4)]
    base = spark.createDataFrame(rows, f"{schema.QID} int, {schema.DOC} int, {SPLIT_COL} int")

    def layout(df):
        got = arrange_by_qid(df, 2).select(F.spark_partition_id().alias("p"), schema.QID, schema.DOC).collect()
        return {p: sorted((r[schema.QID], r[schema.DOC]) for r in got if r["p"] == p) for p in (0, 1)}

    a = layout(base)
    for _ in range(3):  # other jobs in between (new RDD ids), other input partitionings and orders
        spark.range(10).count()
        assert layout(base.repartition(5).orderBy(F.rand(1))) == a
    assert layout(base.coalesce(1)) == a
    q0, q1 = ({q for q, _ in a[p]} for p in (0, 1))
    assert not q0 & q1 and len(q0 | q1) == 300 and min(len(q0), len(q1)) > 100  # whole queries, balanced


def test_split_query_guard_fires(spark, coarse_dataset):
    data, _ = coarse_dataset

    def by_doc(df, n):  # a partitioning that cuts queries in pieces
        return df.repartition(n, F.col(schema.DOC)).sortWithinPartitions(SPLIT_COL, schema.QID, schema.DOC)

    with pytest.raises(Exception, match=r"SplitQueryError: query \d+ of the train split is on workers 0 and 1"):
        _train(spark, data, ["xgb_mse:2"], workers=2, arrange=by_doc)


def test_the_query_guard_sees_every_workers_queries():
    """What each worker checks once the workers have gathered their qid sets (rank 0's view of two workers; the
    distributed path is the test above): a query on two workers and a worker with no training query are
    refused with the same message on every worker."""
    from types import SimpleNamespace

    from pipelines.execution.barrier_job import SplitQueryError, check_queries
    from pipelines.kernel.env import LocalComm
    from pipelines.kernel.matrices import SPLITS

    def held(train, vali=(), test=()):  # a worker's rows: 3 documents of each query
        qids = (np.repeat(np.asarray(q, np.int32), 3) for q in (train, vali, test))
        return SimpleNamespace(**{name: SimpleNamespace(qid=q) for name, q in zip(SPLITS, qids, strict=True)})

    class Two:  # rank 0 of a world of two, whose rank 1 holds `other`
        def __init__(self, other):
            self.other = other

        def gather(self, obj):
            return [obj, {name: np.unique(getattr(self.other, name).qid) for name in SPLITS}]

    check_queries(Two(held([3, 4], [9], [7])), held([1, 2], [8], [6]))
    check_queries(LocalComm(), held([1]))
    with pytest.raises(SplitQueryError, match=r"^query 9 of the vali split is on workers 0 and 1 \(1 queries split\)"):
        check_queries(Two(held([3], [9])), held([1], [8, 9]))
    with pytest.raises(TrainError, match=r"^workers \[1\] received no training query; use fewer --workers$"):
        check_queries(Two(held([], [5])), held([1, 2]))


def test_too_many_workers_refused(spark):
    with pytest.raises(
        TrainError,
        match=r"--workers 3 x --parallel 1 needs 3 tasks running at once "
        r"\(barrier mode\), but the session has 2 task slots",
    ):
        resolve_workers(spark, TrainConfig(workers=3))
    assert resolve_workers(spark, TrainConfig(), parallel=2) == (1, 1)  # two jobs share the two cores
    assert resolve_workers(spark, TrainConfig()) == (1, 2)  # local: one worker with all the cores
    assert resolve_workers(spark, TrainConfig(workers=2)) == (2, 1)


def test_an_executor_with_other_code_is_refused_in_one_line():
    """The barrier tasks compare their code identity with the driver's (every distributed test passes the
    equal case, by the files' bytes); another identity names what differs and the fix, and bytes that differ
    where the identity does not (a comment) are not refused."""
    from pipelines.core.keys import has_source_files, source_files, worker_identity, worker_roots
    from pipelines.execution.barrier_job import check_same_code

    files = source_files(worker_roots())
    assert "pipelines.kernel.loop" in files and "udfs.objectives.noisy_lambdamart" in files and has_source_files(files)
    assert "pipelines.execution.barrier_job" not in files  # operations code: not in the nodes' identity
    other_bytes = {**files, "pipelines.kernel.loop": (files["pipelines.kernel.loop"][0], "0" * 64)}
    moved = {**files, "pipelines.kernel.loop": ("pipelines/kernel/loop/__init__.py", files["pipelines.kernel.loop"][1])}
    assert not has_source_files(other_bytes) and not has_source_files(moved)
    for driver_files in (None, files, other_bytes):
        check_same_code(dict(worker_identity()), driver_files)
    refused = (
        r"executor \S+ runs other code than the driver \({}: "
        r"sources \w+ \(xgboost .+\) here, sources {} \(xgboost .+\) on the driver\); ship the driver's environment"
    )
    with pytest.raises(TrainError, match=refused.format("sources, xgboost", "000000000000")):
        check_same_code({**worker_identity(), "sources": "0" * 20, "xgboost": "0.1"})
    with pytest.raises(TrainError, match=refused.format("sources", "000000000000")):
        check_same_code({**worker_identity(), "sources": "0" * 20}, other_bytes)
    with pytest.raises(TrainError, match=refused.format("xgboost", r"\w+")):  # the same files, another XGBoost
        check_same_code({**worker_identity(), "xgboost": "0.1"}, files)


def test_barrier_constraints_checked_up_front():
    from pyspark import SparkConf

    from pipelines.core.connect import is_local
    from pipelines.execution.barrier_job import check_barrier_conf

    with pytest.raises(TrainError, match=r"dynamic allocation does not support.*spark.dynamicAllocation.enabled=false"):
        check_barrier_conf(SparkConf(loadDefaults=False).set("spark.dynamicAllocation.enabled", "true"))
    check_barrier_conf(SparkConf(loadDefaults=False).set("spark.dynamicAllocation.enabled", "false"))
    assert is_local("local[*]") and is_local("local") and is_local("local[2]")
    assert not is_local("local-cluster[2,1,1024]") and not is_local("spark://h:7077") and not is_local("yarn")


def test_curriculum_paths_and_workers_reading_their_rows_train_what_the_shuffle_gives(
    spark, small_dataset, small_difficulty, tmp_path
):
    """A curriculum path on 2 workers; and the oracle of ``train.read``: the barrier tasks reading the fold's
    Parquet themselves (``worker``, pipelines.worker.rows) train byte for byte the model of the driver's
    shuffle (``spark``), each worker on the same rows (the curriculum's stages joined the same way)."""
    cur = tmp_path / "c"
    s = build_curriculum(spark, small_dataset, small_difficulty, 1, CurriculumConfig(strategy="l_hrel"), str(cur))
    path = "lambdamart@l_hrel:3,lambdamart:3"
    got = {
        read: _train(spark, small_dataset, [path], 2, [str(cur)], cfg=_cfg(workers=2, nthread=1, read=read))
        for read in ("worker", "spark")
    }
    runs = got["worker"][0][path].runs
    assert runs[0]["data"] == "l_hrel.0" and runs[1]["data"] == "all"
    assert runs[0]["rows"] == s["stages"][0]["documents"]  # the label filter, as the curriculum counted it
    assert got["worker"][0][path].model == got["spark"][0][path].model
    rows = {r: sorted((t["rank"], t["rows"]) for t in got[r][1]["worker_timings"]) for r in got}
    assert rows["worker"] == rows["spark"] and all(n > 0 for _, n in rows["worker"])


def test_ltr_train_cli(spark, coarse_dataset, tmp_path, capsys):
    data, _ = coarse_dataset
    out = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--data",
                data,
                "--fold",
                "1",
                "--path",
                "mse:2,lambdamart:3",
                "--leaves",
                "8",
                "--out",
                str(out),
                "--set",
                "train.max_bin=64",
            ]
        )
        == 0
    )
    summary = json.loads((out / "_train.json").read_text())
    assert summary["path"] == "mse:2,lambdamart:3" and summary["trees"] == 5
    curve = (out / "curve.csv").read_text().splitlines()
    assert curve[0] == "tree,vali_ndcg_at_10,test_ndcg_at_10" and len(curve) == 6
    assert xgb.Booster(model_file=str(out / "model.json")).num_boosted_rounds() == 5
    assert main(["train", "--data", data, "--fold", "1", "--path", "mse200", "--out", str(tmp_path / "x")]) == 2
    assert "segment 'mse200' is not OBJECTIVE[@DATA][~SEED]:TREES" in capsys.readouterr().err


@pytest.mark.heavy
def test_concatenated_model_says_what_was_trained_and_round_trips_through_mlflow(local_data, tmp_path):
    """A real two-stage model: its metadata names each stage (not a constant rank:ndcg), and
    mlflow.xgboost gives back a model that predicts the same margins and the same final NDCG."""
    import mlflow.xgboost

    from pipelines.tracking.runs import Tracker

    s = _settings(NdcgSpec(gain="linear"), k=5)
    res, _ = train_plan(
        local_data, build_plan([parse_path("mse:4,lambdamart:6", "m"), parse_path("xgb_lambdamart:3,mse:2", "r")]), s
    )
    b = xgb.Booster(model_file=bytearray(res["m"].model))
    attrs = b.attributes()
    assert json.loads(attrs["ltr_stages"]) == [
        {"objective": "mse", "data": "all", "first_tree": 0, "trees": 4},
        {"objective": "lambdamart", "data": "all", "first_tree": 4, "trees": 6},
    ]
    assert (attrs["ltr_path"], attrs["ltr_k"], attrs["ltr_gain"]) == ("m", "5", "linear")
    obj = json.loads(b.save_config())["learner"]["objective"]
    assert obj["name"] == "rank:ndcg"
    assert obj["lambdarank_param"]["lambdarank_num_pair_per_sample"] == "5"
    assert obj["lambdarank_param"]["ndcg_exp_gain"] == "0"
    r = xgb.Booster(model_file=bytearray(res["r"].model))
    assert json.loads(r.save_config())["learner"]["objective"]["name"] == "reg:squarederror"
    assert [st["objective"] for st in json.loads(r.attributes()["ltr_stages"])] == ["xgb_lambdamart", "mse"]

    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", "roundtrip", str(tmp_path / "art"))
    run = tracker.client.create_run(tracker.experiment_id).info.run_id
    tracker.log_model(run, res["m"].model)
    loaded = mlflow.xgboost.load_model(f"runs:/{run}/model")
    te = local_data.test
    got = loaded.predict(xgb.DMatrix(te.X), output_margin=True)
    np.testing.assert_array_equal(got, _predict(res["m"].model, te.X))
    assert loaded.attributes()["ltr_stages"] == attrs["ltr_stages"]
    assert abs(ndcg(te.offsets, te.y, got, NdcgSpec(k=10, gain="linear")).mean() - res["m"].test[-1]) < 1e-6


def test_cuda_device_without_a_gpu_is_refused_in_one_line(local_data, monkeypatch):
    """XGBoost only warns and trains on the CPU when no GPU is visible; we refuse instead."""
    import shutil
    import subprocess

    import pipelines.kernel.env as wl

    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi"], capture_output=True).returncode == 0:
        pytest.skip("a GPU is visible here")
    if wl.xgb.build_info().get("USE_CUDA"):
        with pytest.raises(ValueError, match=r"train.device=cuda: no visible GPU on .*fall back to the CPU"):
            wl.check_device("cuda")
    monkeypatch.setattr(wl.xgb, "build_info", lambda: {"USE_CUDA": False})  # what xgboost-cpu reports
    with pytest.raises(ValueError, match=r"has no CUDA support \(is it xgboost-cpu\?\)"):
        wl.check_device("cuda", probe=False)
    wl.check_device("cpu")


_ALLOCATOR_PROBE = r"""
import json, os, resource, sys
import numpy as np
from pipelines.kernel.env import returning_freed_memory

MB = 1 << 20
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(4 * MB // 8); del a  # a process that has run a while: glibc's adaptive threshold has risen
with returning_freed_memory() as glibc:
    bufs = [np.ones(2 * MB // 8) for _ in range(64)]  # 128 MiB in batch-sized buffers, then joined
    before = rss()
    del bufs[:-1]  # all but the newest: the heap could not give them back by shrinking its top
    freed = before - rss()
a = np.ones(3 * MB // 8); del a  # the loop's first tree: the heap grows once
f0 = faults()
for _ in range(40):  # the next trees: the same 3 MiB buffer, allocated and freed every tree
    a = np.ones(3 * MB // 8); del a
print(json.dumps({"glibc": glibc, "freed_mib": freed / MB, "faults_per_buffer": (faults() - f0) / 40}))
"""


def test_the_allocator_returns_a_builds_memory_and_reuses_the_loops():
    """Inside ``returning_freed_memory`` freed batch buffers leave the process; after it, a buffer the
    boosting loop frees and allocates again every tree is reused, not mapped and faulted in afresh."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _ALLOCATOR_PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    got = json.loads(out.stdout)
    if not got["glibc"]:
        pytest.skip("not glibc: the allocator is left as it is")
    assert got["freed_mib"] > 100, got  # 126 MiB freed; glibc's own thresholds keep them in the heap
    assert got["faults_per_buffer"] < 16, got  # a fresh 3 MiB mapping faults in 768 pages


def test_a_checkpoint_changed_on_disk_is_trained_again_not_served(spark, small_dataset, tmp_path, caplog):
    """A finished ``ltr train mse:2,lambdamart:4`` (checkpoints every 2 trees), then, each time, a file of its
    checkpoints changed on disk and the same command again: it sets the checkpoint aside in one warning naming the
    file, trains only what was lost from the newest intact checkpoint, and writes the model it trained the first
    time, byte for byte. (a) one character of the last tree segment (a split value, still valid JSON); (b) a byte of
    the last shard's margins; (c) a byte of the first node's last shard, which the second node's workers read when
    it starts again (its checkpoints removed): their job fails, is started again, and the first node trains again."""
    import logging
    import shutil

    from pipelines.app.train import run_train
    from pipelines.core.config import load_config
    from tests.helpers import tiny_study

    path = "mse:2,lambdamart:4"
    cfg = load_config(None, [*tiny_study("train.checkpoint_every=2", sections=["train"]), f"work_dir={tmp_path}"])
    ckpt = tmp_path / "checkpoints"
    model = tmp_path / "first" / "model.json"

    def train(out: str) -> int:
        caplog.clear()
        with caplog.at_level(logging.WARNING, "pipelines.store.checkpoints"):
            r = run_train(spark, small_dataset, 1, path, [], cfg.train, cfg.metric, str(tmp_path / out), str(ckpt))
        assert (tmp_path / out / "model.json").read_bytes() == model.read_bytes()
        return int(r["training"]["trees"])

    def set_aside(name: str) -> None:
        lines = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
        assert len(lines) == 1 and name in lines[0], lines

    def flip(shard: Path) -> None:
        data = bytearray(shard.read_bytes())
        at = data.index(b"train_margin.npy") + 200  # inside the margins' bytes (stored, not compressed)
        data[at] ^= 0x10
        shard.write_bytes(bytes(data))

    run_train(spark, small_dataset, 1, path, [], cfg.train, cfg.metric, str(model.parent), str(ckpt))
    (second,) = {p.parent for p in ckpt.glob("*/trees-000004-000006.json")}
    (first,) = {p.parent for p in ckpt.glob("*/trees-000000-000002.json")}

    seg = second / "trees-000004-000006.json"
    text = seg.read_text()
    value = re.search(r'"split_conditions":\[([-0-9.E+]+)', text).group(1)
    seg.write_text(text.replace(f'"split_conditions":[{value}', f'"split_conditions":[{float(value) + 1.0!r}', 1))
    assert train("a") == 2  # trees 4..6, from the intact checkpoint at tree 4
    set_aside("trees-000004-000006.json")
    assert seg.read_text() == text  # trained again: the same bytes

    flip(second / "t000006" / "shard-00000.npz")
    assert train("b") == 2
    set_aside("shard-00000.npz")

    shutil.rmtree(second)
    flip(first / "t000002" / "shard-00000.npz")
    assert train("c") == 6  # the first node's 2 trees again, then the second's 4
    set_aside("shard-00000.npz")
