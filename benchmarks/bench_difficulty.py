"""Difficulty scoring speed, side by side on the same dataset and Spark session.

    python -m benchmarks.bench_difficulty --data DATASET [--repeat 2]

``DATASET`` is an ``ltr ingest`` output (the full-scale one: ``bench_ingest.py
--full-scale`` writes ``<work>/web30k_ds``). Contenders, alternating:

* ``ltr_difficulty``: :func:`pipelines.data.scoring.difficulty_scores`: reads the
  six columns it needs, no shuffle (the stored layout keeps queries whole),
  ``mapInPandas`` re-cut into whole queries, vectorised NDCG over thousands of
  queries per call;
* ``per_query_applyInPandas``: the straightforward way:
  ``groupBy("qid").applyInPandas`` with a function that sorts each query in
  pandas (:func:`udfs.difficulty.difficulty_one_query`).

Both are forced with a ``noop`` sink (full computation, no output cost); the
end-to-end ``ltr difficulty`` (Parquet output, summary) is timed too. The two
results are checked equal. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import pandas as pd

from pipelines.core.config import DifficultyConfig, SparkConfig
from pipelines.core.session import build_session
from pipelines.data.dataset import open_dataset
from pipelines.data.scoring import difficulty_scores, resolve_roles, run_difficulty
from udfs import schema
from udfs.difficulty import DIFFICULTY_DDL, difficulty_one_query
from udfs.metrics import NdcgSpec


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    spark = build_session(SparkConfig(driver_memory="6g", log_level="ERROR"))
    ds = open_dataset(args.data)
    roles = resolve_roles(ds, DifficultyConfig())
    spec = NdcgSpec()
    bm25, pr = schema.feature_col(roles.bm25), schema.feature_col(roles.pagerank)
    cols = [schema.SUBSET, schema.QID, schema.DOC, schema.LABEL, bm25, pr]

    def ours():
        return difficulty_scores(spark, ds, roles, spec)

    def baseline():
        df = spark.read.parquet(ds.path).select(*cols)
        return df.groupBy(schema.SUBSET, schema.QID).applyInPandas(
            lambda pdf: difficulty_one_query(pdf, bm25, pr, spec), DIFFICULTY_DDL
        )

    def timed(make) -> float:
        t0 = time.perf_counter()
        make().write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"ltr_difficulty": [], "per_query_applyInPandas": []}
    cold = timed(ours)
    for _ in range(args.repeat):
        times["ltr_difficulty"].append(timed(ours))
        times["per_query_applyInPandas"].append(timed(baseline))
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        summary = run_difficulty(spark, args.data, os.path.join(d, "scores"), DifficultyConfig(), spec)
        end_to_end = time.perf_counter() - t0
    a = ours().toPandas().sort_values([schema.SUBSET, schema.QID]).reset_index(drop=True)
    b = baseline().toPandas().sort_values([schema.SUBSET, schema.QID]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False, rtol=1e-9)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        json.dumps(
            {
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "dataset": args.data,
                "rows": ds.manifest["rows"],
                "queries": ds.manifest["queries"],
                "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()}
                | {"ltr_difficulty_cold": round(cold, 2)},
                "median_seconds": {k: round(v, 2) for k, v in med.items()},
                "speedup_vs_per_query": round(med["per_query_applyInPandas"] / med["ltr_difficulty"], 2),
                "ltr_difficulty_end_to_end_seconds": round(end_to_end, 2),
                "results_equal": True,
                "queries_scored": summary["queries"],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
