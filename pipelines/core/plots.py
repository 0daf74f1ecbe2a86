"""Figures as files: matplotlib on the Agg backend (:func:`pyplot`), a figure as PNG for a page and as PDF for a
paper (:func:`figure_bytes`), and :class:`BackgroundFigures`, which turns figures into those files in a second
process while the caller goes on.

Why a second process: writing a figure is pure Python under the GIL (drawing it, then for the PDF subsetting
and embedding its TrueType fonts with fontTools), and the report writes several figures twice while it also
writes its tables and TREC runs; on two cores the figures can be drawn beside that work. A figure pickles in a
fraction of the time it takes to draw.

Why not ``multiprocessing``: its ``spawn`` start imports the caller's ``__main__`` again in the child, so a
user's script that calls the report without an ``if __name__ == "__main__":`` guard would run again there
(and log to MLflow twice); ``fork`` would copy this process's threads' locks (Spark's, MLflow's, OpenMP's).
The process here is ``python -m pipelines.core.plots`` with this process's ``sys.path``, reading pickled
figures on its stdin and writing the files on its stdout.

This module imports nothing of ours but ``core.errors`` (it is what the background process imports) and
matplotlib only when a figure is drawn.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextvars import ContextVar
from typing import IO, Any, ParamSpec, TypeVar

from pipelines.core.errors import LtrError

log = logging.getLogger(__name__)

PNG_DPI = 110
#: The first bytes of a file that :class:`BackgroundFigures` still draws (:meth:`BackgroundFigures.resolve`).
PENDING = b"\0ltr-pending-figure:"

P = ParamSpec("P")
R = TypeVar("R")

_background: ContextVar[BackgroundFigures | None] = ContextVar("background_figures", default=None)


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig: Any) -> bytes:
    """The matplotlib figure ``fig`` as PNG bytes (110 dpi, tight bounding box); the figure is not closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PNG_DPI, bbox_inches="tight")
    return buf.getvalue()


def pdf_bytes(fig: Any) -> bytes:
    """The matplotlib figure ``fig`` as vector PDF bytes (tight bounding box), its fonts embedded as TrueType
    (publishers' checks reject Type 3) and no creation date (the same figure, the same bytes); not closed."""
    buf = io.BytesIO()
    with pyplot().rc_context({"pdf.fonttype": 42}):
        fig.savefig(buf, format="pdf", bbox_inches="tight", metadata={"CreationDate": None})
    return buf.getvalue()


def _relink(objects: Any) -> None:
    """Key each transform's parents among ``objects`` by the parents' own ids, as matplotlib does for a transform
    it builds.

    Why: matplotlib's ``TransformNode.__setstate__`` (3.11, and ``__deepcopy__`` through it) keeps the keys its
    ``_parents`` had in the pickled figure, the ids of the *original* parents. Once the original is freed (a
    figure is closed after it is pickled), a new transform made while drawing can take one of those addresses
    and, registering itself as a parent (``set_children``), replace the copy's parent under the same key; the
    copy's parent then misses invalidations. With ``bbox_inches="tight"`` that left a line's clip box where it
    was before the figure was cropped, depending on where the allocator put things: the same figure, other bytes.
    """
    from matplotlib.transforms import TransformNode

    for node in objects:
        if isinstance(node, TransformNode):
            old: dict[int, Any] = vars(node)["_parents"]  # private to matplotlib: what its pickling gets wrong
            parents = [ref() for ref in old.values()]
            vars(node)["_parents"] = {}
            for parent in parents:
                if parent is not None:
                    parent.set_children(node)


def _unpickle(blob: bytes) -> Any:
    """A figure from its pickle, its transforms relinked (:func:`_relink`)."""
    unpickler = pickle.Unpickler(io.BytesIO(blob))
    fig = unpickler.load()
    _relink(unpickler.memo.copy().values())  # every object the pickle made (each is memoised)
    return fig


def _deepcopy(fig: Any) -> Any:
    """A copy of ``fig`` that was never drawn, for a figure that cannot be pickled (its transforms relinked), or
    None where it cannot be copied either."""
    import copy

    memo: dict[int, Any] = {}
    try:
        out = copy.deepcopy(fig, memo)
    except Exception:
        return None
    _relink(list(memo.values()))
    return out


def _draw(fig: Any, blob: bytes | None = None) -> dict[str, bytes]:
    """PNG and PDF of the figure, each drawn from a copy that was never drawn (``blob``: the figure pickled, made
    here when not given; ``fig`` itself, undrawn, serves for the PNG when given); the figures are closed.

    Why a copy per format: the same figure saved as PNG (110 dpi) and then as PDF (72 dpi) now and then kept a
    clip rectangle of the PNG's pass in the PDF (matplotlib's transform invalidation did not reach a cached box);
    a figure never drawn has nothing cached. The copies' transforms are relinked (:func:`_relink`)."""
    plt = pyplot()
    if blob is None and fig is not None:
        try:
            blob = pickle.dumps(fig)
        except Exception:  # an unpicklable artist (a lambda formatter...): a deep copy (functions are shared)
            blob = None
    first = fig if fig is not None else _unpickle(blob)  # type: ignore[arg-type]
    second = _unpickle(blob) if blob is not None else _deepcopy(first)
    try:
        return {"png": png_bytes(first), "pdf": pdf_bytes(first if second is None else second)}
    finally:
        plt.close(first)
        if second is not None:
            plt.close(second)


def figure_bytes(fig: Any) -> dict[str, bytes]:
    """The matplotlib figure ``fig`` as ``{"png": ..., "pdf": ...}`` (:func:`png_bytes`, :func:`pdf_bytes`); the
    figure is closed. Inside ``with BackgroundFigures() as bg:`` the two are drawn in its process and the values
    stand for them until :meth:`BackgroundFigures.resolve`."""
    bg = _background.get()
    if bg is not None:
        return bg.submit(fig)
    return _draw(fig)


def drawn_in_background(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` run inside ``with BackgroundFigures():`` (its figures drawn in a second process; it swaps the
    placeholders for the files with :func:`resolve`)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with BackgroundFigures():
            return func(*args, **kwargs)

    return wrapper


def resolve(files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` with the placeholders of the :class:`BackgroundFigures` block this runs in swapped for the files
    (:meth:`BackgroundFigures.resolve`); outside one, ``files`` as they are."""
    bg = _background.get()
    return files if bg is None else bg.resolve(files)


# ---------------------------------------------------------------- the pipe: 8-byte length, then a pickle
def _send(f: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _receive(f: IO[bytes]) -> Any:
    """The next object, or raise EOFError when the other side closed the pipe."""
    head = f.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack("<Q", head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


def _serve() -> None:
    """The background process: a pickled figure in, ``("ok", files)`` or ``("error", exception)`` out, until
    its stdin closes."""
    pipe_in, pipe_out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed may get into the pipe
    while True:
        try:
            blob = _receive(pipe_in)
        except EOFError:
            return
        try:
            reply: tuple[str, Any] = ("ok", _draw(None, blob))
        except Exception as e:  # the caller raises it where it asks for the files
            try:
                pickle.dumps(e)
                reply = ("error", e)
            except Exception:
                reply = ("error", RuntimeError(f"{type(e).__name__}: {e}"))
        _send(pipe_out, reply)


class BackgroundFigures:
    """A second process that draws the figures :func:`figure_bytes` is given while this object is entered.

    ``figure_bytes`` then returns placeholders (bytes that start with :data:`PENDING`) at once; :meth:`resolve`
    swaps them for the files, waiting for those not drawn yet. A figure that cannot be pickled is drawn at once,
    here; if the process cannot be started or dies, the figures it owed are drawn here (one warning). An error
    in drawing a figure is raised again by :meth:`resolve`. The process starts with the first figure and ends
    with the ``with`` block.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._writer: threading.Thread | None = None
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._blobs: list[bytes] = []
        self._futures: list[Future[dict[str, bytes]]] = []
        self._lock = threading.Lock()
        self._token: Any = None
        self._broken = False
        self._warned = False

    def __enter__(self) -> BackgroundFigures:
        self._token = _background.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _background.reset(self._token)
        proc, self._proc = self._proc, None
        if proc is not None:
            self._outbox.put(None)  # the writer closes the process's input after what it was given
            if exc and exc[0] is not None:  # the caller failed: nobody will ask for the figures
                proc.kill()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for t in (self._writer, self._reader):
            if t is not None:
                t.join(timeout=30)

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.Popen(
            [sys.executable, "-c", "from pipelines.core.plots import _serve; _serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._reader = threading.Thread(target=self._read, args=(proc,), name="figures-reader", daemon=True)
        self._writer = threading.Thread(target=self._write, args=(proc,), name="figures-writer", daemon=True)
        self._reader.start()
        self._writer.start()
        return proc

    def _write(self, proc: subprocess.Popen[bytes]) -> None:
        """Send the figures handed to :meth:`submit`, in order, until None; then close the process's input. A
        thread of its own: a figure (about 300 kB) does not fit in a pipe, and :meth:`submit` must not wait for
        the process to start or to finish the figure before."""
        assert proc.stdin is not None
        try:
            while (blob := self._outbox.get()) is not None:
                _send(proc.stdin, blob)
        except OSError:  # the process died: its reader fails what it owed
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """Hand each reply to its figure's future, in order; at the end of the pipe, fail what is still owed."""
        assert proc.stdout is not None
        i = 0
        while True:
            try:
                status, value = _receive(proc.stdout)
            except Exception as e:  # EOF (the process ended or died) or a broken reply
                with self._lock:
                    self._broken = True
                    owed = self._futures[i:]
                for f in owed:
                    f.set_exception(_ProcessLost(f"the figures' process ended ({e or 'end of its output'})"))
                return
            with self._lock:
                f = self._futures[i]
            if status == "ok":
                f.set_result(value)
            else:
                f.set_exception(value)
            i += 1

    def submit(self, fig: Any) -> dict[str, bytes]:
        """Placeholders for ``fig``'s PNG and PDF; the figure is closed here."""
        try:
            blob = pickle.dumps(fig)
        except Exception as e:  # an unpicklable artist (a lambda formatter...): drawn here
            log.debug("figure drawn in this process (%s)", e)
            return _draw(fig, None)
        pyplot().close(fig)
        future: Future[dict[str, bytes]] = Future()
        with self._lock:
            i = len(self._futures)
            self._futures.append(future)
            self._blobs.append(blob)
            broken = self._broken
        if broken:
            future.set_exception(_ProcessLost("the figures' process ended"))
        else:
            try:
                if self._proc is None:
                    self._proc = self._start()
                self._outbox.put(blob)
            except OSError as e:  # could not start
                with self._lock:
                    self._broken = True
                future.set_exception(_ProcessLost(f"the figures' process cannot be started ({e})"))
        return {ext: PENDING + f"{i}.{ext}".encode() for ext in ("png", "pdf")}

    def resolve(self, files: dict[str, bytes]) -> dict[str, bytes]:
        """``files`` with every placeholder of this object swapped for its file (waiting for it)."""
        out = {}
        for name, data in files.items():
            if data.startswith(PENDING):
                i, ext = data[len(PENDING) :].decode().split(".")
                data = self._files(int(i))[ext]
            out[name] = data
        return out

    def _files(self, i: int) -> dict[str, bytes]:
        try:
            return self._futures[i].result()
        except _ProcessLost as e:
            if not self._warned:
                self._warned = True
                log.warning("%s: drawing its figures here", e)
            files = _draw(None, self._blobs[i])
            self._futures[i] = Future()
            self._futures[i].set_result(files)
            return files


class _ProcessLost(LtrError):
    """The background process could not draw a figure it was given (it could not start, or it ended)."""
