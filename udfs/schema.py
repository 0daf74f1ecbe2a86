"""Column names and schemas of the project, defined once.

Every other module takes its column names from here: ingest writes these
columns, difficulty and training read them. ``udfs`` is the lowest layer
(``jobs -> pipelines -> udfs``), so the definitions live here and ``pipelines``
re-uses them.
"""

from __future__ import annotations

import pyarrow as pa

QID = "qid"
LABEL = "label"
DOC = "doc"
SUBSET = "subset"

#: Arrow / Spark types of the fixed columns. ``qid`` is a 32-bit integer
#: (MSLR qids are below 2**31; larger ones are rejected at ingest with a
#: message), ``label`` an int8 (Spark ``tinyint``), ``doc`` the row's position
#: in its query in source order (stable tie-breaking for metrics).
QID_TYPE = pa.int32()
LABEL_TYPE = pa.int8()
DOC_TYPE = pa.int32()
FEATURE_TYPE = pa.float32()


def feature_col(index: int) -> str:
    """Name of the column holding 1-based feature ``index`` (``f1`` .. ``fN``)."""
    if index < 1:
        raise ValueError(f"feature ids are 1-based, got {index}")
    return f"f{index}"


def feature_cols(n_features: int) -> list[str]:
    """Names of all feature columns ``f1`` .. ``f{n_features}``."""
    return [feature_col(i) for i in range(1, n_features + 1)]


def arrow_schema(n_features: int) -> pa.Schema:
    """Arrow schema of one stored Parquet file (the ``subset`` is the partition directory)."""
    fields = [
        pa.field(QID, QID_TYPE, nullable=False),
        pa.field(LABEL, LABEL_TYPE, nullable=False),
        pa.field(DOC, DOC_TYPE, nullable=False),
    ]
    fields += [pa.field(c, FEATURE_TYPE, nullable=False) for c in feature_cols(n_features)]
    return pa.schema(fields)


def spark_ddl(n_features: int, with_subset: bool = True) -> str:
    """Spark DDL string of a stored dataset as Spark reads it back."""
    cols = [f"{QID} int", f"{LABEL} tinyint", f"{DOC} int"]
    cols += [f"{c} float" for c in feature_cols(n_features)]
    if with_subset:
        cols.append(f"{SUBSET} string")
    return ", ".join(cols)
