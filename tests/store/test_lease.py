"""One writer per plan node (``store.lease``) and atomic checkpoint files (``store.checkpoints``).

Races run in real processes (the spawn context: each its own interpreter), since a lease is only
worth something between processes that share nothing but the storage.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import re
import signal
import socket
import time
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest

from pipelines.core.proctree import kill_tree, signal_pids
from pipelines.store import lease as lease_mod
from pipelines.store.checkpoints import MARKER, CheckpointError, CheckpointStore
from pipelines.store.lease import LEASE, Lease, LeaseHeld, LeaseLost, acquire, hold, read_lease

KEY = "node0123abcd"
SPAWN = mp.get_context("spawn")


# -- children (top level: the spawn context imports this module in each) -----
def _racer(root: str, log_path: str, start, rounds: int, out) -> None:
    store = CheckpointStore(root)
    pid = os.getpid()
    for r in range(rounds):
        start.wait()
        try:
            lease = acquire(store, KEY, f"racer {pid}", ttl=30, wait=0)
        except LeaseHeld as e:
            out.put(("held", r, pid, str(e), e.holder.pid))
        else:
            with open(log_path, "a") as f:  # O_APPEND: whole lines
                f.write(f"{r} {pid} in {time.time()}\n")
            time.sleep(0.3)
            with open(log_path, "a") as f:
                f.write(f"{r} {pid} out {time.time()}\n")
            lease.release()
            out.put(("got", r, pid, "", pid))
        start.wait()  # every racer is done with this round before the next starts


def _waiter(root: str, out) -> None:
    store = CheckpointStore(root)
    out.put(("trying", time.time()))
    lease = acquire(store, KEY, "waiter", ttl=30, wait=10, poll=0.02)
    out.put(("got", time.time()))
    lease.release()


def _holder(root: str, ttl: float, out) -> None:
    lease = acquire(CheckpointStore(root), KEY, "doomed holder", ttl=ttl)
    out.put(lease.token)
    time.sleep(60)  # killed long before


def _join(procs: list, timeout: float = 30.0) -> None:
    for p in procs:
        p.join(timeout)
        if p.is_alive():
            kill_tree(p.pid)
            p.join()
            raise AssertionError("a child process hung")
        assert p.exitcode == 0, p.exitcode


# -- leases between processes ------------------------------------------------
def test_racing_processes_take_turns(tmp_path):
    """6 processes try at once, 3 rounds: one holder at a time, the others told who holds it."""
    n, rounds = 6, 3
    log_path = tmp_path / "holders.log"
    start, out = SPAWN.Barrier(n), SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_racer, args=(str(tmp_path / "ck"), str(log_path), start, rounds, out)) for _ in range(n)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in range(n * rounds)]
    _join(procs)

    lines = [ln.split() for ln in log_path.read_text().splitlines()]
    # no interleaving: every "in" is followed by the same holder's "out"
    assert len(lines) % 2 == 0
    for (r1, p1, w1, _), (r2, p2, w2, _) in zip(lines[::2], lines[1::2]):
        assert (r1, p1, w1) == (r2, p2, "in") and w2 == "out", lines
    intervals = sorted((float(a[3]), float(b[3])) for a, b in zip(lines[::2], lines[1::2]))
    assert all(end <= nxt for (_, end), (nxt, _) in zip(intervals, intervals[1:]))
    for r in range(rounds):
        got = {pid for what, rr, pid, _, _ in results if rr == r and what == "got"}
        held = [(msg, holder) for what, rr, _, msg, holder in results if rr == r and what == "held"]
        assert len(got) >= 1 and len(got) + len(held) == n
        assert len(got) == 1 or len(held) < n - 1  # (a second winner only if it came after the first left)
        for msg, holder in held:  # told who holds it, where, and what to do
            assert holder in got
            assert (
                f"node {KEY} is being written by another process: host {socket.gethostname()} pid {holder} "
                f"(racer {holder}) holds its lease until "
                in msg
                and "UTC" in msg
                and "stop it" in msg
            ), msg
    assert not list((tmp_path / "ck" / KEY).iterdir())  # every lease released, nothing left behind


def test_waiting_process_gets_the_lease_when_released(tmp_path):
    store = CheckpointStore(str(tmp_path))
    mine = acquire(store, KEY, "first")
    out = SPAWN.Queue()
    child = SPAWN.Process(target=_waiter, args=(str(tmp_path), out))
    child.start()
    assert out.get(timeout=30)[0] == "trying"
    time.sleep(0.5)
    released = time.time()
    mine.release()
    what, when = out.get(timeout=30)
    _join([child])
    assert what == "got" and released <= when < released + 2.0
    assert read_lease(store, KEY) is None


def test_a_stalled_owners_lease_expires_and_is_taken_over(tmp_path, caplog):
    """An owner that stops renewing (frozen with SIGSTOP: alive, stalled) loses its lease at expiry; when it
    comes back, its renewals and commits are refused."""
    store = CheckpointStore(str(tmp_path))
    out = SPAWN.Queue()
    child = SPAWN.Process(
        target=_holder, args=(str(tmp_path), 5.0, out)
    )  # 5 s: time for the steps below on a loaded machine
    child.start()
    dead_token = out.get(timeout=30)
    dead = read_lease(store, KEY)
    assert dead is not None and dead.token == dead_token and dead.pid == child.pid
    signal_pids([child.pid], signal.SIGSTOP)
    try:
        with pytest.raises(LeaseHeld, match=f"pid {child.pid} \\(doomed holder\\)"):
            acquire(store, KEY, "successor", wait=0)  # not expired yet: held, though its owner is stalled
        with caplog.at_level(logging.WARNING, logger="pipelines.store.lease"):
            new = acquire(store, KEY, "successor", ttl=30, wait=10, poll=0.05)
    finally:
        signal_pids([child.pid], signal.SIGKILL)
        child.join(10)
    assert time.time() >= dead.expires
    assert any(
        f"taking over the lease of host {dead.host} pid {child.pid} (doomed holder)" in r.getMessage()
        for r in caplog.records
    )
    assert read_lease(store, KEY).token == new.token and new.check()

    late = Lease(store, dead)  # the dead owner, had it only been stalled, comes back
    assert not late.check()
    with pytest.raises(
        LeaseLost,
        match=f"lost the lease of node {KEY} while renewing it: host .* pid {os.getpid()} "
        "\\(successor\\) holds it now; this process must stop writing the node",
    ):
        late.renew()
    with pytest.raises(LeaseLost, match="before committing a checkpoint"):
        store.commit(KEY, 4, {"shards": 0}, lease_token=dead_token)
    assert store.trees(KEY) == []
    late.release()  # not ours any more: left alone
    assert read_lease(store, KEY).token == new.token
    store.commit(KEY, 4, {"shards": 0}, lease_token=new.token)
    assert store.trees(KEY) == [4]
    new.release()
    with pytest.raises(LeaseLost, match="its lease file is gone"):
        store.commit(KEY, 5, {"shards": 0}, lease_token=new.token)


def test_a_killed_owner_on_this_host_is_taken_over_at_once(tmp_path, caplog):
    """A lease whose owner process on this host is gone (kill -9 of a driver) is not waited out; and until another
    process takes it, the gone owner's jobs cannot write under it (a job that outlived its driver: a Spark Connect
    client's, on a server that ran on)."""
    store = CheckpointStore(str(tmp_path))
    out = SPAWN.Queue()
    child = SPAWN.Process(target=_holder, args=(str(tmp_path), 600.0, out))
    child.start()
    token = out.get(timeout=30)
    store.commit(KEY, 2, {"shards": 0}, lease_token=token)  # the owner alive: its job commits
    signal_pids([child.pid], signal.SIGKILL)
    child.join(10)
    with pytest.raises(
        LeaseLost,
        match=f"lost the lease of node {KEY} before committing a checkpoint: its owner, host .* pid {child.pid} "
        "\\(doomed holder\\), is gone; this process must stop writing the node",
    ):
        store.commit(KEY, 4, {"shards": 0}, lease_token=token)
    with pytest.raises(LeaseLost, match="is gone"):
        store.write_shard(KEY, 4, 0, {"margin": np.zeros(3, np.float32)}, lease_token=token)
    assert store.trees(KEY) == [2]
    with caplog.at_level(logging.WARNING, logger="pipelines.store.lease"):
        new = acquire(store, KEY, "successor", wait=0)  # its ttl has 10 minutes left
    assert new.check() and any(f"pid {child.pid}" in r.getMessage() for r in caplog.records)
    new.release()


def test_a_zombie_owner_on_this_host_is_taken_over_at_once(tmp_path):
    """An owner that has exited but is not reaped yet (a zombie: its parent has not waited for it) runs no code
    and holds nothing: its lease is taken over at once, like a gone owner's (:func:`pipelines.core.proctree.alive`)."""
    store = CheckpointStore(str(tmp_path))
    out = SPAWN.Queue()
    child = SPAWN.Process(target=_holder, args=(str(tmp_path), 600.0, out))
    child.start()
    out.get(timeout=30)
    os.kill(child.pid, signal.SIGKILL)  # not joined: a zombie until child.join()
    try:
        deadline = time.monotonic() + 20
        while _state(child.pid) != "Z":
            assert time.monotonic() < deadline, f"pid {child.pid} did not become a zombie"
            time.sleep(0.02)
        new = acquire(store, KEY, "successor", wait=0)  # its ttl has 10 minutes left
        assert new.check()
        new.release()
    finally:
        child.join(10)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


# -- holding several nodes -----------------------------------------------------
def test_heartbeat_keeps_leases_alive_beyond_their_ttl(tmp_path):
    store = CheckpointStore(str(tmp_path))
    with hold(store, ["a", "b"], "grid", ttl=1.5) as held:  # renewed every 0.5 s: a thread starved for 1 s is fine
        time.sleep(3.2)  # more than two ttls
        for key in ("a", "b"):
            with pytest.raises(LeaseHeld):
                acquire(store, key, "intruder", wait=0)
            assert read_lease(store, key).token == held.token
        held.check()
    assert read_lease(store, "a") is None and read_lease(store, "b") is None


def test_without_heartbeat_a_held_lease_expires(tmp_path):
    """The control of the test above: the same wait without renewals loses the leases."""
    store = CheckpointStore(str(tmp_path))
    with hold(store, ["a"], "grid", ttl=0.45, heartbeat=False) as held:
        time.sleep(0.6)
        with pytest.raises(LeaseLost, match="before committing a checkpoint: it expired at .* without renewal"):
            store.commit("a", 2, {"shards": 0}, lease_token=held.token)  # still ours, but nothing renews it
        other = acquire(store, "a", "intruder", wait=0)
        with pytest.raises(LeaseLost):
            held.renew()
        with pytest.raises(LeaseLost):
            held.check()
    assert read_lease(store, "a").token == other.token  # exit did not release the intruder's lease


def test_hold_takes_all_or_none(tmp_path):
    store = CheckpointStore(str(tmp_path))
    other = acquire(store, "b", "other grid")
    with pytest.raises(LeaseHeld, match="node b is being written .*other grid"):
        with hold(store, ["c", "a", "b"], "grid", wait=0.2, poll=0.05):
            pass
    assert read_lease(store, "a") is None and read_lease(store, "c") is None
    assert read_lease(store, "b").token == other.token


def test_best_effort_lease_on_other_filesystems(tmp_path, monkeypatch, caplog):
    """A filesystem that is not LocalFileSystem takes the write / settle / read-back path, which refuses a second
    writer it sees, and says once that it cannot exclude one."""
    monkeypatch.setattr(lease_mod, "SETTLE_S", 0.01)
    store = CheckpointStore(str(tmp_path))
    store.fs = pafs.SubTreeFileSystem("/", pafs.LocalFileSystem())
    with caplog.at_level("INFO", logger="pipelines.store.lease"):
        first = acquire(store, KEY, "first", ttl=0.3)
        acquire(store, "other-node", "first").release()
    said = [r.getMessage() for r in caplog.records if "no exclusive create" in r.getMessage()]
    assert len(said) == 1 and "cannot exclude two that start a node within about" in said[0]
    with pytest.raises(LeaseHeld, match="first"):
        acquire(store, KEY, "second", wait=0)
    second = acquire(store, KEY, "second", wait=2, poll=0.05)  # after the first expired
    with pytest.raises(LeaseLost):
        first.renew()
    first.release()
    assert read_lease(store, KEY).token == second.token
    second.release()
    assert not (tmp_path / KEY / LEASE).exists()


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="ttl"):
        acquire(CheckpointStore(str(tmp_path)), KEY, "x", ttl=0)


# -- atomic checkpoint files ----------------------------------------------------
def _arrays(n: int) -> dict[str, np.ndarray]:
    return {"train_qid": np.arange(n, dtype=np.int32) // 3, "train_margin": np.linspace(0, 1, n, dtype=np.float32)}


def _names(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*"))


def _checkpoint(store: CheckpointStore, tree: int, **kw) -> None:
    store.write_shard(KEY, tree, 0, _arrays(tree + 3))
    store.write_segment(KEY, 0, tree, b'{"trees": %d}' % tree)
    store.commit(KEY, tree, {"shards": 1}, **kw)


def test_the_store_names_every_path_under_its_root_as_before(tmp_path):
    """Every path under the checkpoint root comes from the store; the layout must not change (existing studies
    resume): the same relative paths, byte for byte."""
    root = str(tmp_path)
    store = CheckpointStore(root + "/")
    assert store.node_dir(KEY) == f"{root}/{KEY}"
    assert store.node_dir(KEY, 40) == f"{root}/{KEY}/t000040"
    assert store.segment_path(KEY, 0, 40) == f"{root}/{KEY}/trees-000000-000040.json"
    assert store.lease_path(KEY) == f"{root}/{KEY}/_lease.json"
    assert store.runs_lock("run123") == "_runs/run123"
    assert store.lease_path(store.runs_lock("run123")) == f"{root}/_runs/run123/_lease.json"
    assert store.cuts_path("cutskey") == f"{root}/_cuts/cutskey.npz"
    assert store.plan_record_path("exp", 2) == f"{root}/_plans/92995afad568-fold2.json"  # sha256('"exp"')[:12]
    with hold(store, [store.runs_lock("run123")], "lock", heartbeat=False):
        assert (tmp_path / "_runs" / "run123" / LEASE).is_file()


def test_files_are_written_whole_and_read_back(tmp_path):
    store = CheckpointStore(str(tmp_path))
    _checkpoint(store, 2)
    _checkpoint(store, 2)  # rewritten by a retry: replaced in place
    (shard,) = store.shards(KEY, 2)
    for k, v in _arrays(5).items():
        np.testing.assert_array_equal(shard[k], v)
    assert store.segment(KEY, 0, 2) == b'{"trees": 2}'
    assert store.meta(KEY, 2) == {"shards": 1, "tree": 2}
    assert _names(tmp_path) == [MARKER, KEY, "shard-00000.npz", "t000002", "trees-000000-000002.json"]


def test_temp_files_and_the_lease_are_not_checkpoints(tmp_path):
    store = CheckpointStore(str(tmp_path))
    (tmp_path / KEY / "t000007").mkdir(parents=True)
    (tmp_path / KEY / "t000007" / ".shard-00000.npz.1a2b3c4d.tmp").write_bytes(b"half")
    (tmp_path / KEY / "t000008").mkdir()
    (tmp_path / KEY / "t000008" / f".{MARKER}.1a2b3c4d.tmp").write_text("{}")
    assert store.trees(KEY) == []
    with hold(store, [KEY], "grid", heartbeat=False) as held:
        _checkpoint(store, 3, lease_token=held.token)
        assert (tmp_path / KEY / LEASE).is_file()
        assert store.trees(KEY) == [3]


def test_a_commit_keeps_the_previous_checkpoint(tmp_path):
    store = CheckpointStore(str(tmp_path))
    for tree in (2, 4, 6):
        _checkpoint(store, tree)
    assert store.trees(KEY) == [4, 6]  # 4 is kept: a reader that listed it before 6 committed can still load it
    assert store.meta(KEY, 4)["tree"] == 4 and len(store.shards(KEY, 4)) == 1
    where = (
        f"checkpoint {tmp_path}/{KEY}/t000002 is gone: it was replaced by a newer checkpoint of the node "
        "(tree 6) after it was listed; list the checkpoints again"
    )
    with pytest.raises(CheckpointError, match=re.escape(where)):
        store.meta(KEY, 2)
    with pytest.raises(CheckpointError, match=re.escape(where)):
        store.shards(KEY, 2)
    with pytest.raises(CheckpointError, match=f"checkpoint {tmp_path}/{KEY}/t000009 does not exist"):
        store.meta(KEY, 9)


def test_reading_a_checkpoint_removed_under_the_reader(tmp_path):
    """Listed, then deleted before its shards are read (a reader slower than two commits)."""
    store = CheckpointStore(str(tmp_path))
    _checkpoint(store, 2)
    meta = store.meta(KEY, 2)
    _checkpoint(store, 4)
    _checkpoint(store, 6)
    assert meta["shards"] == 1
    with pytest.raises(CheckpointError, match=f"{tmp_path}/{KEY}/t000002 is gone: it was replaced"):
        store.shards(KEY, 2)
