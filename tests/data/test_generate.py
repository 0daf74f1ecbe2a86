"""`ltr generate`: layout, determinism, MSLR-like statistics, and real (but imperfect) signals."""

from __future__ import annotations

import filecmp

import numpy as np
import pytest
import xgboost as xgb

from pipelines.data.dataset import MSLR_ROTATION
from pipelines.data.generate import generate, query_plan
from udfs.letor_chunks import sorted_rows
from udfs.letor_parse import LineSpec, parse_block
from udfs.metrics import NdcgSpec, ndcg, offsets_from_qids


def _parse(path):
    block = parse_block(np.fromfile(path, dtype=np.uint8), LineSpec(136))
    assert block.n_bad == 0
    q, y, _, X = sorted_rows(block)
    return np.ascontiguousarray(X), y, q


def test_layout_is_the_mslr_rotation(small_letor):
    test_of = {d["test"][0]: small_letor / f"Fold{f}" / "test.txt" for f, d in MSLR_ROTATION.items()}
    qsets = {s: set(np.unique(_parse(p)[2]).tolist()) for s, p in test_of.items()}
    assert sum(len(v) for v in qsets.values()) == 60
    assert len(set().union(*qsets.values())) == 60  # subsets are disjoint
    for f, d in MSLR_ROTATION.items():
        folder = small_letor / f"Fold{f}"
        assert (folder / "vali.txt").read_bytes() == test_of[d["vali"][0]].read_bytes()
        assert (folder / "train.txt").read_bytes() == b"".join(test_of[s].read_bytes() for s in d["train"])


def test_deterministic_for_a_seed_whatever_the_workers(tmp_path):
    a = generate(str(tmp_path / "a"), queries=25, seed=5, workers=1)
    b = generate(str(tmp_path / "b"), queries=25, seed=5, workers=2)
    generate(str(tmp_path / "c"), queries=25, seed=6, workers=1)
    assert a.rows == b.rows
    for f in range(1, 6):
        for s in ("train", "vali", "test"):
            assert filecmp.cmp(
                tmp_path / "a" / f"Fold{f}" / f"{s}.txt", tmp_path / "b" / f"Fold{f}" / f"{s}.txt", shallow=False
            )
    assert (tmp_path / "a" / "Fold1" / "test.txt").read_bytes() != (tmp_path / "c" / "Fold1" / "test.txt").read_bytes()


def test_rejects_fewer_queries_than_subsets(tmp_path):
    with pytest.raises(ValueError, match="--queries must be at least 5"):
        generate(str(tmp_path / "x"), queries=4, seed=1)


def test_query_sizes_like_mslr():
    _, n, subset = query_plan(31531, seed=2018)
    assert 3.4e6 < n.sum() < 4.2e6  # MSLR-WEB30K: 3,771,125 rows
    assert n.min() == 1 and n.max() > 1000
    assert 100 < n.mean() < 140
    assert np.bincount(subset).tolist() == [6307, 6306, 6306, 6306, 6306]


@pytest.fixture(scope="module")
def stats_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "d"
    generate(str(out), queries=400, seed=3, workers=2)
    return out


def test_label_shares_and_empty_queries(stats_data):
    X, y, q = _parse(stats_data / "Fold1" / "train.txt")
    share = np.bincount(y, minlength=5) / y.size
    # MSLR-WEB30K: about 0.52 / 0.32 / 0.13 / 0.02 / 0.008
    assert 0.45 < share[0] < 0.60 and 0.25 < share[1] < 0.38 and 0.08 < share[2] < 0.18
    assert 0.008 < share[3] < 0.04 and 0.002 < share[4] < 0.02
    off = offsets_from_qids(q)
    empty = np.maximum.reduceat(y, off[:-1]) == 0
    assert 0.01 < empty.mean() < 0.10  # some queries have no relevant document
    # integer-valued count features are integers; ratios lie in [0, 1]
    assert np.all(X[:, 0:5] == np.round(X[:, 0:5])) and np.all(X[:, 10:15] == np.round(X[:, 10:15]))
    assert X[:, 5:10].min() >= 0 and X[:, 5:10].max() <= 1
    assert np.all(X[:, 110:125] <= 0)  # LMIR scores are log-probabilities


def test_bm25_informative_but_clearly_below_a_trained_model(stats_data):
    Xtr, ytr, qtr = _parse(stats_data / "Fold1" / "train.txt")
    Xte, yte, qte = _parse(stats_data / "Fold1" / "test.txt")
    off = offsets_from_qids(qte)
    spec = NdcgSpec()
    rng = np.random.default_rng(0)
    random = ndcg(off, yte, rng.random(yte.size), spec).mean()
    per_query_bm25 = ndcg(off, yte, Xte[:, 109], spec)
    bm25 = per_query_bm25.mean()
    model = xgb.train(
        {
            "objective": "rank:ndcg",
            "eta": 0.1,
            "max_leaves": 31,
            "grow_policy": "lossguide",
            "tree_method": "hist",
            "nthread": 2,
            "seed": 0,
        },
        xgb.DMatrix(Xtr, ytr, qid=qtr),
        num_boost_round=60,
    )
    learned = ndcg(off, yte, model.predict(xgb.DMatrix(Xte)), spec).mean()
    assert bm25 > random + 0.05
    assert learned > bm25 + 0.05
    # query difficulty is real: BM25's NDCG@10 varies widely between queries
    assert np.std(per_query_bm25) > 0.15
