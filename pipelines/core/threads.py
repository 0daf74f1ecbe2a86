"""How the project's processes run their OpenMP threads when the machine is shared, and how many they get.

Why: OpenMP's wait policy. A thread that reaches the end of a parallel region first spins (GNU libgomp: 300,000
spins by default) before it sleeps. XGBoost grows a tree in thousands of short parallel regions, so two processes
of two threads on two cores make every region wait for a thread the kernel has descheduled, while its own threads
spin away the time slice the other one needs; the same happens, more mildly, inside one training, where XGBoost's
libgomp (bundled in its wheel) and numba's (the system's, for the objectives' ``prange``) are two thread pools in
one process, each spinning while the other works.

:data:`SETTINGS` is the choice: ``GOMP_SPINCOUNT=1000`` (a thread spins about a microsecond, then sleeps), which
keeps a lone training as fast and lets two share a machine about fairly. The settings tried and their figures:
benchmarks/RESULTS.md, "Two trainings on one machine" (``python -m benchmarks.bench_sharing``). A user's own
``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` wins (:func:`thread_environment` then sets nothing). LLVM's and Intel's
OpenMP runtimes (``KMP_BLOCKTIME``) are not set: none is loaded here.

The settings reach every process that runs OpenMP: this process (:func:`apply`, before XGBoost or numba load
their runtime, which read the environment once), the Python workers of a local session (they inherit it), and a
cluster's executors (``spark.executorEnv.*``: :mod:`pipelines.core.session`). :func:`usable_cpus` is what a
process may run on (its CPU affinity and its cgroup's CPU quota), which the automatic thread count divides.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

#: The OpenMP settings of the project's processes (see the module docstring for the measurements).
SETTINGS = {"GOMP_SPINCOUNT": "1000"}

#: Variables by which a user chooses the wait policy: any of them set, the project sets none.
USER_CHOICE = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def thread_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The settings to add to ``env`` (default this process's environment): :data:`SETTINGS`, or nothing when the
    user has chosen a wait policy there."""
    env = dict(os.environ if env is None else env)
    if any(env.get(k) for k in USER_CHOICE):
        return {}
    return dict(SETTINGS)


def executor_thread_environment() -> dict[str, str]:
    """What an executor's Python workers get (``spark.executorEnv.*``): the wait policy of this process's
    environment where the user chose one, else :data:`SETTINGS`."""
    chosen = {k: os.environ[k] for k in USER_CHOICE if os.environ.get(k)}
    return chosen or dict(SETTINGS)


def apply() -> dict[str, str]:
    """Add :func:`thread_environment` to this process's environment (before XGBoost and numba load their OpenMP
    runtimes: they read it once); returns what was set."""
    added = thread_environment()
    os.environ.update(added)
    return added


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity (``os.sched_getaffinity``, where the OS has it) and its
    cgroup's CPU quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), rounded up; at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        n = min(n, max(1, math.ceil(quota)))
    return max(1, n)


def _cgroup_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs of this process's cgroup quota (None: no quota, or no cgroup file to read)."""
    try:
        v2 = (root / "cpu.max").read_text().split()
        if v2 and v2[0] != "max":
            return int(v2[0]) / int(v2[1])
        if v2:
            return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        q = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        p = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return q / p if q > 0 and p > 0 else None
    except (OSError, ValueError):
        return None
