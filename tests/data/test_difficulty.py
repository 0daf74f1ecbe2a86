"""Per-query difficulty: arithmetic by hand, vectorised == per-query reference, Spark == local,
whatever the Arrow batch size and partitioning."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from pipelines.core.config import DifficultyConfig
from pipelines.core.keys import rows_fingerprint
from pipelines.data.dataset import DatasetError, open_dataset
from pipelines.data.scoring import Roles, content_fingerprint, difficulty_scores, resolve_roles
from udfs import schema
from udfs.difficulty import DIFFICULTY_DDL, difficulty_frame, difficulty_one_query
from udfs.metrics import NdcgSpec
from udfs.per_query import QueryOrderError, map_queries, whole_query_batches

COLS = [c.split()[0] for c in DIFFICULTY_DDL.split(", ")]


def _frame(rows):
    return pd.DataFrame(rows, columns=[schema.SUBSET, schema.QID, schema.DOC, schema.LABEL, "bm25", "pr"])


def test_arithmetic_by_hand():
    pdf = _frame(
        [
            ("S1", 1, 0, 2, 0.5, 7.0),  # one document
            ("S1", 2, 0, 0, 3.0, 1.0),
            ("S1", 2, 1, 0, 2.0, 2.0),  # no relevant document
            ("S1", 3, 0, 0, 1.0, 5.0),
            ("S1", 3, 1, 4, 1.0, 5.0),
            ("S1", 3, 2, 1, 1.0, 9.0),  # constant bm25
        ]
    )
    out = difficulty_frame(pdf, "bm25", "pr", NdcgSpec())
    assert out[schema.QID].tolist() == [1, 2, 3]
    assert out["n_docs"].tolist() == [1, 2, 3]
    assert out["n_rel"].tolist() == [1, 0, 2] and out["n_hrel"].tolist() == [0, 0, 1]
    assert out["max_label"].tolist() == [2, 0, 4]
    ideal3 = 15 + 1 / math.log2(3)  # labels 4, 1, 0
    assert out["idcg"].tolist() == pytest.approx([3.0, 0.0, ideal3])
    # bm25 ties everywhere in query 3: input (doc) order 0, 4, 1
    assert out["ndcg_bm25"].tolist() == pytest.approx([1.0, 1.0, (0 + 15 / math.log2(3) + 1 / 2) / ideal3])
    # pagerank: doc 2 (9.0) first, then docs 0 and 1 tied at 5.0 in doc order
    assert out["ndcg_pagerank"].tolist() == pytest.approx([1.0, 1.0, (1 + 0 + 15 / 2) / ideal3])
    # empty queries follow the spec
    assert difficulty_frame(pdf, "bm25", "pr", NdcgSpec(empty=0.0))["ndcg_bm25"].tolist()[1] == 0.0
    # sigma_bm25, the sample sd (n - 1): one document 0 (no spread); 3.0 and 2.0: mean 2.5, squared deviations
    # 0.25 + 0.25 over 1 -> sqrt(0.5); constant 1.0: 0
    assert out["sigma_bm25"].tolist() == pytest.approx([0.0, math.sqrt(0.5), 0.0])
    # a dataset without a BM25 feature: NaN (its strategies are refused before any curriculum is built)
    assert np.isnan(difficulty_frame(pdf, None, "pr", NdcgSpec())["sigma_bm25"]).all()


def test_sigma_bm25_by_hand_with_large_close_values():
    # values near 1e8 differing by 1, 2: the one-pass E[x^2] - E[x]^2 cancels to garbage in float64; two passes do
    # not. 1e8 + (0, 1, 2): mean 1e8 + 1, squared deviations 1 + 0 + 1 over n - 1 = 2 -> 1.0
    pdf = _frame([("S1", 9, d, 0, 1e8 + d, 0.0) for d in range(3)] + [("S1", 10, 0, 1, 4.0, 0.0)])
    out = difficulty_frame(pdf, "bm25", "pr", NdcgSpec())
    assert out["sigma_bm25"].tolist() == [1.0, 0.0] and out["n_docs"].tolist() == [3, 1]


def _random_queries(seed: int, n_queries: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 30, n_queries)
    qid = np.repeat(np.arange(n_queries) * 3 + 1, sizes)
    doc = np.concatenate([np.arange(s) for s in sizes])
    return pd.DataFrame(
        {
            schema.SUBSET: "S1",
            schema.QID: qid,
            schema.DOC: doc,
            schema.LABEL: rng.integers(0, 5, qid.size) * (rng.random(qid.size) < 0.5),
            "bm25": rng.normal(size=qid.size).round(1),
            "pr": rng.integers(0, 4, qid.size) * 1.0,
        }
    )


def test_vectorised_equals_per_query_reference():
    pdf = _random_queries(0)
    fast = difficulty_frame(pdf, "bm25", "pr", NdcgSpec())
    slow = pd.concat(
        [difficulty_one_query(g, "bm25", "pr", NdcgSpec()) for _, g in pdf.groupby(schema.QID)], ignore_index=True
    )
    pd.testing.assert_frame_equal(fast[COLS], slow[COLS], check_dtype=False, rtol=1e-12)


def test_whole_query_batches_recut_and_check():
    pdf = _random_queries(1, 50)
    batches = [pdf.iloc[i : i + 7] for i in range(0, len(pdf), 7)]
    parts = list(whole_query_batches(iter(batches), [schema.QID]))
    assert sum(len(p) for p in parts) == len(pdf)
    seen = [set(p[schema.QID]) for p in parts]
    for a in range(len(seen)):
        for b in range(a + 1, len(seen)):
            assert not seen[a] & seen[b]  # no query in two frames
    bad = pd.concat([pdf.iloc[:3], pdf.iloc[40:60], pdf.iloc[:3]])
    if bad[schema.QID].iloc[0] == bad[schema.QID].iloc[3]:
        bad = bad.iloc[1:]
    with pytest.raises(QueryOrderError, match="appears in two separate runs of one partition"):
        list(whole_query_batches(iter([bad]), [schema.QID]))


def _local(dataset: str, roles: Roles, spec: NdcgSpec) -> pd.DataFrame:
    cols = [schema.QID, schema.DOC, schema.LABEL, schema.feature_col(roles.bm25), schema.feature_col(roles.pagerank)]
    frames = []
    for sub in sorted(Path(dataset).glob(f"{schema.SUBSET}=*")):
        t = pq.ParquetDataset(str(sub)).read(columns=cols).to_pandas()
        t[schema.SUBSET] = sub.name.split("=", 1)[1]
        frames.append(t)
    pdf = pd.concat(frames).sort_values([schema.SUBSET, schema.QID, schema.DOC], kind="stable")
    return difficulty_frame(
        pdf.reset_index(drop=True), schema.feature_col(roles.bm25), schema.feature_col(roles.pagerank), spec
    )


def _sorted(pdf: pd.DataFrame) -> pd.DataFrame:
    return pdf[COLS].sort_values([schema.SUBSET, schema.QID]).reset_index(drop=True)


@pytest.mark.parametrize("spec", [NdcgSpec(), NdcgSpec(k=5, empty=0.0, ties="average")])
def test_spark_equals_local_for_any_batch_size_and_partitioning(spark, small_dataset, spec):
    ds = open_dataset(small_dataset)
    roles = resolve_roles(ds, DifficultyConfig())
    assert roles == Roles(110, 130)
    local = _sorted(_local(small_dataset, roles, spec))
    assert len(local) == ds.manifest["queries"]
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    try:
        for batch in ("3", "10000"):
            spark.conf.set(key, batch)
            got = _sorted(difficulty_scores(spark, ds, roles, spec).toPandas())
            pd.testing.assert_frame_equal(got, local, check_dtype=False, rtol=1e-12)
        spark.conf.set(key, "7")
        df = spark.read.parquet(small_dataset).select(
            schema.SUBSET, schema.QID, schema.DOC, schema.LABEL, "f110", "f130"
        )
        for parts in (1, 2, 7):
            shuffled = df.repartition(5)  # scramble, then let map_queries arrange
            got = map_queries(
                shuffled,
                lambda p: difficulty_frame(p, "f110", "f130", spec),
                DIFFICULTY_DDL,
                keys=(schema.SUBSET, schema.QID),
                partitions=parts,
            )
            pd.testing.assert_frame_equal(_sorted(got.toPandas()), local, check_dtype=False, rtol=1e-12)
    finally:
        spark.conf.set(key, old)


def test_difficulty_output_and_summary(spark, small_dataset, small_difficulty):
    summary = json.loads((Path(small_difficulty) / "_difficulty.json").read_text())
    ds = open_dataset(small_dataset)
    assert summary["dataset_fingerprint"] == ds.fingerprint
    assert summary["queries"] == ds.manifest["queries"] and summary["rows"] == ds.manifest["rows"]
    assert summary["conventions"]["description"].startswith("NDCG@10: gain 2^label-1")
    assert sorted(summary["queries_per_subset"]) == ["S1", "S2", "S3", "S4", "S5"]
    df = spark.read.parquet(small_difficulty)
    assert df.count() == df.select(schema.QID).distinct().count()  # each query once


def test_roles_must_be_feature_ids(small_dataset):
    ds = open_dataset(small_dataset)
    with pytest.raises(DatasetError, match=r"no bm25 feature id \(got 999\)"):
        resolve_roles(ds, DifficultyConfig(bm25_feature=999))
    assert resolve_roles(ds, DifficultyConfig(bm25_feature=106)).bm25 == 106


def test_feature_flags_and_config_checked_before_spark(tmp_path, capsys, monkeypatch):
    from pipelines.app import cli
    from pipelines.core.config import ConfigError

    monkeypatch.setattr(cli, "_session", lambda cfg: pytest.fail("Spark started before the options were checked"))
    code = cli.main(
        ["difficulty", "--data", str(tmp_path / "ds"), "--out", str(tmp_path / "d"), "--bm25-feature", "-1"]
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ltr difficulty: error:")]
    assert code == 2
    assert len(err) == 1 and err[0].endswith(
        "default.yaml: difficulty.bm25_feature (--bm25-feature) must be >= 0 (a feature id, or 0 for the dataset's), "
        "got -1"
    )
    with pytest.raises(
        ConfigError,
        match=r"difficulty.pagerank_feature \(--pagerank-feature\) must be >= 0 \(a feature id, or 0 for the "
        r"dataset's\), got -2",
    ):
        DifficultyConfig(pagerank_feature=-2)


def test_rows_fingerprint_is_the_recorded_formula():
    """The value is recorded in every difficulty summary and curriculum: it must never change."""
    assert rows_fingerprint(3, 10, 20) == "sha256:a5e4389c35aa0641"  # sha256("3:10:20")[:16]
    assert rows_fingerprint(0, None, None) == "sha256:e8ca2bd51293d64a"  # no row: the sums are NULL, read as 0


def test_content_fingerprint_is_unchanged_and_order_independent(spark):
    """Values recorded before the hashing moved to ``keys`` (the same rows, any partitioning)."""
    df = spark.createDataFrame(
        [("S1", 1, 2, 0.5), ("S1", 2, 0, -1.25), ("S2", 7, 4, 3.0)],
        "subset string, qid int, n_docs int, ndcg_bm25 double",
    )
    assert content_fingerprint(df) == "sha256:39fee70a00b25aee"
    assert content_fingerprint(df.repartition(3)) == "sha256:39fee70a00b25aee"
    assert content_fingerprint(df.limit(0)) == "sha256:e8ca2bd51293d64a"


def test_difficulty_scores_changed_on_disk_are_computed_again(small_difficulty, tmp_path, caplog):
    """The summary records each part file's sha256; scores whose file changed on disk fail the freshness check (the
    study computes them again) instead of ordering curricula."""
    import shutil

    from pipelines.data.scoring import FILES_SHA256, stored_summary

    copy = tmp_path / "scores"
    shutil.copytree(small_difficulty, copy)
    summary = json.loads((copy / "_difficulty.json").read_text())
    assert summary[FILES_SHA256] and set(summary[FILES_SHA256]) == {p.name for p in copy.glob("part-*.parquet")}
    assert stored_summary(str(copy), summary["key"]) == summary
    part = sorted(copy.glob("part-*.parquet"))[0]
    data = bytearray(part.read_bytes())
    data[-20] ^= 0x01
    part.write_bytes(bytes(data))
    assert stored_summary(str(copy), summary["key"]) is None
    assert "do not match the checksums they were written with; computed again" in caplog.text
