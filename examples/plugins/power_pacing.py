"""A pacing function: the share of the training queries grows as a power of the curriculum's progress, slowly
at first (``power`` > 1) and reaching all queries at the last stage.

    ltr curriculum --plugin examples/plugins/power_pacing.py --strategy q_nrel --pacing power --stages 4
"""

from pipelines.plugins import pacing


@pacing("power", params={"power": 2.0})
def power(stage, stages, *, params):
    """``delta + (1 - delta) * x ** power`` at progress ``x = (stage - 1) / (stages - 1)``."""
    x = (stage - 1) / (stages - 1)
    delta = params["delta"]
    return delta + (1.0 - delta) * x ** params["power"]
