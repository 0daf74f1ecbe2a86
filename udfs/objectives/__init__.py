"""Training objectives as plain numpy/numba functions over whole queries, one module per objective.

Each module registers its objectives with :func:`udfs.objectives.registry.objective` (the registry finds the
modules of this package itself: a new file is a new objective, and no other file changes). A plan node's key holds
the code of the objective it trains with (the closure of its module), so a change to one objective re-keys only the
nodes that use it; the shared pair loop (:mod:`~udfs.objectives.pairwise`) is in the closure of every pairwise one.

This package's ``__init__`` imports nothing: it is part of every objective's closure.

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
* :func:`noisy_lambdamart_grad`: LambdaMART on scores perturbed by Gaussian
  noise whose scale anneals to 0 (noise regularisation, closer to Bruch et al.
  2020; formerly ``stochastic_ndcg``): the ranking used for pairs, discounts and
  σ is that of ``s + ε``.
* :func:`stochastic_rank_ders`: StochasticRank (Ustimenko & Prokhorenkova 2020,
  after CatBoost's): the CCS estimate of the smoothed NDCG's gradient, SFA, SGLB.
* :func:`blend`: ``(1-γ)·mse + γ·lambdamart``, with ``γ`` from a schedule over
  the global tree index (step, linear, sigmoid); a step at ``t`` is MSE-t.
"""
