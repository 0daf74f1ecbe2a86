"""The whole training process, ours against what a user would reach for instead, side by side on one dataset and
machine: ``ltr train`` classic, ``ltr train`` as a client of a warm Spark Connect server, LightGBM's whole process
and xgboost.spark's ``SparkXGBRanker``'s (issue 68's figures).

    python -m benchmarks.bench_whole_process --data DATASET [--trees 100] [--repeats 2] [--work bench-out/whole]

Each run is a process of its own, timed from its start to its end (wall seconds), in alternation, ``--repeats``
rounds, on fold 1's training split (MSLR rotation: S1-S3):

- ``classic``: ``ltr train --path lambdamart:TREES`` (a JVM of its own; :func:`benchmarks.bench_first_tree.one_run`,
  which also reads its time to the first tree), with its validation and test curves after every tree (the product's
  default, which the references do not compute);
- ``connect``: the same with ``--set spark.remote=URL`` of a server ``ltr server start`` started, warmed by one run;
- ``lightgbm``: ``python -m benchmarks.bench_whole_process lightgbm``: the split read from the dataset's Parquet
  with pyarrow, LightGBM's ``lambdarank`` (64 leaves, eta 0.05, 256 bins, 2 threads, truncation 10, deterministic)
  for TREES rounds (``pip install lightgbm``: not in the project's lock);
- ``spark_xgb_ranker``: ``python -m benchmarks.bench_whole_process spark_xgb_ranker``: a classic local[2] session
  reads the split's Parquet and fits ``SparkXGBRanker`` (``rank:ndcg``, top-10 pairs, 64 leaves lossguide, eta 0.05,
  256 bins, one worker of 2 threads: what ``ltr train`` runs on a local master) for TREES rounds.

Writes ``WORK/results.json``, prints one JSON line a run and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.testing.processes import ROOT

KINDS = ("classic", "connect", "lightgbm", "spark_xgb_ranker")
ETA, LEAVES, BINS, THREADS, K = 0.05, 64, 256, 2, 10


def _split(data: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold 1's training rows: features (float32), labels, group sizes, rows in qid order."""
    from pipelines.data.dataset import open_dataset, scan_subsets
    from udfs import schema

    ds = open_dataset(data)
    feats = schema.feature_cols(ds.n_features)
    parts = list(scan_subsets(ds.path, ds.subsets(1, "train"), [schema.QID, schema.LABEL, *feats]))
    qid = np.concatenate([b.column(0).to_numpy() for b in parts])
    y = np.concatenate([b.column(1).to_numpy() for b in parts]).astype(np.float32)
    X = np.empty((qid.size, len(feats)), np.float32)
    at = 0
    for b in parts:
        for j in range(len(feats)):
            X[at : at + b.num_rows, j] = b.column(2 + j).to_numpy(zero_copy_only=False)
        at += b.num_rows
    order = np.argsort(qid, kind="stable")
    _, sizes = np.unique(qid[order], return_counts=True)
    return X[order], y[order], sizes


def lightgbm_process(data: str, trees: int) -> None:
    import lightgbm as lgb

    X, y, sizes = _split(data)
    params = {
        "objective": "lambdarank",
        "num_leaves": LEAVES,
        "learning_rate": ETA,
        "max_bin": BINS,
        "num_threads": THREADS,
        "lambdarank_truncation_level": K,
        "verbose": -1,
        "deterministic": True,
    }
    lgb.train(params, lgb.Dataset(X, y, group=sizes, params=params), num_boost_round=trees)


def spark_xgb_ranker_process(data: str, trees: int) -> None:
    from pyspark.sql import SparkSession
    from xgboost.spark import SparkXGBRanker

    from pipelines.data.dataset import load_split, open_dataset
    from udfs import schema

    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers' Python: this one (else the machine's python3)
    spark = (
        SparkSession.builder.master(f"local[{THREADS}]")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.task.cpus", str(THREADS))  # xgboost.spark's threads per worker (it refuses nthread)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ds = open_dataset(data)
    feats = schema.feature_cols(ds.n_features)
    df = load_split(spark, ds, 1, "train", [schema.QID, schema.LABEL, *feats]).drop(schema.SUBSET)
    ranker = SparkXGBRanker(
        features_col=feats,
        label_col=schema.LABEL,
        qid_col=schema.QID,
        num_workers=1,
        n_estimators=trees,
        objective="rank:ndcg",
        lambdarank_pair_method="topk",
        lambdarank_num_pair_per_sample=K,
        learning_rate=ETA,
        max_leaves=LEAVES,
        max_depth=0,
        grow_policy="lossguide",
        max_bin=BINS,
        tree_method="hist",
    )
    ranker.fit(df)
    spark.stop()


def _reference(kind: str, data: str, trees: int, log: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.bench_whole_process", kind, "--data", data, "--trees", str(trees)]
    t0 = time.time()
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"{kind} exited {rc}; see {log}")
    return {"process_s": round(time.time() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", nargs="?", choices=["lightgbm", "spark_xgb_ranker"], help="(one reference process)")
    p.add_argument("--data", required=True, help="an ingested dataset (ltr ingest), an absolute path")
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--work", default="bench-out/whole")
    a = p.parse_args(argv)
    if a.kind == "lightgbm":
        lightgbm_process(a.data, a.trees)
        return 0
    if a.kind == "spark_xgb_ranker":
        spark_xgb_ranker_process(a.data, a.trees)
        return 0

    from benchmarks.bench_first_tree import one_run
    from pipelines.app import server
    from pipelines.plugins.run_config import load_run_config

    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    cfg = load_run_config(None, [f"work_dir={work}"])
    url = server.start(cfg)["url"]
    runs: list[dict[str, Any]] = []
    try:
        one_run(ROOT, a.data, a.trees, work / "warm-up", [f"spark.remote={url}"])
        for r in range(a.repeats):
            for kind in KINDS:
                out = work / f"run{r}-{kind}"
                out.mkdir(parents=True, exist_ok=True)
                if kind in ("classic", "connect"):
                    sets = [f"spark.remote={url}"] if kind == "connect" else []
                    res = one_run(ROOT, a.data, a.trees, out, sets)
                else:
                    res = _reference(kind, a.data, a.trees, out / "log.txt")
                res = {"kind": kind, "round": r, **res}
                runs.append(res)
                print(json.dumps(res), flush=True)
    finally:
        server.stop(cfg)
    (work / "results.json").write_text(json.dumps({"data": a.data, "trees": a.trees, "runs": runs}, indent=1))
    for kind in KINDS:
        mine = [r for r in runs if r["kind"] == kind]
        med = {k: statistics.median(r[k] for r in mine) for k in ("process_s", "first_tree_s") if k in mine[0]}
        print(kind, json.dumps(med))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
