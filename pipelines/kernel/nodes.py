"""A plan node as the kernel trains it: trees ``t0..t1`` of one objective on one data subset, after a parent
(:mod:`pipelines.plan.trie` makes them and their keys)."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.kernel.selfpaced import is_dynamic


@dataclass(frozen=True)
class Node:
    """Trees ``t0..t1`` of ``objective`` on ``data`` (``all`` or ``NAME.STAGE``), after ``parent``."""

    key: str
    parent: str | None
    objective: str
    data: str
    t0: int
    t1: int
    ends: tuple[str, ...] = ()  # labels of the paths complete after t1
    seed: int = 0  # added to train.seed for the node's randomness (a grid.seeds repetition; 0 otherwise)

    @property
    def trees(self) -> int:
        """Trees the node builds (``t1 - t0``)."""
        return self.t1 - self.t0

    @property
    def curriculum(self) -> str | None:
        """Name of the curriculum the node trains on; None when it trains on all rows or chooses its own
        (a self-paced rule's: :mod:`pipelines.kernel.selfpaced`)."""
        return None if self.data == "all" or is_dynamic(self.data) else self.data.split(".")[0]

    def describe(self) -> str:
        """``objective[@data] t0..t1`` (``@data`` left out for all rows), e.g. ``lambdamart 20..100``."""
        data = "" if self.data == "all" else "@" + self.data
        return f"{self.objective}{data}{f'~{self.seed}' if self.seed else ''} {self.t0}..{self.t1}"
