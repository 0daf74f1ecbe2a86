"""Self-paced curricula: what a selection costs, and whether the model's own choice beats its controls.

    python -m benchmarks.bench_selfpaced cost --work WORK [--trees 100] [--every 10] [--repeats 2]
    python -m benchmarks.bench_selfpaced grid [--queries 6000] [--trees 500] [--switch 200] [--noise 0,0.2]
                                              [--seeds 3] [--work bench-out/selfpaced] [--reuse]

``cost``: on the dataset and difficulty scores of an earlier ``ltr run`` in ``WORK`` (``WORK/dataset``,
``WORK/difficulty``), fold 1, the per-tree cost of ``lambdamart@selfpaced:T`` against the static curriculum with the
same shares at the same trees (``lambdamart@paced.*:T`` of a ``q_nrel`` curriculum paced by the same function over
``T / every`` stages, built here by ``ltr curriculum``), each an ``ltr train`` run ``--repeats`` times in
alternation. Per-tree cost: rank 0's seconds building matrices, choosing queries, computing gradients, growing
trees, evaluating and checkpointing, over the trees (reading the rows, the same for both, left out).

``grid``: per label noise, ``ltr run --conf conf/curricula.yaml`` cut to LambdaMART, the best static curriculum of
the curricula benchmark (``q_nrel``) with its random control, and the self-paced trio (``grid.selfpaced``), at the
full budget, in ``WORK/noise<N>``; from each report: every system's mean test NDCG@10 and the self-paced curriculum
against its two controls, LambdaMART and ``q_nrel`` (paired over the test queries, 95% bootstrap interval).
Writes ``WORK/selfpaced.md`` and ``WORK/selfpaced.json``; ``--reuse`` takes a cell an earlier call finished.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "pipelines.app.cli"]
PARTS = ("dmatrix", "select", "objective", "boost", "eval", "checkpoint")


def _ltr(args: list[str], log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as out:
        subprocess.run([*CLI, *args], check=True, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    return time.perf_counter() - t0


def per_tree(summary: dict[str, Any]) -> dict[str, float]:
    """Rank 0's seconds per part and per tree from an ``ltr train`` summary (``_train.json``)."""
    job = summary["training"]["jobs"][0]
    w = next(t for t in job["worker_timings"] if t["rank"] == 0)
    trees = summary["trees"]
    parts = {k: float(w.get(k, 0.0)) for k in PARTS}
    return {**parts, "per_tree": sum(parts.values()) / trees, "job_seconds": job["seconds"], "rows": w["rows"]}


def cost(a: argparse.Namespace) -> int:
    work = Path(a.work).resolve()
    out = work / "selfpaced-cost"
    out.mkdir(exist_ok=True)
    stages = -(-a.trees // a.every)
    paced = out / "paced"
    if not (paced / "_curriculum.json").exists():
        _ltr(
            ["curriculum", "--data", str(work / "dataset"), "--difficulty", str(work / "difficulty"), "--fold", "1",
             "--strategy", "q_nrel", "--pacing", "root_n", "--stages", str(stages), "--delta", "0.25",
             "--out", str(paced), "--set", f"work_dir={out}"],
            out / "curriculum.log",
        )  # fmt: skip
    paths = {"static": f"lambdamart@q_nrel.*:{a.trees}", "selfpaced": f"lambdamart@selfpaced:{a.trees}"}
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in paths}
    for r in range(a.repeats):
        for name, path in paths.items():
            model = out / f"{name}-{r}"
            wd = out / f"work-{name}-{r}"  # a fresh checkpoint store: every tree trained
            sets = [f"work_dir={wd}", f"selfpaced.every={a.every}", "selfpaced.delta=0.25", "selfpaced.pacing=root_n"]
            args = ["train", "--data", str(work / "dataset"), "--fold", "1", "--path", path, "--out", str(model)]
            args += ["--curriculum", str(paced)] if name == "static" else []
            args += [x for s in sets for x in ("--set", s)]
            _ltr(args, out / f"{name}-{r}.log")
            rows[name].append(per_tree(json.loads((model / "_train.json").read_text())))
            print(f"{name} #{r}: {rows[name][-1]['per_tree'] * 1000:.1f} ms a tree", flush=True)
    best = {k: min(v, key=lambda x: x["per_tree"]) for k, v in rows.items()}
    ratio = best["selfpaced"]["per_tree"] / best["static"]["per_tree"]
    md = [
        f"Fold 1 of `{work / 'dataset'}` ({best['static']['rows']} training rows on rank 0), {a.trees} trees, a "
        f"selection every {a.every} (root_n from 0.25), best of {a.repeats}:",
        "",
        "| path | ms per tree | " + " | ".join(f"{p} s" for p in PARTS) + " | job s |",
        "|---|---|" + "---|" * len(PARTS) + "---|",
    ]
    for name, b in best.items():
        md.append(
            f"| `{paths[name]}` | {b['per_tree'] * 1000:.1f} | " + " | ".join(f"{b[p]:.2f}" for p in PARTS)
            + f" | {b['job_seconds']:.1f} |"
        )  # fmt: skip
    md += ["", f"Self-paced / static per-tree cost: {ratio:.2f}x.", ""]
    text = "\n".join(md)
    (out / "cost.md").write_text(text)
    (out / "cost.json").write_text(json.dumps({"rows": rows, "ratio": ratio}, indent=1))
    print(text)
    return 0


def _delta(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    lo, hi = c["ci95_bootstrap"]
    return f"{c['delta']:+.4f} [{lo:+.4f}, {hi:+.4f}]"


def grid(a: argparse.Namespace) -> int:
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    done_file = work / "cells.json"
    done = json.loads(done_file.read_text()) if done_file.exists() else {}
    out, slim = [], {}
    for noise in (float(x) for x in a.noise.split(",")):
        name = f"noise{noise:g}"
        wd = work / name
        sets = [f"work_dir={wd}", f"generate.queries={a.queries}", f"generate.label_noise={noise}",
                f"grid.trees={a.trees}", f"grid.switch_points=[{a.switch}]", "grid.strategies=[q_nrel, random]",
                "grid.anti=false", "grid.selfpaced=true", f"grid.seeds={a.seeds}"]  # fmt: skip
        if not (a.reuse and name in done):
            args = ["run", "--conf", str(ROOT / "conf" / "curricula.yaml")] + [x for s in sets for x in ("--set", s)]
            done[name] = _ltr(args, work / f"{name}.log")
            done_file.write_text(json.dumps(done, indent=1))
        rep = json.loads((wd / "report" / "report.json").read_text())
        means = {s["system"]: s["mean"] for s in rep["systems"]}
        comps = {c["system"]: c for c in rep["comparisons"]}
        ctl = next((c for c in rep.get("controls") or [] if c["strategy"] == "selfpaced"), None)
        out += [f"### {noise:.0%} label noise ({done[name]:.0f} s)", "",
                "| system | mean test NDCG@10 | - LambdaMART |", "|---|---|---|"]  # fmt: skip
        for s, m in means.items():
            c = comps.get(s)
            out.append(f"| {s} | {m:.4f} | {_delta({'delta': c['mean_delta'], **c}) if c else '-'} |")
        if ctl:
            out += ["", f"selfpaced-{a.switch} - antipaced: {_delta(ctl['anti'])}; - randompaced: "
                    f"{_delta(ctl['random'])}; beats both: {ctl['beats_both']}"]  # fmt: skip
        out.append("")
        slim[name] = {"seconds": done[name], "systems": rep["systems"], "controls": rep.get("controls")}
    text = "\n".join(out)
    (work / "selfpaced.md").write_text(text)
    (work / "selfpaced.json").write_text(json.dumps(slim, indent=1))
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--work", required=True)
    c.add_argument("--trees", type=int, default=100)
    c.add_argument("--every", type=int, default=10)
    c.add_argument("--repeats", type=int, default=2)
    g = sub.add_parser("grid")
    g.add_argument("--queries", type=int, default=6000)
    g.add_argument("--trees", type=int, default=500)
    g.add_argument("--switch", type=int, default=200)
    g.add_argument("--noise", default="0,0.2")
    g.add_argument("--seeds", type=int, default=3)
    g.add_argument("--work", default="bench-out/selfpaced")
    g.add_argument("--reuse", action="store_true")
    a = p.parse_args(argv)
    return cost(a) if a.what == "cost" else grid(a)


if __name__ == "__main__":
    raise SystemExit(main())
