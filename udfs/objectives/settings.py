"""What the Python objectives take besides a node's rows (built by the tree loop from the model settings)."""

from __future__ import annotations

from dataclasses import dataclass

from udfs.conventions import BlendSchedule


@dataclass(frozen=True)
class ObjectiveSettings:
    """What the Python objectives need besides a node's rows (from the training config)."""

    k: int = 10
    eta: float = 0.05  # the learning rate (StochasticRank's SGLB: its shrinkage and its noise scale with it)
    exp_gain: bool = True
    seed: int = 0
    sigmoid_gamma: float = 1.0
    stochastic_noise: float = 1.0
    stochastic_anneal: int = 100  # global tree at which the noise of noisy_lambdamart has annealed to 0
    blend: BlendSchedule = BlendSchedule("linear", 200, 100)
