"""The registry of training objectives: one entry per name a training path can use.

An objective is either XGBoost's own (``builtin``: its name in XGBoost, the speed reference) or a Python function
registered with :func:`objective` (the decorator that :mod:`pipelines.plugins` gives researchers: the built-ins
use it too, so a plug-in is no second-class citizen)::

    @objective("listnet", params={"temperature": 1.0})
    def listnet(margins, labels, offsets, *, tree, params):
        return grad, hess

``margins`` (float32), ``labels`` and ``offsets`` (each query's first row, then the end) are one node's rows;
``tree`` is the global tree index; ``params`` holds the training settings every objective may read
(:data:`SHARED`: ``k``, ``eta``, ``exp_gain``, ``seed``) and the objective's own settings (``params=`` here: their
defaults; ``components.<name>`` in the config sets them; ``check=``: a function raising ``ValueError`` for values
the objective cannot run with, called on the defaults and on the configured values). The function may
also take ``qid`` and ``doc`` (each row's query id and document number: what seeded noise is drawn from) and
``cache`` (a dict kept for one node's rows: what depends only on the labels is computed once per node). What the
rest of the system needs to know is declared with it: ``regression`` (a path that starts with it starts from the
mean label), ``seeded`` (its trees depend on ``train.seed``: ``grid.seeds`` repeats the paths that use it).

The built-in Python objectives are the modules of this package (:func:`objectives` imports every one: a new file
is a new objective, no other file changes). This module imports none of them by name, so no objective's code is
part of the code of another: a plan node's key holds the code of its own objective (its module's closure for a
built-in, :mod:`pipelines.plugins`' identity for a plug-in) and the objective's own settings.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from udfs.components import Check, ComponentError, accepted, check_name, is_plugin, own_params, settings_of
from udfs.conventions import NdcgSpec
from udfs.model import Model

#: What a node's objective is at training time: ``f(margins, tree) -> (grad, hess)``.
Factory = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]

#: Modules of this package that hold no objective (shared code and this registry).
_NOT_OBJECTIVES = ("registry", "pairwise", "noise")

#: Keyword arguments an objective function may take besides ``tree`` and ``params``.
OPTIONAL = ("qid", "doc", "cache")

#: The training settings every objective's ``params`` holds, whatever the objective (:func:`shared`): no objective's
#: own setting may take one of these names.
SHARED = ("k", "eta", "exp_gain", "seed")


def shared(model: Model, metric: NdcgSpec) -> dict[str, Any]:
    """The :data:`SHARED` settings of a model's settings and the metric's conventions."""
    return {"k": model.k, "eta": model.eta, "exp_gain": metric.gain == "exp2", "seed": model.seed}


class ObjectiveError(ComponentError):
    """An objective registered twice, a bad declaration, or a name no objective has."""


@dataclass(frozen=True)
class Objective:
    """One objective: its name, XGBoost's name for it (None: a Python function), what a path needs to know of it,
    and, for a Python one, its function, the module that defines it, its own settings' defaults, the optional
    keywords it takes, and whether it came from a plug-in (:mod:`pipelines.plugins`)."""

    name: str
    builtin: str | None = None
    regression: bool = False
    seeded: bool = False
    fn: Callable[..., tuple[np.ndarray, np.ndarray]] | None = None
    module: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    accepts: tuple[str, ...] = ()
    plugin: bool = False
    check: Check | None = None

    def make(
        self,
        shared: Mapping[str, Any],
        y: np.ndarray,
        offsets: np.ndarray,
        qid: np.ndarray,
        doc: np.ndarray,
        own: Mapping[str, Any] | None = None,
    ) -> Factory:
        """``f(margins, tree)`` of this objective on one node's rows (``shared``: the :data:`SHARED` training
        settings; ``own``: its own settings, default :meth:`settings`); a plug-in's result is checked every tree
        (:func:`check_gradients`)."""
        if self.fn is None:
            raise ObjectiveError(f"objective {self.name!r} is XGBoost's {self.builtin}: no Python function")
        if set(shared) != set(SHARED):
            raise ObjectiveError(f"objective {self.name!r}: the training settings are {SHARED}, got {tuple(shared)}")
        params = MappingProxyType({**shared, **(self.settings() if own is None else own)})
        extra: dict[str, Any] = {}
        for name, value in (("qid", qid), ("doc", doc), ("cache", {})):
            if name in self.accepts:
                extra[name] = value
        fn, name, n = self.fn, self.name, len(y)
        if not self.plugin:
            return lambda m, t: fn(m, y, offsets, tree=t, params=params, **extra)

        def checked(m: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
            return check_gradients(name, fn(m, y, offsets, tree=t, params=params, **extra), n, f"tree {t}")

        return checked

    def settings(self) -> dict[str, Any]:
        """Its own settings as configured (``components.<name>`` over the declared defaults)."""
        return settings_of(self.name, self.defaults)


def check_gradients(name: str, out: Any, n: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``out`` as (grad, hess), each float32 of length ``n``, finite, hessians >= 0; else :class:`ObjectiveError`
    naming the objective, ``where`` and what it returned."""
    if not isinstance(out, tuple) or len(out) != 2:
        raise ObjectiveError(f"objective {name!r} ({where}): returned {type(out).__name__}, expected (grad, hess)")
    arrays = []
    for what, a in zip(("grad", "hess"), out, strict=True):
        if not isinstance(a, np.ndarray):
            raise ObjectiveError(f"objective {name!r} ({where}): {what} is {type(a).__name__}, expected a numpy array")
        if a.shape != (n,):
            raise ObjectiveError(
                f"objective {name!r} ({where}): {what} has shape {a.shape}, expected ({n},): one per row"
            )
        if a.dtype != np.float32:
            raise ObjectiveError(f"objective {name!r} ({where}): {what} is {a.dtype}, expected float32")
        bad = ~np.isfinite(a)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ObjectiveError(
                f"objective {name!r} ({where}): {what}[{i}] = {a[i]}: not finite ({int(bad.sum())} rows)"
            )
        arrays.append(a)
    neg = arrays[1] < 0
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        raise ObjectiveError(f"objective {name!r} ({where}): hess[{i}] = {arrays[1][i]} < 0 (a hessian must be >= 0)")
    return arrays[0], arrays[1]


#: XGBoost's own objectives under our names: the same trees as the Python twins (``xgb_mse`` = ``mse``), faster.
_BUILTIN = (
    Objective("xgb_mse", builtin="reg:squarederror", regression=True),
    Objective("xgb_lambdamart", builtin="rank:ndcg"),
    Objective("xgb_ranknet", builtin="rank:pairwise"),
)

_REGISTRY: dict[str, Objective] = {o.name: o for o in _BUILTIN}
_loaded = False


def objective(
    name: str,
    *,
    regression: bool = False,
    seeded: bool = False,
    params: Mapping[str, Any] | None = None,
    check: Check | None = None,
) -> Callable[[Any], Any]:
    """Register the decorated ``f(margins, labels, offsets, *, tree, params)`` as objective ``name`` (see the
    module docstring); ``params``: its own settings and their defaults; ``check``: their check."""
    check_name("objective", name)
    own = own_params("objective", name, params, SHARED, check)

    def register(fn: Any) -> Any:
        accepts = accepted(fn, "objective", name, 3, ("tree", "params"), OPTIONAL)
        module = getattr(fn, "__module__", None)
        old = _REGISTRY.get(name)
        if old is not None and (old.module, getattr(old.fn, "__qualname__", None)) != (module, fn.__qualname__):
            where = old.builtin and f"XGBoost's {old.builtin}" or old.module
            raise ObjectiveError(f"objective {name!r} is registered twice: by {where} and by {module}; rename one")
        _REGISTRY[name] = Objective(
            name, None, regression, seeded, fn, module, MappingProxyType(own), accepts, is_plugin(module), check
        )
        return fn

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
    """Every objective by name, sorted: XGBoost's, the Python ones of this package and the plug-ins'."""
    return dict(sorted(_load().items()))


def get(name: str) -> Objective:
    """The objective ``name`` (:class:`ObjectiveError` naming the known ones otherwise)."""
    found = _load().get(name)
    if found is None:
        raise ObjectiveError(f"unknown objective {name!r}; expected one of {', '.join(objectives())}")
    return found
