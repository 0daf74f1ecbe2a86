"""A run's config with its plug-ins: loaded and configured before the config is typed (its paths and strategies
name components), checked against the dataset it names after, and all before any Spark job."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.plugins.checks import check_all
from pipelines.plugins.loading import GROUP, load, set_current

if TYPE_CHECKING:
    from pipelines.core.config import Config


def load_run_config(
    path: str | os.PathLike | None = None,
    overrides: list[str] | None = None,
    extra: Iterable[str] = (),
    *,
    files: bool = True,
    check: bool = True,
) -> Config:
    """The run's :class:`~pipelines.core.config.Config` with its plug-ins loaded first: the config file's
    ``plugins.load`` and ``extra`` (``--plugin``), then the installed ones; every component's settings
    from ``components``, each plug-in checked on the synthetic batch (``check``). ``files``: whether files and
    modules may be named (the Airflow DAG loads installed plug-ins only: whoever triggers a run must not make a
    worker import a file)."""
    from pipelines.core.config import PLUGIN_SOURCES, ConfigError, config_data, config_of, load_dataset_spec

    p, data = config_data(path, overrides)
    section = data.get("plugins") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{p}: plugins: expected a list of files and modules, or a mapping (load, params)")
    named = section.get("load") or []
    if not isinstance(named, list) or not all(isinstance(x, str) for x in named):
        raise ConfigError(f"{p}: plugins.load: expected a list of files and modules, got {named!r}")
    refs = list(dict.fromkeys([*named, *(str(Path(x).resolve()) if x.endswith(".py") else x for x in extra)]))
    if refs and not files:
        raise ConfigError(
            f"{p}: plugins {refs}: the Airflow DAG loads installed plug-ins only (entry points in the group {GROUP}: "
            f"install the package on the workers), not {PLUGIN_SOURCES.split(',')[0]} or a config file's list"
        )
    pset = load(refs, data.get("components") or {})
    data["plugins"] = {**section, "load": [s.ref for s in pset.sources if s.kind != "entry point"]}
    cfg = config_of(p, data)
    if check:  # against the features the configured dataset has (a score may read only those)
        check_all(n_features=cfg.ingest.n_features or load_dataset_spec(cfg.dataset).n_features, dataset=cfg.dataset)
    set_current(pset)
    return cfg
