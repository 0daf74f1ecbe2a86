"""Checks of what the parse tasks returned: the per-file chunk results (:class:`FileResult`), strict mode's first
bad line, the MSLR rotation verified from qid sets, queries that were not contiguous or sit in several subsets."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipelines.core.config import IngestConfig
from pipelines.data.dataset import MSLR_ROTATION
from pipelines.data.ingest.discovery import IngestError, SourceFile
from udfs.letor_parse import LineSpec


@dataclass
class FileResult:
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


def raise_strict(results: list[FileResult], spec: LineSpec, cfg: IngestConfig) -> None:
    if not cfg.strict:
        return
    for r in results:  # files in discovery order, chunks in file order
        for off, row in zip(r.line_offsets(), r.rows, strict=True):
            if row["first_bad_line"] is not None and row["first_bad_line"] >= 0:
                line = off + row["first_bad_line"] + 1
                tok = bytes(row["first_bad_token"]).decode("utf-8", "replace")
                raise IngestError(
                    f"{r.src.name}:{line}: {spec.reason(row['first_bad_code'])}: "
                    f"token {short_text(tok)!r} (--strict; without it bad lines are quarantined)"
                )


def short_text(s: str, n: int = 80) -> str:
    return s if len(s) <= n else s[:n] + "..."


def verify_rotation(results: dict[str, FileResult], stored: dict[str, str]) -> tuple[bool, str]:
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


def noncontiguous(results: list[FileResult]) -> list[dict[str, Any]]:
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


def qids_in_several_subsets_of(results: list[FileResult]) -> list[int]:
    seen: dict[int, set[str]] = {}
    for r in results:
        for row in r.rows:
            for q in np.frombuffer(row["query_qid"] or b"", np.int32).tolist():
                seen.setdefault(q, set()).add(r.src.subset)
    return sorted(q for q, s in seen.items() if len(s) > 1)
