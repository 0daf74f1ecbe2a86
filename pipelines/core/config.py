"""Typed configuration: YAML in ``conf/`` loaded into frozen dataclasses.

* Defaults live in the dataclasses; ``conf/default.yaml`` writes the same
  defaults out (a test keeps the two equal), other files override part of them.
* Every section is typed, ``grid.extra_curricula`` included (:class:`ExtraCurriculum`), and each section checks
  its own values when it is made (``__post_init__``): a check is written once, here, and names the key's full
  path and the value. Nothing downstream (CLI, curriculum building, the worker loop) checks them again.
* An unknown or misspelt key anywhere (a section, a nested section, an extra curriculum, a ``--set``) is an
  error naming its full path and the closest known key (``grid.extra_curricula.paced.strateg``: did you mean
  ``...strategy``?), in one line; the CLI exits 2.
* Values are checked against the field types (``"200"`` is not an int, ``"0.3"`` not a number).
* Command-line overrides: ``--set section.key=value``; the value is read as YAML
  (``--set train.trees=200``, ``--set spark.conf={"spark.a": "b"}``).

Dataset descriptions (feature count, label range, feature roles) live in
``conf/datasets/<name>.yaml`` and load into :class:`DatasetSpec`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import os
import re
import sys
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

import yaml

from pipelines.core.errors import UserError
from udfs.conventions import NdcgSpec
from udfs.curriculum import PACINGS, STRATEGIES, anti_of, no_order
from udfs.model import Model

log = logging.getLogger(__name__)

T = TypeVar("T")


class ConfigError(UserError):
    """Invalid configuration: the message names the key, the source and the fix."""


#: Labels are stored as int8 (``udfs.schema.LABEL_TYPE``).
LABEL_MIN, LABEL_MAX = -128, 127
#: Parquet codecs that both pyarrow (ingest tasks) and Spark (merging) write.
PARQUET_CODECS = ("snappy", "zstd", "gzip", "lz4", "none")
#: ``difficulty.empty_queries``: how curricula treat queries without a relevant document.
EMPTY_QUERY_POLICIES = ("last", "exclude", "as_metric")


#: When a Spark Connect session ships the project to its server's workers (``spark.ship``).
SHIP = ("auto", "always", "never")


# --------------------------------------------------------------- sections
@dataclass(frozen=True)
class SparkConfig:
    """How to build the SparkSession (:func:`pipelines.core.session.build_session`).

    ``master``: empty means spark-submit's ``--master`` if there is one, else
    ``local[*]``. ``conf``: any further Spark properties, passed through.
    """

    #: Spark master URL; empty: spark-submit's --master if any, else local[*]
    master: str = ""
    #: Spark Connect: sc://HOST:PORT of a server, or local[N] for one in this process; auto: $SPARK_REMOTE if set,
    #: else the server `ltr server start` runs for work_dir, else a classic session on spark.master; empty: classic
    #: unless $SPARK_REMOTE is set (how-to: Spark Connect)
    remote: str = "auto"
    #: Spark Connect: ship this project's code to the server's Python workers as session artifacts (auto: when they
    #: cannot import it or run other code; always; never: refuse such a server) (how-to: Spark Connect)
    ship: str = "auto"
    #: the Spark application's name (Spark UI, cluster manager)
    app_name: str = "ltr"
    #: spark.sql.shuffle.partitions of the session
    shuffle_partitions: int = 8
    #: the driver JVM's heap; the local master runs its tasks in this JVM too (how-to: size memory)
    driver_memory: str = "1g"
    #: rows per Arrow batch handed to a Pandas UDF (spark.sql.execution.arrow.maxRecordsPerBatch)
    arrow_max_records_per_batch: int = 10000
    #: start the Spark web UI
    ui: bool = False
    #: the JVM's log level (WARN, INFO, ERROR, ...)
    log_level: str = "WARN"
    #: any further Spark properties, passed through, e.g. {spark.executor.memory: 8g}
    conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ship not in SHIP:
            raise ConfigError(f"spark.ship must be one of {', '.join(SHIP)}, got {self.ship!r}")


#: Shapes of synthetic data ``ltr generate`` writes (:mod:`pipelines.data.generate`): each the layout, feature
#: count and label range of a real dataset (MSLR-WEB30K, Istella LETOR, Yahoo! LTR Challenge set 1).
GENERATE_SHAPES = ("mslr", "istella", "yahoo")


@dataclass(frozen=True)
class GenerateConfig:
    """Synthetic LETOR data (:mod:`pipelines.data.generate`) shaped like ``shape``'s real dataset."""

    #: number of queries to generate (MSLR-WEB30K has 31531)
    queries: int = 600
    #: random seed: the same seed writes the same files
    seed: int = 2018
    #: generator processes; 0 = one per core
    workers: int = 0
    #: the real dataset to mimic: mslr (Fold1..5), istella (full/train,test) or yahoo (set1.train,valid,test)
    shape: str = "mslr"
    #: share of training rows whose label is redrawn uniformly (seeded; mslr: fold 1's training subsets S1-S3, so
    #: only fold 1 validates and tests on clean labels; the other shapes: the training file); 0: clean labels
    label_noise: float = 0.0

    def __post_init__(self) -> None:
        if self.shape not in GENERATE_SHAPES:
            raise ConfigError(
                f"generate.shape (--shape) must be one of {', '.join(GENERATE_SHAPES)}, got {self.shape!r}"
            )
        if not 0.0 <= self.label_noise <= 1.0:
            raise ConfigError(
                f"generate.label_noise (--label-noise) must be in [0, 1] (the share of training rows whose label is "
                f"redrawn), got {self.label_noise}"
            )


@dataclass(frozen=True)
class IngestConfig:
    """LETOR text to Parquet (:mod:`pipelines.data.ingest`).

    ``n_features`` / ``min_label`` / ``max_label``: 0 / null take the dataset's
    values (``conf/datasets``). ``chunk_bytes``: nominal bytes of text per task.
    """

    #: true: fail at the first bad line instead of quarantining it
    strict: bool = False
    #: nominal bytes of LETOR text per Spark task (32 MiB)
    chunk_bytes: int = 32 * 1024 * 1024
    #: the Parquet codec
    compression: str = "snappy"
    #: number of features; 0: the dataset's
    n_features: int = 0
    #: smallest valid label; null: the dataset's
    min_label: int | None = None
    #: largest valid label; null: the dataset's
    max_label: int | None = None
    #: quarantined lines quoted in _manifest.json
    max_examples: int = 20

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
    """Per-query difficulty (:mod:`pipelines.data.scoring`): feature ids of the rankers
    whose NDCG is scored; 0 takes the dataset's role (MSLR: BM25 110, PageRank 130).

    ``empty_queries``: how the curricula treat queries with no relevant document
    (their NDCG is undefined; ``metric.empty`` only fills it in):

    * ``last`` (default): they are the hardest queries of every difficulty order that reads
      the labels (q_nrel, q_bm25, q_pagerank), after all the others, by qid; a label-free order
      (q_size, sigma_bm25) ranks them by its score like any query;
    * ``exclude``: in every strategy but ``none`` they enter only the last stage
      (all training data); the earlier stages' shares count the other queries only;
    * ``as_metric``: q_bm25 / q_pagerank order them by ``metric.empty`` like any score
      (with 1.0 they come first: the behaviour before this option).

    See :mod:`pipelines.data.curricula` for what each strategy does with it.
    """

    #: feature id of BM25, whose per-query NDCG is q_bm25's score; 0: the dataset's (MSLR: 110)
    bm25_feature: int = 0
    #: feature id of PageRank, whose per-query NDCG is q_pagerank's score; 0: the dataset's (MSLR: 130)
    pagerank_feature: int = 0
    #: queries without a relevant document (NDCG undefined) in the curricula: last (hardest in every difficulty
    #: order), exclude (only in the last stage, all data) or as_metric (q_bm25/q_pagerank score them metric.empty)
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


#: What an unknown strategy's message adds to the strategies it lists.
ANTI_HINT = ", or anti_<one that orders queries by a score> (its anti-curriculum)"

#: Curriculum settings that ``ltr curriculum`` also takes as a flag (``--fraction`` ...).
_CURRICULUM_FLAGS = ("strategy", "fraction", "pacing", "stages", "delta", "seed")


def _check_curriculum(values: Mapping[str, Any], where: str, flags: bool) -> None:
    """The checks of curriculum settings, written once: every field of the ``curriculum:`` section
    (:class:`CurriculumConfig`), and the fields an extra curriculum sets (:class:`ExtraCurriculum`).

    ``where``: the settings' path in the config (``curriculum``, ``grid.extra_curricula.NAME``); ``flags``:
    name the ``ltr curriculum`` flag beside a key that has one. Raises :class:`ConfigError` at the first problem.
    """

    def key(name: str) -> str:
        flag = f" (--{name})" if flags and name in _CURRICULUM_FLAGS else ""
        return f"{where}.{name}{flag}"

    if "strategy" in values and values["strategy"] not in STRATEGIES:
        ordered = [n for n, s in STRATEGIES.items() if not s.reverse]
        why = (
            no_order(values["strategy"]) or unknown_name("curriculum strategy", values["strategy"], ordered) + ANTI_HINT
        )
        raise ConfigError(f"{key('strategy')}: {why}")
    if values.get("pacing") and values["pacing"] not in PACINGS:
        raise ConfigError(
            f"{key('pacing')}: {unknown_name('pacing function', values['pacing'], list(PACINGS))}, or empty for two "
            "stages"
        )
    for name in ("fraction", "delta"):
        if name in values and not 0.0 < values[name] <= 1.0:
            raise ConfigError(f"{key(name)} must be in (0, 1] (a share of the training queries), got {values[name]}")
    if "stages" in values and values["stages"] < 2:
        raise ConfigError(f"{key('stages')} must be >= 2 (stages of a paced curriculum), got {values['stages']}")
    if values.get("strategy") == "l_hrel" and values.get("pacing"):
        raise ConfigError(
            f"{key('pacing')} {values['pacing']!r}: strategy l_hrel is a document label filter, not a query order, "
            "so it takes no pacing: it always has two stages (the filtered documents, then all)"
        )
    if "hrel_labels" in values:
        # The dataset's label range is checked when a curriculum is built (pipelines.data.curricula.check_hrel_labels).
        labels = list(values["hrel_labels"])
        if not labels:
            raise ConfigError(
                f"{where}.hrel_labels is empty: l_hrel's first stage would hold no document; "
                "list the labels it keeps, e.g. [0, 3, 4]"
            )
        dup = sorted({v for v in labels if labels.count(v) > 1})
        if dup:
            raise ConfigError(f"{where}.hrel_labels {labels} lists label {dup[0]} twice")
        if max(labels) <= 0:
            raise ConfigError(
                f"{where}.hrel_labels {labels} holds no relevant label (> 0): l_hrel's first stage would have no "
                "relevant document, so no ranking gradient; add one, e.g. [0, 3, 4]"
            )


@dataclass(frozen=True)
class CurriculumConfig:
    """Curriculum selection (:mod:`pipelines.data.curricula`).

    Two stages by default: the easiest ``fraction`` of the training queries,
    then all of them. With ``pacing`` (linear, root_n, geometric, step),
    ``stages`` stages whose shares grow from ``delta`` to 1. ``strategy``: one of
    :data:`STRATEGIES` (``l_hrel`` takes no pacing).
    """

    #: the difficulty order: q_nrel, q_bm25, q_pagerank (oracle), q_size, sigma_bm25 (label-free), l_hrel (a label
    #: filter), random (the control), none, a plug-in difficulty score, or anti_<any of those that order queries by a
    #: score> (its anti-curriculum: the hardest first)
    strategy: str = "q_nrel"
    #: two-stage curriculum: the easiest share of the training queries, then everything
    fraction: float = 0.25
    #: empty: two stages; linear, root_n, geometric, step or a plug-in pacing function: a multi-stage curriculum
    pacing: str = ""
    #: stages of a paced curriculum (the last one is all data)
    stages: int = 4
    #: share of the training queries in the first paced stage
    delta: float = 0.25
    #: seed of the random strategy's order
    seed: int = 2018
    #: labels l_hrel keeps in its first stage (MSLR 0-4; each in the dataset's label range, one > 0; LETOR 4.0: [0,
    #: 2])
    hrel_labels: list[int] = field(default_factory=lambda: [0, 3, 4])

    def __post_init__(self) -> None:
        _check_curriculum({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, "curriculum", True)


@dataclass(frozen=True)
class TeacherConfig:
    """The teacher whose judgement the ``model`` difficulty scores are (``teacher_margin``, ``teacher_loss``,
    ``teacher_ndcg``; :mod:`udfs.teacher`): a training path trained by the plan on the fold's training queries.

    With ``crossfit`` K >= 2 (the default, 5) the training queries are split into K groups by a seeded hash of the
    qid, and each group is scored by the teacher trained on the other K - 1 groups: no query's difficulty comes from
    a model that saw its labels (a teacher that scores its own training queries rates them by how well it fitted
    them, and a curriculum built on that orders queries by the teacher's memory, not their difficulty). ``0`` is the
    study's literal protocol (Penha & Hauff 2020): one teacher trained on every training query scores them all.
    A section of its own, so that a study with no teacher-based curriculum keeps its keys."""

    #: the teacher's training path (e.g. lambdamart:100, mse:50,lambdamart:50); its segments train on the teacher's
    #: own queries (every training query outside the group it scores), so none names a curriculum
    path: str = "lambdamart:100"
    #: cross-fitting groups K (>= 2): each group scored by the teacher trained on the other K - 1; 0: one teacher
    #: trained on every training query scores them all (the study's protocol)
    crossfit: int = 5
    #: seed of the hash of the qid that splits the queries into the cross-fitting groups
    seed: int = 2018

    def __post_init__(self) -> None:
        if self.crossfit == 1 or self.crossfit < 0:
            raise ConfigError(
                f"teacher.crossfit must be 0 (one teacher trained on every training query) or a number of groups "
                f">= 2, got {self.crossfit}"
            )
        if "@" in self.path:
            name = self.path.split("@", 1)[1].split(":", 1)[0].split(".", 1)[0]
            s = STRATEGIES.get(name)
            cycle = s is not None and s.kind == "model"
            raise ConfigError(
                f"teacher.path {self.path!r}: "
                + (
                    f"curriculum {name} is ordered by the teacher's own scores, a cycle"
                    if cycle
                    else f"a teacher trains on its own queries (the training queries outside the group it scores), "
                    f"not on curriculum {name}"
                )
                + "; give objectives and trees only, e.g. lambdamart:100"
            )


@dataclass(frozen=True)
class SelfPacedConfig:
    """Self-paced curricula: the path segments ``OBJ@selfpaced:T`` (the easiest queries first, by the model being
    trained), ``OBJ@antipaced:T`` (the hardest first) and ``OBJ@randompaced:T`` (a seeded random choice), which
    re-choose their training queries every ``every`` trees, keeping a share that a pacing function raises from
    ``delta`` to 1 over the segment (:mod:`pipelines.kernel.selfpaced`). A section of its own, so that a study
    with no self-paced segment keeps its keys; the settings are in the key of every self-paced node."""

    #: trees between two selections (a self-paced node checkpoints at each); a segment needs at least two
    every: int = 10
    #: a query's ease under the current margins: ndcg (its NDCG, higher is easier) or loss (its mean pairwise
    #: logistic loss, lower is easier)
    by: str = "ndcg"
    #: the pacing function of the shares (linear, root_n, geometric, step or a plug-in's), from delta to 1
    pacing: str = "root_n"
    #: share of the training queries the first selection keeps
    delta: float = 0.25
    #: seed of the random control's choices (randompaced), added to a grid.seeds repetition's
    seed: int = 2018

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ConfigError(f"selfpaced.every must be a number of trees >= 1, got {self.every!r}")
        if self.by not in ("ndcg", "loss"):
            raise ConfigError(f"selfpaced.by must be ndcg or loss, got {self.by!r}")
        if not 0.0 < self.delta <= 1.0:
            raise ConfigError(f"selfpaced.delta (the first selection's share) must be in (0, 1], got {self.delta}")
        if self.pacing not in PACINGS:
            raise ConfigError(f"selfpaced.pacing: {unknown_name('pacing function', self.pacing, list(PACINGS))}")


class ExtraCurriculum(dict[str, Any]):
    """One curriculum of ``grid.extra_curricula``: the ``curriculum:`` settings it changes, by name; the
    others are the ``curriculum:`` section's (:meth:`over`). Typed and checked when made, then frozen.

    Its keys are :class:`CurriculumConfig` fields (another key is an error naming the closest one), its values
    of their types (``"0.3"`` is not a fraction), checked as the section checks them (``fraction``, ``delta``,
    ``stages``, ``pacing``, ``strategy``...). A read-only mapping rather than a dataclass, because the keys of a
    study (``asdict(cfg.grid)``) and of a curriculum hold the settings as written: an extra curriculum adds no
    defaults of its own to them.

    Parameters
    ----------
    settings : Mapping[str, Any] or Iterable[tuple[str, Any]]
        Setting name -> value, e.g. ``{"strategy": "q_nrel", "pacing": "root_n", "stages": 4}``.
    where : str
        Its path in the config, named by the errors (``grid.extra_curricula.paced``).

    Raises
    ------
    ConfigError
        An unknown setting, a value of the wrong type or one the curriculum section refuses.
    """

    def __init__(
        self,
        settings: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
        /,
        *,
        where: str = "grid.extra_curricula.<name>",
    ) -> None:
        given = dict(settings)
        hints = typing.get_type_hints(CurriculumConfig)
        known = [f.name for f in dataclasses.fields(CurriculumConfig)]
        typed = {}
        for k, v in given.items():
            if k not in hints:
                raise ConfigError(unknown_key(f"{where}.{k}", known))
            typed[k] = _coerce(v, hints[k], f"{where}.{k}")
        _check_curriculum(typed, where, False)
        super().__init__(typed)

    def over(self, base: CurriculumConfig) -> CurriculumConfig:
        """The curriculum's complete settings: ``base`` (the ``curriculum:`` section) with these changes."""
        return replace(base, **self)

    def _frozen(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("an ExtraCurriculum is frozen: make a new one (config sections never change)")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _frozen

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and deepcopy make it anew (the checks run again)
        return (type(self), (dict(self),))

    def __repr__(self) -> str:
        return f"ExtraCurriculum({dict.__repr__(self)})"


#: Where XGBoost's tracker may run (``train.tracker``).
TRACKERS = ("auto", "driver", "stage")
#: ``train.read``: who reads a training worker's rows (:class:`TrainConfig`).
READS = ("auto", "worker", "spark")


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
    ``codes_in_memory_gib``: a worker keeps its training rows' bin codes in memory up to this size (GiB), and
    in a local file beyond it (:class:`pipelines.kernel.matrices.SpilledCodes`; 0: always in a file); the trees
    are the same either way.
    ``read``: how a training worker gets its rows: ``worker`` (each barrier task reads the fold's Parquet
    with pyarrow, :mod:`pipelines.worker.rows`), ``spark`` (the driver's job shuffles them to the tasks), or
    ``auto`` (``worker`` for a local dataset path, ``spark`` for other URIs); the trees are the same.
    """

    #: the training path OBJ[@DATA]:TREES,... of `ltr train` (reference: training paths)
    path: str = "mse:40,lambdamart:60"
    #: learning rate
    eta: float = 0.05
    #: leaves per tree, grown best-first (lossguide)
    leaves: int = 64
    #: histogram bins per feature (the fold's global cuts)
    max_bin: int = 256
    #: the histogram cuts come from a deterministic sample of at most this many training rows, whole queries
    cuts_sample_rows: int = 200_000
    #: XGBoost's min_child_weight: the least hessian sum of a leaf
    min_child_weight: float = 1.0
    #: XGBoost's reg_lambda: L2 regularisation of leaf values
    reg_lambda: float = 1.0
    #: share of training rows sampled per tree (1: all)
    subsample: float = 1.0
    #: share of features sampled per tree (1: all)
    colsample_bytree: float = 1.0
    #: NDCG@k of the LambdaMART deltas and of its top-k pairs
    k: int = 10
    #: barrier tasks (XGBoost workers); 0 = one per task slot (cluster), one with all cores (local)
    workers: int = 0
    #: threads per worker; 0 = the cores of its share
    nthread: int = 0
    #: cpu or cuda
    device: str = "cpu"
    #: NDCG on vali and test after every k-th tree (the curves' step)
    eval_every: int = 1
    #: trees after which the test score distributions per label are kept (Figure 2)
    score_dist_trees: list[int] = field(default_factory=lambda: [20])
    #: bins of those score distributions
    score_dist_bins: int = 100
    #: the starting score: auto (the mean label for paths that begin with a regression objective, else 0), zero,
    #: mean or a number
    base_margin: str = "auto"
    #: the training seed (sampling, seeded objectives); a grid.seeds repetition i adds i
    seed: int = 0
    #: trees per checkpoint inside a plan node (each node also checkpoints at its end)
    checkpoint_every: int = 25
    #: seconds a node's lease lives without renewal (renewed every ttl/3 while it trains)
    lease_ttl: float = 120.0
    #: seconds to wait for another process's lease on a node before stopping (exit 75)
    lease_wait: float = 0.0
    #: seconds XGBoost's tracker waits for workers (a lost worker ends the job, never hangs it)
    tracker_timeout: int = 3600
    #: where XGBoost's tracker runs: driver (this process: the executors must reach it), stage (in the barrier
    #: stage, on the first task's executor, as xgboost.spark does; no live progress), or auto (stage for a client of
    #: a Spark Connect server on another machine or on a cluster master, else driver)
    tracker: str = "auto"
    #: a failed training job is started again this often, from the last checkpoints
    job_retries: int = 1
    #: a worker's training bin codes stay in memory up to this many GiB, else in a local file (the same trees)
    codes_in_memory_gib: float = 1.0
    #: who reads a training worker's rows: worker (each reads its Parquet), spark (a shuffle) or auto (worker for a
    #: local path)
    read: str = "auto"

    #: The field that says what to train (the path), beside the model part and the run part.
    WHAT = ("path",)

    @property
    def model(self) -> Model:
        """The model part: everything a tree depends on, keyed whole (:class:`udfs.model.Model`)."""
        values = {f.name: getattr(self, f.name) for f in fields(Model)}
        return Model(**{**values, "score_dist_trees": tuple(values["score_dist_trees"])})

    @property
    def run(self) -> TrainRun:
        """The run part: how the trees are run, in no key (:class:`TrainRun`)."""
        return TrainRun(**{f.name: getattr(self, f.name) for f in fields(TrainRun)})

    def __post_init__(self) -> None:
        if self.read not in READS:
            raise ConfigError(f"train.read must be one of {', '.join(READS)}, got {self.read!r}")
        if self.tracker not in TRACKERS:
            raise ConfigError(f"train.tracker must be one of {', '.join(TRACKERS)}, got {self.tracker!r}")
        if not self.codes_in_memory_gib >= 0:
            raise ConfigError(f"train.codes_in_memory_gib must be >= 0, got {self.codes_in_memory_gib}")
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


@dataclass(frozen=True, kw_only=True)
class TrainRun:
    """The run part of ``train:``: how trees are built, never what they are (in no key; see :class:`TrainConfig`
    for each setting's meaning and default)."""

    workers: int
    nthread: int
    checkpoint_every: int
    tracker_timeout: int
    tracker: str
    job_retries: int
    lease_ttl: float
    lease_wait: float
    codes_in_memory_gib: float
    read: str


@dataclass(frozen=True)
class GridConfig:
    """An experiment grid (:mod:`pipelines.app.grid`): per fold, the LambdaMART baseline,
    MSE-t for every switch point, every curriculum strategy at every switch point,
    and ``extra_paths`` (name -> path shorthand; curricula they name are the
    strategies, or ``extra_curricula``: name -> the curriculum settings it changes, :class:`ExtraCurriculum`).
    ``seeds``: how many times each child whose
    trees depend on a seed (the ``random`` curriculum control, the noisy_lambdamart objective) is trained, the
    i-th time with the curriculum's and the training's seeds + i (:func:`pipelines.study.design.grid_children`); the
    report averages them."""

    #: the MLflow experiment
    experiment: str = "ltr-default"
    #: the folds of the study
    folds: list[int] = field(default_factory=lambda: [1])
    #: T, the trees of every path (the paper: 500)
    trees: int = 100
    #: the trees t at which MSE-t and the curricula switch to LambdaMART on all data
    switch_points: list[int] = field(default_factory=lambda: [20, 40, 60, 80])
    #: the curriculum strategies of the grid, each at every switch point
    strategies: list[str] = field(default_factory=lambda: ["q_nrel", "q_bm25", "q_pagerank", "l_hrel", "random"])
    #: train the LambdaMART baseline, T trees
    baseline: bool = True
    #: train MSE-t, the continuation method, at every switch point
    mse: bool = True
    #: python (our lambdamart and mse) or builtin (XGBoost's rank:ndcg and reg:squarederror)
    objectives: str = "python"
    #: name -> training path: more children per fold; curricula named by strategy or by extra_curricula
    extra_paths: dict[str, str] = field(
        default_factory=lambda: {
            "paced_root_n": "lambdamart@paced.*:40,lambdamart:60",
            "blend_linear": "blend:100",
            "mse_on_q_nrel": "mse@q_nrel:40,lambdamart:60",
        }
    )
    #: name -> the curriculum settings it changes (the others: the curriculum section's), checked alike
    extra_curricula: dict[str, ExtraCurriculum] = field(
        default_factory=lambda: {
            "paced": ExtraCurriculum({"strategy": "q_nrel", "pacing": "root_n", "stages": 4, "delta": 0.25}),
        }
    )
    #: the dataset; empty: <work_dir>/dataset
    data: str = ""
    #: the difficulty scores; empty: <work_dir>/difficulty (computed if missing)
    difficulty: str = ""
    #: log every child's model with mlflow.xgboost
    log_models: bool = True
    #: children that depend on a seed (random curriculum, seeded objectives) are trained this many times, seeds +
    #: 0..n-1
    seeds: int = 1
    #: add the anti-curriculum (anti_<strategy>: the same score, hardest first) of every strategy of grid.strategies
    #: that orders queries by a score, at every switch point
    anti: bool = False
    #: add the self-paced curriculum and its two controls (selfpaced, antipaced, randompaced: queries chosen by the
    #: model being trained, the selfpaced: section) at every switch point
    selfpaced: bool = False

    def __post_init__(self) -> None:
        # entries given as plain mappings (GridConfig(extra_curricula={...}) in Python) are typed and checked too
        object.__setattr__(
            self,
            "extra_curricula",
            {
                name: c
                if isinstance(c, ExtraCurriculum)
                else _coerce(c, ExtraCurriculum, f"grid.extra_curricula.{name}")
                for name, c in self.extra_curricula.items()
            },
        )
        if self.seeds < 1:
            raise ConfigError(f"grid.seeds must be >= 1 (1: every child once), got {self.seeds}")
        if self.objectives not in ("python", "builtin"):
            raise ConfigError(f"grid.objectives must be 'python' or 'builtin', got {self.objectives!r}")
        bad = [t for t in self.switch_points if not 0 < t < self.trees]
        if bad:
            raise ConfigError(f"grid.switch_points must lie strictly between 0 and grid.trees={self.trees}; got {bad}")
        choices = [s for s in STRATEGIES if s != "none"]
        unknown = [s for s in self.strategies if s not in choices]
        why = next((w for w in map(no_order, unknown) if w), None)
        if why:
            raise ConfigError(f"grid.strategies: {why}")
        if unknown:
            raise ConfigError(f"grid.strategies: unknown {unknown}; choose from {choices}")

    def all_strategies(self) -> list[str]:
        """``strategies`` and, with ``anti``, the anti-curriculum of each one that has an order (after it, each
        once): the curriculum strategies the grid trains at every switch point."""
        anti = [a for a in map(anti_of, self.strategies) if a] if self.anti else []
        return list(dict.fromkeys([*self.strategies, *anti]))


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow: ``uri`` empty = ``sqlite:///<work_dir>/mlflow.db``; ``artifacts`` empty = the tracking
    server's artifact store (``http(s)://`` URIs), else ``<work_dir>/mlartifacts``."""

    #: the MLflow tracking URI; empty: sqlite:///<work_dir>/mlflow.db
    uri: str = ""
    #: artifact location of a new experiment; empty: the server's store (http(s):// uri), else
    #: <work_dir>/mlartifacts
    artifacts: str = ""

    def __post_init__(self) -> None:
        from pipelines.core.secrets import has_secret, redact

        if has_secret(self.artifacts):
            raise ConfigError(
                f"tracking.artifacts {redact(self.artifacts)!r} holds a credential: MLflow would store it as the "
                "experiment's artifact location, which every reader of the experiment sees; give it in the "
                "environment instead (MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD for a tracking server's "
                "artifacts, the storage's own variables for S3, GCS or Azure)"
            )


#: The report's paired tests, by their name in ``report.primary_test``.
PRIMARY_TESTS = ("randomisation", "t")


@dataclass(frozen=True)
class ReportConfig:
    """``ltr report``: output folder (empty = ``<work_dir>/report``), randomisation test
    (``permutations`` sign flips, seeded by ``seed``), Table 2's model sizes, the paired bootstrap
    interval's resamples (``bootstrap``, seeded by ``seed``) and the risk levels of URisk and TRisk
    (``risk_alphas``: a loss counts 1 + alpha times), and the convergence table's target
    (``target_fraction`` of the baseline's final vali NDCG). ``primary_test``: the test of the headline and of
    every significance mark (``randomisation`` or ``t``); ``margin``: the non-inferiority margin in NDCG.
    ``trec_depth``: documents per query in the TREC run
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

    #: the report's folder; empty: <work_dir>/report
    out: str = ""
    #: sign flips of the randomisation test (an exact test when 2^queries is fewer)
    permutations: int = 10000
    #: seed of those sign flips and of the bootstrap
    seed: int = 0
    #: Table 2's sizes n (trees) of the best MSE-t; empty: 3 sizes chosen on vali, evenly spaced up to the last n at
    #: which LambdaMART can still catch up within T trees
    table2_sizes: list[int] = field(default_factory=list)
    #: resamples of the paired bootstrap interval of each mean difference
    bootstrap: int = 10000
    #: URisk and TRisk against the baseline at these alphas (losses weighted 1 + alpha)
    risk_alphas: list[float] = field(default_factory=lambda: [1.0, 5.0])
    #: convergence: trees each system needs to reach this fraction of the baseline's final vali NDCG
    target_fraction: float = 0.99
    #: documents per query in the TREC run files runs/<system>.fold<F>.trec (0: none)
    trec_depth: int = 1000
    #: the test of the headline and of every significance mark: randomisation or t (the other is a robustness
    #: column)
    primary_test: str = "randomisation"
    #: non-inferiority margin in NDCG: as good as LambdaMART = one-sided 95% lower bound of the difference above
    #: -margin
    margin: float = 0.005

    def __post_init__(self) -> None:
        if self.primary_test not in PRIMARY_TESTS:
            raise ConfigError(
                f"report.primary_test must be one of {', '.join(PRIMARY_TESTS)}, got {self.primary_test!r}"
            )
        if not 0 <= self.margin < 1:
            raise ConfigError(f"report.margin is an NDCG difference in [0, 1), got {self.margin}")
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


#: Where plug-ins come from, for messages (and only from there: never from ``--set`` or an Airflow run's conf).
PLUGIN_SOURCES = (
    "--plugin FILE_OR_MODULE, a config file's `plugins: [...]` or an installed package's entry point in the "
    "group ltr.plugins"
)


@dataclass(frozen=True)
class PluginsConfig:
    """Plug-ins (:mod:`pipelines.plugins`): what to load (files and modules: ``--plugin``, a config file's
    ``plugins:`` list; installed packages' ``ltr.plugins`` entry points are always loaded). ``load`` is set only by
    those two: ``--set plugins.load`` is refused (:data:`PLUGIN_SOURCES`). A plug-in component's settings are in
    ``components:``, as a built-in's are."""

    #: plug-in files (relative to the config file) and modules to load; also --plugin and installed packages' entry
    #: points (group ltr.plugins); never from --set or an Airflow run's conf
    load: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Config:
    """The whole resolved configuration of a run."""

    #: where generated data, datasets, models, difficulty scores, curricula and reports go
    work_dir: str = "work"
    #: the dataset description conf/datasets/<name>.yaml: feature count, label range, feature roles (mslr, istella,
    #: yahoo, letor4...)
    dataset: str = "mslr"
    spark: SparkConfig = field(default_factory=SparkConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    metric: NdcgSpec = field(default_factory=NdcgSpec)
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    selfpaced: SelfPacedConfig = field(default_factory=SelfPacedConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    plugins: PluginsConfig = field(default_factory=PluginsConfig)
    #: each component's own settings, <component name>: {<setting>: value}, e.g. blend: {at: 200}: an objective,
    #: difficulty score or pacing function, built-in or plug-in (docs/reference/components.md and `ltr plugins` list
    #: them with their defaults), checked against what the component declares; only the results that use a
    #: component are keyed by its settings
    components: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # an extra curriculum is complete with the curriculum: section's other settings (l_hrel takes no pacing)
        for name, extra in self.grid.extra_curricula.items():
            try:
                extra.over(self.curriculum)
            except ConfigError as e:
                raise ConfigError(f"grid.extra_curricula.{name} (its other settings from curriculum:): {e}") from None

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
    bm25_feature: int = 0  # 0: the dataset has none (the q_bm25 curriculum is refused)
    pagerank_feature: int = 0  # 0: none (q_pagerank is refused)
    description: str = ""
    download: str = ""  # where the set is published
    layout: str = ""  # its published files, as `ltr ingest --src` finds them
    absent: str = "zero"  # an absent feature of a sparse line: "zero" or "missing" (NaN; udfs.letor_parse)
    overflow: str = "reject"  # a value beyond float32: "reject" (quarantined) or "clamp" (counted)

    def __post_init__(self) -> None:
        if self.n_features < 1:
            raise ConfigError(f"dataset {self.name}: n_features must be >= 1, got {self.n_features}")
        if self.absent not in ("zero", "missing"):
            raise ConfigError(f"dataset {self.name}: absent must be zero or missing, got {self.absent!r}")
        if self.overflow not in ("reject", "clamp"):
            raise ConfigError(f"dataset {self.name}: overflow must be reject or clamp, got {self.overflow!r}")
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


def unknown_key(path: str, known: Sequence[str]) -> str:
    """The one-line message of an unknown config key: its full ``path`` and the closest of the ``known`` keys
    of its section (:func:`difflib.get_close_matches`), else all of them.

    Parameters
    ----------
    path : str
        The key's full path, e.g. ``grid.extra_curricula.paced.strateg``.
    known : Sequence[str]
        The keys its section has.

    Returns
    -------
    str
        ``unknown config key 'grid.extra_curricula.paced.strateg'; did you mean
        'grid.extra_curricula.paced.strategy'?`` (or ``...; known keys here: a, b``).
    """
    parent, _, name = path.rpartition(".")
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f"unknown config key '{path}'; did you mean '{parent + '.' if parent else ''}{close[0]}'?"
    return f"unknown config key '{path}'; known keys here: {', '.join(known)}"


def unknown_name(kind: str, name: str, known: Sequence[str]) -> str:
    """``unknown objective 'lambamart'; did you mean 'lambdamart'? (one of: ...)``: a component's name that its
    registry does not hold, the closest registered name (:func:`difflib.get_close_matches`) and all of them."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} {name!r}{hint} (one of: {', '.join(known)})"


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
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping (section), got {value!r}")
        return from_dict(tp, value, where)
    if tp is ExtraCurriculum:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping (the curriculum: settings it changes), got {value!r}")
        return ExtraCurriculum(value, where=where)
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
    names = [f.name for f in dataclasses.fields(cast(Any, cls))]  # cls is a dataclass (the callers' sections)
    kwargs = {}
    for k, v in data.items():
        path = f"{where}.{k}" if where else str(k)
        if k not in names:
            raise ConfigError(unknown_key(path, names))
        kwargs[k] = _coerce(v, hints[k], path)
    try:
        return cls(**kwargs)
    except ConfigError:  # the section's own checks: they name the key's path and value
        raise
    except (TypeError, ValueError) as e:  # missing fields, or the checks of a type from udfs (NdcgSpec)
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:  # one line: where, and what the parser found
        at, what = _yaml_problem(e)
        raise ConfigError(f"{path}{at}: invalid YAML: {what}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _yaml_problem(e: yaml.YAMLError) -> tuple[str, str]:
    """(``":line:column"`` or ``""``, what the parser found): a YAML error as one line."""
    mark = getattr(e, "problem_mark", None)
    at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    return at, getattr(e, "problem", None) or " ".join(str(e).split())


def _check_values(value: Any, where: str, seen: tuple[int, ...] = ()) -> None:
    """A config's values as YAML read them: a tree (a self-referencing alias, ``&a [*a]``, would make every
    consumer of the config recurse without end) of finite numbers (``.nan`` and ``.inf`` pass every bound check a
    setting has). :class:`ConfigError` naming the key otherwise."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if isinstance(value, (dict, list)):
        if id(value) in seen:
            raise ConfigError(f"{where}: the value refers to itself (a YAML alias inside its own anchor)")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            _check_values(v, f"{where}.{k}" if isinstance(value, dict) else f"{where}[{k}]", (*seen, id(value)))


#: What an override's key may hold: section, key and (in free-form mappings) names, joined by dots.
_KEY = re.compile(r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=value"`` -> (["a", "b"], value read as YAML)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set train.trees=200")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"--set {text!r}: empty key")
    if not _KEY.fullmatch(key):
        raise ConfigError(f"--set {text!r}: a key is names of letters, digits, _ and - joined by dots, got {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        at, what = _yaml_problem(e)
        where = f" (at {at[1:]} of the value)" if at else ""
        raise ConfigError(f"--set {text!r}: value is not valid YAML: {what}{where}") from None
    _check_values(value, f"--set {key}")
    return key.split("."), value


def _section_keys(tp: Any) -> dict[str, Any] | None:
    """Key -> type of a section type (a config dataclass, or an extra curriculum's settings); None for a value."""
    if tp is ExtraCurriculum:
        tp = CurriculumConfig
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return {f.name: hints[f.name] for f in dataclasses.fields(tp)}
    return None


#: Config keys that moved, old -> new: each old key is read for one release, with a one-line deprecation warning
#: (CHANGELOG.md, "Unreleased"). ``plugins.params`` moves every component's settings below it.
MOVED = {
    "train.sigmoid_gamma": "components.sigmoid_pairwise.gamma",
    "train.stochastic_noise": "components.noisy_lambdamart.noise",
    "train.stochastic_anneal": "components.noisy_lambdamart.anneal",
    "train.blend_schedule": "components.blend.schedule",
    "train.blend_at": "components.blend.at",
    "train.blend_width": "components.blend.width",
    "curriculum.root_n": "components.root_n.n",
    "selfpaced.root_n": "components.root_n.n",
    "plugins.params": "components",
}


def moved_key(path: str) -> str | None:
    """The key that old key ``path`` (or a key below ``plugins.params``) is now; None for a key that did not move."""
    for old, new in MOVED.items():
        if path == old or path.startswith(old + ".") and old == "plugins.params":
            return new + path[len(old) :]
    return None


def _deprecated(where: str, old: str, new: str) -> None:
    log.warning("%s: %s is now %s; the old key is read until the next release (CHANGELOG.md)", where, old, new)


def move_keys(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` (a config file's) with every key of :data:`MOVED` at its new place, each said in one deprecation
    warning (``where``: the file). An old key and its new one both set to different values is refused
    (:class:`ConfigError`)."""
    out = json.loads(json.dumps(data))
    for old, new in MOVED.items():
        section, _, name = old.partition(".")
        holder = out.get(section)
        if not isinstance(holder, dict) or name not in holder:
            continue
        value = holder.pop(name)
        _deprecated(where, old, new)
        if old == "plugins.params":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: plugins.params: expected a mapping of component name -> settings")
            for comp, settings in value.items():
                for k, v in settings.items() if isinstance(settings, dict) else [("", settings)]:
                    _put(out, f"components.{comp}" + (f".{k}" if k else ""), v, old, where)
        else:
            _put(out, new, value, old, where)
    return out


def _move_extra_root_n(data: dict[str, Any], where: str) -> None:
    """An extra curriculum's ``root_n`` (an old key; ``data``: a config with its overrides) dropped with a
    deprecation warning where it is the value ``components.root_n.n`` holds, else refused: the root_n pacing's n is
    one setting for every curriculum now, which one curriculum may not change for the others."""
    default = PACINGS["root_n"].defaults["n"]
    components = data.get("components")
    root_n = components.get("root_n") if isinstance(components, dict) else None
    n = root_n.get("n", default) if isinstance(root_n, dict) else default
    grid = data.get("grid")
    extras = grid.get("extra_curricula") if isinstance(grid, dict) else None
    for name, extra in extras.items() if isinstance(extras, dict) else ():
        if isinstance(extra, dict) and "root_n" in extra:
            value = extra.pop("root_n")
            if value != n:
                raise ConfigError(
                    f"{where}: grid.extra_curricula.{name}.root_n = {value}: the root_n pacing's n is one setting "
                    f"for every curriculum now, components.root_n.n ({n}); set that, or use another pacing function"
                )
            _deprecated(where, f"grid.extra_curricula.{name}.root_n", "components.root_n.n")


def _put(data: dict[str, Any], path: str, value: Any, old: str, where: str) -> None:
    """Set ``path`` of ``data`` to ``value`` moved there from ``old``; refused when ``path`` holds another value."""
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: {old} moves to {path}, and {part} there is not a mapping")
    if last in node and node[last] != value:
        raise ConfigError(f"{where}: {old} = {value!r} and {path} = {node[last]!r}: {old} is now {path}; keep one")
    node[last] = value


def apply_overrides(data: dict[str, Any], overrides: list[str], cls: type | None = None) -> dict[str, Any]:
    """Return a copy of ``data`` with ``--set`` overrides applied (keys checked against ``cls``, default Config).

    Below a mapping of sections the next part of the key names an entry (``--set
    grid.extra_curricula.paced.stages=6``); below a free-form mapping (``spark.conf``) the rest of the key
    is one entry: ``--set spark.conf.spark.executor.memory=2g``.

    Raises
    ------
    ConfigError
        A malformed override, or an unknown key (its full path and the closest known one).
    """
    out = json.loads(json.dumps(data))  # deep copy of plain data
    for text in overrides:
        path, value = parse_override(text)
        new = moved_key(".".join(path)) if (cls or Config) is Config else None
        if new is not None:
            _deprecated(f"--set {text!r}", ".".join(path), new)
            path = new.split(".")
        if (cls or Config) is Config and path[0] == "plugins":
            raise ConfigError(
                f"--set {text!r}: plug-ins are loaded only from {PLUGIN_SOURCES}; --set (and an Airflow run's conf) "
                "may only choose, by name, components already loaded, and set their settings (components.<name>)"
            )
        node: dict[str, Any] = out
        keys = _section_keys(cls or Config)
        i = 0
        while keys is not None:  # always: a value ends the walk (break) or is refused
            part, where = path[i], ".".join(path[: i + 1])
            if part not in keys:
                raise ConfigError(f"--set {text!r}: {unknown_key(where, list(keys))}")
            ftp = keys[part]
            if i == len(path) - 1:
                node[part] = value
                break
            if typing.get_origin(ftp) is dict:
                entry_type = typing.get_args(ftp)[1]
                if typing.get_origin(entry_type) is dict and i + 2 < len(path):  # a mapping of mappings: one value
                    entry = node.setdefault(part, {}).setdefault(path[i + 1], {})
                    if not isinstance(entry, dict):
                        raise ConfigError(f"--set {text!r}: '{where}.{path[i + 1]}' is not a mapping")
                    entry[".".join(path[i + 2 :])] = value
                    break
                if _section_keys(entry_type) is None or i + 2 == len(path):  # a free-form mapping, or a whole entry
                    node.setdefault(part, {})[".".join(path[i + 1 :])] = value
                    break
                node, keys, i = node.setdefault(part, {}), None, i + 1  # then into the entry named path[i]
                if not isinstance(node, dict):
                    raise ConfigError(f"--set {text!r}: '{where}' is not a mapping")
                ftp = entry_type
                part, where = path[i], ".".join(path[: i + 1])
            keys = _section_keys(ftp)
            if keys is None:
                raise ConfigError(f"--set {text!r}: '{where}' is a value, not a section")
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {text!r}: '{where}' is not a section")
            node, i = nxt, i + 1
    return out


def config_data(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> tuple[Path, dict]:
    """(the file, its data with ``overrides`` applied): a config before it is checked. A config file's
    ``plugins: [...]`` (a list) is short for ``plugins: {load: [...]}``; its relative paths are the file's."""
    p = Path(path) if path else conf_dir() / "default.yaml"
    data = _read_yaml(p)
    if isinstance(data.get("plugins"), list):
        data["plugins"] = {"load": data["plugins"]}
    load = data.get("plugins", {}).get("load") if isinstance(data.get("plugins"), dict) else None
    if isinstance(load, list):
        data["plugins"]["load"] = [_relative_to(p, x) for x in load]
    for key, value in data.items():
        _check_values(value, f"{p}: {key}")
    data = apply_overrides(move_keys(data, str(p)), list(overrides or []))
    _move_extra_root_n(data, str(p))
    return p, data


def _relative_to(config: Path, ref: Any) -> Any:
    """A plug-in file named by a config file: relative to that file's folder (a module name stays as it is)."""
    if isinstance(ref, str) and ref.endswith(".py") and not Path(ref).is_absolute():
        return str((config.parent / ref).resolve())
    return ref


def config_of(path: Path, data: Mapping[str, Any]) -> Config:
    """The frozen Config of ``data`` (read from ``path``: its name prefixes an error)."""
    try:
        return from_dict(Config, data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> Config:
    """Load ``path`` (default ``conf/default.yaml``), apply ``overrides``, return the frozen Config (components are
    looked up in the registries as they are: :func:`pipelines.plugins.load_config` loads the plug-ins first)."""
    return config_of(*config_data(path, overrides))


def dataset_presets() -> dict[str, DatasetSpec]:
    """Every ``conf/datasets/<name>.yaml``, by name."""
    return {p.stem: load_dataset_spec(p.stem) for p in sorted((conf_dir() / "datasets").glob("*.yaml"))}


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
