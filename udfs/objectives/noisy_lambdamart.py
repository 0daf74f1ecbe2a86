"""LambdaMART on scores perturbed by Gaussian noise whose scale anneals to 0 (``noisy_lambdamart``).

LambdaMART's pairwise gradient, with its pairs, discounts and deltas taken at ``s + noise * eps``: noise
regularisation of a ranker's scores, closer to Bruch et al. (2020) than to StochasticRank (Ustimenko & Prokhorenkova
2020, :mod:`udfs.objectives.stochastic_rank`), which estimates the gradient of the smoothed NDCG itself. Its old
name, ``stochastic_ndcg`` (CHANGELOG.md), still parses, with a one-line deprecation
(:data:`pipelines.plan.paths.ALIASES`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from udfs.objectives.lambdamart import lambdarank_grad
from udfs.objectives.noise import document_normal
from udfs.objectives.pairwise import _run_pairwise, node_inverse_idcg
from udfs.objectives.registry import objective


def noisy_lambdamart_grad(
    margins: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    k: int = 10,
    noise: float = 0.1,
    rng: np.random.Generator | None = None,
    exp_gain: bool = True,
    inv_idcg: np.ndarray | None = None,
    eps: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """LambdaMART gradients at the scores ``s + noise * eps`` (noise 0: plain LambdaMART).

    ``eps``: standard normal per document (training uses :func:`document_normal`);
    if None it is drawn from ``rng``.
    """
    s = np.asarray(margins, dtype=np.float32)
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    if noise == 0:
        return lambdarank_grad(s, labels, offsets, k=k, exp_gain=exp_gain, inv_idcg=inv_idcg)
    if eps is None:
        eps = (rng or np.random.default_rng(0)).normal(0.0, 1.0, size=s.size)
    noisy = (s + noise * np.asarray(eps, np.float64)).astype(np.float32)
    return _run_pairwise(
        noisy,
        labels,
        offsets,
        noisy,
        k=k,
        exp_gain=exp_gain,
        delta_mode=0,
        score_norm=True,
        normalize=True,
        inv_idcg=inv_idcg,
    )


def _check(params: Mapping[str, Any]) -> None:
    if not params["noise"] >= 0:
        raise ValueError(f"noise (the noise's scale at tree 0) must be >= 0, got {params['noise']}")
    if not params["anneal"] >= 1:
        raise ValueError(f"anneal (the tree at which the noise has fallen to 0) must be >= 1, got {params['anneal']}")


@objective("noisy_lambdamart", seeded=True, params={"noise": 1.0, "anneal": 100}, check=_check)
def noisy_lambdamart(
    margins: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    tree: int,
    params: Mapping[str, Any],
    qid: np.ndarray,
    doc: np.ndarray,
    cache: dict,
) -> tuple[np.ndarray, np.ndarray]:
    """LambdaMART on scores with annealed Gaussian noise (noise regularisation, not StochasticRank): the noise's
    scale falls linearly from ``noise`` at global tree 0 to 0 at global tree ``anneal`` (from there on no noise is
    drawn: plain LambdaMART), and the noise depends on (seed, tree, qid, doc) only.
    """
    k, gain = params["k"], params["exp_gain"]
    noise = params["noise"] * max(0.0, 1.0 - tree / params["anneal"])
    eps = document_normal(params["seed"], tree, qid, doc) if noise > 0 else None
    return noisy_lambdamart_grad(
        margins,
        labels,
        offsets,
        k=k,
        noise=noise,
        eps=eps,
        exp_gain=gain,
        inv_idcg=node_inverse_idcg(labels, offsets, params, cache),
    )
