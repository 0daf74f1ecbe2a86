"""Two trainings on one machine share it about fairly (pipelines.core.threads): two real processes, each the
worker loop a barrier task runs, started together, against one alone."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from pipelines.core import threads
from tests.helpers import cli_env

pytestmark = [pytest.mark.processes]

#: One training: the worker loop (LocalComm: the code a barrier task runs, without Spark) on an MSLR-shaped fold
#: generated in memory, LambdaMART in Python (numba's threads and XGBoost's, two OpenMP pools), all usable cores.
#: It says "ready" once its data and compiled kernels are there, trains when it reads "go", prints its seconds.
CHILD = r"""
import pipelines.worker  # first, as in a barrier task: the thread settings before XGBoost loads OpenMP
import json, sys, tempfile, time
import numpy as np
from pipelines.core.config import TrainConfig
from pipelines.core.threads import usable_cpus
from pipelines.data.dataset import Dataset
from pipelines.data.generate import mslr_queries, simulate_batch
from pipelines.execution.barrier_job import make_settings
from pipelines.kernel.loop import SplitData, WorkerData, run_nodes
from pipelines.plan.paths import parse_path
from pipelines.plan.trie import build_plan
from pipelines.store.checkpoints import CheckpointStore
from udfs.metrics import NdcgSpec

trees = int(sys.argv[1])
qid, n_docs, _ = mslr_queries(int(sys.argv[2]), 5)
y, X = simulate_batch(np.random.default_rng(5), n_docs)
sp = SplitData(X.astype(np.float32), y.astype(np.float32), np.repeat(qid, n_docs).astype(np.int32))
n = usable_cpus()
cfg = TrainConfig(workers=1, nthread=n, leaves=int(sys.argv[3]), eval_every=trees, score_dist_trees=[],
                  checkpoint_every=trees)
settings = make_settings(cfg, NdcgSpec(), Dataset(path="-", manifest={"label_range": [0, 4], "n_features": 136}), n)
data = WorkerData(sp, None, None)

def train(t):
    path = parse_path(f"lambdamart:{t}", "p")
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        run_nodes(data, build_plan([path]).nodes, settings, CheckpointStore(d))
        return time.perf_counter() - t0

train(2)  # numba's kernels and XGBoost's first matrices, out of the timing
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps({"seconds": train(trees), "rows": int(sp.y.size), "threads": n}), flush=True)
"""


#: The fold's queries (about 120 rows each) and the trees' leaves: a tiny training, 1-2 s alone.
QUERIES, LEAVES, TREES = 160, 16, 60


def _together(n: int, trees: int, env: dict[str, str]) -> list[float]:
    """``n`` trainings started together; each one's seconds."""
    args = [sys.executable, "-c", CHILD, str(trees), str(QUERIES), str(LEAVES)]
    procs = [
        subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) for _ in range(n)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:  # as close together as two writes
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        out = []
        for p in procs:
            assert p.stdout is not None
            out.append(json.loads(p.stdout.readline())["seconds"])
            p.wait(60)
        return out
    finally:
        for p in procs:
            p.kill()


@pytest.mark.skipif(threads.usable_cpus() < 2, reason="one CPU: no threads to wait for each other")
def test_two_concurrent_trainings_each_take_at_most_about_3x_one_alone():
    """Each of two trainings at once takes at most 3x the time of one alone (a fair share: 2x; libgomp's default
    spinning made it 12x on this 2-core machine, benchmarks/RESULTS.md). The better of two tries of each, so
    that a burst of another process's work on a loaded CI machine does not decide it."""
    env = cli_env()
    t0 = time.perf_counter()
    alone = min(_together(1, TREES, env)[0] for _ in range(2))
    both = min(max(_together(2, TREES, env)) for _ in range(2))
    ratio = both / alone
    took = time.perf_counter() - t0
    print(f"alone {alone:.2f} s, each of two at once at most {both:.2f} s: {ratio:.2f}x (the test: {took:.0f} s)")
    assert ratio <= 3.0, f"two trainings at once took {ratio:.1f}x one alone ({both:.2f} s against {alone:.2f} s)"
