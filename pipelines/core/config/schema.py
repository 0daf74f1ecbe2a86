"""The config's schema: its sections as frozen dataclasses, each field declared once with its default, description
and checks (:func:`pipelines.core.config.fields.setting`), and the dataset descriptions (:class:`DatasetSpec`).

``conf/default.yaml`` and the config reference are written from these declarations
(:mod:`pipelines.app.reference`); loading YAML and ``--set`` into them is :mod:`pipelines.core.config.loading`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, NoReturn

from pipelines.core.config.fields import (
    ConfigError,
    Section,
    Setting,
    check_declared,
    coerce,
    declare,
    declared,
    key_name,
    setting,
    unknown_key,
    unknown_name,
)
from udfs.conventions import GAINS, TIES, NdcgSpec
from udfs.curriculum import PACINGS, STRATEGIES, anti_of, no_order
from udfs.model import Model

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
class SparkConfig(Section):
    """How to build the SparkSession (:func:`pipelines.core.session.build_session`).

    ``master``: empty means spark-submit's ``--master`` if there is one, else
    ``local[*]``. ``conf``: any further Spark properties, passed through.
    """

    SECTION = "spark"

    master: str = setting(
        "",
        "Spark master URL; empty: spark-submit's --master if any, else local[*]",
    )
    remote: str = setting(
        "auto",
        "Spark Connect: sc://HOST:PORT of a server, or local[N] for one in this process; auto: $SPARK_REMOTE if "
        "set, else the server `ltr server start` runs for work_dir, else a classic session on spark.master; "
        "empty: classic unless $SPARK_REMOTE is set (how-to: Spark Connect)",
    )
    ship: str = setting(
        "auto",
        "Spark Connect: ship this project's code to the server's Python workers as session artifacts (auto: when "
        "they cannot import it or run other code; always; never: refuse such a server) (how-to: Spark Connect)",
        choices=SHIP,
    )
    ship_env: str = setting(
        "",
        "Spark Connect: an `ltr pack` archive (.tar.gz, .tgz) this client ships to its session on the server, whose "
        "Python tasks then run the archive's bin/python: for a server whose workers lack this project's libraries "
        "(how-to: Spark Connect)",
    )
    app_name: str = setting(
        "ltr",
        "the Spark application's name (Spark UI, cluster manager)",
    )
    shuffle_partitions: int = setting(
        8,
        "spark.sql.shuffle.partitions of the session",
        min=1,
    )
    driver_memory: str = setting(
        "1g",
        "the driver JVM's heap; the local master runs its tasks in this JVM too (how-to: size memory)",
    )
    arrow_max_records_per_batch: int = setting(
        10000,
        "rows per Arrow batch handed to a Pandas UDF (spark.sql.execution.arrow.maxRecordsPerBatch)",
        min=1,
    )
    ui: bool = setting(
        False,
        "start the Spark web UI",
    )
    log_level: str = setting(
        "WARN",
        "the JVM's log level (WARN, INFO, ERROR, ...)",
    )
    conf: dict[str, str] = setting(
        factory=dict,
        doc="any further Spark properties, passed through, e.g. {spark.executor.memory: 8g}",
    )


#: Shapes of synthetic data ``ltr generate`` writes (:mod:`pipelines.data.generate`): each the layout, feature
#: count and label range of a real dataset (MSLR-WEB30K, Istella LETOR, Yahoo! LTR Challenge set 1).
GENERATE_SHAPES = ("mslr", "istella", "yahoo")


@dataclass(frozen=True)
class GenerateConfig(Section):
    """Synthetic LETOR data (:mod:`pipelines.data.generate`) shaped like ``shape``'s real dataset."""

    SECTION = "generate"

    queries: int = setting(
        600,
        "number of queries to generate (MSLR-WEB30K has 31531)",
        min=1,
        flag="--queries",
    )
    seed: int = setting(
        2018,
        "random seed: the same seed writes the same files",
        flag="--seed",
    )
    workers: int = setting(
        0,
        "generator processes; 0 = one per core",
        min=0,
        flag="--workers",
    )
    shape: str = setting(
        "mslr",
        "the real dataset to mimic: mslr (Fold1..5), istella (full/train,test) or yahoo (set1.train,valid,test)",
        choices=GENERATE_SHAPES,
        flag="--shape",
    )
    label_noise: float = setting(
        0.0,
        "share of training rows whose label is redrawn uniformly (seeded; mslr: fold 1's training subsets S1-S3, "
        "so only fold 1 validates and tests on clean labels; the other shapes: the training file); 0: clean "
        "labels",
        min=0.0,
        max=1.0,
        why="the share of training rows whose label is redrawn",
        flag="--label-noise",
    )


@dataclass(frozen=True)
class IngestConfig(Section):
    """LETOR text to Parquet (:mod:`pipelines.data.ingest`).

    ``n_features`` / ``min_label`` / ``max_label``: 0 / null take the dataset's
    values (``conf/datasets``). ``chunk_bytes``: nominal bytes of text per task.
    """

    SECTION = "ingest"

    strict: bool = setting(
        False,
        "true: fail at the first bad line instead of quarantining it",
        flag="--strict",
    )
    chunk_bytes: int = setting(
        32 * 1024 * 1024,
        "nominal bytes of LETOR text per Spark task (32 MiB)",
        min=1,
        why="nominal text bytes per Spark task, e.g. 33554432",
        flag="--chunk-bytes",
    )
    compression: str = setting(
        "snappy",
        "the Parquet codec",
        choices=PARQUET_CODECS,
        why="the codecs both pyarrow and Spark write",
    )
    n_features: int = setting(
        0,
        "number of features; 0: the dataset's",
        min=0,
        why="0: the dataset's",
        flag="--n-features",
    )
    min_label: int | None = setting(
        None,
        "smallest valid label; null: the dataset's",
        min=LABEL_MIN,
        max=LABEL_MAX,
        why="labels are stored as int8",
        flag="--min-label",
        checks=("at most max_label",),
    )
    max_label: int | None = setting(
        None,
        "largest valid label; null: the dataset's",
        min=LABEL_MIN,
        max=LABEL_MAX,
        why="labels are stored as int8",
        flag="--max-label",
    )
    max_examples: int = setting(
        20,
        "quarantined lines quoted in _manifest.json",
        min=0,
    )

    def check(self) -> None:
        if self.min_label is not None and self.max_label is not None and self.min_label > self.max_label:
            raise ConfigError(
                f"ingest.min_label (--min-label) {self.min_label} > ingest.max_label (--max-label) "
                f"{self.max_label}: no label would be valid"
            )


@dataclass(frozen=True)
class DifficultyConfig(Section):
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

    SECTION = "difficulty"

    bm25_feature: int = setting(
        0,
        "feature id of BM25, whose per-query NDCG is q_bm25's score; 0: the dataset's (MSLR: 110)",
        min=0,
        why="a feature id, or 0 for the dataset's",
        flag="--bm25-feature",
    )
    pagerank_feature: int = setting(
        0,
        "feature id of PageRank, whose per-query NDCG is q_pagerank's score; 0: the dataset's (MSLR: 130)",
        min=0,
        why="a feature id, or 0 for the dataset's",
        flag="--pagerank-feature",
    )
    empty_queries: str = setting(
        "last",
        "queries without a relevant document (NDCG undefined) in the curricula: last (hardest in every difficulty"
        " order), exclude (only in the last stage, all data) or as_metric (q_bm25/q_pagerank score them "
        "metric.empty)",
        choices=EMPTY_QUERY_POLICIES,
        flag="--empty-queries",
    )


#: What an unknown strategy's message adds to the strategies it lists.
ANTI_HINT = ", or anti_<one that orders queries by a score> (its anti-curriculum)"


def _check_curriculum(values: Mapping[str, Any], where: str, flags: bool) -> None:
    """The checks of curriculum settings beyond their declarations (which run first), written once: the
    ``curriculum:`` section's (:meth:`CurriculumConfig.check`) and an extra curriculum's (:class:`ExtraCurriculum`).

    ``where``: the settings' path in the config (``curriculum``, ``grid.extra_curricula.NAME``); ``flags``:
    name the ``ltr curriculum`` flag beside a key that has one. Raises :class:`ConfigError` at the first problem.
    """

    def key(name: str) -> str:
        return key_name(where, name, declared(CurriculumConfig)[name], flags)

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
class CurriculumConfig(Section):
    """Curriculum selection (:mod:`pipelines.data.curricula`).

    Two stages by default: the easiest ``fraction`` of the training queries,
    then all of them. With ``pacing`` (linear, root_n, geometric, step),
    ``stages`` stages whose shares grow from ``delta`` to 1. ``strategy``: one of
    :data:`STRATEGIES` (``l_hrel`` takes no pacing).
    """

    SECTION = "curriculum"

    strategy: str = setting(
        "q_nrel",
        "the difficulty order: q_nrel, q_bm25, q_pagerank (oracle), q_size, sigma_bm25 (label-free), l_hrel (a "
        "label filter), random (the control), none, a plug-in difficulty score, or anti_<any of those that order "
        "queries by a score> (its anti-curriculum: the hardest first)",
        flag="--strategy",
        checks=("a registered strategy, or anti_<one that orders queries by a score>",),
    )
    fraction: float = setting(
        0.25,
        "two-stage curriculum: the easiest share of the training queries, then everything",
        above=0.0,
        max=1.0,
        why="a share of the training queries",
        flag="--fraction",
    )
    pacing: str = setting(
        "",
        "empty: two stages; linear, root_n, geometric, step or a plug-in pacing function: a multi-stage curriculum",
        flag="--pacing",
        checks=("empty, or a registered pacing function", "empty with strategy l_hrel"),
    )
    stages: int = setting(
        4,
        "stages of a paced curriculum (the last one is all data)",
        min=2,
        why="stages of a paced curriculum",
        flag="--stages",
    )
    delta: float = setting(
        0.25,
        "share of the training queries in the first paced stage",
        above=0.0,
        max=1.0,
        why="a share of the training queries",
        flag="--delta",
    )
    seed: int = setting(
        2018,
        "seed of the random strategy's order",
        flag="--seed",
    )
    hrel_labels: list[int] = setting(
        factory=lambda: [0, 3, 4],
        doc="labels l_hrel keeps in its first stage (MSLR 0-4; each in the dataset's label range, one > 0; LETOR 4.0:"
        " [0, 2])",
        checks=("not empty, no label twice, one of them > 0",),
    )

    def check(self) -> None:
        _check_curriculum({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, "curriculum", True)


@dataclass(frozen=True)
class TeacherConfig(Section):
    """The teacher whose judgement the ``model`` difficulty scores are (``teacher_margin``, ``teacher_loss``,
    ``teacher_ndcg``; :mod:`udfs.teacher`): a training path trained by the plan on the fold's training queries.

    With ``crossfit`` K >= 2 (the default, 5) the training queries are split into K groups by a seeded hash of the
    qid, and each group is scored by the teacher trained on the other K - 1 groups: no query's difficulty comes from
    a model that saw its labels (a teacher that scores its own training queries rates them by how well it fitted
    them, and a curriculum built on that orders queries by the teacher's memory, not their difficulty). ``0`` is the
    study's literal protocol (Penha & Hauff 2020): one teacher trained on every training query scores them all.
    A section of its own, so that a study with no teacher-based curriculum keeps its keys."""

    SECTION = "teacher"

    path: str = setting(
        "lambdamart:100",
        "the teacher's training path (e.g. lambdamart:100, mse:50,lambdamart:50); its segments train on the "
        "teacher's own queries (every training query outside the group it scores), so none names a curriculum",
        checks=("objectives and trees only: no @curriculum",),
    )
    crossfit: int = setting(
        5,
        "cross-fitting groups K (>= 2): each group scored by the teacher trained on the other K - 1; 0: one "
        "teacher trained on every training query scores them all (the study's protocol)",
        checks=("0, or >= 2 groups",),
    )
    seed: int = setting(
        2018,
        "seed of the hash of the qid that splits the queries into the cross-fitting groups",
    )

    def check(self) -> None:
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
class SelfPacedConfig(Section):
    """Self-paced curricula: the path segments ``OBJ@selfpaced:T`` (the easiest queries first, by the model being
    trained), ``OBJ@antipaced:T`` (the hardest first) and ``OBJ@randompaced:T`` (a seeded random choice), which
    re-choose their training queries every ``every`` trees, keeping a share that a pacing function raises from
    ``delta`` to 1 over the segment (:mod:`pipelines.kernel.selfpaced`). A section of its own, so that a study
    with no self-paced segment keeps its keys; the settings are in the key of every self-paced node."""

    SECTION = "selfpaced"

    every: int = setting(
        10,
        "trees between two selections (a self-paced node checkpoints at each); a segment needs at least two",
        min=1,
        why="trees between two selections",
    )
    by: str = setting(
        "ndcg",
        "a query's ease under the current margins: ndcg (its NDCG, higher is easier) or loss (its mean pairwise "
        "logistic loss, lower is easier)",
        choices=("ndcg", "loss"),
    )
    pacing: str = setting(
        "root_n",
        "the pacing function of the shares (linear, root_n, geometric, step or a plug-in's), from delta to 1",
        checks=("a registered pacing function",),
    )
    delta: float = setting(
        0.25,
        "share of the training queries the first selection keeps",
        above=0.0,
        max=1.0,
        why="the first selection's share",
    )
    seed: int = setting(
        2018,
        "seed of the random control's choices (randompaced), added to a grid.seeds repetition's",
    )

    def check(self) -> None:
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
            typed[k] = coerce(v, hints[k], f"{where}.{k}")
        check_declared(CurriculumConfig, typed, where, flags=False)
        _check_curriculum(typed, where, False)
        super().__init__(typed)

    @classmethod
    def from_config(cls, value: Any, where: str) -> ExtraCurriculum:
        """An extra curriculum read from the config at ``where`` (:func:`pipelines.core.config.fields.coerce`)."""
        if isinstance(value, ExtraCurriculum):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping (the curriculum: settings it changes), got {value!r}")
        return cls(value, where=where)

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
class TrainConfig(Section):
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

    SECTION = "train"

    path: str = setting(
        "mse:40,lambdamart:60",
        "the training path OBJ[@DATA]:TREES,... of `ltr train` (reference: training paths)",
        flag="--path",
    )
    eta: float = setting(
        0.05,
        "learning rate",
        above=0.0,
        flag="--eta",
    )
    leaves: int = setting(
        64,
        "leaves per tree, grown best-first (lossguide)",
        min=2,
        flag="--leaves",
    )
    max_bin: int = setting(
        256,
        "histogram bins per feature (the fold's global cuts)",
        min=2,
    )
    cuts_sample_rows: int = setting(
        200_000,
        "the histogram cuts come from a deterministic sample of at most this many training rows, whole queries",
        min=1,
    )
    min_child_weight: float = setting(
        1.0,
        "XGBoost's min_child_weight: the least hessian sum of a leaf",
        min=0.0,
    )
    reg_lambda: float = setting(
        1.0,
        "XGBoost's reg_lambda: L2 regularisation of leaf values",
        min=0.0,
    )
    subsample: float = setting(
        1.0,
        "share of training rows sampled per tree (1: all)",
        above=0.0,
        max=1.0,
    )
    colsample_bytree: float = setting(
        1.0,
        "share of features sampled per tree (1: all)",
        above=0.0,
        max=1.0,
    )
    k: int = setting(
        10,
        "NDCG@k of the LambdaMART deltas and of its top-k pairs",
        min=1,
        flag="--k",
    )
    workers: int = setting(
        0,
        "barrier tasks (XGBoost workers); 0 = one per task slot (cluster), one with all cores (local)",
        min=0,
        why="0: automatic",
        flag="--workers",
    )
    nthread: int = setting(
        0,
        "threads per worker; 0 = the cores of its share",
        min=0,
        why="0: automatic",
        flag="--nthread",
    )
    device: str = setting(
        "cpu",
        "cpu or cuda",
        flag="--device",
    )
    eval_every: int = setting(
        1,
        "NDCG on vali and test after every k-th tree (the curves' step)",
        min=1,
    )
    score_dist_trees: list[int] = setting(
        factory=lambda: [20],
        doc="trees after which the test score distributions per label are kept (Figure 2)",
        min=1,
        each=True,
    )
    score_dist_bins: int = setting(
        100,
        "bins of those score distributions",
        min=1,
    )
    base_margin: str = setting(
        "auto",
        "the starting score: auto (the mean label for paths that begin with a regression objective, else 0), "
        "zero, mean or a number",
        checks=("auto, zero, mean or a number",),
    )
    seed: int = setting(
        0,
        "the training seed (sampling, seeded objectives); a grid.seeds repetition i adds i",
    )
    checkpoint_every: int = setting(
        25,
        "trees per checkpoint inside a plan node (each node also checkpoints at its end)",
        min=1,
    )
    lease_ttl: float = setting(
        120.0,
        "seconds a node's lease lives without renewal (renewed every ttl/3 while it trains)",
        above=0.0,
    )
    lease_wait: float = setting(
        0.0,
        "seconds to wait for another process's lease on a node before stopping (exit 75)",
        min=0.0,
    )
    tracker_timeout: int = setting(
        3600,
        "seconds XGBoost's tracker waits for workers (a lost worker ends the job, never hangs it)",
        min=1,
    )
    tracker: str = setting(
        "auto",
        "where XGBoost's tracker runs: driver (this process: the executors must reach it), stage (in the barrier "
        "stage, on the first task's executor, as xgboost.spark does; no live progress), or auto (stage for a "
        "client of a Spark Connect server on another machine or on a cluster master, else driver)",
        choices=TRACKERS,
    )
    job_retries: int = setting(
        1,
        "a failed training job is started again this often, from the last checkpoints",
        min=0,
    )
    codes_in_memory_gib: float = setting(
        1.0,
        "a worker's training bin codes stay in memory up to this many GiB, else in a local file (the same trees)",
        min=0.0,
    )
    read: str = setting(
        "auto",
        "who reads a training worker's rows: worker (each reads its Parquet), spark (a shuffle) or auto (worker "
        "for a local path)",
        choices=READS,
    )

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

    def check(self) -> None:
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
class GridConfig(Section):
    """An experiment grid (:mod:`pipelines.app.grid`): per fold, the LambdaMART baseline,
    MSE-t for every switch point, every curriculum strategy at every switch point,
    and ``extra_paths`` (name -> path shorthand; curricula they name are the
    strategies, or ``extra_curricula``: name -> the curriculum settings it changes, :class:`ExtraCurriculum`).
    ``seeds``: how many times each child whose
    trees depend on a seed (the ``random`` curriculum control, the noisy_lambdamart objective) is trained, the
    i-th time with the curriculum's and the training's seeds + i (:func:`pipelines.study.design.grid_children`); the
    report averages them."""

    SECTION = "grid"

    experiment: str = setting(
        "ltr-default",
        "the MLflow experiment",
    )
    folds: list[int] = setting(
        factory=lambda: [1],
        doc="the folds of the study",
        min=1,
        each=True,
    )
    trees: int = setting(
        100,
        "T, the trees of every path (the paper: 500)",
        min=1,
    )
    switch_points: list[int] = setting(
        factory=lambda: [20, 40, 60, 80],
        doc="the trees t at which MSE-t and the curricula switch to LambdaMART on all data",
        checks=("each strictly between 0 and grid.trees",),
    )
    strategies: list[str] = setting(
        factory=lambda: ["q_nrel", "q_bm25", "q_pagerank", "l_hrel", "random"],
        doc="the curriculum strategies of the grid, each at every switch point",
        checks=("each a registered strategy but none",),
    )
    baseline: bool = setting(
        True,
        "train the LambdaMART baseline, T trees",
    )
    mse: bool = setting(
        True,
        "train MSE-t, the continuation method, at every switch point",
    )
    objectives: str = setting(
        "python",
        "python (our lambdamart and mse) or builtin (XGBoost's rank:ndcg and reg:squarederror)",
        choices=("python", "builtin"),
    )
    extra_paths: dict[str, str] = setting(
        factory=lambda: {
            "paced_root_n": "lambdamart@paced.*:40,lambdamart:60",
            "blend_linear": "blend:100",
            "mse_on_q_nrel": "mse@q_nrel:40,lambdamart:60",
        },
        doc="name -> training path: more children per fold; curricula named by strategy or by extra_curricula",
    )
    extra_curricula: dict[str, ExtraCurriculum] = setting(
        factory=lambda: {
            "paced": ExtraCurriculum({"strategy": "q_nrel", "pacing": "root_n", "stages": 4, "delta": 0.25}),
        },
        doc="name -> the curriculum settings it changes (the others: the curriculum section's), checked alike",
        checks=("each checked as the curriculum section, with its other settings",),
    )
    data: str = setting(
        "",
        "the dataset; empty: <work_dir>/dataset",
        flag="--data",
    )
    difficulty: str = setting(
        "",
        "the difficulty scores; empty: <work_dir>/difficulty (computed if missing)",
    )
    log_models: bool = setting(
        True,
        "log every child's model with mlflow.xgboost",
    )
    seeds: int = setting(
        1,
        "children that depend on a seed (random curriculum, seeded objectives) are trained this many times, seeds"
        " + 0..n-1",
        min=1,
        why="1: every child once",
    )
    anti: bool = setting(
        False,
        "add the anti-curriculum (anti_<strategy>: the same score, hardest first) of every strategy of "
        "grid.strategies that orders queries by a score, at every switch point",
    )
    selfpaced: bool = setting(
        False,
        "add the self-paced curriculum and its two controls (selfpaced, antipaced, randompaced: queries chosen by"
        " the model being trained, the selfpaced: section) at every switch point",
    )

    def __post_init__(self) -> None:
        # entries given as plain mappings (GridConfig(extra_curricula={...}) in Python) are typed and checked too
        extras = {
            name: ExtraCurriculum.from_config(c, f"grid.extra_curricula.{name}")
            for name, c in self.extra_curricula.items()
        }
        object.__setattr__(self, "extra_curricula", extras)
        super().__post_init__()

    def check(self) -> None:
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
class TrackingConfig(Section):
    """MLflow: ``uri`` empty = ``sqlite:///<work_dir>/mlflow.db``; ``artifacts`` empty = the tracking
    server's artifact store (``http(s)://`` URIs), else ``<work_dir>/mlartifacts``."""

    SECTION = "tracking"

    uri: str = setting(
        "",
        "the MLflow tracking URI; empty: sqlite:///<work_dir>/mlflow.db",
    )
    artifacts: str = setting(
        "",
        "artifact location of a new experiment; empty: the server's store (http(s):// uri), else "
        "<work_dir>/mlartifacts",
        checks=("holds no credential",),
    )

    def check(self) -> None:
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
class ReportConfig(Section):
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

    SECTION = "report"

    out: str = setting(
        "",
        "the report's folder; empty: <work_dir>/report",
        flag="--out",
    )
    permutations: int = setting(
        10000,
        "sign flips of the randomisation test (an exact test when 2^queries is fewer)",
        min=1,
    )
    seed: int = setting(
        0,
        "seed of those sign flips and of the bootstrap",
    )
    table2_sizes: list[int] = setting(
        factory=list,
        doc="Table 2's sizes n (trees) of the best MSE-t; empty: 3 sizes chosen on vali, evenly spaced up to the last"
        " n at which LambdaMART can still catch up within T trees",
        min=1,
        each=True,
        why="numbers of trees",
    )
    bootstrap: int = setting(
        10000,
        "resamples of the paired bootstrap interval of each mean difference",
        min=2,
        why="resamples",
    )
    risk_alphas: list[float] = setting(
        factory=lambda: [1.0, 5.0],
        doc="URisk and TRisk against the baseline at these alphas (losses weighted 1 + alpha)",
        min=0.0,
        each=True,
        checks=("one or more",),
    )
    target_fraction: float = setting(
        0.99,
        "convergence: trees each system needs to reach this fraction of the baseline's final vali NDCG",
        above=0.0,
        max=1.0,
    )
    trec_depth: int = setting(
        1000,
        "documents per query in the TREC run files runs/<system>.fold<F>.trec (0: none)",
        min=0,
        why="documents per query; 0: none",
    )
    primary_test: str = setting(
        "randomisation",
        "the test of the headline and of every significance mark: randomisation or t (the other is a robustness "
        "column)",
        choices=PRIMARY_TESTS,
    )
    margin: float = setting(
        0.005,
        "non-inferiority margin in NDCG: as good as LambdaMART = one-sided 95% lower bound of the difference "
        "above -margin",
        min=0.0,
        below=1.0,
        why="an NDCG difference",
    )

    def check(self) -> None:
        if not self.risk_alphas:
            raise ConfigError("report.risk_alphas: give one or more alphas >= 0, got []")


#: Where plug-ins come from, for messages (and only from there: never from ``--set`` or an Airflow run's conf).
PLUGIN_SOURCES = (
    "--plugin FILE_OR_MODULE, a config file's `plugins: [...]` or an installed package's entry point in the "
    "group ltr.plugins"
)


@dataclass(frozen=True)
class PluginsConfig(Section):
    """Plug-ins (:mod:`pipelines.plugins`): what to load (files and modules: ``--plugin``, a config file's
    ``plugins:`` list; installed packages' ``ltr.plugins`` entry points are always loaded). ``load`` is set only by
    those two: ``--set plugins.load`` is refused (:data:`PLUGIN_SOURCES`). A plug-in component's settings are in
    ``components:``, as a built-in's are."""

    SECTION = "plugins"

    load: list[str] = setting(
        factory=list,
        doc="plug-in files (relative to the config file) and modules to load; also --plugin and installed packages' "
        "entry points (group ltr.plugins); never from --set or an Airflow run's conf",
    )


#: The ``metric:`` section's settings: its type, :class:`udfs.conventions.NdcgSpec`, is the kernel's and the
#: workers' (``udfs`` imports nothing of ``pipelines``), so they are declared here (:func:`declare`).
METRIC = declare(
    NdcgSpec,
    {
        "k": Setting("the NDCG cutoff k", min=1),
        "gain": Setting(
            "the gain of a label: exp2 (2^label - 1, as XGBoost and LightGBM) or linear (the label, as trec_eval)",
            choices=GAINS,
        ),
        "empty": Setting("NDCG of a query without relevant documents (XGBoost: 1.0; trec_eval: 0.0)", min=0.0, max=1.0),
        "ties": Setting("order of equal scores: input (document order, as XGBoost), worst or average", choices=TIES),
    },
)


@dataclass(frozen=True)
class Config(Section):
    """The whole resolved configuration of a run: the top-level keys and the sections."""

    SECTION = ""

    work_dir: str = setting(
        "work",
        "where generated data, datasets, models, difficulty scores, curricula and reports go",
    )
    dataset: str = setting(
        "mslr",
        "the dataset description conf/datasets/<name>.yaml: feature count, label range, feature roles (mslr, "
        "istella, yahoo, letor4...)",
        flag="--dataset",
    )
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
    components: dict[str, dict[str, Any]] = setting(
        factory=dict,
        doc="each component's own settings, <component name>: {<setting>: value}, e.g. blend: {at: 200}: an "
        "objective, difficulty score or pacing function, built-in or plug-in (docs/reference/components.md and "
        "`ltr plugins` list them with their defaults), checked against what the component declares; only the "
        "results that use a component are keyed by its settings",
        checks=("each setting one its component declares, of its type, passing its check",),
    )

    def check(self) -> None:
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
