"""``ltr run``: the whole pipeline on one machine, each step run only when its output is not fresh.

generate (unless ``--src``) -> ingest -> difficulty -> curricula and the grid (MLflow) -> report. The steps before
training, their keys and freshness checks are declared in :mod:`pipelines.study.steps`; a second ``ltr run`` of the
same config reuses every fresh output, resumes the grid from its checkpoints (a finished study trains 0 trees) and
writes the report again.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from pipelines.core.config import Config, ConfigError
from pipelines.core.layout import Layout

log = logging.getLogger("ltr")


def build_report(cfg: Config, tracker: Any, out: str, parent: str | None) -> dict[str, Any]:
    """:func:`pipelines.report.build_report` with the config's ``report:`` and ``metric:`` settings."""
    from pipelines.report import build_report as build

    return build(
        tracker, out, parent, report=cfg.report, metric_name=cfg.metric.name, difficulty=Layout.of(cfg).difficulty
    )


def run_study(cfg: Config, src: str | None = None) -> dict[str, Any]:
    """Every step of the study in order (:data:`pipelines.study.steps.ORDER`, then training and the report); each
    step before training runs only when its output is not fresh. Returns the grid's and the report's summaries."""
    from pipelines.app.grid import run_grid
    from pipelines.app.jvm import use_class_archive
    from pipelines.app.server import session_config
    from pipelines.core.session import build_session, jvm_master
    from pipelines.report.mlflow_view import ui_lines
    from pipelines.study import steps
    from pipelines.study.design import check_preset_strategies
    from pipelines.tracking.runs import Tracker

    if not src and cfg.generate.shape != "mslr" and cfg.dataset != cfg.generate.shape:
        raise ConfigError(
            f"generate.shape={cfg.generate.shape} writes {cfg.generate.shape}-shaped data, read with the dataset "
            f"preset of that name: add --set dataset={cfg.generate.shape} (the config says dataset={cfg.dataset})"
        )
    check_preset_strategies(cfg)  # a curriculum the dataset cannot score is refused before any work
    layout = Layout.of(cfg)
    t0 = time.perf_counter()
    n = 5 if not src else 4  # generate (unless --src), ingest, difficulty, curricula and the grid, report
    step = iter(range(1, n + 1))
    if not src:
        src = layout.letor
        log.info(
            "[%d/%d] generate %d %s-shaped queries -> %s", next(step), n, cfg.generate.queries, cfg.generate.shape, src
        )
        steps.run_generate(cfg, src)
    spark_cfg = session_config(cfg)  # spark.remote: auto -> $SPARK_REMOTE, the work_dir's server, else classic
    use_class_archive(jvm_master(spark_cfg))
    spark = build_session(spark_cfg)
    data = layout.run_dataset  # `ltr run` never writes over a dataset named elsewhere (grid.data)
    log.info("[%d/%d] ingest %s -> %s", next(step), n, src, data)
    steps.run_ingest(spark, cfg, src, data)
    difficulty = layout.difficulty  # where run_grid reads them (grid.difficulty, else <work_dir>/difficulty)
    log.info("[%d/%d] difficulty scores -> %s", next(step), n, difficulty)
    log.info("%s", steps.difficulty_state(cfg, data, difficulty).describe())
    steps.ensure_difficulty(spark, cfg, data, difficulty)
    log.info("[%d/%d] curricula and the grid (%s) -> MLflow", next(step), n, cfg.grid.experiment)
    g = run_grid(spark, cfg, data=data)
    out = layout.report
    log.info("[%d/%d] report -> %s", next(step), n, out)
    tracker = Tracker.for_config(cfg)
    r = build_report(cfg, tracker, out, g["parent_run_id"])
    print(
        f"\nDone in {time.perf_counter() - t0:.0f} s.\n"
        f"  report:    {os.path.abspath(os.path.join(r['out'], 'report.html'))}\n"
        + ui_lines(tracker, g["parent_run_id"], report=True),
        file=sys.stderr,
    )
    return {"grid": g, "report": r}
