"""The report's figures (:mod:`pipelines.report.figures`): each a PNG and a PDF that matplotlib wrote, the forest
plot's colours by the primary test, 27 systems, and the figures' answers to empty or absent inputs."""

from __future__ import annotations

import re
import struct
from typing import Any

import numpy as np
import pytest

from pipelines.core.plots import pyplot
from pipelines.report import figures
from pipelines.report.by_difficulty import SCORES, by_difficulty
from pipelines.report.figures import (
    CLASS_COLOUR,
    convergence_figure,
    difficulty_figure,
    figure1,
    figure2,
    figure_files,
    forest_class,
    forest_plot,
)
from pipelines.report.records import ReportError, label_of
from tests.helpers import record

STRATEGIES = ["mse", "q_nrel", "q_bm25", "q_pagerank", "l_hrel", "random"]
SWITCHES = [2, 4, 6, 8]


def _is_png_and_pdf(out: dict[str, bytes]) -> None:
    """``out`` holds a PNG and a PDF that matplotlib wrote."""
    assert set(out) == {"png", "pdf"}
    assert out["png"].startswith(b"\x89PNG\r\n\x1a\n") and b"matplotlib" in out["png"][:200]
    assert out["pdf"].startswith(b"%PDF") and b"Matplotlib" in out["pdf"]
    assert out["pdf"].rstrip().endswith(b"%%EOF")
    assert b"/Type3" not in out["pdf"]  # TrueType fonts, as publishers ask


def _png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG's IHDR chunk."""
    w, h = struct.unpack(">II", png[16:24])
    return w, h


@pytest.fixture
def drawn(monkeypatch) -> list[Any]:
    """The figures the functions under test draw, kept (their files still written) to look at what is on them."""
    kept: list[Any] = []
    real = figures.figure_files

    def keep(fig: Any) -> dict[str, bytes]:
        kept.append(fig)
        return real(fig)

    monkeypatch.setattr(figures, "figure_files", keep)
    return kept


def _comparison(system: str, strategy: str, switch: int | None, delta: float | None, **kw: Any) -> dict[str, Any]:
    """A comparison of report.json (the keys the forest plot reads)."""
    row = {
        "system": system,
        "strategy": strategy,
        "switch": switch,
        "mean_delta": delta,
        "ci95_bootstrap": None if delta is None else [delta - 0.01, delta + 0.01],
        "t_p_holm": 0.5,
        "perm_p_holm": 0.5,
        "mde": 0.004,
    }
    return {**row, **kw}


def _grid_comparisons(n: int = 27) -> list[dict[str, Any]]:
    """``n`` comparisons in Table 1's order (MSE-t first), strategies x switch points, then extra paths."""
    rng = np.random.default_rng(1)
    rows = [
        _comparison(
            label_of(s, t),
            s,
            t,
            float(rng.normal(0, 0.01)),
            perm_p_holm=float(rng.uniform(0, 0.2)),
            t_p_holm=float(rng.uniform(0, 0.2)),
            mde=float(rng.uniform(0.003, 0.006)),
        )
        for s in STRATEGIES
        for t in SWITCHES
    ]
    rows += [_comparison(f"extra{i}", f"extra{i}", None, 0.001 * i, mde=None) for i in range(n - len(rows))]
    return rows[:n]


# ------------------------------------------------------------ the files
def test_figure_files_gives_a_png_and_a_pdf_and_closes_the_figure():
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    out = figure_files(fig)
    _is_png_and_pdf(out)
    assert fig.number not in plt.get_fignums()
    fig2, ax2 = plt.subplots()
    ax2.plot([0, 1], [0, 1])
    again = figure_files(fig2)["pdf"]
    assert b"/CreationDate" not in out["pdf"]  # so the same figure gives the same file (pdf_bytes)
    (text, numbers), (text2, numbers2) = _pdf_streams(out["pdf"]), _pdf_streams(again)
    assert text2 == text and numbers2 == pytest.approx(numbers, rel=0, abs=1e-6)


def _pdf_streams(pdf: bytes) -> tuple[list[bytes], list[float]]:
    """The streams of ``pdf`` decompressed, as their text between numbers and their numbers, to compare two
    drawings of one figure. Why not the bytes: CI once (Python 3.13, matplotlib 3.11.2) gave two PDFs of the same
    figure in one process whose page content differed in length by 7 compressed bytes; here none did, in 160 fresh
    processes (60 of them with an empty font cache) and 11 runs of the fast tests. A coordinate written with more
    of its 10 decimals after a floating-point difference in its last place would do that. A tolerance of 1e-6 pt
    keeps every visible difference an error (the clip box of ``core.plots._draw``'s note was in 110-dpi units
    instead of 72)."""
    import zlib

    text: list[bytes] = []
    numbers: list[float] = []
    for raw in re.findall(rb"stream\n(.*?)\nendstream", pdf, re.S):
        try:
            data = zlib.decompress(raw)
        except zlib.error:
            data = raw
        parts = re.split(rb"(-?\d+(?:\.\d*)?|-?\.\d+)", data)
        text += parts[0::2]
        numbers += [float(x) for x in parts[1::2]]
    return text, numbers


def test_figure1_and_figure2_give_both_files():
    recs = [record(f, s, t, [0.4, 0.5, 0.55]) for f in (1, 2) for s, t in (("lambdamart", None), ("mse", 2))]
    _is_png_and_pdf(figure1(recs, "NDCG@10"))
    dist = {"tree": 2, "labels": [0, 1], "edges": [0.0, 0.5, 1.0], "counts": [[3, 1], [1, 3]]}
    for r in recs:
        r.score_dists = [dist]
    files, data = figure2(recs, 2)
    _is_png_and_pdf(files)
    assert data["mse_run"] == "MSE-2" and set(data["kl_mean"]) == {"MSE", "LambdaMART"}


# ------------------------------------------------------------ forest plot
def test_a_forest_plot_row_s_class_follows_the_primary_test():
    row = {"mean_delta": 0.01, "perm_p_holm": 0.01, "t_p_holm": 0.2}
    assert forest_class(row, "randomisation") == "win"
    assert forest_class(row, "t") is None
    loss = {"mean_delta": -0.02, "perm_p_holm": 0.3, "t_p_holm": 0.049}
    assert forest_class(loss, "t") == "loss"
    assert forest_class(loss, "randomisation") is None
    assert forest_class({**loss, "t_p_holm": 0.05}, "t") is None  # p < 0.05, strictly
    assert forest_class({"mean_delta": 0.0, "perm_p_holm": 0.001}, "randomisation") is None  # no direction
    assert forest_class({"mean_delta": None, "perm_p_holm": 0.001}, "randomisation") is None
    assert forest_class({"mean_delta": 0.01, "perm_p_holm": None}, "randomisation") is None
    with pytest.raises(ReportError, match="primary test"):
        forest_class(row, "wilcoxon")


def _point_colours(fig: Any) -> list[str]:
    """The colours of the forest plot's points, top row first (one marker each)."""
    from matplotlib.colors import to_hex

    ax = fig.axes[0]
    points = [ln for ln in ax.lines if ln.get_marker() not in ("None", None, "") and len(ln.get_xdata()) == 1]
    points.sort(key=lambda ln: -ln.get_ydata()[0])
    return [to_hex(ln.get_color()) for ln in points]


def test_forest_plot_colours_follow_the_primary_test(drawn):
    rows = [
        _comparison("MSE-2", "mse", 2, 0.02, perm_p_holm=0.01, t_p_holm=0.3),  # a win by randomisation only
        _comparison("MSE-4", "mse", 4, -0.02, perm_p_holm=0.3, t_p_holm=0.01),  # a loss by t only
        _comparison("q_nrel-2", "q_nrel", 2, 0.01, perm_p_holm=0.2, t_p_holm=0.2),  # neither
    ]
    win, loss, grey = CLASS_COLOUR["win"], CLASS_COLOUR["loss"], CLASS_COLOUR[None]
    _is_png_and_pdf(forest_plot(rows, "randomisation", "NDCG@10"))
    assert _point_colours(drawn[-1]) == [win.lower(), grey.lower(), grey.lower()]
    _is_png_and_pdf(forest_plot(rows, "t", "NDCG@10"))
    assert _point_colours(drawn[-1]) == [grey.lower(), loss.lower(), grey.lower()]
    ax = drawn[-1].axes[0]
    assert ax.get_xlabel() == "Δ NDCG@10 vs LambdaMART (95% CI)"
    ticks = [t.get_text().strip() for t in ax.get_yticklabels()]
    assert ticks == ["MSE-t (continuation)", "MSE-2", "MSE-4", "q_nrel (oracle)", "q_nrel-2"]  # a heading per strategy


@pytest.mark.heavy
def test_forest_plot_of_27_systems_grows_with_the_rows(drawn):
    many = forest_plot(_grid_comparisons(27), "randomisation", "NDCG@10")
    _is_png_and_pdf(many)
    ticks = [t.get_text() for t in drawn[-1].axes[0].get_yticklabels()]
    assert len([t for t in ticks if t.startswith("  ")]) == 27  # the systems, indented under their headings
    assert [t for t in ticks if not t.startswith("  ")] == [  # grouped by kind, the controls last
        "MSE-t (continuation)",
        "q_nrel (oracle)",
        "q_bm25 (oracle)",
        "q_pagerank (oracle)",
        "l_hrel",
        "random (control curriculum)",
        "other paths",
    ]
    few = forest_plot(_grid_comparisons(27)[:3], "randomisation", "NDCG@10")
    assert _png_size(many["png"])[1] > 2.5 * _png_size(few["png"])[1]  # 32 lines against 4
    # 27 rows of 8-point labels need about 0.2 inch each at least: they do not overlap
    assert drawn[-2].get_size_inches()[1] >= 0.2 * 27


@pytest.mark.heavy
def test_forest_plot_shades_the_median_minimum_detectable_effect(drawn):
    rows = [_comparison(f"MSE-{t}", "mse", t, 0.01, mde=m) for t, m in ((2, 0.002), (4, 0.004), (6, 0.009))]
    rows.append(_comparison("MSE-8", "mse", 8, 0.01, mde=None))
    forest_plot(rows, "t", "NDCG@10")
    ax = drawn[-1].axes[0]
    (band,) = [p for p in ax.patches if p.get_width() > 0]
    assert band.get_x() == pytest.approx(-0.004) and band.get_width() == pytest.approx(0.008)
    notes = " ".join(t.get_text() for t in ax.texts)
    assert "±0.004 (median over 3 systems)" in notes
    forest_plot([_comparison("MSE-2", "mse", 2, 0.01, mde=None)], "t", "NDCG@10")  # no MDE: no band
    assert not [p for p in drawn[-1].axes[0].patches if p.get_width() > 0]


def test_forest_plot_without_comparisons_is_a_report_error():
    with pytest.raises(ReportError, match="no forest plot"):
        forest_plot([], "randomisation", "NDCG@10")
    with pytest.raises(ReportError, match="no forest plot"):
        forest_plot([_comparison("MSE-2", "mse", 2, None)], "randomisation", "NDCG@10")
    with pytest.raises(ReportError, match="primary test"):
        forest_plot([_comparison("MSE-2", "mse", 2, 0.01)], "bootstrap", "NDCG@10")
    # a row that could not be paired stays a row, without a point
    _is_png_and_pdf(forest_plot([_comparison("MSE-2", "mse", 2, 0.01), _comparison("x", "x", None, None)], "t", "N"))


# ------------------------------------------------------------ convergence
def _curves(n_trees: int = 10, folds: tuple[int, ...] = (1, 2, 3)) -> list[Any]:
    """Records of LambdaMART and every strategy x switch point: rising curves, a little different per fold."""
    out = []
    for f in folds:
        for i, (s, t) in enumerate([("lambdamart", None)] + [(s, t) for s in STRATEGIES for t in SWITCHES]):
            out.append(record(f, s, t, 0.4 + 0.01 * f + 0.001 * i + 0.1 * (1 - np.exp(-np.arange(n_trees) / 3))))
    return out


def _lines(ax: Any) -> list[Any]:
    """The curves of a panel (lines of more than two points: not the line at 0)."""
    return [ln for ln in ax.lines if len(ln.get_xdata()) > 2]


def test_convergence_figure_one_panel_mean_band_and_switch_points(drawn):
    recs = _curves()
    out = convergence_figure(recs, {"mse": 4, "q_nrel": 2}, "NDCG@10")
    _is_png_and_pdf(out)
    fig = drawn[-1]
    assert len(fig.axes) == 1
    ax = fig.axes[0]
    curves = _lines(ax)
    assert len(curves) == 3  # LambdaMART, MSE-4, q_nrel-2
    base = np.mean([r.test for r in recs if r.strategy == "lambdamart"], axis=0)
    assert np.allclose(curves[0].get_ydata(), base)
    markers = [ln for ln in ax.lines if len(ln.get_xdata()) == 1]
    assert sorted(float(m.get_xdata()[0]) for m in markers) == [2.0, 4.0]  # a marker at each switch point
    mse = np.mean([r.test for r in recs if (r.strategy, r.switch) == ("mse", 4)], axis=0)
    (mark,) = [m for m in markers if m.get_xdata()[0] == 4]
    assert mark.get_ydata()[0] == pytest.approx(mse[3])  # on the curve (steps 1..10: tree 4 is the 4th)
    assert len(ax.collections) == 3  # a band per system (range over folds)
    assert "range over 3 folds" in fig._suptitle.get_text()
    assert {t.get_text() for t in ax.texts} == {"LambdaMART", "MSE-4", "q_nrel-2"}  # direct labels


@pytest.mark.heavy
def test_convergence_figure_two_panels_beyond_six_systems(drawn):
    chosen = {s: SWITCHES[i % 4] for i, s in enumerate(STRATEGIES)} | {"extra": None}
    recs = _curves() + [record(f, "extra", None, [0.4 + 0.01 * k for k in range(10)]) for f in (1, 2, 3)]
    _is_png_and_pdf(convergence_figure(recs, chosen, "NDCG@10", split="vali"))
    fig = drawn[-1]
    assert [ax.get_title() for ax in fig.axes] == ["continuation", "curricula"]
    left, right = ({t.get_text() for t in ax.texts} for ax in fig.axes)
    assert left == {"LambdaMART", "MSE-2", "extra"}
    assert right == {"LambdaMART", "q_nrel-4", "q_bm25-6", "q_pagerank-8", "l_hrel-2", "random-4"}
    assert "NDCG@10 (vali)" in fig.axes[0].get_ylabel()


def test_convergence_figure_draws_the_steps_every_fold_has(drawn):
    recs = [record(f, s, t, [0.1 * k for k in range(1, 11)]) for f in (1, 2) for s, t in (("lambdamart", None),)]
    recs[1].steps = [2 * k for k in range(1, 11)]  # fold 2 evaluated every other tree: steps 2..20
    convergence_figure(recs, {}, "NDCG@10")
    (curve,) = _lines(drawn[-1].axes[0])
    assert list(curve.get_xdata()) == [2, 4, 6, 8, 10]
    # fold 1 at trees 2, 4, ... is 0.2, 0.4, ...; fold 2 at its k-th step 0.1 k
    assert np.allclose(curve.get_ydata(), (np.array([0.2, 0.4, 0.6, 0.8, 1.0]) + [0.1, 0.2, 0.3, 0.4, 0.5]) / 2)
    recs[1].steps = [100 + k for k in range(10)]
    with pytest.raises(ReportError, match="share no step"):
        convergence_figure(recs, {}, "NDCG@10")


def test_convergence_figure_without_runs_is_a_report_error():
    with pytest.raises(ReportError, match="no convergence figure"):
        convergence_figure([], {"mse": 2}, "NDCG@10")
    no_base = [r for r in _curves(folds=(1,)) if r.strategy != "lambdamart"]
    with pytest.raises(ReportError, match="no convergence figure"):
        convergence_figure(no_base, {"q_nrel": 99}, "NDCG@10")  # no such run, no baseline
    recs = _curves(folds=(1,))
    for r in recs:
        r.vali = []
    with pytest.raises(ReportError, match="no validation curve"):
        convergence_figure(recs, {"mse": 2}, "NDCG@10", split="vali")
    with pytest.raises(ReportError, match="split"):
        convergence_figure(recs, {"mse": 2}, "NDCG@10", split="train")


# ------------------------------------------------------------ effect by difficulty
def _by_difficulty() -> dict[str, Any]:
    """:func:`by_difficulty` of LambdaMART, MSE-2, q_nrel-2, random-2 and q_bm25-4 (no random-4) on two folds of 16
    queries each, the systems better than the baseline on the hard queries (low scores)."""
    rng = np.random.default_rng(3)
    qids = range(16)
    scores = {
        (f, q): {"ndcg_bm25": q / 16, "ndcg_pagerank": rng.uniform(), "n_rel": 1 + q % 4} for f in (1, 2) for q in qids
    }
    base = {q: 0.5 for q in qids}
    recs = []
    for f in (1, 2):
        recs.append(record(f, "lambdamart", None, [0.5], perq=base))
        for s, t, gain in (("mse", 2, 0.05), ("q_nrel", 2, 0.08), ("random", 2, 0.01), ("q_bm25", 4, 0.03)):
            recs.append(record(f, s, t, [0.5], perq={q: 0.5 + gain * (1 - q / 16) + rng.normal(0, 0.01) for q in qids}))
    return by_difficulty(recs, scores)


INTERACTION = {
    "q_nrel-2": {
        "ndcg_bm25": {
            "slope": -0.02,
            "ci95": [-0.03, -0.01],
            "n": 32,
            "vs_random": {"random": "random-2", "diff": 0.012, "ci95": [-0.004, 0.028]},
        }
    },
    "q_bm25-4": {"ndcg_bm25": {"slope": -0.01, "ci95": [-0.02, 0.001], "n": 32, "vs_random": None}},
}


@pytest.mark.heavy
def test_difficulty_figure_small_multiples_with_the_random_control(drawn):
    table = _by_difficulty()
    chosen = {"mse": 2, "q_nrel": 2, "q_bm25": 4, "random": 2}
    out = difficulty_figure(table, INTERACTION, chosen, "random", "NDCG@10")
    assert out is not None
    _is_png_and_pdf(out)
    fig = drawn[-1]
    # rows: scores; columns: the curricula q_bm25, q_nrel (MSE-t, the continuation method, has no random twin)
    axes = np.array(fig.axes[: len(SCORES) * 2]).reshape(len(SCORES), 2)
    titles = [[ax.get_title() for ax in row] for row in axes]
    assert titles[0][1] == "q_nrel-2 vs random-2:\nslope diff +0.012 [-0.004, +0.028]"
    assert titles[0][0] == "q_bm25-4:\nslope -0.010 [-0.020, +0.001]"  # no random-4: its own slope
    assert titles[1][0] == "q_bm25-4"  # no interaction given for that score
    for row in axes:  # y shared along a row
        assert len({ax.get_ylim() for ax in row}) == 1
    q_nrel = axes[0][1]
    assert [t.get_text() for t in q_nrel.get_xticklabels()] == ["Q1\nhard", "Q2", "Q3", "Q4\neasy"]
    # the chosen system and, in grey, the random curriculum at its switch point; q_bm25-4 has no control
    cells = table["ndcg_bm25"]["systems"]
    drawn_y = sorted(tuple(np.round(ln.get_ydata(), 9)) for ln in _lines(q_nrel))
    want = sorted(tuple(np.round([c["delta"] for c in cells[k]], 9)) for k in ("q_nrel-2", "random-2"))
    assert drawn_y == want
    assert len(_lines(axes[0][0])) == 1  # q_bm25-4: no random-4
    assert figures.CONTROL_COLOUR in {ln.get_color() for ln in _lines(q_nrel)}


def test_difficulty_figure_with_nothing_to_draw_is_none():
    table = _by_difficulty()
    assert difficulty_figure({}, {}, {"q_nrel": 2}, "random", "NDCG@10") is None
    assert difficulty_figure(table, {}, {}, "random", "NDCG@10") is None
    assert difficulty_figure(table, {}, {"random": 2, "lambdamart": None}, "random", "NDCG@10") is None
    assert difficulty_figure(table, {}, {"l_hrel": 6}, "random", "NDCG@10") is None  # no such system
    out = difficulty_figure(table, {}, {"q_nrel": 2}, "random", "NDCG@10")  # no interaction: titles only
    assert out is not None
    _is_png_and_pdf(out)
