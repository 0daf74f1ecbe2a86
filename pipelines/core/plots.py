"""Figures as files: matplotlib on the Agg backend (:func:`pyplot`), a figure as PNG for a page and as PDF for a
paper (:func:`figure_bytes`), and :class:`BackgroundFigures`, which turns figures into those files in a second
process while the caller goes on.

Why a second process: writing a figure is pure Python under the GIL (drawing it, then for the PDF subsetting
and embedding its TrueType fonts with fontTools: 0.4-1.1 s a PDF). The report writes five figures twice, 5.2 s
of its 38 s on the five-fold study, while it also replays models and writes TREC runs; on two cores the figures
can be drawn beside that work. A figure pickles in about 20 ms.

This module imports nothing of ours (it is what the background process imports) and matplotlib only when a
figure is drawn.
"""

from __future__ import annotations

import io
import logging
import pickle
from concurrent.futures import Future, ProcessPoolExecutor
from contextvars import ContextVar
from typing import Any

log = logging.getLogger(__name__)

PNG_DPI = 110
#: The first bytes of a file that :class:`BackgroundFigures` still draws (:meth:`BackgroundFigures.resolve`).
PENDING = b"\0ltr-pending-figure:"

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


def _draw(fig: Any) -> dict[str, bytes]:
    try:
        return {"png": png_bytes(fig), "pdf": pdf_bytes(fig)}
    finally:
        pyplot().close(fig)


def _draw_pickled(blob: bytes) -> dict[str, bytes]:
    """:func:`figure_bytes` of a pickled figure (what the background process runs)."""
    return _draw(pickle.loads(blob))


def figure_bytes(fig: Any) -> dict[str, bytes]:
    """The matplotlib figure ``fig`` as ``{"png": ..., "pdf": ...}`` (:func:`png_bytes`, :func:`pdf_bytes`); the
    figure is closed. Inside ``with BackgroundFigures() as bg:`` the two are drawn in its process and the values
    stand for them until :meth:`BackgroundFigures.resolve`."""
    bg = _background.get()
    if bg is not None:
        return bg.submit(fig)
    return _draw(fig)


class BackgroundFigures:
    """A second process that draws the figures :func:`figure_bytes` is given while this object is entered.

    ``figure_bytes`` then returns placeholders (bytes that start with :data:`PENDING`) at once; :meth:`resolve`
    swaps them for the files, waiting for those not drawn yet. A figure that cannot be pickled is drawn at once,
    here. The process starts with the first figure (``spawn``: no copy of this process's threads or locks) and
    ends when the ``with`` block does; an error in it is raised again by :meth:`resolve`.
    """

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._futures: list[Future[dict[str, bytes]]] = []
        self._token: Any = None

    def __enter__(self) -> BackgroundFigures:
        self._token = _background.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _background.reset(self._token)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def submit(self, fig: Any) -> dict[str, bytes]:
        """Placeholders for ``fig``'s PNG and PDF; the figure is closed here."""
        try:
            blob = pickle.dumps(fig)
        except Exception as e:  # an unpicklable artist (a lambda formatter...): drawn here
            log.debug("figure drawn in this process (%s)", e)
            return _draw(fig)
        pyplot().close(fig)
        if self._pool is None:
            import multiprocessing

            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        self._futures.append(self._pool.submit(_draw_pickled, blob))
        i = len(self._futures) - 1
        return {ext: PENDING + f"{i}.{ext}".encode() for ext in ("png", "pdf")}

    def resolve(self, files: dict[str, bytes]) -> dict[str, bytes]:
        """``files`` with every placeholder of this object swapped for its file (waiting for it)."""
        out = {}
        for name, data in files.items():
            if data.startswith(PENDING):
                i, ext = data[len(PENDING) :].decode().split(".")
                data = self._futures[int(i)].result()[ext]
            out[name] = data
        return out
