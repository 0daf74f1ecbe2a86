"""Carvalho et al.'s (2008) bounded sigmoid pairwise loss, robust to outlier labels."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from udfs.objectives.pairwise import _run_pairwise
from udfs.objectives.registry import objective


def sigmoid_pairwise_grad(
    margins: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    k: int = 10,
    gamma: float = 1.0,
    ndcg_weighted: bool = False,
    normalize: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Carvalho et al.'s sigmoid pairwise loss ``σ(-γ(s_h - s_l))`` on the top-k pairs."""
    if gamma <= 0:
        raise ValueError(f"gamma (sigmoid steepness) must be > 0, got {gamma}")
    return _run_pairwise(
        margins,
        labels,
        offsets,
        margins,
        k=k,
        exp_gain=True,
        delta_mode=0 if ndcg_weighted else 1,
        score_norm=False,
        normalize=normalize,
        loss=1,
        gamma=gamma,
    )


def _check(params: Mapping[str, Any]) -> None:
    if not params["gamma"] > 0:
        raise ValueError(f"gamma (the sigmoid's steepness) must be > 0, got {params['gamma']}")


@objective("sigmoid_pairwise", params={"gamma": 1.0, "ndcg_weighted": False}, check=_check)
def sigmoid_pairwise(
    margins: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, tree: int, params: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """The sigmoid pairwise loss with steepness ``gamma``; ``ndcg_weighted``: each pair weighted by its NDCG@k
    change, as LambdaMART weighs its pairs."""
    return sigmoid_pairwise_grad(
        margins, labels, offsets, k=params["k"], gamma=params["gamma"], ndcg_weighted=params["ndcg_weighted"]
    )
