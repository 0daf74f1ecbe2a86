"""The parsers under random input (Hypothesis; the properties in :mod:`pipelines.testing.fuzz`): a few hundred
examples each here, the long run in ``benchmarks/bench_fuzz.py``. The database of failing examples is off: every run
draws afresh from its seed (``--hypothesis-seed``), and a failure prints its example."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings

from pipelines.testing import fuzz
from tests.helpers import ROOT, cli_env

CI = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.heavy  # (the parser's own tests run on every Python: tests/udfs/test_letor_parse.py)
@CI
@given(fuzz.letor_lines())
def test_letor_lines_are_rows_skipped_or_quarantined_with_their_line(lines):
    fuzz.check_letor_block(lines)


@pytest.mark.heavy  # (the parser's own tests run on every Python: tests/udfs/test_letor_parse.py)
@CI
@given(fuzz.letor_rows())
def test_a_letor_line_written_from_values_reads_back_as_those_values(row):
    fuzz.check_letor_roundtrip(row)


@pytest.mark.heavy  # (the path parser's own tests run on every Python: tests/plan/test_paths.py)
@settings(CI, max_examples=300)
@given(fuzz.path_texts())
def test_a_path_parses_and_round_trips_or_is_refused_in_one_line(text):
    fuzz.check_path(text)


@pytest.mark.heavy  # (the override walker's own tests run on every Python: tests/core/test_config.py)
@CI
@given(fuzz.overrides())
def test_set_overrides_load_or_are_refused_in_one_line(sets):
    fuzz.check_overrides(sets)


@pytest.mark.heavy  # (the config loader's own tests run on every Python: tests/core/test_config.py)
@settings(CI, max_examples=60)
@given(fuzz.config_files())
def test_config_files_load_or_are_refused_in_one_line(text):
    fuzz.check_config_file(text)


@pytest.mark.heavy  # (the plug-in checks' own tests run on every Python: tests/plugins/)
@settings(CI, max_examples=200)
@given(fuzz.plugin_sources())
def test_a_plugin_passes_its_checks_or_is_refused_in_one_line_naming_it(text):
    fuzz.check_plugin(text)


@pytest.mark.processes
def test_defects_the_fuzzing_found_are_one_line_errors_of_the_cli():
    """What the fuzz runs found, through ``ltr``'s own entry point: a YAML error in ``--set`` (was six lines), a
    self-referencing alias (was a RecursionError's traceback, exit 1), ``.nan`` and ``.inf`` settings (loaded),
    ``components`` not a mapping (an AttributeError's traceback), a key with a newline (two lines)."""
    for bad, says in [
        ("grid.strategies=[x", "value is not valid YAML: expected ',' or ']'"),
        ("components=&a {x: *a}", "refers to itself"),
        ("train.eta=.nan", "train.eta: expected a finite number, got nan"),
        ("report.risk_alphas=[.inf]", "report.risk_alphas[0]: expected a finite number, got inf"),
        ("components=x", "components: expected a mapping of component name -> settings, got 'x'"),
        ("0\n0=1", "a key is names of letters, digits"),
    ]:
        r = subprocess.run([sys.executable, "-m", "pipelines.app.cli", "plugins", "--set", bad], cwd=ROOT,
                           env=cli_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
        assert r.returncode == 2, (bad, r.stderr)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and says in lines[0] and "Traceback" not in r.stderr, (bad, r.stderr)
