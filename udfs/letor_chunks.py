"""Query-aligned byte chunks of LETOR files, and the work one ingest task does on a chunk.

A file is cut into nominal byte ranges ``[s, e)``. The chunk that owns a range
owns every *query block* whose first line starts inside it, where a query block
starts at each line whose qid differs from the qid of the previous line that
has one. Both neighbours of a cut compute the same boundary, so every line is
owned by exactly one chunk and, for files whose queries are contiguous (MSLR),
no query is ever split between chunks. Lines without a qid (blank, comment or
malformed) belong to whichever chunk they fall in; they never start a block.

Everything here is plain Python/numpy (numba kernels from
:mod:`udfs.letor_parse`); :mod:`udfs.ingest_spark` runs it inside Spark tasks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from udfs import schema
from udfs.atomic import atomic_stream
from udfs.compile_once import CompiledOnce
from udfs.letor_parse import (
    REASON_KEYS,
    LineSpec,
    ParsedBlock,
    _line_qid,
    _next_line_end,
    parse_block,
    row_hashes_sum,
    scan_line_qids,
)

log = logging.getLogger(__name__)

_WINDOW = 1 << 21  # first look-around window for boundary search (2 MiB)


# ------------------------------------------------------------ byte sources
class ByteSource:
    """Random-access reads of one file through ``pyarrow.fs`` (local, HDFS, S3, GCS)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._fs, self._path = pafs.FileSystem.from_uri(uri)
        self._file = self._fs.open_input_file(self._path)
        self.size = int(self._file.size())

    def read(self, offset: int, n: int) -> np.ndarray:
        """Bytes ``[offset, offset+n)`` clipped to the file, as a uint8 array."""
        offset = max(0, offset)
        n = max(0, min(n, self.size - offset))
        if n == 0:
            return np.empty(0, dtype=np.uint8)
        return np.frombuffer(self._file.read_at(n, offset), dtype=np.uint8)

    def close(self) -> None:
        """Close the file (also done on leaving a ``with`` block)."""
        self._file.close()

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------- boundaries
@numba.njit(cache=True, nogil=True)
def _last_qid(buf, first_line_complete) -> int:
    """qid of the last line of ``buf`` that has one (-1 if none). The first line is
    skipped unless ``first_line_complete`` (it may be the tail of a longer line)."""
    n = buf.size
    pos = 0
    if not first_line_complete:
        pos = _next_line_end(buf, 0, n) + 1
    last = -1
    while pos < n:
        le = _next_line_end(buf, pos, n)
        q = _line_qid(buf, pos, le)
        if q >= 0:
            last = q
        pos = le + 1
    return last


@numba.njit(cache=True, nogil=True)
def _first_new_qid_line(buf, prev, at_eof) -> int:
    """Offset of the first complete line of ``buf`` whose qid is set and != prev; -1 if none."""
    n = buf.size
    pos = 0
    while pos < n:
        le = _next_line_end(buf, pos, n)
        if le >= n and not at_eof:
            return -1  # incomplete last line: the caller reads more
        q = _line_qid(buf, pos, le)
        if q >= 0 and q != prev:
            return pos
        pos = le + 1
    return -1


#: The kernels called from Python, each compiled once per machine (:mod:`udfs.compile_once`): an ingest's first
#: tasks reach them together in every Python worker.
_LAST_QID = CompiledOnce(_last_qid)
_FIRST_NEW_QID_LINE = CompiledOnce(_first_new_qid_line)
_SCAN_LINE_QIDS = CompiledOnce(scan_line_qids)


def _line_start_at_or_after(src: ByteSource, p: int) -> int:
    if src.read(p - 1, 1)[0] == 10:
        return p
    w = _WINDOW
    while True:
        buf = src.read(p, w)
        hits = np.flatnonzero(buf == 10)
        if hits.size:
            return p + int(hits[0]) + 1
        if p + w >= src.size:
            return src.size
        w *= 4


def _prev_qid(src: ByteSource, line_start: int) -> int:
    w = _WINDOW
    while True:
        lo = max(0, line_start - w)
        q = _LAST_QID(src.read(lo, line_start - lo), lo == 0)
        if q >= 0 or lo == 0:
            return int(q) if q >= 0 else -2  # -2: no line with a qid before
        w *= 4


def first_boundary(src: ByteSource, p: int) -> int:
    """Start offset of the first query block starting at or after byte ``p``."""
    if p <= 0:
        return 0
    if p >= src.size:
        return src.size
    start = _line_start_at_or_after(src, p)
    if start >= src.size:
        return src.size
    prev = _prev_qid(src, start)
    w = _WINDOW
    while True:
        buf = src.read(start, w)
        at_eof = start + buf.size >= src.size
        off = _FIRST_NEW_QID_LINE(buf, prev, at_eof)
        if off >= 0:
            return start + int(off)
        if at_eof:
            return src.size
        w *= 4


def plan_ranges(size: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Nominal byte ranges covering ``[0, size)``; at least one, even for an empty file."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    n = max(1, -(-size // chunk_bytes))
    step = -(-size // n) if size else 0
    return [(k * step, min(size, (k + 1) * step)) for k in range(n)]


# --------------------------------------------------------------- tasks
@dataclass(frozen=True)
class ChunkTask:
    """One unit of ingest work: the nominal range ``[start, end)`` of a source file.

    ``mode`` is ``"parse"`` (parse, write Parquet under ``out_dir/subset=<subset>``)
    or ``"scan"`` (only qids, to verify fold rotations). ``out_dir`` and
    ``quarantine_dir`` are URIs or absolute paths.
    """

    chunk_id: int
    source: str
    start: int
    end: int
    subset: str
    mode: str
    out_dir: str
    quarantine_dir: str
    n_features: int
    min_label: int
    max_label: int
    strict: bool
    compression: str
    absent: str = "zero"  # udfs.letor_parse.LineSpec.absent
    overflow: str = "reject"  # udfs.letor_parse.LineSpec.overflow


#: Arrow schema of the metadata row each task returns (arrays travel as raw bytes).
RESULT_SCHEMA = pa.schema(
    [
        ("chunk_id", pa.int32()),
        ("begin", pa.int64()),
        ("end", pa.int64()),
        ("n_lines", pa.int64()),
        ("n_rows", pa.int64()),
        ("n_blank", pa.int64()),
        ("n_comment", pa.int64()),
        ("n_bad", pa.int64()),
        ("n_clamped", pa.int64()),  # values beyond float32 clamped (LineSpec.overflow == "clamp")
        ("bad_by_code", pa.binary()),  # int64[16] counts per error code
        ("first_bad_line", pa.int64()),  # chunk-relative, -1 if none
        ("first_bad_code", pa.int32()),
        ("first_bad_token", pa.binary()),
        ("block_qid", pa.binary()),  # int64[], qid of each query block in source order
        ("block_line", pa.binary()),  # int64[], chunk-relative first line of each block
        ("block_lines", pa.binary()),  # int64[], lines with that qid in the block
        ("query_qid", pa.binary()),  # int32[], stored qids (sorted)
        ("query_rows", pa.binary()),  # int64[], stored rows per qid
        ("hash_sum", pa.int64()),  # uint64 bit pattern
        ("out_file", pa.string()),
        ("seconds", pa.float64()),  # wall time of the task body
    ]
)

_N_CODES = 16


def _blocks(line_qid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of equal qid over the lines that have one: (qid, first line, line count)."""
    lines = np.flatnonzero(line_qid >= 0)
    q = line_qid[lines]
    if q.size == 0:
        e = np.empty(0, dtype=np.int64)
        return e, e, e
    starts = np.concatenate(([0], np.flatnonzero(np.diff(q) != 0) + 1))
    counts = np.diff(np.concatenate((starts, [q.size])))
    return q[starts].astype(np.int64), lines[starts].astype(np.int64), counts.astype(np.int64)


def sort_and_number(qid: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """Stable order that makes ``qid`` non-decreasing (None if it already is), and each
    row's position in its query (``doc``) after that order."""
    order = None
    if qid.size > 1 and np.any(qid[1:] < qid[:-1]):
        order = np.argsort(qid, kind="stable")
        qid = qid[order]
    n = qid.size
    if n == 0:
        return order, np.empty(0, dtype=np.int32)
    starts = np.concatenate(([0], np.flatnonzero(qid[1:] != qid[:-1]) + 1))
    run_start = np.repeat(starts, np.diff(np.concatenate((starts, [n]))))
    return order, (np.arange(n) - run_start).astype(np.int32)


def sorted_rows(block: ParsedBlock) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of a parsed block stably sorted by qid: (qid, label, doc, X)."""
    order, doc = sort_and_number(block.qid)
    if order is None:
        return block.qid, block.label, doc, block.X
    return block.qid[order], block.label[order], doc, block.X.T[:, order].T


def rows_table(qid: np.ndarray, label: np.ndarray, doc: np.ndarray, X: np.ndarray) -> pa.Table:
    """Arrow table with :func:`udfs.schema.arrow_schema` of sorted rows.

    With a column-major ``X`` (as :func:`udfs.letor_parse.parse_block` returns)
    every feature column is handed to Arrow without a copy."""
    arrays = [pa.array(qid, schema.QID_TYPE), pa.array(label, schema.LABEL_TYPE), pa.array(doc, schema.DOC_TYPE)]
    arrays += [pa.array(X[:, j], schema.FEATURE_TYPE) for j in range(X.shape[1])]
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema(X.shape[1]))


def _write_atomic(table: pa.Table, dir_uri: str, name: str, compression: str) -> str:
    """Write ``table`` to ``dir_uri/name`` whole (:func:`udfs.atomic.atomic_stream`: a temporary name, then a
    rename), so a retried or killed task never leaves a half-written file under the final name, and a retried
    task replaces the file of the attempt before it (also on HDFS, which does not rename onto a file)."""
    fs, path = pafs.FileSystem.from_uri(dir_uri)
    with atomic_stream(fs, f"{path}/{name}") as f:
        # No dictionary encoding: float features rarely repeat; it made writing slower and the files
        # larger on MSLR-shaped data (benchmarks/RESULTS.md, "Figures moved out of the code").
        pq.write_table(
            table,
            f,
            compression=compression,
            use_dictionary=False,
            row_group_size=max(table.num_rows, 1),
            write_statistics=True,
        )
    return f"{path}/{name}"


def run_chunk(task: ChunkTask) -> dict:
    """Do one chunk's work and return its metadata row (see :data:`RESULT_SCHEMA`)."""
    t0 = time.perf_counter()
    with ByteSource(task.source) as src:
        begin = first_boundary(src, task.start)
        end = first_boundary(src, task.end) if task.end < src.size else src.size
        buf = src.read(begin, max(0, end - begin))
    res = {
        "chunk_id": task.chunk_id,
        "begin": begin,
        "end": max(begin, end),
        "n_rows": 0,
        "n_blank": 0,
        "n_comment": 0,
        "n_bad": 0,
        "n_clamped": 0,
        "bad_by_code": np.zeros(_N_CODES, np.int64).tobytes(),
        "first_bad_line": -1,
        "first_bad_code": 0,
        "first_bad_token": b"",
        "query_qid": b"",
        "query_rows": b"",
        "hash_sum": 0,
        "out_file": "",
    }
    if task.mode == "scan":
        line_qid = np.full(max(buf.size, 1), -1, dtype=np.int64)
        n_lines = int(_SCAN_LINE_QIDS(buf, line_qid))
        line_qid = line_qid[:n_lines]
        res["n_lines"] = n_lines
    elif task.mode == "parse":
        spec = LineSpec(task.n_features, task.min_label, task.max_label, task.absent, task.overflow)
        block = parse_block(buf, spec, strict=task.strict)
        line_qid = block.line_qid
        res.update(_parse_result(task, block))
    else:
        raise ValueError(f"unknown chunk mode {task.mode!r}; expected 'parse' or 'scan'")
    bq, bl, bn = _blocks(line_qid)
    res.update(
        block_qid=bq.tobytes(), block_line=bl.tobytes(), block_lines=bn.tobytes(), seconds=time.perf_counter() - t0
    )
    return res


def _parse_result(task: ChunkTask, block: ParsedBlock) -> dict:
    by_code = np.bincount(block.bad_code.astype(np.int64), minlength=_N_CODES)[:_N_CODES]
    res = {
        "n_lines": block.n_lines,
        "n_rows": block.n_rows,
        "n_blank": block.n_blank,
        "n_comment": block.n_comment,
        "n_bad": block.n_bad,
        "n_clamped": block.n_clamped,
        "bad_by_code": by_code.astype(np.int64).tobytes(),
    }
    if block.n_bad:
        res.update(
            first_bad_line=int(block.bad_line[0]),
            first_bad_code=int(block.bad_code[0]),
            first_bad_token=block.bad_token[0],
        )
    if task.strict and block.n_bad:
        return res  # the driver reports the first bad line; nothing is written
    if block.n_bad:
        qt = pa.table(
            {
                "chunk_id": pa.array(np.full(block.n_bad, task.chunk_id, np.int32)),
                "line_in_chunk": pa.array(block.bad_line),
                "reason": pa.array([REASON_KEYS[int(c)] for c in block.bad_code]),
                "token": pa.array([t.decode("utf-8", "replace") for t in block.bad_token]),
                "raw": pa.array([r.decode("utf-8", "replace") for r in block.bad_raw]),
            }
        )
        _write_atomic(qt, task.quarantine_dir, f"chunk-{task.chunk_id:06d}.parquet", "zstd")
    if block.n_rows == 0:
        return res
    qid, label, doc, X = sorted_rows(block)
    h = row_hashes_sum(qid, label, doc, X)
    uq, cnt = np.unique(qid, return_counts=True)
    table = rows_table(qid, label, doc, X)
    out = _write_atomic(
        table, f"{task.out_dir}/{schema.SUBSET}={task.subset}", f"part-{task.chunk_id:06d}.parquet", task.compression
    )
    res.update(
        query_qid=uq.astype(np.int32).tobytes(),
        query_rows=cnt.astype(np.int64).tobytes(),
        hash_sum=int(np.uint64(h).astype(np.int64)),
        out_file=out,
    )
    return res
