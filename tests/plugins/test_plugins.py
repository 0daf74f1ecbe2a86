"""The plug-in API (pipelines.plugins): where plug-ins come from, the checks, the errors and the keys."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pipelines.app.cli import main
from pipelines.core import keys
from pipelines.core.config import ConfigError, TrainConfig, load_config
from pipelines.plan.paths import parse_path
from pipelines.plan.trie import build_plan
from pipelines.plugins import checks, loading
from pipelines.plugins.loading import PluginError
from pipelines.plugins.run_config import load_run_config
from udfs.metrics import NdcgSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "plugins"
EXAMPLE_FILES = ("listnet.py", "q_len.py", "power_pacing.py")


@pytest.fixture
def examples(tmp_path):
    """Copies of the example plug-ins (a test may edit them); their components unloaded afterwards."""
    out = []
    for name in EXAMPLE_FILES:
        shutil.copy(EXAMPLES / name, tmp_path / name)
        out.append(tmp_path / name)
    yield out
    _unload_all()


def _unload_all() -> None:
    for src in list(loading._OWNER.values()):  # noqa: SLF001
        loading.unload(src.module)
    from udfs import components

    components.configure({})


@pytest.fixture
def plugin(tmp_path):
    """Write a plug-in file ``name`` with ``text`` (after the API's import); unloaded afterwards."""

    def write(text: str, name: str = "mine.py") -> Path:
        p = tmp_path / name
        p.write_text("import numpy as np\nfrom pipelines.plugins import objective, difficulty, pacing\n\n" + text)
        return p

    yield write
    _unload_all()


def test_the_examples_load_check_and_list_like_built_ins(examples, capsys):
    assert main(["plugins", "--check", *[a for p in examples for a in ("--plugin", str(p))]]) == 0
    out = capsys.readouterr().out
    for kind, name, path in (("objective", "listnet", examples[0]), ("difficulty score", "q_len", examples[1]),
                             ("pacing function", "power", examples[2])):  # fmt: skip
        line = next(x for x in out.splitlines() if f" {name} " in x)
        assert line.startswith(kind) and "plug-in" in line and str(path) in line and "plugin:" in line
    assert "lambdamart" in out and "built-in" in out and "3 checked" in out
    kinds = {x.split()[2]: x.split()[4] for x in out.splitlines() if x.startswith("difficulty score")}
    assert kinds["q_len"] == "label_free" and kinds["n_rel"] == "oracle" and kinds["sigma_bm25"] == "label_free"


def test_listnet_gradient_is_the_softmax_cross_entropy_derivative(examples):
    loading.load([str(examples[0])])
    from udfs.objectives import registry

    b = checks.batch()
    shared = {"k": 10, "eta": 0.05, "exp_gain": True, "seed": 0}
    f = registry.get("listnet").make(shared, b["labels"], b["offsets"], b["qid"], b["doc"])
    m = b["margins"].astype(np.float64)

    def loss(s):
        total = 0.0
        for a, z in zip(b["offsets"][:-1], b["offsets"][1:], strict=True):
            py = np.exp(b["labels"][a:z] - b["labels"][a:z].max())
            py /= py.sum()
            ls = s[a:z] - np.log(np.exp(s[a:z] - s[a:z].max()).sum()) - s[a:z].max()
            total -= float(py @ ls)
        return total

    g, h = f(b["margins"], 0)
    eps = 1e-6
    num = np.array([(loss(m + eps * e) - loss(m - eps * e)) / (2 * eps) for e in np.eye(m.size)])
    np.testing.assert_allclose(g, num, atol=1e-5)
    assert (h >= 0).all() and h[b["offsets"][2]] == 0  # the one-document query: no curvature


BAD = {
    "a score per row": ("@difficulty('bad')\ndef bad(labels, features, offsets, *, params):\n    return labels\n",
                        "one per row"),
    "a non-finite score": ("@difficulty('bad')\ndef bad(labels, features, offsets, *, params):\n"
                           "    return np.log(np.diff(offsets) - 1.0)\n", "not finite"),
    "a hessian below 0": ("@objective('bad')\ndef bad(m, y, o, *, tree, params):\n    return m - y, -np.ones_like(m)\n",
                          "hess[0] = -1.0 < 0"),
    "float64 gradients": ("@objective('bad')\ndef bad(m, y, o, *, tree, params):\n"
                          "    return (m - y).astype(np.float64), np.ones_like(m)\n", "grad is float64"),
    "one value per query": ("@objective('bad')\ndef bad(m, y, o, *, tree, params):\n"
                            "    g = np.zeros(len(o) - 1, np.float32)\n    return g, g\n", "grad has shape (6,)"),
    "NaN gradients": ("@objective('bad')\ndef bad(m, y, o, *, tree, params):\n"
                      "    return m / 0 * 0, np.ones_like(m)\n", "grad[0] = nan: not finite"),
    "unseeded noise": ("@objective('bad')\ndef bad(m, y, o, *, tree, params):\n"
                       "    return (m + np.random.normal(size=m.size)).astype(np.float32), np.ones_like(m)\n",
                       "other values for the same input"),
    "a decreasing pacing": ("@pacing('bad')\ndef bad(stage, stages, *, params):\n    return 1.0 / stage\n",
                            "is below stage 1's"),
    "a share above 1": ("@pacing('bad')\ndef bad(stage, stages, *, params):\n    return 2.0 * stage\n",
                        "outside (0, 1]"),
    "an exception": ("@objective('bad')\ndef bad(m, y, o, *, tree, params):\n    return m[len(m) + 5], m\n",
                     "raised IndexError"),
    "a feature the dataset lacks": (
        "@difficulty('bad', features=['f3', 'f9999'])\ndef bad(labels, features, offsets, *, params):\n"
        "    return np.add.reduceat(features['f9999'], offsets[:-1])\n",
        "features= names f9999, and dataset mslr (conf/datasets/mslr.yaml) has 136 features, f1..f136"),
    "sys.exit in an objective": ("@objective('bad')\ndef bad(m, y, o, *, tree, params):\n    raise SystemExit(3)\n",
                                 "raised SystemExit: 3 on the synthetic batch"),
    "an objective that writes into its labels": (
        "@objective('bad')\ndef bad(m, y, o, *, tree, params):\n    y[:] = 0\n    return m - y, np.ones_like(m)\n",
        "writes into its inputs (assignment destination is read-only)"),
    "an objective that updates its margins in place": (
        "@objective('bad')\ndef bad(m, y, o, *, tree, params):\n    m -= y\n    return m, np.ones_like(m)\n",
        "writes into its inputs"),
    "complex scores": ("@difficulty('bad')\ndef bad(labels, features, offsets, *, params):\n"
                       "    return np.diff(offsets).astype(complex)\n", "returned complex numbers"),
    "unseeded scores": ("@difficulty('bad')\ndef bad(labels, features, offsets, *, params):\n"
                        "    return np.diff(offsets) * np.random.rand()\n", "returned other scores for the same input"),
    "a score that writes into its labels": (
        "@difficulty('bad')\ndef bad(labels, features, offsets, *, params):\n    labels[0] = 9\n"
        "    return np.diff(offsets).astype(float)\n", "a plug-in must not modify the margins, labels"),
    # found by the fuzzing (pipelines.testing.fuzz.plugin_sources): a traceback, and a message on two lines
    "GeneratorExit in a pacing": ("@pacing('bad')\ndef bad(stage, stages, *, params):\n    raise GeneratorExit()\n",
                                  "raised GeneratorExit"),
    "an exception whose message has a newline": (
        "@objective('bad')\ndef bad(m, y, o, *, tree, params):\n    raise ValueError('first\\nsecond')\n",
        "raised ValueError: first second on the synthetic batch"),
    "a label-free score that reads the labels": (
        "@difficulty('bad', kind='label_free')\ndef bad(labels, features, offsets, *, params):\n"
        "    return np.add.reduceat(labels, offsets[:-1])\n", "declared kind='label_free', but its scores change"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(BAD))
def test_a_bad_plugin_exits_2_naming_it_and_what_it_returned(what, plugin, capsys):
    text, expected = BAD[what]
    path = plugin(text)
    assert main(["plugins", "--check", "--plugin", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "'bad'" in err and expected in err and str(path) in err, err


LOAD_ERRORS = {
    "a clash with a built-in": ("@objective('lambdamart')\ndef lm(m, y, o, *, tree, params):\n    return m, m\n",
                                "objective 'lambdamart' is registered twice: by udfs.objectives.lambdamart"),
    "a clash across kinds": ("@pacing('listnet')\ndef p(stage, stages, *, params):\n    return 1.0\n",
                             "has the name of the objective 'listnet'; rename it"),
    "a syntax error": ("def broken(:\n    pass\n", "SyntaxError"),
    "an import that fails": ("import not_a_module_anywhere\n", "No module named 'not_a_module_anywhere' (line 4"),
    "sys.exit at import": ("import sys\nsys.exit(4)\n", "failed to import: SystemExit: 4 (line 5: sys.exit(4))"),
    "a wrong signature": ("@objective('two')\ndef two(m, y):\n    return m, m\n",
                          "must take (margins, labels, offsets, *, tree, params)"),
    "a bad name": ("@pacing('Fast-Pace')\ndef p(stage, stages, *, params):\n    return 1.0\n",
                   "lower-case letters, digits and _"),
    "a clash with a built-in score": (
        "@difficulty('n_rel')\ndef n_rel(labels, features, offsets, *, params):\n    return np.diff(offsets)\n",
        "difficulty score 'n_rel' is registered twice: by udfs.scores and by"),
    "a score named like a built-in strategy": (
        "@difficulty('q_nrel')\ndef q(labels, features, offsets, *, params):\n    return np.diff(offsets)\n",
        "would register the curriculum strategy 'q_nrel', which is a built-in one (n_rel)"),
    "a kind of difficulty a plug-in cannot have": (
        "@difficulty('mine', kind='model')\ndef mine(labels, features, offsets, *, params):\n    return offsets\n",
        "kind 'model'; a plug-in score is oracle (it reads the labels) or label_free"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(LOAD_ERRORS))
def test_a_plugin_that_cannot_load_exits_2_in_one_line(what, plugin, examples, capsys):
    text, expected = LOAD_ERRORS[what]
    path = plugin(text)
    assert main(["plugins", "--plugin", str(examples[0]), "--plugin", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0] and str(path) in err[0], err


def test_a_score_reads_the_features_of_the_configured_dataset_and_the_built_dataset(plugin, capsys):
    from pipelines.core.config import CurriculumConfig
    from pipelines.data.curricula import check_curriculum
    from pipelines.data.dataset import Dataset, DatasetError

    path = plugin("@difficulty('wide', features=['f200'])\ndef wide(labels, features, offsets, *, params):\n"
                  "    return np.add.reduceat(features['f200'], offsets[:-1]).astype(float)\n")  # fmt: skip
    assert main(["plugins", "--check", "--plugin", str(path), "--set", "dataset=istella"]) == 0  # 220 features
    capsys.readouterr()
    assert main(["plugins", "--check", "--plugin", str(path)]) == 2  # MSLR's 136
    assert "features= names f200, and dataset mslr" in capsys.readouterr().err
    # a built dataset with fewer features: refused where the curriculum is checked, before any Spark job
    ds = Dataset(path="/data/mine", manifest={"n_features": 136, "dataset": "mslr", "feature_roles": {}})
    with pytest.raises(DatasetError) as e:
        check_curriculum(CurriculumConfig(strategy="wide"), ds)
    assert str(e.value) == (
        "difficulty score 'wide' reads f200 (features=), and /data/mine (dataset mslr) has 136 features, f1..f136"
    )
    with pytest.raises(DatasetError, match="reads f200"):
        check_curriculum(CurriculumConfig(strategy="anti_wide"), ds)  # its anti-curriculum reads it too


def test_where_plugins_come_from_and_only_there(examples, tmp_path, capsys):
    # never from --set (nor, through the same overrides, an Airflow run's conf)
    for over in (f"plugins.load=[{examples[0]}]", f"plugins=[{examples[0]}]"):
        with pytest.raises(ConfigError, match="plug-ins are loaded only from --plugin"):
            load_config(None, [over])
    # a missing file, a name that is neither a file nor a module
    assert main(["plugins", "--plugin", str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["plugins", "--plugin", "not a module"]) == 2
    assert "neither a file" in capsys.readouterr().err
    # a config file's list, relative to the file; then its components are names like the built-ins'
    conf = tmp_path / "study.yaml"
    conf.write_text("plugins: [listnet.py, q_len.py]\ncurriculum: {strategy: q_len}\ntrain: {path: 'listnet:3'}\n")
    cfg = load_run_config(conf, [])
    assert cfg.curriculum.strategy == "q_len" and cfg.plugins.load == [str(examples[0]), str(examples[1])]
    # the Airflow DAG loads installed plug-ins only
    with pytest.raises(ConfigError, match="installed plug-ins only"):
        load_run_config(conf, [], files=False)


def test_unknown_names_and_settings_exit_2(examples, capsys):
    args = ["plugins", "--plugin", str(examples[0])]
    assert main([*args, "--set", "components.listnet.temprature=2"]) == 2
    assert "has no setting 'temprature' (its settings: temperature)" in capsys.readouterr().err
    assert main([*args, "--set", "components.listnet.temperature=hot"]) == 2
    assert "expected a float like its default 1.0" in capsys.readouterr().err
    assert main([*args, "--set", "components.lisnet.temperature=2"]) == 2
    assert "no component is called 'lisnet'" in capsys.readouterr().err
    common = ["--data", "/nonexistent", "--fold", "1", "--out", "/nonexistent"]
    assert main(["train", "--plugin", str(examples[0]), "--path", "listnett:3", *common]) == 2
    assert "listnet" in capsys.readouterr().err  # the did-you-mean names the plug-in's objective


def _plan_keys(paths: dict[str, str]) -> dict[str, list[str]]:
    ctx = keys.plan_context(TrainConfig(), NdcgSpec(), "sha256:d", 1, {"sources": "x"}, {"sources": "y"})
    plan = build_plan([parse_path(p, name) for name, p in paths.items()], fold=1, context=ctx)
    return {name: list(plan.chains[name]) for name in paths}


def test_a_plugin_edit_re_keys_exactly_the_results_that_use_it(examples, capsys):
    listnet, q_len, power = examples
    both = listnet.parent / "both.py"  # two components in one file: an edit of one re-keys only it
    both.write_text(listnet.read_text().replace('"listnet"', '"listnet2"') + "\n\n" + q_len.read_text())
    loading.load([str(listnet), str(power), str(both)])
    paths = {"ln": "mse:2,listnet:3", "lm": "mse:2,lambdamart:3", "ln2": "listnet2:2"}
    before = _plan_keys(paths)
    codes = {n: keys.component_code(c.fn, c.settings()) for n, (_, c) in loading.plugin_components().items()}

    def reload(path: Path, old: str, new: str) -> None:
        path.write_text(path.read_text().replace(old, new))
        loading.load([str(path)])

    # a comment or a docstring computes nothing: no key changes
    reload(listnet, "import numpy as np\n", "import numpy as np  # numerical python\n")
    assert _plan_keys(paths) == before
    # the objective's code: its nodes re-key (not the shared MSE root), nothing else does
    reload(listnet, "hess = p_s * (1.0 - p_s) / (t * t)", "hess = 2 * p_s * (1.0 - p_s) / (t * t)")
    after = _plan_keys(paths)
    assert after["lm"] == before["lm"] and after["ln2"] == before["ln2"]
    assert after["ln"][0] == before["ln"][0] and after["ln"][1] != before["ln"][1]
    # a helper it calls is part of its code: the second file's listnet2 re-keys, its q_len does not
    reload(both, "top = np.maximum.reduceat(x, starts)", "top = np.maximum.reduceat(x, starts) * 1.0")
    now = {n: keys.component_code(c.fn, c.settings()) for n, (_, c) in loading.plugin_components().items()}
    assert now["listnet2"] != codes["listnet2"] and now["q_len"] == codes["q_len"] and now["power"] == codes["power"]
    # a setting re-keys the nodes of its component only
    loading.load([], {"listnet": {"temperature": 2.0}})
    assert _plan_keys(paths)["ln"][1] != after["ln"][1] and _plan_keys(paths)["lm"] == before["lm"]


def test_a_task_refuses_a_plugin_whose_code_is_not_the_drivers(examples):
    pset = loading.load([str(examples[0])])
    assert pset.codes["listnet"].startswith("plugin:")
    loading.activate(pset)  # the same code: nothing to do
    bad = loading.PluginSet(pset.sources, pset.params, {**pset.codes, "listnet": "plugin:0000"})
    with pytest.raises(PluginError, match="is not the driver's"):
        loading.activate(bad)


def test_an_installed_package_is_loaded_from_its_entry_point_with_its_version(tmp_path, monkeypatch, capsys):
    """A package installed with an entry point in the group ltr.plugins (what the Airflow DAG and ``ltr pack``'s
    environment load): no --plugin needed; its version is what the runs record."""
    pkg = tmp_path / "ltr_ep_demo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from pipelines.plugins import pacing\n\n\n@pacing('ep_pace')\n"
        "def ep_pace(stage, stages, *, params):\n    return stage / stages\n"
    )
    info = tmp_path / "ltr_ep_demo-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ltr-ep-demo\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text("[ltr.plugins]\ndemo = ltr_ep_demo\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        cfg = load_run_config(None, ["curriculum.pacing=ep_pace"], files=False)  # as the DAG loads its config
        assert cfg.curriculum.pacing == "ep_pace"
        tags = loading.plugin_tags(["ep_pace", "lambdamart"])
        doc = __import__("json").loads(tags["ltr.plugin.ep_pace"])
        assert list(tags) == ["ltr.plugin.ep_pace"] and (doc["package"], doc["version"]) == ("ltr-ep-demo", "0.3")
        assert main(["plugins", "--check"]) == 0
        assert "ep_pace" in capsys.readouterr().out
    finally:
        loading.unload("ltr_ep_demo")
        _unload_all()


def test_a_plugin_may_call_any_code_of_ours_and_is_keyed_by_it(plugin):
    """A plug-in's function may use operations code (here the CLI's entry point): its identity covers that
    module's closure, whichever package it is in (a result's own code is held to the kernel, a plug-in's is not)."""
    path = plugin("from pipelines.app.cli import main\n\n\n@pacing('uses_cli')\n"
                  "def uses_cli(stage, stages, *, params):\n    main\n    return stage / stages\n")  # fmt: skip
    loading.load([str(path)])
    _, comp = loading.plugin_components()["uses_cli"]
    assert keys.component_code(comp.fn, comp.settings()).startswith("plugin:")


@pytest.mark.processes
@pytest.mark.parametrize("command", [["plugins", "--check"], ["train", "--data", "nowhere", "--fold", "1",
                                                                 "--path", "lambdamart:2", "--out", "o"]])  # fmt: skip
def test_a_plugin_taking_a_built_in_name_exits_2_in_one_line_in_a_fresh_process(plugin, tmp_path, command):
    """The built-in objectives load lazily: a fresh process that loads the plug-in first must still refuse the
    plug-in, not the built-in (which ended in a traceback deep in an import)."""
    import subprocess
    import sys

    path = plugin("@objective('lambdamart')\ndef lm(m, y, o, *, tree, params):\n    return m, m\n")
    out = subprocess.run([sys.executable, "-m", "pipelines.app.cli", *command, "--plugin", str(path)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)  # fmt: skip
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1, out.stderr
    assert (
        f"plugin {path}: objective 'lambdamart' is registered twice: by udfs.objectives.lambdamart and by {path};"
        in err[0]
    )


def test_two_plugin_files_taking_one_name_exit_2_naming_both_files(plugin, capsys):
    """Each source by the file the user wrote, not by the module name a file plug-in is loaded as."""
    from pipelines.app.cli import main

    body = (
        "@difficulty('q_mine', features=())\n"
        "def q(labels, features, offsets, *, params):\n"
        "    return offsets[1:] * 1.0\n"
    )
    a, b = plugin(body, "a.py"), plugin(body, "b.py")
    assert main(["plugins", "--check", "--plugin", str(a), "--plugin", str(b)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"plugin {b}: difficulty score 'q_mine' is registered twice: by {a} and by {b}; rename one")


def test_a_plugin_that_failed_to_load_leaves_nothing_registered_and_loads_once_fixed(plugin):
    """Found by the fuzzing: a file whose second component failed left its first one registered, so the fixed file
    loaded again in the same process (a notebook, the tests) clashed with itself; and a score named like the
    built-in strategy q_nrel, refused, took the built-in strategy away with it."""
    from udfs.curriculum import STRATEGIES

    head = "@objective('ok')\ndef ok(m, y, o, *, tree, params):\n    return (m - y).astype(np.float32), m * 0 + 1\n\n"
    path = plugin(head + "@objective('ok')\ndef again(m, y, o, *, tree, params):\n    return m, m\n")
    with pytest.raises(PluginError, match="registered twice"):
        loading.load([str(path)])
    assert "ok" not in loading.plugin_components()
    plugin(head)  # fixed
    loading.load([str(path)])
    assert loading.plugin_components()["ok"][0] == "objective"
    clash = plugin(
        "@difficulty('q_nrel')\ndef q(labels, features, offsets, *, params):\n    return np.diff(offsets)\n", "q.py"
    )
    with pytest.raises(PluginError, match="built-in one"):
        loading.load([str(clash)])
    assert STRATEGIES["q_nrel"].score == "n_rel" and STRATEGIES["anti_q_nrel"].score == "n_rel"
