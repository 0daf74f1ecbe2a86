"""What an edit of operations code costs a finished study: nothing but the report.

    python -m benchmarks.bench_identity [--work bench-out/identity]

In a git copy of the checkout: ``ltr run`` (README's main job, default config) from nothing; then a commit that
changes the progress bar's poll interval (``pipelines/core/spark_progress.py``) and the report's bootstrap default
(``pipelines/core/config/schema.py``); then ``ltr run`` again in the same work directory. Prints, per run, its seconds,
the trees it trained, whether it computed difficulty scores, curricula or cuts, and whether it wrote the report,
read from the run's own log, as JSON. Before the kernel (issue 53) the second run trained every tree again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@b", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _copy(dest: Path) -> None:
    """The checkout's tracked and untracked-but-not-ignored files, as a fresh git repository."""
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "copy")


def _run(repo: Path, work: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "pipelines.app.cli", "run", "--set", f"work_dir={work}"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = round(time.perf_counter() - t0, 1)
    log = r.stderr
    if r.returncode != 0:
        raise SystemExit(f"ltr run failed ({r.returncode}):\n{log[-4000:]}")
    trained = [int(m) for m in re.findall(r"\((\d+) trees built\)", log)]
    return {
        "seconds": seconds,
        "trees_trained": sum(trained),
        "difficulty_computed": "computing difficulty scores" in log,
        "curricula_built": bool(re.search(r"curriculum \S+ fold \d+ \(empty queries", log)),
        "cuts_computed": "histogram cuts from" in log,
        "report_written": bool(re.search(r"report -> ", log)),
        "log_tail": log.splitlines()[-8:],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="bench-out/identity")
    args = ap.parse_args()
    base = Path(args.work).resolve()
    shutil.rmtree(base, ignore_errors=True)
    repo, work = base / "repo", base / "work"
    repo.mkdir(parents=True)
    _copy(repo)
    first = _run(repo, work)
    progress = repo / "pipelines/core/spark_progress.py"
    text = progress.read_text()
    new = re.sub(r"^POLL_SECONDS = ([0-9.]+)", lambda m: f"POLL_SECONDS = {float(m.group(1)) * 2}", text, flags=re.M)
    config = repo / "pipelines/core/config/schema.py"
    ctext = config.read_text()
    old = "    bootstrap: int = setting(\n        10000,"
    cnew = ctext.replace(old, old.replace("10000", "2000"))
    if new == text or cnew == ctext:
        raise SystemExit("the edits did not apply: POLL_SECONDS or ReportConfig.bootstrap moved")
    progress.write_text(new)
    config.write_text(cnew)
    _git(repo, "commit", "-q", "-am", "progress bar polls half as often; report bootstrap 2000")
    second = _run(repo, work)
    print(json.dumps({"first": first, "after_operations_commit": second}, indent=2))


if __name__ == "__main__":
    main()
