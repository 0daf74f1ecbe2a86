"""Spark's class archive (``pipelines.app.jvm``): named by the Java and the jars it was made from, given to local
sessions only, written once (a lock), renamed into place only after a job that succeeded, and mapped by the JVM
that Spark's launcher starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.app import jvm
from pipelines.core.locks import FileLock


def _fake_spark(root: Path, jars: dict[str, bytes]) -> Path:
    (root / "jars").mkdir(parents=True)
    for name, data in jars.items():
        (root / "jars" / name).write_bytes(data)
    return root


@pytest.fixture
def fake_java(tmp_path, monkeypatch) -> Path:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_bytes(b"#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv("LTR_JVM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    return java


def test_the_archive_is_named_by_the_java_and_the_jars(tmp_path, fake_java, monkeypatch):
    home = _fake_spark(tmp_path / "spark", {"spark-core_2.13-4.3.0.jar": b"a", "other.jar": b"bb", "notes.txt": b""})
    first = jvm.class_archive(home)
    assert first is not None and first.parent == tmp_path / "cache"
    assert first.name.startswith("spark-4.3.0-") and first.suffix == ".jsa"
    assert jvm.class_archive(home) == first  # the same inputs, the same file
    (home / "jars" / "notes.txt").write_bytes(b"not a jar")
    assert jvm.class_archive(home) == first  # only jars are on the class path
    (home / "jars" / "other.jar").write_bytes(b"bbb")  # another build of a jar
    second = jvm.class_archive(home)
    assert second != first
    (home / "jars" / "extra.jar").write_bytes(b"c")
    assert jvm.class_archive(home) not in (first, second)
    (home / "jars" / "extra.jar").unlink()
    fake_java.write_bytes(b"#!/bin/sh\n# another java\n")
    third = jvm.class_archive(home)
    assert third != second
    monkeypatch.setenv("SPARK_CONF_DIR", str(home / "conf"))  # what spark-submit exports: the default
    assert jvm.class_archive(home) == third
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # another directory on the class path
    assert jvm.class_archive(home) not in (first, second, third)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert jvm.class_archive(home) is None and jvm.java_option() == ""


def test_a_local_session_gets_the_archive_once_it_exists_and_starts_writing_it_before(tmp_path, fake_java, monkeypatch):
    home = _fake_spark(tmp_path / "spark", {"spark-core_2.13-4.3.0.jar": b"a"})
    monkeypatch.setattr(jvm, "spark_home", lambda: home)
    started: list[Path] = []
    monkeypatch.setattr(jvm, "start_background_build", lambda archive=None: started.append(archive))
    archive = jvm.class_archive(home)
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:+UseSerialGC")
    jvm.use_class_archive("spark://master:7077")  # the driver may run elsewhere: nothing
    jvm.use_class_archive("yarn")
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-XX:+UseSerialGC" and not started
    monkeypatch.setenv(jvm.SWITCH, "off")
    jvm.use_class_archive("local[2]")
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-XX:+UseSerialGC" and not started
    monkeypatch.delenv(jvm.SWITCH)
    jvm.use_class_archive("local[2]")
    # missing: not given (a Java 17 JVM would then map no archive, the JDK's own included), written instead
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-XX:+UseSerialGC" and started == [archive]
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"x")
    jvm.use_class_archive("local")
    assert os.environ["SPARK_SUBMIT_OPTS"] == f"-XX:+UseSerialGC -XX:SharedArchiveFile={archive}"
    assert started == [archive]  # present: not written again
    jvm.use_class_archive("local[*]")  # a second session: the option once
    assert os.environ["SPARK_SUBMIT_OPTS"].count("SharedArchiveFile") == 1


def test_a_submitter_adds_the_archive_only_where_it_exists(tmp_path, fake_java, monkeypatch):
    archive = tmp_path / "cache" / "a.jsa"
    assert jvm.with_archive("-Xmx1g", archive) == "-Xmx1g"  # missing: nothing
    archive.parent.mkdir()
    archive.write_bytes(b"x")
    assert jvm.with_archive("-Xmx1g", archive) == f"-Xmx1g -XX:SharedArchiveFile={archive}"
    assert jvm.with_archive("", archive) == f"-XX:SharedArchiveFile={archive}"
    assert jvm.with_archive("-XX:SharedArchiveFile=/elsewhere.jsa", archive) == "-XX:SharedArchiveFile=/elsewhere.jsa"
    spaced = tmp_path / "my cache" / "a.jsa"
    spaced.parent.mkdir()
    spaced.write_bytes(b"x")
    assert jvm.with_archive("-Xmx1g", spaced) == "-Xmx1g"  # SPARK_SUBMIT_OPTS is split on white space
    monkeypatch.setenv(jvm.SWITCH, "off")
    assert jvm.with_archive("-Xmx1g", archive) == "-Xmx1g"
    assert not _lock_files(tmp_path / "cache")  # it starts nothing


def test_giving_the_archive_marks_it_used_and_a_new_archive_removes_stale_ones(tmp_path, fake_java):
    cache = tmp_path / "cache"
    cache.mkdir()
    day = 86400
    now = time.time()

    def made(name: str, age_days: float) -> Path:
        p = cache / name
        p.write_bytes(b"x")
        os.utime(p, (now - age_days * day, now - age_days * day))
        return p

    current = made("spark-4.3.0-new.jsa", 30)
    jvm.with_archive("-Xmx1g", current)  # a JVM was given it: used now
    assert now - current.stat().st_mtime < 60
    old = made("spark-4.2.0-old.jsa", jvm.STALE_DAYS + 1)
    recent = made("spark-4.2.0-other.jsa", jvm.STALE_DAYS - 1)  # another Spark here, used lately
    dead_dump = made("spark-4.3.0-new.jsa.abc.tmp", 2)
    running_dump = made("spark-4.3.0-new.jsa.def.tmp", 0.01)
    lock = made("spark-4.3.0-new.jsa.building", 40)  # the archive's lock: kept (a FileLock's file stays)
    assert sorted(jvm.remove_stale(current)) == sorted([old, dead_dump])
    assert sorted(cache.iterdir()) == sorted([current, recent, running_dump, lock])


def _lock_files(folder: Path) -> list[Path]:
    return list(folder.glob("*.building"))


@pytest.mark.processes
def test_one_writer_at_a_time_and_a_killed_writers_lock_is_free(tmp_path, monkeypatch):
    """The archive's lock is the local lock (pipelines.core.locks.FileLock): while another process holds it, no
    build starts here and a started builder ends at once without writing; once that process is killed, the lock is
    free (no pid to read back, no file to remove)."""
    archive = tmp_path / "a.jsa"
    lock = str(tmp_path / "a.jsa.building")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pipelines.core.locks import FileLock; "
         "assert FileLock(sys.argv[1]).acquire(wait=False); print('held', flush=True); time.sleep(60)", lock],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setenv(jvm.SWITCH, "on")
        assert jvm.start_background_build(archive) is None
        r = subprocess.run(
            [sys.executable, "-m", "pipelines.app.jvm", "--out", str(archive), "--lock", lock],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0 and f"another process (pid {holder.pid}) is writing it" in r.stderr
        assert not archive.exists()
    finally:
        holder.kill()
        holder.wait()
    mine = FileLock(lock)
    assert mine.acquire(wait=False)
    mine.release()


@pytest.mark.spark
def test_an_archive_is_renamed_into_place_only_after_its_job_succeeded_and_the_launcher_maps_it(tmp_path):
    """Small jobs (no session: the launcher's and SparkSubmit's classes) keep it to seconds; the real job's
    archive is the one the tests' JVMs use (tests/conftest.py)."""
    archive = tmp_path / "cache" / "spark.jsa"
    with pytest.raises(jvm.JvmArchiveError, match="exited 3 and wrote no archive"):
        jvm.build_class_archive(archive, job="import sys\nsys.exit(3)\n")
    assert not archive.parent.exists() or not list(archive.parent.iterdir())  # nothing half-written left
    stale = archive.with_name("spark-of-an-old-java.jsa")  # an upgrade's leftover
    stale.write_bytes(b"x")
    os.utime(stale, (0, 0))
    assert jvm.build_class_archive(archive, job="import sys\nsys.exit(0)\n") == archive
    assert [p.name for p in archive.parent.iterdir()] == ["spark.jsa"]  # and the stale one removed
    # -Xshare:on: the JVM that spark-submit starts fails instead of running without it
    log = tmp_path / "classes.log"
    env = {
        **os.environ,
        "SPARK_SUBMIT_OPTS": f"-Xshare:on -XX:SharedArchiveFile={archive} -Xlog:class+load=info:file={log}",
    }
    env.pop("SPARK_CONF_DIR", None)
    r = subprocess.run(
        [str(jvm.spark_home() / "bin" / "spark-submit"), "--version"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]
    shared = [line for line in log.read_text().splitlines() if "source: shared objects file (top)" in line]
    assert len(shared) > 1000  # Spark's classes, from the archive (the JDK's own come from its base archive)
    assert any("org.apache.spark.deploy.SparkSubmit " in line for line in shared)


def test_ltr_jvm_archive_prints_the_option_and_leaves_an_archive_that_exists(tmp_path, monkeypatch, capsys):
    import json

    from pipelines.app.cli import main

    monkeypatch.setenv("LTR_JVM_CACHE", str(tmp_path / "cache"))
    archive = jvm.class_archive()
    assert archive is not None
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"an archive")
    assert main(["jvm-archive"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["archive"] == str(archive) and out["written"] is False and out["bytes"] == len(b"an archive")
    assert out["java_option"] == f"-XX:SharedArchiveFile={archive}"
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert main(["jvm-archive"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "ltr jvm-archive: error: no java found (JAVA_HOME, PATH): Spark needs Java 17+"
    )
