"""A smooth continuation: ``(1-γ)·mse + γ·lambdamart``, ``γ`` from a schedule over the global tree index (step,
linear, sigmoid); a step at ``t`` is MSE-t."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from udfs.objectives.lambdamart import lambdarank_grad
from udfs.objectives.mse import mse_grad
from udfs.objectives.pairwise import node_inverse_idcg
from udfs.objectives.registry import objective

SCHEDULES = ("step", "linear", "sigmoid")


@dataclass(frozen=True)
class BlendSchedule:
    """γ(tree) for :func:`blend`: 0 = pure MSE, 1 = pure LambdaMART.

    * ``step``: 0 before tree ``at``, 1 from it on (= MSE-``at``);
    * ``linear``: 0 up to ``at - width/2``, 1 from ``at + width/2``, linear between;
    * ``sigmoid``: ``1 / (1 + exp(-(tree - at) / (width / 8)))`` (so γ goes from
      about 0.02 to 0.98 over ``width`` trees).
    """

    kind: str
    at: int
    width: int

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown blend schedule {self.kind!r}; expected one of {', '.join(SCHEDULES)}")
        if self.at < 0:
            raise ValueError(f"blend schedule at must be >= 0 (a global tree index), got {self.at}")
        if self.kind != "step" and self.width <= 0:
            raise ValueError(f"blend schedule width must be > 0, got {self.width}")

    def gamma(self, tree: int) -> float:
        """γ for the tree with global (0-based) index ``tree``."""
        if self.kind == "step":
            return 0.0 if tree < self.at else 1.0
        if self.kind == "linear":
            lo = self.at - self.width / 2
            return float(min(1.0, max(0.0, (tree - lo) / self.width)))
        return float(1.0 / (1.0 + math.exp(-(tree - self.at) / (self.width / 8.0))))

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> BlendSchedule:
        """The schedule of the ``blend`` objective's settings (``schedule``, ``at``, ``width``)."""
        return cls(params["schedule"], params["at"], params["width"])


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


@objective(
    "blend",
    regression=True,
    params={"schedule": "linear", "at": 40, "width": 40},
    check=BlendSchedule.of,
)
def blend_objective(
    margins: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, tree: int, params: Mapping[str, Any], cache: dict
) -> tuple[np.ndarray, np.ndarray]:
    """Smooth continuation: ``(1 - γ) MSE + γ LambdaMART``, γ rising with the global tree ``tree`` along the
    schedule of its settings: ``schedule`` (step, linear, sigmoid) centred at tree ``at`` over ``width`` trees.

    Only the gradients the weights need are computed (no MSE at γ = 1, no LambdaMART at γ = 0).
    """
    k, gain = params["k"], params["exp_gain"]
    g = BlendSchedule.of(params).gamma(tree)
    a = mse_grad(margins, labels) if g < 1.0 else None
    r = (
        lambdarank_grad(
            margins, labels, offsets, k=k, exp_gain=gain, inv_idcg=node_inverse_idcg(labels, offsets, params, cache)
        )
        if g > 0.0
        else None
    )
    return blend(g, a, r)  # type: ignore[arg-type]
