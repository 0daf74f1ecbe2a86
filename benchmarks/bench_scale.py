"""Cost as the data grows past MSLR-WEB30K: every stage of the chain at 0.1x, 0.3x and 1x an Istella-sized set
and at Yahoo!'s size, with LightGBM and in-process XGBoost on the same rows beside our training.

    python -m benchmarks.bench_scale [--points istella:0.1,istella:0.3,istella:1,yahoo:1] [--trees 60]
                                     [--work bench-out/scale] [--keep-text] [--no-references]

Per point (``SHAPE:SCALE``: ``ltr generate --shape SHAPE`` with SCALE x the real set's queries, 33,018 for
Istella, 29,921 for Yahoo!), each stage is its own process, as a user runs it, on the local master (all cores):

* ``generate``: the LETOR text, streamed in batches of queries (never held whole);
* ``ingest``: ``ltr ingest`` (the preset detected from the layout);
* ``difficulty``: ``ltr difficulty``;
* ``curricula``: ``ltr curriculum --strategy q_nrel`` on fold 1 (the presets have no BM25 or PageRank);
* ``train``: ``ltr train --fold 1 --path lambdamart:T`` (64 leaves, eta 0.05, 256 bins: the defaults), with the
  time from the process start to its first tree and the worker's seconds per tree;
* ``lightgbm`` and ``xgb_train`` (unless ``--no-references``): LightGBM's ``lambdarank`` (64 leaves, 2 threads,
  255 bins, eta 0.05) and in-process ``xgb.train`` (``rank:ndcg``, lossguide 64 leaves, 256 bins, 2 threads) for
  T trees on the same training rows (read from the ingested Parquet), each in its own process: the matrix's build
  time apart from the trees'.

Recorded per stage: seconds, rows per second, the peak memory of the process tree (summed RSS, sampled every
0.2 s by :func:`benchmarks.bench_memory.run_sampled`: pages shared between processes count more than once, so it
is an upper bound) and the bytes the stage wrote (its output folder). ``WORK/results.json`` keeps every finished
stage, so a rerun (another session) goes on where the last stopped; ``--keep-text`` keeps the generated text
(else removed once ingested: 1x Istella is about 9 GB of it). The table at the end gives each stage's figures,
the growth exponents of time and peak memory against rows x features (a log-log fit over the Istella points:
1.0 = in proportion), and the references' per-tree times beside ours.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_memory import run_sampled

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30

#: Queries of the real sets (the 1x points).
QUERIES = {"istella": 33_018, "yahoo": 29_921}
STAGES = ("generate", "ingest", "difficulty", "curricula", "train", "lightgbm", "xgb_train")


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _ltr(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.app.cli", *args]


def reference_command(kind: str, data: Path, trees: int, out: Path) -> list[str]:
    """The command line of one reference run (:func:`reference`) in a process of its own."""
    return [sys.executable, "-m", "benchmarks.bench_scale", "--reference", kind, str(data), str(trees), str(out)]


def run_point(shape: str, scale: float, args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Every stage of one point not yet in ``results`` (saved after each)."""
    name = f"{shape}:{scale:g}"
    res = results.setdefault(name, {})
    d = Path(args.work) / f"{shape}-{scale:g}"
    d.mkdir(parents=True, exist_ok=True)
    text, data, diff, cur, model = d / "letor", d / "dataset", d / "difficulty", d / "cur-q_nrel", d / "model"
    queries = max(30, round(QUERIES[shape] * scale))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = d / "log.txt"

    def stage(key: str, cmd: list[str], out: Path, rows: int | None = None, extra: Any = None) -> None:
        if key in res:
            return
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        rc, secs, peak = run_sampled(cmd, ROOT, env, log)
        if rc != 0:
            raise SystemExit(f"{name} {key}: exit {rc}; see {log}")
        r: dict[str, Any] = {"seconds": round(secs, 2), "peak_tree_bytes": peak["tree"], "written_bytes": _du(out)}
        if rows:
            r["rows_per_s"] = round(rows / secs)
        if extra is not None:
            r.update(extra())
        res[key] = r
        _save(args.work, results)
        print(f"{name} {key}: {json.dumps(r)}", flush=True)

    if "generate" not in res and not (data / "_manifest.json").exists():
        cmd = _ltr("generate", "--shape", shape, "--queries", str(queries), "--out", str(text), "--seed", "7")
        stage("generate", cmd, text, extra=lambda: {"rows": json.loads((text / "generate.json").read_text())["rows"]})
    if "ingest" not in res:
        stage("ingest", _ltr("ingest", "--src", str(text), "--out", str(data)), data, extra=lambda: _manifest(data))
        res["ingest"]["rows_per_s"] = round(res["ingest"]["rows"] / res["ingest"]["seconds"])
        res["ingest"]["rows_per_s_per_core"] = round(res["ingest"]["rows_per_s"] / (os.cpu_count() or 1))
        _save(args.work, results)
        if not args.keep_text:
            shutil.rmtree(text, ignore_errors=True)
    rows = int(res["ingest"]["rows"])
    stage("difficulty", _ltr("difficulty", "--data", str(data), "--out", str(diff)), diff, rows)
    cmd = _ltr("curriculum", "--data", str(data), "--difficulty", str(diff), "--fold", "1", "--strategy", "q_nrel")
    stage("curricula", [*cmd, "--out", str(cur)], cur, rows)
    t0 = time.time()
    train = _ltr("train", "--data", str(data), "--fold", "1", "--path", f"lambdamart:{args.trees}", "--out", str(model))
    stage("train", [*train, "--set", f"work_dir={d / 'work'}"], model, extra=lambda: _train(model, t0, args.trees))
    if not args.no_references:
        for kind in ("lightgbm", "xgb_train"):
            out = d / f"{kind}.json"
            stage(
                kind,
                reference_command(kind, data, args.trees, out),
                out,
                extra=lambda out=out: json.loads(out.read_text()),
            )


def _manifest(data: Path) -> dict[str, Any]:
    m = json.loads((data / "_manifest.json").read_text())
    train = m["splits"]["1"]["train"]
    return {
        "rows": m["rows"],
        "queries": m["queries"],
        "features": m["n_features"],
        "train_rows": train["rows"],
        "quarantined": m["quarantine"]["lines"],
        "clamped": m.get("overflow", {}).get("values_clamped", 0),
        "preset": m["dataset"],
    }


def _train(model: Path, t0: float, trees: int) -> dict[str, Any]:
    s = json.loads((model / "_train.json").read_text())
    info = s["training"]
    job = (info.get("jobs") or [{}])[0]
    w = (job.get("worker_timings") or [{}])[0]  # rank 0's: boost + objective per tree, as bench_train reports
    r: dict[str, Any] = {"first_tree_s": round(info["first_tree_at"] - t0, 2) if "first_tree_at" in info else None}
    if w.get("trees"):
        r["per_tree_s"] = round((w.get("boost", 0.0) + w.get("objective", 0.0)) / w["trees"], 4)
    r["worker"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in w.items() if isinstance(v, int | float)}
    r["job_seconds"] = round(job.get("seconds", 0.0), 2)
    r["final_test"] = next((v for k, v in s["final"].items() if k.startswith("test_")), None)
    return r


# ------------------------------------------------------------------ references
class _FoldFiles:
    """Fold 1's training rows streamed from the ingested Parquet, one file decoded at a time.

    The references must run where the float32 rows do not fit (1x Istella: 7.2M x 220 = 6.3 GB, and LightGBM and
    XGBoost each want a copy beside their own binned matrix), so they read the rows as LightGBM's ``Sequence`` and
    XGBoost's ``DataIter`` ask for them: their peak is their binned matrix plus one file. Both need each query's
    rows together; the ingested files are written in the text's order, so the fold's files in part order hold
    every query in one run (checked: one run per qid, and (qid, doc) increasing inside each file).
    """

    def __init__(self, data: Path) -> None:
        import numpy as np
        import pyarrow.parquet as pq

        m = json.loads((data / "_manifest.json").read_text())
        self.feats = [f"f{j}" for j in range(1, m["n_features"] + 1)]

        def part(p: Path) -> int:
            digits = "".join(c for c in p.stem if c.isdigit())
            return int(digits) if digits else -1

        self.files = [
            f for sub in m["folds"]["1"]["train"] for f in sorted((data / f"subset={sub}").glob("*.parquet"), key=part)
        ]
        qids, labels, counts = [], [], []
        for f in self.files:
            t = pq.read_table(f, columns=["qid", "doc", "label"])
            q, d = t["qid"].to_numpy(), t["doc"].to_numpy()
            if q.size > 1 and not np.all((q[1:] > q[:-1]) | ((q[1:] == q[:-1]) & (d[1:] > d[:-1]))):
                raise SystemExit(f"{f}: rows not in (qid, doc) order; the streamed references need the ingest's order")
            qids.append(q)
            labels.append(t["label"].to_numpy().astype(np.float32))
            counts.append(q.size)
        qid = np.concatenate(qids)
        starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
        if starts.size != np.unique(qid).size:
            raise SystemExit(f"{data}: a query's rows lie in non-adjacent files; the references need them together")
        self.label = np.concatenate(labels)
        self.group = np.diff(np.r_[starts, qid.size])
        self.qid = np.repeat(np.arange(self.group.size, dtype=np.int32), self.group)  # 0.. in stream order
        self.counts = counts
        self.offsets = np.r_[0, np.cumsum(counts)]
        self._cached: tuple[int, Any] = (-1, None)

    def matrix(self, i: int) -> Any:
        """File ``i``'s features as a C-ordered float32 matrix (the last one asked for is kept)."""
        import numpy as np
        import pyarrow.parquet as pq

        if self._cached[0] != i:
            t = pq.read_table(self.files[i], columns=self.feats)
            X = np.empty((t.num_rows, len(self.feats)), np.float32)
            for j, f in enumerate(self.feats):
                X[:, j] = t[f].to_numpy()
            self._cached = (i, X)
        return self._cached[1]


def reference(kind: str, data: Path, trees: int, out: Path) -> None:
    """One reference run in this process, its matrix built from the fold's files streamed; figures to ``out``."""
    t0 = time.perf_counter()
    rows = _FoldFiles(data)
    t_load = time.perf_counter() - t0  # labels and query ids (the features are read while the matrix is built)
    if kind == "lightgbm":
        import lightgbm as lgb

        class FileSeq(lgb.Sequence):
            def __init__(self, i: int) -> None:
                self.i, self.batch_size = i, rows.counts[i]

            def __len__(self) -> int:
                return int(rows.counts[self.i])

            def __getitem__(self, idx: Any) -> Any:
                # LightGBM samples its bins' rows one at a time and wants them in float64; the batches it pushes
                # after may stay float32
                r = rows.matrix(self.i)[idx]
                return r.astype("float64") if r.ndim == 1 else r

        params = {
            "objective": "lambdarank",
            "num_leaves": 64,
            "learning_rate": 0.05,
            "max_bin": 255,
            "num_threads": 2,
            "lambdarank_truncation_level": 10,
            "eval_at": [10],
            "verbose": -1,
            "deterministic": True,
        }
        t1 = time.perf_counter()
        seqs = [FileSeq(i) for i in range(len(rows.files))]
        dtrain = lgb.Dataset(seqs, rows.label, group=rows.group, params=params, free_raw_data=True).construct()
        t_matrix = time.perf_counter() - t1
        rows._cached = (-1, None)
        t2 = time.perf_counter()
        lgb.train(params, dtrain, num_boost_round=trees)
    else:
        import xgboost as xgb

        class FileIter(xgb.DataIter):
            """A batch of files at a time (about 100 MB of float32): XGBoost passes over it several times."""

            per = 8

            def __init__(self) -> None:
                self.at = 0
                super().__init__(cache_prefix=None)

            def next(self, input_data: Any) -> bool:
                import numpy as np

                if self.at >= len(rows.files):
                    return False
                ids = range(self.at, min(self.at + self.per, len(rows.files)))
                lo, hi = rows.offsets[ids[0]], rows.offsets[ids[-1] + 1]
                input_data(
                    data=np.concatenate([rows.matrix(i) for i in ids]),
                    label=rows.label[lo:hi],
                    qid=rows.qid[lo:hi],
                )
                self.at = ids[-1] + 1
                return True

            def reset(self) -> None:
                self.at = 0

        t1 = time.perf_counter()
        dmat = xgb.QuantileDMatrix(FileIter(), max_bin=256, nthread=2)
        t_matrix = time.perf_counter() - t1
        rows._cached = (-1, None)
        params = {
            "objective": "rank:ndcg",
            "eta": 0.05,
            "tree_method": "hist",
            "grow_policy": "lossguide",
            "max_leaves": 64,
            "max_depth": 0,
            "max_bin": 256,
            "nthread": 2,
            "lambdarank_pair_method": "topk",
            "lambdarank_num_pair_per_sample": 10,
            "eval_metric": "ndcg@10",
        }
        t2 = time.perf_counter()
        xgb.train(params, dmat, num_boost_round=trees)
    t_trees = time.perf_counter() - t2
    out.write_text(
        json.dumps(
            {
                "rows": int(rows.label.size),
                "streamed": True,
                "load_s": round(t_load, 2),
                "matrix_s": round(t_matrix, 2),
                "trees_s": round(t_trees, 2),
                "per_tree_s": round(t_trees / trees, 4),
            }
        )
    )


# ------------------------------------------------------------------ table
def _save(work: str, results: dict[str, Any]) -> None:
    p = Path(work) / "results.json"
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
    tmp.replace(p)


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) on log(x): the growth exponent (1.0: in proportion)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else None


def table(results: dict[str, Any]) -> str:
    """Markdown: one row per point and stage, then the growth exponents and the references beside ours."""
    lines = [
        "| point | rows | features | stage | seconds | rows/s | peak (process tree) | written |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name, res in results.items():
        ing = res.get("ingest", {})
        for st in STAGES:
            r = res.get(st)
            if not r:
                continue
            lines.append(
                f"| {name} | {ing.get('rows', '')} | {ing.get('features', '')} | {st} | {r['seconds']:.1f} | "
                f"{r.get('rows_per_s', '')} | {r['peak_tree_bytes'] / GIB:.2f} GiB | "
                f"{r['written_bytes'] / 1e9:.2f} GB |"
            )
    lines += ["", "| point | train rows | ours: first tree | ours: s/tree | LightGBM s/tree | xgb.train s/tree |"]
    lines += ["|---|---:|---:|---:|---:|---:|"]
    for name, res in results.items():
        tr = res.get("train")
        if not tr:
            continue
        lg, xg = res.get("lightgbm", {}), res.get("xgb_train", {})
        lines.append(
            f"| {name} | {res['ingest']['train_rows']} | {tr.get('first_tree_s')} s | {tr.get('per_tree_s')} | "
            f"{lg.get('per_tree_s', '')} | {xg.get('per_tree_s', '')} |"
        )
    ist = [
        (res["ingest"]["train_rows"] * res["ingest"]["features"], res)
        for n, res in results.items()
        if n.startswith("istella") and "ingest" in res
    ]
    if len(ist) >= 2:
        lines += ["", "Growth exponents against rows x features over the Istella points (1.0: in proportion):"]
        for st in STAGES[1:]:
            for key in ("seconds", "per_tree_s", "peak_tree_bytes"):
                e = slope([w for w, _ in ist], [r.get(st, {}).get(key) for _, r in ist])
                if e is not None:
                    lines.append(f"- {st} {key}: {e:.2f}".replace("-0.00", "0.00"))  # flat, not "-0.00"
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default="istella:0.1,istella:0.3,istella:1,yahoo:1")
    p.add_argument("--trees", type=int, default=60)
    p.add_argument("--work", default="bench-out/scale")
    p.add_argument("--keep-text", action="store_true")
    p.add_argument("--no-references", action="store_true")
    p.add_argument("--reference", nargs=4, metavar=("KIND", "DATA", "TREES", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reference:
        kind, data, trees, out = args.reference
        reference(kind, Path(data), int(trees), Path(out))
        return 0
    if not args.no_references and importlib.util.find_spec("lightgbm") is None:
        # before any stage: the references run after a point's training, minutes into the first point
        raise SystemExit("LightGBM is not installed: pip install -e '.[bench]' (or run with --no-references)")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    rp = Path(args.work) / "results.json"
    results: dict[str, Any] = json.loads(rp.read_text()) if rp.exists() else {}
    for point in args.points.split(","):
        shape, scale = point.split(":")
        if shape not in QUERIES:
            raise SystemExit(f"--points: unknown shape {shape!r}; choose from {', '.join(QUERIES)}")
        run_point(shape, float(scale), args, results)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
