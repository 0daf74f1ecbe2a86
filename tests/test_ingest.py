"""`ltr ingest` on Spark: golden files, quarantine, strict errors, rotation, idempotence, safety."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import functions as F

from pipelines.config import IngestConfig, load_dataset_spec
from pipelines.dataset import MSLR_ROTATION, load_split, open_dataset
from pipelines.ingest import IngestError, discover, ingest
from tests.conftest import GOLDEN, golden
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
    assert (src_stats["lines"], src_stats["blank"], src_stats["comments"], src_stats["quarantined"]) == \
        (exp["lines"], exp["blank"], exp["comments"], len(exp["quarantine"]))
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


def test_mslr_rotation_each_row_once_and_equal_to_local_parse(spark, tmp_path, small_letor):
    out = tmp_path / "ds"
    m = ingest(spark, str(small_letor), str(out), MSLR, IngestConfig(chunk_bytes=200_000))
    assert m["layout"] == "mslr_rotation" and m["rotation"]["verified"]
    assert sorted(m["subsets"]) == ["S1", "S2", "S3", "S4", "S5"]
    lines = {f"Fold{f}/{s}.txt": sum(1 for _ in open(small_letor / f"Fold{f}" / f"{s}.txt"))
             for f in range(1, 6) for s in ("train", "vali", "test")}
    assert m["rows"] == sum(lines[f"Fold{f}/test.txt"] for f in range(1, 6))
    ds = open_dataset(str(out))
    counts = spark.read.parquet(str(out)).groupBy(schema.SUBSET).count().collect()
    per_subset = {r[schema.SUBSET]: r["count"] for r in counts}
    for f in range(1, 6):
        for split in ("train", "vali", "test"):
            assert sum(per_subset[s] for s in ds.subsets(f, split)) == lines[f"Fold{f}/{split}.txt"]
            assert m["splits"][str(f)][split]["rows"] == lines[f"Fold{f}/{split}.txt"]
    for split in ("train", "vali", "test"):
        assert load_split(spark, ds, 1, split).count() == lines[f"Fold1/{split}.txt"]
    # Spark result == local parse of the same file, bit for bit
    spec = LineSpec(136)
    for f, d in MSLR_ROTATION.items():
        block = parse_block(np.fromfile(small_letor / f"Fold{f}" / "test.txt", dtype=np.uint8), spec)
        q, lab, doc, X = sorted_rows(block)
        pdf = (spark.read.parquet(str(out)).where(F.col(schema.SUBSET) == d["test"][0])
               .orderBy(schema.QID, schema.DOC).toPandas())
        np.testing.assert_array_equal(pdf[schema.QID].to_numpy(), q)
        np.testing.assert_array_equal(pdf[schema.DOC].to_numpy(), doc)
        np.testing.assert_array_equal(pdf[schema.LABEL].to_numpy(), lab)
        got = pdf[schema.feature_cols(136)].to_numpy(np.float32)
        assert np.array_equal(got.view(np.uint32), np.ascontiguousarray(X).view(np.uint32))
    # the schema Spark reads back is the declared one
    assert spark.read.parquet(str(out)).schema.simpleString() == \
        "struct<" + schema.spark_ddl(136).replace(" ", ":").replace(",:", ",") + ">"


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
