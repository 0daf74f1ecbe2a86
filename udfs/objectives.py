"""Training objectives as plain numpy/numba functions over whole queries.

Every objective maps ``(margins, labels, offsets)`` of many queries (rows of a
query contiguous, ``offsets`` marking where each starts) to per-row gradient
and hessian arrays (float32, as XGBoost's ``boost`` takes them). The hot loops
are numba kernels over queries; nothing loops per document in Python.

* :func:`mse_grad`: squared error on the labels, ``g = s - y``, ``h = 1``: what
  ``reg:squarederror`` computes, so it grows the same trees.
* :func:`lambdarank_grad`: LambdaMART with |ΔNDCG@k| weights, written to follow
  XGBoost 3.2's ``rank:ndcg`` (``src/objective/lambdarank_obj.{h,cc}``): pairs
  ``(i, j)`` of the model's ranking with ``i`` in the top ``k`` and ``j`` below
  it; equal labels skipped; ΔNDCG with untruncated discounts and IDCG@k;
  ΔNDCG divided by ``|s_i - s_j| + 0.01`` (``lambdarank_score_normalization``);
  ``λ = (σ(s_h - s_l) - 1)·Δ``, ``h = 2·max(σ(1-σ), 1e-16)·Δ``; per query, the
  LightGBM normalisation ``log2(1 + Σ2|λ|) / Σ2|λ|``; float32 accumulation in
  the same pair order. Remaining differences: ``exp`` is computed in double
  then rounded (XGBoost: ``expf``), which can differ in the last bit; only the
  ``topk`` pair method (XGBoost's default for ``rank:ndcg``) is implemented,
  not ``mean`` sampling nor unbiased (position-debiased) LambdaMART.
* :func:`lambdarank_grad` with ``delta="one"``: RankNet's pairwise logistic
  loss (Burges et al. 2005) on the same pairs (XGBoost's ``rank:pairwise``).
* :func:`sigmoid_pairwise_grad`: the bounded sigmoid pairwise loss of Carvalho
  et al. (2008), ``L = σ(-γ(s_h - s_l))`` per pair, robust to outlier labels;
  its curvature changes sign, so the hessian is the positive surrogate
  ``γ²σ(1-σ)``.
* :func:`stochastic_ndcg_grad`: LambdaMART on scores perturbed by Gaussian noise
  whose scale anneals to 0 (after StochasticRank, Ustimenko & Prokhorenkova
  2020): the ranking used for pairs, discounts and σ is that of ``s + ε``.
* :func:`blend`: ``(1-γ)·mse + γ·lambdamart``, with ``γ`` from a schedule over
  the global tree index (step, linear, sigmoid); a step at ``t`` is MSE-t.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np

from udfs.conventions import BlendSchedule
from udfs.metrics import NdcgSpec, inverse_idcg

_EPS64 = 1e-16


def _check_offsets(offsets: np.ndarray, n: int) -> np.ndarray:
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must start at 0, end at the number of rows and never decrease")
    return offsets


def mse_grad(margins: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Squared error ``(s - y)^2 / 2``: ``g = s - y``, ``h = 1`` (float32, like reg:squarederror)."""
    s = np.asarray(margins, dtype=np.float32)
    g = s - np.asarray(labels, dtype=np.float32)
    return g, np.ones_like(g)


@numba.njit(cache=True, nogil=True)
def _sigmoid32(x):
    """XGBoost's ``common::Sigmoid(float)``."""
    x = -x
    if x > np.float32(88.7):
        x = np.float32(88.7)
    return np.float32(1.0) / (np.float32(math.exp(x)) + np.float32(1.0) + np.float32(1e-16))


@numba.njit(cache=True, nogil=True, parallel=True)
def _pairwise_kernel(
    offsets,
    labels,
    scores,
    rank_scores,
    inv_idcg,
    k,
    exp_gain,
    delta_mode,
    score_norm,
    normalize,
    loss,
    gamma,
    grad,
    hess,
):
    """Shared pair loop, parallel over queries (each writes only its own rows).

    ``rank_scores`` orders the documents (== ``scores`` except for stochastic
    smoothing); ``inv_idcg`` is 1/IDCG@k per query; ``delta_mode`` 0: |ΔNDCG|,
    1: 1 (RankNet); ``loss`` 0: logistic (LambdaMART / RankNet), 1: sigmoid
    (Carvalho et al.)."""
    nq = offsets.size - 1
    maxn = 1
    for q in range(nq):
        maxn = max(maxn, offsets[q + 1] - offsets[q])
    disc = np.empty(maxn)
    for i in range(maxn):
        disc[i] = 1.0 / math.log2(i + 2.0)
    for q in numba.prange(nq):
        a = offsets[q]
        n = offsets[q + 1] - a
        if n < 2:
            continue
        order = np.argsort(-rank_scores[a : a + n], kind="mergesort")  # stable: ties in input order
        inv = inv_idcg[q]
        best = rank_scores[a + order[0]]
        worst = rank_scores[a + order[n - 1]]
        sum_lambda = 0.0
        for i in range(min(n, k)):
            for j in range(i + 1, n):
                ii = order[i]
                jj = order[j]
                yi = labels[a + ii]
                yj = labels[a + jj]
                if yi == yj:
                    continue
                rh, rl, ih, il, yh, yl = i, j, ii, jj, yi, yj
                if yi < yj:
                    rh, rl, ih, il, yh, yl = j, i, jj, ii, yj, yi
                sh = rank_scores[a + ih]
                sl = rank_scores[a + il]
                diff = np.float32(sh - sl)
                if delta_mode == 0:
                    gh = (2.0**yh - 1.0) if exp_gain else yh
                    gl = (2.0**yl - 1.0) if exp_gain else yl
                    dh = disc[rh]
                    dl = disc[rl]
                    delta = abs((gh * dh + gl * dl - gl * dh - gh * dl) * inv)
                else:
                    delta = 1.0
                if score_norm and best != worst:
                    delta /= abs(float(diff)) + 0.01
                if loss == 0:
                    sig = float(_sigmoid32(diff))
                    lam = (sig - 1.0) * delta
                    hs = max(sig * (1.0 - sig), _EPS64) * delta * 2.0
                else:
                    sig = float(_sigmoid32(np.float32(gamma) * diff))
                    lam = -gamma * sig * (1.0 - sig) * delta
                    hs = max(gamma * gamma * sig * (1.0 - sig), _EPS64) * delta
                lam32 = np.float32(lam)
                hs32 = np.float32(hs)
                grad[a + ih] += lam32
                hess[a + ih] += hs32
                grad[a + il] -= lam32
                hess[a + il] += hs32
                sum_lambda += -2.0 * float(lam32)
        if normalize and sum_lambda > 0.0:
            norm = math.log2(1.0 + sum_lambda) / sum_lambda
            for r in range(a, a + n):
                grad[r] = np.float32(grad[r] * norm)
                hess[r] = np.float32(hess[r] * norm)


def pair_inverse_idcg(labels: np.ndarray, offsets: np.ndarray, k: int, exp_gain: bool = True) -> np.ndarray:
    """1 / IDCG@k per query as the pairwise objectives use it (0 for queries without relevant documents).

    Labels are fixed during training, so callers compute this once per run."""
    return inverse_idcg(
        np.asarray(offsets, np.int64),
        np.asarray(labels, np.float64),
        NdcgSpec(k=k, gain="exp2" if exp_gain else "linear"),
    )


def _run_pairwise(
    margins,
    labels,
    offsets,
    rank_scores,
    *,
    k,
    exp_gain,
    delta_mode,
    score_norm,
    normalize,
    loss=0,
    gamma=1.0,
    inv_idcg=None,
) -> tuple[np.ndarray, np.ndarray]:
    s = np.ascontiguousarray(margins, dtype=np.float32)
    y = np.ascontiguousarray(labels, dtype=np.float64)
    off = _check_offsets(offsets, s.size)
    if k < 1:
        raise ValueError(f"k (top-k pairs) must be >= 1, got {k}")
    if inv_idcg is not None:
        inv = inv_idcg
    elif delta_mode == 0:
        inv = pair_inverse_idcg(y, off, k, exp_gain)
    else:  # constant pair weights: the kernel never reads IDCG (it cost a full sort per call)
        inv = np.zeros(off.size - 1)
    grad = np.zeros(s.size, dtype=np.float32)
    hess = np.zeros(s.size, dtype=np.float32)
    _pairwise_kernel(
        off,
        y,
        s,
        np.ascontiguousarray(rank_scores, dtype=np.float32),
        np.ascontiguousarray(inv, dtype=np.float64),
        int(k),
        bool(exp_gain),
        int(delta_mode),
        bool(score_norm),
        bool(normalize),
        int(loss),
        float(gamma),
        grad,
        hess,
    )
    return grad, hess


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


def sigmoid_pairwise_grad(
    margins: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    k: int = 10,
    gamma: float = 1.0,
    ndcg_weighted: bool = False,
    normalize: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Carvalho et al.'s sigmoid pairwise loss ``σ(-γ(s_h - s_l))`` on the top-k pairs."""
    if gamma <= 0:
        raise ValueError(f"gamma (sigmoid steepness) must be > 0, got {gamma}")
    return _run_pairwise(
        margins,
        labels,
        offsets,
        margins,
        k=k,
        exp_gain=True,
        delta_mode=0 if ndcg_weighted else 1,
        score_norm=False,
        normalize=normalize,
        loss=1,
        gamma=gamma,
    )


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


def stochastic_ndcg_grad(
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


# ---------------------------------------------------------------- schedules
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


# ------------------------------------------------------------ the factory
@dataclass(frozen=True)
class ObjectiveSettings:
    """What the Python objectives need besides a node's rows (from the training config)."""

    k: int = 10
    exp_gain: bool = True
    seed: int = 0
    sigmoid_gamma: float = 1.0
    stochastic_noise: float = 1.0
    stochastic_anneal: int = 100  # global tree at which the noise of stochastic_ndcg has annealed to 0
    blend: BlendSchedule = BlendSchedule("linear", 200, 100)


#: The objectives :func:`objective` builds (the others are XGBoost's built-ins).
PYTHON_OBJECTIVES = ("mse", "lambdamart", "ranknet", "sigmoid_pairwise", "stochastic_ndcg", "blend")


def objective(
    name: str, s: ObjectiveSettings, y: np.ndarray, offsets: np.ndarray, qid: np.ndarray, doc: np.ndarray
) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
    """``f(margins, global_tree) -> (grad, hess)`` of objective ``name`` on one node's rows (their labels,
    query offsets, qids and positions in their queries: ``qid``/``doc`` seed the noise of stochastic_ndcg)."""
    k = s.k
    if name == "mse":
        return lambda m, t: mse_grad(m, y)
    if name not in PYTHON_OBJECTIVES:
        raise ValueError(f"{name!r} is not a Python objective (one of {', '.join(PYTHON_OBJECTIVES)})")
    inv = pair_inverse_idcg(y, offsets, k, s.exp_gain)  # labels are fixed: once per node
    if name == "lambdamart":
        return lambda m, t: lambdarank_grad(m, y, offsets, k=k, exp_gain=s.exp_gain, inv_idcg=inv)
    if name == "ranknet":
        return lambda m, t: lambdarank_grad(m, y, offsets, k=k, exp_gain=s.exp_gain, delta="one", inv_idcg=inv)
    if name == "sigmoid_pairwise":
        return lambda m, t: sigmoid_pairwise_grad(m, y, offsets, k=k, gamma=s.sigmoid_gamma)
    if name == "stochastic_ndcg":

        def stochastic(m: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
            """(grad, hess) of stochastic_ndcg at margins ``m`` for global tree ``t``.

            The noise scale falls linearly from ``stochastic_noise`` at tree 0 to 0 at ``stochastic_anneal``;
            at 0 no noise is drawn (plain LambdaMART).
            """
            # Noise anneals to 0 at global tree `stochastic_anneal`, and depends only on (seed, tree, qid, doc).
            noise = s.stochastic_noise * max(0.0, 1.0 - t / max(s.stochastic_anneal, 1))
            eps = document_normal(s.seed, t, qid, doc) if noise > 0 else None
            return stochastic_ndcg_grad(m, y, offsets, k=k, noise=noise, eps=eps, exp_gain=s.exp_gain, inv_idcg=inv)

        return stochastic

    def blended(m: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(grad, hess) of blend at margins ``m`` for global tree ``t``: γ from the blend schedule.

        Only the gradients the weights need are computed (no MSE at γ = 1, no LambdaMART at γ = 0).
        """
        g = s.blend.gamma(t)
        a = mse_grad(m, y) if g < 1.0 else None
        r = lambdarank_grad(m, y, offsets, k=k, exp_gain=s.exp_gain, inv_idcg=inv) if g > 0.0 else None
        return blend(g, a, r)  # type: ignore[arg-type]

    return blended
