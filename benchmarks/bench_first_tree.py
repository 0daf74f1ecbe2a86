"""The time to the first tree, side by side: one ``ltr train`` per code tree, from a cold ``work_dir``, one after
the other on the same data and machine.

    python -m benchmarks.bench_first_tree --data DATASET --code OLD_CHECKOUT --code NEW_CHECKOUT
                                          [--trees 60] [--work bench-out/first-tree] [--repeats 1]

``--code`` is a checkout of the project (``git worktree add /tmp/old REV``); each run puts it first on
``PYTHONPATH`` and starts in an empty folder, so that ``python -m`` does not put the current checkout before it
(the interpreter is this one: the same libraries). Per run: seconds from the process start to the first tree
(``_train.json``'s ``training.first_tree_at``), the cuts' sample (from the log; absent when stored cuts were
reused, never here: the ``work_dir`` is new), the worker's load and quantised matrix, seconds per tree (boost and
objective), the job and the whole process, the final test NDCG and whether every model is byte-identical to
the first code tree's. The figures of 2026-11-27 are in benchmarks/RESULTS.md ("The time to the first tree,
again").
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
import time
from pathlib import Path
from typing import Any


def one_run(code: Path, data: str, trees: int, out: Path) -> dict[str, Any]:
    """``ltr train --path lambdamart:TREES`` on fold 1 by the code of ``code``; its figures."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pipelines.app.cli", "train", "--data", data, "--fold", "1"]
    cmd += ["--path", f"lambdamart:{trees}", "--out", str(out / "model"), "--set", f"work_dir={out / 'work'}"]
    env = {**os.environ, "PYTHONPATH": str(code)}
    t0 = time.time()
    with tempfile.TemporaryDirectory() as cwd, open(out / "log.txt", "w") as log:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
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
        "first_tree_s": round(info["first_tree_at"] - t0, 1),
        "cuts_s": float(cuts.group(1)) if cuts else None,
        "load_s": round(w["load"], 1),
        "dmatrix_s": round(w["dmatrix"], 1),
        "per_tree_s": round((w["boost"] + w["objective"]) / max(w["trees"], 1), 4),
        "job_s": round(job["seconds"], 1),
        "process_s": round(total, 1),
        "final_test": next(v for k, v in s["final"].items() if k.startswith("test_")),
        "model": str(out / "model" / "model.json"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="an ingested dataset (ltr ingest)")
    p.add_argument("--code", action="append", required=True, type=Path, help="a checkout (repeat: side by side)")
    p.add_argument("--trees", type=int, default=60)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--work", default="bench-out/first-tree")
    a = p.parse_args(argv)
    runs: list[dict[str, Any]] = []
    for r in range(a.repeats):
        for i, code in enumerate(a.code):
            res = one_run(code.resolve(), a.data, a.trees, Path(a.work).resolve() / f"run{r}-code{i}")
            res["identical_to_first"] = filecmp.cmp(res["model"], runs[0]["model"], shallow=False) if runs else True
            runs.append(res)
            print(json.dumps(res), flush=True)
    (Path(a.work) / "results.json").write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
