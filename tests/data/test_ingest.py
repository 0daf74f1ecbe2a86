"""`ltr ingest` on Spark: golden files, quarantine, strict errors, rotation, idempotence, safety."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import functions as F

from pipelines.core.config import ConfigError, IngestConfig, load_dataset_spec
from pipelines.data.dataset import MSLR_ROTATION, load_split, open_dataset
from pipelines.data.ingest import IngestError, discover, ingest, line_spec
from tests.conftest import CHUNK_BYTES, GOLDEN, golden
from udfs import schema
from udfs.letor_chunks import sorted_rows
from udfs.letor_parse import LineSpec, parse_block

MSLR = load_dataset_spec("mslr")
SIX = IngestConfig(n_features=6, chunk_bytes=64)  # tiny chunks: many tasks, every boundary case


def _rows(spark, path: str, subset: str | None = None) -> list:
    df = spark.read.parquet(path)
    if subset:
        df = df.where(F.col(schema.SUBSET) == subset)
    out = df.orderBy(schema.QID, schema.DOC).collect()
    n = len([c for c in df.columns if c.startswith("f")])
    return [[r[schema.QID], r[schema.LABEL], r[schema.DOC], [r[f"f{i}"] for i in range(1, n + 1)]] for r in out]


def _one_fold(tmp_path: Path, name: str) -> Path:
    d = tmp_path / f"src_{name}"
    d.mkdir()
    shutil.copy(GOLDEN / f"{name}.txt", d / "train.txt")
    return d


@pytest.mark.parametrize("name", ["well_formed", "sparse_comments", "malformed"])
def test_golden_files(spark, tmp_path, name):
    src, exp = golden(name)
    out = tmp_path / "ds"
    m = ingest(spark, str(_one_fold(tmp_path, name)), str(out), MSLR, SIX)
    expected = [[q, lab, d, np.float32(v).tolist()] for q, lab, d, v in exp["rows"]]
    assert _rows(spark, str(out)) == expected
    assert m["rows"] == len(exp["rows"]) and m["layout"] == "as_given"
    assert m["folds"] == {"1": {"train": ["train"]}}
    src_stats = m["sources"][0]
    assert (src_stats["lines"], src_stats["blank"], src_stats["comments"], src_stats["quarantined"]) == (
        exp["lines"],
        exp["blank"],
        exp["comments"],
        len(exp["quarantine"]),
    )
    # quarantine: file, absolute line, reason, token
    assert m["quarantine"]["lines"] == len(exp["quarantine"])
    if exp["quarantine"]:
        q = spark.read.parquet(str(out / "_quarantine")).orderBy("line").collect()
        assert [[r.line, r.reason, r.token] for r in q] == exp["quarantine"]
        assert {r.file for r in q} == {"train.txt"}
        assert q[0].raw == "x qid:1 1:0.5"
    nc = m["non_contiguous_qids"]
    assert [[e["qid"], e["lines"]] for e in nc["examples"]] == exp["non_contiguous"]
    # the dataset loader: fold 1 train is the whole file
    ds = open_dataset(str(out))
    assert load_split(spark, ds, 1, "train").count() == len(exp["rows"])


def test_merged_queries_stay_in_one_file(spark, tmp_path):
    out = tmp_path / "ds"
    ingest(spark, str(_one_fold(tmp_path, "malformed")), str(out), MSLR, SIX)
    pdf = spark.read.parquet(str(out)).select(schema.QID, F.input_file_name().alias("file")).toPandas()
    assert pdf.groupby(schema.QID)["file"].nunique().eq(1).all()
    assert pdf[schema.QID].nunique() == 2


def test_strict_names_file_line_token(spark, tmp_path):
    src, exp = golden("malformed")
    with pytest.raises(IngestError) as err:
        ingest(spark, str(src), str(tmp_path / "ds"), MSLR, IngestConfig(n_features=6, strict=True, chunk_bytes=64))
    assert str(err.value) == exp["strict_error"]
    assert not (tmp_path / "ds").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary directory left behind


def test_strict_rejects_noncontiguous_queries(spark, tmp_path):
    src = tmp_path / "nc.txt"
    src.write_text("1 qid:1 1:1\n1 qid:2 1:1\n1 qid:1 1:2\n")
    with pytest.raises(IngestError, match=r"nc.txt: qid 1 appears in 2 separate blocks \(first lines \[1, 3\]\)"):
        ingest(spark, str(src), str(tmp_path / "ds"), MSLR, IngestConfig(n_features=6, strict=True))


def test_idempotent_and_atomic_replace(spark, tmp_path):
    src = _one_fold(tmp_path, "well_formed")
    out = tmp_path / "ds"
    m1 = ingest(spark, str(src), str(out), MSLR, SIX)
    rows1 = _rows(spark, str(out))
    m2 = ingest(spark, str(src), str(out), MSLR, IngestConfig(n_features=6, chunk_bytes=1 << 20))
    assert m2["fingerprint"] == m1["fingerprint"]  # chunking does not change the content fingerprint
    assert _rows(spark, str(out)) == rows1
    assert json.loads((out / "_manifest.json").read_text())["fingerprint"] == m1["fingerprint"]
    # a failing run leaves the previous dataset untouched
    bad = tmp_path / "bad.txt"
    bad.write_text("1 qid:1 1:1\n1 qid:1 9:1\n")
    with pytest.raises(IngestError, match=r"bad.txt:2: feature index out of range \[1, 6\]: token '9:1'"):
        ingest(spark, str(bad), str(out), MSLR, IngestConfig(n_features=6, strict=True))
    assert open_dataset(str(out)).fingerprint == m1["fingerprint"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "ds", "src_well_formed"]
    # a different content gives a different fingerprint
    m3 = ingest(spark, str(_one_fold(tmp_path, "sparse_comments")), str(out), MSLR, SIX)
    assert m3["fingerprint"] != m1["fingerprint"]


def test_refuses_to_replace_foreign_directory(spark, tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(IngestError, match="refusing to replace --out .*precious: it exists and is not an ltr output"):
        ingest(spark, str(GOLDEN / "well_formed.txt"), str(out), MSLR, SIX)
    assert (out / "notes.txt").read_text() == "keep me"


def test_source_errors(tmp_path):
    with pytest.raises(IngestError, match="no such file or directory"):
        discover(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(IngestError, match="no LETOR files found; expected Fold1..Fold5/"):
        discover(str(tmp_path / "empty"))
    (tmp_path / "f" / "Fold1").mkdir(parents=True)
    (tmp_path / "f" / "Fold1" / "test.txt").write_text("")
    with pytest.raises(IngestError, match="Fold1/train.txt is missing"):
        discover(str(tmp_path / "f"))


def test_mslr_rotation_each_row_once_and_equal_to_local_parse(spark, small_letor, small_dataset):
    """``small_dataset`` is ``small_letor`` ingested (tests/conftest.py), in ``CHUNK_BYTES`` chunks: several a file."""
    ds = open_dataset(small_dataset)
    m = ds.manifest
    assert m["layout"] == "mslr_rotation" and m["rotation"]["verified"]
    assert sorted(m["subsets"]) == ["S1", "S2", "S3", "S4", "S5"]
    lines = {
        f"Fold{f}/{s}.txt": sum(1 for _ in open(small_letor / f"Fold{f}" / f"{s}.txt"))
        for f in range(1, 6)
        for s in ("train", "vali", "test")
    }
    assert m["rows"] == sum(lines[f"Fold{f}/test.txt"] for f in range(1, 6))
    assert min((small_letor / f"Fold{f}" / "test.txt").stat().st_size for f in range(1, 6)) > 2 * CHUNK_BYTES  # chunks
    counts = spark.read.parquet(small_dataset).groupBy(schema.SUBSET).count().collect()
    per_subset = {r[schema.SUBSET]: r["count"] for r in counts}
    for f in range(1, 6):
        for split in ("train", "vali", "test"):
            assert sum(per_subset[s] for s in ds.subsets(f, split)) == lines[f"Fold{f}/{split}.txt"]
            assert m["splits"][str(f)][split]["rows"] == lines[f"Fold{f}/{split}.txt"]
    for split in ("train", "vali", "test"):
        assert load_split(spark, ds, 1, split).count() == lines[f"Fold1/{split}.txt"]
    # Spark result == local parse of the same file, bit for bit (the five test subsets are every row: one read)
    every = spark.read.parquet(small_dataset).orderBy(schema.SUBSET, schema.QID, schema.DOC).toPandas()
    spec = LineSpec(136)
    for f, d in MSLR_ROTATION.items():
        block = parse_block(np.fromfile(small_letor / f"Fold{f}" / "test.txt", dtype=np.uint8), spec)
        q, lab, doc, X = sorted_rows(block)
        pdf = every[every[schema.SUBSET] == d["test"][0]]
        np.testing.assert_array_equal(pdf[schema.QID].to_numpy(), q)
        np.testing.assert_array_equal(pdf[schema.DOC].to_numpy(), doc)
        np.testing.assert_array_equal(pdf[schema.LABEL].to_numpy(), lab)
        got = pdf[schema.feature_cols(136)].to_numpy(np.float32)
        assert np.array_equal(got.view(np.uint32), np.ascontiguousarray(X).view(np.uint32))
    # the schema Spark reads back is the declared one
    assert (
        spark.read.parquet(small_dataset).schema.simpleString()
        == "struct<" + schema.spark_ddl(136).replace(" ", ":").replace(",:", ",") + ">"
    )


def test_broken_rotation_is_stored_as_given(spark, tmp_path, small_letor):
    src = tmp_path / "letor"
    shutil.copytree(small_letor, src)
    train = src / "Fold2" / "train.txt"
    lines = train.read_text().splitlines(keepends=True)
    train.write_text("".join(lines[:-1]))  # drop one row of the last query
    m = ingest(spark, str(src), str(tmp_path / "ds"), MSLR, IngestConfig())
    assert m["layout"] == "as_given" and m["rotation"]["verified"] is False
    assert m["rotation"]["detail"].startswith("Fold2/train.txt: qid ")
    assert "lines, its subset has" in m["rotation"]["detail"]
    assert m["folds"]["2"] == {"train": ["fold2_train"], "vali": ["fold2_vali"], "test": ["fold2_test"]}
    assert m["rows"] == sum(1 for f in src.glob("Fold*/*.txt") for _ in open(f))


def test_other_letor_set(spark, tmp_path):
    """LETOR 4.0 style (sparse rows, #docid trailers) with its own dataset config."""
    out = tmp_path / "ds"
    m = ingest(spark, str(GOLDEN / "sparse_comments.txt"), str(out), load_dataset_spec("letor4"), IngestConfig())
    assert m["n_features"] == 46 and m["label_range"] == [0, 2]
    assert m["feature_roles"] == {"bm25": 25, "pagerank": 41}
    assert len(spark.read.parquet(str(out)).columns) == 3 + 46 + 1
    assert m["rows"] == 5


# ------------------------------------------------- no rows kept, impossible options
def test_no_rows_kept_is_an_error_that_keeps_the_quarantine(spark, tmp_path):
    src = tmp_path / "three.txt"
    src.write_text("1 qid:1 1:0.5 2:1 3:2\n0 qid:1 1:0.1 2:0 3:1\n")
    out = tmp_path / "ds"
    # a wrong --n-features: every line has feature 3
    with pytest.raises(IngestError) as err:
        ingest(spark, str(src), str(out), MSLR, IngestConfig(n_features=2))
    msg = str(err.value)
    assert msg == (
        f"--src {src}: no rows kept: all 2 data lines were quarantined (feature index out of range "
        f"[1, 2]: 2); is --n-features 2 right? (dataset mslr has 136); the bad lines are kept in "
        f"{out}.quarantine"
    )
    assert not out.exists()
    kept = Path(f"{out}.quarantine")
    assert json.loads((kept / "_quarantine.json").read_text())["by_reason"] == {"index_range": 2}
    q = spark.read.parquet(str(kept)).orderBy("line").collect()
    assert [(r.file, r.line, r.reason, r.token) for r in q] == [
        ("three.txt", 1, "index_range", "3:2"),
        ("three.txt", 2, "index_range", "3:1"),
    ]
    # every line bad for another reason (labels out of mslr's 0..4): the kept quarantine is replaced
    bad = tmp_path / "bad.txt"
    bad.write_text("7 qid:1 1:1\n9 qid:2 1:1\n# a comment\n")
    with pytest.raises(
        IngestError,
        match=r"^--src .*bad.txt: no rows kept: all 2 data lines were quarantined "
        r"\(label out of range \[0, 4\]: 2\); dataset mslr has labels 0..4: pass "
        r"the right --dataset NAME or --min-label/--max-label; the bad lines are "
        r"kept in .*ds.quarantine$",
    ):
        ingest(spark, str(bad), str(out), MSLR, SIX)
    assert [r.token for r in spark.read.parquet(str(kept)).orderBy("line").collect()] == ["7", "9"]
    # empty input, or only blank lines and comments: nothing to quarantine (and the old quarantine is gone)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(IngestError, match=r"^--src .*empty.txt: no rows kept: the input is empty \(empty.txt\)$"):
        ingest(spark, str(empty), str(out), MSLR, SIX)
    assert not kept.exists()
    empty.write_text("# only a comment\n\n")
    with pytest.raises(
        IngestError,
        match=r"no rows kept: the input has no data lines \(2 lines: 1 blank, "
        r"1 comments\)$",
    ):
        ingest(spark, str(empty), str(out), MSLR, SIX)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "empty.txt", "three.txt"]
    # a later run that keeps rows removes the quarantine of a failed one
    with pytest.raises(IngestError):
        ingest(spark, str(src), str(out), MSLR, IngestConfig(n_features=2))
    assert kept.exists()
    assert ingest(spark, str(src), str(out), MSLR, IngestConfig(n_features=3))["rows"] == 2
    assert not kept.exists()


def test_no_rows_kept_exits_2_with_one_line(spark, tmp_path, capsys):
    from pipelines.app.cli import main

    src = tmp_path / "three.txt"
    src.write_text("1 qid:1 1:0.5 2:1 3:2\n")
    code = main(["ingest", "--src", str(src), "--out", str(tmp_path / "ds"), "--n-features", "2"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ltr ingest: error:")]
    assert code == 2
    assert err == [
        f"ltr ingest: error: --src {src}: no rows kept: all 1 data lines were quarantined (feature "
        f"index out of range [1, 2]: 1); is --n-features 2 right? (dataset mslr has 136); the bad lines "
        f"are kept in {tmp_path / 'ds'}.quarantine"
    ]


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--chunk-bytes", "0"],
            "ingest.chunk_bytes (--chunk-bytes) must be >= 1 (nominal text bytes per Spark task, e.g. 33554432), got 0",
        ),
        (
            ["--chunk-bytes", "-5"],
            "ingest.chunk_bytes (--chunk-bytes) must be >= 1 (nominal text bytes per Spark task, e.g. 33554432), "
            "got -5",
        ),
        (["--n-features", "-1"], "ingest.n_features (--n-features) must be >= 0 (0: the dataset's), got -1"),
        (
            ["--min-label", "3", "--max-label", "1"],
            "ingest.min_label (--min-label) 3 > ingest.max_label (--max-label) 1: no label would be valid",
        ),
        (
            ["--min-label", "5"],
            "--min-label (ingest.min_label) = 5 > max_label of conf/datasets/mslr.yaml = 4: no label "
            "would be valid; the labels of dataset mslr are 0..4",
        ),
        (
            ["--dataset", "letor4", "--max-label", "-1"],
            "min_label of conf/datasets/letor4.yaml = 0 > --max-label "
            "(ingest.max_label) = -1: no label would be valid; the labels "
            "of dataset letor4 are 0..2",
        ),
        (
            ["--max-label", "300"],
            "ingest.max_label (--max-label) must be in [-128, 127] (labels are stored as int8), got 300",
        ),
        (
            ["--set", "ingest.chunk_bytes=0"],
            "ingest.chunk_bytes (--chunk-bytes) must be >= 1 (nominal text bytes per Spark task, e.g. 33554432), got 0",
        ),
        (
            ["--set", "ingest.compression=lzo"],
            "ingest.compression must be one of snappy, zstd, gzip, lz4, none (the codecs both pyarrow and Spark "
            "write), got 'lzo'",
        ),
    ],
)
def test_impossible_options_exit_2_before_spark_starts(tmp_path, capsys, monkeypatch, flags, message):
    from pipelines.app import cli

    def no_spark(cfg):
        raise AssertionError("Spark started before the options were checked")

    monkeypatch.setattr(cli, "_session", no_spark)
    code = cli.main(["ingest", "--src", str(GOLDEN / "well_formed.txt"), "--out", str(tmp_path / "ds"), *flags])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ltr ingest: error:")]
    assert code == 2
    assert len(err) == 1 and err[0].startswith("ltr ingest: error: ") and err[0].endswith(message)
    assert not (tmp_path / "ds").exists()


def test_ingest_config_checks():
    with pytest.raises(
        ConfigError,
        match=r"ingest.n_features \(--n-features\) must be >= 0 \(0: the dataset's\), got -3",
    ):
        IngestConfig(n_features=-3)
    with pytest.raises(ConfigError, match=r"ingest.min_label \(--min-label\) 2 > ingest.max_label \(--max-label\) 1"):
        IngestConfig(min_label=2, max_label=1)
    with pytest.raises(ConfigError, match=r"ingest.max_examples must be >= 0, got -1"):
        IngestConfig(max_examples=-1)
    assert line_spec(MSLR, IngestConfig(n_features=6, max_label=2)) == LineSpec(6, 0, 2)
    with pytest.raises(
        IngestError,
        match=r"^--min-label \(ingest.min_label\) = 1 > --max-label \(ingest.max_label\) "
        r"= 0: no label would be valid",
    ):
        line_spec(MSLR, _unchecked(min_label=1, max_label=0))


def _unchecked(**kw) -> IngestConfig:
    """An IngestConfig that skips its own checks (to reach line_spec's)."""
    cfg = object.__new__(IngestConfig)
    for k, v in {**{f.name: f.default for f in dataclasses.fields(IngestConfig)}, **kw}.items():
        object.__setattr__(cfg, k, v)
    return cfg
