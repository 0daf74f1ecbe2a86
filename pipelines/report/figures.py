"""The report's figures, each as PNG (for the page, 110 dpi) and PDF (vector, for a paper) (:func:`figure_files`):
Figure 1 (NDCG against trees), Figure 2 (score distributions of the least and most relevant documents), the
forest plot of every system's difference with LambdaMART (:func:`forest_plot`), the convergence of the systems
chosen on validation (:func:`convergence_figure`) and their effect by query difficulty against the random
curriculum (:func:`difficulty_figure`).

Style, for a reader who should get the answer in seconds: the Okabe-Ito colour-blind-safe palette, few
colours (LambdaMART black, a control grey), direct labels rather than big legends, a light grid, a one-line
title and the metric's name (``NDCG@10``) passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipelines.core.config import STRATEGIES
from pipelines.core.plots import figure_bytes, pyplot
from pipelines.report.pairing import groups
from pipelines.report.records import Record, ReportError, label_of, order_systems
from pipelines.report.significance import LEVEL, TESTS, row_significance
from pipelines.report.stats import kl_divergence
from pipelines.study.design import BASELINE, MSE
from udfs.curriculum import ANTI, control

log = logging.getLogger(__name__)

#: The Okabe-Ito palette (colour-blind safe) without its yellow (too pale on white), LambdaMART black aside.
PALETTE = ("#E69F00", "#0072B2", "#009E73", "#CC79A7", "#56B4E9", "#D55E00")
BASE_COLOUR = "black"  #: LambdaMART
CONTROL_COLOUR = "#8C8C8C"  #: the random curriculum, a control
#: The forest plot's classes (:func:`forest_class`): a significant win, a significant loss, neither.
CLASS_COLOUR = {"win": "#0072B2", "loss": "#D55E00", None: "#9A9A9A"}
CLASS_MARKER = {"win": "o", "loss": "D", None: "o"}
#: The random curriculum's strategy name (``curriculum.strategy``; ``grid.strategies`` lists it as a curriculum).
RANDOM = control()  # the seeded strategy: a random subset of the same size
#: Systems beyond which :func:`convergence_figure` splits into two panels (continuation, curricula).
MAX_PANEL_SYSTEMS = 6


#: A figure as ``{"png": ..., "pdf": ...}`` (PNG at 110 dpi for the page, PDF vector for a paper, both cropped to
#: what is drawn; in the report's background process where it has one); the figure is closed.
figure_files = figure_bytes


def _style(ax: Any) -> None:
    """A light grid behind the data, no top and right frame."""
    ax.grid(True, color="#E6E6E6", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _spread(ys: Sequence[float], gap: float) -> list[float]:
    """Positions for labels wanted at ``ys``, moved apart to at least ``gap`` from each other (the order kept,
    as little moved as this simple pass can): direct labels at the curves' ends that do not overlap."""
    if not ys:
        return []
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    pos = [float(ys[i]) for i in order]
    for i in range(1, len(pos)):
        pos[i] = max(pos[i], pos[i - 1] + gap)
    shift = (max(pos[-1] - max(ys), 0.0)) / 2  # centre the pushed block on what was wanted
    pos = [p - shift for p in pos]
    for i in range(len(pos) - 2, -1, -1):
        pos[i] = min(pos[i], pos[i + 1] - gap)
    out = [0.0] * len(ys)
    for i, p in zip(order, pos, strict=True):
        out[i] = p
    return out


def figure1(records: list[Record], metric: str, split: str = "test") -> dict[str, bytes]:
    """Figure 1 (:func:`figure_files`): mean NDCG against trees of LambdaMART and every MSE-t, over the folds each
    finished."""
    plt = pyplot()
    g = groups(records)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key in sorted(g, key=lambda k: (k[0] != BASELINE, k[1] or 0)):
        if key[0] not in (BASELINE, MSE):
            continue
        rs = g[key]
        steps = rs[0].steps
        ax.plot(
            steps,
            np.mean([r.test for r in rs], axis=0),
            label=rs[0].label,
            lw=2.2 if key[0] == BASELINE else 1.2,
            color="black" if key[0] == BASELINE else None,
        )
    ax.set_xlabel("number of trees")
    ax.set_ylabel(f"{metric} ({split}, mean over folds)")
    ax.set_title("Figure 1: LambdaMART vs MSE-t")
    ax.legend(fontsize=8)
    return figure_files(fig)


def figure2(records: list[Record], tree: int) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Figure 2 (:func:`figure_files`) and its numbers: score distributions of the least and most relevant documents
    after ``tree`` trees for the first MSE-t with t >= ``tree`` and for LambdaMART, with their KL divergence (mean
    over folds).

    Raises
    ------
    ReportError
        The grid has no such MSE-t or baseline, or a run logged no distribution after ``tree`` trees.
    """
    plt = pyplot()
    g = groups(records)
    mse_keys = sorted([k for k in g if k[0] == MSE and (k[1] or 0) >= tree], key=lambda k: k[1] or 0)
    if (BASELINE, None) not in g or not mse_keys:
        raise ReportError(f"Figure 2 needs the baseline and an MSE-t with t >= {tree}")
    which = {"MSE": g[mse_keys[0]], "LambdaMART": g[(BASELINE, None)]}
    kl: dict[str, list[float]] = {k: [] for k in which}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (name, rs) in zip(axes, which.items(), strict=True):
        for i, r in enumerate(rs):
            d = next((x for x in r.score_dists if x["tree"] == tree), None)
            if d is None:
                raise ReportError(
                    f"{r.label} fold {r.fold}: no score distribution after {tree} trees (train.score_dist_trees)"
                )
            counts = d["counts"]
            lo = next(c for c in counts if sum(c) > 0)
            hi = next(c for c in reversed(counts) if sum(c) > 0)
            kl[name].append(kl_divergence(lo, hi))
            if i == 0:
                e = np.asarray(d["edges"])
                mid = (e[:-1] + e[1:]) / 2
                for c, lab in (
                    (lo, f"label {d['labels'][counts.index(lo)]}"),
                    (hi, f"label {d['labels'][counts.index(hi)]}"),
                ):
                    c = np.asarray(c, np.float64)
                    ax.plot(mid, c / max(c.sum(), 1) / np.diff(e), label=lab)
        ax.set_title(f"{name} after {tree} trees: KL = {np.mean(kl[name]):.3f}")
        ax.set_xlabel("predicted score")
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"density (fold {min(r.fold for r in which['MSE'])})")
    return figure_files(fig), {
        "tree": tree,
        "mse_run": which["MSE"][0].label,
        "kl_mean": {k: float(np.mean(v)) for k, v in kl.items()},
        "kl_per_fold": kl,
    }


# ------------------------------------------------------------ forest plot
def forest_class(row: Mapping[str, Any], primary_test: str) -> str | None:
    """A forest plot row's class (its colour): :func:`pipelines.report.significance.row_significance` of the
    comparison ``row`` (report.json's, whose difference is ``mean_delta``). ReportError for an unknown test."""
    if primary_test not in TESTS:
        raise ReportError(f"unknown primary test {primary_test!r} (report.primary_test: {', '.join(TESTS)})")
    return row_significance(row, primary_test, "mean_delta")


#: How a forest plot's heading names a kind of difficulty.
KIND_LABELS = {"oracle": "oracle", "label_free": "label-free", "model": "model", "dynamic": "self-paced"}


def _group_name(strategy: str, random_strategy: str = RANDOM) -> str:
    """A strategy's heading in the forest plot: a curriculum's with the kind of its difficulty score."""
    if strategy == MSE:
        return "MSE-t (continuation)"
    if strategy == random_strategy:
        return f"{strategy} (control curriculum)"
    s = STRATEGIES.get(strategy)
    if s is not None and s.kind is not None:
        kind = KIND_LABELS.get(s.kind, s.kind)
        return f"{strategy} ({kind}, anti-curriculum)" if s.reverse else f"{strategy} ({kind})"
    return strategy


def _group_rank(strategy: str, random_strategy: str = RANDOM) -> int:
    """Where a strategy's group stands in the forest plot: MSE-t, then the curricula by kind of difficulty (oracle,
    label-free, model), then the other curricula, then the random control."""
    if strategy == MSE:
        return 0
    if strategy == random_strategy:
        return 2 + len(KIND_LABELS)
    s = STRATEGIES.get(strategy)
    kind = None if s is None else s.kind
    return 1 + (list(KIND_LABELS).index(kind) if kind in KIND_LABELS else len(KIND_LABELS))


def forest_plot(comparisons: list[dict[str, Any]], primary_test: str, metric: str) -> dict[str, bytes]:
    """Every system's difference with LambdaMART (:func:`figure_files`), one row per comparison of ``comparisons``
    (report.json's, in Table 1's order: MSE-t first) under a heading per strategy: the mean difference of
    ``metric`` and its 95% bootstrap interval (``ci95_bootstrap``), coloured by :func:`forest_class` under
    ``primary_test`` (blue: a significant win, vermillion: a significant loss, grey: neither), a line at 0,
    and the minimum detectable effect (``mde``, the median over the rows that have one) shaded as ±mde.

    Raises
    ------
    ReportError
        No comparison has a difference to draw, or ``primary_test`` is unknown.
    """
    if primary_test not in TESTS:
        raise ReportError(f"unknown primary test {primary_test!r} (report.primary_test: {', '.join(TESTS)})")
    if not any(c.get("mean_delta") is not None for c in comparisons):
        raise ReportError("no forest plot: no system was paired with the LambdaMART baseline")
    by_group: dict[str, list[dict[str, Any]]] = {}
    for c in comparisons:  # the rows' order, each strategy where it first appears
        by_group.setdefault(c["strategy"], []).append(c)
    # the lines from the top: a heading per strategy, then its rows; the paths named by themselves (one row
    # each, an extra path) together under one heading, after the strategies
    lines: list[tuple[str, dict[str, Any] | None]] = []
    paths: list[tuple[str, dict[str, Any] | None]] = []
    # by kind, each anti-curriculum right after its curriculum, else Table 1's order (a stable sort)
    first = {s.removeprefix(ANTI): i for i, s in reversed(list(enumerate(by_group)))}
    order = sorted(by_group, key=lambda s: (_group_rank(s), first[s.removeprefix(ANTI)], s.startswith(ANTI)))
    for strategy, rows in ((s, by_group[s]) for s in order):
        if len(rows) == 1 and rows[0]["system"] == strategy:
            paths.append((rows[0]["system"], rows[0]))
        else:
            lines.append((_group_name(strategy), None))
            lines += [(r["system"], r) for r in rows]
    if paths:
        lines += [("other paths", None), *paths]
    n = len(lines)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 1.5 + 0.24 * n))
    _style(ax)
    ax.grid(False, axis="y")
    mdes = [float(c["mde"]) for c in comparisons if c.get("mde") is not None]
    mde = float(np.median(mdes)) if mdes else None
    if mde:
        ax.axvspan(-mde, mde, color="#EDEDED", lw=0, zorder=0)
    ax.axvline(0, color=BASE_COLOUR, lw=0.8, zorder=1)
    ticks, labels, headings = [], [], []
    for i, (text, row) in enumerate(lines):
        y = n - 1 - i
        ticks.append(y)
        labels.append(text if row is None else f"  {text}")
        if row is None:
            headings.append(len(labels) - 1)
            if i:
                ax.axhline(y + 0.5, color="#CFCFCF", lw=0.6)
            continue
        delta = row.get("mean_delta")
        if delta is None:
            ax.text(0, y, "not paired", color=CLASS_COLOUR[None], fontsize=7, va="center", ha="center")
            continue
        cls = forest_class(row, primary_test)
        colour = CLASS_COLOUR[cls]
        ci = row.get("ci95_bootstrap")
        if ci is not None:
            ax.plot(ci, [y, y], color=colour, lw=1.6, solid_capstyle="butt", zorder=2)
        ax.plot(
            [delta],
            [y],
            marker=CLASS_MARKER[cls],
            ms=5,
            color=colour,
            mfc=colour if cls else "white",
            mew=1.2,
            zorder=3,
            ls="none",
        )
        # the value, at the right margin: the answer without reading the axis
        ax.annotate(
            f"{delta:+.3f}",
            xy=(1, y),
            xycoords=("axes fraction", "data"),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
            color=colour if cls else "#555555",
        )
    ax.set_yticks(ticks, labels, fontsize=8)
    for i in headings:
        ax.get_yticklabels()[i].set_fontweight("bold")
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel(f"Δ {metric} vs LambdaMART (95% CI)")
    ax.set_title(f"{metric}: each system against LambdaMART", fontsize=10, loc="left", pad=20)
    handles = [
        plt.Line2D(
            [], [], ls="none", marker=CLASS_MARKER[k], color=CLASS_COLOUR[k], mfc=CLASS_COLOUR[k] if k else "white"
        )
        for k in ("win", "loss", None)
    ]
    ax.legend(
        handles,
        ["significant win", "significant loss", "not significant"],
        loc="lower left",
        bbox_to_anchor=(0, 1.0),
        ncol=3,
        frameon=False,
        fontsize=7,
        handletextpad=0.2,
        columnspacing=1.0,
        borderaxespad=0.2,
    )
    note = f"Colours: Holm-corrected {TESTS[primary_test].name}, p < {LEVEL:g}. Bars: 95% bootstrap interval." + (
        f"\nShaded: minimum detectable effect ±{mde:.3f} (median over {len(mdes)} systems)." if mde else ""
    )
    ax.annotate(
        note,
        xy=(0, 0),
        xycoords="axes fraction",
        xytext=(0, -30),
        textcoords="offset points",
        va="top",
        fontsize=7,
        color="#555555",
    )
    return figure_files(fig)


# ------------------------------------------------------------ convergence of the chosen systems
def _curve(rs: list[Record], split: str) -> tuple[np.ndarray, np.ndarray]:
    """The steps every fold of one system has and the folds' ``split`` curves on them (folds x steps)."""
    curves = []
    for r in rs:
        ys = r.test if split == "test" else r.vali
        if len(ys) != len(r.steps):
            raise ReportError(
                f"{r.label} fold {r.fold} (run {r.run_id}): {len(ys)} {split} values for {len(r.steps)} steps"
                + (" (no validation curve)" if not ys else "")
            )
        curves.append(dict(zip(r.steps, ys, strict=True)))
    common = sorted(set.intersection(*(set(c) for c in curves)))
    if not common:
        raise ReportError(f"{rs[0].label}: its folds' {split} curves share no step")
    if any(len(c) != len(common) for c in curves):
        log.info("%s: its folds' curves drawn on the %d steps all of them have", rs[0].label, len(common))
    return np.asarray(common, np.float64), np.array([[c[s] for s in common] for c in curves], np.float64)


def convergence_figure(
    records: list[Record],
    chosen: Mapping[str, int | None],
    metric: str,
    split: str = "test",
    random_strategy: str = RANDOM,
) -> dict[str, bytes]:
    """``metric`` against trees (:func:`figure_files`) of LambdaMART and of each strategy's system chosen on
    validation (``chosen``: strategy -> its switch point, None for a path without one): each system's mean
    ``split`` curve over its folds (on the steps all its folds have) with a band from the lowest to the highest
    fold (the records are averaged over seeds already), its switch point marked on the curve. One panel, or
    two beside each other (continuation: MSE-t and the extra paths; curricula: the curriculum strategies) when
    there are more than :data:`MAX_PANEL_SYSTEMS` systems. The random curriculum (``random_strategy``) is drawn
    grey and dashed, a control.

    Raises
    ------
    ReportError
        None of these systems has a finished run, or a system's folds share no step.
    """
    if split not in ("test", "vali"):
        raise ReportError(f"convergence figure: split must be test or vali, got {split!r}")
    g = groups(records)
    keys = [k for k in order_systems([(s, t) for s, t in chosen.items() if s != BASELINE]) if k in g]
    missing = [label_of(s, t) for s, t in chosen.items() if s != BASELINE and (s, t) not in g]
    if missing:
        log.warning("convergence figure: no finished run of %s", ", ".join(missing))
    base = (BASELINE, None) if (BASELINE, None) in g else None
    if not keys and base is None:
        raise ReportError("no convergence figure: none of the chosen systems nor LambdaMART has a finished run")
    panels = [keys]
    if len(keys) + (base is not None) > MAX_PANEL_SYSTEMS:
        cont = [k for k in keys if k[0] not in STRATEGIES]
        curr = [k for k in keys if k[0] in STRATEGIES]
        panels = [p for p in (cont, curr) if p]
    titles = ["continuation", "curricula"] if len(panels) == 2 else [None]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.2), sharey=True, squeeze=False)
    colours = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(k for k in keys if k[0] != random_strategy)}
    for ax, panel, title in zip(axes[0], panels, titles, strict=True):
        _style(ax)
        ends: list[tuple[float, float, str, str]] = []  # (x, y, label, colour) of each curve's end
        for key in ([base] if base else []) + panel:
            rs = g[key]
            x, ys = _curve(rs, split)
            # a teacher-based curriculum starts after its teachers' trees: its cost counted where the trees are
            shift = float(np.mean([r.teacher_trees for r in rs]))
            x = x + shift
            mean = ys.mean(axis=0)
            if key == base:
                colour, ls, lw = BASE_COLOUR, "-", 2.0
            elif key[0] == random_strategy:
                colour, ls, lw = CONTROL_COLOUR, "--", 1.4
            else:
                colour, ls, lw = colours[key], "-", 1.4
            if len(rs) > 1:
                ax.fill_between(x, ys.min(axis=0), ys.max(axis=0), color=colour, alpha=0.15, lw=0)
            ax.plot(x, mean, color=colour, ls=ls, lw=lw)
            if key[1] is not None:
                at = key[1] + shift
                ax.plot([at], [np.interp(at, x, mean)], marker="o", ms=6, color=colour, mfc="white", mew=1.5)
            label = f"{rs[0].label} (after {shift:g} teachers' trees)" if shift else rs[0].label
            ends.append((float(x[-1]), float(mean[-1]), label, colour))
        lo, hi = ax.get_ylim()
        for (x_end, _, label, colour), y in zip(ends, _spread([e[1] for e in ends], (hi - lo) * 0.045), strict=True):
            ax.annotate(
                label,
                xy=(x_end, y),
                xytext=(5, 0),
                textcoords="offset points",
                va="center",
                fontsize=7.5,
                color=colour,
                annotation_clip=False,
            )
        ax.set_ylim(lo, hi)
        ax.set_xlabel("number of trees")
        if title:
            ax.set_title(title, fontsize=9)
    folds = sorted({r.fold for k in keys + ([base] if base else []) for r in g[k]})
    axes[0][0].set_ylabel(f"{metric} ({split}), mean over folds")
    fig.suptitle(
        f"{metric} against trees, switch points (○) chosen on validation; band: range over {len(folds)} folds",
        fontsize=10,
        x=0.01,
        ha="left",
    )
    fig.tight_layout()
    return figure_files(fig)


def selfpaced_figure(records: list[Record]) -> dict[str, bytes]:
    """The share of the training queries each self-paced system (:mod:`pipelines.kernel.selfpaced`) kept after
    each selection, against trees (:func:`figure_files`): mean over its folds (and seeds), a step line per system,
    the random control grey and dashed."""
    g = groups([r for r in records if r.selections])
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    _style(ax)
    for i, key in enumerate(order_systems(list(g))):
        rs = g[key]
        by_tree: dict[float, list[float]] = {}
        for r in rs:
            for tree, _, kept, among in r.selections:
                by_tree.setdefault(tree, []).append(kept / among if among else 1.0)
        x = sorted(by_tree)
        y = [float(np.mean(by_tree[t])) for t in x]
        if key[1] is not None and key[1] > x[-1]:  # the last choice holds to the end of the segment (its switch point)
            x, y = [*x, key[1]], [*y, y[-1]]
        random = key[0] == "randompaced"
        ax.step(x, y, where="post", color=CONTROL_COLOUR if random else PALETTE[i % len(PALETTE)],
                ls="--" if random else "-", lw=1.4, label=rs[0].label)  # fmt: skip
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("number of trees")
    ax.set_ylabel("share of the training queries kept")
    ax.legend(fontsize=7.5, frameon=False)
    fig.suptitle("Self-paced curricula: the queries each selection kept", fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return figure_files(fig)


# ------------------------------------------------------------ effect by difficulty against the random curriculum
def _interaction_title(label: str, cell: Mapping[str, Any] | None) -> str:
    """A panel's title: the system and its interaction with difficulty (the slope difference with the random
    curriculum and its interval, else its own slope)."""

    def ci(c: Sequence[float] | None) -> str:
        return "" if c is None else f" [{c[0]:+.3f}, {c[1]:+.3f}]"

    if not cell:
        return label
    vs = cell.get("vs_random")
    if vs and vs.get("diff") is not None:
        return f"{label} vs {vs['random']}:\nslope diff {vs['diff']:+.3f}{ci(vs.get('ci95'))}"
    if cell.get("slope") is not None:
        return f"{label}:\nslope {cell['slope']:+.3f}{ci(cell.get('ci95'))}"
    return label


def _cells(cells: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per quartile: the mean difference (nan: no query) and the interval's distances below and above it."""
    y = np.array([np.nan if c["delta"] is None else c["delta"] for c in cells], np.float64)
    lo = np.array([c["delta"] - c["ci_t"][0] if c.get("ci_t") and c["delta"] is not None else 0.0 for c in cells])
    hi = np.array([c["ci_t"][1] - c["delta"] if c.get("ci_t") and c["delta"] is not None else 0.0 for c in cells])
    return y, lo, hi


def difficulty_figure(
    by_difficulty: dict[str, dict[str, Any]],
    interaction: dict[str, dict[str, Any]],
    chosen: Mapping[str, int | None],
    random_strategy: str,
    metric: str,
) -> dict[str, bytes] | None:
    """The effect by query difficulty as small multiples (:func:`figure_files`).

    One row per difficulty score of ``by_difficulty`` (:func:`pipelines.report.by_difficulty.by_difficulty`);
    one column per curriculum strategy of ``chosen`` (strategy -> its switch point chosen on validation;
    every strategy but LambdaMART and ``random_strategy`` when the grid has no curriculum). In each panel:
    the chosen system's mean difference of ``metric`` with LambdaMART per quartile of the score (hard to
    easy) with its 95% t interval, the random curriculum at the same switch point in grey (the control), a
    line at 0; y shared along a row; the title gives the interaction from ``interaction`` (label -> score ->
    ``slope``, ``ci95``, ``vs_random``: the slope difference with the random curriculum). None when there is
    nothing to draw."""
    cols = [k for k in order_systems([(s, t) for s, t in chosen.items() if s not in (BASELINE, random_strategy)])]
    # the question is whether a curriculum helps hard queries more than the random one: the columns are the
    # curricula (a strategy with switch points, not the continuation method) when the grid has any; MSE-t and the
    # extra paths have no random twin (their slopes are in report.json), and fewer panels draw in half the time
    curricula = [k for k in cols if k[0] != MSE and k[1] is not None]
    cols = curricula or cols
    scores = [c for c, t in by_difficulty.items() if any(label_of(*k) in t.get("systems", {}) for k in cols)]
    cols = [k for k in cols if any(label_of(*k) in by_difficulty[c]["systems"] for c in scores)]
    if not scores or not cols:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(
        len(scores),
        len(cols),
        figsize=(2.9 * len(cols) + 0.6, 2.5 * len(scores) + 0.7),
        sharey="row",
        squeeze=False,
    )
    colour = CLASS_COLOUR["win"]
    drew_control = False
    for i, col in enumerate(scores):
        t = by_difficulty[col]
        for j, key in enumerate(cols):
            ax = axes[i][j]
            _style(ax)
            label = label_of(*key)
            control = label_of(random_strategy, key[1])
            ax.axhline(0, color=BASE_COLOUR, lw=0.8)
            cells = t["systems"].get(label)
            if cells is None:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#777777", fontsize=8)
                ax.set_title(label, fontsize=8)
                continue
            x = np.arange(len(cells), dtype=np.float64)
            rc = t["systems"].get(control) if control != label else None
            if rc is not None and len(rc) == len(cells):
                y, lo, hi = _cells(rc)
                ax.errorbar(x + 0.12, y, yerr=[lo, hi], color=CONTROL_COLOUR, marker="s", ms=3.5, lw=1, capsize=0)
                drew_control = True
            y, lo, hi = _cells(cells)
            ax.errorbar(x - 0.12 * (rc is not None), y, yerr=[lo, hi], color=colour, marker="o", ms=4, lw=1.3)
            ticks = [f"Q{q + 1}" for q in range(len(cells))]
            if len(ticks) > 1:
                ticks[0], ticks[-1] = f"{ticks[0]}\nhard", f"{ticks[-1]}\neasy"
            ax.set_xticks(x, ticks, fontsize=7)
            ax.set_xlim(-0.5, len(cells) - 0.5)
            ax.tick_params(axis="y", labelsize=7)
            ax.set_title(_interaction_title(label, interaction.get(label, {}).get(col)), fontsize=7.5)
            if j == 0:
                ax.set_ylabel(f"{t.get('name', col)}\nΔ {metric}", fontsize=8)
    handles = [plt.Line2D([], [], color=colour, marker="o", ms=4, lw=1.3)]
    names = ["chosen system (95% t interval)"]
    if drew_control:
        handles.append(plt.Line2D([], [], color=CONTROL_COLOUR, marker="s", ms=3.5, lw=1))
        names.append(f"{random_strategy} curriculum, same switch point (control)")
    fig.suptitle(
        f"Δ {metric} vs LambdaMART by query difficulty (rows: difficulty scores; x: their quartiles, hard to easy)",
        fontsize=10,
        x=0.01,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.legend(handles, names, loc="lower center", ncol=2, frameon=False, fontsize=7.5)
    return figure_files(fig)
