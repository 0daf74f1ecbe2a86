"""One error model (:mod:`pipelines.core.errors`): a base with an exit code, one registry of the errors that cross
from a Spark task to the driver, ``ltr`` catching the base once."""

from __future__ import annotations

import ast
import importlib
import pathlib
import pkgutil

import pytest

import pipelines
from pipelines.core.errors import CROSSES_TASKS, BusyError, LtrError, UserError, relay


def _exception_classes() -> dict[str, type]:
    """Every class defined in a module of ``pipelines`` that derives from BaseException."""
    out: dict[str, type] = {}
    for info in pkgutil.walk_packages(pipelines.__path__, "pipelines."):
        if info.name.startswith("pipelines.testing"):
            continue
        try:
            mod = importlib.import_module(info.name)
        except ImportError:  # the Airflow operator without the [airflow] extra: the source check below covers it
            continue
        for name, obj in vars(mod).items():
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                out[f"{info.name}.{name}"] = obj
    return out


#: Not errors: what a signal raises in the main thread, as KeyboardInterrupt is (a BaseException, so that no
#: ``except Exception`` on the way up takes it for an error); ``ltr`` gives it an exit code of its own.
SIGNALS = {"pipelines.app.stop.Stopped": 143}


def test_every_exception_of_the_package_derives_from_the_base():
    classes = _exception_classes()
    assert len(classes) >= 20  # the walk found them (24 before the error model)
    stray = sorted(name for name, cls in classes.items() if not issubclass(cls, LtrError) and name not in SIGNALS)
    assert stray == []
    for name in SIGNALS:
        assert not issubclass(classes[name], Exception), name


def test_no_module_defines_an_exception_outside_the_model_by_source():
    """The same by source, so a class in a module that fails to import is not missed."""
    root = pipelines.__path__[0]

    bases_ok = {"LtrError", "UserError", "BusyError", "Exception"}
    found = []
    for path in pathlib.Path(root).rglob("*.py"):
        if "testing" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id in {"ValueError", "RuntimeError", "LookupError", "Exception"}
                for b in node.bases
            ):
                names = {b.id for b in node.bases if isinstance(b, ast.Name)}
                if not names & (bases_ok - {"Exception"}) and not (path.name == "errors.py"):
                    found.append(f"{path.name}:{node.name}")
    assert found == []


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        ("pipelines.core.config.ConfigError", 2),
        ("pipelines.data.dataset.DatasetError", 2),
        ("pipelines.app.cli.UsageError", 2),
        ("pipelines.kernel.cuts.CutsError", 2),
        ("pipelines.plugins.loading.PluginError", 2),
        ("pipelines.execution.barrier_job.SplitQueryError", 2),
        ("pipelines.kernel.matrices.DataError", 2),
        ("pipelines.store.lease.LeaseHeld", 75),
        ("pipelines.store.lease.LeaseLost", 75),
        ("pipelines.execution.executor.NodeFailed", 1),
        ("pipelines.store.checkpoints.CheckpointError", 1),
    ],
)
def test_exit_codes(cls, code):
    mod, name = cls.rsplit(".", 1)
    assert getattr(importlib.import_module(mod), name).exit_code == code


def test_the_registry_is_the_one_list_that_crosses_tasks():
    importlib.import_module("pipelines.execution.barrier_job")
    importlib.import_module("pipelines.store.lease")
    importlib.import_module("pipelines.plugins.loading")
    assert set(CROSSES_TASKS) == {
        "DatasetError",
        "DataError",
        "LeaseLost",
        "PluginError",
        "SplitQueryError",
        "TrainError",
    }
    assert all(issubclass(c, LtrError) for c in CROSSES_TASKS.values())


def test_relay_makes_the_task_error_again_from_its_first_line():
    from pipelines.kernel.matrices import DataError
    from pipelines.store.lease import LeaseLost

    wrapped = RuntimeError(
        "An exception was thrown from the Python worker.\nTraceback (most recent call last):\n"
        '  File "x.py", line 1\npipelines.kernel.matrices.DataError: worker 1 got no training query\nmore text'
    )
    got = relay(wrapped)
    assert type(got) is DataError and str(got) == "worker 1 got no training query"
    lost = relay(RuntimeError("boom LeaseLost: lost the lease of node abc: its lease file is gone\n..."))
    assert type(lost) is LeaseLost and str(lost).startswith("lost the lease of node abc")
    assert relay(RuntimeError("ValueError: something else")) is None
    assert relay(DataError("already ours")) is None


def test_user_and_busy_errors_keep_their_builtin_bases():
    """Code that catches ValueError / RuntimeError keeps working."""
    assert issubclass(UserError, ValueError) and issubclass(BusyError, RuntimeError)


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (UserError("bad value x in a.yaml"), 2),
        (BusyError("node k is being written by another process"), 75),
        (LtrError("node failed"), 1),
    ],
)
def test_ltr_main_catches_the_base_once(monkeypatch, capsys, tmp_path, err, code):
    from pipelines.app import cli

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the trace of an exit-1 error is written

    def boom(args):
        raise err

    monkeypatch.setattr(cli, "cmd_report", boom)  # build_parser reads the module's name when main calls it
    assert cli.main(["report"]) == code
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("ltr report: error: ") and str(err) in line
    assert ("full trace:" in line) == (code == 1)
