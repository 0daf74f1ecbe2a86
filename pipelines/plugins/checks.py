"""``ltr plugins --check``, and the check every command runs before its first Spark job: each plug-in component
on a small synthetic batch of queries (a query of one document and one without a relevant document among them).

An objective must return (grad, hess): float32 arrays of one value per row, finite, hessians >= 0, and the same
values for the same input (a resumed node must grow the same trees: noise is drawn from ``params["seed"]``,
``tree``, ``qid`` and ``doc``). A difficulty score must return one finite real number per query (not per row),
the same for the same input, and one declared ``label_free`` the same scores for other labels. Neither may write
into the arrays it is given (the batch is read-only). A
pacing function must return shares in (0, 1] that never decrease, for any number of stages. The first thing
wrong exits 2 naming the plug-in and what it returned (:class:`~pipelines.plugins.loading.PluginError`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from pipelines.plugins.loading import PluginError, component, one_line, owner, plugin_components
from udfs import components
from udfs.components import ComponentError

#: Documents per query of the synthetic batch: one of 1, one without a relevant document (the second).
SIZES = (7, 5, 1, 12, 3, 9)
#: Features of the synthetic batch (f1..f136: MSLR-WEB30K's count).
N_FEATURES = 136


class Features(Mapping[str, np.ndarray]):
    """A difficulty score's ``features``: feature name (``"f1"``...) -> the rows' float32 column, read on access."""

    def __init__(self, columns: Mapping[str, Any]) -> None:
        self._columns = columns
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._cache:
            if name not in self._columns:
                known = list(self._columns)
                span = f"{known[0]}..{known[-1]}" if known else "none"
                raise KeyError(f"no feature {name!r} (features: {span})")
            self._cache[name] = np.asarray(self._columns[name], dtype=np.float32)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)


def batch(seed: int = 0) -> dict[str, Any]:
    """The synthetic batch: labels 0..4 (none relevant in the second query), offsets, qid, doc, features, margins."""
    rng = np.random.default_rng(seed)
    sizes = np.array(SIZES)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n = int(offsets[-1])
    labels = rng.integers(0, 5, n).astype(np.float32)
    labels[offsets[1] : offsets[2]] = 0
    qid = np.repeat(np.arange(1, len(sizes) + 1, dtype=np.int64), sizes)
    doc = np.concatenate([np.arange(s, dtype=np.int64) for s in sizes])
    features = {f"f{i}": rng.normal(size=n).astype(np.float32) for i in range(1, N_FEATURES + 1)}
    margins = rng.normal(size=n).astype(np.float32)
    arrays: list[np.ndarray] = [labels, offsets, qid, doc, margins, *features.values()]
    for a in arrays:
        a.setflags(write=False)  # a plug-in that writes into its inputs fails here, not in a worker's training data
    return {"labels": labels, "offsets": offsets, "qid": qid, "doc": doc, "features": features, "margins": margins}


def check_objective(name: str, comp: Any) -> None:
    """Objective ``name`` on the batch at trees 0 and 1, twice each (the same values both times)."""
    from pipelines.core.config import Config
    from udfs.objectives.registry import check_gradients, shared

    cfg = Config()  # the default training settings (k, eta, seed, the gain) every objective's params hold
    common = shared(cfg.train.model, cfg.metric)
    b = batch()
    n = len(b["labels"])
    for tree in (0, 1):
        outs = []
        for _ in range(2):
            f = comp.make(common, b["labels"], b["offsets"], b["qid"], b["doc"])
            out = _call(name, lambda f=f, tree=tree: f(b["margins"], tree))
            outs.append(check_gradients(name, out, n, f"synthetic batch, tree {tree}"))
        if any(not np.array_equal(x, y) for x, y in zip(outs[0], outs[1], strict=True)):
            raise PluginError(
                f"objective {name!r} ({_where(name)}): returned other values for the same input at tree {tree}; a "
                "resumed node must grow the same trees: draw noise from params['seed'], tree, qid and doc"
            )


def check_difficulty(name: str, comp: Any, n_features: int = N_FEATURES, dataset: str = "mslr") -> None:
    """Difficulty score ``name`` on the batch: its ``features=`` among the ``n_features`` of ``dataset`` (the
    configured preset); one finite number per query; a ``label_free`` one the same numbers when the labels are
    others (a score that reads the labels is an oracle, whatever it declares)."""
    bad = [c for c in comp.features or () if int(c[1:]) > n_features]
    if bad:
        raise PluginError(
            f"difficulty score {name!r} ({_where(name)}): features= names {', '.join(bad)}, and dataset {dataset} "
            f"(conf/datasets/{dataset}.yaml) has {n_features} features, f1..f{n_features}"
        )
    b = batch()
    n = len(b["labels"])
    # a score may read features beyond MSLR's 136 (Istella has 220, Yahoo! 699): the batch has them too; whether
    # the dataset has them is checked against it (pipelines.data.curricula.missing_features)
    wide = [c for c in comp.features or () if c not in b["features"]]
    extra = {c: np.random.default_rng(int(c[1:])).normal(size=n).astype(np.float32) for c in wide}
    cols = b["features"] if comp.features is None else {c: extra.get(c, b["features"].get(c)) for c in comp.features}
    out = _call(name, lambda: comp.fn(b["labels"], Features(cols), b["offsets"], params=comp.settings()))
    a = scores_of(name, out, len(SIZES), len(b["labels"]))
    again = _call(name, lambda: comp.fn(b["labels"], Features(cols), b["offsets"], params=comp.settings()))
    if not np.array_equal(a, scores_of(name, again, len(SIZES), len(b["labels"]))):
        raise PluginError(
            f"difficulty score {name!r} ({_where(name)}): returned other scores for the same input; a curriculum "
            "built again must be the same one: draw any noise from a fixed seed"
        )
    if comp.kind == "label_free":
        other = (b["labels"] + 1 + np.arange(len(b["labels"])) % 3).astype(np.float32) % 5
        again = _call(name, lambda: comp.fn(other, Features(cols), b["offsets"], params=comp.settings()))
        if not np.array_equal(a, scores_of(name, again, len(SIZES), len(b["labels"])), equal_nan=True):
            raise PluginError(
                f"difficulty score {name!r} ({_where(name)}): declared kind='label_free', but its scores change "
                "when only the labels do; a score that reads the labels is kind='oracle'"
            )


def scores_of(name: str, out: Any, queries: int, rows: int) -> np.ndarray:
    """A difficulty score's result as float64, one per query; :class:`PluginError` naming what it returned."""
    if np.iscomplexobj(out):  # np.asarray would drop the imaginary part with a warning, not refuse it
        raise PluginError(f"difficulty score {name!r} ({_where(name)}): returned complex numbers, expected one real "
                          "number per query")  # fmt: skip
    try:
        a = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        raise PluginError(f"difficulty score {name!r} ({_where(name)}): returned {type(out).__name__}, expected one "
                          "number per query") from None  # fmt: skip
    if a.shape != (queries,):
        per_row = " (one per row: a score is one number per query)" if a.shape == (rows,) else ""
        raise PluginError(f"difficulty score {name!r} ({_where(name)}): returned shape {a.shape}{per_row}, expected "
                          f"({queries},): one per query")  # fmt: skip
    bad = ~np.isfinite(a)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PluginError(f"difficulty score {name!r} ({_where(name)}): query {i}'s score is {a[i]}: not finite")
    return a


def check_pacing(name: str, comp: Any) -> None:
    """Pacing function ``name`` for 2..8 stages at the default delta: shares in (0, 1], never decreasing."""
    from udfs.curriculum import pacing_shares

    for stages in range(2, 9):
        _call(name, lambda stages=stages: pacing_shares(name, stages, 0.33))


def _where(name: str) -> str:
    s = owner(name)
    return s.label if s else "built-in"


def _call(name: str, f: Any) -> Any:
    """``f()``; an exception of the plug-in's becomes one line naming it."""
    try:
        return f()
    except PluginError:
        raise
    except ComponentError as e:
        raise PluginError(f"{one_line(e)} ({_where(name)})") from None
    except ValueError as e:
        if "read-only" in str(e):  # numpy's refusal to write into the batch's arrays (batch())
            raise PluginError(
                f"{name!r} ({_where(name)}) writes into its inputs ({e}); a plug-in must not modify the margins, "
                "labels, offsets, qid, doc or features it is given (the training data's own arrays): copy them first"
            ) from None
        raise PluginError(
            f"{name!r} ({_where(name)}) raised {type(e).__name__}: {one_line(e)} on the synthetic batch"
        ) from None
    except KeyboardInterrupt:  # Ctrl-C, wherever it lands: ltr stops as it does for Ctrl-C
        raise
    except BaseException as e:  # sys.exit() in a plug-in would end the run with no word said; GeneratorExit too
        raise PluginError(
            f"{name!r} ({_where(name)}) raised {type(e).__name__}: {one_line(e)} on the synthetic batch"
        ) from None


CHECKS = {"objective": check_objective, "difficulty score": check_difficulty, "pacing function": check_pacing}


def check_all(names: list[str] | None = None, *, n_features: int = N_FEATURES, dataset: str = "mslr") -> list[str]:
    """Check every plug-in component, and every built-in one whose settings ``components`` sets (a bad value,
    ``stochastic_rank``'s ``estimator: foo`` say, exits 2 here, not in a Spark task); ``names``: only these;
    ``n_features``, ``dataset``: the features of the configured dataset, which a difficulty score may read. Return
    the names checked."""
    todo = dict(plugin_components())
    for name in components.configured():
        found = component(name)
        if found is not None:
            todo.setdefault(name, found)
    done = []
    for name, (kind, comp) in sorted(todo.items()):
        if names is None or name in names:
            if kind == "difficulty score":
                check_difficulty(name, comp, n_features, dataset)
            else:
                CHECKS[kind](name, comp)
            done.append(name)
    return done
