"""A production-shaped deployment on loopback, for the deployment test and its benchmark.

PostgreSQL (the machine's own binaries, a throw-away cluster) is the database of Airflow and of an
``mlflow server`` (``--serve-artifacts``); Airflow 3 runs as its separate services (api-server, scheduler,
dag-processor) with the LocalExecutor, the ``ltr_study`` DAG file copied into its own dags folder. Every
process is started here and stopped by :meth:`Deployment.stop` (whole process trees: PySpark's workers
live in process groups of their own), also when a test fails.

Closed as README's production recipe is (docs/tutorials/airflow.md): PostgreSQL asks every role for its
password (scram-sha-256), Airflow and MLflow each have a role and a database of their own; the MLflow server
runs its authentication app (``--app-name basic-auth``: an admin, and the user ``ltr`` the study logs in as);
no password is on a command line: the database URIs reach MLflow through ``MLFLOW_BACKEND_STORE_URI`` and
Airflow through ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD`` (a file only the owner reads), the study's
credentials through the Airflow connection ``mlflow_default`` (``AIRFLOW_CONN_MLFLOW_DEFAULT``).

``tests/scenarios/test_deploy.py`` and ``benchmarks/bench_deploy.py`` use it.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pipelines.app.jvm import with_archive
from pipelines.core.proctree import kill_tree, tree_pids
from pipelines.testing.processes import QUICK_JVM, ROOT, free_port

REPO = ROOT
PG_BIN_DIRS = ["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"]


def pg_bin() -> Path | None:
    """The folder of PostgreSQL's server binaries (``initdb``, ``postgres``), or None."""
    for d in [os.environ.get("LTR_PG_BIN", ""), *PG_BIN_DIRS]:
        if d and (Path(d) / "initdb").is_file() and (Path(d) / "postgres").is_file():
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def missing() -> str:
    """Why a deployment cannot be started here ('' when it can)."""
    if pg_bin() is None:
        return "PostgreSQL's server binaries (initdb, postgres) are not installed (Debian: postgresql-15)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL refuses to run as root"
    try:
        import asyncpg  # noqa: F401
        import psycopg2  # noqa: F401
    except ImportError as e:
        return f"the [deploy] extra is not installed ({e})"
    if shutil.which("airflow", path=os.path.dirname(sys.executable)) is None:
        return "Airflow is not installed (the [airflow] extra)"
    return ""


class Deployment:
    """PostgreSQL + ``mlflow server`` + Airflow (api-server, scheduler, dag-processor, LocalExecutor).

    ``parallelism``: Airflow's ``core.parallelism`` (task slots of the LocalExecutor); ``env``: more
    environment for every Airflow process (e.g. ``LTR_TRAINING_SLOTS``) and for the MLflow server (e.g.
    ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``: without it the server starts 8 job-runner processes that idle)."""

    def __init__(self, parallelism: int = 3, env: dict[str, str] | None = None, root: str | None = None) -> None:
        # world-readable: the postgres user (when we are root) must reach its data folder
        self.root = Path(root or tempfile.mkdtemp(prefix="ltr-deploy-", dir="/tmp"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.pg_port, self.mlflow_port, self.api_port = free_port(), free_port(), free_port()
        self.venv_bin = os.path.dirname(sys.executable)
        self.parallelism = parallelism
        self.extra_env = dict(env or {})
        self.pg_data = self.root / "pg"
        self.airflow_home = self.root / "airflow"
        self.dags = self.root / "dags"
        self.artifacts = self.root / "mlartifacts"
        self.secrets = self.root / "secrets"  # the owner's only: what a secrets manager would hold
        # passwords of this deployment: PostgreSQL's superuser and roles, MLflow's admin and the study's user
        # (at least 12 characters: MLflow's rule), never on a command line
        self.passwords = {name: secrets.token_urlsafe(18) for name in ("postgres", "airflow", "mlflow", "admin", "ltr")}
        self.study_user = "ltr"

    # ---------------------------------------------------------------- services
    @property
    def mlflow_uri(self) -> str:
        """The tracking server's address (no credentials: they come from the environment or a connection)."""
        return f"http://127.0.0.1:{self.mlflow_port}"

    def db_url(self, db: str, driver: str = "") -> str:
        """The database ``db`` as its own role (``postgres``: the superuser), password included: for files and
        environments only."""
        return f"postgresql{'+' + driver if driver else ''}://{db}:{self.passwords[db]}@127.0.0.1:{self.pg_port}/" + (
            "postgres" if db == "postgres" else db
        )

    def credentials(self, user: str = "admin", password: str | None = None) -> dict[str, str]:
        """The environment MLflow's client reads a tracking server's credentials from (default: the admin's)."""
        return {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password or self.passwords[user]}

    def secret_file(self, name: str, text: str) -> Path:
        """``text`` in a file of :attr:`secrets` that only its owner reads (no trailing newline: Airflow's
        ``_CMD`` options take a command's output as it is)."""
        self.secrets.mkdir(mode=0o700, exist_ok=True)
        p = self.secrets / name
        p.touch(mode=0o600)
        p.write_text(text)
        return p

    def _as_postgres(self, cmd: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = self.root / f"{name}.log"
        self.logs[name] = log
        with open(log, "ab") as out:
            p = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env or os.environ.copy(),
                cwd=self.root,
                start_new_session=True,
            )
        self.procs[name] = p
        return p

    def _wait(self, what: str, ok, timeout: float, proc: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            name = proc or ""
            p = self.procs.get(name)
            if p is not None and p.poll() is not None:
                raise RuntimeError(
                    f"{proc} exited with code {p.returncode} while waiting for {what}; its log:\n" + self.tail(name)
                )
            time.sleep(0.3)
        raise TimeoutError(
            f"{what}: not ready after {timeout:.0f} s" + (f"; {proc} log:\n{self.tail(proc)}" if proc else "")
        )

    def tail(self, name: str, n: int = 40) -> str:
        try:
            return "\n".join(self.logs[name].read_text(errors="replace").splitlines()[-n:])
        except (KeyError, OSError):
            return "(no log)"

    def start_postgres(self) -> None:
        b = pg_bin()
        if b is None:
            raise RuntimeError(missing())
        self.pg_data.mkdir()
        sock = self.root / "pgsock"
        sock.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.pg_data, "postgres", "postgres")
            shutil.chown(sock, "postgres", "postgres")
        pwfile = self.pg_data.parent / "pg-pwfile"  # initdb reads the superuser's password from it, then it goes
        pwfile.touch(mode=0o600)
        pwfile.write_text(self.passwords["postgres"])
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        try:
            subprocess.run(
                self._as_postgres(
                    [
                        str(b / "initdb"),
                        "-D",
                        str(self.pg_data),
                        "-U",
                        "postgres",
                        "-A",
                        "scram-sha-256",
                        f"--pwfile={pwfile}",
                        "-E",
                        "UTF8",
                        "--no-sync",
                    ]  # fmt: skip
                ),
                check=True,
                capture_output=True,
            )
        finally:
            pwfile.unlink()
        self._spawn(
            "postgres",
            self._as_postgres(
                [
                    str(b / "postgres"),
                    "-D",
                    str(self.pg_data),
                    "-p",
                    str(self.pg_port),
                    "-k",
                    str(sock),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=300",
                ]
            ),
        )

        def ready() -> bool:
            return (
                subprocess.run(
                    [str(b / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.pg_port)], capture_output=True
                ).returncode
                == 0
            )

        self._wait("PostgreSQL", ready, 60, "postgres")
        import psycopg2

        con = psycopg2.connect(self.db_url("postgres"))
        con.autocommit = True
        with con.cursor() as cur:
            for db in ("airflow", "mlflow"):  # a role and a database of its own each
                cur.execute(f"CREATE ROLE {db} LOGIN PASSWORD %s", (self.passwords[db],))
                cur.execute(f"CREATE DATABASE {db} OWNER {db}")
        con.close()

    def start_mlflow(self) -> None:
        """``mlflow server`` on PostgreSQL with its authentication app, not waited for (:meth:`wait_mlflow`): its
        database URI, admin password and session key from the environment; users' permissions in a SQLite file
        of :attr:`secrets` (nobody but its user sees another's experiments)."""
        self.artifacts.mkdir(exist_ok=True)
        ini = self.secret_file(
            "basic_auth.ini",
            "[mlflow]\ndefault_permission = NO_PERMISSIONS\n"
            f"database_uri = sqlite:///{self.secrets / 'basic_auth.db'}\nadmin_username = admin\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            # a checked (user, password) is trusted for 60 s in each server worker: without it every request
            # hashes the password again (werkzeug's scrypt): most of the server's CPU under the DAG's tasks
            # (benchmarks/RESULTS.md, "The MLflow server's password checks")
            "auth_cache_ttl_seconds = 60\n",
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
        env.update(
            MLFLOW_BACKEND_STORE_URI=self.db_url("mlflow"),
            MLFLOW_AUTH_CONFIG_PATH=str(ini),
            MLFLOW_AUTH_ADMIN_USERNAME="admin",
            MLFLOW_AUTH_ADMIN_PASSWORD=self.passwords["admin"],
            MLFLOW_FLASK_SERVER_SECRET_KEY=secrets.token_hex(24),
        )
        self._spawn(
            "mlflow",
            [
                os.path.join(self.venv_bin, "mlflow"),
                "server",
                "--app-name",
                "basic-auth",
                "--serve-artifacts",
                "--artifacts-destination",
                str(self.artifacts),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.mlflow_port),
                "--workers",
                "2",
            ],
            {**env, **self.extra_env},  # the server's job runners run our code too: the same environment
        )

    def wait_mlflow(self) -> None:
        """Until the MLflow server answers its health check (it migrates its database first)."""
        import urllib.request

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.mlflow_uri}/health", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        self._wait("mlflow server", ready, 120, "mlflow")
        self.mlflow_api("users/create", {"username": self.study_user, "password": self.passwords[self.study_user]})

    def mlflow_api(self, endpoint: str, body: dict[str, Any] | None = None, auth: tuple[str, str] | None = None) -> int:
        """POST (with ``body``; else GET) ``/api/2.0/mlflow/<endpoint>`` as ``auth`` (default: the admin; ``("", "")``:
        no credentials); the HTTP status."""
        user, pw = auth if auth is not None else ("admin", self.passwords["admin"])
        req = urllib.request.Request(
            f"{self.mlflow_uri}/api/2.0/mlflow/{endpoint}",
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        if user:
            req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            if body is not None and user and e.code != 401:
                raise RuntimeError(f"{endpoint}: {e.code} {e.read()[:300]!r}") from None
            return int(e.code)

    def mlflow_connection(self, password: str | None = None) -> str:
        """An Airflow connection (JSON) of the tracking server as the study's user (``password``: another one)."""
        pw = password or self.passwords[self.study_user]
        conn = {"conn_type": "http", "host": "127.0.0.1", "port": self.mlflow_port, "login": self.study_user}
        return json.dumps({**conn, "password": pw})

    def airflow_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}  # the connection's only
        conn = self.secrets / "airflow_db"
        if not conn.exists():
            self.secret_file("airflow_db", self.db_url("airflow", "psycopg2"))
        env.update(
            {
                "AIRFLOW_HOME": str(self.airflow_home),
                # from a file only this user reads (a secrets manager's command in production), not the environment
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": f"cat {conn}",
                "AIRFLOW_CONN_MLFLOW_DEFAULT": self.mlflow_connection(),
                "AIRFLOW_CONN_MLFLOW_WRONG": self.mlflow_connection(password="not-" + self.passwords["ltr"][::-1]),
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
                "AIRFLOW__API__PORT": str(self.api_port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API_AUTH__JWT_SECRET": "ltr-deploy-test-secret-0123456789abcdef",
                "AIRFLOW__API__SECRET_KEY": "ltr-deploy-test-secret-key",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
                "PATH": self.venv_bin + os.pathsep + env.get("PATH", ""),
                "SPARK_SUBMIT_OPTS": with_archive(QUICK_JVM),  # the jobs' driver JVMs
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def airflow(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [os.path.join(self.venv_bin, "airflow"), *args],
            env=self.airflow_env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and r.returncode != 0:
            raise RuntimeError(
                f"airflow {' '.join(args)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            )
        return r

    def start_airflow(self) -> None:
        self.dags.mkdir(exist_ok=True)
        # the DAG file alone, as a user copies it into Airflow's dags folder: it finds the jobs in the package
        shutil.copy(REPO / "jobs" / "ltr_study_dag.py", self.dags / "ltr_study_dag.py")
        self.airflow("db", "migrate")
        env = self.airflow_env()
        bin_ = os.path.join(self.venv_bin, "airflow")
        self._spawn("api-server", [bin_, "api-server", "--port", str(self.api_port), "--workers", "1"], env)
        self._spawn("dag-processor", [bin_, "dag-processor"], env)
        self._spawn("scheduler", [bin_, "scheduler"], env)
        self._wait(
            "the ltr_study DAG parsed",
            lambda: bool(self.query("SELECT 1 FROM dag WHERE dag_id = 'ltr_study' AND NOT is_paused")),
            180,
            "dag-processor",
        )

        import urllib.request

        def api_ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/api/v2/monitor/health", timeout=2):
                    return True
            except OSError:
                return False

        self._wait("api-server", api_ready, 120, "api-server")

    def start(self) -> Deployment:
        """PostgreSQL, then the MLflow server and Airflow side by side: the server migrates its database while
        ``airflow db migrate`` migrates Airflow's."""
        self.start_postgres()
        self.start_mlflow()
        self.start_airflow()
        self.wait_mlflow()
        return self

    # ---------------------------------------------------------------- the study
    def query(self, sql: str, *args: Any) -> list[tuple]:
        import psycopg2

        con = psycopg2.connect(self.db_url("airflow"))
        try:
            with con.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else []
        finally:
            con.close()

    def trigger(self, run_id: str, conf: dict[str, Any]) -> None:
        self.airflow("dags", "trigger", "ltr_study", "--run-id", run_id, "--conf", json.dumps(conf))

    def run_state(self, run_id: str) -> str:
        rows = self.query("SELECT state FROM dag_run WHERE dag_id = 'ltr_study' AND run_id = %s", run_id)
        return str(rows[0][0]) if rows else ""

    def wait_run(self, run_id: str, timeout: float, on_poll=None) -> str:
        """Wait for the DAG run to end (success or failed); ``on_poll()`` is called between polls."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run_state(run_id)
            if state in ("success", "failed"):
                return state
            for name in ("scheduler", "api-server", "dag-processor"):
                if self.procs[name].poll() is not None:
                    raise RuntimeError(f"{name} exited with code {self.procs[name].returncode}:\n{self.tail(name)}")
            if on_poll is not None:
                on_poll()
            time.sleep(0.1 if on_poll is not None else 1.0)
        raise TimeoutError(
            f"DAG run {run_id} still {self.run_state(run_id)!r} after {timeout:.0f} s:\n"
            + "\n".join(map(str, self.task_instances(run_id)))
        )

    def task_instances(self, run_id: str) -> list[dict[str, Any]]:
        cols = ["task_id", "map_index", "state", "try_number", "start_date", "end_date", "rendered_map_index"]
        rows = self.query(
            f"SELECT {', '.join(cols)} FROM task_instance WHERE dag_id = 'ltr_study' AND run_id = %s "
            "ORDER BY task_id, map_index",
            run_id,
        )
        return [dict(zip(cols, r)) for r in rows]

    def timeline(self, run_id: str) -> list[dict[str, Any]]:
        """Every try of every task of the DAG run, in the order they started: ``task`` (with ``[map index]``),
        ``try``, ``state``, and ``queued``, ``start``, ``end`` in seconds from the run's start (None where
        Airflow has none, e.g. a skipped task's queue time). Earlier tries come from Airflow's
        ``task_instance_history``: where a study's time goes, a retried try included."""
        cols = "task_id, map_index, try_number, state, queued_dttm, start_date, end_date"
        where = "WHERE dag_id = 'ltr_study' AND run_id = %s"
        rows = self.query(f"SELECT {cols} FROM task_instance {where}", run_id)
        rows += self.query(f"SELECT {cols} FROM task_instance_history {where}", run_id)
        started = self.query(f"SELECT start_date FROM dag_run {where}", run_id)
        if not started or started[0][0] is None:
            return []
        t0 = started[0][0]

        def at(t: Any) -> float | None:
            return None if t is None else round((t - t0).total_seconds(), 1)

        out = [
            {
                "task": task + (f"[{m}]" if m >= 0 else ""),
                "try": n,
                "state": str(state),
                "queued": at(q),
                "start": at(s),
                "end": at(e),
            }
            for task, m, n, state, q, s, e in rows
        ]
        return sorted(out, key=lambda r: (r["start"] is None, r["start"] or 0.0, r["task"]))

    def task_log_dir(self, run_id: str, task_id: str) -> Path:
        """The folder of a task's Airflow logs in the DAG run (``map_index=M/attempt=N.log`` below it when mapped)."""
        return self.airflow_home / "logs" / "dag_id=ltr_study" / f"run_id={run_id}" / f"task_id={task_id}"

    def task_log(self, run_id: str, task_id: str, map_index: int, attempt: int) -> str:
        base = self.task_log_dir(run_id, task_id)
        if map_index >= 0:
            base = base / f"map_index={map_index}"
        path = base / f"attempt={attempt}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def states(self, run_id: str) -> dict[str, str]:
        """``task[map index]`` -> ``state (try n)``: what an assertion message shows."""
        return {
            t["task_id"]
            + (f"[{t['map_index']}]" if t["map_index"] >= 0 else ""): f"{t['state']} (try {t['try_number']})"
            for t in self.task_instances(run_id)
        }

    def service_pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.poll() is None]

    # ---------------------------------------------------------------- teardown
    def stop(self) -> None:
        """Stop every process started here (whole trees: the LocalExecutor's task processes and their
        spark-submits included), PostgreSQL last; then remove the folder."""
        for name in ("scheduler", "dag-processor", "api-server", "mlflow"):
            p = self.procs.get(name)
            if p is not None:
                kill_tree(p.pid)
        for name in ("scheduler", "dag-processor", "api-server", "mlflow"):
            p = self.procs.get(name)
            if p is not None:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
        # orphans of killed task processes (spark-submit JVMs, Python drivers) still pointing into our folder
        import psutil

        pg = self.procs.get("postgres")
        keep = set(tree_pids(pg.pid)) if pg is not None else set()
        for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
            try:
                text = " ".join(p.info["cmdline"] or [])
                mine = str(self.root) in text or str(self.root) == (p.info["cwd"] or "")
                if mine and p.pid not in keep and p.pid != os.getpid():
                    kill_tree(p.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        b = pg_bin()
        if pg is not None and pg.poll() is None and b is not None:  # immediate shutdown of the postmaster and backends
            subprocess.run(
                self._as_postgres([str(b / "pg_ctl"), "stop", "-D", str(self.pg_data), "-m", "immediate", "-w"]),
                capture_output=True,
                timeout=60,
            )
            try:
                pg.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_tree(pg.pid)
        if not os.environ.get("LTR_DEPLOY_KEEP"):  # set it to keep the logs of a failed run
            shutil.rmtree(self.root, ignore_errors=True)
