"""A smooth continuation: ``(1-γ)·mse + γ·lambdamart``, ``γ`` from a schedule over the global tree index (step,
linear, sigmoid); a step at ``t`` is MSE-t."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from udfs.objectives.lambdamart import lambdarank_grad
from udfs.objectives.mse import mse_grad
from udfs.objectives.pairwise import node_inverse_idcg
from udfs.objectives.registry import objective


def blend(
    gamma: float, mse: tuple[np.ndarray, np.ndarray], rank: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """``(1-γ)·mse + γ·rank`` for gradient and hessian; exactly one of them at γ = 0 or 1."""
    if gamma <= 0.0:
        return mse
    if gamma >= 1.0:
        return rank
    g = ((1.0 - gamma) * mse[0] + gamma * rank[0]).astype(np.float32)
    h = ((1.0 - gamma) * mse[1] + gamma * rank[1]).astype(np.float32)
    return g, h


@objective("blend", regression=True)
def blend_objective(
    margins: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, tree: int, params: Mapping[str, Any], cache: dict
) -> tuple[np.ndarray, np.ndarray]:
    """Smooth continuation: ``(1 - γ) MSE + γ LambdaMART``, γ rising with the global tree ``tree`` along
    ``train.blend_schedule`` (step, linear, sigmoid; ``blend_at``, ``blend_width``).

    Only the gradients the weights need are computed (no MSE at γ = 1, no LambdaMART at γ = 0).
    """
    k, gain = params["k"], params["exp_gain"]
    g = params["blend"].gamma(tree)
    a = mse_grad(margins, labels) if g < 1.0 else None
    r = (
        lambdarank_grad(
            margins, labels, offsets, k=k, exp_gain=gain, inv_idcg=node_inverse_idcg(labels, offsets, params, cache)
        )
        if g > 0.0
        else None
    )
    return blend(g, a, r)  # type: ignore[arg-type]
