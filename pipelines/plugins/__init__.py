"""The plug-in API: a researcher's own objective, difficulty score or pacing function, in one file.

::

    import numpy as np
    from pipelines.plugins import objective, difficulty, pacing

    @objective("listnet", params={"temperature": 1.0})   # then: --path listnet:100, or in a grid's paths
    def listnet(margins, labels, offsets, *, tree, params):
        ...
        return grad, hess                                 # float32 arrays, len(margins) each

    @difficulty("q_len")                                  # higher = easier; the curriculum strategy "q_len"
    def q_len(labels, features, offsets, *, params):
        return np.diff(offsets).astype(float)             # one float per query

    @pacing("linear2")                                    # curriculum.pacing: linear2
    def linear2(stage, stages, *, params):
        return stage / stages                             # share of the training queries at stage 1..stages

These are the decorators the built-ins use (:mod:`udfs.objectives.registry`, :mod:`udfs.curriculum`): a
plug-in is a component like the built-ins, keyed by its own code (:func:`pipelines.core.keys.function_identity`)
and settings (``components.<name>`` in the config, checked against the ``params=`` and ``check=`` it declares).
Plug-ins are loaded from ``--plugin FILE_OR_MODULE``, a config file's ``plugins: [...]`` and installed packages'
entry points in the group ``ltr.plugins``, and from nowhere else (:mod:`pipelines.plugins.loading`); ``ltr plugins
--check`` runs each on a small synthetic batch (:mod:`pipelines.plugins.checks`).
"""

from __future__ import annotations

from udfs.curriculum import difficulty, pacing
from udfs.objectives.registry import objective

__all__ = ["difficulty", "objective", "pacing"]
