"""Per-query test NDCG after every curve point, replayed from the children's logged models.

The children log per-query test NDCG after their last tree only (``per_query_test.json``) and the mean
after every curve point (the NDCG curve). "As good as LambdaMART with fewer trees" needs more: each
query's NDCG after n trees, so that the difference at n trees gets an interval over queries
(:func:`pipelines.report.inference.noninferiority`). Logging it during training would change the
training code, and with it every study's key (a finished study would train again), so the report
replays it instead: each child's logged model (``grid.log_models``, on by default) added tree by tree
over its fold's test rows (:func:`replay`: XGBoost's own traversal, the leaf values summed in float32 in
the workers' order), starting from the run's base margin, with the run's own NDCG conventions
(:func:`udfs.metrics.ndcg_fast`, the workers' evaluator).

A replay proves itself: its last point must give back every query's logged final NDCG and its mean
every point of the logged curve (:data:`AGREE`); a run that does not is an error naming it, never a
silent curve. The test rows are read from the ingested dataset with pyarrow (no Spark), in the order
the workers hold them: (qid, doc).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipelines.report.records import Record, ReportError
from pipelines.tracking.runs import Tracker, quiet_artifacts
from udfs import schema
from udfs.metrics import NdcgSpec, inverse_idcg, ndcg_fast, offsets_from_qids

log = logging.getLogger(__name__)

#: Largest disagreement allowed between a replay and what the run logged: its final per-query NDCG (the
#: same float32 margins and kernel: equal in practice) and its curve's means (a sum over queries in
#: another order: a few ulps).
AGREE = 1e-9
#: Curve points replayed at most per run (evenly spaced, the last one always): bounds the bootstrap of
#: :func:`pipelines.report.inference.noninferiority` at paper scale (1000 trees).
MAX_POINTS = 200


@dataclass(frozen=True)
class Curves:
    """One system's per-query test NDCG after each of ``steps`` trees, folds pooled.

    ``values[i, j]``: query ``keys[i]`` = (fold, qid) after ``steps[j]`` trees, seed repetitions averaged
    as the tables average them (:func:`pipelines.report.seeds.average_seeds`)."""

    keys: list[tuple[int, int]]
    steps: list[int]
    values: np.ndarray

    def rows(self, keys: Sequence[tuple[int, int]]) -> np.ndarray:
        """The rows of ``keys`` (each must be one of :attr:`keys`), in that order."""
        index = {k: i for i, k in enumerate(self.keys)}
        return self.values[[index[k] for k in keys]]


@dataclass
class EvalSplit:
    """A fold's test rows as the workers hold them: sorted by (qid, doc)."""

    qid: np.ndarray  #: int64 per row
    label: np.ndarray  #: float32 per row
    X: np.ndarray  #: float32 rows x features
    offsets: np.ndarray  #: query boundaries (:func:`udfs.metrics.offsets_from_qids`)
    _dmatrix: Any = None

    def dmatrix(self) -> Any:
        """The rows as an ``xgboost.DMatrix``, built once for every model replayed on this fold (building it
        was a fifth of the replay's time when each model built its own)."""
        if self._dmatrix is None:
            import xgboost as xgb

            self._dmatrix = xgb.DMatrix(self.X)
        return self._dmatrix

    @property
    def queries(self) -> np.ndarray:
        """The query id of each query, in offsets' order."""
        return self.qid[self.offsets[:-1]]


def load_test_split(dataset: str, fold: int) -> EvalSplit:
    """Fold ``fold``'s test rows of the ingested ``dataset`` (pyarrow, the features as float32)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    from pipelines.data.dataset import DatasetError, open_dataset

    try:
        ds = open_dataset(dataset)
        subsets = ds.subsets(fold, "test")
    except (DatasetError, OSError) as e:
        raise ReportError(f"cannot read fold {fold}'s test split of {dataset}: {e}") from e
    feats = schema.feature_cols(ds.n_features)
    table = (
        pads.dataset(ds.path, format="parquet", partitioning="hive")
        .to_table(
            columns=[schema.QID, schema.DOC, schema.LABEL, *feats],
            filter=pc.field(schema.SUBSET).isin(subsets),
        )
        .sort_by([(schema.QID, "ascending"), (schema.DOC, "ascending")])
    )
    qid = table.column(schema.QID).to_numpy().astype(np.int64)
    X = np.empty((table.num_rows, len(feats)), np.float32)
    for j, c in enumerate(feats):
        X[:, j] = table.column(c).to_numpy(zero_copy_only=False)
    label = table.column(schema.LABEL).to_numpy().astype(np.float32)
    return EvalSplit(qid, label, X, offsets_from_qids(qid))


def leaf_values(model_json: bytes) -> list[np.ndarray]:
    """Each tree's node values of an XGBoost JSON model (float32; a leaf's ``split_conditions`` entry is its
    value), indexed by the node ids ``predict(pred_leaf=True)`` gives."""
    doc = json.loads(model_json)
    return [np.asarray(t["split_conditions"], np.float32) for t in doc["learner"]["gradient_booster"]["model"]["trees"]]


#: Trees whose leaves one ``predict(pred_leaf=True)`` call returns (rows x trees int32: 964 MB for a paper-scale
#: test fold at 1000 trees, 96 MB per 100).
LEAF_CHUNK = 100


def replay(model_json: bytes, base_margin: float, split: EvalSplit, spec: NdcgSpec, steps: Sequence[int]) -> np.ndarray:
    """Per-query NDCG (queries x steps) after each of ``steps`` trees.

    The margins start at the run's ``base_margin`` (float32, as the workers start them) and each tree adds its
    leaf's value in float32, tree after tree: the workers' sum, in their order, so the same bits. Which leaf
    a row reaches is XGBoost's own traversal (``predict(pred_leaf=True)``, multi-threaded, on a slice of
    :data:`LEAF_CHUNK` trees at a time): a tree walk over row-major float32 rows is cache-bound, XGBoost's
    blocked predictor much faster."""
    import xgboost as xgb

    values = leaf_values(model_json)
    if steps and steps[-1] > len(values):
        raise ReportError(f"the model has {len(values)} trees, the curve asks for {steps[-1]}")
    booster = xgb.Booster(model_file=bytearray(model_json))
    n = split.qid.size
    margins = np.full(n, np.float32(base_margin), np.float32)
    inv = inverse_idcg(split.offsets, split.label, spec)
    out = np.empty((split.offsets.size - 1, len(steps)))
    want = {s: j for j, s in enumerate(steps)}
    if 0 in want:
        out[:, want[0]] = ndcg_fast(split.offsets, split.label, margins, spec, inv)
    last = steps[-1] if steps else 0
    dm = split.dmatrix() if last else None
    for a in range(0, last, LEAF_CHUNK):
        b = min(a + LEAF_CHUNK, last)
        # a slice of the model, not iteration_range: XGBoost's leaf prediction takes ranges from tree 0 only
        leaves = booster[a:b].predict(dm, pred_leaf=True).reshape(n, b - a).astype(np.int32)
        for t in range(a, b):
            margins += values[t][leaves[:, t - a]]
            j = want.get(t + 1)
            if j is not None:
                out[:, j] = ndcg_fast(split.offsets, split.label, margins, spec, inv)
    return out


def points(steps: Sequence[int], most: int = MAX_POINTS) -> list[int]:
    """At most ``most`` of a curve's ``steps``, evenly spaced, the last one always kept."""
    steps = list(steps)
    if len(steps) <= most:
        return steps
    pick = np.unique(np.round(np.linspace(0, len(steps) - 1, most)).astype(int))
    return [steps[i] for i in pick]


def spec_of(rec: Record) -> NdcgSpec:
    """The NDCG conventions a child logged (its ``metric.*`` params)."""
    c = rec.conventions
    try:
        return NdcgSpec(k=int(c["k"]), gain=c["gain"], empty=float(c["empty"]), ties=c["ties"])
    except (KeyError, ValueError) as e:
        raise ReportError(f"{rec.label} fold {rec.fold} (run {rec.run_id}): no usable metric.* params ({e})") from e


def logged_models(tracker: Tracker) -> dict[str, str]:
    """Run id -> the artifact location of its latest logged model, for every logged model of the experiment
    (one search, not ``mlflow.xgboost.load_model`` per run, most of whose time went to resolving the model:
    benchmarks/RESULTS.md, "The report's evidence")."""
    out: dict[str, tuple[int, str]] = {}
    token = None
    while True:
        page = tracker.client.search_logged_models(
            experiment_ids=[tracker.experiment_id], max_results=1000, page_token=token
        )
        for m in page:
            if m.source_run_id and (m.source_run_id not in out or m.creation_timestamp > out[m.source_run_id][0]):
                out[m.source_run_id] = (m.creation_timestamp, m.artifact_location)
        token = page.token
        if not token:
            return {k: v[1] for k, v in out.items()}


def _run_model(run: Record, models: dict[str, str]) -> tuple[bytes, float] | None:
    """A child's logged model as JSON (``mlflow.xgboost``'s ``model.json``) and its base margin (read with the
    run's ``training.json`` by :func:`pipelines.report.loading.load_grid`); None: no model logged."""
    import tempfile

    import mlflow

    where = models.get(run.run_id)
    if where is None:
        return None
    with tempfile.TemporaryDirectory() as d, quiet_artifacts():
        path = mlflow.artifacts.download_artifacts(artifact_uri=f"{where}/model.json", dst_path=d)
        with open(path, "rb") as f:
            model = f.read()
    return model, run.base_margin


def per_query_curves(
    tracker: Tracker, records: list[Record], dataset: str | None, seed_runs: dict[str, list[Record]]
) -> tuple[dict[tuple[str, int | None], Curves], str | None]:
    """Every system's :class:`Curves` over its folds, from the children's logged models; and why none
    were built (None when they were).

    ``records``: the seed-averaged records of the tables; ``seed_runs``: run id of an averaged record ->
    its seed repetitions (a record of one run maps to itself). Each curve covers the points of
    :func:`points` of the record's curve, on the queries with a relevant document (those every paired
    figure uses). A run whose replay disagrees with what it logged is a ReportError."""
    if not dataset:
        return {}, "the grid's parent run records no dataset (its data param)"
    t0 = time.perf_counter()
    splits: dict[int, EvalSplit] = {}
    models_at = logged_models(tracker)
    out: dict[tuple[str, int | None], list[tuple[int, list[int], np.ndarray, list[int]]]] = {}
    for rec in sorted(records, key=lambda r: (r.strategy, r.switch or 0, r.fold)):
        runs = seed_runs.get(rec.run_id, [rec])
        models = [_run_model(r, models_at) for r in runs]
        if any(m is None for m in models):
            return {}, (
                f"{rec.label} fold {rec.fold} logged no model (grid.log_models: false?); the per-query curves "
                "are replayed from the children's models"
            )
        if rec.fold not in splits:
            splits[rec.fold] = load_test_split(dataset, rec.fold)
        split = splits[rec.fold]
        steps = points(rec.steps)
        spec = spec_of(rec)
        values = np.mean([replay(m[0], m[1], split, spec, steps) for m in models if m is not None], axis=0)
        _check(rec, split, steps, values)
        rel = [q for q, n in (rec.relevant or {}).items() if n > 0]
        out.setdefault((rec.strategy, rec.switch), []).append((rec.fold, steps, values, rel))
    curves = {}
    for key, parts in out.items():
        steps = parts[0][1]
        if any(p[1] != steps for p in parts):
            raise ReportError(f"{parts[0][2]}: the folds' curves have different points; cannot pool them")
        keys, rows = [], []
        for fold, _, values, rel in parts:
            q = splits[fold].queries
            pos = {int(x): i for i, x in enumerate(q)}
            for qid in sorted(rel):
                keys.append((fold, int(qid)))
                rows.append(values[pos[qid]])
        curves[key] = Curves(keys, steps, np.asarray(rows).reshape(len(rows), len(steps)))
    log.info(
        "per-query curves replayed from %d models over %d folds in %.1f s",
        sum(len(seed_runs.get(r.run_id, [r])) for r in records),
        len(splits),
        time.perf_counter() - t0,
    )
    return curves, None


def _check(rec: Record, split: EvalSplit, steps: list[int], values: np.ndarray) -> None:
    """The replay of ``rec`` gives back what it logged: each query's final NDCG and the curve's means."""
    q = split.queries
    if set(int(x) for x in q) != set(rec.per_query):
        raise ReportError(
            f"{rec.label} fold {rec.fold} (run {rec.run_id}): the dataset's test queries are not the ones the run "
            "was evaluated on; was the dataset ingested again since?"
        )
    logged = np.array([rec.per_query[int(x)] for x in q])
    worst = float(np.max(np.abs(values[:, -1] - logged))) if q.size else 0.0
    curve = dict(zip(rec.steps, rec.test, strict=True))
    worst_mean = max((abs(float(values[:, j].mean()) - curve[s]) for j, s in enumerate(steps)), default=0.0)
    if worst > AGREE or worst_mean > AGREE or steps[-1] != rec.steps[-1]:
        raise ReportError(
            f"{rec.label} fold {rec.fold} (run {rec.run_id}): replaying its model does not give back what it "
            f"logged (largest difference: {worst:.3g} per query at its last tree, {worst_mean:.3g} on the curve's "
            "means); was its model logged by another run?"
        )


def seed_runs_of(runs: list[Record], records: list[Record]) -> dict[str, list[Record]]:
    """Run id of each table record -> the runs averaged into it (:func:`pipelines.report.seeds.average_seeds`
    joins their ids with commas)."""
    by_id = {r.run_id: r for r in runs}
    return {rec.run_id: [by_id[i] for i in rec.run_id.split(",")] for rec in records}
