"""``ltr ingest``: LETOR text to a partitioned Parquet dataset with a manifest.

Steps (each one logged with counts and time):

1. **Discover** the sources: an MSLR-style folder (``Fold*/``), a one-fold
   folder (``train.txt``, optional ``vali.txt`` / ``test.txt``) or one file.
2. **Parse** in Spark tasks, one per query-aligned byte range
   (:mod:`udfs.letor_chunks`); each task writes its own Parquet file. For a
   complete MSLR rotation only the five test files (= S1..S5) are parsed; the
   train/vali files are *scanned* for their qids, and the rotation is verified
   from the qid sets (with per-qid line counts). If it does not hold, every
   file is stored as given and the manifest says why.
3. **Check**: with ``strict`` the first bad line (file, line, token, reason)
   fails the run; otherwise bad lines go to ``_quarantine/`` with absolute
   line numbers. Good lines in == rows out is verified from the Parquet footers.
4. **Merge** queries whose rows were not contiguous in the source (rare) with a
   Spark shuffle, so that no query is ever split across files.
5. **Commit**: ``_manifest.json`` is written, then the temporary directory is
   renamed over the output. A failed run leaves no half-written dataset. A run
   that keeps no row at all is a failure too; its quarantine is then kept in
   ``OUT.quarantine/`` for inspection (removed by the next successful run).
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from pipelines.core.config import DatasetSpec, IngestConfig
from pipelines.core.storage import OutputError, atomic_output, delete_quietly
from pipelines.data.dataset import MANIFEST, MSLR_ROTATION, QUARANTINE
from udfs import schema
from udfs.ingest_spark import run_chunk_tasks
from udfs.letor_chunks import ChunkTask, plan_ranges
from udfs.letor_parse import REASON_KEYS, LineSpec, row_hashes_sum
from udfs.uris import to_uri

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
#: Marks ``OUT.quarantine/``, the bad lines of an ingest that kept no row (see :func:`ingest`).
QUARANTINE_MARKER = "_quarantine.json"
_FOLD_RE = re.compile(r"Fold(\d+)")


class IngestError(ValueError):
    """Input that cannot be ingested as asked; the message names file, line and fix."""


@dataclass(frozen=True)
class SourceFile:
    """One input text file and the subset its rows are stored as."""

    uri: str
    name: str  # display name relative to --src, e.g. "Fold1/train.txt"
    size: int
    fold: int
    split: str
    subset: str


@dataclass(frozen=True)
class Layout:
    """What ``--src`` holds: ``kind`` is "mslr" (Fold1..Fold5 complete), "folds", "one_fold" or "file"."""

    kind: str
    files: tuple[SourceFile, ...]


# ------------------------------------------------------------ discovery
def discover(src: str) -> Layout:
    """Find the LETOR files under ``src`` (a folder, or one file)."""
    uri = to_uri(src)
    fs, root = pafs.FileSystem.from_uri(uri)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise IngestError(f"--src {src}: no such file or directory")
    if info.type == pafs.FileType.File:
        return Layout("file", (SourceFile(uri, info.base_name, info.size, 1, "train", "train"),))
    entries = {e.base_name: e for e in fs.get_file_info(pafs.FileSelector(root))}
    fold_dirs = {
        int(m.group(1)): e
        for n, e in entries.items()
        if e.type == pafs.FileType.Directory and (m := _FOLD_RE.fullmatch(n))
    }
    if fold_dirs:
        files = []
        for f in sorted(fold_dirs):
            inner = {e.base_name: e for e in fs.get_file_info(pafs.FileSelector(fold_dirs[f].path))}
            files += _split_files(src, inner, f"Fold{f}/", f, lambda split, f=f: f"fold{f}_{split}")
        complete = sorted(fold_dirs) == [1, 2, 3, 4, 5] and len(files) == 15
        return Layout("mslr" if complete else "folds", tuple(files))
    if "train.txt" in entries:
        return Layout("one_fold", tuple(_split_files(src, entries, "", 1, lambda split: split)))
    raise IngestError(
        f"--src {src}: no LETOR files found; expected Fold1..Fold5/ folders "
        "(MSLR layout), or train.txt with optional vali.txt and test.txt, or a single file"
    )


def _split_files(src: str, entries: dict, prefix: str, fold: int, subset_name) -> list[SourceFile]:
    root = to_uri(src).rstrip("/")
    out = []
    for split in ("train", "vali", "test"):
        e = entries.get(f"{split}.txt")
        if e is None or e.type != pafs.FileType.File:
            if split == "train":
                raise IngestError(f"--src {src}: {prefix}train.txt is missing")
            continue
        out.append(
            SourceFile(f"{root}/{prefix}{split}.txt", f"{prefix}{split}.txt", e.size, fold, split, subset_name(split))
        )
    return out


# ------------------------------------------------------------- the job
@dataclass
class _FileResult:
    """Chunk results of one source file, in chunk order."""

    src: SourceFile
    rows: list[dict]  # metadata rows (see udfs.letor_chunks.RESULT_SCHEMA)

    @property
    def n_lines(self) -> int:
        """Lines of the file: the sum over its chunks."""
        return sum(r["n_lines"] for r in self.rows)

    def line_offsets(self) -> list[int]:
        """Lines of the file before each chunk (0-based line of each chunk's first line), in chunk order."""
        out, acc = [], 0
        for r in self.rows:
            out.append(acc)
            acc += r["n_lines"]
        return out

    def sum(self, key: str) -> int:
        """Sum of the count ``key`` (a column of the chunk results) over the file's chunks."""
        return sum(r[key] for r in self.rows)

    def blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(qid, absolute 1-based first line, lines) of every query block of the file."""
        qs, ls, ns = [], [], []
        for off, r in zip(self.line_offsets(), self.rows, strict=True):
            qs.append(np.frombuffer(r["block_qid"], np.int64))
            ls.append(np.frombuffer(r["block_line"], np.int64) + off + 1)
            ns.append(np.frombuffer(r["block_lines"], np.int64))
        if not qs:
            e = np.empty(0, np.int64)
            return e, e, e
        return np.concatenate(qs), np.concatenate(ls), np.concatenate(ns)

    def qid_lines(self) -> dict[int, int]:
        """qid -> number of lines with that qid (the multiset the rotation check compares)."""
        q, _, n = self.blocks()
        if q.size == 0:
            return {}
        uq, inv = np.unique(q, return_inverse=True)
        return dict(zip(uq.tolist(), np.bincount(inv, weights=n).astype(np.int64).tolist(), strict=True))


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
                )
            )
            cid += 1
    return tasks


def _run(
    spark: SparkSession, files: list[SourceFile], modes: dict[str, str], tmp: str, spec: LineSpec, cfg: IngestConfig
) -> dict[str, _FileResult]:
    tasks = _tasks(files, modes, tmp, spec, cfg)
    t0 = time.perf_counter()
    table = run_chunk_tasks(spark, tasks)
    rows = {r["chunk_id"]: r for r in table.to_pylist()}
    by_task = {t.chunk_id: t for t in tasks}
    for cid in sorted(rows):
        if rows[cid]["error"]:
            t = by_task[cid]
            name = next(f.name for f in files if f.uri == t.source)
            raise IngestError(f"{name}: reading bytes {t.start}-{t.end} failed: {rows[cid]['error']}")
    missing = set(by_task) - set(rows)
    if missing:
        raise IngestError(f"internal error: no result for chunks {sorted(missing)[:5]}")
    out = {f.uri: _FileResult(f, []) for f in files}
    for cid in sorted(rows):
        out[by_task[cid].source].rows.append(rows[cid])
    n_bytes = sum(f.size for f in files)
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
        return LineSpec(n_features=n, min_label=lo, max_label=hi)
    except ValueError as e:  # the IngestConfig / DatasetSpec checks catch these first
        raise IngestError(f"ingest of dataset {dataset.name}: {e}") from None


def quarantine_dir(out: str) -> str:
    """Where the bad lines of an ingest that kept no row are kept: next to ``out``."""
    return out.rstrip("/") + ".quarantine"


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
                raise IngestError(_no_rows(src, out, tmp.fs, tmp.path, manifest, spec, dataset, cfg))
            tmp.write_json(MANIFEST, manifest)
    except OutputError as e:
        raise IngestError(str(e)) from None
    _drop_stale_quarantine(out)
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
    layout: Layout,
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
        _raise_strict(file_results, spec, cfg)
        ok, detail = _verify_rotation(results, stored)
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
        folds = _folds_as_given(files)
        _raise_strict(file_results, spec, cfg)
    split_qids = _noncontiguous(file_results)
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
        subset_hash[sub] = _merge_subset(spark, fs, tmp, tmp_path, sub, spec.n_features, cfg.compression)
    quarantine = _finish_quarantine(fs, tmp_path, file_results, spec, cfg)
    subsets = _subset_stats(fs, tmp_path, file_results)
    for sub, st in subsets.items():
        if st["rows"] != st["rows_written"]:
            raise IngestError(
                f"internal error: subset {sub}: {st['rows']} good lines but {st['rows_written']} rows written"
            )
    shared = _qids_in_several_subsets(file_results)
    if shared:
        log.warning("%d qids appear in several stored subsets (e.g. %s)", len(shared), shared[:5])
    fingerprint = _fingerprint(spec, folds, subsets, subset_hash)
    return {
        "format_version": FORMAT_VERSION,
        "dataset": dataset.name,
        "source": src,
        "layout": "mslr_rotation" if rotation.get("verified") else "as_given",
        "source_layout": layout.kind,
        "rotation": rotation,
        "n_features": spec.n_features,
        "label_range": [spec.min_label, spec.max_label],
        "feature_roles": {"bm25": dataset.bm25_feature, "pagerank": dataset.pagerank_feature},
        "folds": folds,
        "subsets": subsets,
        "splits": _split_stats(folds, subsets),
        "rows": sum(s["rows"] for s in subsets.values()),
        "queries": sum(s["queries"] for s in subsets.values()),
        "sources": _source_stats(results, file_results),
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
    }


# ------------------------------------------------------------- checks
def _no_rows(
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
        _drop_stale_quarantine(out)
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
        kept = _keep_quarantine(fs, f"{tmp_path}/{QUARANTINE}", quarantine_dir(out), src, q)
        where = f"the bad lines are kept in {kept}"
    except (OutputError, OSError) as e:
        where = f"the bad lines could not be kept ({e})"
    return f"--src {src}: no rows kept: all {q['lines']} data lines were quarantined ({why}){hint}; {where}"


def _files(stored: list[dict[str, Any]]) -> str:
    names = [s["file"] for s in stored]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _keep_quarantine(fs: pafs.FileSystem, src_dir: str, dest: str, src: str, summary: dict[str, Any]) -> str:
    """Move the quarantine Parquet files of a failed ingest to ``dest`` (replaced atomically)."""
    with atomic_output(dest, QUARANTINE_MARKER) as q:
        for info in fs.get_file_info(pafs.FileSelector(src_dir)):
            fs.move(info.path, f"{q.path}/{info.base_name}")
        q.write_json(QUARANTINE_MARKER, {"source": src, **summary})
    return dest


def _drop_stale_quarantine(out: str) -> None:
    """Remove ``OUT.quarantine/`` left by an earlier failed ingest (only if it is one: it has the marker)."""
    fs, path = pafs.FileSystem.from_uri(to_uri(quarantine_dir(out)))
    if fs.get_file_info(f"{path}/{QUARANTINE_MARKER}").type == pafs.FileType.File:
        log.info("removing %s, the quarantine of an earlier ingest that kept no rows", quarantine_dir(out))
        delete_quietly(fs, path)


def _raise_strict(results: list[_FileResult], spec: LineSpec, cfg: IngestConfig) -> None:
    if not cfg.strict:
        return
    for r in results:  # files in discovery order, chunks in file order
        for off, row in zip(r.line_offsets(), r.rows, strict=True):
            if row["first_bad_line"] is not None and row["first_bad_line"] >= 0:
                line = off + row["first_bad_line"] + 1
                tok = bytes(row["first_bad_token"]).decode("utf-8", "replace")
                raise IngestError(
                    f"{r.src.name}:{line}: {spec.reason(row['first_bad_code'])}: "
                    f"token {_short(tok)!r} (--strict; without it bad lines are quarantined)"
                )


def _short(s: str, n: int = 80) -> str:
    return s if len(s) <= n else s[:n] + "..."


def _verify_rotation(results: dict[str, _FileResult], stored: dict[str, str]) -> tuple[bool, str]:
    """Do the train/vali files of every fold hold exactly the qids (and line counts) of
    the subsets MSLR_ROTATION says they should?"""
    by_name = {r.src.name: r for r in results.values()}
    subset_lines = {stored[n]: by_name[n].qid_lines() for n in stored}
    seen: Counter = Counter()
    for lines in subset_lines.values():
        seen.update(lines.keys())
    dup = [q for q, c in seen.items() if c > 1]
    if dup:
        return False, f"{len(dup)} qids appear in more than one test file (e.g. qid {dup[0]})"
    for fold, splits in MSLR_ROTATION.items():
        for split in ("train", "vali"):
            name = f"Fold{fold}/{split}.txt"
            expected: Counter = Counter()
            for s in splits[split]:
                expected.update(subset_lines[s])
            got = by_name[name].qid_lines()
            if got != dict(expected):
                diff = set(got) ^ set(expected)
                if diff:
                    q = min(diff)
                    return False, (
                        f"{name}: qid {q} is {'missing' if q in expected else 'unexpected'} "
                        f"(expected the qids of {'+'.join(splits[split])})"
                    )
                q = min(k for k in got if got[k] != expected[k])
                return False, f"{name}: qid {q} has {got[q]} lines, its subset has {expected[q]}"
    return True, "train and vali files of Fold1..Fold5 hold exactly the qids of their subsets"


def _noncontiguous(results: list[_FileResult]) -> list[dict[str, Any]]:
    """qids whose lines form more than one block in their source file."""
    out = []
    for r in results:
        q, first, _ = r.blocks()
        if q.size == 0:
            continue
        uq, counts = np.unique(q, return_counts=True)
        for qid in uq[counts > 1].tolist():
            out.append(
                {"file": r.src.name, "subset": r.src.subset, "qid": int(qid), "lines": first[q == qid].tolist()[:10]}
            )
    out.sort(key=lambda e: (e["file"], e["lines"][0]))
    return out


def _qids_in_several_subsets(results: list[_FileResult]) -> list[int]:
    seen: dict[int, set[str]] = {}
    for r in results:
        for row in r.rows:
            for q in np.frombuffer(row["query_qid"] or b"", np.int32).tolist():
                seen.setdefault(q, set()).add(r.src.subset)
    return sorted(q for q, s in seen.items() if len(s) > 1)


# ------------------------------------------------------------ outputs
def _finish_quarantine(
    fs: pafs.FileSystem, tmp_path: str, results: list[_FileResult], spec: LineSpec, cfg: IngestConfig
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
                rec["raw"] = _short(rec["raw"], 200)
                rec["token"] = _short(rec["token"])
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


def _subset_stats(fs: pafs.FileSystem, tmp_path: str, results: list[_FileResult]) -> dict[str, dict[str, Any]]:
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


def _split_stats(folds: dict[str, dict[str, list[str]]], subsets: dict[str, dict[str, Any]]) -> dict[str, Any]:
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


def _source_stats(all_results: dict[str, _FileResult], stored: list[_FileResult]) -> list[dict[str, Any]]:
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


def _folds_as_given(files: list[SourceFile]) -> dict[str, dict[str, list[str]]]:
    folds: dict[str, dict[str, list[str]]] = {}
    for f in files:
        folds.setdefault(str(f.fold), {})[f.split] = [f.subset]
    return folds


def _fingerprint(spec: LineSpec, folds: dict, subsets: dict, subset_hash: dict[str, int]) -> str:
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


# ------------------------------------------------------------- merging
def _merge_subset(
    spark: SparkSession, fs: pafs.FileSystem, tmp: str, tmp_path: str, subset: str, n_features: int, compression: str
) -> int:
    """Rewrite one subset so that every query is contiguous in one file (Spark shuffle).

    Rows keep their source order within a query: chunk (file order), then the
    position the chunk gave them. Returns the subset's new content hash.
    """
    t0 = time.perf_counter()
    part = f"{tmp}/{schema.SUBSET}={subset}"
    df = spark.read.parquet(part).withColumn(
        "_chunk", F.regexp_extract(F.input_file_name(), r"part-(\d+)\.parquet", 1).cast("int")
    )
    w = Window.partitionBy(schema.QID).orderBy("_chunk", schema.DOC)
    cols = [schema.QID, schema.LABEL, schema.DOC, *schema.feature_cols(n_features)]
    merged = (
        df.withColumn(schema.DOC, (F.row_number().over(w) - 1).cast("int"))
        .select(*cols)
        .repartitionByRange(max(1, spark.sparkContext.defaultParallelism), schema.QID)
        .sortWithinPartitions(schema.QID, schema.DOC)
    )
    out = f"{tmp}/_merged/{schema.SUBSET}={subset}"
    merged.write.option("compression", compression).parquet(out)

    def hashes(batches):
        """Content hash of each Arrow batch of merged rows (:func:`udfs.letor_parse.row_hashes_sum`).

        Yields
        ------
        pyarrow.RecordBatch
            One row per input batch: its hash as a decimal string (``h``), summed mod 2**64 by the caller.
        """
        for b in batches:
            X = (
                np.column_stack([b.column(c).to_numpy() for c in schema.feature_cols(n_features)])
                if b.num_rows
                else np.zeros((0, n_features), np.float32)
            )
            h = row_hashes_sum(
                b.column(schema.QID).to_numpy(),
                b.column(schema.LABEL).to_numpy(),
                b.column(schema.DOC).to_numpy(),
                X.astype(np.float32),
            )
            yield pa.RecordBatch.from_pydict({"h": [str(h)]})

    total = sum(int(r["h"]) for r in spark.read.parquet(out).mapInArrow(hashes, "h string").collect()) % 2**64
    delete_quietly(fs, f"{tmp_path}/{schema.SUBSET}={subset}")
    fs.move(f"{tmp_path}/_merged/{schema.SUBSET}={subset}", f"{tmp_path}/{schema.SUBSET}={subset}")
    delete_quietly(fs, f"{tmp_path}/_merged")
    log.info("merged non-contiguous queries of subset %s in %.1f s", subset, time.perf_counter() - t0)
    return total
