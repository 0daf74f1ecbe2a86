"""``ltr ingest``: LETOR text to a partitioned Parquet dataset with a manifest.

Modules: :mod:`.discovery` (step 1), :mod:`.job` (steps 2 and 5), :mod:`.checks` (step 3), :mod:`.quarantine`
(step 3's bad lines), :mod:`.merge` (step 4), :mod:`.manifest` (counts and fingerprint).

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

from pipelines.data.ingest.discovery import IngestError, SourceFile, SourceLayout, detect_preset, discover
from pipelines.data.ingest.job import ingest, line_spec
from pipelines.data.ingest.manifest import FORMAT_VERSION
from pipelines.data.ingest.quarantine import QUARANTINE_MARKER, quarantine_dir

__all__ = [
    "detect_preset",
    "FORMAT_VERSION",
    "IngestError",
    "QUARANTINE_MARKER",
    "SourceFile",
    "SourceLayout",
    "discover",
    "ingest",
    "line_spec",
    "quarantine_dir",
]
