"""When do curricula help? ``conf/curricula.yaml``'s four cells ({clean, noisy labels} x {short, full budget}),
each a whole ``ltr run`` of the product, and their controls tables side by side.

    python -m benchmarks.bench_curricula [--queries 6000] [--trees 500] [--switch 200] [--short-trees 100]
                                         [--short-switch 40] [--noise 0.2] [--seeds 3] [--work bench-out/curricula]
                                         [--crossfit0]

Each cell runs ``ltr run --conf conf/curricula.yaml`` in a work directory of its own (generate, ingest, difficulty,
curricula, the grid, the report), so a stopped benchmark resumes from its checkpoints when run again with the same
arguments (finished children train 0 trees). Then, from each cell's ``report.json``: every system's mean test
NDCG@10, and per curriculum its difference with its anti-curriculum and with the random curriculum at the same
switch point (paired over the test queries, 95% bootstrap interval, Holm over the cell's comparisons), by kind
of difficulty; and what each cell's teachers cost (trees, rank 0's seconds from their checkpoints), with
``--crossfit0`` also the one teacher of ``teacher.crossfit: 0`` on the clean, full cell's data (``ltr grid
--setup-only``: the teacher and the curricula on it, no child). Writes ``WORK/curricula.md`` and
``WORK/curricula.json`` and prints the Markdown.
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


def cell_config(work: Path, name: str, overrides: list[str]) -> Any:
    """The resolved config of one cell (conf/curricula.yaml with its overrides and work directory)."""
    from pipelines.core.config import load_config

    wd = work / name.replace(", ", "-")
    return load_config(ROOT / "conf" / "curricula.yaml", [f"work_dir={wd}", *overrides])


def teacher_cost(cfg: Any) -> dict[str, Any]:
    """What fold 1's teachers cost, from their checkpoints (the product's record: rank 0's seconds per phase and
    the trees committed), and the seconds their scores took (the teacher scores' own log line is not kept: the
    summary has none, so only the teachers' training is counted here)."""
    from pipelines.core.layout import Layout
    from pipelines.data.dataset import open_dataset
    from pipelines.store.checkpoints import CheckpointStore
    from pipelines.study.design import plan_fold

    fp = plan_fold(cfg, open_dataset(Layout.of(cfg).data), 1)
    nodes = [k for p in fp.teachers for k in fp.plan.chains[p.label]]
    cost = CheckpointStore(Layout.of(cfg).checkpoints).cost(nodes)
    return {
        "crossfit": cfg.teacher.crossfit,
        "teachers": len(fp.teachers),
        "trees": sum(fp.plan.node(k).trees for k in nodes),
        "seconds": {k: round(v, 1) for k, v in sorted(cost.items())},
    }


def crossfit0_cost(work: Path, overrides: list[str]) -> dict[str, Any]:
    """The teacher of ``teacher.crossfit: 0`` (one teacher trained on every training query) on a clean cell's
    dataset, in a work directory of its own (``WORK/crossfit0``, so the cell's curricula stay as they are): ``ltr
    grid --setup-only`` computes the difficulty scores, trains the teacher and builds the curricula on it, trains
    no child; the wall seconds of that command and the teacher's checkpointed cost."""
    wd = work / "crossfit0"
    # the clean cells' data are the same bytes (the same generate settings): the full one's, else the short one's
    data = next((d for d in (work / "clean-full" / "dataset", work / "clean-short" / "dataset") if d.exists()), None)
    if data is None:
        raise SystemExit(f"--crossfit0 needs a clean cell's dataset under {work} (run clean-full or clean-short)")
    sets = [f"work_dir={wd}", f"grid.data={data}", *overrides, "teacher.crossfit=0"]
    conf = str(ROOT / "conf" / "curricula.yaml")
    cmd = [sys.executable, "-m", "pipelines.app.cli", "grid", "--conf", conf, "--setup-only"]
    cmd += [x for o in sets for x in ("--set", o)]
    t0 = time.perf_counter()
    with open(work / "crossfit0.log", "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    seconds = time.perf_counter() - t0
    from pipelines.core.config import load_config

    cfg = load_config(ROOT / "conf" / "curricula.yaml", sets)
    return {**teacher_cost(cfg), "setup_seconds": seconds}


def _delta(c: dict[str, Any] | None) -> str:
    if c is None:
        return "-"
    lo, hi = c["ci95_bootstrap"] or (None, None)
    mark = {"win": " W", "loss": " L"}.get(str(c.get("significance")), "")
    return f"{c['delta']:+.4f} [{lo:+.4f}, {hi:+.4f}]{mark}" if lo is not None else f"{c['delta']:+.4f}"


def _teacher_line(t: dict[str, Any]) -> str:
    sec = t["seconds"]
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in sec.items() if k != "trees")
    how = f"cross-fitted over {t['crossfit']} groups" if t["crossfit"] else "one teacher on every training query"
    return f"Teachers ({how}): {t['teachers']} teacher(s), {t['trees']} trees; rank 0's seconds: {parts}."


def tables(results: dict[str, dict[str, Any]]) -> str:
    """The Markdown: per cell, every system's mean; then per curriculum its differences with both controls."""
    out = []
    for name, r in results.items():
        rep = r["report"]
        out += [f"### {name} ({r['seconds']:.0f} s)", "", "| system | mean test NDCG@10 |", "|---|---|"]
        out += [f"| {s['system']} | {s['mean']:.4f} |" for s in rep["systems"]]
        out.append("")
        t = r.get("teachers")
        if t:
            out += [_teacher_line(t), ""]
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
    p.add_argument(
        "--cells",
        default="",
        help="comma-separated cells to run, by their folder names: clean-full, noisy-full, clean-short, noisy-short "
        "(default: all four)",
    )
    p.add_argument(
        "--crossfit0", action="store_true", help="also time the crossfit-0 teacher on the clean, full cell's data"
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="take a cell that an earlier run of this command finished (WORK/cells.json) as it is, without `ltr run`"
        " (a cell run again by later code may retrain: its curricula's code is in their keys)",
    )
    a = p.parse_args(argv)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    todo = cells(a)
    if a.cells:
        wanted = {c.strip() for c in a.cells.split(",")}
        unknown = wanted - {k.replace(", ", "-") for k in todo}
        if unknown:
            p.error(f"--cells: no cell {', '.join(sorted(unknown))}")
        todo = {k: v for k, v in todo.items() if k.replace(", ", "-") in wanted}
    results = {}
    done = json.loads((work / "cells.json").read_text()) if (work / "cells.json").exists() else {}
    for name, overrides in todo.items():
        rep = work / name.replace(", ", "-") / "report" / "report.json"
        if a.reuse and name in done and rep.exists():  # finished by an earlier run: its report and seconds as they are
            seconds = done[name]
        else:
            seconds = run_cell(work, name, overrides)
            done[name] = seconds
            (work / "cells.json").write_text(json.dumps(done, indent=1))
        report = json.loads(rep.read_text())
        teachers = teacher_cost(cell_config(work, name, overrides))
        results[name] = {"seconds": seconds, "overrides": overrides, "report": report, "teachers": teachers}
        print(f"{name}: {seconds:.0f} s; {_teacher_line(teachers)}", flush=True)
    md = tables(results)
    extra = {}
    if a.crossfit0:
        extra["crossfit0"] = crossfit0_cost(work, cells(a)["clean, full"])
        md += "\n### The teacher of crossfit 0, on a clean cell's data\n\n" + _teacher_line(extra["crossfit0"])
        md += f" `ltr grid --setup-only` took {extra['crossfit0']['setup_seconds']:.0f} s.\n"
    (work / "curricula.md").write_text(md)
    slim = {
        n: {"seconds": r["seconds"], "overrides": r["overrides"], "systems": r["report"]["systems"],
            "controls": r["report"].get("controls"), "teachers": r["teachers"]}
        for n, r in results.items()
    }  # fmt: skip
    doc = {"machine": os.uname().nodename, "cells": slim, **extra}
    (work / "curricula.json").write_text(json.dumps(doc, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
