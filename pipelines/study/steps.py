"""What a study needs before it trains: the difficulty scores and the curricula of its folds, reused when
their stored keys match this config's (:mod:`pipelines.study.design`), else computed with Spark."""

from __future__ import annotations

import logging
from typing import Any

from pipelines.core.config import Config
from pipelines.core.keys import curriculum_key, difficulty_key
from pipelines.core.layout import Layout
from pipelines.core.storage import read_json
from pipelines.data.curriculum import Curriculum, build_curriculum, read_curriculum
from pipelines.data.dataset import DatasetError, open_dataset
from pipelines.data.difficulty import SUMMARY as DIFFICULTY_SUMMARY
from pipelines.data.difficulty import difficulty_inputs, run_difficulty, stored_summary
from pipelines.study.design import curriculum_config, curriculum_inputs
from udfs.uris import to_uri

log = logging.getLogger(__name__)


def ensure_difficulty(spark, cfg: Config, data: str, difficulty: str) -> dict[str, Any]:
    """The difficulty scores at ``difficulty``: reused when their recorded key matches this config's
    (:func:`pipelines.core.keys.difficulty_key` of :func:`pipelines.data.difficulty.difficulty_inputs`), else computed
    again; returns their summary."""
    summary = stored_summary(
        difficulty, difficulty_key(**difficulty_inputs(open_dataset(data), cfg.difficulty, cfg.metric))
    )
    if summary is not None:
        return summary
    log.info("computing difficulty scores -> %s (none there, or computed from other inputs)", difficulty)
    return run_difficulty(spark, data, difficulty, cfg.difficulty, cfg.metric)


def ensure_curricula(spark, cfg: Config, data: str, difficulty: str, fold: int, names: set[str]) -> list[Curriculum]:
    """Build (or reuse, when its key matches) each curriculum of the fold: strategies with the grid's
    fraction, and the extra curricula of the config (``grid.extra_curricula``: name -> settings).

    A curriculum's stored key covers its settings, the dataset, the fold, the difficulty inputs and
    the content fingerprint of the very scores it was built from: scores computed again (by
    ``ltr run`` or ``ltr difficulty``) into the same folder with another result rebuild it."""
    if not names:
        return []
    ds = open_dataset(data)
    scores = read_json(difficulty, DIFFICULTY_SUMMARY).get("content_fingerprint", "")
    out = []
    for name in sorted(names):
        ccfg = curriculum_config(cfg, name)
        key = curriculum_key(**curriculum_inputs(cfg, ds, fold, name, scores))
        d = Layout.of(cfg).curriculum(fold, name)
        try:
            summary = read_curriculum(d)
            fresh = summary.get("key") == key
        except DatasetError:
            fresh = False
        if not fresh:
            summary = build_curriculum(
                spark, data, difficulty, fold, ccfg, d, name=name, key=key, empty_queries=cfg.difficulty.empty_queries
            )
        out.append(Curriculum(to_uri(d), summary))
    return out
