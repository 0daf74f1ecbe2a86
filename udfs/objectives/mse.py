"""Squared error on the labels: what ``reg:squarederror`` computes, so it grows the same trees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from udfs.objectives.registry import objective


def mse_grad(margins: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Squared error ``(s - y)^2 / 2``: ``g = s - y``, ``h = 1`` (float32, like reg:squarederror)."""
    s = np.asarray(margins, dtype=np.float32)
    g = s - np.asarray(labels, dtype=np.float32)
    return g, np.ones_like(g)


@objective("mse", regression=True)
def mse(
    margins: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, tree: int, params: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """Squared error on the node's labels."""
    return mse_grad(margins, labels)
