"""What the study reads back from its own small files is checked first (issue 66, item 5): a curriculum's queries and
a fold's teacher scores record the sha256 of their bytes when written; one changed on disk is built again by a study
(its freshness check fails) and refused by ``ltr train --curriculum``, never used as it is."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.core.config import load_config
from pipelines.data.curricula import QUERIES, load_curricula, stored_curriculum
from pipelines.data.dataset import Dataset, DatasetError
from pipelines.data.teacher_scores import SCORES, stored_teacher_scores, write_teacher_scores
from pipelines.study.teachers import build_teacher_queries, teacher_data, teacher_query_key
from tests.helpers import tiny_study

DS = Dataset(path="mem", manifest={"fingerprint": "sha256:abc", "n_features": 136, "folds": {"1": {"train": ["S1"]}}})


def _flip(path, at: int = -20) -> None:
    """Change one byte of ``path`` (a Parquet file's footer, by default: still a file, other content)."""
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_curriculum_changed_on_disk_is_built_again_and_never_trained_on(tmp_path, caplog):
    cfg = load_config(None, tiny_study(f"work_dir={tmp_path}", "teacher.crossfit=2"))
    queries = pd.DataFrame({"subset": ["S1"] * 6, "qid": np.arange(1, 7), "n_docs": np.full(6, 3)})
    name = teacher_data(cfg)[0]
    out, key = tmp_path / name, teacher_query_key(cfg, DS, 1, name)
    summary = build_teacher_queries(queries, DS, 1, cfg, name, str(out), key)
    assert stored_curriculum(str(out), key) == summary and len(summary["queries_sha256"]) == 64
    assert load_curricula([str(out)], DS, 1)[0].summary == summary
    _flip(out / QUERIES)
    assert stored_curriculum(str(out), key) is None  # a study builds it again
    assert "does not match the checksum it was written with; it is built again" in caplog.text
    with pytest.raises(DatasetError, match=rf"{name}: {QUERIES} does not match the checksum it was written with"):
        load_curricula([str(out)], DS, 1)
    # one of an older ltr (no checksum recorded) is taken as it is
    del summary["queries_sha256"]
    (out / "_curriculum.json").write_text(json.dumps(summary))
    assert stored_curriculum(str(out), key) is not None


def test_teacher_scores_changed_on_disk_are_computed_again(tmp_path):
    table = pa.table({"subset": ["S1", "S1"], "qid": [1, 2], "teacher_margin": [0.5, np.nan]})
    out = str(tmp_path / "teachers")
    write_teacher_scores(table, {"key": "k1"}, out)
    assert stored_teacher_scores(out, "k1") is not None and stored_teacher_scores(out, "k2") is None
    _flip(tmp_path / "teachers" / SCORES)
    assert stored_teacher_scores(out, "k1") is None
