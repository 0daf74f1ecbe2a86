"""The command line's flags that set a config key: per command, the keys it takes; each flag's name, help and
choices are its key's declaration (:func:`pipelines.core.config.setting`: ``flag=``, the description), so neither
is written twice, and the config's messages name the same flag.

A flag's type and default come from the config's field too: the help text shows the config's default, and a flag
given on the command line becomes an override of its key (``--eta 0.1`` is ``--set train.eta=0.1``), applied after
``--conf`` and ``--set`` (:func:`pipelines.app.cli.resolve_config`). Flags that name no config key (``--src``,
``--out`` of a step...) are declared by their command in :mod:`pipelines.app.cli`.
"""

from __future__ import annotations

import argparse
import functools
import json
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.core.config import Config, declared


@dataclass(frozen=True)
class Flag:
    """``flag`` sets config key ``key``; ``help`` says what it is (the default is added from the config)."""

    flag: str
    key: str
    help: str
    choices: Sequence[str] | None = None  # the key's declared choices (the config checks them, naming the flag)

    @property
    def dest(self) -> str:
        """The argparse attribute (``--n-features`` -> ``n_features``)."""
        return self.flag.lstrip("-").replace("-", "_")


#: Per command, the config keys it takes as flags.
KEYS: dict[str, tuple[str, ...]] = {
    "generate": ("generate.shape", "generate.queries", "generate.seed", "generate.workers", "generate.label_noise"),
    "ingest": ("dataset", "ingest.n_features", "ingest.min_label", "ingest.max_label", "ingest.strict",
               "ingest.chunk_bytes"),
    "difficulty": ("difficulty.bm25_feature", "difficulty.pagerank_feature"),
    "curriculum": ("curriculum.strategy", "curriculum.fraction", "curriculum.pacing", "curriculum.stages",
                   "curriculum.delta", "curriculum.seed", "difficulty.empty_queries"),
    "train": ("train.path", "train.workers", "train.nthread", "train.device", "train.eta", "train.leaves", "train.k"),
    "grid": ("grid.data",),
    "report": ("report.out",),
    "run": ("generate.queries",),
}  # fmt: skip


def flag_of(key: str) -> Flag:
    """The flag of config key ``key``, from its declaration (which must name one: ``flag=``)."""
    section, _, name = key.rpartition(".")
    cls: Any = typing.get_type_hints(Config)[section] if section else Config
    s = declared(cls).get(name)
    if s is None or not s.flag:
        raise KeyError(f"config key {key!r} declares no flag (flag= in pipelines/core/config/schema.py)")
    return Flag(s.flag, key, s.doc, s.choices)


#: Per command, the flags that set a config key.
FLAGS: dict[str, tuple[Flag, ...]] = {command: tuple(map(flag_of, keys)) for command, keys in KEYS.items()}


@functools.cache
def _defaults() -> Config:
    """The default config, made once (it is frozen): every flag's default is read from it."""
    return Config()


def _field(key: str) -> tuple[Any, Any]:
    """(type, default) of config key ``key`` (``section.name`` or a top-level name), read from the dataclasses."""
    cls: Any = Config
    default: Any = _defaults()
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
        text = f"{f.help} (sets {f.key}; default {shown})".replace("%", "%%")  # argparse formats help with %
        if _scalar(tp) is bool:
            parser.add_argument(f.flag, dest=f.dest, action="store_true", default=None, help=text)
        else:
            parser.add_argument(f.flag, dest=f.dest, type=_scalar(tp), help=text)


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
