"""The conventions a run is configured with, as plain values: NDCG's (:class:`NdcgSpec`).

Here, not beside the code that computes with them (:mod:`udfs.metrics`, :mod:`udfs.objectives`), so that
reading a config imports no JIT compiler: numba's import is a noticeable share of every process that loads a
config (each ``ltr`` command, each Airflow task and DAG parse), for a frozen dataclass
(benchmarks/RESULTS.md, "A small barrier job's fixed cost").
"""

from __future__ import annotations

from dataclasses import dataclass

GAINS = ("exp2", "linear")
TIES = ("input", "worst", "average")


@dataclass(frozen=True)
class NdcgSpec:
    """Conventions of an NDCG computation (see the module docstring): the cutoff ``k``, the ``gain`` of a label, the
    value of a query without relevant documents (``empty``) and the order of equal scores (``ties``). Each is
    described where the config declares it, as ``metric.<name>`` (``pipelines.core.config.schema.METRIC``)."""

    k: int = 10
    gain: str = "exp2"
    empty: float = 1.0
    ties: str = "input"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"NDCG cutoff k must be >= 1, got {self.k}")
        if self.gain not in GAINS:
            raise ValueError(f"unknown NDCG gain {self.gain!r}; expected one of {GAINS}")
        if self.ties not in TIES:
            raise ValueError(f"unknown NDCG tie policy {self.ties!r}; expected one of {TIES}")
        if not 0.0 <= self.empty <= 1.0:
            raise ValueError(f"NDCG value for queries without relevant documents must be in [0, 1], got {self.empty}")

    @property
    def name(self) -> str:
        """A metric name MLflow accepts, e.g. ``ndcg_at_10``."""
        return f"ndcg_at_{self.k}"

    def describe(self) -> str:
        """One line stating the conventions, printed next to every reported number."""
        g = "2^label-1" if self.gain == "exp2" else "label"
        return (
            f"NDCG@{self.k}: gain {g}, discount 1/log2(rank+1), queries without relevant "
            f"documents = {self.empty:g}, ties: {self.ties}"
        )

    def to_dict(self) -> dict[str, object]:
        """The conventions as a dict (``k``, ``gain``, ``empty``, ``ties``): ``NdcgSpec(**d)`` makes them again."""
        return {"k": self.k, "gain": self.gain, "empty": self.empty, "ties": self.ties}
