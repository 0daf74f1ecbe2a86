"""Figures as files (``pipelines.core.plots``): drawn in a background process, a figure's PNG and PDF are the
bytes drawn in this one; a figure that cannot be pickled is drawn here; an error in the background process is
raised where the files are asked for."""

from __future__ import annotations

import pytest

from pipelines.core.plots import PENDING, BackgroundFigures, figure_bytes, pyplot


def _figure(title: str, formatter: object = None) -> object:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1, 2], [0.3, 0.5, 0.45], label="LambdaMART")
    ax.errorbar([1], [0.4], yerr=[[0.02], [0.03]], fmt="o")
    ax.set_title(title)
    ax.text(0.5, 0.4, "Δ −0.005", weight="bold")
    if formatter is not None:
        ax.yaxis.set_major_formatter(formatter)
    return fig


class _Unplottable:
    """Pickles, but fails to be drawn (in the background process)."""

    def __call__(self, y: float, pos: object) -> str:
        raise RuntimeError("cannot format the tick")


def test_background_figures_are_the_bytes_drawn_here_unpicklable_ones_drawn_here_and_errors_raised():
    """One background process (a spawn costs seconds on a loaded machine) for the three cases."""
    here = [figure_bytes(_figure(f"figure {i}")) for i in range(2)]
    assert all(f["png"].startswith(b"\x89PNG") and f["pdf"].startswith(b"%PDF") for f in here)
    with BackgroundFigures() as bg:
        pending = [figure_bytes(_figure(f"figure {i}")) for i in range(2)]
        assert all(v.startswith(PENDING) for f in pending for v in f.values())
        # a local function cannot be pickled: that figure is drawn at once, in this process
        lam = figure_bytes(_figure("lambda", pyplot().FuncFormatter(lambda y, _: f"{y:.2f}")))
        assert lam["png"].startswith(b"\x89PNG") and lam["pdf"].startswith(b"%PDF")
        # drawing fails in the background process: raised where its files are asked for, not before
        bad = figure_bytes(_figure("bad", pyplot().FuncFormatter(_Unplottable())))
        files = {f"f{i}.{ext}": v for i, f in enumerate(pending) for ext, v in f.items()}
        files["table.json"] = b"{}"
        got = bg.resolve(files)
        with pytest.raises(RuntimeError, match="cannot format the tick"):
            bg.resolve(bad)
    assert got["table.json"] == b"{}"
    for i in range(2):
        assert got[f"f{i}.png"] == here[i]["png"] and got[f"f{i}.pdf"] == here[i]["pdf"]
    assert not pyplot().get_fignums()  # every figure closed, here and there
    assert not figure_bytes(_figure("after"))["png"].startswith(PENDING)  # the block is over: drawn here
