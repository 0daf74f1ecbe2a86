"""What a training worker's process needs around XGBoost: its collective, its threads, its device.

:class:`XgbComm` all-reduces small evaluation sums on XGBoost's collective (XGBoost all-reduces the
histograms itself); :class:`LocalComm` is the world of one worker the tests' local twin runs in.
:func:`openmp_threads` lets XGBoost use the threads a Spark task slot has; :func:`returning_freed_memory`
makes the C allocator give large freed buffers back to the OS while matrices are built (and reuse them
in the boosting loop); :func:`check_device` refuses a CUDA device that would silently fall back to
the CPU.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import xgboost as xgb


# ------------------------------------------------------------ collective
class Comm(Protocol):
    """The collective a worker sums its evaluation with: its ``rank``, the number of workers (``world``)."""

    rank: int
    world: int

    def allreduce(self, data: np.ndarray, op: str) -> np.ndarray:
        """``data`` reduced element-wise over every worker (``op``: ``"sum"`` or ``"max"``), the same on all."""
        ...

    def gather(self, obj: Any) -> list[Any]:
        """Every worker's ``obj`` (picklable), in rank order, the same list on all."""
        ...


class LocalComm:
    """A world of one worker."""

    rank = 0
    world = 1

    def allreduce(self, data: np.ndarray, op: str) -> np.ndarray:
        """``data`` itself (as an array): the reduction over one worker, whatever ``op``."""
        return np.asarray(data)

    def gather(self, obj: Any) -> list[Any]:
        """``[obj]``: the one worker's."""
        return [obj]


class XgbComm:
    """XGBoost's collective (must be initialised: inside ``CommunicatorContext``)."""

    def __init__(self) -> None:
        from xgboost import collective

        self._c = collective
        self.rank = collective.get_rank()
        self.world = collective.get_world_size()

    def allreduce(self, data: np.ndarray, op: str) -> np.ndarray:
        """``data`` summed or maximised element-wise over every worker of XGBoost's collective.

        Parameters
        ----------
        data : np.ndarray
            This worker's values (any shape; reduced as float64).
        op : str
            ``"sum"`` or ``"max"``.

        Returns
        -------
        np.ndarray
            float64, the shape of ``data``; the same on every worker.

        Raises
        ------
        KeyError
            For another ``op``.
        """
        ops = {"sum": self._c.Op.SUM, "max": self._c.Op.MAX}
        arr = np.ascontiguousarray(data, dtype=np.float64)
        return np.asarray(self._c.allreduce(arr, ops[op])).reshape(arr.shape)  # it returns a flat array

    def gather(self, obj: Any) -> list[Any]:
        """Every worker's ``obj``, in rank order: one broadcast from each rank (XGBoost's collective has no
        all-gather of objects). Not Spark's ``BarrierTaskContext.allGather``: each of its calls polls for the
        answer once a second (Spark's ``BarrierTaskContext.runBarrier`` sleeps 1 s between looks), so it cost
        every barrier job a second (benchmarks/RESULTS.md, "A small barrier job's fixed cost")."""
        return [self._c.broadcast(obj if r == self.rank else None, r) for r in range(self.world)]


# ------------------------------------------------------------ threads
def openmp_threads(n: int) -> list[str]:
    """Let OpenMP (XGBoost's threads) use ``n`` threads in this process; returns the runtimes set.

    PySpark starts Python workers with ``OMP_NUM_THREADS=1`` (one per task
    slot), and XGBoost caps ``nthread`` at ``omp_get_max_threads()``, so inside
    a Spark task ``nthread=2`` silently ran on one thread (benchmarks/RESULTS.md,
    "Figures moved out of the code"). Raise the limit of every OpenMP runtime already loaded,
    and the environment for any loaded later.
    """
    import ctypes

    os.environ["OMP_NUM_THREADS"] = str(n)
    done = []
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if any(x in line for x in ("libgomp", "libomp", "libiomp5"))}
    except OSError:  # not Linux: ask the loader for the usual names
        import ctypes.util

        libs = {p for name in ("gomp", "omp", "iomp5") if (p := ctypes.util.find_library(name))}
    for lib in sorted(libs):
        try:
            ctypes.CDLL(lib).omp_set_num_threads(int(n))
            done.append(lib)
        except (OSError, AttributeError):
            continue
    return done


#: While matrices are built: buffers from this size up get their own pages, which go back to the OS when freed.
MMAP_THRESHOLD = 1 << 20
#: Between builds (the boosting loop): glibc's largest mmap threshold, with a trim threshold twice that.
LOOP_MMAP_THRESHOLD = 32 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


@functools.cache  # looked up once a process: find_library may run ldconfig or a compiler
def _glibc() -> Any:
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


@contextmanager
def without_huge_pages() -> Iterator[bool]:
    """Inside: numpy's new arrays do not ask the kernel for transparent huge pages. Yields whether numpy's switch
    was found (False, and nothing changes, where this numpy has none).

    numpy marks every large new array ``madvise(MADV_HUGEPAGE)``. Where the kernel's THP ``defrag`` setting is
    ``madvise`` (common) and memory is fragmented (a node whose page cache is full of the data it read), the first
    touch of each 2 MiB page waits for the kernel to compact memory. A worker's load writes its codes once, a
    gigabyte at paper scale: joining them is several times slower with huge pages on a machine with a full page
    cache, and walking them every tree is no faster with them (benchmarks/RESULTS.md, "The worker's binning")."""
    switch = _numpy_huge_page_switch()
    if switch is None:
        yield False
        return
    before = switch(False)
    try:
        yield True
    finally:
        switch(before)


def _numpy_huge_page_switch() -> Any:
    """numpy's ``_set_madvise_hugepage`` (numpy 2's ``numpy._core``, numpy 1's ``numpy.core``), or None."""
    import importlib

    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            switch = getattr(importlib.import_module(module), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if switch is not None:
            return switch
    return None


@contextmanager
def returning_freed_memory(threshold: int = MMAP_THRESHOLD) -> Iterator[bool]:
    """Inside: glibc's malloc gives every freed buffer of ``threshold`` bytes or more back to the OS at once.
    After: what is free is given back (``malloc_trim``) and large buffers are reused from the heap again.

    Inside is where a worker's rows stream in as thousands of batch-sized buffers (a few MB each),
    freed once joined, and where XGBoost builds a quantised matrix and frees its build buffers.
    With glibc's adaptive threshold (up to 32 MiB) those sizes come from its heap, which keeps
    what is freed: the process then holds its data twice, about a gigabyte more at paper scale
    (RESULTS.md, "Memory"). A fixed 1 MiB threshold sends them to ``mmap`` instead.

    The boosting loop is the opposite case: each tree allocates and frees the same few buffers
    (margins, gradients: megabytes at paper scale). Mapped afresh each time, their pages are
    faulted in and zeroed every tree, which made the Python objective 13% dearer (RESULTS.md,
    "The allocator in the boosting loop"). So on leaving, the thresholds are fixed where glibc's
    adaptive ones end (32 MiB, trim at 64 MiB): those buffers stay in the heap and are reused.

    Yields False, and changes nothing, where the C library is not glibc.
    """
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, int(threshold))
    try:
        yield libc is not None
    finally:
        if libc is not None:
            libc.malloc_trim(0)
            libc.mallopt(_M_MMAP_THRESHOLD, LOOP_MMAP_THRESHOLD)
            libc.mallopt(_M_TRIM_THRESHOLD, 2 * LOOP_MMAP_THRESHOLD)


def check_device(device: str, probe: bool = True) -> None:
    """``train.device`` must be usable here: a CUDA device needs XGBoost built with CUDA (the ``xgboost``
    wheel, not ``xgboost-cpu``) and, with ``probe``, a visible GPU. XGBoost itself only warns and falls
    back to the CPU; a GPU study silently trained on CPUs is refused instead (ValueError, one line)."""
    if not device.startswith(("cuda", "gpu")):
        return
    if not xgb.build_info().get("USE_CUDA"):
        raise ValueError(
            f"train.device={device}: this XGBoost {xgb.__version__} has no CUDA support (is it "
            "xgboost-cpu?); install the full xgboost wheel, or use train.device=cpu"
        )
    if probe:
        b = xgb.train(
            {"device": device, "tree_method": "hist", "verbosity": 0},
            xgb.DMatrix(np.zeros((2, 1), np.float32), label=[0.0, 1.0]),
            1,
        )
        used = json.loads(b.save_config())["learner"]["generic_param"]["device"]
        if not used.startswith("cuda"):
            raise ValueError(
                f"train.device={device}: no visible GPU on {os.uname().nodename} (XGBoost would "
                "fall back to the CPU); check CUDA_VISIBLE_DEVICES and the driver, or use train.device=cpu"
            )
