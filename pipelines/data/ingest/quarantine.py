"""Quarantine: bad lines kept under ``_quarantine/`` with absolute line numbers and a summary; an ingest that kept
no row fails and keeps its quarantine in ``OUT.quarantine/`` for inspection (removed by the next good run)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.core.config import DatasetSpec, IngestConfig
from pipelines.core.secrets import redact
from pipelines.core.storage import OutputError, atomic_output, delete_quietly
from pipelines.data.dataset import QUARANTINE
from pipelines.data.ingest.checks import FileResult, short_text
from udfs.letor_parse import REASON_KEYS, LineSpec
from udfs.uris import to_uri

log = logging.getLogger(__name__)


#: Marks ``OUT.quarantine/``, the bad lines of an ingest that kept no row (see :func:`ingest`).
QUARANTINE_MARKER = "_quarantine.json"


def quarantine_dir(out: str) -> str:
    """Where the bad lines of an ingest that kept no row are kept: next to ``out``."""
    return out.rstrip("/") + ".quarantine"


def no_rows(
    src: str,
    out: str,
    fs: pafs.FileSystem,
    tmp_path: str,
    manifest: dict[str, Any],
    spec: LineSpec,
    dataset: DatasetSpec,
    cfg: IngestConfig,
) -> str:
    """The one-line reason why ``src`` gave no row; keeps its quarantined lines next to ``out``."""
    stored = [s for s in manifest["sources"] if s["role"] == "stored"]
    lines = sum(s["lines"] for s in stored)
    q = manifest["quarantine"]
    if not q["lines"]:
        drop_stale_quarantine(out)
        if lines == 0:
            return f"--src {src}: no rows kept: the input is empty ({_files(stored)})"
        return (
            f"--src {src}: no rows kept: the input has no data lines ({lines} lines: "
            f"{sum(s['blank'] for s in stored)} blank, {sum(s['comments'] for s in stored)} comments)"
        )
    reasons = sorted(q["by_reason"].items(), key=lambda kv: (-kv[1], kv[0]))
    why = "; ".join(f"{q['reasons'][k]}: {v}" for k, v in reasons)
    top = reasons[0][0]
    if top == "index_range" and cfg.n_features:
        hint = f"; is --n-features {spec.n_features} right? (dataset {dataset.name} has {dataset.n_features})"
    elif top == "index_range":
        hint = (
            f"; dataset {dataset.name} has {dataset.n_features} features: pass the right --dataset NAME "
            "or --n-features N"
        )
    elif top == "label_range" and (cfg.min_label is not None or cfg.max_label is not None):
        hint = (
            f"; are --min-label/--max-label {spec.min_label}..{spec.max_label} right? (dataset "
            f"{dataset.name} has {dataset.min_label}..{dataset.max_label})"
        )
    elif top == "label_range":
        hint = (
            f"; dataset {dataset.name} has labels {dataset.min_label}..{dataset.max_label}: pass the right "
            "--dataset NAME or --min-label/--max-label"
        )
    else:
        hint = ""
    try:
        kept = keep_quarantine(fs, f"{tmp_path}/{QUARANTINE}", quarantine_dir(out), src, q)
        where = f"the bad lines are kept in {kept}"
    except (OutputError, OSError) as e:
        where = f"the bad lines could not be kept ({e})"
    return f"--src {src}: no rows kept: all {q['lines']} data lines were quarantined ({why}){hint}; {where}"


def _files(stored: list[dict[str, Any]]) -> str:
    names = [s["file"] for s in stored]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def keep_quarantine(fs: pafs.FileSystem, src_dir: str, dest: str, src: str, summary: dict[str, Any]) -> str:
    """Move the quarantine Parquet files of a failed ingest to ``dest`` (replaced atomically)."""
    with atomic_output(dest, QUARANTINE_MARKER) as q:
        for info in fs.get_file_info(pafs.FileSelector(src_dir)):
            fs.move(info.path, f"{q.path}/{info.base_name}")
        q.write_json(QUARANTINE_MARKER, {"source": redact(src), **summary})
    return dest


def drop_stale_quarantine(out: str) -> None:
    """Remove ``OUT.quarantine/`` left by an earlier failed ingest (only if it is one: it has the marker)."""
    fs, path = pafs.FileSystem.from_uri(to_uri(quarantine_dir(out)))
    if fs.get_file_info(f"{path}/{QUARANTINE_MARKER}").type == pafs.FileType.File:
        log.info("removing %s, the quarantine of an earlier ingest that kept no rows", quarantine_dir(out))
        delete_quietly(fs, path)


def finish_quarantine(
    fs: pafs.FileSystem, tmp_path: str, results: list[FileResult], spec: LineSpec, cfg: IngestConfig
) -> dict[str, Any]:
    """Rewrite the tasks' quarantine files with file names and absolute line numbers
    (streaming one chunk at a time), and summarise them for the manifest."""
    raw_dir = f"{tmp_path}/_quarantine_raw"
    by_reason: Counter = Counter()
    examples: list[dict[str, Any]] = []
    total = 0
    for r in results:
        for off, row in zip(r.line_offsets(), r.rows, strict=True):
            if not row["n_bad"]:
                continue
            codes = np.frombuffer(row["bad_by_code"], np.int64)
            for code in np.flatnonzero(codes):
                by_reason[REASON_KEYS[int(code)]] += int(codes[code])
            total += row["n_bad"]
            src = f"{raw_dir}/chunk-{row['chunk_id']:06d}.parquet"
            t = pq.read_table(src, filesystem=fs)
            line = pc.add(t.column("line_in_chunk"), off + 1)
            t = pa.table(
                {
                    "file": pa.array([r.src.name] * t.num_rows),
                    "line": line,
                    "reason": t.column("reason"),
                    "token": t.column("token"),
                    "raw": t.column("raw"),
                }
            )
            fs.create_dir(f"{tmp_path}/{QUARANTINE}", recursive=True)
            pq.write_table(t, f"{tmp_path}/{QUARANTINE}/part-{row['chunk_id']:06d}.parquet", filesystem=fs)
            for rec in t.slice(0, max(0, cfg.max_examples - len(examples))).to_pylist():
                rec["raw"] = short_text(rec["raw"], 200)
                rec["token"] = short_text(rec["token"])
                examples.append(rec)
    delete_quietly(fs, raw_dir)
    if total:
        log.warning(
            "quarantined %d bad lines (%s); see %s/",
            total,
            ", ".join(f"{k}: {v}" for k, v in sorted(by_reason.items())),
            QUARANTINE,
        )
    return {
        "lines": total,
        "by_reason": dict(sorted(by_reason.items())),
        "path": QUARANTINE if total else None,
        "examples": examples,
        "reasons": {REASON_KEYS[c]: spec.reason(c) for c in REASON_KEYS},
    }
