"""Seeded noise of the objectives that draw some: one standard normal per (seed, tree, query, document)."""

from __future__ import annotations

import numpy as np


def document_normal(seed: int, tree: int, qid: np.ndarray, doc: np.ndarray) -> np.ndarray:
    """One standard normal draw per (seed, tree, query, document), float64.

    A counter-based generator (SplitMix64 finaliser of the four integers, then
    Box-Muller), so a document's noise at a tree is the same whichever worker
    holds it, however the rows are split into batches or the trees into plan
    nodes, and whether the run was resumed or not.
    """

    def mix(z: np.ndarray) -> np.ndarray:
        """SplitMix64's finaliser of every uint64 in ``z`` (wrapping arithmetic): a well-mixed 64-bit hash."""
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    golden = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        h = mix(np.uint64(seed & 0xFFFFFFFF) * golden + np.uint64(tree & 0xFFFFFFFF))
        h = mix(h ^ (np.asarray(qid).astype(np.uint64) * golden))
        h = mix(h ^ (np.asarray(doc).astype(np.uint64) + golden))
        h2 = mix(h + golden)
    u1 = ((h >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53  # (0, 1): log is finite
    u2 = (h2 >> np.uint64(11)).astype(np.float64) / 2.0**53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def stream_seed(seed: int, stream: int) -> int:
    """A 32-bit seed of its own for ``stream`` (a second draw of the same tree) of the run's ``seed``."""
    with np.errstate(over="ignore"):
        h = (np.uint64(seed & 0xFFFFFFFF) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(
            (stream + 1) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        )
    return int(h >> np.uint64(32))
