"""``ltr pack``: the project's environment as one relocatable archive for ``spark-submit --archives``.

On a cluster the executors' Python workers import :mod:`pipelines` and :mod:`udfs`
(the UDFs and the training loop are pickled by reference) together with numpy,
pandas, pyarrow, xgboost, ... ``--py-files`` cannot ship those (it does not
deliver wheels), so the whole environment travels as an
archive that Spark unpacks in every executor's working directory::

    ltr pack --out ltr-env.tar.gz
    spark-submit --archives ltr-env.tar.gz#env --conf spark.pyspark.python=./env/bin/python ...

An editable install (``pip install -e .``, the developer's setup) cannot be packed:
its ``.pth`` file points at the source tree, which the executors do not have. So
:func:`pack` builds a fresh virtual environment in a temporary directory with the
same interpreter, installs the project from its source tree *non-editable* with
the lock file (``-c constraints.txt``), packs that environment and removes it.

The installer is uv when it is installed (``installer="auto"``; the ``test`` extra has it), else pip.
Both install the same locked versions from the same wheels, byte-compiled as pip does by default (so
that the executors' workers do not compile at import; ``compile_bytecode=False`` skips it). uv does not
read pip's configuration: ``PIP_FIND_LINKS``
and ``PIP_INDEX_URL`` are passed on as ``UV_FIND_LINKS`` and ``UV_DEFAULT_INDEX`` where those are unset.
uv is preferred for its speed (benchmarks/RESULTS.md, "CI's budget, again": the install times of both).

The archive holds no Python interpreter: like every virtual environment, its
``bin/python`` is a symbolic link to the base interpreter it was made with
(e.g. ``/usr/bin/python3.11``), and that interpreter must exist at the same path
on every executor (or at ``python_prefix``, when given). Executors also need
the same operating system and CPU architecture as the machine that packed it.

The packer is venv-pack2 (``import venv_pack``), a maintained fork of venv-pack,
the tool PySpark's documentation names for virtualenvs. venv-pack's last release
(0.2.0) is from 2018 and leaves pip's long-path script headers
(``#!/bin/sh`` + ``'''exec' /long/temp/path/bin/python``) pointing at the
temporary build directory; the fork rewrites those to run the archive's own
``bin/python``, and otherwise keeps venv-pack's API. Both install the same
``venv_pack`` module, so only one of them may be installed.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from pipelines.core.errors import LtrError, UserError
from pipelines.core.storage import rename_into_place

log = logging.getLogger(__name__)

#: Archive formats both venv-pack and Spark's ``--archives`` unpacking handle. Zip is left out: it
#: cannot store the symbolic link ``bin/python`` -> base interpreter as a link. A plain ``.tar`` is left out
#: too: Spark unpacks it with Hadoop's Java untar, which refuses that link (an absolute target outside the
#: directory): "expanding bin/python3.11 would create entry outside of .../env" (measured, Spark 4.3);
#: ``.tar.gz`` / ``.tgz`` go through the system's ``tar``, which keeps it.
FORMATS = {".tar.gz": "tar.gz", ".tgz": "tgz"}
#: Suffixes refused with the reason (a hint in the error).
_REFUSED = {
    ".tar": "Spark unpacks a plain .tar with Hadoop's Java untar, which refuses bin/python's link to the "
    "base interpreter"
}

#: Parts of a source tree never copied into the build: version control, virtual environments, build
#: outputs, tests and documentation, run outputs (work/, MLflow stores) and earlier archives.
SOURCE_IGNORE = (
    ".git",
    ".hg",
    ".venv",
    "venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    "work",
    "tests",
    "docs",
    "benchmarks",
    "shared",
    "mlruns",
    "mlartifacts",
    "spark-warehouse",
    "metastore_db",
    "*.db",
    "*.parquet",
    "*.tar.gz",
    "*.tgz",
    "*.tar",
    "*.zip",
)


class PackError(UserError):
    """A bad ``ltr pack`` argument (exit code 2): the message names the fix."""


class PackFailed(LtrError, RuntimeError):
    """Building the environment failed (pip could not install the project); the message has pip's output."""


@dataclass(frozen=True)
class PackResult:
    """What :func:`pack` wrote."""

    out: str  #: absolute path of the archive
    bytes: int  #: its size
    python: str  #: the base interpreter ``bin/python`` links to (must exist on every executor)
    packages: int  #: distributions installed in the packed environment
    installer: str  #: ``uv`` or ``pip``
    seconds: float  #: wall time of the whole pack (venv, install, archive)


def archive_format(out: str) -> str:
    """venv-pack's format name for the archive path ``out``; PackError for any other suffix."""
    for suffix, fmt in FORMATS.items():
        if out.endswith(suffix):
            return fmt
    why = next((f" ({r})" for s, r in _REFUSED.items() if out.endswith(s)), "")
    raise PackError(
        f"--out {out}: the archive name must end in {' or '.join(FORMATS)} "
        f"(formats spark-submit --archives unpacks with symbolic links kept){why}, e.g. ltr-env.tar.gz"
    )


def default_source() -> Path | None:
    """The source tree this module was imported from (the directory holding ``setup.py``), if any."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "setup.py").is_file() else None


def _check_args(
    out: str, source: Path | None, constraints: Path | None, python_prefix: str | None, compress_level: int
) -> tuple[Path, Path, Path, str]:
    fmt = archive_format(out)
    target = Path(out).expanduser().absolute()
    parent = target.parent
    if not parent.is_dir():
        raise PackError(f"--out {out}: directory {parent} does not exist; create it or choose another path")
    if target.is_dir():
        raise PackError(f"--out {out} is a directory; give the archive's file name, e.g. {target / 'ltr-env.tar.gz'}")
    try:  # a file created and removed: os.access says yes to root even on read-only or virtual file systems
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{target.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise PackError(f"--out {out}: cannot write in {parent} ({e.strerror}); choose another path") from None
    if source is None:
        source = default_source()
        if source is None:
            raise PackError(
                "ltr pack needs the project's source tree (the directory with setup.py), and this "
                "installation has none: pass --source DIR (a checkout of the project)"
            )
    source = Path(source).absolute()
    if not (source / "setup.py").is_file():
        raise PackError(f"--source {source}: no setup.py there; give the project's source tree (a checkout)")
    if constraints is None:
        constraints = source / "constraints.txt"
        if not constraints.is_file():
            raise PackError(
                f"no lock file {constraints}: the packed environment installs the tested versions "
                f"with pip's -c constraints.txt; pass --constraints FILE"
            )
    constraints = Path(constraints).absolute()
    if not constraints.is_file():
        raise PackError(
            f"--constraints {constraints}: no such file (the lock file, e.g. constraints.txt at the repository root)"
        )
    if python_prefix is not None and not os.path.isabs(python_prefix):
        raise PackError(
            f"--python-prefix {python_prefix}: must be an absolute path (the prefix of the executors' "
            f"interpreter, e.g. /usr for /usr/bin/python3)"
        )
    if not 0 <= compress_level <= 9:
        raise PackError(f"--compress-level must be in 0..9 (gzip level), got {compress_level}")
    return target, source, constraints, fmt


def _ignored(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in SOURCE_IGNORE)


def _git_files(source: Path) -> list[str] | None:
    """The files of ``source`` that git would carry (tracked, and untracked ones its ignore rules do not ignore),
    relative to ``source``; None where ``source`` is not a git work tree's top or git is not there."""
    try:
        top = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if Path(top).resolve() != source.resolve():
            return None
        out = subprocess.run(
            ["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [f for f in out.decode(errors="surrogateescape").split("\0") if f]


def _copy_source(source: Path, dest: Path) -> None:
    """Copy the source tree without the parts in :data:`SOURCE_IGNORE` nor virtual environments. In a git work tree,
    only what git would carry: the outputs a checkout piles up beside its source (benchmark runs, caches) are what
    its ignore rules name, and copying them cost most of a pack's time where they were large."""
    files = _git_files(source)
    if files is not None:
        for rel in files:
            parts = rel.split("/")
            src = source / rel
            if any(_ignored(p) for p in parts) or not (src.is_file() or src.is_symlink()):
                continue  # (a file git lists may be deleted in the work tree)
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)
        return

    def ignore(folder: str, names: list[str]) -> set[str]:
        """The names in ``folder`` that :func:`shutil.copytree` skips: :data:`SOURCE_IGNORE`, virtual environments."""
        skip = {n for n in names if _ignored(n)}
        return skip | {n for n in names if os.path.isfile(os.path.join(folder, n, "pyvenv.cfg"))}

    shutil.copytree(source, dest, ignore=ignore, symlinks=True)


#: ``installer`` values of :func:`pack`.
INSTALLERS = ("auto", "uv", "pip")


def find_uv() -> str | None:
    """The uv binary: the ``uv`` package's own (installed beside this interpreter), else ``uv`` on PATH."""
    try:
        import uv

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def choose_installer(installer: str) -> tuple[str, str | None]:
    """(``uv`` or ``pip``, the uv binary or None) for ``installer``; PackError for a bad or unavailable one."""
    if installer not in INSTALLERS:
        raise PackError(f"--installer {installer}: use one of {', '.join(INSTALLERS)}")
    uv = find_uv() if installer in ("auto", "uv") else None
    if installer == "uv" and uv is None:
        raise PackError("--installer uv: uv is not installed here (pip install uv, or use --installer pip)")
    return ("uv", uv) if uv is not None else ("pip", None)


def _install_command(uv: str | None, env_python: Path, lock: Path, build: Path | str, compile_: bool) -> list[str]:
    """The command installing the project from ``build`` non-editable into the environment, with the lock
    (byte-compiled where ``compile_``: pip's default, uv's ``--compile-bytecode``).

    uv copies, not hard-links, from its cache: linked, the environment's files share inodes with the cache, and so
    with venv-pack's own ``activate`` scripts where venv-pack was installed from the same cache; tarfile then
    stores ``bin/activate`` and two others as hard-link members (seen on this machine), which not every untar on
    an executor recreates (benchmarks/RESULTS.md has what linking saved)."""
    if uv is not None:
        return [uv, "pip", "install", "--python", str(env_python), "--no-progress", "--link-mode", "copy",
                *(["--compile-bytecode"] if compile_ else []), *UV_PYSPARK_BUILD,
                "-c", str(lock), str(build)]  # fmt: skip
    return [str(env_python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
            *([] if compile_ else ["--no-compile"]), "-c", str(lock), str(build)]  # fmt: skip


#: PySpark is published as a source distribution only, and uv builds its wheel again whenever it finds its cached
#: download stale: setuptools deflates hundreds of MB of jars that are already compressed. Stored
#: (``bdist_wheel --compression=stored``): a few seconds, a slightly larger wheel, the same files installed.
#: README's install command and .ci/run pass the same setting.
UV_PYSPARK_BUILD = ["--config-settings-package", "pyspark:--build-option=--compression=stored"]


def _uv_env() -> dict[str, str]:
    """This process's environment with pip's find-links and index passed on to uv (which reads neither)."""
    env = dict(os.environ)
    for pip_var, uv_var in (("PIP_FIND_LINKS", "UV_FIND_LINKS"), ("PIP_INDEX_URL", "UV_DEFAULT_INDEX")):
        if env.get(pip_var) and not env.get(uv_var):
            env[uv_var] = env[pip_var]
    return env


def _run(cmd: list[str], what: str, log_path: Path, env: dict[str, str] | None = None) -> None:
    with open(log_path, "ab") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False, env=env)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-30:]
        raise PackFailed(f"{what} failed (exit code {proc.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))


def pack(
    out: str,
    *,
    source: str | Path | None = None,
    constraints: str | Path | None = None,
    python: str | None = None,
    python_prefix: str | None = None,
    exclude: tuple[str, ...] = (),
    compress_level: int = 4,
    installer: str = "auto",
    compile_bytecode: bool = True,
    plugins: tuple[str, ...] = (),
) -> PackResult:
    """Build a fresh non-editable environment of the project and pack it into the archive ``out``.

    Parameters
    ----------
    out : str
        Archive to write (``.tar.gz``, ``.tgz`` or ``.tar``); its directory must exist. An existing
        file is replaced once the new archive is complete.
    source : path, optional
        The project's source tree (default: the checkout this module was imported from).
    constraints : path, optional
        The lock file passed to pip as ``-c`` (default: ``<source>/constraints.txt``).
    python : str, optional
        Interpreter to build the environment with (default: the running one, ``sys.executable``;
        ``venv`` links the new environment to its base interpreter).
    python_prefix : str, optional
        Prefix of the executors' interpreter when it lives elsewhere than here (``/usr`` for
        ``/usr/bin/python3.11``): ``bin/python`` and ``pyvenv.cfg`` are rewritten to point there.
    exclude : tuple of str
        venv-pack patterns of files left out, relative to the environment
        (e.g. ``lib/python3.*/site-packages/pyspark/jars/*``).
    compress_level : int
        gzip level 0-9 (venv-pack's default 4).
    installer : {"auto", "uv", "pip"}
        What installs the project and its locked dependencies: ``auto`` (default) takes uv where it
        is installed, else pip.
    compile_bytecode : bool
        Byte-compile the environment (default, as pip does), so that the executors' Python workers
        import without compiling. False: an archive built faster (about half a minute less here) and
        smaller; each executor then compiles what its workers import, once per application.
    plugins : tuple of str
        Packages of plug-ins (:mod:`pipelines.plugins`: entry points in the group ``ltr.plugins``) installed into
        the environment after the project, each a requirement or a path as pip takes it, with the same lock: what
        the executors and an Airflow worker load without ``--plugin``.

    Returns
    -------
    PackResult

    Raises
    ------
    PackError
        A bad argument (exit code 2 in ``ltr pack``).
    PackFailed
        pip or uv could not build the environment.
    """
    import venv_pack

    t0 = time.perf_counter()
    target, src, lock, fmt = _check_args(
        out, Path(source) if source else None, Path(constraints) if constraints else None, python_prefix, compress_level
    )
    used, uv = choose_installer(installer)
    python = python or sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="ltr-pack-"))
    partial = target.parent / f".{target.name}.{os.getpid()}.partial"
    try:
        env, build, pip_log = tmp / "env", tmp / "src", tmp / "pip.log"
        _copy_source(src, build)
        _run([python, "-m", "venv", str(env)], "creating a virtual environment", pip_log)
        env_python = env / "bin" / "python"
        base = os.path.realpath(env_python)
        log.info("pack: new virtual environment %s (base interpreter %s)", env, base)
        t1 = time.perf_counter()
        cmd = _install_command(uv, env_python, lock, build, compile_bytecode)
        _run(cmd, f"{used} install of the project", pip_log, _uv_env() if uv else None)
        for req in plugins:  # the plug-ins' packages: their entry points are what the executors load
            cmd = _install_command(uv, env_python, lock, Path(req) if Path(req).exists() else req, compile_bytecode)
            _run(cmd, f"{used} install of the plug-in package {req}", pip_log, _uv_env() if uv else None)
        packages = sum(1 for p in (env / "lib").glob("python*/site-packages/*.dist-info"))
        log.info(
            "pack: installed %s non-editable with %s and %s: %d distributions in %.0f s",
            src,
            used,
            lock.name,
            packages,
            time.perf_counter() - t1,
        )
        t1 = time.perf_counter()
        filters = [("exclude", p) for p in exclude]
        try:
            venv_pack.pack(
                prefix=str(env),
                output=str(partial),
                format=fmt,
                python_prefix=python_prefix,
                force=True,
                compress_level=compress_level,
                filters=filters or None,
            )
        except venv_pack.VenvPackException as e:
            raise PackFailed(f"venv-pack could not pack {env}: {e}") from e
        partial.chmod(0o644)  # mkstemp's 0600 would keep other users (YARN, a shared cluster) from reading it
        rename_into_place(pafs.LocalFileSystem(), str(partial), str(target))  # pipelines.core.storage's one rename
        size = target.stat().st_size
        linked = os.path.join(python_prefix, "bin", os.path.basename(base)) if python_prefix else base
        log.info(
            "pack: wrote %s (%.0f MiB) in %.0f s; its bin/python links to %s, which every executor needs at that path",
            target,
            size / 2**20,
            time.perf_counter() - t1,
            linked,
        )
        return PackResult(
            out=str(target),
            bytes=size,
            python=linked,
            packages=packages,
            installer=used,
            seconds=time.perf_counter() - t0,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if partial.exists():
            partial.unlink()
