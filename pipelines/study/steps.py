"""The study's steps before training, declared once: generate, ingest, difficulty, curricula.

For each step this module owns its inputs, its key (built by :mod:`pipelines.core.keys`), its output location (from
:class:`pipelines.core.layout.Layout`) and its freshness check: the output there was made from exactly these inputs.
Like Kedro's runner with "only missing outputs", every caller runs a step only when it is not fresh:

* ``ltr run`` (:mod:`pipelines.app.run`) runs the steps in :data:`ORDER`, each through its ``run_*``/``ensure_*``;
* ``ltr grid`` (:mod:`pipelines.app.grid`) ensures the difficulty scores and the curricula of its folds;
* the Airflow DAG's decisions (:mod:`pipelines.app.study_tasks`) read the ``*_state`` functions to skip a step's
  task, and the step's own job (``jobs/ingest.py`` ...) runs it.

None of them writes a freshness expression of its own.

========== ================================== ========================================== ======================
step       inputs                             key                                        fresh when
========== ================================== ========================================== ======================
generate   queries, seed, shape, label_noise  ``keys.make_key("generate")``              ``letor/generate.json``
                                                                                         records them
ingest     source listing (names, sizes,      :func:`pipelines.core.keys.ingest_key`     ``_ingest_key.json``
           mtimes), ingest and dataset                                                   holds the key and the
           settings, output, format                                                      dataset still has the
                                                                                         fingerprint recorded
difficulty dataset, feature roles, settings,  :func:`pipelines.core.keys.difficulty_key` ``_difficulty.json``
           metric, code identity                                                         holds the key
curricula  settings, dataset, fold, name,     :func:`pipelines.core.keys.curriculum_key` ``_curriculum.json``
           difficulty key, empty-query                                                   holds the key
           policy, the scores' fingerprint
========== ================================== ========================================== ======================
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from pipelines.core import keys
from pipelines.core.config import Config, load_dataset_spec
from pipelines.core.layout import Layout
from pipelines.core.outputs import claim_output
from pipelines.core.secrets import redact
from pipelines.core.storage import write_file_atomic
from pipelines.data.curricula import Curriculum, build_curriculum, stored_curriculum
from pipelines.data.dataset import DatasetError, open_dataset
from pipelines.data.generate import RECORD as GENERATE_RECORD
from pipelines.data.scoring import difficulty_inputs, run_difficulty, stored_summary
from pipelines.study.design import (
    curriculum_config,
    curriculum_key_of,
    curriculum_scores,
    is_taught,
    scores_fingerprint,
)
from udfs.uris import to_uri

log = logging.getLogger(__name__)

#: The steps in the order a study needs them (``ltr run`` and the DAG follow it; training comes after).
ORDER = ("generate", "ingest", "difficulty", "curricula")


@dataclass(frozen=True)
class StepState:
    """Where a step's output is, the key of its inputs, and whether the output there was made from them."""

    step: str
    output: str
    key: str
    fresh: bool

    def describe(self) -> str:
        """One line for the log: ``ingest -> /w/dataset: up to date (key sha256:1a2b3c4d...)``."""
        what = "up to date, reused" if self.fresh else "to do"
        return f"{self.step} -> {self.output}: {what} (key {self.key[:19]})"


# ------------------------------------------------------------ generate
def generate_inputs(cfg: Config) -> dict[str, Any]:
    """What determines the generated LETOR text: the number of queries, the seed, the shape and the label noise (not
    the workers)."""
    g = cfg.generate
    return {"queries": g.queries, "seed": g.seed, "shape": g.shape, "label_noise": g.label_noise}


def generate_state(cfg: Config, out: str | None = None) -> StepState:
    """Generated text at ``out`` (default ``<work_dir>/letor``) is fresh when its ``generate.json`` records this
    config's queries, seed and shape (a record from before shapes existed is an MSLR one)."""
    out = out or Layout.of(cfg).letor
    inputs = generate_inputs(cfg)
    try:
        with open(os.path.join(out, GENERATE_RECORD)) as f:
            done = {"shape": "mslr", "label_noise": 0.0, **json.load(f)}  # records from before either existed
    except (OSError, ValueError):
        done = {}
    fresh = all(done.get(k) == v for k, v in inputs.items())
    return StepState("generate", out, keys.make_key("generate", inputs), fresh)


def forget_generate(state: StepState) -> None:
    """Remove the record of a stale generation before it is made again (a crash must not leave the old record)."""
    record = os.path.join(state.output, GENERATE_RECORD)
    if not state.fresh and os.path.exists(record):
        os.remove(record)


def run_generate(cfg: Config, out: str | None = None) -> StepState:
    """Generate the LETOR text unless it is fresh; the state before."""
    from pipelines.data.generate import generate

    state = generate_state(cfg, out)
    log.info("%s", state.describe())
    if not state.fresh:
        forget_generate(state)
        g = cfg.generate
        generate(state.output, g.queries, g.seed, g.workers, g.shape, g.label_noise)
    return state


# ------------------------------------------------------------ ingest
class SourceMissing(DatasetError):
    """The ingest's source does not exist."""


def _listing(src: str) -> list[list[Any]]:
    """(name relative to src, size, mtime in ns) of every file under ``src`` (a folder or one file)."""
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(to_uri(src))
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise SourceMissing(f"{src}: no such file or directory")
    if info.type == pafs.FileType.File:
        return [[info.base_name, info.size, info.mtime_ns]]
    files = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return sorted([f.path[len(root) :].lstrip("/"), f.size, f.mtime_ns] for f in files if f.type == pafs.FileType.File)


def ingest_inputs(cfg: Config, src: str, data: str) -> dict[str, Any]:
    """What determines the dataset: the source listing, the ingest and dataset settings, the output, the format."""
    from pipelines.data.ingest import FORMAT_VERSION

    return {  # the locations as they are shown (core.secrets): a rotated password or token keeps the key
        "src": redact(to_uri(src)),
        "files": _listing(src),
        "out": redact(to_uri(data)),
        "ingest": asdict(cfg.ingest),
        "dataset": asdict(load_dataset_spec(cfg.dataset)),
        "format_version": FORMAT_VERSION,
    }


def fingerprint_at(data: str) -> str | None:
    """The content fingerprint of the dataset at ``data``; None when there is no readable dataset there."""
    try:
        return open_dataset(data).fingerprint
    except (DatasetError, OSError, ValueError, KeyError):
        return None


def ingest_state(cfg: Config, src: str, data: str, record: str | None = None) -> StepState:
    """The dataset at ``data`` is fresh when ``record`` (default ``<work_dir>/_ingest_key.json``) holds the key of
    these inputs, taken now (before any ingest: a source that changes while it is read is ingested again), and the
    dataset still has the content fingerprint recorded then."""
    record = record or Layout.of(cfg).ingest_key
    key = keys.ingest_key(ingest_inputs(cfg, src, data))
    try:
        with open(record) as f:
            done = json.load(f)
    except (OSError, ValueError):
        done = {}
    fingerprint = done.get("fingerprint")
    fresh = done.get("key") == key and bool(fingerprint) and fingerprint == fingerprint_at(data)
    return StepState("ingest", data, key, fresh)


def forget_ingest(record: str) -> None:
    """Remove the ingest record: the dataset is about to change."""
    if os.path.exists(record):
        os.remove(record)


def record_ingest(record: str, key: str, src: str, data: str) -> dict[str, Any]:
    """After a successful ingest, write ``record`` (atomically): the inputs' ``key`` and the dataset's content
    fingerprint."""
    fp = fingerprint_at(data)
    if fp is None:
        raise DatasetError(f"ingest succeeded but {data} has no readable _manifest.json")
    doc = {"key": key, "fingerprint": fp, "src": redact(src), "data": redact(data)}
    write_file_atomic(record, json.dumps(doc, indent=2, sort_keys=True).encode())
    return doc


def run_ingest(spark: Any, cfg: Config, src: str, data: str) -> StepState:
    """Ingest ``src`` into ``data`` unless the dataset there is fresh; the state before."""
    from pipelines.data.ingest import ingest
    from pipelines.data.ingest.quarantine import quarantine_dir

    record = Layout.of(cfg).ingest_key
    state = ingest_state(cfg, src, data, record)
    log.info("%s", state.describe())
    if not state.fresh:
        with claim_output(data, quarantine_dir(data), wait=True):
            if not ingest_state(cfg, src, data, record).fresh:  # not ingested meanwhile by the process waited for
                forget_ingest(record)
                ingest(spark, src, data, load_dataset_spec(cfg.dataset), cfg.ingest)
                record_ingest(record, state.key, src, data)
    return state


# ------------------------------------------------------------ difficulty
def _difficulty(cfg: Config, data: str, out: str | None) -> tuple[StepState, dict[str, Any] | None]:
    """The scores' state and, when fresh, their stored summary (read once)."""
    out = out or Layout.of(cfg).difficulty
    key = keys.difficulty_key(**difficulty_inputs(open_dataset(data), cfg.difficulty, cfg.metric))
    summary = stored_summary(out, key)
    return StepState("difficulty", out, key, summary is not None), summary


def difficulty_state(cfg: Config, data: str, out: str | None = None) -> StepState:
    """The scores at ``out`` (default the layout's) are fresh when their summary holds the key of
    :func:`pipelines.data.scoring.difficulty_inputs` for this dataset and config."""
    return _difficulty(cfg, data, out)[0]


def ensure_difficulty(spark: Any, cfg: Config, data: str, difficulty: str) -> dict[str, Any]:
    """The difficulty scores at ``difficulty``, computed unless fresh; returns their summary."""
    _, summary = _difficulty(cfg, data, difficulty)
    if summary is not None:
        return summary
    with claim_output(difficulty, wait=True):
        _, summary = _difficulty(cfg, data, difficulty)  # computed meanwhile by the process waited for?
        if summary is not None:
            return summary
        log.info("computing difficulty scores -> %s (none there, or computed from other inputs)", difficulty)
        return run_difficulty(spark, data, difficulty, cfg.difficulty, cfg.metric)


# ------------------------------------------------------------ curricula
def _curriculum(cfg: Config, ds: Any, fold: int, name: str, scores: str) -> tuple[StepState, dict[str, Any] | None]:
    """A curriculum's state and, when fresh, its stored summary (read once)."""
    out = Layout.of(cfg).curriculum(fold, name)
    key = curriculum_key_of(cfg, ds, fold, name, scores)
    summary = stored_curriculum(out, key)
    return StepState("curricula", out, key, summary is not None), summary


def curriculum_state(cfg: Config, ds: Any, fold: int, name: str, scores: str) -> StepState:
    """Curriculum ``name`` of ``fold`` is fresh when its summary holds the key of its inputs
    (:func:`pipelines.study.design.curriculum_key_of`: settings, dataset, fold, difficulty, ``scores``)."""
    return _curriculum(cfg, ds, fold, name, scores)[0]


def ensure_curricula(
    spark: Any, cfg: Config, data: str, difficulty: str, fold: int, names: set[str], teacher: Teacher | None = None
) -> list[Curriculum]:
    """Build (or reuse, when fresh) each curriculum of the fold: strategies with the grid's fraction, and the extra
    curricula of the config (``grid.extra_curricula``: name -> settings).

    A curriculum's key covers its settings, the dataset, the fold, the difficulty inputs and the content fingerprint
    of the very scores it was built from: scores computed again (by ``ltr run`` or ``ltr difficulty``) into the same
    folder with another result rebuild it. A teacher-based curriculum (:func:`pipelines.study.design.is_taught`) is
    built from ``teacher`` (:func:`ensure_teachers`), and its key holds the teacher scores' identity too."""
    if not names:
        return []
    ds = open_dataset(data)
    difficulty_fp = scores_fingerprint(difficulty)
    out = []
    for name in sorted(names):
        taught = is_taught(cfg, name)
        if taught and teacher is None:
            raise RuntimeError(f"internal error: curriculum {name} of fold {fold} needs its teachers (ensure_teachers)")
        scores = curriculum_scores(cfg, name, difficulty_fp, teacher.identity if teacher else "")
        state, summary = _curriculum(cfg, ds, fold, name, scores)
        if summary is None:
            with claim_output(state.output, wait=True):
                state, summary = _curriculum(cfg, ds, fold, name, scores)  # built meanwhile by the process waited for?
                if summary is None:
                    summary = build_curriculum(
                        spark,
                        data,
                        difficulty,
                        fold,
                        curriculum_config(cfg, name),
                        state.output,
                        name=name,
                        key=state.key,
                        empty_queries=cfg.difficulty.empty_queries,
                        teacher=teacher.scores if taught and teacher else None,
                    )
        out.append(Curriculum(to_uri(state.output), summary))
    return out


# ------------------------------------------------------------ teachers
@dataclass(frozen=True)
class Teacher:
    """A fold's teacher scores, made: where they are, their identity in the keys of the curricula built on them, the
    teachers' curricula (the plan trains the teachers on them) and what training the teachers cost here."""

    scores: str
    identity: str
    curricula: tuple[Curriculum, ...]
    trees_built: int = 0
    #: what the parent run records of them (:meth:`record`): settings, nodes, trees, cost, the scores' summary
    doc: dict[str, Any] = field(default_factory=dict)


def ensure_teachers(
    spark: Any, cfg: Config, data: str, difficulty: str, fold: int, store: Any, settings: Any, how: Any
) -> Teacher:
    """The fold's teacher scores, made unless fresh: the teachers' curricula (:mod:`pipelines.study.teachers`),
    the teachers trained by the plan (checkpointed and leased like any node: a killed run resumes them), then the
    scores computed on the workers (:mod:`pipelines.data.teacher_scores`)."""
    from pipelines.data.teacher_scores import compute_teacher_scores, stored_teacher_scores
    from pipelines.execution.executor import execute_plan
    from pipelines.store.results import path_result
    from pipelines.study import teachers as tt
    from pipelines.study.design import plan_fold

    ds = open_dataset(data)
    layout = Layout.of(cfg)
    curricula = []
    queries = None
    for name in tt.teacher_data(cfg):
        out, key = layout.curriculum(fold, name), tt.teacher_query_key(cfg, ds, fold, name)
        summary = stored_curriculum(out, key)
        if summary is None:
            with claim_output(out, wait=True):
                summary = stored_curriculum(out, key)
                if summary is None:
                    if queries is None:  # one row per training query, as build_curriculum reads them
                        queries = _training_queries(spark, ds, difficulty, fold)
                    summary = tt.build_teacher_queries(queries, ds, fold, cfg, name, out, key)
        curricula.append(Curriculum(to_uri(out), summary))
    fp = plan_fold(cfg, ds, fold)  # the teachers' node keys hold their curricula's content
    where = layout.teacher_scores(fold)
    summary = stored_teacher_scores(where, fp.teacher_scores_key)
    built = 0
    if summary is None:
        chains = sorted({k for p in fp.teachers for k in fp.plan.chains[p.label]})
        info = execute_plan(spark, fp.plan, ds, {c.name: c for c in curricula}, settings, store, how, only=chains)
        built = int(info["trees"])
        with claim_output(where, wait=True):
            summary = stored_teacher_scores(where, fp.teacher_scores_key)
            if summary is None:
                models = {
                    g: path_result(store, p.label, fp.plan.chains[p.label]).model for g, p in enumerate(fp.teachers)
                }
                summary = compute_teacher_scores(
                    spark,
                    ds,
                    fold,
                    models,
                    cfg.teacher.crossfit,
                    cfg.teacher.seed,
                    cfg.metric,
                    where,
                    fp.teacher_scores_key,
                    fp.teacher_keys(),
                )
    nodes = {p.label: list(fp.plan.chains[p.label]) for p in fp.teachers}
    doc = {
        "fold": fold,
        "teacher": asdict(cfg.teacher),
        "nodes": nodes,
        "trees": sum(fp.plan.node(k).trees for ks in nodes.values() for k in ks),
        "cost_seconds": store.cost([k for ks in nodes.values() for k in ks]),
        "scores": {
            k: summary.get(k) for k in ("key", "queries", "queries_without_pair", "per_group", "content_fingerprint")
        },
    }
    return Teacher(where, tt.teacher_identity(fp.teacher_scores_key, summary), tuple(curricula), built, doc)


def _training_queries(spark: Any, ds: Any, difficulty: str, fold: int) -> Any:
    """The fold's training queries from the difficulty scores (one row per query: ``subset, qid, n_docs``), by qid."""
    from pyspark.sql import functions as F

    from udfs import schema

    pdf = (
        spark.read.parquet(to_uri(difficulty))
        .where(F.col(schema.SUBSET).isin(ds.subsets(fold, "train")))
        .select(schema.SUBSET, schema.QID, "n_docs")
        .toPandas()
    )
    return pdf.sort_values([schema.QID, schema.SUBSET], kind="stable").reset_index(drop=True)
