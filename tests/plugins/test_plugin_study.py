"""A tiny study whose paths, curricula and pacing are plug-ins, through training on Spark workers, MLflow, an
edit of one plug-in (only its nodes train again) and the report."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from pipelines.app.cli import main
from pipelines.app.grid import run_grid
from pipelines.core.config import ReportConfig
from pipelines.plugins.run_config import load_run_config
from pipelines.report import build_report
from pipelines.tracking.runs import TAG_PARENT, Tracker
from tests.helpers import set_args, tiny_study
from tests.plugins.test_plugins import EXAMPLE_FILES, EXAMPLES, _unload_all


@pytest.fixture(scope="module")
def plugin_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("plugins")
    for name in EXAMPLE_FILES:
        shutil.copy(EXAMPLES / name, d / name)
    yield [d / n for n in EXAMPLE_FILES]
    _unload_all()


def _overrides(work) -> list[str]:
    return tiny_study(
        f"work_dir={work}",
        "grid.experiment=plugins",
        "grid.strategies=[q_len]",
        "grid.extra_paths={listnet: 'mse:2,listnet:2', powered: 'lambdamart@pw.*:3,lambdamart:1'}",
        "grid.extra_curricula={pw: {strategy: q_nrel, pacing: power, stages: 3, delta: 0.3}}",
        "components.power.power=3",
    )


def _cfg(work, files):
    return load_run_config(None, _overrides(work), [str(f) for f in files])


def _curriculum(work, name: str) -> dict:
    """The summary of fold 1's curriculum ``name`` (wherever the layout keeps it)."""
    found = [p for p in work.rglob("_curriculum.json") if json.loads(p.read_text())["name"] == name]
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


def _trained(summary) -> int:
    return int(summary["trees_built"])


def test_a_study_of_plugins_trains_tracks_resumes_by_key_and_reports(
    spark, small_dataset, plugin_files, tmp_path, capsys
):
    work = tmp_path / "work"
    cfg = _cfg(work, plugin_files)
    first = run_grid(spark, cfg, data=small_dataset)
    assert first["finished"] and _trained(first) > 0
    tracker = Tracker(first["tracking_uri"], cfg.grid.experiment, os.path.join(cfg.work_dir, "mlartifacts"))
    runs = {r.info.run_name.split("/")[-1]: r for r in tracker.client.search_runs([tracker.experiment_id])
            if r.data.tags.get(TAG_PARENT) == first["parent_run_id"]}  # fmt: skip
    # MLflow: every run that used a plug-in names it, its source and identity; the others do not
    tag = json.loads(runs["listnet"].data.tags["ltr.plugin.listnet"])
    assert (
        tag["kind"] == "objective" and tag["source"] == str(plugin_files[0]) and tag["identity"].startswith("plugin:")
    )
    assert json.loads(runs["powered"].data.tags["ltr.plugin.power"])["settings"] == {"power": 3.0}
    assert "ltr.plugin.q_len" in runs["q_len-2"].data.tags
    assert not any(k.startswith("ltr.plugin.") for k in runs["lambdamart"].data.tags)
    # the plug-in curricula: q_len's first stage holds the shortest queries; pw's shares are power's (x**3)
    q_len = _curriculum(work, "q_len")
    assert q_len["score"] == "q_len" and q_len["stages"][0]["score_min"] >= q_len["stages"][1]["score_min"]
    shares = [s["share"] for s in _curriculum(work, "pw")["stages"]]
    assert shares == pytest.approx([0.3, 0.3 + 0.7 * 0.5**3, 1.0])
    # an edit of the ListNet objective: its nodes train again (2 trees), nothing else does
    text = plugin_files[0].read_text()
    plugin_files[0].write_text(
        text.replace("hess = p_s * (1.0 - p_s) / (t * t)", "hess = 2 * p_s * (1.0 - p_s) / (t * t)")
    )
    # `ltr grid --plan` says which nodes train again, and why: the objective's code
    plan = ["grid", "--plan", "--data", small_dataset, *set_args(_overrides(work))]
    assert main([*plan, *[a for f in plugin_files for a in ("--plugin", str(f))]]) == 0
    out = capsys.readouterr().out
    todo = [line for line in out.splitlines() if "to do" in line]
    assert "(16 done)" in out and len(todo) == 1 and "listnet 2..4" in todo[0]
    assert "key changed since the last run" in out and 'objective_code: "plugin:' in out
    again = run_grid(spark, _cfg(work, plugin_files), data=small_dataset)
    assert again["finished"] and _trained(again) == 2, again
    # the report shows the plug-in systems like the built-ins
    report = build_report(tracker, str(tmp_path / "report"), None, report=ReportConfig(permutations=100),
                          metric_name="ndcg_at_10", difficulty=None)  # fmt: skip
    systems = json.dumps(report)
    for name in ("listnet", "powered", "q_len"):
        assert name in systems


def test_ltr_train_with_a_plugin_file(spark, small_dataset, plugin_files, tmp_path):
    """The README's command: `ltr train --plugin listnet.py --path mse:1,listnet:2` (its workers load the file)."""
    out = tmp_path / "model"
    train = set_args(tiny_study(f"work_dir={tmp_path}", sections=["train"]))
    args = ["train", "--data", small_dataset, "--fold", "1", "--path", "mse:1,listnet:2", "--out", str(out),
            "--plugin", str(plugin_files[0]), *train]  # fmt: skip
    assert main(args) == 0
    curve = (out / "curve.csv").read_text().splitlines()
    used = json.loads((out / "config.json").read_text())["plugins"]
    assert len(curve) == 1 + 3 and list(used) == ["listnet"] and used["listnet"]["source"] == str(plugin_files[0])
