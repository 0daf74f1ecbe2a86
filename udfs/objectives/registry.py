"""The registry of training objectives: one entry per name a training path can use.

An objective is either XGBoost's own (``builtin``: its name in XGBoost, the speed reference) or ours, a Python
factory registered with :func:`objective` next to its code: ``make(settings, labels, offsets, qid, doc)`` for one
node's rows returns ``f(margins, tree) -> (grad, hess)`` (float32 arrays; ``tree``: the global tree index). What
the rest of the system needs to know is declared with it: ``regression`` (a path that starts with it starts from
the mean label), ``seeded`` (its trees depend on ``train.seed``: ``grid.seeds`` repeats the paths that use it).

The Python objectives are the modules of this package (:func:`objectives` imports every one: a new file is a new
objective, no other file changes). This module imports none of them by name, so no objective's code is part of the
code of another: a plan node's key holds the closure of its own objective's module (:attr:`Objective.module`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: What a factory returns: ``f(margins, tree) -> (grad, hess)``.
Factory = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]

#: Modules of this package that hold no objective (shared code and this registry).
_NOT_OBJECTIVES = ("registry", "settings", "pairwise")


@dataclass(frozen=True)
class Objective:
    """One objective: its name, XGBoost's name for it (None: a Python factory), what a path needs to know of it,
    and, for a Python one, its factory and the module that defines it."""

    name: str
    builtin: str | None = None
    regression: bool = False
    seeded: bool = False
    make: Callable[..., Factory] | None = None
    module: str | None = None


#: XGBoost's own objectives under our names: the same trees as the Python twins (``xgb_mse`` = ``mse``), faster.
_BUILTIN = (
    Objective("xgb_mse", builtin="reg:squarederror", regression=True),
    Objective("xgb_lambdamart", builtin="rank:ndcg"),
    Objective("xgb_ranknet", builtin="rank:pairwise"),
)

_REGISTRY: dict[str, Objective] = {o.name: o for o in _BUILTIN}
_loaded = False


class ObjectiveError(ValueError):
    """An objective registered twice, or a name no objective has."""


def objective(name: str, *, regression: bool = False, seeded: bool = False) -> Callable[[Any], Any]:
    """Register the decorated factory as objective ``name`` (see the module docstring)."""
    if not name.replace("_", "").isalnum() or not name[:1].isalpha() or name != name.lower():
        raise ObjectiveError(f"objective name {name!r}: lower-case letters, digits and _, starting with a letter")

    def register(make: Any) -> Any:
        module = getattr(make, "__module__", None)
        old = _REGISTRY.get(name)
        if old is not None and (old.module, getattr(old.make, "__qualname__", None)) != (module, make.__qualname__):
            raise ObjectiveError(f"objective {name!r} is registered twice: by {old.module} and by {module}")
        _REGISTRY[name] = Objective(name, None, regression, seeded, make, module)
        return make

    return register


def _load() -> dict[str, Objective]:
    """The registry, the Python objectives of this package imported on the first call."""
    global _loaded
    if not _loaded:
        package = importlib.import_module(__name__.rpartition(".")[0])
        for info in pkgutil.iter_modules(package.__path__):
            if info.name not in _NOT_OBJECTIVES:
                importlib.import_module(f"{package.__name__}.{info.name}")
        _loaded = True
    return _REGISTRY


def objectives() -> dict[str, Objective]:
    """Every objective by name, sorted: XGBoost's and the Python ones of this package."""
    return dict(sorted(_load().items()))


def get(name: str) -> Objective:
    """The objective ``name`` (:class:`ObjectiveError` naming the known ones otherwise)."""
    found = _load().get(name)
    if found is None:
        raise ObjectiveError(f"unknown objective {name!r}; expected one of {', '.join(objectives())}")
    return found
