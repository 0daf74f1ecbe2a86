"""Shared fixtures: one session-scoped SparkSession (local[2]), golden files, small generated data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "data" / "golden"


def golden(name: str) -> tuple[Path, dict]:
    """Path of golden input ``name`` and its hand-written expected output."""
    return GOLDEN / f"{name}.txt", json.loads((GOLDEN / f"{name}.expected.json").read_text())


@pytest.fixture(scope="session")
def spark():
    """local[2], few shuffle partitions, no UI, no task retries (DESIGN.md section 7)."""
    from pipelines.config import SparkConfig
    from pipelines.session import build_session

    cfg = SparkConfig(master="local[2]", shuffle_partitions=2, ui=False, driver_memory="2g",
                      log_level="ERROR", conf={"spark.task.maxFailures": "1"})
    session = build_session(cfg)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def small_letor(tmp_path_factory) -> Path:
    """A small generated MSLR-shaped folder (60 queries), shared by tests that only read it."""
    from pipelines.generate import generate

    out = tmp_path_factory.mktemp("letor") / "mslr"
    generate(str(out), queries=60, seed=11, workers=1)
    return out


@pytest.fixture(scope="session")
def small_dataset(spark, small_letor, tmp_path_factory) -> str:
    """``small_letor`` ingested (MSLR rotation, subsets S1..S5)."""
    from pipelines.config import IngestConfig, load_dataset_spec
    from pipelines.ingest import ingest

    out = tmp_path_factory.mktemp("ds") / "dataset"
    ingest(spark, str(small_letor), str(out), load_dataset_spec("mslr"), IngestConfig(chunk_bytes=300_000))
    return str(out)


@pytest.fixture(scope="session")
def small_difficulty(spark, small_dataset, tmp_path_factory) -> str:
    """Difficulty scores of ``small_dataset`` with the default conventions."""
    from pipelines.config import DifficultyConfig
    from pipelines.difficulty import run_difficulty
    from udfs.metrics import NdcgSpec

    out = tmp_path_factory.mktemp("diff") / "scores"
    run_difficulty(spark, small_dataset, str(out), DifficultyConfig(), NdcgSpec())
    return str(out)
