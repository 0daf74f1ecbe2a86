"""What the checksums of a checkpoint cost at paper scale (issue 66: under 1% of a checkpoint's time).

    python -m benchmarks.bench_checksums [--train-rows 2270296] [--eval-rows 1510000] [--trees 25] [--repeat 5]

A checkpoint of one worker at MSLR-WEB30K's fold 1 size (its training and evaluation rows' margins and qids, as the
tree loop's ``save`` writes them), a segment of ``--trees`` real trees (``train.leaves`` 64, lossguide, grown by
XGBoost on random rows of 136 features: the bytes of a segment are those of the trees, not of the data) and the
commit, through :class:`pipelines.store.checkpoints.CheckpointStore` in a temporary folder. Timed: the whole write
(shard, segment, commit), what of it is the checksums (the sha256 of the segment and of the metadata the commit
records), and the check a run makes before it trusts the checkpoint (:meth:`CheckpointStore.verify` with shards: the
metadata's and segments' sha256, and reading the shards, whose zip CRC-32 numpy checks). Prints one JSON line and a
Markdown table; the share is against the write alone and against the write plus the trees' training at the paper
fold's 0.522 s a tree (RESULTS.md, "Paper scale, one fold").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import tempfile
import time

import numpy as np

#: the paper fold's training time per tree (boost + objective), RESULTS.md "Cost of the 8,900 trees"
PAPER_S_PER_TREE = 0.522


def segment_bytes(trees: int) -> bytes:
    """An XGBoost JSON model of ``trees`` trees of 64 leaves (lossguide), as a segment holds them."""
    import xgboost as xgb

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60_000, 136)).astype(np.float32)
    y = (X[:, :8].sum(axis=1) + rng.normal(size=X.shape[0])).astype(np.float32)
    params = {"tree_method": "hist", "grow_policy": "lossguide", "max_leaves": 64, "max_depth": 0, "eta": 0.1}
    booster = xgb.train(params, xgb.DMatrix(X, y), trees)
    return bytes(booster.save_raw("json"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-rows", type=int, default=2_270_296)
    p.add_argument("--eval-rows", type=int, default=1_510_000, help="vali and test rows together (half each)")
    p.add_argument("--trees", type=int, default=25, help="trees between checkpoints (train.checkpoint_every)")
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()

    from pipelines.store.checkpoints import CheckpointStore, _doc_digest

    rng = np.random.default_rng(1)
    half = a.eval_rows // 2
    arrays = {
        "train_qid": np.repeat(np.arange(a.train_rows // 120, dtype=np.int32), 120)[: a.train_rows],
        "train_margin": rng.normal(size=a.train_rows).astype(np.float32),
    }
    for name in ("vali", "test"):
        arrays[f"{name}_qid"] = np.repeat(np.arange(half // 120, dtype=np.int32), 120)[:half]
        arrays[f"{name}_margin"] = rng.normal(size=half).astype(np.float32)
    model = segment_bytes(a.trees)
    writes, sums, checks = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeat):
            store = CheckpointStore(f"{tmp}/r{i}")
            key, t0 = "node", time.perf_counter()
            store.write_shard(key, a.trees, 0, arrays)
            store.write_segment(key, 0, a.trees, model)
            meta = {"segments": [[0, a.trees]], "curve": [[a.trees, 0.5, 0.5]], "done": False, "shards": 1}
            store.commit(key, a.trees, meta)
            writes.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            hashlib.sha256(model).hexdigest()
            _doc_digest({**meta, "segment_sha256": {f"0-{a.trees}": "0" * 64}})
            sums.append(time.perf_counter() - t0)
            fresh = CheckpointStore(f"{tmp}/r{i}")  # nothing known to it: reads and checks everything
            t0 = time.perf_counter()
            fresh.verify(key, a.trees, shards=True)
            checks.append(time.perf_counter() - t0)
    write, sha, check = (statistics.median(x) for x in (writes, sums, checks))
    train = a.trees * PAPER_S_PER_TREE
    out = {
        "train_rows": a.train_rows,
        "eval_rows": 2 * half,
        "trees": a.trees,
        "segment_bytes": len(model),
        "shard_bytes": int(sum(v.nbytes for v in arrays.values())),
        "write_s": round(write, 4),
        "checksums_s": round(sha, 5),
        "verify_s": round(check, 4),
        "checksums_share_of_write": round(sha / write, 5),
        "checksums_share_of_checkpoint_interval": round(sha / (write + train), 6),
        "verify_share_of_checkpoint_interval": round(check / (write + train), 5),
    }
    print(json.dumps(out))
    print("| checkpoint | write | of it, checksums | share of the write | share with the trees' training |")
    print("|---|---|---|---|---|")
    print(
        f"| {a.train_rows:,} + {2 * half:,} rows, {a.trees} trees ({len(model) / 2**20:.2f} MiB segment) "
        f"| {write:.3f} s | {sha * 1000:.2f} ms | {sha / write:.2%} | {sha / (write + train):.4%} |"
    )
    print(f"verify before a resume (read and check everything): {check:.3f} s, {check / (write + train):.3%}")


if __name__ == "__main__":
    main()
