"""A smooth continuation: ``(1-γ)·mse + γ·lambdamart``, ``γ`` from a schedule over the global tree index (step,
linear, sigmoid); a step at ``t`` is MSE-t."""

from __future__ import annotations

import numpy as np

from udfs.objectives.lambdamart import lambdarank_grad
from udfs.objectives.mse import mse_grad
from udfs.objectives.pairwise import pair_inverse_idcg
from udfs.objectives.registry import Factory, objective
from udfs.objectives.settings import ObjectiveSettings


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
def make_blend(s: ObjectiveSettings, y: np.ndarray, offsets: np.ndarray, qid: np.ndarray, doc: np.ndarray) -> Factory:
    """``f(margins, tree)`` of the blend at the schedule's γ for each tree."""
    inv = pair_inverse_idcg(y, offsets, s.k, s.exp_gain)

    def blended(m: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(grad, hess) of blend at margins ``m`` for global tree ``t``: γ from the blend schedule.

        Only the gradients the weights need are computed (no MSE at γ = 1, no LambdaMART at γ = 0).
        """
        g = s.blend.gamma(t)
        a = mse_grad(m, y) if g < 1.0 else None
        r = lambdarank_grad(m, y, offsets, k=s.k, exp_gain=s.exp_gain, inv_idcg=inv) if g > 0.0 else None
        return blend(g, a, r)  # type: ignore[arg-type]

    return blended
