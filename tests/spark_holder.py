"""The test suite's Spark session: one shared ``local[2]`` session, started again when its JVM dies.

Issue 30: in one CI run the session's JVM died in the middle of the suite and every later test that used
it failed with ``ConnectionRefusedError``; nothing said why. So:

* The JVM's own output (stdout and stderr: Spark's log, the Python workers' stderr, anything the JVM
  prints before it dies), its GC log, a crash file (``hs_err``) and a heap dump on OutOfMemoryError all
  go to :data:`LOG_DIR` (``$LTR_TEST_JVM_LOGS``, else ``<repo>/.test-logs``), one set per JVM.
  ``tests/conftest.py`` attaches the lines a failed test made the JVM write to its report, and
  ``.ci/run`` prints the folder's tails when the suite fails.
* The test log4j configuration (``tests/log4j2-tests.properties``) also logs why a JVM leaves:
  Spark's shutdown hooks (any ``System.exit`` or SIGTERM) and PySpark's gateway server leaving because
  its stdin (a pipe from this process) reached end of file.
* :meth:`SparkHolder.get` checks the session before each test that asks for one: when the JVM no longer
  answers (or a test stopped the shared session), it logs what it found (the JVM's exit status, whether
  this process still holds the JVM's stdin pipe) and starts a new session, so a dead JVM costs the test
  it died in, not the rest of the suite.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.app.jvm import with_archive
from pipelines.core.proctree import kill_tree
from pipelines.testing.processes import QUICK_JVM, ROOT

log = logging.getLogger(__name__)

LOG_DIR = Path(os.environ.get("LTR_TEST_JVM_LOGS") or ROOT / ".test-logs")
TEST_LOG4J = Path(__file__).resolve().parent / "log4j2-tests.properties"
MASTER = "local[2]"


def jvm_options(log_dir: Path, tag: str) -> str:
    """Driver JVM options that leave evidence in ``log_dir`` when the JVM dies (``tag`` names the JVM)."""
    return " ".join(
        [
            with_archive(QUICK_JVM),  # Spark's class archive, once it exists (pipelines.app.jvm)
            f"-Dlog4j2.configurationFile={TEST_LOG4J.as_uri()}",
            f"-XX:ErrorFile={log_dir}/hs_err-{tag}-pid%p.log",  # a crash of the JVM itself (signal, abort)
            "-XX:+HeapDumpOnOutOfMemoryError",
            f"-XX:HeapDumpPath={log_dir}",
            # every collection's heap before/after (a heap that fills over hundreds of stages shows here)
            f"-Xlog:gc,gc+heap+exit:file={log_dir}/gc-{tag}.log:uptime,level,tags",
        ]
    )


def _describe_status(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        return f"killed by signal {signal.Signals(-rc).name}"
    meaning = {
        0: "System.exit(0): PySpark's gateway leaves so when its stdin pipe closes",
        50: "SparkUncaughtExceptionHandler: an uncaught exception",
        52: "OutOfMemoryError",
        143: "SIGTERM, after its shutdown hooks",
        137: "SIGKILL",
    }
    return f"exit status {rc}" + (f" ({meaning[rc]})" if rc in meaning else "")


@dataclass
class SparkHolder:
    """The shared session; :meth:`get` returns a live one."""

    log_dir: Path = LOG_DIR
    session: object | None = None
    generation: int = 0
    #: one line per session found dead (what was found, which test came next)
    deaths: list[str] = field(default_factory=list)
    _stdin: tuple[int, int] | None = None  # (fd, inode) of the JVM's stdin pipe, this process's end

    @property
    def tag(self) -> str:
        """The current JVM's name in the log folder: ``jvm-N``, or ``gw0-jvm-N`` in pytest-xdist's worker gw0."""
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        return f"{worker}-jvm-{self.generation}" if worker else f"jvm-{self.generation}"

    @property
    def jvm_log(self) -> Path:
        return self.log_dir / f"{self.tag}.log"

    def get(self):
        """A live SparkSession: the current one, or a new one if the current one's JVM is gone or stopped."""
        if self.session is not None:
            why = self.dead_reason()
            if why is None:
                return self.session
            self.deaths.append(why)
            log.warning(
                "the shared Spark session is gone (%s); starting a new session (JVM log of the old one: %s)",
                why,
                self.jvm_log,
            )
            self._forget()
        self.session = self._start()
        return self.session

    def dead_reason(self) -> str | None:
        """None while the session answers; else what is wrong with it."""
        from pyspark import SparkContext

        gateway = SparkContext._gateway  # noqa: SLF001
        proc = getattr(gateway, "proc", None)
        if gateway is None or proc is None:
            return "no gateway"
        rc = proc.poll()
        if rc is not None:
            return f"its JVM (pid {proc.pid}) ended: {_describe_status(rc)}; {self._stdin_state()}"
        jsc = self.session.sparkContext._jsc  # noqa: SLF001 - None once SparkContext.stop() ran
        if jsc is None:
            return "a test stopped it"
        try:
            stopped = jsc.sc().isStopped()
        except Exception as e:  # noqa: BLE001 - py4j raises several kinds; any means "no answer"
            return (
                f"its JVM (pid {proc.pid}) is running but does not answer ({type(e).__name__}: {e}); "
                f"{self._stdin_state()}"
            )
        return "a test stopped it" if stopped else None

    def _stdin_state(self) -> str:
        """Whether this process still holds the write end of the JVM's stdin pipe (closing it ends the JVM)."""
        if self._stdin is None:
            return "stdin pipe unknown"
        fd, ino = self._stdin
        try:
            st = os.fstat(fd)
        except OSError:
            return f"this process no longer has fd {fd}, the JVM's stdin pipe: something closed it"
        if st.st_ino != ino or not stat.S_ISFIFO(st.st_mode):
            return f"fd {fd}, the JVM's stdin pipe, was closed and now is another file"
        return f"this process still holds the JVM's stdin pipe (fd {fd})"

    def _forget(self) -> None:
        """Drop PySpark's process-wide state of the old session; a JVM that is dead or does not answer is
        dropped too (a stopped session on a JVM that answers keeps its JVM: the next context runs there)."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
        from pyspark.sql.context import SQLContext

        gateway = SparkContext._gateway  # noqa: SLF001
        proc = getattr(gateway, "proc", None)
        keep_jvm = False
        if proc is not None and proc.poll() is None:
            try:  # a stopped (or stuck) session on a JVM that still runs: stop it, keep nothing of it
                self.session.stop()
                jsc = self.session.sparkContext._jsc  # noqa: SLF001
                keep_jvm = jsc is None or jsc.sc().isStopped()
            except Exception:  # noqa: BLE001 - the JVM does not answer: a new one below
                pass
            if not keep_jvm:
                kill_tree(proc.pid)  # the JVM and PySpark's daemon, which runs in a process group of its own
                proc.wait()
        if not keep_jvm:
            if gateway is not None:
                try:
                    gateway.shutdown()
                except Exception:  # noqa: BLE001
                    pass
            SparkContext._gateway = SparkContext._jvm = None  # noqa: SLF001
        SparkContext._active_spark_context = None  # noqa: SLF001
        SparkSession._instantiatedSession = SparkSession._activeSession = None  # noqa: SLF001
        SQLContext._instantiatedContext = None  # noqa: SLF001
        self.session = None

    def _start(self):
        from pyspark import SparkConf, SparkContext
        from pyspark.java_gateway import launch_gateway

        from pipelines.app.jvm import start_background_build
        from pipelines.core.config import SparkConfig
        from pipelines.core.session import build_session, external_properties, session_properties

        new_jvm = SparkContext._gateway is None  # noqa: SLF001
        if new_jvm:
            self.generation += 1
            # Spark's class archive, for the JVMs started later (SPARK_SUBMIT_OPTS, tests/conftest.py): written
            # once, by whichever test process gets here first, while the tests go on
            start_background_build()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cfg = SparkConfig(
            master=MASTER,
            shuffle_partitions=2,
            ui=False,
            driver_memory="2g",
            log_level="WARN",
            conf={"spark.task.maxFailures": "1", "spark.driver.extraJavaOptions": jvm_options(self.log_dir, self.tag)},
        )
        if new_jvm:  # launched here so that its output goes to a file
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            conf = SparkConf(loadDefaults=False).setMaster(MASTER).setAppName(cfg.app_name)
            conf.setAll(session_properties(cfg, MASTER, external_properties()).items())
            with open(self.jvm_log, "wb") as out:  # a new JVM: a new log (the folder may hold an older run's)
                gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": subprocess.STDOUT})
            SparkContext._ensure_initialized(gateway=gateway)  # noqa: SLF001
            fd = gateway.proc.stdin.fileno()
            self._stdin = (fd, os.fstat(fd).st_ino)
            log.info(
                "shared Spark session %d: JVM pid %d, its output in %s", self.generation, gateway.proc.pid, self.jvm_log
            )
        return build_session(cfg)

    def jvm_log_size(self) -> int:
        try:
            return self.jvm_log.stat().st_size
        except OSError:
            return 0

    def stop(self) -> None:
        if self.session is not None and self.dead_reason() is None:
            self.session.stop()
