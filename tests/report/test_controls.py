"""Each curriculum against its anti-curriculum and the random curriculum (pipelines.report.controls): the
differences by hand, Holm over the family, a win only over both, rows grouped by kind; and the report's section."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.report.controls import by_kind, curriculum_controls, kind_of
from pipelines.report.render import _controls_table
from pipelines.report.stats import holm, randomization_test
from tests.helpers import record

N = 12  # queries per fold


def _grid(offsets: dict[tuple[str, int | None], float]) -> list:
    """Two folds of N queries; each system's per-query NDCG is a shared base plus its own offset, so every paired
    difference of two systems is the difference of their offsets, the same on every query."""
    rng = np.random.default_rng(0)
    out = []
    for fold in (1, 2):
        base = rng.uniform(0.3, 0.6, N)
        for (s, t), off in offsets.items():
            perq = {10 * fold + i: float(base[i] + off) for i in range(N)}
            out.append(record(fold, s, t, [0.5], perq))
    return out


def test_kinds_are_the_registry_s_and_only_ordered_curricula_have_controls():
    assert kind_of("q_nrel") == "oracle" and kind_of("sigma_bm25") == "label_free" and kind_of("q_size") == "label_free"
    for other in ("anti_q_nrel", "random", "l_hrel", "none", "lambdamart", "mse", "blend_linear"):
        assert kind_of(other) is None, other


def test_a_curriculum_beats_its_controls_only_when_it_beats_both():
    recs = _grid({
        ("lambdamart", None): 0.0,
        ("q_nrel", 2): 0.10,  # +0.10 over its anti-curriculum, +0.05 over random
        ("anti_q_nrel", 2): 0.0,
        ("random", 2): 0.05,
        ("q_size", 2): 0.03,  # -0.02 against random, and no anti-curriculum in the grid
        ("q_bm25", 4): 0.2,  # no control at switch 4
        ("mse", 2): 0.3,
    })  # fmt: skip
    rows = curriculum_controls(recs, n_perm=2000, n_boot=200, seed=1, primary_test="randomisation")
    by = {r["system"]: r for r in rows}
    assert list(by) == ["q_bm25-4", "q_nrel-2", "q_size-2"]  # oracles first, then label-free, report order within
    q = by["q_nrel-2"]
    assert q["kind"] == "oracle" and q["anti"]["system"] == "anti_q_nrel-2" and q["random"]["system"] == "random-2"
    assert q["anti"]["delta"] == pytest.approx(0.10) and q["random"]["delta"] == pytest.approx(0.05)
    assert q["anti"]["queries"] == 2 * N and q["anti"]["folds"] == [1, 2]
    assert q["anti"]["ci95_bootstrap"] == pytest.approx([0.10, 0.10])  # every difference the same
    # the p-values: the randomisation test of each pair, then Holm over the three comparisons made
    x = np.concatenate([[r.per_query[k] for k in sorted(r.per_query)] for r in recs if r.strategy == "q_nrel"])
    y = np.concatenate([[r.per_query[k] for k in sorted(r.per_query)] for r in recs if r.strategy == "anti_q_nrel"])
    assert q["anti"]["perm_p"] == randomization_test(x, y, 2000, 1)
    raw = [q["anti"]["perm_p"], q["random"]["perm_p"], by["q_size-2"]["random"]["perm_p"]]
    assert [q["anti"]["perm_p_holm"], q["random"]["perm_p_holm"], by["q_size-2"]["random"]["perm_p_holm"]] == holm(raw)
    assert q["anti"]["significance"] == q["random"]["significance"] == "win" and q["beats_both"]
    s = by["q_size-2"]
    assert s["kind"] == "label_free" and s["anti"] is None and s["random"]["delta"] == pytest.approx(-0.02)
    assert s["random"]["significance"] == "loss" and not s["beats_both"]
    assert by["q_bm25-4"]["anti"] is None and by["q_bm25-4"]["random"] is None and not by["q_bm25-4"]["beats_both"]
    kinds = by_kind(rows)
    assert kinds == {
        "oracle": {"curricula": ["q_bm25-4", "q_nrel-2"], "beat_both": ["q_nrel-2"], "controlled": ["q_nrel-2"]},
        "label_free": {"curricula": ["q_size-2"], "beat_both": [], "controlled": []},
    }
    # a tie with one control is no win: the same curriculum against a random control as good as it
    tied = _grid({("q_nrel", 2): 0.1, ("anti_q_nrel", 2): 0.0, ("random", 2): 0.1})
    row = curriculum_controls(tied, n_perm=500, n_boot=100, seed=1, primary_test="t")[0]
    assert row["random"]["delta"] == pytest.approx(0.0, abs=1e-12) and row["random"]["significance"] is None
    assert row["anti"]["significance"] == "win" and not row["beats_both"]
    with pytest.raises(ValueError, match="unknown primary test 'z'"):
        curriculum_controls(tied, n_perm=10, n_boot=10, seed=1, primary_test="z")
    # the page's section: a table per kind, each with its answer line
    sec = _controls_table(rows, kinds, "NDCG@10")
    texts = [b for b in sec.body if isinstance(b, str)]
    oracle = "Oracle (read from the labels): 1 of 2 curricula have both controls in the grid; beat both: q_nrel-2."
    assert oracle in texts
    assert "Label-free: 0 of 1 curricula have both controls in the grid; beat both: none." in texts
    tables = [b for b in sec.body if not isinstance(b, str)]
    assert [t.caption for t in tables] == ["Difficulty oracle (read from the labels)", "Difficulty label-free"]
    assert tables[1].rows == [["q_size-2", "not in the grid", "-0.0200 [-0.0200, -0.0200] (loss)", "no"]]


def test_the_self_paced_curriculum_against_its_own_controls_under_the_kind_dynamic(tmp_path):
    from dataclasses import replace

    from pipelines.report.figures import selfpaced_figure

    recs = _grid({("selfpaced", 2): 0.08, ("antipaced", 2): 0.0, ("randompaced", 2): 0.02, ("random", 2): 0.5})
    assert kind_of("selfpaced") == "dynamic" and kind_of("antipaced") is None and kind_of("randompaced") is None
    (row,) = curriculum_controls(recs, n_perm=500, n_boot=100, seed=1, primary_test="randomisation")
    assert row["kind"] == "dynamic" and row["anti"]["system"] == "antipaced-2"
    assert row["random"]["system"] == "randompaced-2"  # not the static random curriculum
    assert row["anti"]["delta"] == pytest.approx(0.08) and row["random"]["delta"] == pytest.approx(0.06)
    assert by_kind([row]) == {"dynamic": {"curricula": ["selfpaced-2"], "beat_both": ["selfpaced-2"],
                                          "controlled": ["selfpaced-2"]}}  # fmt: skip
    sel = [[0, 0.25, 3, 11], [1, 1.0, 11, 11]]
    files = selfpaced_figure([replace(r, selections=sel) for r in recs if r.strategy.endswith("paced")])
    assert set(files) == {"png", "pdf"} and files["png"][:4] == b"\x89PNG"
