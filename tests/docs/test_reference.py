"""The generated reference pages (pipelines.app.reference): every CLI option and config key has a description, the
pages hold every option and key, and the columns computed from the code say what the code does."""

from __future__ import annotations

import argparse

import yaml

from pipelines.app import reference
from pipelines.core.config import conf_dir


def test_every_option_config_key_and_component_has_a_description():
    assert reference.undocumented() == []
    names = {c.name for c in reference.components()}
    assert {"lambdamart", "stochastic_rank", "xgb_lambdamart", "n_rel", "root_n"} <= names
    settings = {c.name: c.settings for c in reference.components()}
    assert settings["stochastic_rank"]["estimator"] == "ccs"  # components.stochastic_rank.estimator


def test_a_missing_description_is_found():
    """The check can fail: an option without help and a field declared without a description are both found."""
    parser = argparse.ArgumentParser(prog="ltr")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("x", help="a command")
    p.add_argument("--documented", help="it says what it is")
    p.add_argument("--bare")
    assert [o.flags for o in reference.options(parser) if not o.help] == ["--bare"]

    from dataclasses import dataclass

    from pipelines.core.config import declared, setting

    @dataclass(frozen=True)
    class Section:
        a: int = setting(1, "described")
        b: int = 2  # a comment is not a description

    assert {name: s.doc for name, s in declared(Section).items()} == {"a": "described", "b": ""}


def test_the_config_page_holds_every_key_of_default_yaml():
    """Every key of conf/default.yaml (which a test keeps equal to the dataclasses) is a row of the page, with its
    default as the YAML file writes it."""
    page = reference.config_page()
    doc = yaml.safe_load((conf_dir() / "default.yaml").read_text())
    rows = {k.path: k for k in reference.config_keys()}
    flat = {
        f"{section}.{name}" if isinstance(value, dict) and section not in rows else section: v
        for section, value in doc.items()
        for name, v in (value.items() if isinstance(value, dict) and section not in rows else [(section, value)])
    }
    for path, default in flat.items():
        assert f"| `{path}` |" in page, path
        assert rows[path].default == default, path
    assert {"work_dir", "dataset", "spark.conf", "components"} <= rows.keys()
    assert rows.keys() == flat.keys()


def test_the_checks_and_keys_columns_follow_the_code():
    """The checks are what each field declares (bounds, choices, what its section's check() checks); the keyed
    column is what the keys do: a tree setting is in the nodes' and the study's keys, a worker count or a retry in
    none, the report's settings in none, a grid setting in the study's (not the nodes': a new switch point reuses
    every node it shares)."""
    rows = {k.path: k for k in reference.config_keys()}
    assert "one of auto, worker, spark" in rows["train.read"].checks
    assert any("(0, 1]" in c for c in rows["curriculum.fraction"].checks)
    assert any("strictly between 0" in c for c in rows["grid.switch_points"].checks)
    assert rows["train.eta"].keyed == ("study", "trees")
    assert rows["metric.gain"].keyed == ("study", "trees")
    for path in ("train.workers", "train.nthread", "train.job_retries", "train.lease_ttl", "grid.data", "report.seed"):
        assert rows[path].keyed == (), path
    assert rows["grid.switch_points"].keyed == ("study",)
    assert rows["generate.queries"].keyed == ("data",) and rows["generate.workers"].keyed == ()


def test_the_cli_page_holds_every_command_and_option():
    page = reference.cli_page()
    from pipelines.app.cli import build_parser

    for o in reference.options(build_parser()):
        assert f"## ltr {o.command}" in page
        assert f"`{o.flags}" in page, (o.command, o.flags)
    assert "sets train.eta" in page  # a flag's config key, from pipelines.app.flags


def test_the_pages_are_written_only_when_they_change(tmp_path):
    paths = reference.write_pages(tmp_path)
    assert sorted(p.name for p in paths) == ["cli.md", "components.md", "config.md", "report-json.md"]
    mtimes = [p.stat().st_mtime_ns for p in paths]
    reference.write_pages(tmp_path)
    assert [p.stat().st_mtime_ns for p in paths] == mtimes


def test_default_yaml_is_written_from_the_typed_config():
    """conf/default.yaml is the typed config written out, each key under its description: one source for both (to
    change a default or a description, edit its declaration in pipelines/core/config/schema.py, then
    `python -m pipelines.app.reference --default-yaml conf/default.yaml`)."""
    assert (conf_dir() / "default.yaml").read_text() == reference.default_yaml()


def test_the_committed_reference_pages_are_up_to_date():
    """docs/reference/{cli,config,components,report-json}.md are committed (readable without a build, and README
    links them) and rewritten by every build (docs/conf.py); this fails when the code changed and they were not
    written again: `python -m pipelines.app.reference --pages docs/reference`."""
    from pipelines.testing.processes import ROOT

    for name, page in reference.PAGES.items():
        assert (ROOT / "docs" / "reference" / name).read_text() == page(), name
