"""Progress lines of a real (tiny) ``ltr ingest`` and ``ltr difficulty``: the status tracker sees the job's
tasks while it runs, and the last line has the totals the job counted."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from pipelines.core import spark_progress as progress
from pipelines.core.config import DifficultyConfig, IngestConfig, load_dataset_spec
from pipelines.data.ingest import ingest
from pipelines.data.scoring import run_difficulty
from udfs.metrics import NdcgSpec

N_QUERIES, DOCS = 40, 10
CHUNK = 1024  # ~20 tasks over the ~20 KB file


@pytest.fixture
def fast_progress(monkeypatch, caplog):
    """Poll every 10 ms and log every poll; the progress lines of the test."""
    monkeypatch.setattr(progress, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    caplog.set_level(logging.INFO, logger=progress.log.name)
    return lambda: [r.getMessage() for r in caplog.records if r.name == progress.log.name]


def _letor(path: Path) -> Path:
    src = path / "src"
    src.mkdir()
    lines = [
        f"{(q + d) % 3} qid:{q + 1} " + " ".join(f"{f}:{(q * 7 + d * f) % 10 / 10}" for f in range(1, 7))
        for q in range(N_QUERIES)
        for d in range(DOCS)
    ]
    (src / "train.txt").write_text("\n".join(lines) + "\n")
    return src


def test_ingest_shows_tasks_while_running_and_counted_rows_at_the_end(spark, tmp_path, fast_progress):
    src = _letor(tmp_path)
    size = (src / "train.txt").stat().st_size
    n_tasks = -(-size // CHUNK)
    cfg = IngestConfig(n_features=6, chunk_bytes=CHUNK)
    m = ingest(spark, str(src), str(tmp_path / "ds"), load_dataset_spec("mslr"), cfg)
    assert m["rows"] == N_QUERIES * DOCS
    lines = fast_progress()
    assert len(lines) >= 2, lines
    # the tracker saw this job's tasks (and only those) before it ended
    assert any(f"/{n_tasks} tasks)" in line for line in lines[:-1]), lines
    final = lines[-1]
    assert re.fullmatch(
        rf"ingest: 0\.0/0\.0 MB \(100%, {n_tasks}/{n_tasks} tasks\) in \d+ s, 400 rows, 0\.0 MB/s, [\d,]+ rows/s",
        final,
    ), final  # rows counted by the tasks: no "~"
    assert spark.sparkContext.getLocalProperty(progress.JOB_GROUP) is None  # the job group is cleared again


def test_difficulty_estimates_rows_from_the_manifest(spark, tmp_path, fast_progress):
    src = _letor(tmp_path)
    ds = tmp_path / "ds"
    ingest(spark, str(src), str(ds), load_dataset_spec("mslr"), IngestConfig(n_features=6))  # one task: it is the input
    n_before = len(fast_progress())
    cfg = DifficultyConfig(bm25_feature=1, pagerank_feature=2)
    run_difficulty(spark, str(ds), str(tmp_path / "scores"), cfg, NdcgSpec())
    lines = [line for line in fast_progress()[n_before:] if line.startswith("difficulty: ")]
    assert lines, fast_progress()
    assert re.fullmatch(
        r"difficulty: (\d+)/\1 tasks \(100%\) in \d+ s, ~400 rows, [\d.]+ tasks/s, ~[\d,]+ rows/s", lines[-1]
    ), lines
