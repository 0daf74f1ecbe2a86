"""The study, planned: what ``ltr grid`` trains, read from the config, the dataset's manifest and the work
directory, without Spark and without MLflow.

For each fold: the LambdaMART baseline (``T`` trees), MSE-t for every switch point (``mse:t,lambdamart:T-t``),
every curriculum strategy at every switch point (``lambdamart@S:t,lambdamart:T-t``, the first stage being the
easiest ``curriculum.fraction`` of the queries), and any extra paths of the config (pacing curricula, blend
continuation, CM and CL combined...): the fold's children (:func:`grid_children`). Their paths form a plan of
checkpointed nodes (:func:`plan_fold`, :mod:`pipelines.plan.trie`), cut into independent units. Also here: the
study's keys, the plan records ``ltr grid --plan`` compares with, and which units and children are finished.

Who uses it: :mod:`pipelines.app.grid` (the orchestration), :mod:`pipelines.study.steps` (difficulty and curricula),
:mod:`pipelines.tracking.live` (the MLflow side) and the Airflow DAG's ``units`` task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pipelines.core import keys
from pipelines.core.config import STRATEGIES, Config, ConfigError, CurriculumConfig, load_dataset_spec
from pipelines.core.layout import Layout
from pipelines.core.storage import read_json
from pipelines.data.curricula import check_curriculum, check_roles, stored_curriculum
from pipelines.data.dataset import Dataset, DatasetError, open_dataset
from pipelines.data.scoring import SUMMARY as DIFFICULTY_SUMMARY
from pipelines.data.scoring import difficulty_inputs, resolve_roles
from pipelines.kernel.selfpaced import RULES as SELFPACED_RULES
from pipelines.kernel.selfpaced import Schedule, is_dynamic
from pipelines.plan.paths import TrainingPath, paced_schedules, parse_path, resolve
from pipelines.plan.trie import DONE, Plan, build_plan, format_plan, states_of
from pipelines.plugins.loading import use_components
from pipelines.store.checkpoints import CheckpointStore
from udfs.curriculum import STRATEGIES as CURRICULUM_STRATEGIES
from udfs.objectives import registry

log = logging.getLogger(__name__)

#: ``ltr.strategy`` of the baseline (LambdaMART, T trees) and of MSE-t children.
BASELINE = "lambdamart"
MSE = "mse"


@dataclass(frozen=True)
class Child:
    """One (fold, strategy, switch point) of the grid."""

    fold: int
    strategy: str  # "lambdamart" (baseline), "mse", a curriculum strategy, or an extra path's name
    switch: int | None
    path: TrainingPath
    seed: int = 0  # a grid.seeds repetition: its seeds are the config's + seed (0: the child itself)

    @property
    def name(self) -> str:
        """The child's name, ``fold<F>/<strategy>`` with ``-<switch>`` when it has a switch point and
        ``/seed<i>`` for the i-th repetition of a seed-dependent child (:func:`grid_children`)."""
        sw = "" if self.switch is None else f"-{self.switch}"
        return f"fold{self.fold}/{self.strategy}{sw}" + (f"/seed{self.seed}" if self.seed else "")


#: A curriculum name's suffix for the i-th seed repetition of a seeded curriculum (``random_seed1``).
SEED_SUFFIX = "_seed"


def seed_dependent(cfg: Config, path: TrainingPath) -> bool:
    """Whether the trees of ``path`` depend on a seed that :func:`grid_children` varies: a segment with a seeded
    objective (noisy_lambdamart, stochastic_rank) or on a curriculum whose strategy is ``random``. (XGBoost's row
    and column sampling, ``train.subsample`` or ``colsample_bytree`` below 1, would make every path depend on the
    seed; ``grid.seeds`` does not repeat those.)"""
    return (
        any(registry.get(s.objective).seeded for s in path.segments)
        or any(CURRICULUM_STRATEGIES[curriculum_config(cfg, n).strategy].seeded for n in path.curricula)
        or any(s.data.split(".")[0] == "randompaced" for s in path.segments)
    )


def with_seed(cfg: Config, path: TrainingPath, i: int) -> TrainingPath:
    """The ``i``-th seed repetition of ``path``: its seeded segments with seed ``i`` (``train.seed + i``), its
    random curricula replaced by ``<name>_seed<i>`` (``curriculum.seed + i``), its randompaced segments with seed
    ``i`` (``selfpaced.seed + i``)."""
    segs = []
    for s in path.segments:
        cur = s.curriculum
        data = s.data
        if cur is not None and CURRICULUM_STRATEGIES[curriculum_config(cfg, cur).strategy].seeded:
            data = f"{cur}{SEED_SUFFIX}{i}.{s.data.split('.')[1]}"
        seeded = registry.get(s.objective).seeded or s.data.split(".")[0] == "randompaced"
        segs.append(replace(s, data=data, seed=i if seeded else s.seed))
    return TrainingPath(tuple(segs), f"{path.label}.seed{i}")


def grid_children(cfg: Config, fold: int) -> list[Child]:
    """The children of one fold, in a stable order; with ``grid.seeds`` = n > 1, each seed-dependent child
    (:func:`seed_dependent`) is followed by its repetitions 1..n-1 (:func:`with_seed`). The others are not
    repeated, and no child's key depends on ``grid.seeds``."""
    g = cfg.grid  # checked where it is typed (pipelines.core.config.GridConfig)
    lm, mse = ("xgb_lambdamart", "xgb_mse") if g.objectives == "builtin" else ("lambdamart", "mse")
    T = g.trees
    out = []
    if g.baseline:
        out.append(Child(fold, BASELINE, None, parse_path(f"{lm}:{T}", f"{BASELINE}")))
    if g.mse:
        out += [Child(fold, MSE, t, parse_path(f"{mse}:{t},{lm}:{T - t}", f"{MSE}-{t}")) for t in g.switch_points]
    for s in g.all_strategies():
        out += [Child(fold, s, t, parse_path(f"{lm}@{s}:{t},{lm}:{T - t}", f"{s}-{t}")) for t in g.switch_points]
    if g.selfpaced:  # the self-paced curriculum and its controls (pipelines.kernel.selfpaced)
        for s in SELFPACED_RULES:
            out += [Child(fold, s, t, parse_path(f"{lm}@{s}:{t},{lm}:{T - t}", f"{s}-{t}")) for t in g.switch_points]
    for name, text in sorted(g.extra_paths.items()):
        out.append(Child(fold, name, None, parse_path(text, name)))
    if g.seeds > 1:
        out = [
            rep
            for c in out
            for rep in [c]
            + (
                [replace(c, seed=i, path=with_seed(cfg, c.path, i)) for i in range(1, g.seeds)]
                if seed_dependent(cfg, c.path)
                else []
            )
        ]
    return out


def curricula_needed(children: list[Child]) -> set[str]:
    """Names of the curricula the paths of ``children`` train on (each once)."""
    return {n for c in children for n in c.path.curricula}


def curriculum_config(cfg: Config, name: str) -> CurriculumConfig:
    """The settings of curriculum ``name``: a strategy with the config's curriculum settings, or an extra
    curriculum of ``grid.extra_curricula`` (the settings it changes over the ``curriculum:`` section's)."""
    if name in cfg.grid.extra_curricula:
        return cfg.grid.extra_curricula[name].over(cfg.curriculum)
    if name in STRATEGIES:
        return replace(cfg.curriculum, strategy=name, pacing="")
    base, sep, i = name.rpartition(SEED_SUFFIX)
    if sep and base and i.isdigit() and int(i) > 0:  # a seed repetition of a random curriculum (with_seed)
        c = curriculum_config(cfg, base)
        return replace(c, seed=c.seed + int(i))
    raise ConfigError(
        f"grid path refers to curriculum {name!r}, which is neither a strategy nor in "
        f"grid.extra_curricula ({sorted(cfg.grid.extra_curricula)})"
    )


def curriculum_inputs(cfg: Config, ds: Dataset, fold: int, name: str, scores: str) -> dict[str, Any]:
    """What determines curriculum ``name`` of ``fold`` (the arguments of :func:`pipelines.core.keys.curriculum_key`):
    its settings, the dataset, the fold, the difficulty key and ``scores``, the content fingerprint of the very
    scores it is built from (scores computed again into the same folder with another result rebuild it)."""
    from pipelines.plugins.loading import curriculum_components

    use_components(cfg.components)
    settings = curriculum_config(cfg, name)
    components = curriculum_components(settings.strategy, settings.pacing)
    return {
        "settings": asdict(settings),
        **({"components": components} if components else {}),  # none: a curriculum of built-ins without settings
        "dataset": ds.fingerprint,
        "fold": fold,
        "name": name,
        "difficulty": keys.difficulty_key(**difficulty_inputs(ds, cfg.difficulty, cfg.metric)),
        "empty_queries": cfg.difficulty.empty_queries,
        "scores": scores,
    }


def curriculum_key_of(cfg: Config, ds: Dataset, fold: int, name: str, scores: str) -> str:
    """The key of curriculum ``name`` of ``fold`` built from the scores whose content fingerprint is ``scores``."""
    return keys.curriculum_key(**curriculum_inputs(cfg, ds, fold, name, scores))


def scores_fingerprint(difficulty: str) -> str:
    """The content fingerprint of the difficulty scores at ``difficulty`` ("" when there are none)."""
    try:
        return str(read_json(difficulty, DIFFICULTY_SUMMARY).get("content_fingerprint", ""))
    except (OSError, ValueError):
        return ""


def is_taught(cfg: Config, name: str) -> bool:
    """Whether curriculum ``name`` is ordered by a teacher's score (kind ``model``: it needs the fold's teachers).
    Read from the settings as written (no settings are made: the reference pages ask with unchecked values)."""
    if name in cfg.grid.extra_curricula:
        strategy = cfg.grid.extra_curricula[name].get("strategy", cfg.curriculum.strategy)
    else:
        base, sep, i = name.rpartition(SEED_SUFFIX)
        strategy = base if name not in CURRICULUM_STRATEGIES and sep and i.isdigit() else name
    s = CURRICULUM_STRATEGIES.get(strategy)
    return s is not None and s.kind == "model"


def curriculum_scores(cfg: Config, name: str, difficulty: str, teacher: str) -> str:
    """What curriculum ``name`` is built from, as its key holds it: the difficulty scores' content fingerprint, and
    for a teacher-based one also its teacher scores' identity (:func:`pipelines.study.teachers.teacher_identity`;
    "" while they are not computed, and then the curriculum cannot be built: "" too)."""
    if not is_taught(cfg, name):
        return difficulty
    return f"{difficulty} {teacher}" if difficulty and teacher else ""


def stored_curriculum_keys(cfg: Config, ds: Dataset, fold: int, names: set[str], teacher: str = "") -> dict[str, str]:
    """Content key (:func:`pipelines.core.keys.curriculum_content_key`) of each curriculum as built in the work
    directory, read without Spark; a curriculum not built yet, or built from other inputs, gets a provisional
    key (``unbuilt:...``) that matches no checkpoint: its nodes show as to do until it is built. ``teacher``: the
    identity of the fold's teacher scores, which a teacher-based curriculum is built from ("" while there are none)."""
    layout = Layout.of(cfg)
    difficulty = scores_fingerprint(layout.difficulty)
    out = {}
    for name in sorted(names):
        scores = curriculum_scores(cfg, name, difficulty, teacher)
        key = curriculum_key_of(cfg, ds, fold, name, scores)
        summary = stored_curriculum(layout.curriculum(fold, name), key) if scores else None
        out[name] = keys.curriculum_content_key(summary) if summary is not None else f"unbuilt:{key}"
    return out


@dataclass(frozen=True)
class FoldPlan:
    """A fold's children, their resolved paths and the plan of nodes they share."""

    fold: int
    children: list[Child]
    paths: list[TrainingPath]
    plan: Plan
    #: the teachers' paths (:mod:`pipelines.study.teachers`), in group order; empty without a teacher-based curriculum
    teachers: list[TrainingPath] = field(default_factory=list)
    #: the key of the fold's teacher scores (:func:`pipelines.study.teachers.teacher_scores_key`; "" without teachers)
    teacher_scores_key: str = ""
    #: the schedules of the self-paced segments of its paths (:func:`pipelines.plan.paths.paced_schedules`), which
    #: the workers are given with the settings
    paced: dict[str, Schedule] = field(default_factory=dict)

    def teacher_keys(self) -> dict[int, str]:
        """Group -> the last node of its teacher's chain."""
        return {g: self.plan.chains[p.label][-1] for g, p in enumerate(self.teachers)}

    def child_key(self, i: int) -> str:
        """The key of the ``i``-th child's MLflow run (:func:`pipelines.core.keys.child_key`).

        It holds the child's name, its resolved path's shorthand and the key of the last node of the path's
        chain, so a change of any input of the path's trees gives the child a new key (a new run).
        """
        c, p = self.children[i], self.paths[i]
        return keys.child_key(c.name, p.shorthand(), self.plan.chains[p.label][-1])

    def unit_label(self, index: int) -> str:
        """What the ``index``-th unit trains, for people (a scheduler's task label):
        ``fold 1: mse 0..30 -> mse-10, mse-20, mse-30`` (its root node, then the paths that end in it)."""
        unit = self.plan.units()[index]
        ends = [p.label for p in self.paths if self.plan.chains[p.label][-1] in set(unit)]
        return f"fold {self.fold}: {self.plan.node(unit[0]).describe()} -> {', '.join(ends)}"

    def unit_trees(self, index: int) -> int:
        """Trees the ``index``-th unit builds."""
        return sum(self.plan.node(k).trees for k in self.plan.units()[index])

    @property
    def provisional(self) -> list[str]:
        """Curricula of the plan not built yet (their nodes' keys are provisional)."""
        return sorted(
            {
                n.curriculum
                for n in self.plan.nodes
                if n.curriculum and str(self.plan.inputs.get(n.key, {}).get("curriculum", "")).startswith("unbuilt:")
            }
        )


def check_preset_strategies(cfg: Config) -> None:
    """Before any work: the strategies of the curricula the grid trains on against the feature roles of the
    configured preset (``dataset``, with ``difficulty.*_feature`` where set); a strategy that ranks by a
    feature the preset lacks is refused in one line naming it (ConfigError, exit 2)."""
    spec = load_dataset_spec(cfg.dataset)
    roles = {
        "bm25": cfg.difficulty.bm25_feature or spec.bm25_feature,
        "pagerank": cfg.difficulty.pagerank_feature or spec.pagerank_feature,
    }
    names = curricula_needed(grid_children(cfg, 1))
    check_roles(sorted({curriculum_config(cfg, n).strategy for n in names}), roles, cfg.dataset)


def check_curricula(cfg: Config, ds: Dataset, names: Iterable[str]) -> dict[str, int]:
    """The curricula ``names`` checked against the dataset, with no Spark work (hrel_labels, shares, the
    empty-query policy; a strategy that ranks by a feature the dataset lacks is refused in one line naming
    the preset, :func:`pipelines.data.curricula.check_roles`): each one's number of stages."""
    roles = asdict(resolve_roles(ds, cfg.difficulty))
    names = sorted(names)
    # all strategies at once first: the refusal names every one the dataset cannot rank by, and the rest to keep
    check_roles(sorted({curriculum_config(cfg, n).strategy for n in names}), roles, ds.manifest.get("dataset", "?"))
    return {n: len(check_curriculum(curriculum_config(cfg, n), ds, cfg.difficulty.empty_queries, roles)) for n in names}


def plan_fold(cfg: Config, ds: Dataset, fold: int) -> FoldPlan:
    """The plan of one fold from the config, the dataset's manifest and the curricula as built in the work
    directory (:func:`stored_curriculum_keys`): pure reads, no Spark."""
    use_components(cfg.components)
    children = grid_children(cfg, fold)
    names = curricula_needed(children)
    stages = check_curricula(cfg, ds, names)
    paths = [resolve(c.path, stages) for c in children]
    context = keys.plan_context(cfg.train, cfg.metric, ds.fingerprint, fold)
    taught = {n for n in names if is_taught(cfg, n)}
    ckeys = stored_curriculum_keys(cfg, ds, fold, names - taught)
    teachers: list[TrainingPath] = []
    scores_key = ""
    if taught:  # the teachers first: their node keys are in the key of the scores the taught curricula are built from
        from pipelines.data.teacher_scores import stored_teacher_scores
        from pipelines.study import teachers as tt

        teachers = tt.teacher_paths(cfg)
        tkeys = tt.stored_teacher_query_keys(cfg, ds, fold)
        tplan = build_plan(teachers, fold=fold, context=context, curriculum_keys=tkeys)
        last = {g: tplan.chains[p.label][-1] for g, p in enumerate(teachers)}
        scores_key = tt.teacher_scores_key(cfg, ds, fold, last)
        stored = stored_teacher_scores(Layout.of(cfg).teacher_scores(fold), scores_key)
        ckeys |= tkeys | stored_curriculum_keys(cfg, ds, fold, taught, tt.teacher_identity(scores_key, stored))
    paced = paced_schedules(cfg.selfpaced, paths)
    plan = build_plan(paths + teachers, fold=fold, context=context, curriculum_keys=ckeys, paced=paced)
    return FoldPlan(fold, children, paths, plan, teachers, scores_key, paced)


def study_data(cfg: Config, data: str | None) -> tuple[str, Dataset, list[int]]:
    """The study's dataset (``data``, else the layout's), opened, and its folds (``grid.folds``, each once),
    checked against the dataset's."""
    data = data or Layout.of(cfg).data
    ds = open_dataset(data)
    folds = list(dict.fromkeys(cfg.grid.folds))  # --folds 1,1 is fold 1 once
    missing = [f for f in folds if f not in ds.folds]
    if missing:
        raise DatasetError(f"{data} has no fold {missing[0]}; folds: {sorted(ds.folds)}")
    check_clean_evaluation(ds, folds)
    return data, ds, folds


def check_clean_evaluation(ds: Dataset, folds: list[int]) -> None:
    """Refuse a fold that would validate or test on labels ``ltr generate`` made noisy (``generate.label_noise``
    goes into fold 1's training subsets, each of which is another fold's validation or test set): a score on
    noisy test labels measures the noise, not the ranker."""
    noisy = set((ds.manifest.get("label_noise") or {}).get("in") or ())
    for f in folds:
        bad = sorted(noisy & {s for split in ("vali", "test") for s in ds.folds[f].get(split, [])})
        if bad:
            share = ds.manifest["label_noise"].get("share")
            clean = [
                g for g in sorted(ds.folds) if not noisy & {*ds.folds[g].get("vali", []), *ds.folds[g].get("test", [])}
            ]
            raise ConfigError(
                f"grid.folds: fold {f} validates or tests on {'+'.join(bad)}, which holds noisy labels "
                f"(generate.label_noise {share} went into {'+'.join(sorted(noisy))} of {ds.path}); folds with clean "
                f"validation and test labels: {clean or 'none'}"
                + (f" (--set grid.folds=[{clean[0]}])" if clean else "")
            )


def show_plan(cfg: Config, data: str | None = None) -> str:
    """``ltr grid --plan``: every fold's nodes, trees and states, from the checkpoints; trains nothing.

    Under a node that is to do while the last run of this experiment planned the same place in the trie
    under another key (:func:`record_plan`), the inputs that changed (``context.code.sources: a -> b``)."""
    _, ds, folds = study_data(cfg, data)
    store = CheckpointStore(Layout.of(cfg).checkpoints)
    out = []
    for f in folds:
        fp = plan_fold(cfg, ds, f)
        states = states_of(fp.plan, store)
        stored = read_plan_record(store, cfg.grid.experiment, f)
        why: dict[str, list[str]] = {}
        for n in fp.plan.nodes:
            old = stored.get(fp.plan.signature(n.key))
            if states[n.key].state == DONE or not old or old["key"] == n.key:
                continue
            why[n.key] = [
                f"key changed since the last run (node {old['key']}): {d}"
                for d in keys.differences(old["inputs"], fp.plan.inputs.get(n.key, {}))
            ]
        text = format_plan(fp.plan, states, why)
        if fp.provisional:
            text += (
                f"\n  (curricula {', '.join(fp.provisional)} are not built yet: the keys of their nodes are "
                "provisional; `ltr grid --setup-only` builds them)"
            )
        out.append(text)
    return "\n".join(out)


def read_plan_record(store: CheckpointStore, experiment: str, fold: int) -> dict[str, Any]:
    """The plan record :func:`record_plan` wrote for ``experiment`` and ``fold``.

    Returns
    -------
    dict[str, Any]
        Node signature (:meth:`pipelines.plan.trie.Plan.signature`) -> ``{"key": ..., "inputs": ...}``; empty when
        there is no record, or it cannot be trusted (unreadable, changed on disk: one warning saying so).
    """
    doc, why = store.read_record(store.plan_record_path(experiment, fold))
    if why is not None:
        log.warning("plan record of fold %d: %s; not used (the next run writes it again)", fold, why)
    return doc


def record_plan(store: CheckpointStore, experiment: str, fp: FoldPlan) -> None:
    """Keep, per experiment and fold, each node's key and key document by its place in the trie: what
    ``ltr grid --plan`` compares with to say why a key changed. Written before training (by rename), with its
    checksum (:meth:`~pipelines.store.checkpoints.CheckpointStore.put_record`)."""
    doc = {fp.plan.signature(n.key): {"key": n.key, "inputs": fp.plan.inputs.get(n.key, {})} for n in fp.plan.nodes}
    path = store.plan_record_path(experiment, fp.fold)
    try:
        store.put_record(path, doc)
    except OSError as e:  # a diagnostic: never a reason to stop a study
        log.warning(
            "could not record fold %d's plan at %s (ltr grid --plan will not say why keys changed): %s",
            fp.fold,
            path,
            e,
        )


def grid_keys(cfg: Config, ds: Dataset, code: dict[str, str] | None = None) -> tuple[str, str]:
    """(study key, grid key) of the grid of ``cfg`` on ``ds`` (:func:`pipelines.core.keys.study_keys`).

    Where the inputs were read from is not what they are: the data by its fingerprint, the difficulty
    scores by the keys of the curricula built on them (node keys); `--data X` and `grid.data=X`, or the
    dataset moved to another path, resume the same grid; how many workers build the trees does not
    change them (global cuts), so it is in no key either. The components' own settings (``components``) make
    another study too, where there are some (their nodes' keys hold them: the others' nodes are reused)."""
    use_components(cfg.components)
    grid_cfg = {k: v for k, v in asdict(cfg.grid).items() if k not in ("data", "difficulty")}
    if grid_cfg["seeds"] == 1:  # the default: the key of a study from before grid.seeds existed
        del grid_cfg["seeds"]
    if not grid_cfg["anti"]:  # the default: the key of a study from before grid.anti existed
        del grid_cfg["anti"]
    if not grid_cfg["selfpaced"]:  # the default: the key of a study from before grid.selfpaced existed
        del grid_cfg["selfpaced"]
    paths = [t for t in cfg.grid.extra_paths.values() if isinstance(t, str)]  # the reference pages ask with any value
    named = {*cfg.grid.all_strategies(), *(n for t in paths for n in parse_path(t).curricula)}
    taught = any(is_taught(cfg, n) for n in named)
    paced = cfg.grid.selfpaced or any(is_dynamic(s.data) for t in paths for s in parse_path(t).segments)
    return keys.study_keys(
        {
            "grid": grid_cfg,
            "train": keys.train_inputs(cfg.train),
            "metric": cfg.metric.to_dict(),
            # the teacher only in a study that has one: every other study keeps the key it had
            "curriculum": asdict(cfg.curriculum)
            | ({"teacher": asdict(cfg.teacher)} if taught else {})
            | ({"selfpaced": asdict(cfg.selfpaced)} if paced else {}),
            "difficulty": asdict(cfg.difficulty),
            "dataset": ds.fingerprint,
            "folds": list(dict.fromkeys(cfg.grid.folds)),
            **({"components": cfg.components} if cfg.components else {}),
        },
        code,
    )


def unfinished_units(fp: FoldPlan, existing: dict[str, tuple[str, str]]) -> list[list[str]]:
    """The fold's units of work (:meth:`pipelines.plan.trie.Plan.units`) that end a child whose run is not
    FINISHED (``existing``: :meth:`pipelines.tracking.runs.Tracker.child_runs`). The others have nothing
    left to do: every node of a FINISHED child is done, and a unit holds every node of its paths."""
    roots = {
        fp.plan.chains[p.label][0]
        for i, p in enumerate(fp.paths)
        if existing.get(fp.child_key(i), ("", ""))[1] != "FINISHED"
    }
    return [unit for unit in fp.plan.units() if unit[0] in roots]


def study_finished(plans: dict[int, FoldPlan], existing: dict[str, tuple[str, str]]) -> bool:
    """Whether every child of every fold of the study has a FINISHED run."""
    return all(
        existing.get(fp.child_key(i), ("", ""))[1] == "FINISHED"
        for fp in plans.values()
        for i in range(len(fp.children))
    )
