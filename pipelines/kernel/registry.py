"""The kinds of component the kernel knows, and what the rest of the system needs to know of each.

Objectives: the name a training path uses -> XGBoost's built-in objective (None: ours, in Python:
:func:`udfs.objectives.objective`); which start from the mean label (regression); which draw noise from a seed.
"""

from __future__ import annotations

#: Objective name -> XGBoost objective for the built-in fast path, or None (Python).
OBJECTIVES: dict[str, str | None] = {
    "mse": None,
    "lambdamart": None,
    "ranknet": None,
    "sigmoid_pairwise": None,
    "stochastic_ndcg": None,
    "blend": None,
    "xgb_mse": "reg:squarederror",
    "xgb_lambdamart": "rank:ndcg",
    "xgb_ranknet": "rank:pairwise",
}
#: Objectives whose natural starting score is the mean label.
REGRESSION = {"mse", "xgb_mse", "blend"}
#: Objectives whose trees depend on a seed (the noise of stochastic_ndcg): ``grid.seeds`` repeats their paths.
SEEDED = {"stochastic_ndcg"}
