"""Typed config: defaults == conf/default.yaml, unknown keys and bad types rejected, overrides."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pipelines.core.config import (
    MOVED,
    Config,
    ConfigError,
    DatasetSpec,
    ExtraCurriculum,
    GridConfig,
    SparkConfig,
    conf_dir,
    dataset_presets,
    load_config,
    load_dataset_spec,
)
from tests.helpers import cli_env


def test_default_yaml_writes_out_the_dataclass_defaults():
    on_disk = yaml.safe_load((conf_dir() / "default.yaml").read_text())
    assert on_disk == Config().to_dict()
    assert load_config() == Config()


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().work_dir = "x"


def test_unknown_key_is_named(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("spark:\n  mastr: local[2]\n")
    with pytest.raises(ConfigError, match=r"c.yaml: unknown config key 'spark.mastr'; did you mean 'spark.master'\?$"):
        load_config(p)
    p.write_text("tracking:\n  zzz: 1\n")  # nothing close: the keys of the section
    with pytest.raises(
        ConfigError, match=r"c.yaml: unknown config key 'tracking.zzz'; known keys here: uri, artifacts$"
    ):
        load_config(p)


def test_wrong_type_is_named(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("ingest:\n  chunk_bytes: lots\n")
    with pytest.raises(ConfigError, match=r"ingest.chunk_bytes: expected an integer, got 'lots'"):
        load_config(p)
    p.write_text("ingest:\n  strict: 1\n")
    with pytest.raises(ConfigError, match=r"ingest.strict: expected true/false, got 1"):
        load_config(p)


#: Bad configs (YAML, ``--set`` overrides) and the one line each gives; ``{p}``: the YAML file.
BAD_CONFIGS = [
    # an unknown or misspelt key anywhere: its full path and the closest known key
    ("grid:\n  extra_curricula:\n    paced: {strateg: q_nrel}\n", [],
     "{p}: unknown config key 'grid.extra_curricula.paced.strateg'; "
     "did you mean 'grid.extra_curricula.paced.strategy'?"),
    ("gird:\n  trees: 10\n", [], "{p}: unknown config key 'gird'; did you mean 'grid'?"),
    ("grid:\n  swich_points: [1]\n", [],
     "{p}: unknown config key 'grid.swich_points'; did you mean 'grid.switch_points'?"),
    ("metric:\n  gian: linear\n", [], "{p}: unknown config key 'metric.gian'; did you mean 'metric.gain'?"),
    ("", ["grid.extra_curricula.paced.strateg=q_bm25"],
     "--set 'grid.extra_curricula.paced.strateg=q_bm25': unknown config key 'grid.extra_curricula.paced.strateg'; "
     "did you mean 'grid.extra_curricula.paced.strategy'?"),
    ("", ["trian.eta=0.1"], "--set 'trian.eta=0.1': unknown config key 'trian'; did you mean 'train'?"),
    ("", ["train.checkpoint_evry=5"],
     "--set 'train.checkpoint_evry=5': unknown config key 'train.checkpoint_evry'; "
     "did you mean 'train.checkpoint_every'?"),
    # a value of the wrong type: its full path and the value
    ("grid:\n  extra_curricula:\n    paced: {fraction: '0.3'}\n", [],
     "{p}: grid.extra_curricula.paced.fraction: expected a number, got '0.3'"),
    ("grid:\n  extra_curricula:\n    paced: 3\n", [],
     "{p}: grid.extra_curricula.paced: expected a mapping (the curriculum: settings it changes), got 3"),
    ("", ["grid.trees=many"], "{p}: grid.trees: expected an integer, got 'many'"),
    # the checks of the sections, each written once (pipelines.core.config)
    ("grid:\n  extra_curricula:\n    paced: {strategy: q_hard}\n", [],
     "{p}: grid.extra_curricula.paced.strategy: unknown curriculum strategy 'q_hard' (one of: q_nrel, q_bm25, "
     "q_pagerank, q_size, sigma_bm25, teacher_margin, teacher_loss, teacher_ndcg, l_hrel, random, none), or "
     "anti_<one that orders queries by a score> (its "
     "anti-curriculum)"),
    ("grid:\n  extra_curricula:\n    paced: {pacing: cosine}\n", [],
     "{p}: grid.extra_curricula.paced.pacing: unknown pacing function 'cosine' (one of: linear, root_n, geometric, "
     "step), or empty for two stages"),
    ("grid:\n  extra_curricula:\n    paced: {pacing: linear, stages: 1}\n", [],
     "{p}: grid.extra_curricula.paced.stages must be >= 2 (stages of a paced curriculum), got 1"),
    ("grid:\n  extra_curricula:\n    paced: {delta: 1.5}\n", [],
     "{p}: grid.extra_curricula.paced.delta must be in (0, 1] (a share of the training queries), got 1.5"),
    ("grid:\n  extra_curricula:\n    easy: {fraction: 0}\n", [],
     "{p}: grid.extra_curricula.easy.fraction must be in (0, 1] (a share of the training queries), got 0.0"),
    ("grid:\n  extra_curricula:\n    hrel: {strategy: l_hrel}\ncurriculum:\n  pacing: linear\n", [],
     "{p}: grid.extra_curricula.hrel (its other settings from curriculum:): curriculum.pacing (--pacing) 'linear': "
     "strategy l_hrel is a document label filter, not a query order, so it takes no pacing: it always has two "
     "stages (the filtered documents, then all)"),
    ("", ["curriculum.fraction=0"],
     "{p}: curriculum.fraction (--fraction) must be in (0, 1] (a share of the training queries), got 0.0"),
    ("", ["curriculum.strategy=q_hard"],
     "{p}: curriculum.strategy (--strategy): unknown curriculum strategy 'q_hard' (one of: q_nrel, q_bm25, "
     "q_pagerank, q_size, sigma_bm25, teacher_margin, teacher_loss, teacher_ndcg, l_hrel, random, none), or "
     "anti_<one that orders queries by a score> (its "
     "anti-curriculum)"),
    ("", ["generate.label_noise=1.2"],
     "{p}: generate.label_noise (--label-noise) must be in [0, 1] (the share of training rows whose label is "
     "redrawn), got 1.2"),
    ("", ["curriculum.strategy=anti_random"],
     "{p}: curriculum.strategy (--strategy): anti_random: strategy random has a seeded random order (reversed, it is "
     "another one), so it has no anti-curriculum; anti_ takes one of q_nrel, q_bm25, q_pagerank, q_size, sigma_bm25, "
     "teacher_margin, teacher_loss, teacher_ndcg"),
    ("", ["grid.strategies=[q_nrel,anti_none]"],
     "{p}: grid.strategies: anti_none: strategy none has no order of its queries, so it has no anti-curriculum; "
     "anti_ takes one of q_nrel, q_bm25, q_pagerank, q_size, sigma_bm25, "
     "teacher_margin, teacher_loss, teacher_ndcg"),
    ("", ["difficulty.empty_queries=first"],
     "{p}: difficulty.empty_queries (--empty-queries) must be one of last, exclude, as_metric, got 'first'"),
    ("", ["train.checkpoint_every=0"], "{p}: train.checkpoint_every must be >= 1, got 0"),
    ("", ["train.base_margin=bogus"], "{p}: train.base_margin must be auto, zero, mean or a number, got 'bogus'"),
    ("", ["ingest.chunk_bytes=0"],
     "{p}: ingest.chunk_bytes (--chunk-bytes) must be >= 1 (nominal text bytes per Spark task, e.g. 33554432), got 0"),
    ("grid: [1\n", [], "{p}:2:1: invalid YAML: expected ',' or ']', but got '<stream end>'"),
    # bounds and choices declared with the field (pipelines.core.config.fields.setting)
    ("", ["train.eta=0"], "{p}: train.eta (--eta) must be > 0, got 0.0"),
    ("", ["train.subsample=1.5"], "{p}: train.subsample must be in (0, 1], got 1.5"),
    ("", ["metric.k=0"], "{p}: metric.k must be >= 1, got 0"),
    ("", ["metric.gain=log"], "{p}: metric.gain must be one of exp2, linear, got 'log'"),
    ("", ["grid.folds=[1,0]"], "{p}: grid.folds must each be >= 1, got [1, 0]"),
    ("", ["report.margin=1"], "{p}: report.margin must be in [0, 1) (an NDCG difference), got 1.0"),
    ("", ["selfpaced.by=rank"], "{p}: selfpaced.by must be one of ndcg, loss, got 'rank'"),
]  # fmt: skip


@pytest.mark.parametrize("text, overrides, message", BAD_CONFIGS)
def test_bad_configs_give_one_line_naming_the_key(tmp_path, text, overrides, message):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(p, overrides)
    assert str(err.value) == message.format(p=p)


def test_one_declaration_drives_the_check_the_reference_and_the_message():
    """A field's bounds, written once where it is declared, are its check when the section is made (naming the
    key's path, its flag and the value) and the rule the reference states; a check written in the section's
    check() is stated from the declaration's ``checks=``."""
    from dataclasses import dataclass

    from pipelines.core.config import Section, declared, setting

    @dataclass(frozen=True)
    class Toy(Section):
        SECTION = "toy"

        n: int = setting(2, "how many", min=1, why="at least one", flag="--n")
        mode: str = setting("a", "which", choices=("a", "b"), checks=("b only with n > 1",))

        def check(self) -> None:
            if self.mode == "b" and self.n < 2:
                raise ConfigError(f"toy.mode 'b' needs toy.n > 1, got {self.n}")

    assert declared(Toy)["n"].rules() == (">= 1 (at least one)",)
    assert declared(Toy)["mode"].rules() == ("one of a, b", "b only with n > 1")
    with pytest.raises(ConfigError, match=r"^toy.n \(--n\) must be >= 1 \(at least one\), got 0$"):
        Toy(n=0)
    with pytest.raises(ConfigError, match=r"^toy.mode must be one of a, b, got 'c'$"):
        Toy(mode="c")
    with pytest.raises(ConfigError, match=r"needs toy.n > 1, got 1$"):
        Toy(n=1, mode="b")
    assert Toy(n=3, mode="b").n == 3


def test_a_bad_config_exits_2_from_the_ltr_command_in_one_line(tmp_path):
    """Through the installed ``ltr`` (a process of its own): ``ltr grid --plan`` reads the config before
    anything else (no Spark, no data), and a typo in an extra curriculum is exit 2 and one line."""
    ltr = Path(sys.executable).with_name("ltr")
    if not ltr.is_file():
        pytest.skip(f"no ltr console script beside {sys.executable}")
    p = tmp_path / "bad.yaml"
    p.write_text("grid:\n  extra_curricula:\n    paced: {strateg: q_nrel, fraction: 0.3}\n")
    r = subprocess.run(
        [str(ltr), "grid", "--plan", "--conf", str(p)], env=cli_env(), capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ltr grid: error:")]
    assert lines == [
        f"ltr grid: error: {p}: unknown config key 'grid.extra_curricula.paced.strateg'; "
        "did you mean 'grid.extra_curricula.paced.strategy'?"
    ]
    assert r.stdout == ""


def test_extra_curricula_are_typed_and_frozen():
    cfg = load_config(None, ["grid.extra_curricula={paced: {strategy: q_bm25, pacing: linear, stages: 3, delta: 1}}"])
    paced = cfg.grid.extra_curricula["paced"]
    assert isinstance(paced, ExtraCurriculum) and paced == {"strategy": "q_bm25", "pacing": "linear", "stages": 3,
                                                            "delta": 1.0}  # fmt: skip
    assert isinstance(paced["delta"], float)
    with pytest.raises(TypeError, match="frozen"):
        paced["stages"] = 5
    assert paced.over(cfg.curriculum) == replace(
        cfg.curriculum, strategy="q_bm25", pacing="linear", stages=3, delta=1.0
    )
    # a plain mapping given in Python is typed and checked the same
    g = GridConfig(extra_curricula={"x": {"stages": 5}})
    assert isinstance(g.extra_curricula["x"], ExtraCurriculum)
    with pytest.raises(ConfigError, match=r"^unknown config key 'grid.extra_curricula.x.stags'; did you mean"):
        GridConfig(extra_curricula={"x": {"stags": 5}})
    # copies, pickles and asdict keep the type and the content
    assert pickle.loads(pickle.dumps(cfg)) == cfg and copy.deepcopy(cfg) == cfg
    assert type(dataclasses.asdict(cfg.grid)["extra_curricula"]["paced"]) is ExtraCurriculum
    # --set into one entry changes that setting, keeping the others
    cfg = load_config(None, ["grid.extra_curricula.paced.stages=6"])
    assert cfg.grid.extra_curricula["paced"] == {"strategy": "q_nrel", "pacing": "root_n", "stages": 6, "delta": 0.25}


def test_the_keys_of_extra_curricula_are_those_of_the_plain_dicts_they_were(monkeypatch):
    """An extra curriculum keys a curriculum and a study by its settings as written, whatever the type that holds
    them (the values below are pinned, with a fixed code identity and dataset: a change to what a curriculum's key
    holds is a re-key, made on purpose with its upgrade note, never by accident)."""
    from pipelines.core import keys
    from pipelines.data.dataset import Dataset
    from pipelines.study.design import curriculum_inputs, grid_keys

    monkeypatch.setattr(keys, "code_identity", lambda kind=None: {"sources": "fixed", "xgboost": "x"})
    manifest = {"fingerprint": "sha256:abc", "n_features": 136, "feature_roles": {"bm25": 110, "pagerank": 130}}
    ds = Dataset(path="mem", manifest={**manifest, "folds": {"1": {}}})
    every = "grid.extra_curricula={paced: {strategy: q_bm25, pacing: linear, stages: 3, delta: 0.5, " \
            "seed: 7, fraction: 0.3, hrel_labels: [0, 4]}}"  # fmt: skip
    for overrides, curriculum, study in (
        ([], "e1b7965864b9bfaa", "014726fd98cb3286"),
        ([every], "132555ad609899b9", "3bbdc4481cc2e94a"),
    ):
        cfg = load_config(None, overrides)
        inputs = curriculum_inputs(cfg, ds, 1, "paced", "sha256:scores")
        assert keys.digest({"kind": "curriculum", **inputs}, 16) == curriculum
        assert grid_keys(cfg, ds, {"sources": "fixed"})[0] == study


OLD_KEYS = """
train: {sigmoid_gamma: 2.0, stochastic_noise: 0.5, stochastic_anneal: 30, blend_schedule: step, blend_at: 7,
        blend_width: 4}
curriculum: {root_n: 3.0}
grid: {extra_curricula: {paced: {strategy: q_nrel, pacing: root_n, root_n: 3.0}}}
plugins: {params: {selgb: {negatives: 0.2}}}
"""


def test_a_moved_key_is_read_at_its_new_place_with_one_deprecation_line_each(tmp_path, caplog):
    """Each component's settings moved from ``train:``, ``curriculum:``, ``selfpaced:`` and ``plugins.params`` to
    ``components.<name>``: the old keys still load, each with one warning naming old and new, in a file and in
    ``--set``; an old key and its new one set to different values, or an extra curriculum's root_n that is not the
    one every curriculum now shares, is refused in one line."""
    conf = tmp_path / "old.yaml"
    conf.write_text(OLD_KEYS)
    with caplog.at_level("WARNING", logger="pipelines.core.config"):
        cfg = load_config(conf, ["selfpaced.root_n=3.0"])
    assert cfg.components == {
        "sigmoid_pairwise": {"gamma": 2.0},
        "noisy_lambdamart": {"noise": 0.5, "anneal": 30},
        "blend": {"schedule": "step", "at": 7, "width": 4},
        "root_n": {"n": 3.0},
        "selgb": {"negatives": 0.2},
    }
    lines = [r.getMessage() for r in caplog.records]
    for old, new in MOVED.items():
        assert sum(f"{old} is now {new};" in line for line in lines) == 1, old
    assert sum("grid.extra_curricula.paced.root_n is now components.root_n.n" in line for line in lines) == 1
    assert all("\n" not in line for line in lines)
    conf.write_text("train: {blend_at: 7}\ncomponents: {blend: {at: 8}}\n")
    with pytest.raises(ConfigError, match=r"train.blend_at = 7 and components.blend.at = 8: train.blend_at is now "):
        load_config(conf)
    conf.write_text("grid: {extra_curricula: {paced: {strategy: q_nrel, pacing: root_n, root_n: 3.0}}}\n")
    with pytest.raises(ConfigError, match=r"paced.root_n = 3.0: the root_n pacing's n is one setting for every"):
        load_config(conf)


@pytest.mark.parametrize(
    "setting, says",
    [
        ("components.blend.schedule=cosine", "components.blend (objective, as configured): unknown blend schedule "
         "'cosine'; expected one of step, linear, sigmoid"),
        ("components.blend.width=0", "blend schedule width must be > 0, got 0"),
        ("components.sigmoid_pairwise.gamma=0", "components.sigmoid_pairwise (objective, as configured): gamma"),
        ("components.noisy_lambdamart.anneal=0", "anneal (the tree at which the noise has fallen to 0) must be >= 1"),
        ("components.root_n.n=-1", "components.root_n (pacing function, as configured): n (the root's degree) must"),
        ("train.blend_schedule=cosine", "components.blend (objective, as configured): unknown blend schedule"),
    ],
)  # fmt: skip
def test_a_component_s_setting_is_checked_by_its_own_declaration_in_one_line(setting, says):
    """A built-in's bounds are its ``check=``, run when the config is loaded (exit 2, before any Spark job)."""
    from pipelines.core.errors import UserError
    from pipelines.plugins.run_config import load_run_config

    with pytest.raises(UserError) as e:
        load_run_config(None, [setting], check=False)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_overrides():
    cfg = load_config(
        None,
        ["generate.queries=42", "spark.master=local[1]", "ingest.max_label=2", "spark.conf.spark.executor.memory=2g"],
    )
    assert cfg.generate.queries == 42 and cfg.spark.master == "local[1]" and cfg.ingest.max_label == 2
    assert cfg.spark.conf == {"spark.executor.memory": "2g"}
    with pytest.raises(ConfigError, match=r"--set 'generate.qeuries=1': unknown config key 'generate.qeuries'"):
        load_config(None, ["generate.qeuries=1"])
    with pytest.raises(ConfigError, match=r"expected KEY=VALUE") as refused:
        load_config(None, ["generate.queries"])
    example = str(refused.value).split("e.g. --set ")[1]  # the message's example is a key that exists
    assert load_config(None, [example]).grid.trees == 200
    with pytest.raises(ConfigError, match=r"'work_dir' is a value, not a section"):
        load_config(None, ["work_dir.x=1"])
    with pytest.raises(ConfigError, match=r"generate.queries: expected an integer, got 'many'"):
        load_config(None, ["generate.queries=many"])
    assert load_config(None, ["train.read=spark"]).train.read == "spark"
    with pytest.raises(ConfigError, match=r"train.read must be one of auto, worker, spark, got 'workers'"):
        load_config(None, ["train.read=workers"])


def test_dataset_specs():
    mslr = load_dataset_spec("mslr")
    assert (mslr.n_features, mslr.min_label, mslr.max_label, mslr.bm25_feature, mslr.pagerank_feature) == (
        136,
        0,
        4,
        110,
        130,
    )
    with pytest.raises(
        ConfigError, match=r"unknown dataset 'nope'.*known datasets: istella, istella-x, letor4, mslr, yahoo"
    ):
        load_dataset_spec("nope")


def test_the_larger_datasets_presets():
    """Istella, Istella-X and Yahoo!: their published shapes, no BM25 or PageRank, Yahoo's absent features missing,
    Istella's double-range sentinel clamped; every preset says where it is published and how its files lie."""
    presets = dataset_presets()
    shape = {
        n: (p.n_features, p.min_label, p.max_label, p.bm25_feature, p.pagerank_feature) for n, p in presets.items()
    }
    assert shape["istella"] == shape["istella-x"] == (220, 0, 4, 0, 0)
    assert shape["yahoo"] == (699, 0, 4, 0, 0)
    assert (presets["yahoo"].absent, presets["yahoo"].overflow) == ("missing", "reject")
    assert (presets["istella"].absent, presets["istella"].overflow) == ("zero", "clamp")
    assert (presets["mslr"].absent, presets["mslr"].overflow) == ("zero", "reject")
    assert all(p.download.startswith("https://") and p.layout and p.description for p in presets.values())
    with pytest.raises(ConfigError, match=r"dataset x: absent must be zero or missing, got 'nan'"):
        DatasetSpec(name="x", n_features=3, absent="nan")


def test_spark_properties_pin_python_for_local():
    import sys

    from pipelines.core.session import resolve_master, session_properties

    props = session_properties(SparkConfig(conf={"spark.sql.shuffle.partitions": "3"}), "local[2]")
    assert props["spark.pyspark.python"] == sys.executable
    assert props["spark.sql.shuffle.partitions"] == "3"  # user conf wins
    assert props["spark.python.task.killTimeout"] == "500ms"  # a cancelled training worker ends soon
    assert "spark.pyspark.python" not in session_properties(SparkConfig(), "spark://host:7077")
    assert resolve_master(SparkConfig(master="local[3]")) == "local[3]"


def test_spark_properties_set_outside_the_config_are_never_overridden(tmp_path, monkeypatch):
    from pipelines.core.session import external_properties, session_properties

    (tmp_path / "spark-defaults.conf").write_text(
        "# cluster defaults\nspark.sql.shuffle.partitions   64\nspark.driver.extraJavaOptions=-Dmine=1\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.scheduler.mode=FIFO --driver-memory 7g pyspark-shell")
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    ext = external_properties()
    assert ext == {
        "spark.sql.shuffle.partitions": "64",
        "spark.driver.extraJavaOptions": "-Dmine=1",
        "spark.scheduler.mode": "FIFO",
        "spark.driver.memory": "7g",
    }
    props = session_properties(SparkConfig(conf={"spark.executor.memory": "3g"}), "spark://h:7077", ext)
    for k in ext:  # left to what the user set: the builder does not repeat them
        assert k not in props, k
    assert props["spark.executor.memory"] == "3g" and props["spark.sql.session.timeZone"] == "UTC"
    # the config's own spark.conf is explicit and wins over everything
    props = session_properties(SparkConfig(conf={"spark.sql.shuffle.partitions": "5"}), "local[2]", ext)
    assert props["spark.sql.shuffle.partitions"] == "5"


def test_every_train_setting_is_in_the_model_part_or_the_run_part():
    """The model part (every node key holds it whole) and the run part (no key does) split ``train:`` with
    nothing left over: a new setting in neither would be silently out of the keys, one in both would re-key runs."""
    from dataclasses import fields

    from pipelines.core import keys
    from pipelines.core.config import TrainConfig, TrainRun
    from udfs.model import Model

    model, run = {f.name for f in fields(Model)}, {f.name for f in fields(TrainRun)}
    every = {f.name for f in fields(TrainConfig)}
    assert not model & run and not (model | run) & set(TrainConfig.WHAT)
    assert model | run | set(TrainConfig.WHAT) == every
    cfg = TrainConfig(eta=0.1, workers=3, lease_wait=5.0, score_dist_trees=[4, 8])
    assert cfg.model.eta == 0.1 and cfg.model.score_dist_trees == (4, 8) and cfg.run.workers == 3
    assert set(keys.train_inputs(cfg)) == model
    # the run part never moves a key; each model setting does
    assert keys.train_inputs(TrainConfig(workers=3, read="spark", checkpoint_every=5)) == keys.train_inputs(
        TrainConfig()
    )
    assert keys.train_inputs(TrainConfig(eta=0.1)) != keys.train_inputs(TrainConfig())


def test_selfpaced_by_choices_are_the_kernel_s():
    """``selfpaced.by``'s choices are declared with the config, which the kernel may not import (its contract), and
    the kernel's selection names its own (:data:`pipelines.kernel.selfpaced.BY`, keyed code): the two stay equal."""
    from pipelines.core.config import SelfPacedConfig, declared
    from pipelines.kernel.selfpaced import BY

    assert declared(SelfPacedConfig)["by"].choices == BY
