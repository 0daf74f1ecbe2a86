"""`ltr generate`: layout, determinism, MSLR-like statistics, and real (but imperfect) signals."""

from __future__ import annotations

import filecmp

import numpy as np
import pytest
import xgboost as xgb

from pipelines.data.dataset import MSLR_ROTATION
from pipelines.data.generate import NOISY_SUBSETS, generate, mslr_queries
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
    _, n, subset = mslr_queries(31531, seed=2018)
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


def _labels_and_rest(path) -> tuple[np.ndarray, list[bytes]]:
    """Each line's label and the rest of it (qid and features)."""
    lines = path.read_bytes().splitlines()
    return np.array([int(x.split(b" ", 1)[0]) for x in lines]), [x.split(b" ", 1)[1] for x in lines]


@pytest.mark.parametrize("shape, train, clean", [
    ("mslr", "Fold1/train.txt", ["Fold1/vali.txt", "Fold1/test.txt"]),
    ("yahoo", "set1.train.txt", ["set1.valid.txt", "set1.test.txt"]),
])  # fmt: skip
def test_label_noise_redraws_a_share_of_training_labels_only(tmp_path, shape, train, clean):
    import json

    share, grades = 0.2, 5  # labels 0..4, drawn uniformly: a redrawn label changes with probability 4/5
    generate(str(tmp_path / "clean"), queries=120, seed=5, workers=1, shape=shape)
    generate(str(tmp_path / "noisy"), queries=120, seed=5, workers=1, shape=shape, label_noise=share)
    for name in clean:  # validation and test: byte for byte the clean generation
        assert (tmp_path / "noisy" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()
    y0, rest0 = _labels_and_rest(tmp_path / "clean" / train)
    y1, rest1 = _labels_and_rest(tmp_path / "noisy" / train)
    assert rest1 == rest0  # the same queries, documents and features: only labels change
    n, changed = y0.size, int((y0 != y1).sum())
    p = share * (grades - 1) / grades
    assert abs(changed - n * p) < 4 * (n * p * (1 - p)) ** 0.5, (changed, n)  # within 4 sd of the binomial
    assert set(np.unique(y1)) <= set(range(grades))
    record = json.loads((tmp_path / "noisy" / "generate.json").read_text())
    assert record["label_noise"] == share and record["noisy_labels"]["labels_changed"] == changed
    assert record["noisy_labels"]["rows"] == n and changed <= record["noisy_labels"]["rows_redrawn"] <= n
    assert "label_noise" not in json.loads((tmp_path / "clean" / "generate.json").read_text()).get("noisy_labels", {})
    if shape == "mslr":  # in the subsets themselves (every fold's files agree on a row): fold 1's S1-S3
        assert NOISY_SUBSETS == ("S1", "S2", "S3") and record["noisy_labels"]["in"] == list(NOISY_SUBSETS)
        for f, d in MSLR_ROTATION.items():
            same = [(tmp_path / x / f"Fold{f}" / "test.txt").read_bytes() for x in ("clean", "noisy")]
            assert (same[0] == same[1]) == (d["test"][0] not in NOISY_SUBSETS)
    with pytest.raises(ValueError, match=r"label_noise must be in \[0, 1\], got 1.5"):
        generate(str(tmp_path / "bad"), queries=120, seed=5, shape=shape, label_noise=1.5)


def test_a_noisy_generation_reaches_the_manifest_and_refuses_folds_that_test_on_noise(tmp_path):
    from pipelines.core.config import ConfigError
    from pipelines.data.dataset import Dataset
    from pipelines.data.ingest.job import source_noise
    from pipelines.study.design import check_clean_evaluation

    generate(str(tmp_path / "noisy"), queries=20, seed=5, workers=1, label_noise=0.1)
    generate(str(tmp_path / "clean"), queries=20, seed=5, workers=1)
    assert source_noise(str(tmp_path / "clean")) == {} and source_noise(str(tmp_path / "nowhere")) == {}
    noise = source_noise(str(tmp_path / "noisy"))["label_noise"]
    assert noise["share"] == 0.1 and noise["in"] == ["S1", "S2", "S3"]
    folds = {str(f): d for f, d in MSLR_ROTATION.items()}
    ds = Dataset(path="mem", manifest={"folds": folds, "label_noise": noise})
    check_clean_evaluation(ds, [1])  # trains on S1-S3, validates on S4, tests on S5
    with pytest.raises(ConfigError) as e:
        check_clean_evaluation(ds, [1, 3])  # fold 3 validates on S1 and tests on S2
    assert str(e.value) == (
        "grid.folds: fold 3 validates or tests on S1+S2, which holds noisy labels (generate.label_noise 0.1 went "
        "into S1+S2+S3 of mem); folds with clean validation and test labels: [1] (--set grid.folds=[1])"
    )
    check_clean_evaluation(Dataset(path="mem", manifest={"folds": folds}), [1, 2, 3, 4, 5])  # clean data: any fold
