"""The report's significance, declared once: the level, the two paired tests a report may take as its primary one
(``report.primary_test``), the columns each writes, and when a difference is a win or a loss.

Every table, figure, headline, LaTeX file and MLflow note reads these: a level or a test's name changed here changes
it everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Family-wise level at which the report calls a Holm-corrected difference significant.
LEVEL = 0.05


@dataclass(frozen=True)
class PairedTest:
    """One of the report's paired tests: its name in words, its short label, the column of its raw p-value (the
    Holm-corrected one is :attr:`p_holm`) and the interval the headline gives with it."""

    name: str
    label: str
    p: str
    ci: str

    @property
    def p_holm(self) -> str:
        """The column of its Holm-corrected p-value (``perm_p_holm``, ``t_p_holm``)."""
        return f"{self.p}_holm"


#: ``report.primary_test`` -> its test; the other one is reported beside it.
TESTS: dict[str, PairedTest] = {
    "randomisation": PairedTest("randomisation test", "randomisation", "perm_p", "ci_boot"),
    "t": PairedTest("paired t-test", "t-test", "t_p", "ci_t"),
}


def test_of(primary_test: str) -> PairedTest:
    """The test named ``primary_test``; ValueError naming the ones there are."""
    if primary_test not in TESTS:
        raise ValueError(f"unknown primary test {primary_test!r}; expected one of {', '.join(TESTS)}")
    return TESTS[primary_test]


def other_test(primary_test: str) -> str:
    """The name of the test reported beside ``primary_test``."""
    return next(k for k in TESTS if k != primary_test)


def significance(p: float | None, delta: float | None, level: float = LEVEL) -> str | None:
    """``win`` / ``loss`` when the Holm-corrected ``p`` is below ``level``, by the sign of ``delta``; else None."""
    if p is None or delta is None or p >= level or delta == 0:
        return None
    return "win" if delta > 0 else "loss"


def row_significance(
    row: Mapping[str, Any], primary_test: str, delta: str = "delta", level: float = LEVEL
) -> str | None:
    """:func:`significance` of a comparison ``row`` by ``primary_test``'s Holm-corrected p-value and its ``delta``
    column (Table 1's ``delta``, report.json's ``mean_delta``)."""
    return significance(row.get(test_of(primary_test).p_holm), row.get(delta), level)
