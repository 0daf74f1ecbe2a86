"""``ltr server start | status | stop``: a Spark Connect server kept for a work_dir, which every later command on that
work_dir uses (``spark.remote: auto``), as a client that cannot start a JVM; stopped, its processes are gone and the
next command is classic again."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.core.config import load_config
from tests.conftest import CHUNK_BYTES
from tests.helpers import cli_env, set_args, without_java

#: a server (a JVM of its own) and five ltr processes, one after another
pytestmark = [pytest.mark.spark, pytest.mark.slow(minutes=1)]


def _ltr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.app.cli", *args],
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_server_serves_the_commands_of_its_work_dir_until_stopped(small_letor, small_dataset, tmp_path):
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
