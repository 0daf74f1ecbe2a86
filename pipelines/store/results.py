"""A finished path's results and model, assembled on the driver from its nodes' checkpoints.

:func:`path_result` reads the curve points, score distributions, stages and per-query test NDCG
that :mod:`pipelines.kernel.loop` committed for each node of a path; :func:`concat_models` joins the
nodes' segments into one XGBoost JSON model that says what was trained.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.store.checkpoints import CheckpointStore
from udfs.objectives import registry


# ------------------------------------------------------------ results
@dataclass
class PathResult:
    """A finished path, assembled on the driver from its nodes' checkpoints (:func:`path_result`)."""

    name: str
    model: bytes = b""
    trees: list[int] = field(default_factory=list)
    vali: list[float] = field(default_factory=list)
    test: list[float] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    score_dists: list[dict[str, Any]] = field(default_factory=list)
    base_margin: float = 0.0
    test_qid: list[int] = field(default_factory=list)
    test_ndcg: list[float] = field(default_factory=list)
    test_relevant: list[int] = field(default_factory=list)  # relevant documents (label > 0) of each test query
    workers: list[int] = field(default_factory=list)  # workers that wrote each node's output, chain order
    #: the final model's score of every test document: arrays ``qid``, ``doc`` (position in the query),
    #: ``label`` and ``score`` (the float32 margin the metric ranked), in (qid, doc) order; None: not saved
    test_scores: dict[str, np.ndarray] | None = None


def path_result(store: CheckpointStore, name: str, chain: Iterable[str], with_model: bool = True) -> PathResult:
    """Curves, stages, model and per-query test NDCG of a path whose nodes (``chain``) are all done."""
    metas = []
    for key in chain:
        k = store.latest(key)
        meta = store.meta(key, k) if k is not None else None
        if meta is None or not meta.get("done"):
            raise RuntimeError(f"path {name}: node {key} is not finished")
        metas.append(meta)
    r = PathResult(name=name, base_margin=float(metas[0]["base"]), workers=[int(m["shards"]) for m in metas])
    parts = []
    for meta in metas:
        node = meta["node"]
        for point in meta["curve"]:
            r.trees.append(int(point[0]))
            r.vali.append(float(point[1]))
            r.test.append(float(point[2]))
        r.score_dists += meta["dists"]
        last = r.runs[-1] if r.runs else None
        if last and (last["objective"], last["data"]) == (node["objective"], node["data"]):
            last["trees"] += node["t1"] - node["t0"]  # one stage cut into nodes
        else:
            r.runs.append(
                {
                    "objective": node["objective"],
                    "data": node["data"],
                    "first_tree": node["t0"],
                    "rows": meta["rows"],
                    "builtin": registry.get(node["objective"]).builtin is not None,
                    "trees": node["t1"] - node["t0"],
                }
            )
        if with_model:
            parts += store.segments(node["key"], meta)
    if with_model:
        r.model = concat_models(parts, r.base_margin, r.runs, metas[-1].get("conventions", {}), name)
    last = metas[-1]
    shards = store.shards(last["node"]["key"], int(last["tree"]))
    if shards and "test_query" in shards[0]:
        q = np.concatenate([s["test_query"] for s in shards])
        v = np.concatenate([s["test_ndcg"] for s in shards])
        order = np.argsort(q, kind="stable")
        r.test_qid, r.test_ndcg = q[order].astype(int).tolist(), v[order].astype(float).tolist()
        if "test_relevant" in shards[0]:
            n = np.concatenate([s["test_relevant"] for s in shards])
            r.test_relevant = n[order].astype(int).tolist()
    if shards and "test_doc" in shards[0]:
        cols = {
            name: np.concatenate([s[f"test_{src}"] for s in shards])
            for name, src in (("qid", "qid"), ("doc", "doc"), ("label", "label"), ("score", "margin"))
        }
        order = np.lexsort((cols["doc"], cols["qid"]))
        r.test_scores = {k: v[order] for k, v in cols.items()}
    return r


def scores_npz(scores: dict[str, np.ndarray]) -> bytes:
    """``test_scores.npz``'s bytes: :attr:`PathResult.test_scores` as a compressed NumPy archive."""
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        qid=np.asarray(scores["qid"], np.int64),
        doc=np.asarray(scores["doc"], np.int32),
        label=np.asarray(scores["label"], np.int8),
        score=np.asarray(scores["score"], np.float32),
    )
    return buf.getvalue()


# ------------------------------------------------------------ models
def concat_models(
    parts: list[tuple[bytes, int]],
    base_margin: float,
    stages: list[dict[str, Any]] | None = None,
    conventions: dict[str, Any] | None = None,
    name: str = "",
) -> bytes:
    """One XGBoost JSON model from the first ``n`` trees of each part, in order.

    Every part was trained on margins that already include the earlier parts,
    so the sum of all trees plus ``base_margin`` (stored as the model's
    base_score) is the path's prediction.

    What was trained is recorded in the model itself, in XGBoost's string
    attributes (``Booster.attributes()``, kept by ``mlflow.xgboost``):
    ``ltr_path`` (the path's name), ``ltr_stages`` (JSON: objective, data,
    first tree and trees of each stage), ``ltr_k`` and ``ltr_gain`` (the NDCG
    cutoff and gain of the ranking objectives). The model's XGBoost objective
    is the last stage's: its built-in name, ``reg:squarederror`` for ``mse``,
    and for a Python ranking objective ``rank:ndcg`` with the same k and gain,
    the closest built-in (``blend`` ends as LambdaMART; it only matters to whoever continues training the
    model with XGBoost; predictions are margins either way).
    """
    stages = stages or []
    conventions = conventions or {}
    k, gain = int(conventions.get("k", 10)), str(conventions.get("gain", "exp2"))
    docs = [json.loads(m) for m, _ in parts]
    out = docs[-1]
    trees = []
    for doc, (_, n) in zip(docs, parts, strict=True):
        trees += doc["learner"]["gradient_booster"]["model"]["trees"][:n]
    for i, t in enumerate(trees):
        t["id"] = i
    gb = out["learner"]["gradient_booster"]["model"]
    gb["trees"] = trees
    gb["tree_info"] = [0] * len(trees)
    gb["iteration_indptr"] = list(range(len(trees) + 1))
    gb["gbtree_model_param"]["num_trees"] = str(len(trees))
    lmp = out["learner"]["learner_model_param"]
    lmp["base_score"] = f"[{float(np.float32(base_margin)):.9E}]"
    lmp["boost_from_average"] = "0"
    last = stages[-1]["objective"] if stages else "lambdamart"
    spec = registry.objectives().get(last)
    builtin = (spec.builtin if spec is not None else None) or ("reg:squarederror" if last == "mse" else "rank:ndcg")
    if builtin.startswith("rank:"):
        out["learner"]["objective"] = {
            "name": builtin,
            "lambdarank_param": {
                "lambdarank_bias_norm": "1",
                "lambdarank_normalization": "1",
                "lambdarank_num_pair_per_sample": str(k),
                "lambdarank_pair_method": "topk",
                "lambdarank_score_normalization": "1",
                "lambdarank_unbiased": "0",
                "ndcg_exp_gain": "1" if gain == "exp2" else "0",
            },
        }
    else:
        out["learner"]["objective"] = {"name": builtin, "reg_loss_param": {"scale_pos_weight": "1"}}
    out["learner"]["attributes"] = {
        "ltr_path": name,
        "ltr_k": str(k),
        "ltr_gain": gain,
        "ltr_stages": json.dumps(
            [{key: s[key] for key in ("objective", "data", "first_tree", "trees")} for s in stages]
        ),
    }
    return json.dumps(out).encode()


def selections(store: CheckpointStore, plan: Any, chain: Iterable[str]) -> dict[str, list[list[float]]]:
    """The choices of each self-paced node of ``chain`` (:mod:`pipelines.kernel.selfpaced`), from its last
    checkpoint: node (``objective@rule.span t0..t1``) -> ``[tree, share, queries kept, queries chosen among]`` per
    selection."""
    from pipelines.kernel.selfpaced import is_dynamic

    out = {}
    for key in chain:
        node = plan.node(key)
        if is_dynamic(node.data):
            out[node.describe()] = store.meta(key, node.t1).get("selections", [])
    return out
