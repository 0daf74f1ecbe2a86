"""``ltr server start | status | stop``: a Spark Connect server kept for a work_dir, which every later command on that
work_dir uses (``spark.remote: auto``), as a client that cannot start a JVM; a grid of its client stopped by SIGTERM
and by SIGKILL mid-node and started again; stopped, the server's processes are gone and the next command is classic
again."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.core.config import load_config
from pipelines.core.proctree import alive, python_workers, signal_pids
from tests.conftest import CHUNK_BYTES
from tests.helpers import cli_env, committed_files, path_results, run_in_steps, set_args, tiny_study, without_java

#: a server (a JVM of its own) and eight ltr processes, one after another
pytestmark = [pytest.mark.spark, pytest.mark.slow(minutes=1)]


def _ltr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.app.cli", *args],
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


#: The stopped grid's study: LambdaMART-30 and MSE-6 (a shared prefix node, then two continuations: 54 trees, far
#: more checkpoints than the stop waits for), a checkpoint every 2 trees, on one barrier worker of one thread, so
#: that its trees equal the shared classic session's bit for bit
GRID = tiny_study(
    "grid.experiment=connect-stop",
    "grid.trees=30",
    "grid.switch_points=[6]",
    "grid.strategies=[]",
    "train.workers=1",
    "train.nthread=1",
    "train.checkpoint_every=2",
    sections=["grid", "train"],
)


def _loaded_xgboost(pid: int) -> bool:
    """Whether the process ``pid`` has XGBoost's library loaded: a Python worker that trained (an idle worker
    of the ingest has not)."""
    try:
        return "libxgboost" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _frozen_mid_node(proc: subprocess.Popen, server: int, ckpt: Path, more: int, log: Path) -> set[int]:
    """Once the client ``proc``'s job has committed a checkpoint file (not before: a stop while XGBoost's workers
    join their tracker breaks them), the server's tree in steps until ``more`` files more than before are committed:
    the frozen pids. (``log``: the server's, told on a failure.)"""
    before = committed_files(ckpt)
    deadline = time.monotonic() + 240
    while committed_files(ckpt) == before and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if proc.poll() is not None:
        server_log = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"the grid ended before the stop: {proc.stderr.read().decode()[-3000:]}\n{server_log}")
    # the server's tree, not the client, runs the training: it is frozen between the looks
    return run_in_steps(server, lambda: committed_files(ckpt) >= before + more)


def _settled(ckpt: Path, quiet: float = 3.0) -> int:
    """The checkpoint files committed under ``ckpt`` once none more is committed for ``quiet`` s."""
    last, since = committed_files(ckpt), time.monotonic()
    while time.monotonic() - since < quiet:
        time.sleep(0.1)
        if committed_files(ckpt) != last:
            last, since = committed_files(ckpt), time.monotonic()
    return last


def _stop_a_grid_on_the_server_and_resume_it(spark, rec: dict, work: Path, dataset: str, sets: list[str]) -> None:
    """``ltr grid`` as the server's client, stopped mid-node twice, then to its end. Stopped by SIGTERM: its jobs on
    the server are interrupted (their Python workers end), it exits 143 in one line. Started again and SIGKILLed (a
    lost client, which tells the server nothing): its job on the server stops at its next trees
    (:class:`pipelines.execution.events.DriverGone`), or at its next checkpoint write, which the gone client's lease
    refuses (:class:`pipelines.store.lease.LeaseLost`), instead of training on to its end for nobody. Started again: it
    resumes from the checkpoints without retraining what was committed, and its trees and curves equal an
    uninterrupted classic grid's (the shared session's)."""
    from pipelines.app.grid import run_grid

    straight = work.parent / "straight"
    run_grid(spark, load_config(None, [f"work_dir={straight}", *GRID]), data=dataset)
    grid = [sys.executable, "-m", "pipelines.app.cli", "grid", "--data", dataset, *sets, *set_args(GRID)]
    server, ckpt, total = int(rec["pid"]), work / "checkpoints", committed_files(straight / "checkpoints")
    rng = random.Random(os.getpid())
    for how in ("SIGTERM", "SIGKILL"):
        proc = subprocess.Popen(
            grid, env=without_java(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        frozen: set[int] = set()
        try:
            frozen = _frozen_mid_node(proc, server, ckpt, rng.randint(1, 4), Path(rec["log"]))
            trainers = {p for p in frozen & set(python_workers(server)) if _loaded_xgboost(p)}  # (not the ingest's)
            assert trainers, "no Python worker of the server was training"
            if how == "SIGTERM":
                signal_pids(frozen - trainers, signal.SIGCONT)  # the server answers; its training workers stay frozen
                os.kill(proc.pid, signal.SIGTERM)
                _, err = proc.communicate(timeout=60)
                err, at_exit = err.decode(), committed_files(ckpt)
                assert proc.returncode == 143, err[-3000:]
                assert "ltr grid: stopped (SIGTERM)" in err and "Traceback" not in err, err[-3000:]
                # the server cancelled the client's jobs: it killed their frozen workers (spark.python.task.killTimeout)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and any(alive(p) for p in trainers):
                    time.sleep(0.05)
                assert not [p for p in trainers if alive(p)], "the stopped client's jobs ran on on the server"
                # and no job of the stopped client trains on: nothing is committed after its exit
                assert _settled(ckpt) == at_exit, (
                    "the stopped client's job trained on:\n" + Path(rec["log"]).read_text(errors="replace")[-3000:]
                )
            else:
                proc.kill()
                proc.wait()
                # the orphaned job goes on: until its next report to the client (DriverGone), or its next checkpoint
                # write, which the lease of its gone client refuses (LeaseLost), whichever comes first
                signal_pids(frozen, signal.SIGCONT)
                server_log, deadline = Path(rec["log"]), time.monotonic() + 120
                stops = ("the Spark Connect client at 127.0.0.1:", "lost the lease of node")
                while not any(m in (log := server_log.read_text(errors="replace")) for m in stops):
                    assert time.monotonic() < deadline, f"the lost client's job did not stop:\n{log[-3000:]}"
                    time.sleep(0.1)
                assert "is gone" in log, log[-3000:]
                assert _settled(ckpt) < total, f"the lost client's job trained on to its end:\n{log[-3000:]}"
        finally:
            signal_pids({p for p in frozen if alive(p)}, signal.SIGCONT)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    stamps = {p: p.stat().st_mtime_ns for p in ckpt.glob("*/trees-*.json")}
    resumed = subprocess.run(grid, env=without_java(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert re.search(r"grid connect-stop: parent run \w+ \(resumed\)", resumed.stderr), resumed.stderr[-3000:]
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # what was committed was not trained again
    ours, theirs = (path_results(load_config(None, [f"work_dir={w}", *GRID]), 1, dataset) for w in (work, straight))
    assert ours.keys() == theirs.keys() and len(ours) == 2
    for name in ours:
        assert ours[name] == theirs[name], name


def test_a_server_serves_the_commands_of_its_work_dir_until_stopped(spark, small_letor, small_dataset, tmp_path):
    from pipelines.app.server import _alive, session_config

    work = tmp_path / "work"
    sets = set_args([f"work_dir={work}", f"ingest.chunk_bytes={CHUNK_BYTES}"])
    started = _ltr("server", "start", *sets)
    assert started.returncode == 0, started.stderr[-3000:]
    rec = json.loads((work / "connect" / "server.json").read_text())
    try:
        assert started.stdout.startswith(f"Spark Connect server started at {rec['url']} (pid {rec['pid']}")
        assert rec["url"].startswith("sc://127.0.0.1:") and _alive(rec["pid"])
        again = _ltr("server", "start", *sets)  # one server a work_dir: the running one is named
        assert again.returncode == 0 and again.stdout.startswith(f"Spark Connect server runs already at {rec['url']}")
        # auto: this work_dir's commands are its clients; another work_dir's are classic
        cfg = load_config(None, [f"work_dir={work}"])
        assert session_config(cfg).remote == rec["url"]
        assert session_config(load_config(None, [f"work_dir={tmp_path / 'other'}"])).remote == ""
        out = work / "ds"
        ingested = _ltr("ingest", "--src", str(small_letor), "--out", str(out), *sets, env=without_java())
        assert ingested.returncode == 0, ingested.stderr[-3000:]
        assert f"Spark Connect session on {rec['url']}" in ingested.stderr
        # its progress from the server's reports: the last line counts every task of the ingest's jobs as done
        assert re.search(r"ingest: [\d.]+/([\d.]+) MB \(100%, (\d+)/\2 tasks\)", ingested.stderr), ingested.stderr
        # the same dataset as the classic session's ingest of the same files
        a = json.loads((out / "_manifest.json").read_text())
        b = json.loads((Path(small_dataset) / "_manifest.json").read_text())
        assert a["fingerprint"] == b["fingerprint"] and a["rows"] == b["rows"]
        _stop_a_grid_on_the_server_and_resume_it(spark, rec, work, str(out), sets)
        assert _ltr("server", "status", *sets).returncode == 0
    finally:
        stopped = _ltr("server", "stop", *sets)
    assert stopped.returncode == 0 and stopped.stdout.startswith(f"Spark Connect server stopped (pid {rec['pid']})")
    assert not _alive(rec["pid"]) and not (work / "connect" / "server.json").exists()
    status = _ltr("server", "status", *sets)
    assert status.returncode == 3 and status.stdout.startswith("no Spark Connect server runs for work_dir")
    assert session_config(cfg).remote == ""


def test_a_command_exits_75_while_the_work_dirs_server_starts_and_runs_classic_once_it_died(tmp_path, capsys):
    """A record of a server that is starting (its process lives, its port does not answer yet): ``auto`` refuses to
    start a classic session beside it (exit 75, one line), ``ltr server status`` says so (exit 75); once that
    process is gone, the record is ignored and the command is classic."""
    from pipelines.app.cli import main
    from pipelines.app.server import ServerStarting, session_config
    from pipelines.testing.processes import free_port

    work = tmp_path / "work"
    (work / "connect").mkdir(parents=True)
    proc = subprocess.Popen(["sleep", "60"])  # the server's process, not listening yet
    port = free_port()
    rec = {"pid": proc.pid, "port": port, "url": f"sc://127.0.0.1:{port}", "master": "local[*]",
           "started": 0, "log": str(work / "connect" / "server.log"), "state": "starting"}  # fmt: skip
    (work / "connect" / "server.json").write_text(json.dumps(rec))
    cfg = load_config(None, [f"work_dir={work}"])
    try:
        with pytest.raises(ServerStarting) as e:
            session_config(cfg)
        assert e.value.exit_code == 75 and "\n" not in str(e.value)
        assert f"is starting (pid {proc.pid}, sc://127.0.0.1:{port}" in str(e.value)
        assert main(["server", "status", "--set", f"work_dir={work}"]) == 75
        assert capsys.readouterr().out.startswith(f"Spark Connect server starting at sc://127.0.0.1:{port}")
        src, out = tmp_path / "letor", tmp_path / "dataset"
        src.mkdir()
        assert main(["ingest", "--src", str(src), "--out", str(out), "--set", f"work_dir={work}"]) == 75  # no JVM
        err = [line for line in capsys.readouterr().err.strip().splitlines() if " INFO " not in line]
        assert len(err) == 1 and "is starting" in err[0], err
    finally:
        proc.kill()
        proc.wait()
    assert session_config(cfg).remote == ""  # its process is gone: classic
    assert main(["server", "status", "--set", f"work_dir={work}"]) == 3


def test_the_server_cancels_a_lost_client_s_jobs_within_about_a_minute_unless_told_otherwise():
    """``ltr server start``'s properties: Spark's limits on an operation no client attaches to, shortened (a lost
    client's jobs of any kind are cancelled by the server within about a minute, not 7.5), unless spark-defaults.conf
    (``external``) or the config's ``spark.conf`` set them; the address is loopback."""
    from pipelines.app.server import ORPHAN_LIMITS, server_properties

    detached = "spark.connect.execute.manager.detachedTimeout"
    props = server_properties(load_config(None, []), "local[2]", 15002, {})
    assert {k: props[k] for k in ORPHAN_LIMITS} == ORPHAN_LIMITS
    assert props["spark.connect.grpc.binding.address"] == "127.0.0.1" and props["spark.scheduler.mode"] == "FAIR"
    limits = [int(v.removesuffix("s")) for v in ORPHAN_LIMITS.values()]
    assert sum(limits) <= 90  # the stream's end, the detached operation's wait, the next look
    mine = server_properties(load_config(None, [f"spark.conf.{detached}=10m"]), "local[2]", 15002, {})
    assert mine[detached] == "10m"
    outside = server_properties(load_config(None, []), "local[2]", 15002, {detached: "2m"})
    assert detached not in outside  # spark-submit reads it from spark-defaults.conf itself
