"""Shared fixtures: one session-scoped SparkSession (local[2]), golden files, small generated data."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

# Before anything loads OpenMP (xgboost's libgomp, numba's omp threading layer), which reads it once: threads
# waiting at a barrier sleep instead of spinning. The suite runs 2 xdist workers, and JVMs, on 2 cores, so a
# spinning thread burns the core its partner needs (benchmarks/RESULTS.md, "What CI's settings rest on").
# Inherited by every process a test starts (ltr, spark-submit, Spark's Python workers, Airflow's tasks).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pipelines.app.jvm import with_archive  # noqa: E402
from pipelines.testing.processes import QUICK_JVM  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"

os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM)  # every driver JVM a test's subprocess starts


def pytest_runtest_setup(item):
    """From the test after Spark's class archive is written on (the first shared session starts writing it,
    tests/spark_holder.py), the driver JVMs of the tests' subprocesses map Spark's classes from it
    (pipelines.app.jvm). Not before: a JVM told of an archive that does not exist yet runs without any class
    archive, the JDK's own included (Java 17)."""
    os.environ["SPARK_SUBMIT_OPTS"] = with_archive(os.environ.get("SPARK_SUBMIT_OPTS", ""))


def golden(name: str) -> tuple[Path, dict]:
    """Path of golden input ``name`` and its hand-written expected output."""
    return GOLDEN / f"{name}.txt", json.loads((GOLDEN / f"{name}.expected.json").read_text())


@pytest.fixture(scope="session")
def spark_holder():
    """The shared local[2] session's keeper (:mod:`tests.spark_holder`): 2 GiB driver, few shuffle
    partitions, no UI, no task retries; the JVM's output goes to ``.test-logs``.
    Module- and session-scoped fixtures take their session from it (``spark_holder.get()``)."""
    from tests.spark_holder import SparkHolder

    holder = SparkHolder()
    yield holder
    holder.stop()


@pytest.fixture
def spark(spark_holder, request):
    """A live shared session for one test: if the JVM died (or a test stopped the session) since the last
    test, a new one is started and the log says so, so a dead JVM costs one test, not the suite."""
    session = spark_holder.get()
    request.node.stash[_JVM_LOG] = (spark_holder, spark_holder.jvm_log, spark_holder.jvm_log_size())
    return session


_JVM_LOG = pytest.StashKey[tuple]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that used the shared session gets the lines its JVM wrote meanwhile (Spark's own
    errors, the Python workers' stderr) as a report section, and a line saying whether the JVM is alive."""
    report = yield
    seen = item.stash.get(_JVM_LOG, None)
    if seen is not None and report.failed:
        holder, path, offset = seen
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                text = f.read()[-20000:].decode("utf-8", "replace")
        except OSError as e:
            text = f"(cannot read {path}: {e})"
        alive = holder.dead_reason() if holder.session is not None else "no session"
        report.sections.append(
            (f"JVM log ({path}), from this test on", f"{text}\nsession state after the test: {alive or 'alive'}")
        )
    return report


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` under the run's temporary root, filled by ``build(folder)`` once a run: by the first
    xdist worker that asks for it, while the others wait for it (a lock beside it, :class:`FileLock`), then read it.
    For the data fixtures that tests only read: each worker built its own copy before, the same bytes twice."""
    from pipelines.core.locks import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's basetemp is a folder of the run's root
        root = root.parent
    shared = root / "shared"
    folder, built = shared / name, shared / f"{name}.built"
    with FileLock(str(shared / f"{name}.lock")):
        if not built.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a worker that failed half-way left
            folder.mkdir(parents=True)
            build(folder)
            built.touch()
    return folder


@pytest.fixture(scope="session")
def small_letor(tmp_path_factory) -> Path:
    """A small generated MSLR-shaped folder (60 queries), shared by tests that only read it."""
    from pipelines.data.generate import generate

    def build(folder: Path) -> None:
        generate(str(folder / "mslr"), queries=60, seed=11, workers=1)

    return built_once(tmp_path_factory, "letor", build) / "mslr"


#: ``small_dataset``'s ingest chunk size (bytes)
CHUNK_BYTES = 600_000


@pytest.fixture(scope="session")
def small_dataset(spark_holder, small_letor, tmp_path_factory) -> str:
    """``small_letor`` ingested (MSLR rotation, subsets S1..S5), in chunks of 600 kB: 79 Spark tasks, two or more a
    file (smaller chunks cost each xdist worker a Python task's fixed cost per chunk: RESULTS.md, "What CI's
    settings rest on"). Read only, by every test that uses it."""
    from pipelines.core.config import IngestConfig, load_dataset_spec
    from pipelines.data.ingest import ingest

    def build(folder: Path) -> None:
        spec = load_dataset_spec("mslr")
        ingest(
            spark_holder.get(), str(small_letor), str(folder / "dataset"), spec, IngestConfig(chunk_bytes=CHUNK_BYTES)
        )

    return str(built_once(tmp_path_factory, "ds", build) / "dataset")


@pytest.fixture(scope="session")
def small_difficulty(spark_holder, small_dataset, tmp_path_factory) -> str:
    """Difficulty scores of ``small_dataset`` with the default conventions."""
    from pipelines.core.config import DifficultyConfig
    from pipelines.data.scoring import run_difficulty
    from udfs.metrics import NdcgSpec

    def build(folder: Path) -> None:
        run_difficulty(spark_holder.get(), small_dataset, str(folder / "scores"), DifficultyConfig(), NdcgSpec())

    return str(built_once(tmp_path_factory, "diff", build) / "scores")


#: Fixtures that start (or need) the shared Spark session.
SPARK_FIXTURES = {"spark", "spark_holder"}


def pytest_collection_modifyitems(session, config, items):
    """Each module declares its markers (``pytestmark``; pytest.ini lists them): ``spark`` (a module that starts Spark
    itself: ``ltr``/``spark-submit`` subprocesses, a standalone cluster, an inner pytest), ``deployment``, ``slow`` (a
    module that takes minutes), ``processes``. Here a test that uses a Spark fixture also gets ``spark``; the fast
    command (docs/contributing.md) runs ``-m "not spark"``. Then the order: the ``slow`` modules first, longest
    first. pytest.ini runs the suite in two pytest-xdist workers, one module at a time each (``--dist
    loadfile``: a module's fixtures are built once), and a long module started last would leave one worker running
    alone at the end."""
    for item in items:
        if SPARK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)
    items.sort(key=_start_rank)  # stable: the rest keep their order


def _start_rank(item: pytest.Item) -> float:
    """Longest first: ``slow(minutes=N)`` (what the module takes here, roughly) orders the slow modules, so that the
    two xdist workers end together; the rest come after, in collection order."""
    slow = item.get_closest_marker("slow")
    return 0.0 if slow is None else -float(slow.kwargs.get("minutes", 1))
