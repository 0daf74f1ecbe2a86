"""Discovery: which LETOR text files an ingest reads and the subset each is stored as (an MSLR rotation
``Fold*/``, a one-fold folder, or one file), and :class:`IngestError`, the package's error."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow.fs as pafs

from pipelines.core.errors import UserError
from udfs.uris import to_uri

_FOLD_RE = re.compile(r"Fold(\d+)")


class IngestError(UserError):
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
class SourceLayout:
    """What ``--src`` holds: ``kind`` is "mslr" (Fold1..Fold5 complete), "folds", "one_fold" or "file"."""

    kind: str
    files: tuple[SourceFile, ...]


def discover(src: str) -> SourceLayout:
    """Find the LETOR files under ``src`` (a folder, or one file)."""
    uri = to_uri(src)
    fs, root = pafs.FileSystem.from_uri(uri)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise IngestError(f"--src {src}: no such file or directory")
    if info.type == pafs.FileType.File:
        return SourceLayout("file", (SourceFile(uri, info.base_name, info.size, 1, "train", "train"),))
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
        return SourceLayout("mslr" if complete else "folds", tuple(files))
    if "train.txt" in entries:
        return SourceLayout("one_fold", tuple(_split_files(src, entries, "", 1, lambda split: split)))
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
