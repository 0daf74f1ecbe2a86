"""The report's document model: its sections, tables, figures and headline pieces, which :mod:`pipelines.report.render`
fills and writes as Markdown and :mod:`pipelines.report.page` writes as the HTML page (both import this module; it
imports neither)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pipelines.report.significance import TESTS

#: The figures the page can show, in the page's order (``images`` of :func:`render`, by file name).
FIGURE_NAMES = ("forest.png", "convergence.png", "selfpaced.png", "by_difficulty.png", "figure1.png", "figure2.png")


@dataclass
class Table:
    """A table of text cells; ``caption``: its sub-heading (``###`` in Markdown), if any."""

    head: list[str]
    rows: list[list[str]]
    caption: str | None = None


#: A section's body: Markdown paragraphs and tables, in order.
Block = str | Table


@dataclass
class Section:
    """One ``##`` section of the report: ``title``, ``what`` (one line: what it holds, the page's collapsed
    summary), ``body`` (Markdown paragraphs and tables) and ``how`` (the "How to read" line under the table)."""

    anchor: str
    title: str
    what: str = ""
    body: list[Block] = field(default_factory=list)
    how: str | None = None

    @property
    def rows(self) -> int:
        return sum(len(b.rows) for b in self.body if isinstance(b, Table))


@dataclass
class Figure:
    """A figure of the report: its file ``name``, ``title``, ``how`` (the "How to read" caption) and ``note``
    (a further line of numbers, if any)."""

    name: str
    title: str
    how: str
    note: str | None = None


@dataclass
class Report:
    """Everything the Markdown and the page show, in their order."""

    title: str
    summary: str
    warnings: list[str]
    headline: dict[str, Any] | None
    no_headline: str
    metric: str
    primary: str | None
    margin: float | None
    figures: list[Figure]
    tables: list[Section]
    provenance: list[str]
    files: list[str]


def p_text(v: float | None) -> str:
    return "n/a" if v is None else ("<0.0001" if v < 1e-4 else f"{v:.4f}")


def num_text(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


#: A piece of the headline: text, or a number ``(key below "headline.", value, its text)``.
Part = str | tuple[str, Any, str]


def test_name(k: str) -> str:
    return "t-test" if k == "t" else f"{TESTS[k].label} test"


def text_of(parts: Iterable[Part]) -> str:
    """The pieces as plain text."""
    return "".join(p if isinstance(p, str) else p[2] for p in parts)


def headline_lines(rep: Report) -> tuple[list[Part], list[dict[str, Any]]]:
    """The headline's lead and, per row: ``system``, ``about`` (its family and how it was chosen), ``significant``
    (win, loss or None), ``verdict``, ``lines`` (Δ and its interval; the p-values; non-inferiority) and
    ``sentence``.
    Numbers are ``(key, value, text)`` (key below ``headline.``): the Markdown writes their text, the page marks
    each up with its key and exact value."""
    h = rep.headline or {}
    m = h.get("metric") or rep.metric
    base = h.get("baseline") or {}
    primary = h.get("primary_test") if h.get("primary_test") in TESTS else rep.primary
    margin = h.get("margin", rep.margin)
    lead: list[Part] = [f"{m} on test against {base.get('system', 'LambdaMART')} (mean "]
    lead += [("baseline.mean", base.get("mean"), num_text(base.get("mean"), ".4f")), " after "]
    lead += [("baseline.trees", base.get("trees"), str(base.get("trees", "?"))), " trees). "]
    if primary:
        other = next(k for k in TESTS if k != primary)
        lead.append(
            f"Significance: the {test_name(primary)}, Holm-corrected (primary); the {test_name(other)} is a "
            "robustness check. "
        )
    if margin is not None:
        lead += ["As good as LambdaMART: the one-sided 95% lower bound of Δ above −", ("margin", margin, f"{margin:g}")]
        lead.append(".")
    rows = []
    for i, r in enumerate(h.get("rows", [])):
        k = f"rows.{i}."
        about: list[Part] = [r.get("family_label") or r.get("family") or ""]
        if r.get("chosen_on"):
            about.append(f", chosen on {r['chosen_on']}")
            if r.get("vali") is not None:
                about += [f" ({m} ", (k + "vali", r["vali"], f"{r['vali']:.4f}"), ")"]
        parts: list[Part] = [f"Δ {m} ", (k + "delta", r.get("delta"), num_text(r.get("delta"), "+.4f"))]
        ci = r.get("ci95")
        if ci:
            parts += [" [", (k + "ci95.0", ci[0], num_text(ci[0], "+.4f")), ", "]
            parts += [(k + "ci95.1", ci[1], num_text(ci[1], "+.4f")), "]"]
        lines = [parts]
        parts = [f"{TESTS[primary].label} p, Holm (primary) " if primary else "p, Holm "]
        lines.append(parts)
        parts.append((k + "p_holm", r.get("p_holm"), p_text(r.get("p_holm"))))
        if primary and "p_holm_other" in r:
            other = next(x for x in TESTS if x != primary)
            parts += [
                f" ({TESTS[other].label} p, Holm ",
                (k + "p_holm_other", r["p_holm_other"], p_text(r["p_holm_other"])),
            ]
            parts.append(")")
        parts = []
        lines.append(parts)
        if r.get("trees") is not None:
            parts.append(f"as good within {margin:g} after " if margin is not None else "as good after ")
            parts += [(k + "trees", r["trees"], str(r["trees"])), " of "]
            parts += [(k + "baseline_trees", r.get("baseline_trees"), str(r.get("baseline_trees", "?"))), " trees"]
            tci = r.get("trees_ci95")
            if tci:
                parts += [" [", (k + "trees_ci95.0", tci[0], num_text(tci[0], "g")), ", "]
                parts += [(k + "trees_ci95.1", tci[1], "not reached" if tci[1] is None else f"{tci[1]:g}"), "]"]
            if r.get("ratio") is not None:
                parts += [" (", (k + "ratio", r["ratio"], f"{r['ratio']:.2f}"), "x"]
                rci = r.get("ratio_ci95")
                if rci:
                    parts += [" [", (k + "ratio_ci95.0", rci[0], num_text(rci[0], ".2f")), ", "]
                    hi = "not reached" if rci[1] is None else f"{rci[1]:.2f}"
                    parts += [(k + "ratio_ci95.1", rci[1], hi), "]"]
                parts.append(")")
        else:
            parts.append(f"not shown as good within {margin:g} " if margin is not None else "not shown as good ")
            parts += ["at any point of its curve (LambdaMART: "]
            parts += [(k + "baseline_trees", r.get("baseline_trees"), str(r.get("baseline_trees", "?"))), " trees)"]
            tci, rci = r.get("trees_ci95"), r.get("ratio_ci95")
            if tci:  # some bootstrap resamples get there: how many trees they need
                parts += ["; over bootstrap resamples [", (k + "trees_ci95.0", tci[0], num_text(tci[0], "g")), ", "]
                parts += [(k + "trees_ci95.1", tci[1], "not reached" if tci[1] is None else f"{tci[1]:g}"), "] trees"]
            if rci:
                parts += [" (", (k + "ratio_ci95.0", rci[0], num_text(rci[0], ".2f")), "x, "]
                parts += [(k + "ratio_ci95.1", rci[1], "not reached" if rci[1] is None else f"{rci[1]:.2f}x"), ")"]
        sig = r.get("significant")
        rows.append(
            {
                "system": r.get("system", "?"),
                "about": about if text_of(about) else [],
                "significant": sig,
                "verdict": {"win": "significantly better", "loss": "significantly worse"}.get(
                    sig or "", "no significant difference"
                ),
                "lines": lines,
                "sentence": r.get("sentence"),
            }
        )
    return lead, rows


def headline_markdown(rep: Report) -> list[str]:
    """The headline in Markdown: the lead, then one line per row."""
    if not rep.headline:
        return [f"No headline: {rep.no_headline}."]
    lead, rows = headline_lines(rep)
    md = [text_of(lead), ""]
    for r in rows:
        about = f" ({text_of(r['about'])})" if r["about"] else ""
        md.append(f"- **{r['system']}**{about}: **{r['verdict']}**; " + "; ".join(text_of(x) for x in r["lines"]))
        if r["sentence"]:
            md.append(f"  {r['sentence']}")
    if rep.headline.get("note"):
        md += ["", rep.headline["note"]]
    return md
