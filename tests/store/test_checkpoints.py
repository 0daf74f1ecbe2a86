"""store.checkpoints: nothing changed on disk is trusted. A commit records checksums of its metadata and of every
tree segment it names; a checkpoint that fails them is set aside with one warning and the node goes on from its
newest intact checkpoint."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from pipelines.store.checkpoints import MARKER, SEGMENT_DIGESTS, CheckpointCorrupt, CheckpointStore

KEY = "node0123abcd"


def _train(store: CheckpointStore, ends: list[int], t0: int = 0, segments: list[list[int]] | None = None) -> None:
    """Segments, a shard and commits as the loop writes them: a segment ``a-b`` of trees, then the commit at ``b``."""
    segments = list(segments or [])
    a = t0
    for b in ends:
        store.write_segment(KEY, a, b, json.dumps({"trees": list(range(a, b)), "split": 51.0}).encode())
        store.write_shard(KEY, b, 0, {"train_margin": np.full(100, b, dtype=np.float32)})
        segments.append([a, b])
        meta = {"segments": list(segments), "curve": [[b, 0.5, 0.25]], "done": b == ends[-1], "shards": 1}
        store.commit(KEY, b, meta)
        a = b


def _seg(root: Path, a: int, b: int) -> Path:
    return root / KEY / f"trees-{a:06d}-{b:06d}.json"


def _edit(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


def test_an_intact_checkpoint_is_the_newest_and_records_every_segments_checksum(tmp_path):
    store = CheckpointStore(str(tmp_path))
    _train(store, [2, 4, 6])
    assert store.intact_latest(KEY) == 6 == store.latest(KEY)
    meta = store.meta(KEY, 6)
    assert sorted(meta[SEGMENT_DIGESTS]) == ["0-2", "2-4", "4-6"] and "sha256" not in meta
    # read back through a fresh store (another process): the same checks pass
    fresh = CheckpointStore(str(tmp_path))
    assert fresh.intact_latest(KEY) == 6 and len(fresh.segments(KEY, fresh.meta(KEY, 6))) == 3


def test_one_character_changed_in_the_last_segment_sets_its_checkpoint_aside(tmp_path, caplog):
    store = CheckpointStore(str(tmp_path))
    _train(store, [2, 4])
    _edit(_seg(tmp_path, 2, 4), b"51.0", b"51.1")  # still valid JSON, another split value
    fresh = CheckpointStore(str(tmp_path))
    with pytest.raises(CheckpointCorrupt, match=r"trees-000002-000004\.json of node node0123abcd does not match"):
        fresh.segments(KEY, fresh.meta(KEY, 4))
    with caplog.at_level(logging.WARNING, "pipelines.store.checkpoints"):
        assert fresh.intact_latest(KEY) == 2  # the previous checkpoint, which names segment 0-2 only
    (rec,) = caplog.records
    assert "trees-000002-000004.json of node node0123abcd does not match" in rec.getMessage()
    assert "set aside" in rec.getMessage() and "\n" not in rec.getMessage()
    assert fresh.trees(KEY) == [2] and list((tmp_path / KEY / "t000004").glob(f"{MARKER}.corrupt-*"))
    # the node trains trees 2..4 again: the new commit at 4 takes the place of the one set aside
    _train(fresh, [4], t0=2, segments=[[0, 2]])
    assert fresh.intact_latest(KEY) == 4 and CheckpointStore(str(tmp_path)).intact_latest(KEY) == 4


def test_a_changed_first_segment_leaves_no_intact_checkpoint(tmp_path, caplog):
    store = CheckpointStore(str(tmp_path))
    _train(store, [2, 4])
    _seg(tmp_path, 0, 2).write_bytes(_seg(tmp_path, 0, 2).read_bytes()[:-3])  # truncated
    with caplog.at_level(logging.WARNING, "pipelines.store.checkpoints"):
        assert CheckpointStore(str(tmp_path)).intact_latest(KEY) is None  # both name it: trained from the start
    assert len(caplog.records) == 2 and store.trees(KEY) == []


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda p: _edit(p, b"0.25", b"0.26"), "does not match the checksum it was committed with"),
        (lambda p: p.write_bytes(p.read_bytes()[:20]), "is unreadable"),
        (lambda p: p.write_bytes(b"[1, 2]"), "is unreadable: a JSON list, not an object"),
    ],
)
def test_a_changed_or_broken_marker_is_corrupt_and_set_aside(tmp_path, change, says):
    store = CheckpointStore(str(tmp_path))
    _train(store, [2, 4])
    change(tmp_path / KEY / "t000004" / MARKER)
    fresh = CheckpointStore(str(tmp_path))
    with pytest.raises(CheckpointCorrupt, match=says):
        fresh.meta(KEY, 4)
    assert fresh.intact_latest(KEY) == 2


def test_a_resumed_commit_keeps_the_checksums_recorded_before_it(tmp_path):
    """A resumed process (a fresh store) commits segments another process wrote: their checksums come from the
    previous commit, so a segment changed on disk in between is still found out."""
    _train(CheckpointStore(str(tmp_path)), [2, 4])
    _edit(_seg(tmp_path, 0, 2), b"51.0", b"52.0")
    resumed = CheckpointStore(str(tmp_path))
    _train(resumed, [6], t0=4, segments=[[0, 2], [2, 4]])
    with pytest.raises(CheckpointCorrupt, match="trees-000000-000002"):
        CheckpointStore(str(tmp_path)).verify(KEY, 6)


def test_a_checkpoint_committed_without_checksums_is_read_as_before(tmp_path):
    store = CheckpointStore(str(tmp_path))
    store.write_segment(KEY, 0, 2, b"{}")
    d = tmp_path / KEY / "t000002"
    d.mkdir()
    (d / MARKER).write_text(json.dumps({"segments": [[0, 2]], "tree": 2, "done": True}))
    assert store.intact_latest(KEY) == 2 and store.meta(KEY, 2)["done"] is True
    # and a commit after it records the old segment's checksum from its bytes
    store.write_segment(KEY, 2, 4, b"{}")
    store.commit(KEY, 4, {"segments": [[0, 2], [2, 4]], "done": True})
    assert sorted(store.meta(KEY, 4)[SEGMENT_DIGESTS]) == ["0-2", "2-4"]


def test_ltr_keys_verify_says_what_the_next_run_trains_again_and_changes_nothing(tmp_path, capsys):
    from pipelines.app.cli import main

    work = tmp_path / "work"
    store = CheckpointStore(str(work / "checkpoints"))
    _train(store, [2, 4])
    (work / "checkpoints" / "_cuts").mkdir()  # not a node
    assert main(["keys", "--verify", str(work)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"1 nodes checked under {work}/checkpoints: 0 with a checkpoint that changed on disk; "
        "0 cuts and 0 plan records: 0 changed"
    ]
    shard = work / "checkpoints" / KEY / "t000004" / "shard-00000.npz"
    data = bytearray(shard.read_bytes())
    data[data.index(b"train_margin.npy") + 150] ^= 1
    shard.write_bytes(bytes(data))
    assert main(["keys", "--verify", str(work / "checkpoints")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and "shard-00000.npz is unreadable: Bad CRC-32" in out[0], out
    assert out[1] == (
        f"node {KEY}: a run that needs it sets 1 checkpoint(s) aside and trains it again from its checkpoint at tree 2"
    )
    assert store.trees(KEY) == [2, 4]  # read-only
    assert main(["keys", "--verify", str(tmp_path / "nowhere")]) == 2
    assert "--verify" in capsys.readouterr().err


def test_a_plan_record_changed_on_disk_is_not_used_and_verify_names_it_and_changed_cuts(tmp_path, capsys, caplog):
    """Plan records (what ``ltr grid --plan`` compares keys with) carry their checksum: one changed on disk is not
    used (one warning); a record of an older ltr (no checksum) is read as it is. ``ltr keys --verify`` names a
    changed record and a changed cuts file, and changes nothing."""
    from pipelines.app.cli import main
    from pipelines.kernel.cuts import cuts_of
    from pipelines.store.cuts import save_cuts
    from pipelines.study.design import read_plan_record

    work = tmp_path / "work"
    store = CheckpointStore(str(work / "checkpoints"))
    doc = {"sig-a": {"key": "k1", "inputs": {"train": {"eta": 0.05}}}}
    path = store.plan_record_path("exp", 1)
    store.put_record(path, doc)
    assert read_plan_record(store, "exp", 1) == doc and store.read_record(path) == (doc, None)
    _edit(Path(path), b"0.05", b"0.07")
    with caplog.at_level(logging.WARNING, logger="pipelines.study.design"):
        assert read_plan_record(store, "exp", 1) == {}
    assert [r.getMessage() for r in caplog.records if "checksum" in r.getMessage()] == [
        f"plan record of fold 1: {path} does not match the checksum it was written with (it changed on disk); "
        "not used (the next run writes it again)"
    ]

    store.put_record(path, doc)
    save_cuts(store.root, cuts_of(np.arange(40, dtype=np.float32).reshape(20, 2), 8, "cutsk"))
    assert main(["keys", "--verify", str(work)]) == 0
    assert capsys.readouterr().out.endswith("1 cuts and 1 plan records: 0 changed\n")
    _edit(Path(path), b"0.05", b"0.07")
    cuts = Path(store.cuts_path("cutsk"))
    data = bytearray(cuts.read_bytes())
    data[data.index(b"values.npy") + 140] ^= 1  # a cut value's byte: the archive's CRC fails
    cuts.write_bytes(bytes(data))
    before = sorted(p.name for p in (work / "checkpoints").rglob("*"))
    assert main(["keys", "--verify", str(work)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[-1].endswith("1 cuts and 1 plan records: 2 changed"), out
    assert str(cuts) in out[0] and "computes them again" in out[0]
    assert out[1].startswith(f"plan record {path} does not match the checksum")
    assert sorted(p.name for p in (work / "checkpoints").rglob("*")) == before  # read-only

    Path(path).write_text(json.dumps(doc))  # an older ltr's record: the document alone
    assert read_plan_record(store, "exp", 1) == doc
