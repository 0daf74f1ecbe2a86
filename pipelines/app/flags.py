"""The command line's flags that set a config key, declared once: (flag, config key, help) per command.

A flag's type and default come from the config's field (:class:`pipelines.core.config.Config`), so no default is
stated twice: the help text shows the config's default, and a flag given on the command line becomes an override
of its key (``--eta 0.1`` is ``--set train.eta=0.1``), applied after ``--conf`` and ``--set``
(:func:`pipelines.app.cli.resolve_config`). Flags that name no config key (``--src``, ``--out`` of a step...) are
declared by their command in :mod:`pipelines.app.cli`.
"""

from __future__ import annotations

import argparse
import json
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.core.config import GENERATE_SHAPES, Config
from udfs.curriculum import PACINGS
from udfs.curriculum import STRATEGIES as CURRICULUM_STRATEGIES


@dataclass(frozen=True)
class Flag:
    """``flag`` sets config key ``key``; ``help`` says what it is (the default is added from the config)."""

    flag: str
    key: str
    help: str
    choices: Sequence[str] | None = None  # argparse's check, where the config's own is not the better message

    @property
    def dest(self) -> str:
        """The argparse attribute (``--n-features`` -> ``n_features``)."""
        return self.flag.lstrip("-").replace("-", "_")


#: Per command, the flags that set a config key.
FLAGS: dict[str, tuple[Flag, ...]] = {
    "generate": (
        Flag("--shape", "generate.shape", "the real dataset whose layout, features and labels to mimic (mslr: "
             "Fold1..Fold5; istella: full/{train,test}.txt; yahoo: set1.{train,valid,test}.txt)", GENERATE_SHAPES),
        Flag("--queries", "generate.queries", "number of queries (MSLR-WEB30K: 31531, Istella: 33018, Yahoo: 29921)"),
        Flag("--seed", "generate.seed", "random seed (same seed, same files)"),
        Flag("--workers", "generate.workers", "processes (0: one per core)"),
        Flag("--label-noise", "generate.label_noise", "share of training rows whose label is redrawn uniformly"),
    ),
    "ingest": (
        Flag("--dataset", "dataset", "conf/datasets/<NAME>.yaml: feature count, label range, feature roles"),
        Flag("--n-features", "ingest.n_features", "number of features (0: the dataset's)"),
        Flag("--min-label", "ingest.min_label", "smallest valid label (none: the dataset's)"),
        Flag("--max-label", "ingest.max_label", "largest valid label (none: the dataset's)"),
        Flag("--strict", "ingest.strict", "fail at the first bad line instead of quarantining it"),
        Flag("--chunk-bytes", "ingest.chunk_bytes", "nominal text bytes per Spark task"),
    ),
    "difficulty": (
        Flag("--bm25-feature", "difficulty.bm25_feature", "feature id of BM25 (0: the dataset's)"),
        Flag("--pagerank-feature", "difficulty.pagerank_feature", "feature id of PageRank (0: the dataset's)"),
    ),
    "curriculum": (
        Flag("--strategy", "curriculum.strategy", "ordering strategy: "
             + ", ".join(n for n, s in CURRICULUM_STRATEGIES.items() if not s.reverse)
             + ", or anti_<one ordered by a score> (the hardest first)"),  # fmt: skip
        Flag("--fraction", "curriculum.fraction", "two-stage curriculum: share of the first stage"),
        Flag("--pacing", "curriculum.pacing", "multi-stage pacing function: " + ", ".join(PACINGS) + " (empty: two "
             "stages)"),
        Flag("--stages", "curriculum.stages", "stages of a paced curriculum"),
        Flag("--delta", "curriculum.delta", "share of the first paced stage"),
        Flag("--seed", "curriculum.seed", "seed of the random strategy"),
        Flag("--empty-queries", "difficulty.empty_queries", "queries without a relevant document: last, exclude "
             "(only in the last stage) or as_metric (scored metric.empty)"),
    ),
    "train": (
        Flag("--path", "train.path", "training path, e.g. mse:200,lambdamart:300 or "
             "lambdamart@q_bm25:200,lambdamart:300"),
        Flag("--workers", "train.workers", "barrier tasks (0 = auto: one with all the cores on a local master, one "
             "per task slot on a cluster)"),
        Flag("--nthread", "train.nthread", "threads per worker (0: its share of the cores)"),
        Flag("--device", "train.device", "cpu or cuda"),
        Flag("--eta", "train.eta", "learning rate"),
        Flag("--leaves", "train.leaves", "leaves per tree"),
        Flag("--k", "train.k", "NDCG@k of the LambdaMART deltas"),
    ),
    "grid": (Flag("--data", "grid.data", "dataset (empty: <work_dir>/dataset)"),),
    "report": (Flag("--out", "report.out", "output folder (empty: <work_dir>/report)"),),
    "run": (Flag("--queries", "generate.queries", "queries to generate"),),
}  # fmt: skip


def _field(key: str) -> tuple[Any, Any]:
    """(type, default) of config key ``key`` (``section.name`` or a top-level name), read from the dataclasses."""
    cls: Any = Config
    default: Any = Config()
    for part in key.split("."):
        hints = typing.get_type_hints(cls)
        if part not in hints:
            raise KeyError(f"no config key {key!r}")
        cls, default = hints[part], getattr(default, part)
    return cls, default


def _scalar(tp: Any) -> type:
    """``int`` of ``int | None`` (a flag parses the type that is not None)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if args else tp


def add(parser: argparse.ArgumentParser, command: str) -> None:
    """Add ``command``'s config flags to its parser: type and default from the config."""
    for f in FLAGS.get(command, ()):
        tp, default = _field(f.key)
        shown = "none" if default is None else json.dumps(default) if isinstance(default, str) else default
        text = f"{f.help} (sets {f.key}; default {shown})"
        if _scalar(tp) is bool:
            parser.add_argument(f.flag, dest=f.dest, action="store_true", default=None, help=text)
        else:
            parser.add_argument(f.flag, dest=f.dest, type=_scalar(tp), choices=f.choices, help=text)


def overrides(args: argparse.Namespace, command: str) -> list[str]:
    """``key=value`` overrides of the config flags given on the command line (``None``: not given)."""
    out = []
    for f in FLAGS.get(command, ()):
        v = getattr(args, f.dest, None)
        if v is not None:
            out.append(f"{f.key}={json.dumps(v)}")
    return out


def keys_of(command: str) -> dict[str, str]:
    """Flag attribute -> config key of ``command``'s config flags."""
    return {f.dest: f.key for f in FLAGS.get(command, ())}
