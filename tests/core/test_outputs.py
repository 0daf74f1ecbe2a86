"""An output claimed by one process at a time, and what killed runs left beside it removed
(:mod:`pipelines.core.outputs`): with real processes holding and losing the lock."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from pipelines.core.errors import BusyError
from pipelines.core.outputs import _warn_remote, claim_output, forget_failed, leftovers, sweep_failed
from pipelines.core.storage import OutputError, atomic_output
from pipelines.testing.processes import ROOT

pytestmark = [pytest.mark.processes]


def _leftover(parent: Path, name: str, mb: float = 0.0) -> Path:
    d = parent / name
    (d / "subset=train").mkdir(parents=True)
    (d / "subset=train" / "part-0.parquet").write_bytes(b"x" * int(mb * 1e6))
    return d


def test_the_claim_knows_atomic_outputs_temporary_folder(tmp_path):
    """The name the claim sweeps is the one atomic_output writes to (one convention, in two modules)."""
    out = tmp_path / "ds"
    with atomic_output(str(out), "_manifest.json") as tmp:
        assert leftovers(str(out)) == [tmp.path]
        tmp.write_json("_manifest.json", {})
    assert leftovers(str(out)) == [] and (out / "_manifest.json").exists()


def test_a_claim_removes_what_stopped_runs_left_and_nothing_else(tmp_path, caplog):
    out = tmp_path / "ds"
    stale = _leftover(tmp_path, ".ds.tmp-0123456789ab", mb=2.5)
    old = _leftover(tmp_path, ".ds.tmp-ba9876543210.old")
    others = [_leftover(tmp_path, ".ds2.tmp-0123456789ab"), _leftover(tmp_path, ".other.tmp-0123456789ab")]
    (tmp_path / "ds.tmp-not-hidden").mkdir()
    with caplog.at_level(logging.WARNING, "pipelines.core.outputs"), claim_output(str(out)):
        assert not stale.exists() and not old.exists()
    assert all(o.exists() for o in others) and (tmp_path / "ds.tmp-not-hidden").exists()
    said = [r.getMessage() for r in caplog.records]
    assert any(f"removed {stale} (2.5 MB): a run writing {out} was stopped" in m for m in said), said
    assert len(said) == 2
    assert (tmp_path / ".ds.lock").read_text().strip() == str(os.getpid())


def test_an_output_that_cannot_be_written_is_refused_in_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match=rf"cannot write {tmp_path}/file/ds: {tmp_path}/file is not a folder"):
        with claim_output(str(tmp_path / "file" / "ds")):
            pass


def test_a_claim_is_reentrant_within_a_process_and_released_after(tmp_path):
    out = str(tmp_path / "sub" / "ds")  # its parent is made
    with claim_output(out), claim_output(out, None):
        pass
    with claim_output(out):  # released: claimed again
        pass


def _holder(out: Path, staging: bool) -> subprocess.Popen:
    """Another process: claims ``out``, opens its temporary folder (as a job would), says so and sleeps."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pipelines.core.outputs import claim_output
        from pipelines.core.storage import OutputError, atomic_output
        with claim_output({str(out)!r}):
            if {staging!r}:
                with atomic_output({str(out)!r}, "_manifest.json") as tmp:
                    open(tmp.path + "/part-0", "wb").write(b"x" * 1000)
                    print("held", flush=True)
                    time.sleep(120)
            print("held", flush=True)
            time.sleep(120)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_then_cleans_up_after_the_first_is_killed(tmp_path):
    """Two real processes: the one holding the claim is named; once it is killed (SIGKILL: nothing of its own
    runs), the lock is the kernel's to release, and the next claim removes its temporary folder."""
    out = tmp_path / "ds"
    first = _holder(out, staging=True)
    try:
        (left,) = leftovers(str(out))
        with pytest.raises(BusyError, match=rf"{out} is being written by another ltr process \(pid {first.pid}\)"):
            with claim_output(str(out)):
                pass
        assert os.path.isdir(left)  # refused: the holder's folder is not touched
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    with claim_output(str(out)):
        assert leftovers(str(out)) == []
    assert not out.exists()


def test_a_waiting_claim_takes_over_when_the_holder_ends(tmp_path):
    out = tmp_path / "ds"
    first = _holder(out, staging=False)
    t = time.monotonic()
    try:
        import threading

        threading.Timer(1.0, first.terminate).start()
        with claim_output(str(out), wait=True):
            waited = time.monotonic() - t
    finally:
        first.kill()
        first.wait()
    assert waited >= 0.9


def test_sweep_failed_cleans_an_output_whose_claim_ended_with_an_error(tmp_path):
    """A Spark task that was being cancelled may write into the temporary folder after atomic_output removed it;
    ``ltr`` sweeps again once Spark has stopped."""
    out = tmp_path / "ds"
    forget_failed()  # what earlier tests in this process left (as each ``ltr`` command does at its start)
    with pytest.raises(KeyboardInterrupt), claim_output(str(out)):
        with atomic_output(str(out), "_manifest.json") as tmp:
            raise KeyboardInterrupt
    late = _leftover(tmp_path, Path(tmp.path).name)  # what a late task wrote
    assert sweep_failed() == [str(out)]
    assert not late.exists() and sweep_failed() == []


def test_elsewhere_a_leftover_is_named_not_removed(tmp_path, caplog):
    """On a filesystem of many machines a lock says nothing of another machine's process: warn, keep."""
    left = _leftover(tmp_path, ".ds.tmp-0123456789ab")
    with caplog.at_level(logging.WARNING, "pipelines.core.outputs"):
        _warn_remote(pafs.LocalFileSystem(), str(tmp_path / "ds"), "s3://bucket/ds")
    assert left.exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"beside s3://bucket/ds: {left}, left by a run that was stopped or is running elsewhere; "
        "remove it once no run writes s3://bucket/ds"
    ]
