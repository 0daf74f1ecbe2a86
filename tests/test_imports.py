"""Every module of ``pipelines`` and ``udfs`` imports (so compiles) on this Python: .ci/run runs the fast tests on the
other supported Pythons, and a module no fast test reaches would otherwise go unchecked there."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

import pytest

import pipelines
import udfs

#: module -> the optional extra it needs (skipped, saying so, without it)
NEEDS = {"pipelines.app.airflow": "airflow"}


def _modules() -> list[str]:
    names = []
    for package in (pipelines, udfs):
        names += [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return sorted(names)


def test_the_walk_finds_the_packages_modules():
    assert len(_modules()) >= 40


@pytest.mark.parametrize("name", _modules())
def test_module_imports(name):
    extra = NEEDS.get(name)
    if extra is not None and importlib.util.find_spec(extra) is None:
        pytest.skip(f"needs the [{extra}] extra")
    importlib.import_module(name)
