"""The stored cuts are checked before they are trusted (:mod:`pipelines.store.cuts`): a file changed on disk,
truncated or holding another key's cuts is set aside with one warning and the cuts computed again; a file written
before checksums were recorded is taken as it is."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest

from pipelines.kernel.cuts import FoldCuts, cuts_of
from pipelines.store.checkpoints import CheckpointStore
from pipelines.store.cuts import CutsChanged, check_cuts, cuts_digest, cuts_from_bytes, load_cuts, save_cuts


@pytest.fixture
def stored(tmp_path):
    rng = np.random.default_rng(0)
    cuts = cuts_of(rng.normal(size=(300, 4)).astype(np.float32), 16, "k1")
    root = str(tmp_path / "ckpt")
    save_cuts(root, cuts)
    return root, cuts, CheckpointStore(root).cuts_path("k1")


def _archive(path: str, **change) -> None:
    """Rewrite the archive at ``path`` with ``change``d entries, the recorded checksum left as it was."""
    with np.load(path) as z:
        entries = {k: z[k] for k in z.files}
    entries.update(change)
    buf = io.BytesIO()
    np.savez(buf, **entries)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def _set_aside(path: str) -> list[str]:
    import glob

    return glob.glob(f"{path}.corrupt-*")


def test_cuts_read_back_equal_with_the_checksum_they_were_written_with(stored):
    root, cuts, path = stored
    with np.load(path) as z:
        assert str(z["sha256"]) == cuts_digest(cuts)
    got = load_cuts(root, "k1")
    assert got is not None and cuts_digest(got) == cuts_digest(cuts)
    np.testing.assert_array_equal(got.values, cuts.values)
    assert check_cuts(root, "k1") is None and check_cuts(root, "other") is None  # intact; not there


@pytest.mark.parametrize(
    "change, why",
    [
        ("value", "does not match the checksum it was written with"),
        ("truncated", "unreadable"),
        ("other key", "hold the cuts k2, not k1"),
    ],
)
def test_cuts_that_cannot_be_trusted_are_set_aside_in_one_warning(stored, caplog, change, why):
    root, cuts, path = stored
    if change == "value":  # one cut value a little off: still a valid archive, other trees
        values = cuts.values.copy()
        values[3] = np.nextafter(values[3], np.float32(np.inf))
        _archive(path, values=values)
    elif change == "truncated":
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) // 2])
    else:
        save_cuts(str(root) + "-2", FoldCuts("k2", cuts.ptr, cuts.values, cuts.lo, cuts.hi, cuts.rows, cuts.max_bin))
        open(path, "wb").write(open(CheckpointStore(str(root) + "-2").cuts_path("k2"), "rb").read())
    assert why in (check_cuts(root, "k1") or "")
    with caplog.at_level(logging.WARNING, logger="pipelines.store.cuts"):
        assert load_cuts(root, "k1") is None
    lines = [r.getMessage() for r in caplog.records if r.name == "pipelines.store.cuts"]
    assert len(lines) == 1 and path in lines[0] and why in lines[0] and "computed again" in lines[0]
    assert len(_set_aside(path)) == 1 and load_cuts(root, "k1") is None  # moved away: the next save writes anew
    save_cuts(root, cuts)
    assert cuts_digest(load_cuts(root, "k1")) == cuts_digest(cuts)


def test_a_checksum_that_does_not_fit_is_refused_by_from_bytes_and_none_is_taken_as_it_is(stored):
    _, cuts, path = stored
    _archive(path, sha256=np.array("0" * 64))
    with pytest.raises(CutsChanged):
        cuts_from_bytes(open(path, "rb").read())
    with np.load(path) as z:  # an archive of an older ltr: no checksum recorded
        entries = {k: z[k] for k in z.files if k != "sha256"}
    buf = io.BytesIO()
    np.savez(buf, **entries)
    assert cuts_digest(cuts_from_bytes(buf.getvalue())) == cuts_digest(cuts)
