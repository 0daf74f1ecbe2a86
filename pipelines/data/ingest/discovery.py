"""Discovery: which LETOR text files an ingest reads and the subset each is stored as (an MSLR rotation
``Fold*/``, Istella's ``full/``, Yahoo's ``set1.*.txt``, a one-fold folder, or one file), which dataset
preset the files look like (:func:`detect_preset`), and :class:`IngestError`, the package's error."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow.fs as pafs

from pipelines.core.errors import UserError
from udfs.uris import to_uri

_FOLD_RE = re.compile(r"Fold(\d+)")
_INDEX_RE = re.compile(rb"\s(\d+):")

#: Yahoo! LTR Challenge set 1's published files -> split (set 2, when it lies beside them, is not read).
YAHOO_FILES = {"set1.train.txt": "train", "set1.valid.txt": "vali", "set1.test.txt": "test"}
#: Istella LETOR's published folder of the whole set (``sample/`` beside it is Istella-S).
ISTELLA_DIR = "full"


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
    """What ``--src`` holds: ``kind`` is "mslr" (Fold1..Fold5 complete), "folds", "istella" (``full/train.txt``,
    ``full/test.txt``), "yahoo" (``set1.{train,valid,test}.txt``), "one_fold" (``train.txt`` ...) or "file"."""

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
    full = entries.get(ISTELLA_DIR)
    if full is not None and full.type == pafs.FileType.Directory:
        inner = {e.base_name: e for e in fs.get_file_info(pafs.FileSelector(full.path))}
        if "train.txt" in inner:
            return SourceLayout("istella", tuple(_split_files(src, inner, f"{ISTELLA_DIR}/", 1, lambda split: split)))
    if "set1.train.txt" in entries:
        names = {split: name for name, split in YAHOO_FILES.items()}
        return SourceLayout("yahoo", tuple(_split_files(src, entries, "", 1, lambda split: split, names)))
    raise IngestError(
        f"--src {src}: no LETOR files found; expected Fold1..Fold5/ folders (MSLR, LETOR 4.0), "
        f"{ISTELLA_DIR}/train.txt and {ISTELLA_DIR}/test.txt (Istella), set1.train.txt, set1.valid.txt and "
        "set1.test.txt (Yahoo!), train.txt with optional vali.txt and test.txt (Istella-X), or a single file"
    )


#: Layouts that name their dataset by themselves.
_LAYOUT_PRESET = {"istella": "istella", "yahoo": "yahoo"}


def detect_preset(layout: SourceLayout, presets: dict[str, int]) -> tuple[str, str] | None:
    """The preset (``conf/datasets/<name>.yaml``) the files look like, and why; None when nothing says.

    ``presets``: name -> feature count. Istella's ``full/`` and Yahoo's ``set1.*`` name their set; any
    other layout is matched on the highest feature id of its first lines (MSLR 136, LETOR 4.0 46,
    Istella-X 220), which a sparse file may not reach, so there it says nothing rather than guess.
    """
    names = ", ".join(f.name for f in layout.files[:3])
    if layout.kind in _LAYOUT_PRESET:
        return _LAYOUT_PRESET[layout.kind], f"{layout.kind} layout: {names}"
    top = _highest_feature_id(layout.files[0])
    matches = sorted(n for n, k in presets.items() if k == top and n not in _LAYOUT_PRESET.values())
    if len(matches) == 1:
        return matches[0], f"{layout.kind} layout ({names}) with feature ids up to {top}"
    return None


def _highest_feature_id(sf: SourceFile, nbytes: int = 1 << 20) -> int:
    """The highest ``index:`` of the whole lines in the first ``nbytes`` of ``sf`` (0 if none)."""
    fs, path = pafs.FileSystem.from_uri(sf.uri)
    with fs.open_input_stream(path) as f:
        head = f.read(nbytes)
    if len(head) == nbytes:
        head = head[: head.rfind(b"\n") + 1]
    ids = [int(m) for line in head.splitlines() for m in _INDEX_RE.findall(line.split(b"#", 1)[0])]
    return max(ids, default=0)


def _split_files(
    src: str, entries: dict, prefix: str, fold: int, subset_name, names: dict[str, str] | None = None
) -> list[SourceFile]:
    """The train (required), vali and test files among ``entries``: ``names`` maps split -> file name
    (default ``<split>.txt``)."""
    root = to_uri(src).rstrip("/")
    out = []
    for split in ("train", "vali", "test"):
        fname = (names or {}).get(split, f"{split}.txt")
        e = entries.get(fname)
        if e is None or e.type != pafs.FileType.File:
            if split == "train":
                raise IngestError(f"--src {src}: {prefix}{fname} is missing")
            continue
        out.append(SourceFile(f"{root}/{prefix}{fname}", f"{prefix}{fname}", e.size, fold, split, subset_name(split)))
    return out
