"""LambdaMART (|ΔNDCG@k| pair weights) and RankNet (weight 1) on the top-k pairs, after XGBoost's ``rank:ndcg``
and ``rank:pairwise``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from udfs.objectives.pairwise import _run_pairwise, node_inverse_idcg
from udfs.objectives.registry import objective


def lambdarank_grad(
    margins: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    k: int = 10,
    exp_gain: bool = True,
    score_norm: bool = True,
    normalize: bool = True,
    delta: str = "ndcg",
    inv_idcg: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """LambdaMART (``delta="ndcg"``) or RankNet (``delta="one"``) gradients; see the module docstring.

    ``inv_idcg``: :func:`pair_inverse_idcg`, to skip recomputing it every tree."""
    if delta not in ("ndcg", "one"):
        raise ValueError(f"delta must be 'ndcg' or 'one', got {delta!r}")
    return _run_pairwise(
        margins,
        labels,
        offsets,
        margins,
        k=k,
        exp_gain=exp_gain,
        delta_mode=0 if delta == "ndcg" else 1,
        score_norm=score_norm,
        normalize=normalize,
        inv_idcg=inv_idcg,
    )


@objective("lambdamart")
def lambdamart(
    margins: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, tree: int, params: Mapping[str, Any], cache: dict
) -> tuple[np.ndarray, np.ndarray]:
    """LambdaMART NDCG@k (``params["k"]``, gain from the metric's)."""
    inv = node_inverse_idcg(labels, offsets, params, cache)
    return lambdarank_grad(margins, labels, offsets, k=params["k"], exp_gain=params["exp_gain"], inv_idcg=inv)


@objective("ranknet")
def ranknet(
    margins: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, tree: int, params: Mapping[str, Any], cache: dict
) -> tuple[np.ndarray, np.ndarray]:
    """RankNet's pairwise logistic loss on the same pairs."""
    inv = node_inverse_idcg(labels, offsets, params, cache)
    k, gain = params["k"], params["exp_gain"]
    return lambdarank_grad(margins, labels, offsets, k=k, exp_gain=gain, delta="one", inv_idcg=inv)
