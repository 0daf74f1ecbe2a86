"""LambdaMART (|ΔNDCG@k| pair weights) and RankNet (weight 1) on the top-k pairs, after XGBoost's ``rank:ndcg``
and ``rank:pairwise``."""

from __future__ import annotations

import numpy as np

from udfs.objectives.pairwise import _run_pairwise, pair_inverse_idcg
from udfs.objectives.registry import Factory, objective
from udfs.objectives.settings import ObjectiveSettings


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
def make_lambdamart(
    s: ObjectiveSettings, y: np.ndarray, offsets: np.ndarray, qid: np.ndarray, doc: np.ndarray
) -> Factory:
    """``f(margins, tree)`` of LambdaMART NDCG@k on one node's rows."""
    inv = pair_inverse_idcg(y, offsets, s.k, s.exp_gain)  # labels are fixed: once per node
    return lambda m, t: lambdarank_grad(m, y, offsets, k=s.k, exp_gain=s.exp_gain, inv_idcg=inv)


@objective("ranknet")
def make_ranknet(s: ObjectiveSettings, y: np.ndarray, offsets: np.ndarray, qid: np.ndarray, doc: np.ndarray) -> Factory:
    """``f(margins, tree)`` of RankNet's pairwise logistic loss on the same pairs."""
    inv = pair_inverse_idcg(y, offsets, s.k, s.exp_gain)
    return lambda m, t: lambdarank_grad(m, y, offsets, k=s.k, exp_gain=s.exp_gain, delta="one", inv_idcg=inv)
