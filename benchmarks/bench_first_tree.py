"""The time to the first tree, side by side: one ``ltr train`` per code tree, from a cold ``work_dir``, one after
the other on the same data and machine.

    python -m benchmarks.bench_first_tree --data DATASET --code OLD_CHECKOUT --code NEW_CHECKOUT
                                          [--trees 60] [--work bench-out/first-tree] [--repeats 1]
                                          [--variant KEY=VALUE[,KEY=VALUE...] ...]

``--code`` is a checkout of the project (``git worktree add /tmp/old REV``); each run puts it first on
``PYTHONPATH`` and starts in an empty folder, so that ``python -m`` does not put the current checkout before it
(the interpreter is this one: the same libraries). Per run: seconds from the process start to the first tree
(``_train.json``'s ``training.first_tree_at``), the cuts' sample (from the log; absent when stored cuts were
reused, never here: the ``work_dir`` is new), the worker's load and quantised matrix, seconds per tree (boost and
objective), the job and the whole process, the final test NDCG, whether every model is byte-identical to
the first run's, and the peak memory (RSS sampled every 0.5 s, :func:`pipelines.core.proctree.tree_memory`) of
the process tree, of its JVM and of its largest PySpark Python process (the training worker).

``--variant``: config overrides (``--set``) for a run; each code tree runs once per variant (default: one run
without overrides), e.g. ``--variant train.codes_in_memory_gib=1000 --variant train.codes_in_memory_gib=0``
for the training codes in memory and in a local file. The figures of 2026-11-27 are in benchmarks/RESULTS.md
("The time to the first tree, again"; "The training codes in a local file").
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pipelines.core.proctree import tree_memory

GIB = 2**30


def one_run(code: Path, data: str, trees: int, out: Path, sets: list[str] | None = None) -> dict[str, Any]:
    """``ltr train --path lambdamart:TREES`` on fold 1 by the code of ``code`` (``sets``: ``--set`` overrides);
    its figures."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pipelines.app.cli", "train", "--data", data, "--fold", "1"]
    cmd += ["--path", f"lambdamart:{trees}", "--out", str(out / "model"), "--set", f"work_dir={out / 'work'}"]
    for kv in sets or []:
        cmd += ["--set", kv]
    env = {**os.environ, "PYTHONPATH": str(code)}
    peak = {"tree": 0, "jvm": 0, "worker": 0}
    t0 = time.time()
    with tempfile.TemporaryDirectory() as cwd, open(out / "log.txt", "w") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.5):
                for k, v in tree_memory(proc.pid).items():
                    peak[k] = max(peak[k], v)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rc = proc.wait()
        done.set()
        sampler.join()
    total = time.time() - t0
    text = (out / "log.txt").read_text()
    if rc != 0:
        raise SystemExit(f"{code}: ltr train exited {rc}; see {out / 'log.txt'}")
    s = json.loads((out / "model" / "_train.json").read_text())
    info, job = s["training"], s["training"]["jobs"][0]
    w = job["worker_timings"][0]
    cuts = re.search(r"histogram cuts from \d+ of \d+ training rows .* in ([\d.]+) s", text)
    return {
        "code": str(code),
        "sets": sets or [],
        "first_tree_s": round(info["first_tree_at"] - t0, 1),
        "cuts_s": float(cuts.group(1)) if cuts else None,
        "load_s": round(w["load"], 1),
        "dmatrix_s": round(w["dmatrix"], 1),
        "per_tree_s": round((w["boost"] + w["objective"]) / max(w["trees"], 1), 4),
        "job_s": round(job["seconds"], 1),
        "process_s": round(total, 1),
        "final_test": next(v for k, v in s["final"].items() if k.startswith("test_")),
        **{f"peak_{k}_gib": round(v / GIB, 2) for k, v in peak.items()},
        "model": str(out / "model" / "model.json"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="an ingested dataset (ltr ingest)")
    p.add_argument("--code", action="append", required=True, type=Path, help="a checkout (repeat: side by side)")
    p.add_argument("--trees", type=int, default=60)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--work", default="bench-out/first-tree")
    p.add_argument("--variant", action="append", default=None, help="KEY=VALUE[,KEY=VALUE...] (repeat)")
    a = p.parse_args(argv)
    variants = [v.split(",") for v in a.variant] if a.variant else [[]]
    runs: list[dict[str, Any]] = []
    for r in range(a.repeats):
        for i, code in enumerate(a.code):
            for j, sets in enumerate(variants):
                out = Path(a.work).resolve() / f"run{r}-code{i}-variant{j}"
                res = one_run(code.resolve(), a.data, a.trees, out, sets)
                res["identical_to_first"] = filecmp.cmp(res["model"], runs[0]["model"], shallow=False) if runs else True
                runs.append(res)
                print(json.dumps(res), flush=True)
    (Path(a.work) / "results.json").write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
