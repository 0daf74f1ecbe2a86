"""Figures as files (``pipelines.core.plots``): drawn in a background process, a figure's PNG and PDF are the
bytes drawn in this one; a figure that cannot be pickled is drawn here; an error in the background process is
raised where the files are asked for; a process that dies costs time, not figures."""

from __future__ import annotations

import logging
import signal

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


def test_background_figures_are_the_bytes_drawn_here_unpicklable_ones_drawn_here_and_errors_raised(caplog):
    """One background process (its start costs seconds on a loaded machine) for the four cases: the same bytes,
    an unpicklable figure, an error in drawing, the process killed."""
    already = pyplot().get_fignums()  # figures other tests of this process left open
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
        # the process dies: the figures it owed, and those given after, are drawn here (one warning)
        assert bg._proc is not None
        owed = figure_bytes(_figure("figure 0"))
        bg._proc.send_signal(signal.SIGKILL)
        bg._proc.wait()
        later = figure_bytes(_figure("figure 1"))
        with caplog.at_level(logging.WARNING, logger="pipelines.core.plots"):
            assert bg.resolve(owed) == here[0] and bg.resolve(later) == here[1]
        ours = [r for r in caplog.records if r.name == "pipelines.core.plots" and r.levelno >= logging.WARNING]
        assert len(ours) == 1 and "drawing its figures here" in ours[0].message, ours
    assert got["table.json"] == b"{}"
    for i in range(2):
        assert got[f"f{i}.png"] == here[i]["png"] and got[f"f{i}.pdf"] == here[i]["pdf"]
    assert pyplot().get_fignums() == already  # every figure of this test closed, here and there
    assert not figure_bytes(_figure("after"))["png"].startswith(PENDING)  # the block is over: drawn here


def test_a_copied_figure_keys_its_transforms_parents_by_their_own_ids():
    """matplotlib's unpickling keeps the original parents' ids as the keys of a transform's ``_parents``; a new
    transform that takes a freed original's address then replaces the copy's parent, whose cached boxes go stale
    (a clip box left uncropped in about one PDF in ten). Every copy :func:`_draw` makes is relinked."""
    import pickle

    from matplotlib.transforms import TransformNode

    from pipelines.core.plots import _deepcopy, _unpickle

    fig = _figure("keys")
    blob = pickle.dumps(fig)
    for copy in (_unpickle(blob), _deepcopy(fig)):
        nodes = [o for o in _reachable(copy) if isinstance(o, TransformNode)]
        linked = [(k, ref()) for n in nodes for k, ref in n._parents.items() if ref() is not None]
        assert len(nodes) > 20 and len(linked) > 20
        assert all(k == id(parent) for k, parent in linked)
        pyplot().close(copy)
    pyplot().close(fig)
    # what the relinking repairs: a plain unpickled copy keeps the original's ids
    plain = pickle.loads(blob)
    stale = [
        k
        for n in _reachable(plain)
        if isinstance(n, TransformNode)
        for k, r in n._parents.items()
        if r() is not None and k != id(r())
    ]
    assert stale
    pyplot().close(plain)


def _reachable(root: object) -> list[object]:
    """The objects reachable from ``root`` through instances' attributes, lists, tuples and dicts."""
    seen: dict[int, object] = {}
    todo = [root]
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, (type, str, bytes, int, float)) or callable(o) and not hasattr(o, "__dict__"):
            continue
        seen[id(o)] = o
        if isinstance(o, dict):
            todo.extend(o.values())
        elif isinstance(o, (list, tuple, set)):
            todo.extend(o)
        elif hasattr(o, "__dict__") and not isinstance(o, type(logging)):
            todo.extend(vars(o).values())
    return list(seen.values())


def test_the_background_process_does_not_import_the_callers_main(tmp_path):
    """A script without an ``if __name__ == "__main__":`` guard that draws in the background runs once: the
    process is ``python -c`` of this module, not a ``multiprocessing`` child that imports the script again."""
    import subprocess
    import sys

    from pipelines.testing.processes import ROOT

    marks = tmp_path / "runs.txt"
    script = tmp_path / "user_script.py"
    script.write_text(
        "import os\n"
        f"open({str(marks)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
        "from pipelines.core.plots import BackgroundFigures, figure_bytes, pyplot\n"
        "fig, ax = pyplot().subplots()\n"
        "ax.plot([0, 1], [1, 0])\n"
        "with BackgroundFigures() as bg:\n"
        "    files = bg.resolve(figure_bytes(fig))\n"
        "assert files['pdf'].startswith(b'%PDF') and files['png'].startswith(b'\\x89PNG')\n"
    )
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}, timeout=120)
    assert r.returncode == 0
    assert len(marks.read_text().split()) == 1
