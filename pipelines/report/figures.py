"""Figure 1 (NDCG against trees) and Figure 2 (score distributions of the least and most relevant documents)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from pipelines.report.pairing import groups
from pipelines.report.records import Record, ReportError
from pipelines.report.stats import kl_divergence
from pipelines.study.design import BASELINE, MSE
from pipelines.tracking.runs import (
    png_bytes,
    pyplot,
)

log = logging.getLogger(__name__)


def figure1(records: list[Record], metric: str, split: str = "test") -> bytes:
    """Figure 1 as PNG: mean NDCG against trees of LambdaMART and every MSE-t, over the folds each finished."""
    plt = pyplot()
    g = groups(records)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key in sorted(g, key=lambda k: (k[0] != BASELINE, k[1] or 0)):
        if key[0] not in (BASELINE, MSE):
            continue
        rs = g[key]
        steps = rs[0].steps
        ax.plot(
            steps,
            np.mean([r.test for r in rs], axis=0),
            label=rs[0].label,
            lw=2.2 if key[0] == BASELINE else 1.2,
            color="black" if key[0] == BASELINE else None,
        )
    ax.set_xlabel("number of trees")
    ax.set_ylabel(f"{metric} ({split}, mean over folds)")
    ax.set_title("Figure 1: LambdaMART vs MSE-t")
    ax.legend(fontsize=8)
    out = png_bytes(fig)
    plt.close(fig)
    return out


def figure2(records: list[Record], tree: int) -> tuple[bytes, dict[str, Any]]:
    """Figure 2 as PNG and its numbers: score distributions of the least and most relevant documents after ``tree``
    trees for the first MSE-t with t >= ``tree`` and for LambdaMART, with their KL divergence (mean over folds).

    Raises
    ------
    ReportError
        The grid has no such MSE-t or baseline, or a run logged no distribution after ``tree`` trees.
    """
    plt = pyplot()
    g = groups(records)
    mse_keys = sorted([k for k in g if k[0] == MSE and (k[1] or 0) >= tree], key=lambda k: k[1] or 0)
    if (BASELINE, None) not in g or not mse_keys:
        raise ReportError(f"Figure 2 needs the baseline and an MSE-t with t >= {tree}")
    which = {"MSE": g[mse_keys[0]], "LambdaMART": g[(BASELINE, None)]}
    kl: dict[str, list[float]] = {k: [] for k in which}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (name, rs) in zip(axes, which.items(), strict=True):
        for i, r in enumerate(rs):
            d = next((x for x in r.score_dists if x["tree"] == tree), None)
            if d is None:
                raise ReportError(
                    f"{r.label} fold {r.fold}: no score distribution after {tree} trees (train.score_dist_trees)"
                )
            counts = d["counts"]
            lo = next(c for c in counts if sum(c) > 0)
            hi = next(c for c in reversed(counts) if sum(c) > 0)
            kl[name].append(kl_divergence(lo, hi))
            if i == 0:
                e = np.asarray(d["edges"])
                mid = (e[:-1] + e[1:]) / 2
                for c, lab in (
                    (lo, f"label {d['labels'][counts.index(lo)]}"),
                    (hi, f"label {d['labels'][counts.index(hi)]}"),
                ):
                    c = np.asarray(c, np.float64)
                    ax.plot(mid, c / max(c.sum(), 1) / np.diff(e), label=lab)
        ax.set_title(f"{name} after {tree} trees: KL = {np.mean(kl[name]):.3f}")
        ax.set_xlabel("predicted score")
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"density (fold {min(r.fold for r in which['MSE'])})")
    out = png_bytes(fig)
    plt.close(fig)
    return out, {
        "tree": tree,
        "mse_run": which["MSE"][0].label,
        "kl_mean": {k: float(np.mean(v)) for k, v in kl.items()},
        "kl_per_fold": kl,
    }
