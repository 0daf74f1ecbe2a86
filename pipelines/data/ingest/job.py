"""The ingest job: query-aligned byte ranges parsed in Spark tasks (one Parquet file each), then checks, merge,
quarantine and the manifest, committed atomically (:func:`ingest`)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pyarrow.fs as pafs
from pyspark.sql import SparkSession

from pipelines.core.config import DatasetSpec, IngestConfig
from pipelines.core.connect import context
from pipelines.core.errors import StorageError, storage_failure
from pipelines.core.secrets import redact
from pipelines.core.spark_progress import spark_progress
from pipelines.core.storage import OutputError, atomic_output, delete_quietly
from pipelines.data.dataset import MANIFEST, MSLR_ROTATION
from pipelines.data.ingest.checks import (
    FileResult,
    noncontiguous,
    qids_in_several_subsets_of,
    raise_strict,
    verify_rotation,
)
from pipelines.data.ingest.discovery import IngestError, SourceFile, SourceLayout, discover
from pipelines.data.ingest.manifest import (
    FORMAT_VERSION,
    content_fingerprint,
    folds_as_given,
    source_stats,
    split_stats,
    subset_stats,
)
from pipelines.data.ingest.merge import merge_subset
from pipelines.data.ingest.quarantine import drop_stale_quarantine, finish_quarantine, no_rows
from udfs import schema
from udfs.ingest_spark import run_chunk_tasks
from udfs.letor_chunks import ChunkTask, plan_ranges
from udfs.letor_parse import LineSpec

log = logging.getLogger(__name__)


def _tasks(
    files: list[SourceFile], modes: dict[str, str], tmp: str, spec: LineSpec, cfg: IngestConfig, first_id: int = 0
) -> list[ChunkTask]:
    tasks = []
    cid = first_id
    for sf in files:
        for start, end in plan_ranges(sf.size, cfg.chunk_bytes):
            tasks.append(
                ChunkTask(
                    chunk_id=cid,
                    source=sf.uri,
                    start=start,
                    end=end,
                    subset=sf.subset,
                    mode=modes[sf.uri],
                    out_dir=tmp,
                    quarantine_dir=f"{tmp}/_quarantine_raw",
                    n_features=spec.n_features,
                    min_label=spec.min_label,
                    max_label=spec.max_label,
                    strict=cfg.strict,
                    compression=cfg.compression,
                    absent=spec.absent,
                    overflow=spec.overflow,
                )
            )
            cid += 1
    return tasks


def _run(
    spark: SparkSession, files: list[SourceFile], modes: dict[str, str], tmp: str, spec: LineSpec, cfg: IngestConfig
) -> dict[str, FileResult]:
    tasks = _tasks(files, modes, tmp, spec, cfg)
    n_bytes = sum(f.size for f in files)
    sc = context(spark)  # None on Spark Connect: no accumulators, no progress
    counters = (sc.accumulator(0), sc.accumulator(0)) if sc is not None else None
    t0 = time.perf_counter()
    with spark_progress(
        spark,
        "ingest",
        total=n_bytes,
        unit="MB",
        scale=1e6,
        counted=(lambda: (counters[0].value, counters[1].value)) if counters is not None else None,
    ):
        table = run_chunk_tasks(spark, tasks, counters)
    rows = {r["chunk_id"]: r for r in table.to_pylist()}
    by_task = {t.chunk_id: t for t in tasks}
    for cid in sorted(rows):
        if rows[cid]["error"]:
            t = by_task[cid]
            name = next(f.name for f in files if f.uri == t.source)
            error = rows[cid]["error"]
            cause = storage_failure(error)
            if cause is not None:  # the storage's failure, not the input's: its own exit code, the trace in the file
                raise StorageError(f"writing {t.out_dir} ({name}, bytes {t.start}-{t.end}) failed: {cause}", error)
            raise IngestError(f"{name}: reading bytes {t.start}-{t.end} failed: {error}")
    missing = set(by_task) - set(rows)
    if missing:
        raise IngestError(f"internal error: no result for chunks {sorted(missing)[:5]}")
    out = {f.uri: FileResult(f, []) for f in files}
    for cid in sorted(rows):
        out[by_task[cid].source].rows.append(rows[cid])
    dt = time.perf_counter() - t0
    busy = [r["seconds"] for r in rows.values()]
    log.info(
        "%d files, %d tasks, %.1f MB in %.2f s (%.0f MB/s); task time sum %.2f s, max %.2f s",
        len(files),
        len(tasks),
        n_bytes / 1e6,
        dt,
        n_bytes / 1e6 / max(dt, 1e-9),
        sum(busy),
        max(busy),
    )
    return out


def line_spec(dataset: DatasetSpec, cfg: IngestConfig) -> LineSpec:
    """What a valid line is: the config's feature count and label range where set, else the dataset's.

    Needs no Spark, so ``ltr ingest`` calls it before starting a session. Raises
    IngestError naming the flag (and the dataset file) for an empty label range.
    """
    n = cfg.n_features or dataset.n_features
    lo = dataset.min_label if cfg.min_label is None else cfg.min_label
    hi = dataset.max_label if cfg.max_label is None else cfg.max_label
    if lo > hi:
        where = f"conf/datasets/{dataset.name}.yaml"
        lo_src = "--min-label (ingest.min_label)" if cfg.min_label is not None else f"min_label of {where}"
        hi_src = "--max-label (ingest.max_label)" if cfg.max_label is not None else f"max_label of {where}"
        raise IngestError(
            f"{lo_src} = {lo} > {hi_src} = {hi}: no label would be valid; "
            f"the labels of dataset {dataset.name} are {dataset.min_label}..{dataset.max_label}"
        )
    try:
        return LineSpec(n_features=n, min_label=lo, max_label=hi, absent=dataset.absent, overflow=dataset.overflow)
    except ValueError as e:  # the IngestConfig / DatasetSpec checks catch these first
        raise IngestError(f"ingest of dataset {dataset.name}: {e}") from None


def ingest(spark: SparkSession, src: str, out: str, dataset: DatasetSpec, cfg: IngestConfig) -> dict[str, Any]:
    """Ingest ``src`` into the dataset directory ``out``; return the manifest written.

    Raises IngestError for input that cannot be ingested (strict mode: at the
    first bad line), leaving ``out`` untouched. Input that yields no row at all
    (an empty file, every line bad, a wrong ``--n-features``) is such an error
    too: its quarantined lines are then kept in :func:`quarantine_dir` (``OUT.quarantine/``,
    Parquet plus ``_quarantine.json``) and the message says where. A later
    successful ingest into ``out`` removes that folder.
    """
    spec = line_spec(dataset, cfg)
    t_start = time.perf_counter()
    layout = discover(src)
    log.info(
        "ingest %s (%s layout, %d files, %.1f MB) -> %s",
        src,
        layout.kind,
        len(layout.files),
        sum(f.size for f in layout.files) / 1e6,
        out,
    )
    try:
        with atomic_output(out, MANIFEST) as tmp:
            manifest = _ingest_into(spark, layout, src, tmp.uri, tmp.fs, tmp.path, spec, dataset, cfg)
            if manifest["rows"] == 0:
                raise IngestError(no_rows(src, out, tmp.fs, tmp.path, manifest, spec, dataset, cfg))
            tmp.write_json(MANIFEST, manifest)
    except OutputError as e:
        raise IngestError(str(e)) from None
    drop_stale_quarantine(out)
    log.info(
        "ingest done in %.1f s: %d rows, %d queries, %d quarantined lines, fingerprint %s",
        time.perf_counter() - t_start,
        manifest["rows"],
        manifest["queries"],
        manifest["quarantine"]["lines"],
        manifest["fingerprint"][:19],
    )
    return manifest


def _ingest_into(
    spark: SparkSession,
    layout: SourceLayout,
    src: str,
    tmp: str,
    fs: pafs.FileSystem,
    tmp_path: str,
    spec: LineSpec,
    dataset: DatasetSpec,
    cfg: IngestConfig,
) -> dict[str, Any]:
    files = list(layout.files)
    rotation: dict[str, Any] = {"checked": False}
    if layout.kind == "mslr":
        # Fold f's test file is subset S_k; parse those, scan the rest for their qids.
        stored = {f"Fold{f}/test.txt": d["test"][0] for f, d in MSLR_ROTATION.items()}
        rot_files = [SourceFile(f.uri, f.name, f.size, 0, "", stored[f.name]) if f.name in stored else f for f in files]
        modes = {f.uri: ("parse" if f.name in stored else "scan") for f in rot_files}
        results = _run(spark, rot_files, modes, tmp, spec, cfg)
        file_results = sorted(
            (results[f.uri] for f in rot_files if modes[f.uri] == "parse"), key=lambda r: r.src.subset
        )
        raise_strict(file_results, spec, cfg)
        ok, detail = verify_rotation(results, stored)
        rotation = {"checked": True, "verified": ok, "detail": detail}
        folds = {str(f): d for f, d in MSLR_ROTATION.items()}
        if ok:
            log.info("MSLR rotation verified: each row stored once, as subsets S1..S5")
        else:
            log.warning("MSLR rotation does not hold (%s): storing every file as given", detail)
            delete_quietly(fs, tmp_path)
            fs.create_dir(tmp_path, recursive=True)
    if layout.kind != "mslr" or not rotation["verified"]:
        results = _run(spark, files, {f.uri: "parse" for f in files}, tmp, spec, cfg)
        file_results = [results[f.uri] for f in files]
        folds = folds_as_given(files)
        raise_strict(file_results, spec, cfg)
    split_qids = noncontiguous(file_results)
    if split_qids and cfg.strict:
        ex = split_qids[0]
        raise IngestError(
            f"{ex['file']}: qid {ex['qid']} appears in {len(ex['lines'])} separate blocks "
            f"(first lines {ex['lines'][:5]}) (--strict; without it such queries are merged)"
        )
    subset_hash = {r.src.subset: 0 for r in file_results}
    for r in file_results:
        subset_hash[r.src.subset] = (subset_hash[r.src.subset] + r.sum("hash_sum")) % 2**64
    merged_subsets = sorted({e["subset"] for e in split_qids})
    for sub in merged_subsets:
        subset_hash[sub] = merge_subset(spark, fs, tmp, tmp_path, sub, spec.n_features, cfg.compression)
    quarantine = finish_quarantine(fs, tmp_path, file_results, spec, cfg)
    subsets = subset_stats(fs, tmp_path, file_results)
    for sub, st in subsets.items():
        if st["rows"] != st["rows_written"]:
            raise IngestError(
                f"internal error: subset {sub}: {st['rows']} good lines but {st['rows_written']} rows written"
            )
    shared = qids_in_several_subsets_of(file_results)
    if shared:
        log.warning("%d qids appear in several stored subsets (e.g. %s)", len(shared), shared[:5])
    fingerprint = content_fingerprint(spec, folds, subsets, subset_hash)
    return {
        "format_version": FORMAT_VERSION,
        "dataset": dataset.name,
        "source": redact(src),  # a password or token of the source's URI is in no file (core.secrets)
        "layout": "mslr_rotation" if rotation.get("verified") else "as_given",
        "source_layout": layout.kind,
        "rotation": rotation,
        "n_features": spec.n_features,
        "label_range": [spec.min_label, spec.max_label],
        "feature_roles": {"bm25": dataset.bm25_feature, "pagerank": dataset.pagerank_feature},
        # what an absent feature of a sparse line became, and values beyond float32 (udfs.letor_parse)
        "absent_features": spec.absent,
        "overflow": {"policy": spec.overflow, "values_clamped": sum(r.sum("n_clamped") for r in file_results)},
        "folds": folds,
        "subsets": subsets,
        "splits": split_stats(folds, subsets),
        "rows": sum(s["rows"] for s in subsets.values()),
        "queries": sum(s["queries"] for s in subsets.values()),
        "sources": source_stats(results, file_results),
        "quarantine": quarantine,
        "non_contiguous_qids": {
            "count": len(split_qids),
            "merged_subsets": merged_subsets,
            "examples": split_qids[: cfg.max_examples],
        },
        "qids_in_several_subsets": {"count": len(shared), "examples": shared[: cfg.max_examples]},
        "schema": [{"name": f.name, "type": str(f.type)} for f in schema.arrow_schema(spec.n_features)]
        + [{"name": schema.SUBSET, "type": "string (partition)"}],
        "parquet": {"compression": cfg.compression, "partitioned_by": schema.SUBSET},
        "fingerprint": fingerprint,
        **source_noise(src),
    }


def source_noise(src: str) -> dict[str, Any]:
    """``{"label_noise": ...}`` when ``src`` is the output of ``ltr generate`` with ``generate.label_noise``: its
    record's share and the subsets (or files) it went into, which the grid checks its folds' validation and test
    splits against; nothing for any other source."""
    from pipelines.core.storage import read_json
    from pipelines.data.generate import RECORD

    try:
        record = read_json(src, RECORD)
    except (OSError, ValueError):
        return {}
    noisy = record.get("noisy_labels") if isinstance(record, dict) else None
    if not isinstance(noisy, dict) or not noisy.get("in"):
        return {}
    return {"label_noise": {"share": record.get("label_noise"), "in": list(noisy["in"]), "note": noisy.get("note")}}
