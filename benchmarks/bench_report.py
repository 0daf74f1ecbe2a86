"""``ltr report`` before and after a change, side by side on one tracked study, and its TREC runs re-scored by
trec_eval.

    python -m benchmarks.bench_report --work WORK_DIR [--before REV] [--repeats 2] [--set KEY=VALUE ...]
                                      [--out FILE]

``WORK_DIR`` holds a finished study (``ltr run --set work_dir=WORK_DIR``, or ``ltr grid``). Each repeat runs
``ltr report`` as a fresh process with the code of git revision ``--before`` (a worktree under /tmp, put first on
PYTHONPATH; default: the last commit before issue 29's report) and then with this checkout's, each into its own
folder, and times it (wall seconds). Then:

* per system of Table 1: n (the pairs the t-test used) and the t-test p before and after (the paired tests
  left out the queries without a relevant document in issue 29);
* the TREC check: ``trec_eval -m ndcg_cut.k`` (pytrec_eval, trec_eval's C code) on every exported run against the
  fold's qrels of gains 2^label-1, per query against the child's per-query NDCG and per fold against Table 1's
  value, a query without relevant documents counted as ``metric.empty`` (trec_eval gives it 0) and the queries
  with a tie of different labels in their top k (where trec_eval's tie order differs) left out and counted.

Prints and writes (``--out``, default ``WORK_DIR/bench_report.json``) the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "7defc82"  # the last commit before issue 29 changed the report


def _worktree(rev: str) -> Path:
    path = Path(f"/tmp/ltr-before-{rev}")
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True)
    return path


def _report(code: Path, work: str, out: str, sets: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, "-m", "pipelines.app.cli", "report", "--set", f"work_dir={work}", "--out", out]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{code}: ltr report failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return wall


def _tests(out: str) -> dict[str, dict[str, object]]:
    rows = json.loads(Path(out, "table1.json").read_text())
    return {r["label"]: {"n": r.get("queries"), "t_p": r.get("t_p"), "delta": r.get("delta")} for r in rows}


def trec_check(out: str, empty: float) -> dict[str, object]:
    """trec_eval (pytrec_eval) on the report's runs against its per-query values and Table 1's fold means."""
    import csv

    import pytrec_eval

    rep = json.loads(Path(out, "report.json").read_text())
    trec = rep["trec"]
    k = trec["k"]
    per_query: dict[tuple[str, int], dict[int, tuple[float, int]]] = {}
    with open(Path(out, "per_query.csv")) as f:
        for row in csv.DictReader(f):
            per_query.setdefault((row["system"], int(row["fold"])), {})[int(row["qid"])] = (
                float(row[rep["metric_name"]]),
                int(row["relevant"]),
            )
    fold_means = {(s["system"], int(f)): v for s in rep["systems"] for f, v in s["per_fold"].items()}
    qrels_cache: dict[int, dict[str, dict[str, int]]] = {}
    worst_query, tied, compared, files = 0.0, 0, 0, 0
    worst_mean: float | None = None
    for name, info in trec["runs"].items():
        fold = info["fold"]
        if fold not in qrels_cache:
            qrels: dict[str, dict[str, int]] = {}
            gains = "exp2." if trec["gain"] == "exp2" else ""
            for line in Path(out, f"qrels/fold{fold}.{gains}qrels").read_text().splitlines():
                q, _, d, g = line.split()
                qrels.setdefault(q, {})[d] = int(g)
            qrels_cache[fold] = qrels
        run: dict[str, dict[str, float]] = {}
        for line in Path(out, name).read_text().splitlines():
            q, _, d, _, score, _ = line.split()
            run.setdefault(q, {})[d] = float(score)
        got = pytrec_eval.RelevanceEvaluator(qrels_cache[fold], {f"ndcg_cut.{k}"}).evaluate(run)
        ours = per_query.get((info["system"], fold))
        if ours is None:  # a seed repetition: Table 1 and the CSV hold the seed average
            continue
        files += 1
        values, differ = [], 0
        for qid, (mine, n_rel) in ours.items():
            theirs = got[str(qid)][f"ndcg_cut_{k}"]
            values.append(theirs if n_rel else empty)
            if n_rel:
                gap = abs(theirs - mine)
                if gap > 1e-9:
                    differ += 1  # checked below: only the queries the export counted as tied may differ
                else:
                    compared += 1
                    worst_query = max(worst_query, gap)
        if differ > info["tied_queries"]:
            raise SystemExit(f"{name}: {differ} queries differ from trec_eval, {info['tied_queries']} counted as tied")
        tied += differ
        if info["tied_queries"] == 0:  # None in the result where every run has a tie
            worst_mean = max(worst_mean or 0.0, abs(statistics.fmean(values) - fold_means[(info["system"], fold)]))
    return {
        "files_checked": files,
        "queries_equal_to_1e-9": compared,
        "queries_differing_all_tied": tied,
        "tied_queries_counted_by_export": sum(i["tied_queries"] for i in trec["runs"].values()),
        "max_abs_diff_per_query": worst_query,
        "max_abs_diff_fold_mean_untied_runs": worst_mean,
        "k": k,
        "gain": trec["gain"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--before", default=BEFORE)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--empty", type=float, default=1.0, help="metric.empty of the study (default 1.0)")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    work = os.path.abspath(a.work)
    before = _worktree(a.before)
    times: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(a.repeats):  # alternating, so that a change of the machine's speed hits both alike
        times["before"].append(_report(before, work, f"{work}/report-before", a.sets))
        times["after"].append(_report(ROOT, work, f"{work}/report-after", a.sets))
    b, af = _tests(f"{work}/report-before"), _tests(f"{work}/report-after")
    result = {
        "work": work,
        "before": a.before,
        "machine": f"{platform.node()} {os.cpu_count()} cpus",
        "seconds": times,
        "median": {k: statistics.median(v) for k, v in times.items()},
        "ratio_after_before": statistics.median(times["after"]) / statistics.median(times["before"]),
        "tests": {s: {"before": b.get(s), "after": af[s]} for s in af},
        "trec": trec_check(f"{work}/report-after", a.empty),
    }
    text = json.dumps(result, indent=1)
    print(text)
    Path(a.out or f"{work}/bench_report.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
