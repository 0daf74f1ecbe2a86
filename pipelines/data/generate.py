"""``ltr generate``: a synthetic dataset that looks like an MSLR-WEB30K download (or, with ``shape``, like
Istella LETOR or Yahoo! LTR Challenge set 1: :mod:`pipelines.data.shapes`).

Output: ``Fold1..Fold5/{train,vali,test}.txt`` in LETOR text, the five-subset
rotation of MSLR.md (Fold1 test = S5, Fold2 test = S1, ...), plus
``generate.json`` describing the run (shape, feature count, label range, files).
The same ingest path serves it and the real data.

The model, per query and document:

* a hidden relevance ``z = mu_q + e``; the label is ``z`` plus noise cut at
  thresholds that give MSLR-like shares (about half 0, a few percent 3-4); a few
  percent of queries have no relevant document at all;
* query length (1-6 terms), per-term IDF and a per-query *text informativeness*
  ``a_text``: term frequencies in each stream (body, anchor, title, url; whole =
  their sum) are Poisson with a rate that grows with ``a_text * (z - mu_q)``.
  All text features (1-125: covered terms, stream lengths, IDF, TF statistics,
  normalised TF, TF*IDF, boolean/vector-space models, BM25, LMIR.*) are
  computed from these TFs with their textbook formulas, so BM25 (106-110) is
  informative but imperfect, and how well it ranks varies from query to query;
* link and quality signals (126-133) with their own per-query informativeness
  ``a_link`` (PageRank 130), and click signals (134-136) that a learned model
  can combine with the text features: a LambdaMART model clearly beats ranking
  by BM25 alone.

Integer-valued features (counts, lengths, links, clicks) are written as
integers, the rest with at most 6 decimals, as MSLR does. Generation streams
in batches of queries, one subset per process, with per-batch seeds derived
from the seed, so the output is identical for any number of workers and the
memory stays bounded.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Generator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.core.config import GENERATE_SHAPES
from pipelines.core.storage import atomic_file, write_file_atomic
from pipelines.data import shapes
from pipelines.data.dataset import MSLR_ROTATION

log = logging.getLogger(__name__)

#: What a generation writes beside its files: its settings and counts (the freshness record of the generate step).
RECORD = "generate.json"

N_FEATURES = 136
MAX_TERMS = 6
STREAMS = 5  # body, anchor, title, url, whole document
BATCH_QUERIES = 256
MAX_DOCS = 1251

#: Thresholds on z + noise giving label shares close to MSLR-WEB30K's
#: (about 0.52 / 0.32 / 0.13 / 0.02 / 0.01).
LABEL_THRESHOLDS = np.array([0.05, 1.55, 2.75, 3.55])

#: 1-based ids of the features written as integers.
INT_FEATURES = np.array(
    list(range(1, 6))
    + list(range(11, 16))
    + list(range(21, 36))
    + list(range(96, 101))
    + [126, 127, 128, 129, 130, 131, 132, 133, 134, 135]
)

_AVG_LEN = np.array([700.0, 20.0, 8.0, 7.0, 735.0])
_STREAM_BOOST = np.array([1.0, 3.0, 8.0, 5.0])


@dataclass(frozen=True)
class GenerateSummary:
    """What ``generate`` wrote. ``subset_rows`` / ``subset_queries``: per MSLR subset S1..S5, or per file of the
    other shapes."""

    out: str
    queries: int
    rows: int
    seed: int
    subset_rows: dict[str, int]
    subset_queries: dict[str, int]
    seconds: float
    shape: str = "mslr"
    n_features: int = N_FEATURES
    labels: tuple[int, int] = (0, 4)
    files: tuple[str, ...] = field(default_factory=tuple)
    label_noise: float = 0.0


# ------------------------------------------------------------- the model
def mslr_queries(queries: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query: qid (increasing), number of documents, subset index 0..4."""
    if queries < 5:
        raise ValueError(f"--queries must be at least 5 (one per subset), got {queries}")
    rng = np.random.default_rng([seed, 0])
    qid = np.cumsum(rng.integers(1, 30, size=queries)).astype(np.int64)
    n = np.rint(rng.lognormal(4.55, 0.75, size=queries)).astype(np.int64)
    small = rng.random(queries) < 0.04  # a tail of tiny queries, single documents included
    n[small] = rng.integers(1, 12, size=int(small.sum()))
    n = np.clip(n, 1, MAX_DOCS)
    subset = np.empty(queries, np.int64)
    subset[rng.permutation(queries)] = np.arange(queries) % 5
    return qid, n, subset


def simulate_batch(rng: np.random.Generator, n_docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Labels (int8) and features (float64, [rows, 136]) for a batch of queries."""
    nq = n_docs.size
    g = np.repeat(np.arange(nq), n_docs)  # query index of each row
    r = g.size
    # ---- query level
    nt = rng.choice(np.arange(1, MAX_TERMS + 1), size=nq, p=[0.22, 0.32, 0.24, 0.12, 0.07, 0.03])
    mu = rng.normal(0.0, 0.8, size=nq)
    mu[rng.random(nq) < 0.03] = -6.0  # queries with no relevant document
    a_text = rng.beta(2.0, 2.0, size=nq) * 0.8
    a_link = rng.beta(1.5, 3.0, size=nq) * 1.0
    a_click = 0.4 + rng.beta(2.0, 2.0, size=nq)
    idf = rng.uniform(1.0, 12.0, size=(nq, MAX_TERMS))
    idf_s = idf[:, None, :] * rng.uniform(0.8, 1.2, size=(nq, 4, MAX_TERMS))
    p_term = np.exp(rng.normal(-5.0, 1.0, size=(nq, MAX_TERMS)))
    term_ok = np.arange(MAX_TERMS)[None, :] < nt[:, None]  # [nq, T]
    # ---- document level
    e = rng.normal(0.0, 1.0, size=r)
    z = mu[g] + e
    label = np.searchsorted(LABEL_THRESHOLDS, z + rng.normal(0.0, 0.9, size=r)).astype(np.int8)
    zc = e  # relevance relative to the query's level
    L = np.empty((r, 4))
    L[:, 0] = np.maximum(10, np.rint(rng.lognormal(6.2, 0.9, size=r)))
    L[:, 1] = np.rint(rng.lognormal(2.5, 1.2, size=r)) * (rng.random(r) < 0.7)
    L[:, 2] = 1 + rng.poisson(7, size=r)
    L[:, 3] = 2 + rng.poisson(5, size=r)
    boost = np.exp(a_text[g][:, None] * zc[:, None] + rng.normal(0.0, 0.7, size=(r, 1)))
    lam = (
        L[:, :, None]
        * _STREAM_BOOST[None, :, None]
        * p_term[g][:, None, :]
        * boost[:, :, None]
        * rng.lognormal(0.0, 0.5, size=(r, 4, MAX_TERMS))
    )
    tf4 = np.minimum(rng.poisson(np.minimum(lam, 1e4)), L[:, :, None])  # a term occurs at most L times
    ok = term_ok[g][:, None, :]  # [r, 1, T]
    tf4 = tf4 * ok
    tf = np.concatenate([tf4, tf4.sum(axis=1, keepdims=True)], axis=1)  # [r, 5, T]
    Lw = np.concatenate([L, L.sum(axis=1, keepdims=True)], axis=1)  # [r, 5]
    idf5 = np.concatenate([idf_s, idf[:, None, :]], axis=1)[g]  # [r, 5, T]
    ntr = nt[g].astype(np.float64)
    X = np.zeros((r, N_FEATURES))

    def stats(v: np.ndarray, first: int) -> None:
        """sum/min/max/mean/variance over the query's terms -> five groups of five features."""
        big = np.where(ok, v, np.inf)
        s = v.sum(axis=2)
        mean = s / ntr[:, None]
        var = (np.where(ok, v - mean[:, :, None], 0.0) ** 2).sum(axis=2) / ntr[:, None]
        X[:, first - 1 : first + 4] = s
        X[:, first + 4 : first + 9] = big.min(axis=2)
        X[:, first + 9 : first + 14] = np.where(ok, v, -np.inf).max(axis=2)
        X[:, first + 14 : first + 19] = mean
        X[:, first + 19 : first + 24] = var

    covered = ((tf > 0) & ok).sum(axis=2)
    X[:, 0:5] = covered
    X[:, 5:10] = covered / ntr[:, None]
    X[:, 10:15] = Lw
    X[:, 15:20] = (idf5 * ok).sum(axis=2)
    stats(tf, 21)
    ntf = tf / np.maximum(Lw, 1.0)[:, :, None]
    stats(ntf, 46)
    tfidf = tf * idf5
    stats(tfidf, 71)
    X[:, 95:100] = covered == ntr[:, None]
    qv = idf5 * ok
    num = (tfidf * qv).sum(axis=2)
    den = np.sqrt((tfidf**2).sum(axis=2)) * np.sqrt((qv**2).sum(axis=2))
    X[:, 100:105] = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    k1, b = 1.2, 0.75
    norm = k1 * (1 - b + b * Lw / _AVG_LEN[None, :])
    X[:, 105:110] = (idf5 * tf * (k1 + 1) / (tf + norm[:, :, None]) * ok).sum(axis=2)
    p_coll = np.exp(-idf5)
    Lm = np.maximum(Lw, 1.0)[:, :, None]
    # log p(term | doc) under absolute-discount, Dirichlet and Jelinek-Mercer smoothing
    # (clipped at 0: the crude unique-term count can push a probability past 1)
    lmir = [
        np.log((np.maximum(tf - 0.7, 0) + 0.7 * 0.6 * Lm * p_coll) / Lm),
        np.log((tf + 2000.0 * p_coll) / (Lm + 2000.0)),
        np.log(0.9 * tf / Lm + 0.1 * p_coll),
    ]
    for k, lp in enumerate(lmir):
        X[:, 110 + 5 * k : 115 + 5 * k] = (np.minimum(lp, 0.0) * ok).sum(axis=2)
    # ---- links, quality, clicks
    auth = a_link[g] * zc + rng.normal(0.0, 1.0, size=r)
    slashes = 1 + rng.poisson(np.exp(0.7 - 0.15 * zc))
    X[:, 125] = slashes
    X[:, 126] = 12 + rng.poisson(20, size=r) + 6 * slashes
    X[:, 127] = np.floor(np.exp(rng.normal(1.5 + 0.8 * auth, 1.6)))
    X[:, 128] = np.floor(np.exp(rng.normal(3.0, 1.0, size=r)))
    X[:, 129] = np.rint(np.exp(7.0 + 1.2 * auth + rng.normal(0.0, 0.3, size=r)))
    X[:, 130] = np.rint(np.exp(5.0 + 0.8 * (0.6 * auth + rng.normal(0.0, 0.8, size=r))))
    X[:, 131] = np.clip(np.rint(50 + 15 * (0.4 * zc + rng.normal(0.0, 1.0, size=r))), 0, 100)
    X[:, 132] = np.clip(np.rint(30 + 10 * (0.3 * zc + rng.normal(0.0, 1.0, size=r))), 0, 100)
    clicks = rng.poisson(np.exp(-1.8 + a_click[g] * zc + rng.normal(0.0, 0.8, size=r)))
    X[:, 133] = clicks
    X[:, 134] = np.floor(np.exp(rng.normal(3.0 + 0.8 * auth, 1.5)))
    X[:, 135] = np.where(
        clicks > 0,
        clicks * np.exp(rng.normal(3.5 + 0.3 * zc, 0.8)),
        np.exp(rng.normal(2.0, 1.0, size=r)) * np.log1p(X[:, 134]),
    )
    return label, X


# ---------------------------------------------------------- formatting
def format_letor(labels: np.ndarray, qids: np.ndarray, X: np.ndarray) -> memoryview:
    """LETOR text of the rows, newline-terminated, built with Arrow's vectorised casts."""
    is_int = np.zeros(N_FEATURES, bool)
    is_int[INT_FEATURES - 1] = True
    args: list = [
        pc.cast(pa.array(labels.astype(np.int64)), pa.string()),
        pa.scalar(" qid:"),
        pc.cast(pa.array(qids.astype(np.int64)), pa.string()),
    ]
    for j in range(N_FEATURES):
        col = X[:, j]
        if is_int[j]:
            txt = pc.cast(pa.array(col.astype(np.int64)), pa.string())
        else:
            txt = pc.cast(pa.array(np.round(col, 6).astype(np.float32)), pa.string())
        args += [pa.scalar(f" {j + 1}:"), txt]
    args.append(pa.scalar("\n"))
    return shapes.letor_bytes(pc.binary_join_element_wise(*args, ""))


# ------------------------------------------------------------- writing
def _write_subset(args: tuple[str, int, np.ndarray, np.ndarray, int, float]) -> tuple[int, int, int, int]:
    """Write one subset's queries (in qid order) to ``path``, the labels of a ``noise`` share of its rows redrawn;
    return (rows, queries, rows redrawn, labels changed)."""
    path, subset, qids, n_docs, seed, noise = args
    rows = redrawn = changed = 0
    with atomic_file(path) as fh:
        for b, start in enumerate(range(0, qids.size, BATCH_QUERIES)):
            q = qids[start : start + BATCH_QUERIES]
            n = n_docs[start : start + BATCH_QUERIES]
            rng = np.random.default_rng([seed, 1, subset, b])
            labels, X = simulate_batch(rng, n)
            noisy, r = shapes.redraw_labels(labels, noise, int(LABEL_THRESHOLDS.size), [seed, 2, subset, b])
            fh.write(format_letor(noisy, np.repeat(q, n), X))
            rows += int(n.sum())
            redrawn += r
            changed += int((noisy != labels).sum())
    return rows, int(qids.size), redrawn, changed


def noise_record(share: float, where: list[str], redrawn: int, changed: int, rows: int, note: str) -> dict:
    """What ``generate.json`` says of the label noise beside its share (nothing when there is none)."""
    if share <= 0.0:
        return {}
    return {
        "noisy_labels": {
            "share": share,
            "in": where,
            "rows": rows,
            "rows_redrawn": redrawn,
            "labels_changed": changed,
            "note": note,
        }
    }


#: The MSLR subsets that label noise goes into: fold 1's training subsets. Each subset is stored once and the
#: folds are rotations of the five (MSLR_ROTATION), so every subset is some fold's test set: only fold 1 has
#: clean validation and test labels with noisy training labels.
NOISY_SUBSETS = tuple(MSLR_ROTATION[1]["train"])


def generate(
    out: str, queries: int, seed: int, workers: int = 0, shape: str = "mslr", label_noise: float = 0.0
) -> GenerateSummary:
    """Write a dataset of ``queries`` queries shaped like ``shape``'s under ``out``.

    MSLR: each subset S1..S5 is generated once, as the test file of its fold; the
    vali files are hard links to those (copies where links are not possible) and
    the train files are the concatenation of their three subsets. Other shapes:
    :func:`generate_shape`. ``label_noise``: the share of training rows whose label is redrawn uniformly
    (:func:`pipelines.data.shapes.redraw_labels`): MSLR's :data:`NOISY_SUBSETS` (fold 1's training split), the
    other shapes' training file; every other byte is the clean generation's.

    Raises
    ------
    ValueError
        An unknown shape, fewer queries than the shape writes files, or a noise share outside [0, 1].
    """
    if shape not in GENERATE_SHAPES:
        raise ValueError(f"unknown shape {shape!r}: choose one of {', '.join(GENERATE_SHAPES)}")
    if not 0.0 <= label_noise <= 1.0:
        raise ValueError(f"label_noise must be in [0, 1], got {label_noise}")
    if shape != "mslr":
        return generate_shape(out, queries, seed, workers, shape, label_noise)
    t0 = time.perf_counter()
    qid, n_docs, subset = mslr_queries(queries, seed)
    root = Path(out)
    for f in MSLR_ROTATION:
        (root / f"Fold{f}").mkdir(parents=True, exist_ok=True)
    test_of = {d["test"][0]: root / f"Fold{f}" / "test.txt" for f, d in MSLR_ROTATION.items()}
    jobs = []
    for k in range(5):
        sel = subset == k
        noise = label_noise if f"S{k + 1}" in NOISY_SUBSETS else 0.0
        jobs.append((str(test_of[f"S{k + 1}"]), k, qid[sel], n_docs[sel], seed, noise))
    n_workers = min(5, workers or os.cpu_count() or 1)
    if n_workers > 1:
        with ProcessPoolExecutor(n_workers) as pool:
            done = list(pool.map(_write_subset, jobs))
    else:
        done = [_write_subset(j) for j in jobs]
    for f, d in MSLR_ROTATION.items():
        _link_or_copy(test_of[d["vali"][0]], root / f"Fold{f}" / "vali.txt")
        with atomic_file(str(root / f"Fold{f}" / "train.txt")) as fh:
            for s in d["train"]:
                with open(test_of[s], "rb") as src:
                    shutil.copyfileobj(src, fh, 16 << 20)
    summary = GenerateSummary(
        out=str(root),
        queries=queries,
        rows=sum(d[0] for d in done),
        seed=seed,
        subset_rows={f"S{k + 1}": done[k][0] for k in range(5)},
        subset_queries={f"S{k + 1}": done[k][1] for k in range(5)},
        seconds=round(time.perf_counter() - t0, 2),
        files=tuple(f"Fold{f}/{s}.txt" for f in MSLR_ROTATION for s in ("train", "vali", "test")),
        label_noise=label_noise,
    )
    noisy = [k for k in range(5) if f"S{k + 1}" in NOISY_SUBSETS]
    note = (
        f"fold 1 trains on {'+'.join(NOISY_SUBSETS)} with noisy labels and validates and tests on clean ones; "
        "the other folds validate or test on a noisy subset"
    )
    where = list(NOISY_SUBSETS)
    redrawn, changed, rows = (sum(done[k][i] for k in noisy) for i in (2, 3, 0))
    noisy_doc = noise_record(label_noise, where, redrawn, changed, rows, note)
    extra = {"generator": "ltr generate (MSLR-shaped synthetic data)", **noisy_doc}
    _record(summary, extra)
    return summary


def _record(summary: GenerateSummary, extra: dict) -> None:
    """``generate.json``: the summary (shape, n_features, labels, files included) and the shape's details."""
    body = {**summary.__dict__, "label_thresholds": LABEL_THRESHOLDS.tolist(), **extra}
    write_file_atomic(str(Path(summary.out) / RECORD), json.dumps(body, indent=2).encode())
    log.info(
        "generated %d %s-shaped queries, %d rows under %s in %.1f s",
        summary.queries,
        summary.shape,
        summary.rows,
        summary.out,
        summary.seconds,
    )


# ---------------------------------------------------- Istella and Yahoo
def _shape_batch(job: tuple[str, int, int, int, np.ndarray, np.ndarray, float]) -> tuple[bytes, int, int]:
    """One batch's text (and its noise counts), in a worker process."""
    text, redrawn, changed = shapes.batch_text(*job)
    return bytes(text), redrawn, changed


def _texts(jobs: list, workers: int) -> Generator[tuple[bytes | memoryview, int, int], None, None]:
    """The batches' texts (with their noise counts) in order; with several workers at most ``2 * workers``
    batches in flight."""
    if workers <= 1:
        for job in jobs:
            yield shapes.batch_text(*job)
        return
    with ProcessPoolExecutor(workers) as pool:
        pending: deque[Future] = deque()
        it = iter(jobs)
        for job in it:
            pending.append(pool.submit(_shape_batch, job))
            if len(pending) >= 2 * workers:
                break
        while pending:
            text = pending.popleft().result()
            for job in it:
                pending.append(pool.submit(_shape_batch, job))
                break
            yield text


def generate_shape(
    out: str, queries: int, seed: int, workers: int, shape: str, label_noise: float = 0.0
) -> GenerateSummary:
    """Write ``queries`` queries shaped like ``shape`` (``istella`` or ``yahoo``, :mod:`pipelines.data.shapes`)
    under ``out``, in the real dataset's layout.

    Each file's queries (in qid order) are cut into batches of about ``spec.batch_rows`` rows, each with its own
    seed; the batches are made by ``workers`` processes (0 = one per core) and written in order, a few in flight
    at a time, so the bytes do not depend on ``workers`` and the memory does not grow with ``queries``.
    """
    t0 = time.perf_counter()
    spec = shapes.SHAPES[shape]
    qid, n_docs, file = shapes.shape_queries(spec, queries, seed)
    jobs = []
    for k in range(len(spec.files)):
        sel = file == k
        q, n = qid[sel], n_docs[sel]
        edges = shapes.batches(n, spec.batch_rows)
        noise = label_noise if k == 0 else 0.0  # the first file is the training file of every shape
        jobs += [(shape, seed, k, b, q[s:e], n[s:e], noise) for b, (s, e) in enumerate(zip(edges[:-1], edges[1:]))]
    n_workers = min(len(jobs), workers or os.cpu_count() or 1)
    texts = _texts(jobs, n_workers)
    root = Path(out)
    redrawn = changed = 0
    try:
        for k, name in enumerate(spec.files):
            with atomic_file(str(root / name)) as fh:
                for _ in range(sum(1 for j in jobs if j[2] == k)):
                    text, r, c = next(texts)
                    fh.write(text)
                    redrawn, changed = redrawn + r, changed + c
    finally:
        texts.close()  # shuts the pool down
    names = [Path(f).name.removesuffix(".txt") for f in spec.files]
    summary = GenerateSummary(
        out=str(root),
        queries=queries,
        rows=int(n_docs.sum()),
        seed=seed,
        subset_rows={names[k]: int(n_docs[file == k].sum()) for k in range(len(names))},
        subset_queries={names[k]: int((file == k).sum()) for k in range(len(names))},
        seconds=round(time.perf_counter() - t0, 2),
        shape=shape,
        n_features=spec.n_features,
        labels=(0, spec.max_label),
        files=spec.files,
        label_noise=label_noise,
    )
    model = shapes.feature_model(shape)
    note = f"{spec.files[0]} has noisy labels; {', '.join(spec.files[1:])} clean ones"
    extra: dict = {
        "generator": f"ltr generate ({shape}-shaped synthetic data, pipelines.data.shapes)",
        "label_shares": list(spec.label_shares),
        "label_thresholds": model.thresholds.tolist(),
        **noise_record(label_noise, [spec.files[0]], redrawn, changed, int(n_docs[file == 0].sum()), note),
    }
    if shape == "istella":
        extra["sentinel"] = {"text": shapes.SENTINEL, "features": shapes.ISTELLA_SENTINEL_FEATURES.tolist()}
    _record(summary, extra)
    return summary


def _link_or_copy(src: Path, dst: Path) -> None:
    if dst.exists() or dst.is_symlink():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
