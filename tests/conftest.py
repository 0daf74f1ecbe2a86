"""Shared fixtures: one session-scoped SparkSession (local[2]), golden files, small generated data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipelines.testing.processes import QUICK_JVM

GOLDEN = Path(__file__).parent / "golden"

os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM)  # every driver JVM a test's subprocess starts


def golden(name: str) -> tuple[Path, dict]:
    """Path of golden input ``name`` and its hand-written expected output."""
    return GOLDEN / f"{name}.txt", json.loads((GOLDEN / f"{name}.expected.json").read_text())


@pytest.fixture(scope="session")
def spark_holder():
    """The shared local[2] session's keeper (:mod:`tests.spark_holder`): 2 GiB driver, few shuffle
    partitions, no UI, no task retries (DESIGN.md section 7); the JVM's output goes to ``.test-logs``.
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


@pytest.fixture(scope="session")
def small_letor(tmp_path_factory) -> Path:
    """A small generated MSLR-shaped folder (60 queries), shared by tests that only read it."""
    from pipelines.data.generate import generate

    out = tmp_path_factory.mktemp("letor") / "mslr"
    generate(str(out), queries=60, seed=11, workers=1)
    return out


@pytest.fixture(scope="session")
def small_dataset(spark_holder, small_letor, tmp_path_factory) -> str:
    """``small_letor`` ingested (MSLR rotation, subsets S1..S5)."""
    from pipelines.core.config import IngestConfig, load_dataset_spec
    from pipelines.data.ingest import ingest

    out = tmp_path_factory.mktemp("ds") / "dataset"
    ingest(spark_holder.get(), str(small_letor), str(out), load_dataset_spec("mslr"), IngestConfig(chunk_bytes=300_000))
    return str(out)


@pytest.fixture(scope="session")
def small_difficulty(spark_holder, small_dataset, tmp_path_factory) -> str:
    """Difficulty scores of ``small_dataset`` with the default conventions."""
    from pipelines.core.config import DifficultyConfig
    from pipelines.data.difficulty import run_difficulty
    from udfs.metrics import NdcgSpec

    out = tmp_path_factory.mktemp("diff") / "scores"
    run_difficulty(spark_holder.get(), small_dataset, str(out), DifficultyConfig(), NdcgSpec())
    return str(out)


#: Modules that cost minutes (``--durations``), started first: README's test command runs the suite in two
#: pytest-xdist workers, one module at a time each (``--dist loadfile``: a module's fixtures are built once),
#: and a long module started last would leave one worker running alone at the end. Their tests are ``slow``.
FIRST = ("test_cluster.py", "test_deploy.py", "test_resume.py", "test_keys.py", "test_cli.py", "test_airflow.py")
#: Modules that start Spark without the ``spark`` fixture (``ltr``/``spark-submit`` subprocesses, a standalone
#: cluster, an inner pytest): every test of theirs is ``spark``.
SPARK_MODULES = (
    "test_airflow.py",
    "test_cli.py",
    "test_cluster.py",
    "test_deploy.py",
    "test_resume.py",
    "test_spark_holder.py",
)
#: Modules without Spark whose tests start several Python processes (MLflow's store under concurrent writers):
#: ``processes``; ``.ci/run`` leaves them out on the other Pythons.
PROCESS_MODULES = ("test_tracking.py",)
#: Modules that run Airflow, PostgreSQL or an MLflow server: ``deployment``.
DEPLOYMENT_MODULES = ("test_airflow.py", "test_deploy.py")
#: Fixtures that start (or need) the shared Spark session.
SPARK_FIXTURES = {"spark", "spark_holder"}


def pytest_collection_modifyitems(session, config, items):
    """The markers, set here and nowhere else (pytest.ini declares them): ``spark`` (a test that needs a JVM:
    it uses a Spark fixture, or its module starts Spark itself), ``deployment``, ``slow``, ``processes``. README's fast
    command runs ``-m "not spark"``. Then the order: the modules that take minutes first."""
    for item in items:
        name = item.path.name
        if name in SPARK_MODULES or SPARK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)
        if name in DEPLOYMENT_MODULES:
            item.add_marker(pytest.mark.deployment)
        if name in FIRST:
            item.add_marker(pytest.mark.slow)
        if name in PROCESS_MODULES:
            item.add_marker(pytest.mark.processes)
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: the rest keep their order
