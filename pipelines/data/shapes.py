"""Synthetic LETOR data shaped like Istella LETOR and Yahoo! LTR Challenge set 1 (``ltr generate --shape``).

The MSLR shape's model lives in :mod:`pipelines.data.generate`; this module holds the two others. Each
:class:`ShapeSpec` gives the real dataset's published layout (its file names and the share of queries in
each), its feature count, label range and query sizes, so that ``ltr ingest`` reads the synthetic files and
the real ones the same way.

Both shapes share one hidden-relevance model, per query and document:

* a query level ``mu_q`` (a few percent of queries get no relevant document) and a document relevance
  ``e ~ N(0, 1)``; the label is ``mu_q + e + noise`` cut at thresholds computed (normal quantiles) to give
  the shape's label shares;
* every feature is a noisy mix of ``e`` (linearly, or only its positive or its negative part, so some
  features separate the best documents and others the worst), scaled by a per-query *informativeness* of
  the feature's group (how well a feature ranks varies from query to query), of document-level nuisance
  factors shared between features, of query-level offsets, and of its own noise. A feature's weights are
  fixed per shape (drawn once from a constant seed, not the run's seed). A quarter of the features carry a
  clear signal, many a weak one, the rest none, so a learned ranker, which averages the noise out and
  cancels the shared nuisance, clearly beats any single feature; no feature is a BM25 or a PageRank.

The real datasets' values are then mimicked per shape:

* **Istella** (220 dense features, labels 0-4): integer counts (some zero-inflated), positive reals,
  ratios in [0, 1] and negative reals (log-probability-like); two real features carry Istella's overflow
  sentinel ``1.79769313486e+308`` on about 0.1% of rows, written as exactly that text (it exceeds float32;
  ingest clamps it). Label shares about 0.89 / 0.06 / 0.03 / 0.013 / 0.007 and the query sizes (lognormal,
  mean about 316 documents, a tail into the thousands, a few tiny queries) are this generator's choice,
  matching Istella's counts (10.45M rows, 33,018 queries) and its heavy skew, not measured shares.
  Layout: ``full/train.txt``, ``full/test.txt`` (23,219 : 9,799 queries).
* **Yahoo** (699 sparse features, labels 0-4 with shares about 0.26 / 0.36 / 0.28 / 0.08 / 0.02, about 23.7
  documents a query): values in [0, 1] (a logistic of the latent value; some features take a few levels
  only) with at most 6 decimals; each feature is present in a row with its own rate (a few always, many
  rarely, a third of the features on average, modulated per query), and an absent feature is not written.
  Layout: ``set1.train.txt``, ``set1.valid.txt``, ``set1.test.txt`` (19,944 : 2,994 : 6,983 queries).

Randomness: the query plan comes from ``[seed, code, 0]``, each batch of queries from ``[seed, code, 1,
file, batch]``, so the bytes do not depend on how many processes write them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Istella's overflow sentinel (the largest double, printed with 12 significant digits), written as is.
SENTINEL = "1.79769313486e+308"

_GROUPS = 5  # feature groups, each with its own per-query informativeness
_NUISANCE = 8  # document-level nuisance factors
_QUERY_FACTORS = 3  # query-level offsets
_LABEL_NOISE = 0.9
_EMPTY_QUERIES = 0.02  # queries with no relevant document


@dataclass(frozen=True)
class ShapeSpec:
    """A real dataset's shape: layout, features, labels, query sizes."""

    name: str
    code: int  # enters the seeds
    n_features: int
    max_label: int
    label_shares: tuple[float, ...]
    files: tuple[str, ...]  # relative paths, in the order they are written
    file_queries: tuple[int, ...]  # the real dataset's queries per file (the split ratio)
    docs_lognormal: tuple[float, float]  # mu, sigma of documents per query
    tiny_queries: float  # share of queries with 1..tiny_max documents
    tiny_max: int
    max_docs: int
    sd_query: float  # spread of the query level mu_q
    batch_rows: int  # rows per batch (a batch holds whole queries)

    @property
    def min_queries(self) -> int:
        """At least one query per written file."""
        return len(self.files)


ISTELLA = ShapeSpec(
    name="istella",
    code=2,
    n_features=220,
    max_label=4,
    label_shares=(0.89, 0.06, 0.03, 0.013, 0.007),
    files=("full/train.txt", "full/test.txt"),
    file_queries=(23219, 9799),
    docs_lognormal=(5.37, 0.9),
    tiny_queries=0.03,
    tiny_max=12,
    max_docs=6000,
    sd_query=1.0,
    batch_rows=8192,
)

YAHOO = ShapeSpec(
    name="yahoo",
    code=3,
    n_features=699,
    max_label=4,
    label_shares=(0.26, 0.36, 0.28, 0.08, 0.02),
    files=("set1.train.txt", "set1.valid.txt", "set1.test.txt"),
    file_queries=(19944, 2994, 6983),
    docs_lognormal=(3.02, 0.62),
    tiny_queries=0.05,
    tiny_max=5,
    max_docs=140,
    sd_query=0.8,
    batch_rows=8192,
)

SHAPES: dict[str, ShapeSpec] = {s.name: s for s in (ISTELLA, YAHOO)}


# ------------------------------------------------------------- the plan
def split_counts(queries: int, weights: tuple[int, ...]) -> np.ndarray:
    """``queries`` split in proportion to ``weights`` (largest remainders), at least one per part."""
    w = np.asarray(weights, np.float64) / sum(weights)
    exact = queries * w
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(-(exact - counts), kind="stable")[: queries - int(counts.sum())]] += 1
    for k in np.flatnonzero(counts == 0):
        counts[np.argmax(counts)] -= 1
        counts[k] = 1
    return counts


def shape_queries(spec: ShapeSpec, queries: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query: qid (increasing), number of documents, index of its file in ``spec.files``.

    Raises
    ------
    ValueError
        Fewer queries than files.
    """
    if queries < spec.min_queries:
        raise ValueError(
            f"--queries must be at least {spec.min_queries} for --shape {spec.name} "
            f"(one per file: {', '.join(spec.files)}), got {queries}"
        )
    rng = np.random.default_rng([seed, spec.code, 0])
    qid = np.cumsum(rng.integers(1, 30, size=queries)).astype(np.int64)
    n = np.rint(rng.lognormal(*spec.docs_lognormal, size=queries)).astype(np.int64)
    tiny = rng.random(queries) < spec.tiny_queries
    n[tiny] = rng.integers(1, spec.tiny_max + 1, size=int(tiny.sum()))
    n = np.clip(n, 1, spec.max_docs)
    file = np.empty(queries, np.int64)
    file[rng.permutation(queries)] = np.repeat(np.arange(len(spec.files)), split_counts(queries, spec.file_queries))
    return qid, n, file


def batches(n_docs: np.ndarray, batch_rows: int) -> np.ndarray:
    """Start index of each batch of consecutive queries (about ``batch_rows`` rows each), plus the end."""
    before = np.cumsum(n_docs) - n_docs
    _, starts = np.unique(before // batch_rows, return_index=True)
    return np.append(starts, n_docs.size)


# ------------------------------------------------------------ the model
@dataclass(frozen=True)
class FeatureModel:
    """A shape's fixed feature weights: ``latent = design @ weights + noise * scale`` (about unit variance)."""

    weights: np.ndarray  # [3 * groups + nuisance + query factors, n_features]
    scale: np.ndarray  # own noise per feature
    kind: np.ndarray  # shape-specific value type per feature
    a: np.ndarray  # shape-specific transform parameters
    b: np.ndarray
    rate: np.ndarray  # Istella: share of zeros; Yahoo: presence rate (inf: always present)
    levels: np.ndarray  # Yahoo: number of levels (0 = continuous)
    thresholds: np.ndarray  # on mu_q + e + noise, for the label shares


def _thresholds(spec: ShapeSpec) -> np.ndarray:
    """Cuts of ``mu_q + e + noise ~ N(0, sd)`` giving ``spec.label_shares`` (empty queries counted as 0s)."""
    p = np.array(spec.label_shares) / (1.0 - _EMPTY_QUERIES)
    p[0] -= _EMPTY_QUERIES / (1.0 - _EMPTY_QUERIES)
    sd = float(np.sqrt(spec.sd_query**2 + 1.0 + _LABEL_NOISE**2))
    return np.array([NormalDist(0.0, sd).inv_cdf(c) for c in np.cumsum(p)[:-1]])


@functools.cache
def feature_model(name: str) -> FeatureModel:
    """The fixed feature weights of shape ``name`` (from a constant seed: same features whatever the run's seed)."""
    spec = SHAPES[name]
    f = spec.n_features
    rng = np.random.default_rng([20180, spec.code])
    kind_of_signal = rng.choice(3, size=f, p=[0.35, 0.40, 0.25])  # clear, weak, none
    w = np.where(
        kind_of_signal == 0, rng.uniform(0.25, 0.5, f), np.where(kind_of_signal == 1, rng.uniform(0.05, 0.25, f), 0.0)
    )
    response = rng.choice(3, size=f, p=[0.6, 0.25, 0.15])  # e, max(e, 0), min(e, 0)
    group = rng.integers(0, _GROUPS, size=f)
    n_design = 3 * _GROUPS + _NUISANCE + _QUERY_FACTORS
    weights = np.zeros((n_design, f))
    weights[response * _GROUPS + group, np.arange(f)] = w
    for j in range(f):
        weights[3 * _GROUPS + rng.choice(_NUISANCE, size=rng.integers(1, 3), replace=False), j] = rng.normal(0, 0.8)
    weights[3 * _GROUPS + _NUISANCE :] = rng.normal(0.0, 0.5, size=(_QUERY_FACTORS, f))
    scale = rng.uniform(0.6, 1.2, f)
    var_h = np.array([1.0, 0.5 - 0.5 / np.pi, 0.5 - 0.5 / np.pi])[response]
    sd = np.sqrt(0.3 * w**2 * var_h + (weights[3 * _GROUPS :] ** 2).sum(axis=0) + scale**2)
    if name == "istella":
        kind = rng.choice(4, size=f, p=[0.35, 0.35, 0.2, 0.1])  # count, positive real, ratio, negative real
        a = np.where(kind == 0, rng.uniform(0.0, 3.0, f), rng.uniform(-3.0, 3.0, f))
        b = np.where(kind == 0, rng.uniform(0.4, 1.0, f), rng.uniform(0.3, 1.2, f))
        rate = np.where(kind == 0, rng.uniform(0.0, 0.5, f), 0.0)
        levels = np.zeros(f, np.int64)
    else:
        kind = np.zeros(f, np.int64)
        a = rng.uniform(-1.5, 1.5, f)
        b = rng.uniform(1.0, 2.5, f)
        rate = rng.beta(0.45, 0.9, f)
        rate[rng.choice(f, size=12, replace=False)] = np.inf  # always present (so no row is empty)
        levels = np.where(rng.random(f) < 0.15, rng.choice([1, 2, 3, 5, 10], size=f), 0)
    return FeatureModel(weights / sd, scale / sd, kind, a, b, rate, levels, _thresholds(spec))


def _relevance(
    rng: np.random.Generator, spec: ShapeSpec, n_docs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels (int8), each row's query index and the design matrix of the latent model."""
    m = feature_model(spec.name)
    nq = n_docs.size
    g = np.repeat(np.arange(nq), n_docs)
    r = g.size
    mu = rng.normal(0.0, spec.sd_query, size=nq)
    mu[rng.random(nq) < _EMPTY_QUERIES] = -8.0
    e = rng.standard_normal(r)
    label = np.searchsorted(m.thresholds, mu[g] + e + rng.normal(0.0, _LABEL_NOISE, size=r)).astype(np.int8)
    inform = (rng.beta(2.0, 2.0, size=(nq, _GROUPS)) * 1.4)[g]  # [r, groups]
    design = np.empty((r, m.weights.shape[0]))
    design[:, :_GROUPS] = inform * e[:, None]
    design[:, _GROUPS : 2 * _GROUPS] = inform * np.maximum(e, 0.0)[:, None]
    design[:, 2 * _GROUPS : 3 * _GROUPS] = inform * np.minimum(e, 0.0)[:, None]
    design[:, 3 * _GROUPS : 3 * _GROUPS + _NUISANCE] = rng.standard_normal((r, _NUISANCE))
    design[:, 3 * _GROUPS + _NUISANCE :] = rng.standard_normal((nq, _QUERY_FACTORS))[g]
    return label, g, design


# ------------------------------------------------------------ Istella
def simulate_istella(
    rng: np.random.Generator, n_docs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Labels, features ``[rows, 220]`` (float64), which features are integers, and the sentinel mask
    ``[rows, 2]`` of :data:`ISTELLA_SENTINEL_FEATURES`."""
    m = feature_model("istella")
    label, _, design = _relevance(rng, ISTELLA, n_docs)
    r = label.size
    v = design @ m.weights + rng.standard_normal((r, ISTELLA.n_features)) * m.scale
    k = m.kind
    X = np.empty_like(v)
    c = k == 0
    X[:, c] = np.minimum(np.floor(np.exp(m.a[c] + m.b[c] * v[:, c])), 1e6)
    X[:, c] *= rng.random((r, int(c.sum()))) >= m.rate[c]
    c = k == 1
    X[:, c] = np.exp(m.a[c] + m.b[c] * v[:, c])
    c = k == 2
    X[:, c] = 1.0 / (1.0 + np.exp(-(m.a[c] / 2 + 1.7 * m.b[c] * v[:, c])))
    c = k == 3
    X[:, c] = -np.exp(m.a[c] / 2 + 0.5 * m.b[c] * v[:, c])
    sentinel = rng.random((r, ISTELLA_SENTINEL_FEATURES.size)) < 0.001
    return label, X, k == 0, sentinel


def _istella_sentinel_features() -> np.ndarray:
    """1-based ids of the two positive real features that carry the sentinel (fixed per shape)."""
    return np.flatnonzero(feature_model("istella").kind == 1)[[3, 17]] + 1


ISTELLA_SENTINEL_FEATURES = _istella_sentinel_features()


def format_dense(
    labels: np.ndarray, qids: np.ndarray, X: np.ndarray, is_int: np.ndarray, overflow: dict[int, np.ndarray]
) -> memoryview:
    """LETOR text, every feature written; integers as integers, the rest rounded to 6 decimals (the shortest
    text of the rounded double: ``0.25``, ``-3.1``, ``0.000001``); ``overflow``: feature id -> rows written as
    :data:`SENTINEL`."""
    args: list = [
        pc.cast(pa.array(labels.astype(np.int64)), pa.string()),
        pa.scalar(" qid:"),
        pc.cast(pa.array(qids.astype(np.int64)), pa.string()),
    ]
    for j in range(X.shape[1]):
        col = X[:, j]
        if is_int[j]:
            txt = pc.cast(pa.array(col.astype(np.int64)), pa.string())
        else:
            txt = pc.cast(pa.array(np.round(col, 6) + 0.0), pa.string())  # + 0.0: no "-0"
        if j + 1 in overflow:
            txt = pc.if_else(pa.array(overflow[j + 1]), pa.scalar(SENTINEL), txt)
        args += [pa.scalar(f" {j + 1}:"), txt]
    args.append(pa.scalar("\n"))
    return letor_bytes(pc.binary_join_element_wise(*args, ""))


# -------------------------------------------------------------- Yahoo
def simulate_yahoo(
    rng: np.random.Generator, n_docs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Labels, the present features as rows and 0-based features in row-major order, and their values
    (in [0, 1], rounded to 6 decimals)."""
    m = feature_model("yahoo")
    label, g, design = _relevance(rng, YAHOO, n_docs)
    r = label.size
    f = YAHOO.n_features
    boost = rng.lognormal(0.0, 0.3, size=n_docs.size).astype(np.float32)[g]  # queries with more features
    u = rng.random((r, f), dtype=np.float32)
    u /= boost[:, None]
    flat = np.flatnonzero(u < m.rate.astype(np.float32))
    rows, cols = np.divmod(flat, f)
    v = (design @ m.weights).ravel()[flat] + rng.standard_normal(flat.size) * m.scale[cols]
    x = 1.0 / (1.0 + np.exp(-(m.a[cols] + m.b[cols] * v)))
    lv = m.levels[cols]
    x = np.where(lv > 0, np.rint(x * lv) / np.maximum(lv, 1), x)
    return label, rows, cols, np.round(x, 6)


@functools.cache
def _prefixes(n_features: int) -> pa.Array:
    return pa.array([f" {j + 1}:" for j in range(n_features)])


def format_sparse(
    labels: np.ndarray, qids: np.ndarray, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_features: int
) -> memoryview:
    """LETOR text of sparse rows: only the present ``id:value`` pairs (``rows``, 0-based ``cols``: in row-major
    order, so ids increase), values as the shortest text of the double (at most 6 decimals once rounded)."""
    tokens = pc.binary_join_element_wise(
        _prefixes(n_features).take(pa.array(cols)), pc.cast(pa.array(values + 0.0), pa.string()), ""
    )
    if isinstance(tokens, pa.ChunkedArray):
        tokens = tokens.combine_chunks()
    tok_off = np.frombuffer(tokens.buffers()[1], np.int32, count=len(tokens) + 1, offset=tokens.offset * 4)
    starts = np.searchsorted(rows, np.arange(labels.size + 1))
    feats = pa.StringArray.from_buffers(labels.size, pa.py_buffer(tok_off[starts].copy()), tokens.buffers()[2])
    lines = pc.binary_join_element_wise(
        pc.cast(pa.array(labels.astype(np.int64)), pa.string()),
        pa.scalar(" qid:"),
        pc.cast(pa.array(qids.astype(np.int64)), pa.string()),
        feats,
        pa.scalar("\n"),
        "",
    )
    return letor_bytes(lines)


def letor_bytes(lines: pa.Array) -> memoryview:
    """The text of a string array's values, back to back, without a copy (each value ends with its newline)."""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4)
    return memoryview(lines.buffers()[2])[offsets[0] : offsets[-1]]


# ------------------------------------------------------------- a batch
def batch_text(
    name: str, seed: int, file: int, batch: int, qids: np.ndarray, n_docs: np.ndarray, label_noise: float = 0.0
) -> tuple[memoryview, int, int]:
    """LETOR text of one batch of queries of shape ``name`` (its own seed: the same bytes in any process), with
    the labels of a ``label_noise`` share of its rows redrawn (:func:`redraw_labels`, from a seed of its own, so
    that the rest of the text is the clean one's); and how many rows were redrawn and how many labels changed."""
    spec = SHAPES[name]
    rng = np.random.default_rng([seed, spec.code, 1, file, batch])
    q = np.repeat(qids, n_docs)
    if name == "istella":
        label, X, is_int, sentinel = simulate_istella(rng, n_docs)
    else:
        label, rows, cols, values = simulate_yahoo(rng, n_docs)
    noisy, redrawn = redraw_labels(label, label_noise, spec.max_label, [seed, spec.code, 2, file, batch])
    changed = int((noisy != label).sum())
    if name == "istella":
        overflow = {int(f): sentinel[:, i] for i, f in enumerate(ISTELLA_SENTINEL_FEATURES)}
        return format_dense(noisy, q, X, is_int, overflow), redrawn, changed
    return format_sparse(noisy, q, rows, cols, values, spec.n_features), redrawn, changed


def redraw_labels(labels: np.ndarray, share: float, max_label: int, seed: list[int]) -> tuple[np.ndarray, int]:
    """``labels`` with each row's label replaced, with probability ``share``, by a grade drawn uniformly from
    0..``max_label`` (it may draw the same grade: a changed label is ``share * max_label / (max_label + 1)`` of the
    rows on average), from the generator seeded by ``seed``; and how many were redrawn. Features are left as they
    are: the noise is in the annotation, not in the documents (the noisy-label condition of Wu, Dyer & Neyshabur
    2021). ``share`` 0 draws nothing and returns ``labels`` itself."""
    if share <= 0.0:
        return labels, 0
    rng = np.random.default_rng(seed)
    redraw = rng.random(labels.size) < share
    out = labels.copy()
    out[redraw] = rng.integers(0, max_label + 1, size=int(redraw.sum())).astype(labels.dtype)
    return out, int(redraw.sum())
