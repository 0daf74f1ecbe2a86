"""Each curriculum against its two controls at the same switch point: its anti-curriculum (the same difficulty
score, hardest first) and the random curriculum (a seeded sample of the same size), grouped by the kind of its
difficulty score (``report.json``'s ``controls``).

Why both: a curriculum that beats LambdaMART may do so because any first stage of that size helps (the random
control answers that) or because any *order* by that score helps, easy or hard first (the anti-curriculum answers
that); Wu, Dyer & Neyshabur (ICLR 2021) found curricula, anti-curricula and random orders to tie except under a
short training budget or noisy labels. A curriculum "beats its controls" only when it beats both, each paired over
the same test queries, significant under the report's primary test after Holm's correction over every control
comparison of the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pipelines.report.pairing import groups, paired_samples
from pipelines.report.records import Record, label_of, order_systems
from pipelines.report.significance import LEVEL, TESTS, significance, test_of
from pipelines.report.stats import bootstrap_interval, holm, paired_t_test, randomization_test
from udfs.curriculum import ANTI, STRATEGIES, control

#: The kinds in the order the report shows them (:data:`udfs.scores.KINDS`, then ``dynamic``: the self-paced
#: curriculum, whose difficulty the model being trained measures as it trains, :mod:`pipelines.kernel.selfpaced`).
KIND_ORDER = ("oracle", "label_free", "model", "dynamic")

#: The self-paced curriculum's controls (``grid.selfpaced``): its anti-curriculum and its random one, which keep the
#: same number of queries at the same trees.
DYNAMIC_CONTROLS = {"selfpaced": ("antipaced", "randompaced")}


def kind_of(strategy: str) -> str | None:
    """The kind of difficulty of a curriculum strategy that orders queries by a score, easiest first; None for any
    other system (LambdaMART, MSE-t, an anti-curriculum, the random control, a label filter, an extra path, or a
    plug-in's strategy in a report built without its ``--plugin``)."""
    if strategy in DYNAMIC_CONTROLS:
        return "dynamic"
    s = STRATEGIES.get(strategy)
    return s.kind if s is not None and s.order == "score" and not s.reverse else None


def _compare(x: Sequence[Record], y: Sequence[Record], n_perm: int, n_boot: int, seed: int) -> dict[str, Any] | None:
    """System ``x`` minus system ``y``, paired over their test queries with a relevant document (None: none)."""
    p = paired_samples(list(x), list(y))
    if not p.n:
        return None
    d = p.x - p.y
    return {
        "system": y[0].label,
        "queries": p.n,
        "folds": p.folds,
        "delta": float(np.mean(d)),
        "ci95_bootstrap": bootstrap_interval(d, n_boot, seed),
        "perm_p": randomization_test(p.x, p.y, n_perm, seed),
        "t_p": paired_t_test(p.x, p.y),
    }


def curriculum_controls(
    records: list[Record], *, n_perm: int, n_boot: int, seed: int, primary_test: str, level: float = LEVEL
) -> list[dict[str, Any]]:
    """One row per curriculum system (strategy, switch point) of ``records`` whose strategy orders queries by a
    score: its ``kind``, and against each control that the grid trained at the same switch point (``anti``:
    ``anti_<strategy>``, ``random``) the paired difference ``delta`` (this curriculum minus the control), its 95%
    bootstrap interval, the randomisation and t p-values, raw and Holm-corrected over every control comparison of
    the report (``perm_p_holm``, ``t_p_holm``), and ``significance`` (``win`` / ``loss`` / None under
    ``primary_test``). ``beats_both``: a significant win over both controls (False when one is missing). Rows are
    in the order of the kinds (:data:`KIND_ORDER`), then the report's order of systems."""
    primary = test_of(primary_test)
    g = groups(records)
    rows = []
    keys = [k for k in order_systems(list(g)) if k[1] is not None and kind_of(k[0]) is not None]
    for s, t in sorted(keys, key=lambda k: KIND_ORDER.index(str(kind_of(k[0])))):
        row: dict[str, Any] = {"system": label_of(s, t), "strategy": s, "switch": t, "kind": kind_of(s)}
        row["teacher_trees"] = float(np.mean([r.teacher_trees for r in g[(s, t)]]))  # per fold; 0: no teacher
        for name, other in zip(("anti", "random"), DYNAMIC_CONTROLS.get(s, (ANTI + s, control())), strict=True):
            theirs = g.get((other, t))
            row[name] = _compare(g[(s, t)], theirs, n_perm, n_boot, seed) if theirs else None
        rows.append(row)
    compared = [c for r in rows for c in (r["anti"], r["random"]) if c is not None]
    for raw in (t.p for t in TESTS.values()):
        for c, adj in zip(compared, holm([c[raw] for c in compared]), strict=True):
            c[f"{raw}_holm"] = adj
    for c in compared:
        c["significance"] = significance(c[primary.p_holm], c["delta"], level)
    for r in rows:
        r["beats_both"] = all(r[k] is not None and r[k]["significance"] == "win" for k in ("anti", "random"))
    return rows


def by_kind(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind of difficulty the grid has a curriculum of: its curricula, the ones that beat both controls, and
    whether the grid trained both controls for any of them (the answer the report's page gives per kind)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        k = out.setdefault(r["kind"], {"curricula": [], "beat_both": [], "controlled": []})
        k["curricula"].append(r["system"])
        if r["anti"] is not None and r["random"] is not None:
            k["controlled"].append(r["system"])
        if r["beats_both"]:
            k["beat_both"].append(r["system"])
    return out
