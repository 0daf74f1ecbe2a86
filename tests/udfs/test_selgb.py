"""Selective Gradient Boosting (udfs.objectives.selgb): the documents it keeps and its gradient, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.app.cli import main
from udfs import components
from udfs.objectives.lambdamart import lambdarank_grad
from udfs.objectives.registry import get
from udfs.objectives.selgb import selected, selgb_grad

# Query 1: five non-relevant documents (0, 2, 3, 5, 6), two relevant; documents 2 and 5 tie at 0.9.
# Query 2: four non-relevant, one relevant.   Query 3: two non-relevant, one relevant.
SHARED = {"k": 10, "eta": 0.05, "exp_gain": True, "seed": 0}  # the training settings every objective's params hold
LABELS = np.array([0, 2, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2], dtype=np.float32)
MARGINS = np.array([0.5, 0.1, 0.9, -0.3, 0.2, 0.9, 0.0, 0.4, -0.2, 0.7, 0.1, 0.3, 1.0, -1.0, 0.0], dtype=np.float32)
OFFSETS = np.array([0, 7, 12, 15])
DOC = np.array([0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 0, 1, 2])


def _kept(negatives: float, doc: np.ndarray = DOC) -> list[int]:
    return np.flatnonzero(selected(MARGINS, LABELS, OFFSETS, doc, negatives)).tolist()


def test_every_relevant_document_and_the_top_share_of_the_others_by_score():
    # 20%: one of query 1's five (round(1.0); the tie at 0.9 goes to document 2), one of query 2's four (round(0.8),
    # the highest: document 2 at 0.7), none of query 3's two (round(0.4) = 0)
    assert _kept(0.2) == [1, 2, 4, 8, 9, 14]
    # the tie goes to the lower document number, wherever its row is
    assert _kept(0.2, doc=np.array([0, 1, 5, 3, 4, 2, 6, 0, 1, 2, 3, 4, 0, 1, 2]))[:3] == [1, 4, 5]
    # halves round away from zero, as C's round(): 50% of five is three (Python's round(2.5) would give two)
    assert _kept(0.5)[:5] == [0, 1, 2, 4, 5]
    assert _kept(1.0) == list(range(15))


def test_the_gradient_by_hand_on_the_kept_documents_and_zero_elsewhere():
    kept = selected(MARGINS, LABELS, OFFSETS, DOC, 0.2)
    grad, hess = selgb_grad(MARGINS, LABELS, OFFSETS, kept, k=10)
    assert not grad[~kept].any() and not hess[~kept].any()
    # query 2 keeps two documents, the relevant one (row 8, score -0.2) below the non-relevant one (row 9, 0.7):
    # LambdaMART on that list of two, written out (XGBoost's lambda: |dNDCG| over the score gap + 0.01, the
    # logistic pair weight, then the query's normalisation log2(1 + sum) / sum)
    diff = np.float32(np.float32(-0.2) - np.float32(0.7))
    sig = 1.0 / (math.exp(-float(diff)) + 1.0 + 1e-16)
    delta = (1.0 - 1.0 / math.log2(3.0)) / (abs(float(diff)) + 0.01)  # the relevant one at rank 2, gain 1, IDCG 1
    lam = (sig - 1.0) * delta
    h = sig * (1.0 - sig) * delta * 2.0
    norm = math.log2(1.0 - 2.0 * lam) / (-2.0 * lam)
    np.testing.assert_allclose(grad[8:10], [lam * norm, -lam * norm], rtol=1e-5)
    np.testing.assert_allclose(hess[8:10], [h * norm, h * norm], rtol=1e-5)
    assert grad[8] < 0  # pushed up
    # query 1: LambdaMART on its three kept documents alone (rows 1, 2, 4), with the full list's ideal DCG
    g1, h1 = lambdarank_grad(MARGINS[[1, 2, 4]], LABELS[[1, 2, 4]], np.array([0, 3]), k=10)
    np.testing.assert_array_equal(grad[[1, 2, 4]], g1)
    np.testing.assert_array_equal(hess[[1, 2, 4]], h1)
    # query 3 keeps its relevant document alone: no pair, no gradient
    assert not grad[12:].any()


def test_the_objective_keeps_every_document_at_the_first_tree_and_selects_after():
    f = get("selgb").make(SHARED, LABELS, OFFSETS, np.repeat([1, 2, 3], [7, 5, 3]), DOC,
                          {"negatives": 0.2})  # fmt: skip
    g0, h0 = f(MARGINS, 0)
    lg, lh = lambdarank_grad(MARGINS, LABELS, OFFSETS, k=10)
    np.testing.assert_array_equal(g0, lg)
    np.testing.assert_array_equal(h0, lh)
    g1, _ = f(MARGINS, 1)
    assert np.flatnonzero(g1).tolist() == [1, 2, 4, 8, 9]
    assert not get("selgb").seeded


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_a_share_outside_0_1_exits_2_in_one_line_before_any_spark_job(value, capsys):
    try:
        assert main(["plugins", "--check", "--set", f"components.selgb.negatives={value}"]) == 2
    finally:
        components.configure({})
    err = capsys.readouterr().err.strip()
    assert "selgb's negatives (the share of non-relevant documents kept) must be in (0, 1]" in err
    assert len(err.splitlines()) == 1
