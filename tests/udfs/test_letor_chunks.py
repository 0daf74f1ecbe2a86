"""Query-aligned chunking: every line owned once, no query split, chunked result == whole-file parse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import GOLDEN
from udfs import schema
from udfs.letor_chunks import ByteSource, ChunkTask, first_boundary, plan_ranges, run_chunk, sorted_rows
from udfs.letor_parse import LineSpec, parse_block


def _line_qids(data: bytes) -> list[int]:
    """qid of every line the obvious way (-1 where a line has none)."""
    out = []
    for line in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
        toks = line.split(b"#", 1)[0].split()
        q = -1
        if len(toks) >= 2 and toks[1].startswith(b"qid:") and toks[1][4:].isdigit() and len(toks[1]) <= 14:
            q = int(toks[1][4:])
            q = q if q < 2**31 else -1
        out.append(q)
    return out


def _boundaries_by_hand(data: bytes) -> set[int]:
    """Byte offsets where a query block starts (plus 0 and the end)."""
    starts, pos = [], 0
    for line in data.split(b"\n"):
        starts.append(pos)
        pos += len(line) + 1
    qids = _line_qids(data)
    out, prev = {0, len(data)}, None
    for s, q in zip(starts, qids, strict=False):
        if q >= 0:
            if q != prev:
                out.add(s)
            prev = q
    return out


def _messy_file(tmp_path: Path) -> Path:
    text = (
        "# header comment\n"
        "1 qid:1 1:1\n2 qid:1 2:2\n\n# in the middle of query 1\n0 qid:1 3:3\n"
        "x qid:2 1:1\n0 qid:2 1:2\n"  # bad label but qid 2: starts query 2's block
        "1 qid:zz 1:1\n"  # no qid: belongs to whichever chunk it falls in
        + "3 qid:3 4:4\n" * 5
        + "0 qid:4 1:0."
        + "9" * 300
        + "\n"  # a long line (and a slow-path value)
        + "1 qid:3 1:1\n"  # qid 3 again: non-contiguous
        + "2 qid:5 1:5"  # no final newline
    )
    p = tmp_path / "messy.txt"
    p.write_bytes(text.encode())
    return p


@pytest.mark.parametrize("chunk", [1, 2, 7, 16, 50, 333, 10_000])
def test_boundaries_are_query_blocks(tmp_path, chunk):
    path = _messy_file(tmp_path)
    data = path.read_bytes()
    expected = _boundaries_by_hand(data)
    with ByteSource(str(path)) as src:
        ranges = plan_ranges(src.size, chunk)
        owned = [(first_boundary(src, a), first_boundary(src, b) if b < src.size else src.size) for a, b in ranges]
    assert owned[0][0] == 0 and owned[-1][1] == len(data)
    for (_, b0), (a1, _) in zip(owned, owned[1:], strict=False):
        assert b0 == a1  # contiguous cover, every line owned once
    for a, b in owned:
        assert a in expected and b in expected


def _run_all(path: Path, chunk: int, out: Path, spec: LineSpec) -> list[dict]:
    size = path.stat().st_size
    return [
        run_chunk(
            ChunkTask(
                i,
                str(path),
                a,
                b,
                "all",
                "parse",
                str(out),
                str(out / "_q"),
                spec.n_features,
                spec.min_label,
                spec.max_label,
                False,
                "snappy",
            )
        )
        for i, (a, b) in enumerate(plan_ranges(size, chunk))
    ]


def _first_queries(path: Path, n: int, out: Path) -> Path:
    """The lines of ``path``'s first ``n`` query blocks, written to ``out``."""
    lines, qids = [], []
    for line in path.read_bytes().splitlines(keepends=True):
        q = line.split(None, 2)[1]
        if q not in qids:
            if len(qids) == n:
                break
            qids.append(q)
        lines.append(line)
    out.write_bytes(b"".join(lines))
    return out


@pytest.mark.parametrize("chunk", [997, 65_536, 1 << 25])
def test_chunked_result_equals_whole_file_parse(tmp_path, small_letor, chunk):
    path = small_letor / "Fold1" / "test.txt"
    if chunk < 2048:
        # Chunks shorter than a line (1.1 KB here): every chunk starts inside a line and a query spans 50 to 200
        # of them. The fold's first 5 queries (400 lines, 450 chunks) show that as the whole file does (12 queries,
        # 1,600 chunks, each one a task and a parquet file: most of this module's time).
        path = _first_queries(path, 5, tmp_path / "first5.txt")
        assert 400_000 < path.stat().st_size < 600_000
    spec = LineSpec(136)
    results = _run_all(path, chunk, tmp_path / "out", spec)
    whole = parse_block(np.fromfile(path, dtype=np.uint8), spec)
    q, lab, doc, X = sorted_rows(whole)
    files = sorted((tmp_path / "out" / f"{schema.SUBSET}=all").glob("*.parquet"))
    t = pq.ParquetDataset([str(f) for f in files]).read()
    order = np.lexsort((t.column(schema.DOC).to_numpy(), t.column(schema.QID).to_numpy()))
    assert t.num_rows == whole.n_rows == sum(r["n_rows"] for r in results)
    np.testing.assert_array_equal(t.column(schema.QID).to_numpy()[order], q)
    np.testing.assert_array_equal(t.column(schema.DOC).to_numpy()[order], doc)
    np.testing.assert_array_equal(t.column(schema.LABEL).to_numpy()[order], lab)
    got = np.column_stack([t.column(c).to_numpy()[order] for c in schema.feature_cols(136)])
    assert np.array_equal(got.view(np.uint32), np.ascontiguousarray(X).view(np.uint32))
    # a query never straddles two chunk files
    seen: dict[int, str] = {}
    for f in files:
        for qid in np.unique(pq.read_table(f, columns=[schema.QID]).column(0).to_numpy()):
            assert qid not in seen, f"qid {qid} in {seen.get(qid)} and {f.name}"
            seen[qid] = f.name
    # the order-independent content hash does not depend on the chunking
    total = sum(r["hash_sum"] for r in results) % 2**64
    whole_res = _run_all(path, 1 << 30, tmp_path / "one", spec)
    assert total == whole_res[0]["hash_sum"] % 2**64


def test_chunk_line_counts_and_blocks(tmp_path):
    path = _messy_file(tmp_path)
    results = _run_all(path, 16, tmp_path / "out", LineSpec(6))
    assert sum(r["n_lines"] for r in results) == len(path.read_bytes().split(b"\n"))
    qids = np.concatenate([np.frombuffer(r["block_qid"], np.int64) for r in results])
    assert qids.tolist() == [1, 2, 3, 4, 3, 5]  # qid 3 comes back: two blocks
    assert sum(r["n_bad"] for r in results) == 2  # 'x' label, and qid:zz


def test_golden_file_with_tiny_chunks_matches_single_chunk(tmp_path):
    path = GOLDEN / "malformed.txt"
    spec = LineSpec(6)
    tiny = _run_all(path, 3, tmp_path / "tiny", spec)
    one = _run_all(path, 1 << 20, tmp_path / "one", spec)
    for key in ("n_lines", "n_rows", "n_bad"):
        assert sum(r[key] for r in tiny) == sum(r[key] for r in one)
