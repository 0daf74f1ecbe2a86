"""Whether this process has been asked to stop (SIGTERM: :mod:`pipelines.app.stop` sets :data:`STOP`), for the
loops that would otherwise start work again: a failed training job is not retried once a stop is asked, since its
failure is most likely the stop's own cancelling of the job.

Outside the code identity's import closure (:mod:`pipelines.core.keys`), as the modules that read it are."""

from __future__ import annotations

import threading

#: Set once a stop is asked; cleared when an ``ltr`` command starts (a test's or a scheduler's process runs many).
STOP = threading.Event()
