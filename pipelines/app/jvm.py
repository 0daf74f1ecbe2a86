"""A class-data sharing archive of Spark's classes, so that a driver JVM starts in about half the time.

A Spark driver JVM loads and verifies some 17,000 classes (the JDK's and Spark's 280 jars') before and during its
first job. HotSpot can map those classes, already parsed and verified, from an archive written by an earlier JVM
(application class-data sharing, JEP 350), which halves a session's start and its first job
(``benchmarks/bench_session.py``; benchmarks/RESULTS.md, "Spark's class archive"). Every step of a study is a
Spark application (``ltr run`` one, the Airflow DAG one per step and unit), so each pays this once.

Java 19+ writes such an archive by itself (``-XX:+AutoCreateSharedArchive``); Spark 4 runs on Java 17, so
:func:`build_class_archive` writes it: one ``spark-submit`` of a small job (a DataFrame, Parquet, a pandas UDF)
whose driver dumps the classes it loaded at exit (``-XX:ArchiveClassesAtExit``) to a temporary file, renamed
into place once that JVM has exited with status 0 (a reader never maps a half-written archive). A JVM given
an archive it cannot use (another Java build, another class path) ignores it silently and starts as
before (``-Xshare:auto``, HotSpot's default): the archive makes starts faster, never different. A missing one
is not ignored as cheaply: Java 17 then maps no archive at all, the JDK's own default one included, so the option
is given only once the file exists (:func:`with_archive`).

The archive lies in ``$LTR_JVM_CACHE`` (default ``$XDG_CACHE_HOME/ltr/jvm``, else ``~/.cache/ltr/jvm``),
named by the Java binary and the jars it was made from (:func:`class_archive`), about 190 MB. ``ltr
jvm-archive`` writes it; a local session ``ltr`` starts uses it when it exists and otherwise starts writing
it in the background at nice 10 (:func:`use_class_archive`). ``LTR_CLASS_ARCHIVE=off`` turns both off. Writing
it runs a Spark job in dump mode, and the JVM then verifies and writes Spark's classes at exit (a static archive
from a class list, ``-Xshare:dump``, is no faster: benchmarks/RESULTS.md, ``bench_session``).

The Airflow DAG's steps (``pipelines.app.airflow.LtrSubmitOperator``) give their spark-submit's JVM the archive
when it exists on the Airflow worker (:func:`with_archive`; they never write it: ``ltr jvm-archive`` there once).
Where it does not reach: another driver started by ``spark-submit`` gets the option from its submitter
(``--driver-java-options`` or ``SPARK_SUBMIT_OPTS``, :func:`java_option`); executors
and standalone daemons have class paths of their own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipelines.core.errors import LtrError, UserError
from pipelines.core.locks import FileLock

log = logging.getLogger(__name__)

#: ``LTR_CLASS_ARCHIVE=off`` (or 0, false, no): no archive used, none built.
SWITCH = "LTR_CLASS_ARCHIVE"
#: The options of the JVM that writes the archive, besides the dump itself: no notes on the classes it cannot
#: archive (signed jars'), no C2 compiler and serial GC (faster to write; the archive serves JVMs of other
#: GCs and compilers alike).
DUMP_OPTIONS = "-Xlog:cds=off,cds+dynamic=off -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: An archive of another Java or Spark (another name in the same folder) not used for this many days is removed
#: when an archive is written: each is about 190 MB, and an upgrade of either leaves the old one behind. "Used":
#: its time stamp, which :func:`with_archive` renews whenever it gives the option.
STALE_DAYS = 14

#: The job whose loaded classes the archive holds: what a step's first seconds load (a session, a DataFrame
#: with an Arrow-backed pandas UDF, Parquet written and read, a shuffle).
_JOB = """
import sys, tempfile
import pandas as pd
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.getOrCreate()
df = spark.range(64).withColumn("q", F.col("id") % 4).withColumn("x", F.rand(seed=1).cast("float"))
def per_query(p: pd.DataFrame) -> pd.DataFrame:
    return p.assign(x=p["x"] - p["x"].mean())
out = df.groupBy("q").applyInPandas(per_query, "id long, q long, x float")
with tempfile.TemporaryDirectory() as d:
    out.write.mode("overwrite").parquet(d + "/t")
    n = spark.read.parquet(d + "/t").groupBy("q").agg(F.count("*"), F.sum("x")).count()
spark.stop()
sys.exit(0 if n == 4 else 3)
"""


class JvmArchiveError(LtrError):
    """The class archive could not be written (the job's output says why)."""


class NoJavaError(UserError):
    """No ``java`` where Spark's launcher looks (``$JAVA_HOME``, ``PATH``): exit 2."""

    def __init__(self) -> None:
        super().__init__("no java found (JAVA_HOME, PATH): Spark needs Java 17+")


def enabled() -> bool:
    return os.environ.get(SWITCH, "").strip().lower() not in ("off", "0", "false", "no")


def spark_home() -> Path:
    """The Spark installation ``pyspark`` launches (``$SPARK_HOME``, else the pip package's)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def java_binary() -> Path | None:
    """The ``java`` that Spark's launcher runs (``$JAVA_HOME/bin/java``, else the one on ``PATH``), resolved."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(os.path.realpath(found)) if found and os.path.exists(found) else None


def cache_dir() -> Path:
    if os.environ.get("LTR_JVM_CACHE"):
        return Path(os.environ["LTR_JVM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ltr" / "jvm"


def class_archive(home: Path | None = None) -> Path | None:
    """Where the archive for this Java and these Spark jars lies (it may not exist yet); None without Java.

    Named by what HotSpot checks before it maps an archive: the JVM build (the binary's path, size and time)
    and the class path (``$SPARK_CONF_DIR`` and every jar's name and size). Another Java or another Spark
    gets another file instead of one that every JVM would ignore."""
    java = java_binary()
    if java is None:
        return None
    home = home or spark_home()
    jars = home / "jars"
    st = java.stat()
    h = hashlib.sha256()
    conf = os.path.realpath(os.environ.get("SPARK_CONF_DIR") or home / "conf")  # spark-submit's default, exported
    h.update(f"{java}\0{st.st_size}\0{st.st_mtime_ns}\0{conf}\0".encode())
    try:
        entries = sorted((e.name, e.stat().st_size) for e in os.scandir(jars) if e.name.endswith(".jar"))
    except OSError:
        return None
    for name, size in entries:
        h.update(f"{name}\0{size}\0".encode())
    core = [n for n, _ in entries if n.startswith("spark-core_")]  # spark-core_2.13-4.3.0.jar
    version = core[0].rsplit("-", 1)[-1][: -len(".jar")] if core else "unknown"
    return cache_dir() / f"spark-{version}-{h.hexdigest()[:16]}.jsa"


def java_option(archive: Path | None = None) -> str:
    """``-XX:SharedArchiveFile=<archive>`` for a driver JVM's options; empty when switched off, without Java, or
    where the path holds white space (``SPARK_SUBMIT_OPTS`` is split on it). Whether or not the file exists: give
    it only once it does (:func:`with_archive`). A Java 17 JVM told of a missing archive starts without a word,
    but without any class archive, the JDK's own included."""
    if not enabled():
        return ""
    archive = archive or class_archive()
    if archive is None or any(c.isspace() for c in str(archive)):  # JVM options are split on white space
        return ""
    return f"-XX:SharedArchiveFile={archive}"


def build_class_archive(archive: Path | None = None, timeout: float = 600.0, job: str = _JOB) -> Path:
    """Write the archive (:func:`class_archive`) with one small ``spark-submit`` of ``job`` (Python source) on
    ``local[1]``, into a temporary file renamed into place after that JVM exited with status 0; returns its path.

    Raises
    ------
    NoJavaError
        No Java.
    JvmArchiveError
        The job failed or wrote nothing (its output's last lines in the message).
    """
    archive = archive or class_archive()
    if archive is None:
        raise NoJavaError()
    archive.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=archive.name + ".", suffix=".tmp", dir=archive.parent)
    os.close(fd)
    os.unlink(tmp)  # HotSpot creates it
    with tempfile.TemporaryDirectory(prefix="ltr-jvm-") as d:
        script = Path(d) / "classes.py"
        script.write_text(job)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # not SPARK_SUBMIT_OPTS: it may hold the caller's -XX:SharedArchiveFile, which cannot go with a dump
        env.pop("SPARK_SUBMIT_OPTS", None)
        cmd = [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            "local[1]",
            "--driver-java-options",
            f"-XX:ArchiveClassesAtExit={tmp} {DUMP_OPTIONS}",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.ui.showConsoleProgress=false",
            str(script),
        ]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, env=env, cwd=d, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            _remove(tmp)
            raise JvmArchiveError(f"the class archive's job ran past {timeout:.0f} s") from None
        if r.returncode != 0 or not os.path.isfile(tmp) or os.path.getsize(tmp) == 0:
            _remove(tmp)
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
            raise JvmArchiveError(f"the class archive's job exited {r.returncode} and wrote no archive:\n{tail}")
    os.replace(tmp, archive)
    log.info("class archive %s: %.0f MB in %.1f s", archive, archive.stat().st_size / 1e6, time.perf_counter() - t0)
    remove_stale(archive)
    return archive


def remove_stale(keep: Path, days: float = STALE_DAYS) -> list[Path]:
    """Remove the other archives in ``keep``'s folder unused for ``days`` (:data:`STALE_DAYS`), and temporary
    files of dumps that died more than a day ago; returns what was removed. Another Spark on this machine whose
    archive was removed writes it again on its next local session."""
    now, removed = time.time(), []
    for p in keep.parent.iterdir():
        if p == keep:
            continue
        limit = days * 86400 if p.suffix == ".jsa" else 86400 if p.name.endswith(".tmp") else None
        if limit is not None and now - _mtime(p) > limit:
            _remove(str(p))
            removed.append(p)
    if removed:
        log.info("removed %d class archive file(s) unused for %g days or more: %s", len(removed), days, removed)
    return removed


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _lock(archive: Path) -> Path:
    return archive.with_name(archive.name + ".building")


def start_background_build(archive: Path | None = None) -> subprocess.Popen[bytes] | None:
    """Start ``python -m pipelines.app.jvm`` writing the archive, detached and at low priority, unless it
    exists, is switched off, or another process is writing it (it holds the archive's lock, a
    :class:`~pipelines.core.locks.FileLock` that its end releases, however it ends); returns the process, or None.
    The process takes the lock itself; of two started at once, the one that does not get it ends at once."""
    if not enabled():
        return None
    archive = archive or class_archive()
    if archive is None or archive.exists():
        return None
    archive.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(_lock(archive)))
    if not lock.acquire(wait=False):
        return None
    lock.release()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.app.jvm", "--out", str(archive), "--lock", lock.path],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=lambda: os.nice(10),
    )
    log.info("writing Spark's class archive %s in the background (pid %d): later JVMs start faster", archive, proc.pid)
    return proc


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def with_archive(opts: str, archive: Path | None = None) -> str:
    """JVM options ``opts`` with the archive's option added when the archive exists, is switched on and
    ``opts`` names no archive yet (for a submitter's ``SPARK_SUBMIT_OPTS``: builds nothing, starts nothing).
    Giving the option renews the archive's time stamp, which :func:`remove_stale` reads as its last use."""
    if not enabled() or "SharedArchiveFile" in opts or "ArchiveClassesAtExit" in opts:
        return opts
    try:
        archive = archive or class_archive()
    except Exception as e:  # pyspark's home not found...: as before
        log.debug("no class archive: %s", e)
        return opts
    if archive is None or not archive.exists():
        return opts
    option = java_option(archive)
    if option:
        try:
            os.utime(archive)
        except OSError:  # another user's archive: used all the same
            pass
    return f"{opts} {option}".strip()


def use_class_archive(master: str) -> None:
    """Before a local session's JVM starts: give it the archive if it exists (``SPARK_SUBMIT_OPTS``, which
    ``pyspark``'s launcher passes to the driver JVM), else start writing it in the background.
    Nothing for other masters (the driver may run elsewhere) nor when switched off."""
    if not master.startswith("local") or not enabled():
        return
    try:
        archive = class_archive()
    except Exception as e:  # pyspark's home not found...: the session starts as before
        log.debug("no class archive: %s", e)
        return
    if archive is None or not java_option(archive):
        return
    os.environ["SPARK_SUBMIT_OPTS"] = with_archive(os.environ.get("SPARK_SUBMIT_OPTS", ""), archive)
    if not archive.exists():
        try:
            start_background_build(archive)
        except OSError as e:
            log.debug("class archive not started: %s", e)


def main(argv: list[str] | None = None) -> int:
    """``python -m pipelines.app.jvm [--out PATH] [--lock PATH]``: write the archive (what ``ltr jvm-archive``
    and the background build run); prints ``{"archive": ..., "bytes": ...}``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m pipelines.app.jvm")
    p.add_argument("--out", default=None)
    p.add_argument("--lock", default=None)
    a = p.parse_args(argv)
    lock = FileLock(a.lock) if a.lock else None
    if lock is not None and not lock.acquire(wait=False):
        print(f"class archive: another process (pid {lock.holder()}) is writing it", file=sys.stderr)
        return 0
    try:
        if lock is not None and a.out and Path(a.out).exists():  # written by the holder before us
            path = Path(a.out)
        else:
            path = build_class_archive(Path(a.out) if a.out else None)
    except JvmArchiveError as e:
        print(f"class archive: {e}", file=sys.stderr)
        return 1
    finally:
        if lock is not None:
            lock.release()
    print(json.dumps({"archive": str(path), "bytes": path.stat().st_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
