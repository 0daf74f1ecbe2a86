"""The model part of the training settings: everything a tree, a curve or a checkpoint's content depends on.

Built from the config's ``train:`` section (:attr:`pipelines.core.config.TrainConfig.model`, which states the
defaults and checks the values); every node key holds it whole (:func:`pipelines.core.keys.plan_context`). What
one objective alone reads is that objective's own setting (``components.<name>``), held by its nodes' keys only. How the
trees are run (workers, threads, checkpoint interval, timeouts, leases, retries, where rows are read) is the run
part, :class:`pipelines.core.config.TrainRun`, in no key. A field of ``train:`` is in exactly one of them (a test
holds the config to that), so a new setting cannot silently fall outside the keys.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Model:
    """What the trees and their curves depend on (see ``TrainConfig`` for each setting's meaning)."""

    eta: float
    leaves: int
    max_bin: int
    cuts_sample_rows: int  # the cuts' sample (their key holds it too)
    min_child_weight: float
    reg_lambda: float
    subsample: float
    colsample_bytree: float
    k: int
    device: str
    eval_every: int
    score_dist_trees: tuple[int, ...]
    score_dist_bins: int
    base_margin: str
    seed: int
