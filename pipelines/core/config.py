"""Typed configuration: YAML in ``conf/`` loaded into frozen dataclasses.

* Defaults live in the dataclasses; ``conf/default.yaml`` writes the same
  defaults out (a test keeps the two equal), other files override part of them.
* Unknown keys are an error that names the key, the file and the keys allowed.
* Values are checked against the field types (``"200"`` is not an int).
* Command-line overrides: ``--set section.key=value``; the value is read as YAML
  (``--set train.trees=200``, ``--set spark.conf={"spark.a": "b"}``).

Dataset descriptions (feature count, label range, feature roles) live in
``conf/datasets/<name>.yaml`` and load into :class:`DatasetSpec`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from pipelines.core.errors import UserError
from udfs.metrics import NdcgSpec

T = TypeVar("T")


class ConfigError(UserError):
    """Invalid configuration: the message names the key, the source and the fix."""


#: Labels are stored as int8 (``udfs.schema.LABEL_TYPE``).
LABEL_MIN, LABEL_MAX = -128, 127
#: Parquet codecs that both pyarrow (ingest tasks) and Spark (merging) write.
PARQUET_CODECS = ("snappy", "zstd", "gzip", "lz4", "none")
#: ``difficulty.empty_queries``: how curricula treat queries without a relevant document.
EMPTY_QUERY_POLICIES = ("last", "exclude", "as_metric")


# --------------------------------------------------------------- sections
@dataclass(frozen=True)
class SparkConfig:
    """How to build the SparkSession (:func:`pipelines.core.session.build_session`).

    ``master``: empty means spark-submit's ``--master`` if there is one, else
    ``local[*]``. ``conf``: any further Spark properties, passed through.
    """

    master: str = ""
    app_name: str = "ltr"
    shuffle_partitions: int = 8
    driver_memory: str = "1g"
    arrow_max_records_per_batch: int = 10000
    ui: bool = False
    log_level: str = "WARN"
    conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GenerateConfig:
    """Synthetic MSLR-shaped data (:mod:`pipelines.data.generate`)."""

    queries: int = 600
    seed: int = 2018
    workers: int = 0  # processes; 0 = one per CPU core


@dataclass(frozen=True)
class IngestConfig:
    """LETOR text to Parquet (:mod:`pipelines.data.ingest`).

    ``n_features`` / ``min_label`` / ``max_label``: 0 / null take the dataset's
    values (``conf/datasets``). ``chunk_bytes``: nominal bytes of text per task.
    """

    strict: bool = False
    chunk_bytes: int = 32 * 1024 * 1024
    compression: str = "snappy"
    n_features: int = 0
    min_label: int | None = None
    max_label: int | None = None
    max_examples: int = 20  # quarantined lines quoted in the manifest

    def __post_init__(self) -> None:
        if self.chunk_bytes < 1:
            raise ConfigError(
                f"ingest.chunk_bytes (--chunk-bytes) must be >= 1 (nominal text bytes per "
                f"Spark task, e.g. 33554432), got {self.chunk_bytes}"
            )
        if self.n_features < 0:
            raise ConfigError(
                f"ingest.n_features (--n-features) must be >= 1, or 0 for the dataset's, got {self.n_features}"
            )
        for key in ("min_label", "max_label"):
            v = getattr(self, key)
            if v is not None and not LABEL_MIN <= v <= LABEL_MAX:
                raise ConfigError(
                    f"ingest.{key} (--{key.replace('_', '-')}) must lie in [{LABEL_MIN}, {LABEL_MAX}] "
                    f"(labels are stored as int8), got {v}"
                )
        if self.min_label is not None and self.max_label is not None and self.min_label > self.max_label:
            raise ConfigError(
                f"ingest.min_label (--min-label) {self.min_label} > ingest.max_label (--max-label) "
                f"{self.max_label}: no label would be valid"
            )
        if self.compression not in PARQUET_CODECS:
            raise ConfigError(
                f"ingest.compression {self.compression!r} is not a Parquet codec both pyarrow and "
                f"Spark write; expected one of {', '.join(PARQUET_CODECS)}"
            )
        if self.max_examples < 0:
            raise ConfigError(f"ingest.max_examples must be >= 0, got {self.max_examples}")


@dataclass(frozen=True)
class DifficultyConfig:
    """Per-query difficulty (:mod:`pipelines.data.difficulty`): feature ids of the rankers
    whose NDCG is scored; 0 takes the dataset's role (MSLR: BM25 110, PageRank 130).

    ``empty_queries``: how the curricula treat queries with no relevant document
    (their NDCG is undefined; ``metric.empty`` only fills it in):

    * ``last`` (default): they are the hardest queries of every difficulty order
      (q_nrel, q_bm25, q_pagerank), after all the others, by qid;
    * ``exclude``: in every strategy but ``none`` they enter only the last stage
      (all training data); the earlier stages' shares count the other queries only;
    * ``as_metric``: q_bm25 / q_pagerank order them by ``metric.empty`` like any score
      (with 1.0 they come first: the behaviour before this option).

    See :mod:`pipelines.data.curriculum` for what each strategy does with it.
    """

    bm25_feature: int = 0
    pagerank_feature: int = 0
    empty_queries: str = "last"

    def __post_init__(self) -> None:
        for key in ("bm25_feature", "pagerank_feature"):
            if getattr(self, key) < 0:
                raise ConfigError(
                    f"difficulty.{key} (--{key.replace('_', '-')}) must be a feature id >= 1, "
                    f"or 0 for the dataset's, got {getattr(self, key)}"
                )
        if self.empty_queries not in EMPTY_QUERY_POLICIES:
            raise ConfigError(
                f"difficulty.empty_queries (--empty-queries) must be one of "
                f"{', '.join(EMPTY_QUERY_POLICIES)}, got {self.empty_queries!r}"
            )


@dataclass(frozen=True)
class CurriculumConfig:
    """Curriculum selection (:mod:`pipelines.data.curriculum`).

    Two stages by default: the easiest ``fraction`` of the training queries,
    then all of them. With ``pacing`` (linear, root_n, geometric, step),
    ``stages`` stages whose shares grow from ``delta`` to 1.
    """

    strategy: str = "q_nrel"
    fraction: float = 0.25
    pacing: str = ""
    stages: int = 4
    delta: float = 0.25
    root_n: float = 2.0
    seed: int = 2018
    hrel_labels: list[int] = field(default_factory=lambda: [0, 3, 4])

    def __post_init__(self) -> None:
        # The dataset's label range is checked when a curriculum is built (pipelines.data.curriculum.check_hrel_labels).
        labels = list(self.hrel_labels)
        if not labels:
            raise ConfigError(
                "curriculum.hrel_labels is empty: l_hrel's first stage would hold no document; "
                "list the labels it keeps, e.g. [0, 3, 4]"
            )
        dup = sorted({v for v in labels if labels.count(v) > 1})
        if dup:
            raise ConfigError(f"curriculum.hrel_labels {labels} lists label {dup[0]} twice")
        if max(labels) <= 0:
            raise ConfigError(
                f"curriculum.hrel_labels {labels} holds no relevant label (> 0): l_hrel's first "
                "stage would have no relevant document, so no ranking gradient; add one, e.g. [0, 3, 4]"
            )


#: Curriculum strategies (:mod:`pipelines.data.curriculum`): by number of relevant documents, by BM25's or
#: PageRank's NDCG, by highly relevant labels, a random control, and none.
STRATEGIES = ("q_nrel", "q_bm25", "q_pagerank", "l_hrel", "random", "none")


@dataclass(frozen=True)
class TrainConfig:
    """Distributed XGBoost training (:mod:`pipelines.app.train`).

    ``path``: the training path shorthand (``OBJ[@DATA]:TREES,...``, see
    :mod:`pipelines.plan.paths`). Tree parameters follow the paper: 64 leaves grown
    best-first, learning rate 0.05. ``k``: the NDCG cutoff of the LambdaMART
    deltas and of its top-k pairs. ``workers``/``nthread``: 0 = automatic.
    ``max_bin``/``cuts_sample_rows``: the fold's histogram cuts are computed once from a deterministic
    sample of at most that many training rows (whole queries; all rows when fewer) and given to every
    worker (:mod:`pipelines.store.cuts`), so the trees do not depend on the number of workers.
    ``lease_ttl``/``lease_wait``: a node being trained holds a lease in the checkpoint store (renewed
    every ttl/3 s; :mod:`pipelines.store.lease`); another process finding it waits up to ``lease_wait`` s,
    then stops with one line naming the owner.
    ``base_margin``: ``auto`` starts paths that begin with a regression
    objective from the mean training label and ranking paths from 0.
    """

    path: str = "mse:40,lambdamart:60"
    eta: float = 0.05
    leaves: int = 64
    max_bin: int = 256
    cuts_sample_rows: int = 200_000
    min_child_weight: float = 1.0
    reg_lambda: float = 1.0
    subsample: float = 1.0
    colsample_bytree: float = 1.0
    k: int = 10
    workers: int = 0
    nthread: int = 0
    device: str = "cpu"
    eval_every: int = 1
    score_dist_trees: list[int] = field(default_factory=lambda: [20])
    score_dist_bins: int = 100
    base_margin: str = "auto"
    seed: int = 0
    sigmoid_gamma: float = 1.0
    stochastic_noise: float = 1.0
    stochastic_anneal: int = 100
    checkpoint_every: int = 25
    lease_ttl: float = 120.0
    lease_wait: float = 0.0
    tracker_timeout: int = 3600
    job_retries: int = 1
    blend_schedule: str = "linear"
    blend_at: int = 40
    blend_width: int = 40

    def __post_init__(self) -> None:
        for name in ("eval_every", "cuts_sample_rows", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.base_margin not in ("auto", "zero", "mean"):
            try:
                float(self.base_margin)
            except ValueError:
                raise ConfigError(
                    f"train.base_margin must be auto, zero, mean or a number, got {self.base_margin!r}"
                ) from None


@dataclass(frozen=True)
class GridConfig:
    """An experiment grid (:mod:`pipelines.app.grid`): per fold, the LambdaMART baseline,
    MSE-t for every switch point, every curriculum strategy at every switch point,
    and ``extra_paths`` (name -> path shorthand; curricula they name are the
    strategies, or ``extra_curricula``: name -> curriculum settings). ``seeds``: how many times each child whose
    trees depend on a seed (the ``random`` curriculum control, the stochastic_ndcg objective) is trained, the
    i-th time with the curriculum's and the training's seeds + i (:func:`pipelines.study.design.grid_children`); the
    report averages them."""

    experiment: str = "ltr-default"
    folds: list[int] = field(default_factory=lambda: [1])
    trees: int = 100
    switch_points: list[int] = field(default_factory=lambda: [20, 40, 60, 80])
    strategies: list[str] = field(default_factory=lambda: ["q_nrel", "q_bm25", "q_pagerank", "l_hrel", "random"])
    baseline: bool = True
    mse: bool = True
    objectives: str = "python"
    extra_paths: dict[str, str] = field(
        default_factory=lambda: {
            "paced_root_n": "lambdamart@paced.*:40,lambdamart:60",
            "blend_linear": "blend:100",
            "mse_on_q_nrel": "mse@q_nrel:40,lambdamart:60",
        }
    )
    extra_curricula: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "paced": {"strategy": "q_nrel", "pacing": "root_n", "stages": 4, "delta": 0.25},
        }
    )
    data: str = ""
    difficulty: str = ""
    log_models: bool = True
    seeds: int = 1

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ConfigError(f"grid.seeds must be >= 1 (1: every child once), got {self.seeds}")
        if self.objectives not in ("python", "builtin"):
            raise ConfigError(f"grid.objectives must be 'python' or 'builtin', got {self.objectives!r}")
        bad = [t for t in self.switch_points if not 0 < t < self.trees]
        if bad:
            raise ConfigError(f"grid.switch_points must lie strictly between 0 and grid.trees={self.trees}; got {bad}")
        choices = [s for s in STRATEGIES if s != "none"]
        unknown = [s for s in self.strategies if s not in choices]
        if unknown:
            raise ConfigError(f"grid.strategies: unknown {unknown}; choose from {choices}")


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow: ``uri`` empty = ``sqlite:///<work_dir>/mlflow.db``; ``artifacts`` empty = the tracking
    server's artifact store (``http(s)://`` URIs), else ``<work_dir>/mlartifacts``."""

    uri: str = ""
    artifacts: str = ""


@dataclass(frozen=True)
class ReportConfig:
    """``ltr report``: output folder (empty = ``<work_dir>/report``), randomisation test
    (``permutations`` sign flips, seeded by ``seed``), Table 2's model sizes, the paired bootstrap
    interval's resamples (``bootstrap``, seeded by ``seed``) and the risk levels of URisk and TRisk
    (``risk_alphas``: a loss counts 1 + alpha times), and the convergence table's target
    (``target_fraction`` of the baseline's final vali NDCG). ``trec_depth``: documents per query in the TREC run
    files (:mod:`pipelines.report.export`; 0 writes none).

    ``table2_sizes``: sizes n (trees) of the best MSE-t (chosen on validation) at which
    Table 2 looks for the smallest LambdaMART reaching its test NDCG. Empty = chosen on
    validation: LambdaMART's curve ends at T trees, so a size says something only while
    LambdaMART can still catch up within T; three sizes evenly spaced up to the last curve
    point before the MSE-t's mean vali NDCG exceeds the best LambdaMART reaches within T
    (:func:`pipelines.report.tables.default_table2_sizes`; on the default grid about 3, 5, 8:
    pure MSE after 20 trees already beats LambdaMART's 100). Every size must be a point of
    the NDCG curves (a multiple of ``train.eval_every``) and at most T.
    """

    out: str = ""
    permutations: int = 10000
    seed: int = 0
    table2_sizes: list[int] = field(default_factory=list)
    bootstrap: int = 10000
    risk_alphas: list[float] = field(default_factory=lambda: [1.0, 5.0])
    target_fraction: float = 0.99
    trec_depth: int = 1000

    def __post_init__(self) -> None:
        if self.trec_depth < 0:
            raise ConfigError(f"report.trec_depth must be >= 0 documents per query (0: none), got {self.trec_depth}")
        if self.permutations < 1:
            raise ConfigError(f"report.permutations must be >= 1, got {self.permutations}")
        if self.bootstrap < 2:
            raise ConfigError(f"report.bootstrap must be >= 2 resamples, got {self.bootstrap}")
        if not self.risk_alphas or any(not a >= 0 for a in self.risk_alphas):
            raise ConfigError(f"report.risk_alphas: one or more alphas >= 0, got {self.risk_alphas}")
        if not 0 < self.target_fraction <= 1:
            raise ConfigError(f"report.target_fraction must be in (0, 1], got {self.target_fraction}")
        bad = [n for n in self.table2_sizes if n < 1]
        if bad:
            raise ConfigError(f"report.table2_sizes: sizes are numbers of trees >= 1, got {bad}")


@dataclass(frozen=True)
class Config:
    """The whole resolved configuration of a run."""

    work_dir: str = "work"
    dataset: str = "mslr"
    spark: SparkConfig = field(default_factory=SparkConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    metric: NdcgSpec = field(default_factory=NdcgSpec)
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    report: ReportConfig = field(default_factory=ReportConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (the resolved config recorded with outputs)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DatasetSpec:
    """What a dataset looks like (``conf/datasets/<name>.yaml``)."""

    name: str
    n_features: int
    min_label: int = 0
    max_label: int = 4
    bm25_feature: int = 0
    pagerank_feature: int = 0
    description: str = ""

    def __post_init__(self) -> None:
        if self.n_features < 1:
            raise ConfigError(f"dataset {self.name}: n_features must be >= 1, got {self.n_features}")
        if self.min_label > self.max_label:
            raise ConfigError(f"dataset {self.name}: min_label {self.min_label} > max_label {self.max_label}")
        for role in ("bm25_feature", "pagerank_feature"):
            v = getattr(self, role)
            if not 0 <= v <= self.n_features:
                raise ConfigError(f"dataset {self.name}: {role} = {v} is not a feature id in 1..{self.n_features}")


# ---------------------------------------------------------------- loading
def conf_dir() -> Path:
    """The ``conf/`` directory: ``$LTR_CONF_DIR``, the source checkout's, or the installed copy."""
    env = os.environ.get("LTR_CONF_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2] / "conf"
    if here.is_dir():
        return here
    installed = Path(sys.prefix) / "share" / "ltr" / "conf"
    if installed.is_dir():
        return installed
    raise ConfigError("cannot find the conf/ directory; set LTR_CONF_DIR to the project's conf/")


def jobs_dir() -> Path:
    """The ``jobs/`` scripts spark-submit runs: ``$LTR_JOBS_DIR``, the source checkout's, or the installed copy
    (``<prefix>/share/ltr/jobs``: a DAG file copied to Airflow's dags folder finds them there)."""
    env = os.environ.get("LTR_JOBS_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2] / "jobs"
    if (here / "grid.py").is_file():
        return here
    installed = Path(sys.prefix) / "share" / "ltr" / "jobs"
    if (installed / "grid.py").is_file():
        return installed
    raise ConfigError("cannot find the jobs/ scripts; set LTR_JOBS_DIR to the project's jobs/")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against type ``tp`` (recursively) and return it in that type."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{where}: {value!r} is not a {_type_name(tp)}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping (section), got {value!r}")
        return from_dict(tp, value, where)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        kt, vt = args or (str, Any)
        return {_coerce(k, kt, f"{where}.{k}"): _coerce(v, vt, f"{where}.{k}") for k, v in value.items()}
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        et = args[0] if args else Any
        items = [_coerce(v, et, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # YAML reads 4g as str, but 8 as int: both are fine strings
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    raise ConfigError(f"{where}: unsupported config type {_type_name(tp)}")


def from_dict(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types raise ConfigError."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(f"unknown config key '{key}'; known keys here: {', '.join(names)}")
    kwargs = {}
    for k, v in data.items():
        kwargs[k] = _coerce(v, hints[k], f"{where}.{k}" if where else k)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:  # missing fields, or the class's own validation
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=value"`` -> (["a", "b"], value read as YAML)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set train.trees=200")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {text!r}: value is not valid YAML: {e}") from None
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str], cls: type | None = None) -> dict[str, Any]:
    """Return a copy of ``data`` with ``--set`` overrides applied (keys checked against ``cls``).

    Below a free-form mapping field (``spark.conf``) the rest of the key is one
    entry: ``--set spark.conf.spark.executor.memory=2g``.
    """
    out = json.loads(json.dumps(data))  # deep copy of plain data
    for text in overrides:
        path, value = parse_override(text)
        node: dict[str, Any] = out
        tp: Any = cls or Config
        i = 0
        while True:
            part = path[i]
            names = [f.name for f in dataclasses.fields(tp)]
            if part not in names:
                where = ".".join(path[: i + 1])
                raise ConfigError(f"--set {text!r}: unknown config key '{where}'; known keys here: {', '.join(names)}")
            ftp = typing.get_type_hints(tp)[part]
            if i == len(path) - 1:
                node[part] = value
                break
            if typing.get_origin(ftp) is dict:
                node.setdefault(part, {})[".".join(path[i + 1 :])] = value
                break
            if not dataclasses.is_dataclass(ftp):
                raise ConfigError(f"--set {text!r}: '{'.'.join(path[: i + 1])}' is a value, not a section")
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {text!r}: '{'.'.join(path[: i + 1])}' is not a section")
            node, tp, i = nxt, ftp, i + 1
    return out


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> Config:
    """Load ``path`` (default ``conf/default.yaml``), apply ``overrides``, return the frozen Config."""
    p = Path(path) if path else conf_dir() / "default.yaml"
    data = _read_yaml(p)
    data = apply_overrides(data, list(overrides or []))
    try:
        return from_dict(Config, data)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


def load_dataset_spec(name: str) -> DatasetSpec:
    """Load ``conf/datasets/<name>.yaml``."""
    d = conf_dir() / "datasets"
    p = d / f"{name}.yaml"
    if not p.is_file():
        known = sorted(x.stem for x in d.glob("*.yaml"))
        raise ConfigError(f"unknown dataset '{name}': no {p}; known datasets: {', '.join(known)}")
    data = _read_yaml(p)
    data.setdefault("name", name)
    try:
        return from_dict(DatasetSpec, data)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
