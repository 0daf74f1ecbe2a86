"""`ltr generate --shape istella|yahoo`: layouts, determinism, label shares, sparse lines, the sentinel, and a
hidden relevance that a trained ranker finds better than any single feature."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import xgboost as xgb

from pipelines.app.cli import main
from pipelines.core.config import ConfigError, GenerateConfig
from pipelines.data import shapes
from pipelines.data.generate import generate
from udfs.letor_chunks import sorted_rows
from udfs.letor_parse import LineSpec, parse_block
from udfs.metrics import NdcgSpec, ndcg, offsets_from_qids

SENTINEL = b"1.79769313486e+308"


def _parse(path, n_features):
    """Rows sorted by qid; Istella's sentinel read as 0 (ingest clamps it; the parser refuses it)."""
    text = path.read_bytes().replace(SENTINEL, b"0")
    block = parse_block(np.frombuffer(text, dtype=np.uint8).copy(), LineSpec(n_features))
    assert block.n_bad == 0
    q, y, _, X = sorted_rows(block)
    return np.ascontiguousarray(X), y, q


@pytest.fixture(scope="module")
def istella(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "istella"
    generate(str(out), queries=60, seed=3, workers=1, shape="istella")
    return out


@pytest.fixture(scope="module")
def yahoo(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "yahoo"
    generate(str(out), queries=300, seed=3, workers=1, shape="yahoo")
    return out


@pytest.mark.parametrize("shape,queries", [("istella", 12), ("yahoo", 40)])
def test_same_seed_same_bytes_whatever_the_workers(tmp_path, monkeypatch, shape, queries):
    # small batches, so that each file has several and two processes make them out of order
    monkeypatch.setitem(shapes.SHAPES, shape, dataclasses.replace(shapes.SHAPES[shape], batch_rows=300))
    a = generate(str(tmp_path / "a"), queries=queries, seed=5, workers=1, shape=shape)
    b = generate(str(tmp_path / "b"), queries=queries, seed=5, workers=2, shape=shape)
    generate(str(tmp_path / "c"), queries=queries, seed=6, workers=1, shape=shape)
    assert a.rows == b.rows and a.files == b.files == shapes.SHAPES[shape].files
    for f in a.files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    first = a.files[0]
    assert (tmp_path / "a" / first).read_bytes() != (tmp_path / "c" / first).read_bytes()


def test_istella_layout_split_and_record(istella):
    assert sorted(p.relative_to(istella).as_posix() for p in istella.rglob("*.txt")) == [
        "full/test.txt",
        "full/train.txt",
    ]
    tr = set(np.unique(_parse(istella / "full" / "train.txt", 220)[2]).tolist())
    te = set(np.unique(_parse(istella / "full" / "test.txt", 220)[2]).tolist())
    assert not tr & te and (len(tr), len(te)) == (42, 18)  # 60 * 23219 / 33018 = 42.2
    rec = json.loads((istella / "generate.json").read_text())
    assert rec["shape"] == "istella" and rec["n_features"] == 220 and rec["labels"] == [0, 4]
    assert rec["files"] == ["full/train.txt", "full/test.txt"]
    assert rec["subset_queries"] == {"train": 42, "test": 18}


def test_yahoo_layout_split_and_record(yahoo):
    assert sorted(p.name for p in yahoo.iterdir()) == [
        "generate.json",
        "set1.test.txt",
        "set1.train.txt",
        "set1.valid.txt",
    ]
    counts = [len(np.unique(_parse(yahoo / f, 699)[2])) for f in ("set1.train.txt", "set1.valid.txt", "set1.test.txt")]
    assert counts == [200, 30, 70]  # 300 * (19944, 2994, 6983) / 29921 = 200.0, 30.0, 70.0
    rec = json.loads((yahoo / "generate.json").read_text())
    assert rec["shape"] == "yahoo" and rec["n_features"] == 699 and rec["labels"] == [0, 4]


def test_query_sizes_like_the_real_sets():
    _, n, file = shapes.shape_queries(shapes.ISTELLA, 33018, seed=2018)
    assert 9.5e6 < n.sum() < 11.5e6  # Istella: 10,454,629 rows
    assert n.min() == 1 and n.max() > 2000
    assert np.bincount(file).tolist() == [23219, 9799]
    _, n, file = shapes.shape_queries(shapes.YAHOO, 29921, seed=2018)
    assert 650_000 < n.sum() < 770_000  # Yahoo set 1: 709,877 rows
    assert np.bincount(file).tolist() == [19944, 2994, 6983]


def test_too_few_queries_and_unknown_shapes_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"--queries must be at least 3 for --shape yahoo \(one per file: set1"):
        generate(str(tmp_path / "y"), queries=2, seed=1, shape="yahoo")
    with pytest.raises(ValueError, match="--queries must be at least 2 for --shape istella"):
        generate(str(tmp_path / "i"), queries=1, seed=1, shape="istella")
    with pytest.raises(
        ConfigError, match="generate.shape \\(--shape\\) must be one of mslr, istella, yahoo, got 'letor'"
    ):
        GenerateConfig(shape="letor")


def test_istella_labels_values_and_sentinel(istella):
    X, y, _ = _parse(istella / "full" / "train.txt", 220)
    share = np.bincount(y, minlength=5) / y.size
    assert 0.80 < share[0] < 0.95 and 0.001 < share[4] < 0.03 and np.all(share > 0)  # heavily skewed
    integer = np.all(X == np.round(X), axis=0)
    assert 40 < integer.sum() < 120  # counts and reals mixed
    text = (istella / "full" / "train.txt").read_text()
    hits = re.findall(r" (\d+):1\.79769313486e\+308(?= |\n)", text)
    assert sorted(set(map(int, hits))) == shapes.ISTELLA_SENTINEL_FEATURES.tolist()
    assert 0 < len(hits) < 0.01 * y.size  # about 0.1% of rows, in each of 2 features


def test_yahoo_labels_and_sparse_lines(yahoo):
    X, y, _ = _parse(yahoo / "set1.train.txt", 699)
    share = np.bincount(y, minlength=5) / y.size
    assert np.all(np.abs(share - [0.26, 0.36, 0.28, 0.08, 0.02]) < [0.06, 0.06, 0.06, 0.04, 0.02])
    assert 18 < y.size / 200 < 30  # about 23.7 documents a query
    lines = (yahoo / "set1.train.txt").read_text().splitlines()
    present, rates = [], np.zeros(699)
    for line in lines:
        ids = [int(t.split(":")[0]) for t in line.split()[2:]]
        values = [t.split(":")[1] for t in line.split()[2:]]
        assert ids == sorted(set(ids))  # increasing
        assert all(0 <= float(v) <= 1 and len(v.partition(".")[2]) <= 6 for v in values)
        present.append(len(ids))
        rates[np.array(ids) - 1] += 1
    rates /= len(lines)
    assert 150 < np.mean(present) < 320  # about a third of 699
    assert (rates > 0.95).sum() >= 10 and (rates < 0.1).sum() > 150  # some always present, many rarely


def _learned_vs_best_single(folder, train, test, n_features, rounds):
    Xtr, ytr, qtr = _parse(folder / train, n_features)
    Xte, yte, qte = _parse(folder / test, n_features)
    off = offsets_from_qids(qte)
    spec = NdcgSpec()
    # the best single feature and direction on train, as a one-feature ranker would pick it
    off_tr = offsets_from_qids(qtr)
    on_train = [(ndcg(off_tr, ytr, s * Xtr[:, j], spec).mean(), s, j) for j in range(n_features) for s in (1, -1)]
    _, s, j = max(on_train)
    single = ndcg(off, yte, s * Xte[:, j], spec).mean()
    model = xgb.train(
        {"objective": "rank:ndcg", "eta": 0.15, "max_depth": 4, "tree_method": "hist", "nthread": 2, "seed": 0},
        xgb.DMatrix(Xtr, ytr, qid=qtr),
        num_boost_round=rounds,
    )
    learned = ndcg(off, yte, model.predict(xgb.DMatrix(Xte)), spec).mean()
    return learned, single


def test_istella_ranker_beats_every_single_feature(istella):
    learned, single = _learned_vs_best_single(istella / "full", "train.txt", "test.txt", 220, 30)
    assert learned > single + 0.05, (learned, single)


def test_yahoo_ranker_beats_every_single_feature(yahoo):
    learned, single = _learned_vs_best_single(yahoo, "set1.train.txt", "set1.test.txt", 699, 30)
    assert learned > single + 0.05, (learned, single)


def test_cli_generate_yahoo(tmp_path):
    out = tmp_path / "y"
    assert main(["generate", "--shape", "yahoo", "--queries", "40", "--workers", "1", "--out", str(out)]) == 0
    assert json.loads((out / "generate.json").read_text())["shape"] == "yahoo"
    assert all((out / f).stat().st_size > 0 for f in ("set1.train.txt", "set1.valid.txt", "set1.test.txt"))
