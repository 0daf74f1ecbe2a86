"""One writer per plan node: a lease file in the checkpoint root.

Two processes must never train one node at once (an Airflow retry while the
previous attempt still runs, two grids sharing a prefix in one ``work_dir``):
they would interleave shards and delete each other's checkpoints. Before a
barrier job starts, the driver takes the lease of each of its nodes::

    ROOT/<node key>/_lease.json   {"key", "host", "machine", "pid", "token", "desc", "taken", "heartbeat",
                                   "expires", "ttl"}

The owner is the random ``token`` (host, pid and ``desc``, e.g. the command
line, are there for people). A lease expires ``ttl`` seconds after its last
heartbeat; :func:`hold` renews it from a daemon thread every ``ttl / 3``
seconds, so only a dead or stuck owner lets it expire, and an expired lease is
taken over by the next process that asks (with a warning naming the old owner).
An owner that ran on this machine (same host name, boot id and pid namespace:
``machine``) and whose pid is gone, or a zombie (:func:`pipelines.core.proctree.alive`),
counts as expired at once: a killed driver's retry does not wait out the ttl.
An owner that was presumed dead finds out at its next :meth:`Lease.renew`
(:class:`LeaseLost`), and its workers cannot write: shards, segments and the
commit of a checkpoint are fenced by the token (``lease_token=`` of
:class:`pipelines.store.checkpoints.CheckpointStore`'s writers), which is what
keeps a late writer out in the end, but for a window: the check and the write
after it are not one atomic step. The fence also refuses the token of a lease
that is no longer live (expired, or its owner on this machine gone) before
anyone takes it over: a job that outlived its driver (a Spark Connect client
that ended while the server ran its job on) stops at its next write.

Expiry compares ``time.time()`` of different hosts: their clocks must agree to
well within ``ttl`` (NTP does).

Atomicity
---------
* **Local filesystems** (a plain path or ``file://``, NFS included): a lease is
  created whole under a temporary name and hard-linked into place
  (``os.link`` fails if the file exists, like ``O_CREAT | O_EXCL``, and a
  reader never sees a half-written lease; where hard links are not supported
  ``os.open(O_CREAT | O_EXCL)`` is used). An expired lease is first renamed
  away to a unique name (of two racing processes only one rename succeeds),
  checked to be still expired (else it is put back), then the lease is created
  exclusively. Renewal writes the lease whole after checking it is still
  ours (:func:`pipelines.core.storage.put_atomic`: a temporary file renamed
  over it, on every filesystem). Left: a window of microseconds between that
  check and the replace in which an owner already late by ``2/3 ttl`` could
  overwrite its successor's fresh lease; the successor then gets
  :class:`LeaseLost` at its next renewal, and commits stay fenced by the token.
* **Other pyarrow filesystems** (``hdfs://``, ``s3://``, ``gs://``, ...): **no exclusion is guaranteed**, and
  none is claimed. ``pyarrow.fs`` has no exclusive create (HDFS ``create(overwrite=False)`` and S3 conditional
  puts are not exposed) and no atomic rename-over. What the lease does there is refuse a second writer in one
  line (:class:`LeaseHeld`, exit 75) whenever it can see one: a live lease of another owner when it asks; after
  writing its own, another owner's when it reads back :data:`SETTLE_S` seconds later (of writers racing within
  that second, only the one whose write landed last sees its own token); at each renewal, every ``ttl / 3``
  seconds (:class:`LeaseLost`). Two writers can both proceed only when the second's write lands after the
  first's read-back while the second read no lease before it wrote: a start within about a second of another's
  on the same node. Even then the token fences every checkpoint commit, so the loser's trees are never stored,
  and it stops at its next renewal. A renewal is written whole, as on local filesystems (on HDFS, which does
  not rename onto a file, the old lease is deleted just before the rename: a reader that finds no lease then
  reads again). The first lease a process takes on such a store says this in one log line.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import pyarrow.fs as pafs

from pipelines.core.errors import BusyError, crosses_tasks
from pipelines.core.locks import exclusive_create
from pipelines.core.proctree import alive
from pipelines.core.storage import FsRoot, put_atomic

log = logging.getLogger(__name__)

LEASE = "_lease.json"
DEFAULT_TTL = 120.0
DEFAULT_POLL = 1.0
SETTLE_S = 1.0  # non-local filesystems: how long a written lease settles before it is read back
_READ_TRIES = 4  # a lease briefly missing or unreadable (being replaced) is read again ...
_READ_PAUSE = 0.05  # ... this many seconds later


@functools.lru_cache(maxsize=1)
def _machine() -> str:
    """This kernel's boot id and this process's pid namespace: two containers that share a hostname (but
    not their pids) differ here, so neither reads the other's live pids as dead ("" where unknown)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def _dead_here(host: str, pid: int, machine: str) -> bool:
    """Whether ``pid`` is of this machine and pid namespace (same host name, boot id and namespace) and no
    longer runs (:func:`pipelines.core.proctree.alive`: gone, or a zombie not yet reaped by its parent). Where
    the machine is unknown (not Linux, an older lease file) only the ttl counts."""
    if host != socket.gethostname() or pid <= 0 or not machine or machine != _machine():
        return False
    return not alive(pid)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


@dataclass(frozen=True)
class LeaseInfo:
    """The content of a lease file: who holds node ``key`` and until when (``time.time()`` seconds)."""

    key: str
    host: str
    pid: int
    token: str
    desc: str
    taken: float
    heartbeat: float
    expires: float
    ttl: float
    machine: str = ""  # boot id / pid namespace of the owner (see _machine)

    def expired(self, now: float | None = None) -> bool:
        """Past its expiry, or held by a process of this host that is gone (a killed driver's lease is
        taken over at once instead of after its ttl; a reused pid only makes us wait for the expiry)."""
        return (time.time() if now is None else now) >= self.expires or _dead_here(self.host, self.pid, self.machine)

    def owner(self) -> str:
        """The owner in words: ``host h pid p (desc)``."""
        return f"host {self.host} pid {self.pid}" + (f" ({self.desc})" if self.desc else "")


class LeaseHeld(BusyError):
    """Another live process holds the lease of a node."""

    def __init__(self, key: str, holder: LeaseInfo) -> None:
        self.key, self.holder = key, holder
        left = holder.expires - time.time()
        super().__init__(
            f"node {key} is being written by another process: {holder.owner()} holds its lease until "
            f"{_when(holder.expires)} (in {max(left, 0.0):.0f} s, renewed while it runs); wait for that process to "
            "finish (or wait longer for the lease) or stop it; a lease whose owner died expires and is then taken "
            "over automatically"
        )


@crosses_tasks
class LeaseLost(BusyError):
    """Our lease of a node was taken over (we were presumed dead) or removed: stop writing the node."""

    def __init__(self, key: str, holder: LeaseInfo | None, what: str = "") -> None:
        self.key, self.holder = key, holder
        now = f"{holder.owner()} holds it now" if holder is not None else "its lease file is gone"
        super().__init__(
            f"lost the lease of node {key}{' ' + what if what else ''}: {now}; this process must stop "
            "writing the node (its lease expired, e.g. the process was stalled longer than the lease "
            "ttl, and another process took the node over)"
        )

    @classmethod
    def lapsed(cls, key: str, ours: LeaseInfo, what: str) -> LeaseLost:
        """Our lease of node ``key`` still names us but is not live: its owner on this machine is gone, or it
        expired without renewal (:meth:`LeaseInfo.expired`). Nobody renews it, and anyone may take it over."""
        if _dead_here(ours.host, ours.pid, ours.machine):
            why = f"its owner, {ours.owner()}, is gone"
        else:
            why = (
                f"it expired at {_when(ours.expires)} without renewal (its owner, {ours.owner()}, is gone or "
                f"was stalled longer than the lease ttl of {ours.ttl:g} s)"
            )
        return cls._said(
            f"lost the lease of node {key} {what}: {why}; this process must stop writing the node", key, ours
        )

    @classmethod
    def from_task(cls, message: str) -> LeaseLost:
        """The error raised in a Spark task, re-raised on the driver from its one-line message."""
        return cls._said(message, "", None)

    @classmethod
    def _said(cls, message: str, key: str, holder: LeaseInfo | None) -> LeaseLost:
        """A :class:`LeaseLost` whose message is ``message`` as it stands (not :meth:`__init__`'s sentence)."""
        err = cls.__new__(cls)
        RuntimeError.__init__(err, message)
        err.key, err.holder = key, holder
        return err


def _local(root: FsRoot) -> bool:
    return isinstance(root.fs, pafs.LocalFileSystem)


def _path(root: FsRoot, key: str) -> str:
    return root.lease_path(key)  # the checkpoint store names every path under its root


def _aside(path: str, why: str) -> str:
    """A unique name next to ``path`` (never a checkpoint's name: starts with ``_lease.json.``)."""
    return f"{path}.{uuid.uuid4().hex[:8]}.{why}"


def _parse(key: str, raw: bytes, mtime: float | None) -> LeaseInfo | None:
    try:
        d = json.loads(raw.decode())
        return LeaseInfo(**{f: d[f] for f in LeaseInfo.__dataclass_fields__ if f in d or f != "machine"})
    except (ValueError, KeyError, TypeError):
        if mtime is None:
            return None
        # unreadable (a writer died mid-write on a filesystem without exclusive create): held by nobody known,
        # until the default ttl after it was written
        return LeaseInfo(key, "?", -1, "", "unreadable lease file", mtime, mtime, mtime + DEFAULT_TTL, DEFAULT_TTL)


def _read_once(root: FsRoot, path: str, key: str, last: bool) -> tuple[bool, LeaseInfo | None]:
    """``(settled, info)``: ``info`` None if there is no lease file; ``settled`` False if it should be read again."""
    try:
        if _local(root):
            with open(path, "rb") as f:
                raw, mtime = f.read(), os.fstat(f.fileno()).st_mtime
        else:
            with root.fs.open_input_stream(path) as f:
                raw = f.read()
            mt = root.fs.get_file_info(path).mtime
            mtime = mt.timestamp() if mt is not None else time.time()
    except FileNotFoundError:
        return True, None
    except OSError:
        if not _local(root) and root.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return True, None
        raise
    info = _parse(key, raw, mtime if last else None)
    return info is not None, info


def read_lease(root: FsRoot, key: str, path: str | None = None) -> LeaseInfo | None:
    """The lease of node ``key`` (None: nobody holds it). A lease being replaced is read again."""
    path = path or _path(root, key)
    for i in range(_READ_TRIES):
        ok, info = _read_once(root, path, key, last=i == _READ_TRIES - 1)
        if ok:
            return info
        time.sleep(_READ_PAUSE)
    return info


def _read_ours(root: FsRoot, key: str) -> LeaseInfo | None:
    """The lease of ``key``, read again briefly if it is missing (a takeover attempt puts a live lease back)."""
    info = read_lease(root, key)
    for _ in range(_READ_TRIES - 1):
        if info is not None:
            break
        time.sleep(_READ_PAUSE)
        info = read_lease(root, key)
    return info


def _record(key: str, token: str, desc: str, ttl: float, taken: float | None = None) -> LeaseInfo:
    now = time.time()
    return LeaseInfo(
        key=key,
        host=socket.gethostname(),
        machine=_machine(),
        pid=os.getpid(),
        token=token,
        desc=desc,
        taken=now if taken is None else taken,
        heartbeat=now,
        expires=now + ttl,
        ttl=ttl,
    )


def _bytes(info: LeaseInfo) -> bytes:
    return json.dumps(asdict(info), sort_keys=True).encode()


# -- local filesystems: exclusive create (pipelines.core.locks.exclusive_create), rename-away takeover ----------
def _remove_local_if(path: str, key: str, pred: Callable[[LeaseInfo | None], bool]) -> tuple[bool, LeaseInfo | None]:
    """Rename the lease away; if ``pred(info)`` holds, delete it, else put it back.

    Returns ``(removed, info)``. Renaming first makes the check and the removal one step for other
    processes: of two racing removers only one rename succeeds.
    """
    aside = _aside(path, "old")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False, None
    info = None
    try:
        with open(aside, "rb") as f:
            info = _parse(key, f.read(), os.fstat(f.fileno()).st_mtime)
        if pred(info):
            return True, info
        try:
            os.link(aside, path)  # put back; fails if a third process created a lease meanwhile
        except FileExistsError:
            log.error(
                "node %s: the lease of %s was displaced by a concurrent taker; that owner will find out at its "
                "next renewal",
                key,
                info.owner() if info else "?",
            )
        return False, info
    finally:
        os.unlink(aside)


# -- generic pyarrow filesystems: write, settle, read back (no exclusion guaranteed) -----------------
_SAID: set[str] = set()  # the stores whose leases :func:`_say_no_exclusion` spoke of


def _say_no_exclusion(root: FsRoot) -> None:
    """Say once per store (in this process) that its leases refuse a second writer they see but cannot exclude one
    (the module's docstring, "Atomicity")."""
    where = f"{root.fs.type_name}:{root.path}"
    if where not in _SAID:
        _SAID.add(where)
        log.info(
            "leases in %s: this store has no exclusive create, so a lease refuses a second writer it sees but cannot "
            "exclude two that start a node within about %g s; their checkpoint commits stay fenced by the lease's "
            "token",
            where,
            SETTLE_S,
        )


def _write_remote(root: FsRoot, path: str, info: LeaseInfo) -> None:
    root.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with root.fs.open_output_stream(path) as f:
        f.write(_bytes(info))


class Lease:
    """Our lease of one node. Made by :func:`acquire`; ``token`` identifies the owner (pass it to the writers)."""

    def __init__(self, root: FsRoot, info: LeaseInfo) -> None:
        self.root, self.info = root, info
        self.key, self.token = info.key, info.token
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Lease({self.key!r}, {self.info.owner()}, expires {_when(self.info.expires)})"

    def check(self) -> bool:
        """Whether the lease file still names us (and has not expired)."""
        cur = _read_ours(self.root, self.key)
        return cur is not None and cur.token == self.token and not cur.expired()

    def renew(self) -> None:
        """Extend the expiry to ``ttl`` seconds from now.

        Raises
        ------
        LeaseLost
            The lease file names another owner or is gone: someone took the node over after our lease
            expired. The caller must stop writing the node.
        """
        with self._lock:
            path = _path(self.root, self.key)
            cur = _read_ours(self.root, self.key)
            if cur is None or cur.token != self.token:
                raise LeaseLost(self.key, cur, "while renewing it")
            info = _record(self.key, self.token, self.info.desc, self.info.ttl, taken=self.info.taken)
            put_atomic(self.root.fs, path, _bytes(info))  # a reader sees the old lease or the new one
            self.info = info

    def release(self) -> None:
        """Remove the lease file if it still names us (else leave the new owner's lease alone)."""
        with self._lock:
            path = _path(self.root, self.key)
            if _local(self.root):
                removed, cur = _remove_local_if(path, self.key, lambda i: i is not None and i.token == self.token)
            else:
                cur = read_lease(self.root, self.key)
                removed = cur is not None and cur.token == self.token
                if removed:
                    self.root.fs.delete_file(path)
            if removed:
                log.debug("node %s: lease released", self.key)
            elif cur is not None:
                log.warning("node %s: not releasing its lease: %s holds it now", self.key, cur.owner())


def _try_take(root: FsRoot, key: str, desc: str, ttl: float, token: str) -> Lease | LeaseInfo:
    """One attempt: our :class:`Lease`, or the live lease of another owner."""
    path = _path(root, key)
    for _ in range(8):  # each round ends in a lease, a live holder, or a lost race that changed the file
        cur = read_lease(root, key)
        if cur is not None and cur.token != token and not cur.expired():
            return cur
        if cur is not None and cur.token == token:  # ours already (taken again by the same owner)
            lease = Lease(root, cur)
            lease.renew()
            return lease
        if _local(root):
            if cur is not None:  # expired: rename it away if it is still the expired one, then create
                removed, old = _remove_local_if(path, key, lambda i: i is None or i.expired())
                if removed and old is not None:
                    log.warning(
                        "node %s: taking over the lease of %s, expired at %s (its owner died or stalled)",
                        key,
                        old.owner(),
                        _when(old.expires),
                    )
            info = _record(key, token, desc, ttl)
            if exclusive_create(path, _bytes(info)):  # the lease whole, unless one exists
                return Lease(root, info)
        else:
            if cur is not None:
                log.warning(
                    "node %s: taking over the lease of %s, expired at %s (its owner died or stalled)",
                    key,
                    cur.owner(),
                    _when(cur.expires),
                )
            info = _record(key, token, desc, ttl)
            _say_no_exclusion(root)
            _write_remote(root, path, info)
            time.sleep(SETTLE_S)
            now = read_lease(root, key)
            if now is not None and now.token == token:
                return Lease(root, now)
            if now is not None and not now.expired():
                return now
    raise RuntimeError(f"node {key}: the lease file {path} keeps changing; is something rewriting it?")


def acquire(
    root: FsRoot,
    key: str,
    owner_desc: str,
    *,
    ttl: float = DEFAULT_TTL,
    wait: float = 0.0,
    poll: float = DEFAULT_POLL,
    token: str | None = None,
) -> Lease:
    """Take the lease of node ``key``.

    Parameters
    ----------
    root
        The checkpoint root holding the node.
    key
        The node's content key.
    owner_desc
        Free text naming the owner for people (e.g. the command line), shown in :class:`LeaseHeld`.
    ttl
        Seconds the lease lives without a renewal (:meth:`Lease.renew`, or the heartbeat of :func:`hold`).
    wait
        Seconds to wait for a live lease of another owner to be released or to expire; 0 fails at once.
    poll
        Seconds between attempts while waiting.
    token
        The owner's token (default: a new random one); the leases of one job share one token.

    Returns
    -------
    Lease
        Ours; an expired lease of another owner is taken over (with a warning naming it).

    Raises
    ------
    LeaseHeld
        Another owner's live lease is still there after ``wait`` seconds.
    """
    if ttl <= 0 or wait < 0 or poll <= 0:
        raise ValueError(f"lease of node {key}: ttl ({ttl}) and poll ({poll}) must be > 0 and wait ({wait}) >= 0")
    token = token or uuid.uuid4().hex
    deadline = time.monotonic() + wait
    while True:
        got = _try_take(root, key, owner_desc, ttl, token)
        if isinstance(got, Lease):
            log.debug("node %s: lease taken (ttl %.0f s)", key, ttl)
            return got
        left = deadline - time.monotonic()
        if left <= 0:
            raise LeaseHeld(key, got)
        log.info("node %s: waiting for the lease held by %s (up to %.0f s more)", key, got.owner(), left)
        time.sleep(min(poll, left))


class HeldLeases:
    """The leases taken by :func:`hold`, all with one ``token``; ``lost`` names one taken over while held."""

    def __init__(self, leases: list[Lease], token: str) -> None:
        self.leases = {lease.key: lease for lease in leases}
        self.token = token
        self.lost: LeaseLost | None = None
        self._gone: set[str] = set()
        self._lock = threading.Lock()

    def add(self, lease: Lease) -> None:
        """Count ``lease`` among the held ones (renewed from the next heartbeat on, released at the end)."""
        with self._lock:
            self.leases[lease.key] = lease

    def check(self) -> None:
        """Raise :class:`LeaseLost` if one of the leases was found taken over."""
        if self.lost is not None:
            raise self.lost

    def renew(self) -> None:
        """Renew every lease still ours (the heartbeat's step).

        Raises
        ------
        LeaseLost
            One was taken over (recorded in ``lost``; the others are still renewed, now and later).
        """
        new = None
        with self._lock:
            leases = list(self.leases.items())
        for key, lease in leases:
            if key in self._gone:
                continue
            try:
                lease.renew()
            except LeaseLost as e:
                self._gone.add(key)
                self.lost = self.lost or e
                new = new or e
        if new is not None:
            raise new


@contextmanager
def hold(
    root: FsRoot,
    keys: Iterable[str],
    owner_desc: str,
    *,
    ttl: float = DEFAULT_TTL,
    wait: float = 0.0,
    poll: float = DEFAULT_POLL,
    heartbeat: bool = True,
) -> Iterator[HeldLeases]:
    """Hold the leases of nodes ``keys`` (all or none) while the block runs.

    Leases are taken in key order (so two holders of overlapping nodes cannot each wait for the other
    forever) within one ``wait`` budget; if one cannot be taken those already taken are released and
    :class:`LeaseHeld` is raised. While held, a daemon thread renews them every ``ttl / 3`` seconds
    (``heartbeat=False``: never; for tests and short blocks). They are released at exit.

    Yields
    ------
    HeldLeases
        Its ``token`` is what writers in other processes pass to
        :meth:`pipelines.store.checkpoints.CheckpointStore.commit` (``lease_token=``).
    """
    token = uuid.uuid4().hex
    deadline = time.monotonic() + wait
    held = HeldLeases([], token)
    stop = threading.Event()
    beat = None
    if heartbeat:  # from the first lease on: those taken stay alive while a later one is waited for
        beat = threading.Thread(
            target=_heartbeat, args=(held, stop, ttl / 3.0), daemon=True, name=f"lease-heartbeat-{token[:8]}"
        )
        beat.start()
    try:
        for key in sorted(set(keys)):
            held.add(
                acquire(
                    root, key, owner_desc, ttl=ttl, wait=max(deadline - time.monotonic(), 0.0), poll=poll, token=token
                )
            )
        yield held
    finally:
        stop.set()
        if beat is not None:
            beat.join()
        for lease in reversed(list(held.leases.values())):
            _release_quietly(lease)


def _heartbeat(held: HeldLeases, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        try:
            held.renew()
        except LeaseLost as e:
            log.error("%s", e)
        except OSError as e:  # storage hiccup: try again at the next beat (the ttl leaves two more)
            log.warning("could not renew node leases (will retry in %.0f s): %s", every, e)


def _release_quietly(lease: Lease) -> None:
    try:
        lease.release()
    except OSError as e:  # it expires by itself
        log.warning("node %s: could not release its lease (it expires by itself): %s", lease.key, e)


def verify_token(root: FsRoot, key: str, token: str) -> None:
    """Raise :class:`LeaseLost` unless the lease of node ``key`` names ``token`` and is live (the fence of a
    training task's writes). A lease that names ``token`` but expired, or whose owner on this machine is gone, is
    refused too (:meth:`LeaseLost.lapsed`): nothing renews it, anyone may take the node over, and the job writing
    under it has outlived its driver (a Spark Connect client that ended while its job still ran on the server:
    without this the job trained on to its last tree)."""
    cur = _read_ours(root, key)
    if cur is None or cur.token != token:
        raise LeaseLost(key, cur, "before committing a checkpoint")
    if cur.expired():
        raise LeaseLost.lapsed(key, cur, "before committing a checkpoint")
