"""udfs.compile_once: a kernel compiled by one process of the machine, the others loading numba's cache. Real
processes, as Spark's Python workers are, each with its own numba dispatcher; what each did is read from numba's own
counters (a cache miss is a compilation, a hit a load)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from pipelines.testing.processes import ROOT
from udfs.compile_once import host_lock, lock_path

#: several Python processes, no Spark
pytestmark = pytest.mark.processes

KERNEL = """
import numba


@numba.njit(cache=True, nogil=True, parallel=True)  # parallel: a compilation of about a second, not a tenth
def weighted(x, w):
    s = 0.0
    for i in numba.prange(x.size):
        s += x[i] * w
    return s
"""

CHILD = """
import json, os, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import numpy as np
import kern
from udfs.compile_once import CompiledOnce
once = CompiledOnce(kern.weighted, wait_s=float(sys.argv[4]))
print("ready", flush=True)
go = sys.argv[3]  # a file whose existence starts the call ("" : at once)
while go and not os.path.exists(go):
    time.sleep(0.002)
t = time.perf_counter()
out = once(np.arange(4.0), 2.0)
stats = kern.weighted.stats
print(json.dumps({"out": out, "hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                  "seconds": time.perf_counter() - t}), flush=True)
"""


@pytest.fixture
def kernel_dir(tmp_path) -> Path:
    d = tmp_path / "kern"
    d.mkdir()
    (d / "kern.py").write_text(KERNEL)
    (tmp_path / "child.py").write_text(textwrap.dedent(CHILD))
    return d


def _start(kernel_dir: Path, go: str = "", wait_s: float = 300.0) -> subprocess.Popen:
    """A process that imports the kernel, says so, and calls it through :class:`CompiledOnce` once ``go`` exists."""
    env = dict(os.environ)  # NUMBA_CACHE_DIR, where set, as in this process: the same cache and lock
    proc = subprocess.Popen(
        [sys.executable, str(kernel_dir.parent / "child.py"), str(kernel_dir), str(ROOT), go, str(wait_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
    return proc


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _kernel_lock(kernel_dir: Path) -> str:
    sys.path.insert(0, str(kernel_dir))
    try:
        import kern

        return lock_path(kern.weighted)
    finally:
        sys.path.remove(str(kernel_dir))
        sys.modules.pop("kern", None)


def test_two_processes_at_once_compile_the_kernel_once(kernel_dir):
    """Two processes call the kernel at the same moment: one compiles it, the other loads what that one wrote."""
    go = kernel_dir.parent / "go"
    procs = [_start(kernel_dir, str(go)) for _ in range(2)]  # both have imported numba and the kernel
    go.write_text("")
    results = [_result(p) for p in procs]
    assert [r["out"] for r in results] == [12.0, 12.0]
    assert sorted((r["misses"], r["hits"]) for r in results) == [(0, 1), (1, 0)], results


def test_a_process_waits_for_the_compiling_one_and_loads_its_cache(kernel_dir):
    """While another process holds the kernel's lock (here: this test, compiling the kernel itself), a process
    reaching the kernel waits; once the lock is released it loads the kernel from the cache instead of compiling."""
    with host_lock(_kernel_lock(kernel_dir)) as held:
        assert held
        child = _start(kernel_dir)
        time.sleep(1.5)
        assert child.poll() is None  # waiting for the lock, not compiling
        sys.path.insert(0, str(kernel_dir))  # the kernel compiled here, its cache written, while the lock is held
        try:
            import kern

            assert kern.weighted(np.arange(4.0), 2.0) == 12.0  # not through the lock this test holds
        finally:
            sys.path.remove(str(kernel_dir))
            sys.modules.pop("kern", None)
    r = _result(child)
    assert (r["misses"], r["hits"]) == (0, 1) and r["seconds"] >= 1.0, r


def test_a_lock_held_past_the_wait_lets_the_process_compile_on_its_own(kernel_dir):
    with host_lock(_kernel_lock(kernel_dir)) as held:
        assert held
        r = _result(_start(kernel_dir, wait_s=0.5))
    assert (r["out"], r["misses"], r["hits"]) == (12.0, 1, 0), r


def test_the_lock_lies_beside_numbas_cache_of_the_kernel(kernel_dir):
    sys.path.insert(0, str(kernel_dir))
    try:
        import kern

        path = lock_path(kern.weighted)
        assert os.path.dirname(path) == kern.weighted.stats.cache_path
        assert os.path.basename(path) == f"kern.weighted.py{sys.version_info[0]}{sys.version_info[1]}.compile-lock"
    finally:
        sys.path.remove(str(kernel_dir))
        sys.modules.pop("kern", None)


def test_an_unwritable_lock_folder_compiles_without_a_lock(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with host_lock(str(blocker / "sub" / "k.lock")) as held:
        assert held is False


def test_the_ingest_kernels_give_what_they_gave():
    """The LETOR parser through its wrappers: the same rows as the reference parser (udfs/test_letor_parse.py
    checks every kernel against it; this checks the wrapped entry points are the ones parse_block calls)."""
    from udfs.letor_parse import LineSpec, count_lines, parse_block

    text = b"2 qid:7 1:0.5 3:1.25\n0 qid:7 2:3\n\n# a comment\n1 qid:9 1:-1e-3 #doc\n"
    buf = np.frombuffer(text, dtype=np.uint8)
    assert count_lines(buf) == 5
    block = parse_block(buf, LineSpec(n_features=3, min_label=0, max_label=4))
    assert block.qid.tolist() == [7, 7, 9] and block.label.tolist() == [2, 0, 1] and block.n_comment == 1
    np.testing.assert_array_equal(
        np.asarray(block.X), np.array([[0.5, 0, 1.25], [0, 3, 0], [-1e-3, 0, 0]], dtype=np.float32)
    )
