"""ListNet (Cao et al., ICML 2007), top-one probability: softmax cross entropy between each query's labels and
its scores. Plain numpy, vectorised over the queries of a node (no loop per query or document).

    ltr train --plugin examples/plugins/listnet.py --path mse:20,listnet:80
"""

import numpy as np

from pipelines.plugins import objective


def _softmax_by_query(x, offsets):
    """Softmax of ``x`` within each query (rows ``offsets[q]..offsets[q+1]``), stable (max subtracted)."""
    starts = offsets[:-1]
    sizes = np.diff(offsets)
    top = np.maximum.reduceat(x, starts)
    e = np.exp(x - np.repeat(top, sizes))
    return e / np.repeat(np.add.reduceat(e, starts), sizes)


@objective("listnet", params={"temperature": 1.0})
def listnet(margins, labels, offsets, *, tree, params):
    """Gradient and hessian of ``-sum(P_y * log P_s)`` per query, ``P_y = softmax(labels)``,
    ``P_s = softmax(margins / temperature)``: ``g = (P_s - P_y) / T``, ``h = P_s (1 - P_s) / T^2``."""
    t = float(params["temperature"])
    if t <= 0:
        raise ValueError(f"temperature must be > 0, got {t}")
    offsets = np.asarray(offsets, dtype=np.int64)
    p_y = _softmax_by_query(np.asarray(labels, dtype=np.float64), offsets)
    p_s = _softmax_by_query(np.asarray(margins, dtype=np.float64) / t, offsets)
    grad = (p_s - p_y) / t
    hess = p_s * (1.0 - p_s) / (t * t)
    return grad.astype(np.float32), hess.astype(np.float32)
