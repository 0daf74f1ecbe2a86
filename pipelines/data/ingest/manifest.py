"""What goes into ``_manifest.json`` besides the files: per-subset, per-split and per-source counts, the folds as
given, and the dataset's content fingerprint."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.data.ingest.checks import FileResult
from pipelines.data.ingest.discovery import SourceFile
from udfs import schema
from udfs.letor_parse import LineSpec

FORMAT_VERSION = 1


def subset_stats(fs: pafs.FileSystem, tmp_path: str, results: list[FileResult]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        st = out.setdefault(
            r.src.subset, {"source": r.src.name, "rows": 0, "queries": 0, "files": 0, "rows_written": 0}
        )
        st["rows"] += r.sum("n_rows")
        qids = [np.frombuffer(row["query_qid"] or b"", np.int32) for row in r.rows]
        st["queries"] += int(np.unique(np.concatenate(qids)).size) if qids else 0
    for sub, st in out.items():
        d = f"{tmp_path}/{schema.SUBSET}={sub}"
        infos = [
            i
            for i in fs.get_file_info(pafs.FileSelector(d, allow_not_found=True))
            if i.type == pafs.FileType.File and i.base_name.endswith(".parquet")
        ]
        st["files"] = len(infos)
        st["rows_written"] = sum(pq.read_metadata(i.path, filesystem=fs).num_rows for i in infos)
    return out


def split_stats(folds: dict[str, dict[str, list[str]]], subsets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        f: {
            split: {
                "rows": sum(subsets[s]["rows"] for s in parts if s in subsets),
                "queries": sum(subsets[s]["queries"] for s in parts if s in subsets),
            }
            for split, parts in d.items()
        }
        for f, d in folds.items()
    }


def source_stats(all_results: dict[str, FileResult], stored: list[FileResult]) -> list[dict[str, Any]]:
    stored_names = {r.src.name for r in stored}
    out = []
    for r in all_results.values():
        st = {
            "file": r.src.name,
            "bytes": r.src.size,
            "lines": r.n_lines,
            "role": "stored" if r.src.name in stored_names else "verified_against_subsets",
        }
        if st["role"] == "stored":
            st.update(
                rows=r.sum("n_rows"), blank=r.sum("n_blank"), comments=r.sum("n_comment"), quarantined=r.sum("n_bad")
            )
        out.append(st)
    return sorted(out, key=lambda s: s["file"])


def folds_as_given(files: list[SourceFile]) -> dict[str, dict[str, list[str]]]:
    folds: dict[str, dict[str, list[str]]] = {}
    for f in files:
        folds.setdefault(str(f.fold), {})[f.split] = [f.subset]
    return folds


def content_fingerprint(spec: LineSpec, folds: dict, subsets: dict, subset_hash: dict[str, int]) -> str:
    """sha256 of the content: schema, fold layout, and per subset its row count and the
    order-independent sum of row hashes (so chunking and file layout do not matter)."""
    from pipelines.core.keys import dataset_key

    return dataset_key(
        {
            "schema": [f"{f.name}:{f.type}" for f in schema.arrow_schema(spec.n_features)],
            "folds": folds,
            "subsets": {s: [subsets[s]["rows"], format(subset_hash[s] % 2**64, "016x")] for s in sorted(subsets)},
        }
    )
