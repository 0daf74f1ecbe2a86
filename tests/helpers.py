"""Helpers of the tests: command-line overrides, the repository on ``PYTHONPATH``, freezing a running job's process
tree, report records. What the benchmarks also need (the repository's root, free ports, a standalone cluster, a
deployment) is in :mod:`pipelines.testing`; the shared Spark session is kept by :mod:`tests.spark_holder`; process
trees are walked and killed with :mod:`pipelines.core.proctree`, as the product does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import yaml

from pipelines.core.proctree import alive, signal_pids, signal_tree
from pipelines.testing.processes import ROOT

#: XGBoost parameters of the tests' small in-process boosters (the trainer's tree settings, small).
XGB_PARAMS = {
    "tree_method": "hist",
    "grow_policy": "lossguide",
    "max_depth": 0,
    "max_leaves": 8,
    "eta": 0.1,
    "max_bin": 64,
    "nthread": 1,
    "seed": 0,
}
#: The tests' tiny study (:func:`tiny_study`).
TINY_STUDY = Path(__file__).with_name("tiny_study.yaml")


def searchsorted_codes(X: np.ndarray, cuts: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Bin codes by their definition (the oracle of :class:`udfs.trees.Binner`): per feature, numpy's count of the
    cuts ``<= x``; NaN: ``MISSING``."""
    from udfs.trees import MISSING  # here: the helpers' other users need no numba

    indptr, values = cuts
    out = np.full(X.shape, MISSING, np.uint16)
    for j in range(X.shape[1]):
        ok = ~np.isnan(X[:, j])
        out[ok, j] = np.searchsorted(values[indptr[j] : indptr[j + 1]], X[ok, j], side="right")
    return out


@contextmanager
def component_settings(**settings: dict) -> Iterator[None]:
    """Components' own settings (``components.<name>`` of a config) set for the block, as a run sets them, and
    every component back to its defaults after it."""
    from udfs import components

    components.configure(settings)
    try:
        yield
    finally:
        components.configure({})


def set_args(overrides: Iterable[str]) -> list[str]:
    """``--set o`` for each override ``o`` (``section.key=value``): a command line's config."""
    return [a for o in overrides for a in ("--set", o)]


def tiny_study(*changes: str, sections: Iterable[str] | None = None) -> list[str]:
    """The tiny study (:data:`TINY_STUDY`) as ``section.key=value`` overrides of ``conf/default.yaml``, then
    ``changes`` (a later override of a key wins): for ``load_config(None, ...)``, :func:`set_args` or a DAG run's
    ``set``. ``sections``: only these sections of the file (``["train"]`` for an ``ltr train``)."""
    doc = yaml.safe_load(TINY_STUDY.read_text())
    over = [
        f"{section}.{key}={_flow(value)}"
        for section, entries in doc.items()
        if sections is None or section in sections
        for key, value in entries.items()
    ]
    return [*over, *changes]


def _flow(value: object) -> str:
    """``value`` as one line of YAML, as ``--set`` reads it (``[2]``, ``{}``, ``false``)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...")


def cli_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository on ``PYTHONPATH`` (for ``python -m pipelines.app.cli``)."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def without_java() -> dict[str, str]:
    """:func:`cli_env` with no Java to start: a Spark Connect client that reached for a JVM (a classic-only call)
    fails."""
    import shutil

    env = cli_env()
    java = shutil.which("java")
    hidden = {str(Path(java).resolve().parent), str(Path(java).parent)} if java else set()
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p not in hidden)
    env["JAVA_HOME"] = "/nonexistent-java-home"
    for k in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SPARK_REMOTE"):
        env.pop(k, None)
    return env


#: The pure-Python Spark Connect client (no JVM, no ``SparkContext``, no RDDs) of :func:`pyspark_client_python`: the
#: newest published (the 4.3 client is not), a minor older than the locked PySpark's server, which Connect serves.
PYSPARK_CLIENT = "pyspark-client==4.2.0"


def pyspark_client_python(folder: Path) -> Path:
    """A virtual environment in ``folder`` with :data:`PYSPARK_CLIENT` in place of PySpark and the project's other
    libraries (the lock's versions), built by uv from this interpreter; its Python. It cannot import the project
    (run it with :func:`without_java`'s ``PYTHONPATH``) and has none of PySpark's classic API: a Spark Connect user's
    environment, in which any classic-only call or import fails."""
    from importlib.metadata import requires

    uv = Path(sys.executable).parent / "uv"
    python = folder / "bin" / "python"
    libraries = [r for r in requires("ltr-curriculum") or [] if "extra ==" not in r and not r.startswith("pyspark")]
    links = ",".join(os.environ.get("PIP_FIND_LINKS", "").split())
    for cmd in (
        [uv, "venv", "-q", "--seed", "-p", sys.executable, folder],  # (--seed: pip, which MLflow asks the version of)
        [uv, "pip", "install", "-q", "-p", python, "-c", ROOT / "constraints.txt", PYSPARK_CLIENT, *libraries],
    ):
        proc = subprocess.run(
            [str(c) for c in cmd], capture_output=True, text=True, env={**os.environ, "UV_FIND_LINKS": links}
        )
        assert proc.returncode == 0, f"{cmd[:3]}: {proc.stderr[-3000:]}"
    return python


def shell_script(path: Path, *lines: str) -> Path:
    """An executable ``sh`` script at ``path`` (its folder made) of ``lines``: a stand-in for a Python of another
    environment, which ends by ``exec``-ing a real one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(["#!/bin/sh", *lines]) + "\n")
    path.chmod(0o755)
    return path


#: ``sitecustomize`` of :func:`python_without_project`: the project's packages import from a zip on the path only.
_ONLY_FROM_ZIPS = """
import importlib.machinery
import sys


class _OnlyFromZips:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in ("pipelines", "udfs"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if p.endswith(".zip")])
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec


sys.meta_path.insert(0, _OnlyFromZips)
"""


def python_without_project(folder: Path) -> Path:
    """A Python (a script in ``folder``) that runs this interpreter with its libraries but cannot import this project
    from the checkout (its ``sitecustomize`` lets the packages import from a zip on the path only): what a Spark
    server's workers are where the project is not installed; a ``pyfile`` artifact on their path still imports."""
    script = shell_script(
        folder / "python", f'export PYTHONPATH="{folder}${{PYTHONPATH:+:$PYTHONPATH}}"', f'exec {sys.executable} "$@"'
    )
    (folder / "sitecustomize.py").write_text(_ONLY_FROM_ZIPS)
    return script


def python_without_libraries(folder: Path) -> Path:
    """A Python (a script in ``folder``) that runs this interpreter without its site-packages (``-S``): neither the
    project nor its libraries (pyarrow, XGBoost ...) import, PySpark's own modules still do (from the paths Spark
    gives its workers). What a server's workers are where nothing of this project's is installed."""
    return shell_script(folder / "python", f'exec {sys.executable} -S "$@"')


def lower_priority(pids: Iterable[int], done: set[int]) -> None:
    """Give every thread of each of ``pids`` not in ``done`` the lowest CPU priority (nice 19), and add them to
    ``done``. Linux's nice belongs to a thread (setpriority on a pid reaches its main thread only), so each
    thread is set; threads and processes started later inherit it from the thread that starts them. A process
    that ended meanwhile is skipped."""
    import psutil

    for pid in set(pids) - done:
        done.add(pid)
        try:
            tids = [t.id for t in psutil.Process(pid).threads()]
        except psutil.Error:
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, 19)
            except OSError:  # the thread ended
                pass


def freeze_if(
    root: int, ready: Callable[[], bool], known: set[int] | None = None, lowered: set[int] | None = None
) -> set[int] | None:
    """Freeze the process tree of ``root`` whole (SIGSTOP, :func:`pipelines.core.proctree.signal_tree`) and call
    ``ready()``: if true, the tree stays frozen and its pids are returned (the caller kills or resumes it);
    else the tree goes on and None is returned. What ``ready`` reads (checkpoints, leases) is then the state the
    tree is frozen in: a test that acts on it cannot be overtaken by the training, however slowly the test's
    own process is scheduled (a loaded 2-core CI machine once let a unit finish between a test's look at its
    checkpoints and the kill that followed).

    ``known``: a set the caller keeps from one call to the next; its pids (the tree at the last call) are
    stopped before the walk, and it is replaced by the tree's pids of this call. A caller that freezes in
    steps thus stops the processes it knows at once, instead of letting them run on while every process of the
    machine is read (a CI run once saw a unit go from no checkpoint to its last tree within one step); a pid no
    longer below ``root`` is let go on.

    ``lowered``: a set the caller keeps too; each process of the tree is given the lowest CPU priority once
    (:func:`lower_priority`), so that between steps the caller's thread, at its own priority, wakes on time
    and the tree gets little CPU while it waits (a CI run saw a unit run 200 trees between two steps)."""
    early = set(known or ())
    signal_pids(early, signal.SIGSTOP)
    frozen = signal_tree(root, sig=signal.SIGSTOP)
    signal_pids(early - frozen, signal.SIGCONT)
    if lowered is not None:
        lower_priority(frozen, lowered)
    if known is not None:
        known.clear()
        known.update(frozen)
    if ready():
        return frozen
    signal_pids(frozen, signal.SIGCONT)
    return None


def wait_for_file(proc: subprocess.Popen, folder: Path, pattern: str, what: str, timeout: float = 240.0) -> None:
    """Poll every 10 ms until ``folder`` holds a path matching the glob ``pattern`` (a lease, a checkpoint), as
    long as ``proc`` runs. AssertionError naming ``what`` ended, with the tail of its stderr, if it ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not list(folder.glob(pattern)):
        time.sleep(0.01)
    assert proc.poll() is None, f"{what} ended before the kill: {proc.stderr.read().decode()[-3000:]}"


def run_in_steps(root: int, ready: Callable[[], bool], step: float = 0.05, timeout: float = 240.0) -> set[int]:
    """Let the tree of ``root`` run in steps of ``step`` s (:func:`freeze_if` between them) until ``ready()``
    holds in a frozen state: the frozen pids. AssertionError when ``root`` ends or ``timeout`` s pass first."""
    deadline, known = time.monotonic() + timeout, set[int]()
    while time.monotonic() < deadline:
        frozen = freeze_if(root, ready, known)
        if frozen is not None:
            return frozen
        if not alive(root):
            raise AssertionError(f"process {root} ended before its tree was ready")
        time.sleep(step)
    raise AssertionError(f"process {root}'s tree was not ready within {timeout:.0f} s")


def record(fold, strategy, switch, test, perq=(), dists=(), vali=None, code=None, run_id="", rel=None):
    """A report's :class:`~pipelines.report.records.Record` of one system on one fold, from its test curve
    (one point per tree; ``vali``: the same unless given), its per-query test NDCG ``perq`` (qid -> value),
    score distributions, code params, run id and relevant documents per query ``rel`` (qid -> count;
    default: one for every query of ``perq``)."""
    from pipelines.report.records import Record

    return Record(
        fold=fold,
        strategy=strategy,
        switch=switch,
        steps=list(range(1, len(test) + 1)),
        test=list(test),
        vali=list(test if vali is None else vali),
        per_query=dict(perq),
        relevant={q: 1 for q in dict(perq)} if rel is None else dict(rel),
        score_dists=list(dists),
        run_id=run_id,
        code=dict(code or {}),
    )


#: A password planted in a URI that must appear in no output (tests of pipelines.core.secrets).
PLANTED = "Pl4ntedSecret9"


def files_holding(root: Path, *needles: bytes, skip: Path | None = None) -> list[str]:
    """The files under ``root`` (relative paths, one per needle found) whose bytes hold one of ``needles``; the
    folder ``skip`` is not searched."""
    hits = []
    for p in root.rglob("*"):
        if skip is not None and (p == skip or skip in p.parents):
            continue
        if p.is_file() and not p.is_symlink():
            try:
                data = p.read_bytes()
            except OSError:
                continue
            hits += [str(p.relative_to(root)) for n in needles if n in data]
    return hits


def committed_files(checkpoints: Path) -> int:
    """Checkpoint files committed under a checkpoint store's folder: each checkpoint's record and each segment of
    trees (what a stop mid-node waits for)."""
    return len(list(checkpoints.glob("*/t*/_checkpoint.json"))) + len(list(checkpoints.glob("*/trees-*.json")))


def path_results(cfg, fold: int, data: str) -> dict[str, tuple[bytes, list[float], list[float]]]:
    """Every grid path's model and vali/test curves of ``fold``, read back from ``cfg``'s checkpoints."""
    from pipelines.app.grid import fold_results

    return {k: (r.model, r.vali, r.test) for k, r in fold_results(cfg, fold, data).items()}
