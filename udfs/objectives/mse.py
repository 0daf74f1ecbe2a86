"""Squared error on the labels: what ``reg:squarederror`` computes, so it grows the same trees."""

from __future__ import annotations

import numpy as np

from udfs.objectives.registry import Factory, objective
from udfs.objectives.settings import ObjectiveSettings


def mse_grad(margins: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Squared error ``(s - y)^2 / 2``: ``g = s - y``, ``h = 1`` (float32, like reg:squarederror)."""
    s = np.asarray(margins, dtype=np.float32)
    g = s - np.asarray(labels, dtype=np.float32)
    return g, np.ones_like(g)


@objective("mse", regression=True)
def make_mse(s: ObjectiveSettings, y: np.ndarray, offsets: np.ndarray, qid: np.ndarray, doc: np.ndarray) -> Factory:
    """``f(margins, tree)`` of squared error on one node's labels."""
    return lambda m, t: mse_grad(m, y)
