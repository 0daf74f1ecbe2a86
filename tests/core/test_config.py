"""Typed config: defaults == conf/default.yaml, unknown keys and bad types rejected, overrides."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from pipelines.core.config import (
    Config,
    ConfigError,
    SparkConfig,
    conf_dir,
    load_config,
    load_dataset_spec,
)


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
    with pytest.raises(ConfigError, match=r"c.yaml: unknown config key 'spark.mastr'; known keys here: master, "):
        load_config(p)


def test_wrong_type_is_named(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("ingest:\n  chunk_bytes: lots\n")
    with pytest.raises(ConfigError, match=r"ingest.chunk_bytes: expected an integer, got 'lots'"):
        load_config(p)
    p.write_text("ingest:\n  strict: 1\n")
    with pytest.raises(ConfigError, match=r"ingest.strict: expected true/false, got 1"):
        load_config(p)


def test_overrides():
    cfg = load_config(
        None,
        ["generate.queries=42", "spark.master=local[1]", "ingest.max_label=2", "spark.conf.spark.executor.memory=2g"],
    )
    assert cfg.generate.queries == 42 and cfg.spark.master == "local[1]" and cfg.ingest.max_label == 2
    assert cfg.spark.conf == {"spark.executor.memory": "2g"}
    with pytest.raises(ConfigError, match=r"--set 'generate.qeuries=1': unknown config key 'generate.qeuries'"):
        load_config(None, ["generate.qeuries=1"])
    with pytest.raises(ConfigError, match=r"expected KEY=VALUE"):
        load_config(None, ["generate.queries"])
    with pytest.raises(ConfigError, match=r"'work_dir' is a value, not a section"):
        load_config(None, ["work_dir.x=1"])
    with pytest.raises(ConfigError, match=r"generate.queries: expected an integer, got 'many'"):
        load_config(None, ["generate.queries=many"])


def test_dataset_specs():
    mslr = load_dataset_spec("mslr")
    assert (mslr.n_features, mslr.min_label, mslr.max_label, mslr.bm25_feature, mslr.pagerank_feature) == (
        136,
        0,
        4,
        110,
        130,
    )
    with pytest.raises(ConfigError, match=r"unknown dataset 'nope'.*known datasets: letor4, mslr"):
        load_dataset_spec("nope")


def test_spark_properties_pin_python_for_local():
    import sys

    from pipelines.core.session import resolve_master, session_properties

    props = session_properties(SparkConfig(conf={"spark.sql.shuffle.partitions": "3"}), "local[2]")
    assert props["spark.pyspark.python"] == sys.executable
    assert props["spark.sql.shuffle.partitions"] == "3"  # user conf wins
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
