"""The `ltr` command line and the spark-submit job scripts: exit codes and messages."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.app.cli import main
from pipelines.testing.processes import ROOT
from tests.conftest import GOLDEN
from tests.helpers import cli_env, set_args, tiny_study

#: spark: every test starts Spark (in this process, or a spark-submit); slow: minutes, started first
pytestmark = [pytest.mark.spark, pytest.mark.slow(minutes=2)]


def test_ingest_missing_source_exits_2(spark, tmp_path, capsys):
    code = main(["ingest", "--src", str(tmp_path / "nope"), "--out", str(tmp_path / "ds")])
    assert code == 2
    assert f"ltr ingest: error: --src {tmp_path / 'nope'}: no such file or directory" in capsys.readouterr().err


def test_unknown_dataset_and_bad_override_exit_2(spark, tmp_path, capsys):
    assert main(["ingest", "--src", str(GOLDEN), "--out", str(tmp_path / "d"), "--dataset", "nope"]) == 2
    assert "unknown dataset 'nope'" in capsys.readouterr().err
    assert main(["generate", "--out", str(tmp_path / "g"), "--set", "generate.sead=1"]) == 2
    assert "unknown config key 'generate.sead'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args,message",
    [
        (["--unit", "1:0", "--fold", "1"], "--unit FOLD:INDEX names its fold: give no --fold with it"),
        (["--unit", "1:0", "--setup-only"], "--setup-only trains nothing: it takes no --unit or --node"),
        (["--unit", "one"], "--unit 'one': expected FOLD:INDEX, e.g. 1:0"),
    ],
)
def test_grid_unit_misuse_exits_2_before_any_work(tmp_path, capsys, args, message):
    assert main(["grid", "--set", f"work_dir={tmp_path}", *args]) == 2
    err = capsys.readouterr().err
    assert f"ltr grid: error: {message}" in err
    assert err.count(message) == 1, err  # once: not also as a log record


def test_keys_explain_lists_each_kind_s_kernel_modules(capsys):
    """``ltr keys --explain``: each kind of result, its identity and the modules it covers (no Spark)."""
    from pipelines.core import keys

    assert main(["keys", "--explain", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["kinds"]) == {"difficulty", "curriculum", "cuts", "node", "teacher_scores"}
    for kind, d in doc["kinds"].items():
        assert d["sources"] == keys.code_identity(kind)["sources"] and d["modules"] == keys.explain()[kind]
    assert "pipelines.kernel.loop" in doc["kinds"]["node"]["modules"]
    assert not any(
        m.startswith(("pipelines.core.config", "pipelines.store")) for d in doc["kinds"].values() for m in d["modules"]
    )
    assert main(["keys", "--explain"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("difficulty: sources ") and "\n    udfs.curriculum\n" in text


def test_strict_flag(spark, tmp_path, capsys):
    code = main(
        [
            "ingest",
            "--src",
            str(GOLDEN / "malformed.txt"),
            "--out",
            str(tmp_path / "d"),
            "--n-features",
            "6",
            "--strict",
        ]
    )
    assert code == 2
    assert "malformed.txt:2: label is not an integer: token 'x'" in capsys.readouterr().err


def test_run_is_the_whole_pipeline(spark, tmp_path, capfd):
    """``ltr run`` end to end; run again, every step before training is fresh (nothing generated, ingested or
    scored again: pipelines.study.steps), the grid resumes with 0 trees trained and the report is the same.

    Against a real MLflow tracking server (``mlflow ui`` over a SQLite store: it takes any credentials) whose URI
    carries a password: the password is in no output of the study (issue 56): its console (ours and MLflow's own
    lines), ``work_dir`` (report, report.json, records, leases), the server's database and artifacts, and the
    trace a failure saves. (Before the fix: 13 console lines of ``ltr run`` and 4 of ``ltr report`` held it.)"""
    from pipelines.testing.processes import free_port, mlflow_ui, stop_process, wait_http
    from tests.helpers import PLANTED, files_holding

    store, work = tmp_path / "server", tmp_path / "work"
    store.mkdir()
    port = free_port()
    server = mlflow_ui(f"sqlite:///{store / 'mlflow.db'}", port, workers=1, cwd=store)
    saved = os.environ.pop("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", None)  # MLflow's own lines: off by ltr itself
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 90, server)
        uri = f"http://ltr:{PLANTED}@127.0.0.1:{port}"
        sets = set_args(tiny_study(f"work_dir={work}", "train.max_bin=256", f"tracking.uri={uri}"))
        argv = ["run", "--queries", "20", *sets]  # the default's bins, as it always ran
        code = main(argv)
        assert code == 0
        manifest = json.loads((work / "dataset" / "_manifest.json").read_text())
        assert manifest["queries"] == 20 and manifest["layout"] == "mslr_rotation"
        gen = json.loads((work / "letor" / "generate.json").read_text())
        assert manifest["rows"] == gen["rows"]
        assert json.loads((work / "difficulty" / "_difficulty.json").read_text())["queries"] == 20
        table1 = json.loads((work / "report" / "table1.json").read_text())
        assert {r["label"] for r in table1} == {"LambdaMART", "MSE-2", "q_nrel-2"}
        console = "".join(capfd.readouterr())
        # where to look, without the password: the server's own address, not `mlflow ui` serving it again
        assert "report.html" in console and f"MLflow UI: http://127.0.0.1:{port}" in console, console[-2000:]
        assert "mlflow ui --backend-store-uri http" not in console and "View run" not in console

        outputs = [
            work / "letor" / "generate.json",
            work / "dataset" / "_manifest.json",
            work / "difficulty" / "_difficulty.json",
        ]
        before = {p: p.stat().st_mtime_ns for p in outputs}
        assert main(argv) == 0
        err = "".join(capfd.readouterr())
        console += err
        assert err.count("up to date, reused") == 3 and "3 children already finished, 0 child runs created" in err
        assert {p: p.stat().st_mtime_ns for p in outputs} == before  # generate, ingest, difficulty: fresh, reused
        assert json.loads((work / "report" / "table1.json").read_text()) == table1
        # a failure's line and its saved trace: an unknown run id's error names the store without the password
        assert main(["report", "--run-id", "nosuchrun", *sets]) != 0
        console += "".join(capfd.readouterr())
        # the results API (pipelines.results) reads the same study back as pandas objects
        from pipelines import results

        study = results.load(work, tracking_uri=uri)
        systems = study.systems.set_index("system")
        assert systems.loc["MSE-2", "path"] == "mse:2,lambdamart:2" and len(systems) == 3
        assert len(study.per_query) == 3 * 4  # 3 systems x the test queries of 20 (fold 1's fifth)
        last = study.curves.sort_values("tree").groupby("system").last()
        assert list(last["tree"]) == [4, 4, 4]
        for name, row in systems.iterrows():  # a curve's last point is Table 1's number
            assert abs(last.loc[name, "test"] - row["mean"]) < 1e-12, name
        # ... and from the MLflow experiment alone (the report logged on the parent run), without the work_dir
        remote = results.from_mlflow(uri, study.report["experiment"], dest=tmp_path / "remote")
        assert remote.report == study.report and remote.per_query.equals(study.per_query)
        assert remote.systems.equals(study.systems)
        assert study.report["parent"] and study.report["experiment"] == "ltr-default"
        with pytest.raises(results.ResultsError, match="no report here"):
            results.load(tmp_path)
    finally:
        stop_process(server)
        if saved is not None:
            os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = saved
    assert PLANTED not in console
    assert files_holding(work, PLANTED.encode()) == [] and files_holding(store, PLANTED.encode()) == []
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    traces = [p for p in tmp.glob("ltr-report-*.log") if p.stat().st_mtime > work.stat().st_mtime]
    assert all(PLANTED.encode() not in p.read_bytes() for p in traces)


@pytest.mark.timeout(300)
def test_spark_submit_job(tmp_path):
    """jobs/ingest.py under a real spark-submit (its own JVM), exit code and output."""
    spark_submit = Path(sys.executable).parent / "spark-submit"
    if not spark_submit.exists():
        pytest.skip("spark-submit is not next to the interpreter")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    out = tmp_path / "ds"
    proc = subprocess.run(
        [
            str(spark_submit),
            "--master",
            "local[1]",
            "--conf",
            "spark.sql.shuffle.partitions=3",
            "--conf",
            "spark.scheduler.mode=FIFO",
            str(ROOT / "jobs" / "ingest.py"),
            "--src",
            str(GOLDEN / "sparse_comments.txt"),
            "--out",
            str(out),
            "--n-features",
            "6",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "_manifest.json").read_text())["rows"] == 5
    # spark-submit merges the Python driver's stderr into its stdout
    # spark-submit's --master and --conf were kept, not overridden by the project's defaults (8, FAIR)
    assert (
        "spark 4.3.0 classic session on local[1] (1 cores, 3 shuffle partitions, FIFO scheduler)"
        in proc.stdout + proc.stderr
    )
    bad = subprocess.run(
        [
            str(spark_submit),
            "--master",
            "local[1]",
            str(ROOT / "jobs" / "ingest.py"),
            "--src",
            str(GOLDEN / "malformed.txt"),
            "--out",
            str(tmp_path / "x"),
            "--n-features",
            "6",
            "--strict",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert bad.returncode == 2
    assert "malformed.txt:2: label is not an integer: token 'x'" in bad.stdout + bad.stderr


@pytest.fixture(scope="module")
def istella_text(tmp_path_factory):
    """300 Istella-shaped queries as text (200 MB: an ingest of a few seconds, long enough to be stopped)."""
    from pipelines.data.generate import generate

    out = tmp_path_factory.mktemp("istella") / "letor"
    generate(str(out), 300, seed=5, workers=1, shape="istella")
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("when", ["jvm starting", "writing", "writing, to the whole group"])
def test_sigterm_stops_an_ingest_and_keeps_nothing(tmp_path, istella_text, when):
    """A real ``ltr ingest`` (its own JVM) sent SIGTERM while PySpark starts its JVM, or while it writes the output
    (to ``ltr`` alone, as ``kill`` and ``timeout`` send it, or to its whole process group with the JVM, as systemd
    does):
    it exits 143 with one line, nothing is left beside ``--out`` but the claim's lock files, and every process of
    its tree ends. While it writes, it cancels its Spark job and removes the output's temporary folder (SIGTERM's
    default left it, as large as the output); while the JVM starts, it waits until the JVM is up (stopped there,
    the new JVM never ended)."""
    from pipelines.core.outputs import leftovers
    from pipelines.core.proctree import tree_pids

    out = tmp_path / "ds"
    cmd = [sys.executable, "-m", "pipelines.app.cli", "ingest", "--src", str(istella_text), "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--set", "ingest.chunk_bytes=1048576"],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def ready() -> bool:
        return len(tree_pids(proc.pid)) > 1 if when == "jvm starting" else bool(leftovers(str(out)))

    deadline = time.monotonic() + 120
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    tree = tree_pids(proc.pid)
    assert proc.poll() is None and ready(), "the ingest ended before it could be stopped"
    if when.endswith("group"):
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "ltr ingest: stopped (SIGTERM); the output it was writing was not kept" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ds.lock", ".ds.quarantine.lock"]
    deadline = time.monotonic() + 30
    while any(tree_pids(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if tree_pids(p)], "a process of the stopped ingest is still running"


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs at ``tmp_path/disk`` (root, Linux), unmounted afterwards; skipped where it cannot be mounted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_an_output_folder_that_vanishes_while_written_is_its_own_exit_code_in_one_line(
    spark, small_letor, tmp_path, capsys, monkeypatch
):
    """The folder ``ltr ingest`` writes its dataset in is deleted (or unmounted) by someone else once the rows are
    written, before the manifest: exit 74 (not 2, the input is fine; not 1, nothing inside went wrong), one line
    naming the folder, and nothing written again in its place."""
    import shutil

    from pipelines.data.ingest import job

    gone = tmp_path / "gone"
    real = job._ingest_into

    def then_gone(*args, **kwargs):
        manifest = real(*args, **kwargs)
        shutil.rmtree(gone)
        return manifest

    monkeypatch.setattr(job, "_ingest_into", then_gone)
    code = main(["ingest", "--src", str(small_letor), "--out", str(gone / "dataset"), "--log-level", "ERROR"])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("ltr ingest: error:")]
    assert code == 74, err[-3000:]
    assert len(lines) == 1 and f"its folder {gone} vanished while the command wrote it" in lines[0], err[-3000:]
    assert "Traceback" not in err and not gone.exists(), err[-3000:]


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_a_full_or_read_only_disk_is_its_own_exit_code_in_one_line_and_leaves_nothing(
    spark, small_letor, small_disk, capsys, how
):
    """``ltr ingest`` onto a disk that fills up, or that is read-only: exit 74 (not 2, the input is fine), one line
    naming the cause and where the trace is, and no dataset (no manifest) left behind."""
    if how == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    out = small_disk / "dataset"
    code = main(["ingest", "--src", str(small_letor), "--out", str(out), "--log-level", "ERROR"])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("ltr ingest: error:")]
    assert code == 74, err[-3000:]
    cause = "No space left on device" if how == "full" else "Read-only file system"
    assert len(lines) == 1 and cause in lines[0] and "full trace: " in lines[0], err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    trace = Path(lines[0].split("full trace: ")[1].rstrip(")"))
    assert cause in trace.read_text()  # the trace of where it happened, in the file
    assert not list(small_disk.rglob("_manifest.json"))
    # only the output's lock files (kept, as after any ingest): no temporary folder, no partial dataset
    assert all(p.name.startswith(".") and p.name.endswith(".lock") for p in small_disk.iterdir()), list(
        small_disk.rglob("*")
    )
