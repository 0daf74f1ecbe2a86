"""The larger datasets' presets end to end on a few handwritten lines: Istella's ``full/`` and Yahoo!'s
``set1.*`` layouts found and named, Yahoo!'s absent features stored as missing (NaN) and Istella's overflow
sentinel clamped and counted, difficulty without BM25 or PageRank, and the curricula that need them refused
in one line naming the preset (exit 2) while the others run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.app.cli import main
from pipelines.core.config import ConfigError, dataset_presets, load_config
from pipelines.data.ingest import detect_preset, discover
from pipelines.study.design import check_preset_strategies

BIG = "1.79769313486e+308"
FEATURES = {n: p.n_features for n, p in dataset_presets().items()}


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def _yahoo(root: Path) -> Path:
    """Three queries a split; sparse lines, feature 699 present on some."""
    for name, q0 in (("set1.train.txt", 1), ("set1.valid.txt", 10), ("set1.test.txt", 20)):
        lines = []
        for q in range(q0, q0 + 3):
            lines += [f"2 qid:{q} 1:0.5 7:0.25 699:1", f"0 qid:{q} 7:0.125", f"1 qid:{q} 1:0 3:0.75", f"0 qid:{q} 5:1"]
        _write(root / name, lines)
    _write(root / "set2.train.txt", ["0 qid:900 1:1"])  # set 2 beside it is not read
    return root


def _istella(root: Path) -> Path:
    for name, q0 in (("train.txt", 1), ("test.txt", 50)):
        lines = []
        for q in range(q0, q0 + 4):
            lines += [f"1 qid:{q} 1:3 2:{BIG} 220:0.5", f"0 qid:{q} 1:1 2:7 220:0.25", f"3 qid:{q} 1:9 2:8 220:1"]
        _write(root / "full" / name, lines)
    _write(root / "sample" / "train.txt", ["0 qid:1 1:1"])  # Istella-S beside it is not read
    return root


def test_layouts_are_found_and_name_their_preset(tmp_path):
    y = discover(str(_yahoo(tmp_path / "y")))
    assert y.kind == "yahoo"
    assert [(f.name, f.split) for f in y.files] == [
        ("set1.train.txt", "train"),
        ("set1.valid.txt", "vali"),
        ("set1.test.txt", "test"),
    ]
    assert detect_preset(y, FEATURES)[0] == "yahoo"
    i = discover(str(_istella(tmp_path / "i")))
    assert (i.kind, [f.name for f in i.files]) == ("istella", ["full/train.txt", "full/test.txt"])
    assert detect_preset(i, FEATURES)[0] == "istella"
    # a train/vali/test folder is named by its highest feature id: 220 is Istella-X, 136 MSLR; 5 is nothing known
    for top, want in ((220, "istella-x"), (136, "mslr"), (5, None)):
        d = tmp_path / f"f{top}"
        _write(d / "train.txt", [f"0 qid:1 1:1 {top}:2"])
        found = detect_preset(discover(str(d)), FEATURES)
        assert (found and found[0]) == want, (top, found)


def test_yahoo_ingest_stores_absent_as_missing_and_refuses_bm25_curricula(spark, tmp_path, capsys):
    src = _yahoo(tmp_path / "src")
    ds, diff = tmp_path / "ds", tmp_path / "diff"
    assert main(["ingest", "--src", str(src), "--out", str(ds)]) == 0
    assert "dataset preset yahoo (detected from the yahoo layout: set1.train.txt" in capsys.readouterr().err
    manifest = json.loads((ds / "_manifest.json").read_text())
    assert (manifest["dataset"], manifest["n_features"], manifest["absent_features"]) == ("yahoo", 699, "missing")
    assert manifest["rows"] == 36 and sorted(manifest["folds"]["1"]) == ["test", "train", "vali"]
    t = pq.read_table(ds / "subset=train").sort_by([("qid", "ascending"), ("doc", "ascending")])
    f1, f3, f699 = (t[c].to_numpy()[:4] for c in ("f1", "f3", "f699"))
    np.testing.assert_array_equal(f1, np.float32([0.5, np.nan, 0.0, np.nan]))  # a present 0 stays 0
    np.testing.assert_array_equal(f3, np.float32([np.nan, np.nan, 0.75, np.nan]))
    np.testing.assert_array_equal(f699, np.float32([1, np.nan, np.nan, np.nan]))

    assert main(["difficulty", "--data", str(ds), "--out", str(diff)]) == 0
    summary = json.loads((diff / "_difficulty.json").read_text())
    assert summary["feature_roles"] == {"bm25": 0, "pagerank": 0}
    assert summary["mean_ndcg_bm25"] is None and summary["mean_ndcg_pagerank"] is None
    scores = pq.read_table(diff).to_pandas()
    assert scores["ndcg_bm25"].isna().all() and (scores["n_rel"] == 2).all()

    base = ["curriculum", "--data", str(ds), "--difficulty", str(diff), "--fold", "1"]
    capsys.readouterr()
    assert main([*base, "--strategy", "q_bm25", "--out", str(tmp_path / "c1")]) == 2
    err = capsys.readouterr().err
    refusal = [line for line in err.splitlines() if line.startswith("ltr curriculum: error:")]
    assert len(refusal) == 1 and "q_bm25 ranks queries by BM25" in refusal[0], err
    supports = "it supports q_nrel, q_size, teacher_margin, teacher_loss, teacher_ndcg, l_hrel, random"
    assert f"dataset yahoo (conf/datasets/yahoo.yaml) has no such feature: {supports}" in err
    assert not (tmp_path / "c1").exists()
    assert main([*base, "--strategy", "q_nrel", "--out", str(tmp_path / "c2")]) == 0

    # ltr grid: refused before its difficulty scores (none in its work_dir), in one line
    work = tmp_path / "grid"
    grid = ["grid", "--data", str(ds), "--set", f"work_dir={work}", "--set", "grid.strategies=[q_nrel,q_pagerank]"]
    assert main(grid) == 2
    refusal = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ltr grid: error:")]
    assert len(refusal) == 1 and "q_pagerank ranks queries by PageRank, and dataset yahoo" in refusal[0], refusal
    assert "--set grid.strategies=[q_nrel]" in refusal[0] and not (work / "difficulty").exists()


def test_istella_ingest_clamps_the_sentinel_and_counts_it(spark, tmp_path):
    ds = tmp_path / "ds"
    assert main(["ingest", "--src", str(_istella(tmp_path / "src")), "--out", str(ds)]) == 0
    manifest = json.loads((ds / "_manifest.json").read_text())
    assert manifest["dataset"] == "istella" and manifest["overflow"] == {"policy": "clamp", "values_clamped": 8}
    assert manifest["quarantine"]["lines"] == 0 and sorted(manifest["folds"]["1"]) == ["test", "train"]
    f2 = pq.read_table(ds / "subset=train", columns=["f2"])["f2"].to_numpy()
    assert (f2 == np.finfo(np.float32).max).sum() == 4 and np.isin(f2[f2 < 1e30], [7, 8]).all()


@pytest.mark.parametrize(
    ("dataset", "strategies", "refused"),
    [
        ("yahoo", ["q_nrel", "q_bm25", "random"], "q_bm25 ranks queries by BM25"),
        ("istella", ["q_pagerank"], "q_pagerank ranks queries by PageRank"),
        ("istella-x", ["q_nrel", "l_hrel", "random"], None),
        ("mslr", ["q_nrel", "q_bm25", "q_pagerank"], None),
    ],
)
def test_a_study_is_refused_before_any_work_when_a_strategy_needs_a_missing_feature(dataset, strategies, refused):
    cfg = load_config(None, [f"dataset={dataset}", f"grid.strategies={json.dumps(strategies)}"])
    if refused is None:
        check_preset_strategies(cfg)
        return
    with pytest.raises(ConfigError) as err:
        check_preset_strategies(cfg)
    msg = str(err.value)
    assert refused in msg and f"dataset {dataset} (conf/datasets/{dataset}.yaml)" in msg and "\n" not in msg
    assert "(a grid: --set grid.strategies=[" in msg


def test_ltr_run_refuses_a_shape_read_with_another_preset_and_a_strategy_the_preset_lacks(tmp_path):
    """Both before any work (no Spark session, nothing written); the shape is in the generate step's key."""
    from pipelines.app.run import run_study
    from pipelines.study.steps import generate_state

    base = [f"work_dir={json.dumps(str(tmp_path / 'w'))}", "generate.shape=yahoo"]
    with pytest.raises(ConfigError, match=r"generate.shape=yahoo writes yahoo-shaped data.*--set dataset=yahoo"):
        run_study(load_config(None, base))
    with pytest.raises(ConfigError, match=r"q_bm25 ranks queries by BM25 and q_pagerank ranks queries by PageRank"):
        run_study(load_config(None, [*base, "dataset=yahoo"]))
    assert not (tmp_path / "w").exists()
    mslr = load_config(None, ["generate.queries=600", "generate.seed=2018"])
    assert generate_state(load_config(None, base), str(tmp_path)).key != generate_state(mslr, str(tmp_path)).key


def test_the_report_leaves_out_the_scores_a_dataset_has_not(tmp_path):
    """Scores written without a BM25 or PageRank feature are null in Parquet: read as NaN, and only the scores
    present enter the breakdowns by difficulty."""
    import pyarrow as pa

    from pipelines.report.by_difficulty import load_scores, scores_present

    d = tmp_path / "scores"
    d.mkdir()
    table = pa.table(
        {
            "subset": ["test", "test"],
            "qid": pa.array([1, 2], pa.int32()),
            "ndcg_bm25": pa.array([None, None], pa.float64()),
            "ndcg_pagerank": pa.array([None, 0.5], pa.float64()),
            "n_rel": pa.array([3, 1], pa.int32()),
        }
    )
    pq.write_table(table, d / "part-0.parquet")
    scores = load_scores(str(d), None, [1])
    assert np.isnan(scores[(1, 1)]["ndcg_bm25"]) and scores[(1, 2)]["ndcg_pagerank"] == 0.5
    assert list(scores_present(scores)) == ["ndcg_pagerank", "n_rel"]
