"""When do curricula help? ``conf/curricula.yaml``'s four cells ({clean, noisy labels} x {short, full budget}),
each a whole ``ltr run`` of the product, and their controls tables side by side.

    python -m benchmarks.bench_curricula [--queries 6000] [--trees 500] [--switch 200] [--short-trees 100]
                                         [--short-switch 40] [--noise 0.2] [--seeds 3] [--work bench-out/curricula]

Each cell runs ``ltr run --conf conf/curricula.yaml`` in a work directory of its own (generate, ingest, difficulty,
curricula, the grid, the report), so a stopped benchmark resumes from its checkpoints when run again with the same
arguments (finished children train 0 trees). Then, from each cell's ``report.json``: every system's mean test
NDCG@10, and per curriculum its difference with its anti-curriculum and with the random curriculum at the same
switch point (paired over the test queries, 95% bootstrap interval, Holm over the cell's comparisons), by kind
of difficulty. Writes ``WORK/curricula.md`` and ``WORK/curricula.json`` and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def cells(a: argparse.Namespace) -> dict[str, list[str]]:
    """Cell name -> its ``--set`` overrides of conf/curricula.yaml."""
    common = [f"generate.queries={a.queries}", f"grid.seeds={a.seeds}"]
    full = [f"grid.trees={a.trees}", f"grid.switch_points=[{a.switch}]"]
    short = [f"grid.trees={a.short_trees}", f"grid.switch_points=[{a.short_switch}]"]
    noisy = [f"generate.label_noise={a.noise}"]
    return {  # the full budgets first: the longest runs, and the ones the comparison needs most
        "clean, full": common + full,
        "noisy, full": common + full + noisy,
        "clean, short": common + short,
        "noisy, short": common + short + noisy,
    }


def run_cell(work: Path, name: str, overrides: list[str]) -> float:
    """``ltr run`` of one cell in ``work/<name>``; its seconds (a resumed cell: what was left)."""
    wd = work / name.replace(", ", "-")
    sets = [x for o in [f"work_dir={wd}", *overrides] for x in ("--set", o)]
    cmd = [sys.executable, "-m", "pipelines.app.cli", "run", "--conf", str(ROOT / "conf" / "curricula.yaml"), *sets]
    t0 = time.perf_counter()
    with open(wd.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    return time.perf_counter() - t0


def _delta(c: dict[str, Any] | None) -> str:
    if c is None:
        return "-"
    lo, hi = c["ci95_bootstrap"] or (None, None)
    mark = {"win": " W", "loss": " L"}.get(str(c.get("significance")), "")
    return f"{c['delta']:+.4f} [{lo:+.4f}, {hi:+.4f}]{mark}" if lo is not None else f"{c['delta']:+.4f}"


def tables(results: dict[str, dict[str, Any]]) -> str:
    """The Markdown: per cell, every system's mean; then per curriculum its differences with both controls."""
    out = []
    for name, r in results.items():
        rep = r["report"]
        out += [f"### {name} ({r['seconds']:.0f} s)", "", "| system | mean test NDCG@10 |", "|---|---|"]
        out += [f"| {s['system']} | {s['mean']:.4f} |" for s in rep["systems"]]
        out.append("")
    out += [
        "### Each curriculum minus its controls (95% bootstrap interval; W/L: Holm-significant win/loss)",
        "",
        "| curriculum | kind | " + " | ".join(f"{n}: - anti | {n}: - random" for n in results) + " |",
        "|---|---|" + "---|---|" * len(results),
    ]
    rows: dict[str, dict[str, Any]] = {}
    for name, r in results.items():
        for c in r["report"].get("controls") or []:
            rows.setdefault(c["strategy"], {"kind": c["kind"]})[name] = c
    for strategy, by in rows.items():
        cols = [f"{_delta(by[n]['anti'])} | {_delta(by[n]['random'])}" if n in by else "- | -" for n in results]
        out.append(f"| {strategy} | {by['kind']} | " + " | ".join(cols) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=6000)
    p.add_argument("--trees", type=int, default=500)
    p.add_argument("--switch", type=int, default=200)
    p.add_argument("--short-trees", type=int, default=100)
    p.add_argument("--short-switch", type=int, default=40)
    p.add_argument("--noise", type=float, default=0.2)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--work", default="bench-out/curricula")
    p.add_argument("--cells", default="", help="comma-separated cell names to run (default: all four)")
    a = p.parse_args(argv)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    todo = cells(a)
    if a.cells:
        todo = {k: v for k, v in todo.items() if k in a.cells.split(",")}
    results = {}
    for name, overrides in todo.items():
        seconds = run_cell(work, name, overrides)
        report = json.loads((work / name.replace(", ", "-") / "report" / "report.json").read_text())
        results[name] = {"seconds": seconds, "overrides": overrides, "report": report}
        print(f"{name}: {seconds:.0f} s", flush=True)
    md = tables(results)
    (work / "curricula.md").write_text(md)
    slim = {
        n: {"seconds": r["seconds"], "overrides": r["overrides"], "systems": r["report"]["systems"],
            "controls": r["report"].get("controls")}
        for n, r in results.items()
    }  # fmt: skip
    (work / "curricula.json").write_text(json.dumps({"machine": os.uname().nodename, "cells": slim}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
