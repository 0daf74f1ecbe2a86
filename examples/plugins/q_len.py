"""A difficulty score that needs no labels: a query's length. Queries with fewer candidate documents are taken as
easier (fewer documents to order), so the curriculum ``q_len`` starts with the shortest queries. (The built-in
``q_size`` is the same order; this file shows how a score declares what it reads: ``kind="label_free"``, which
``ltr plugins --check`` verifies by scoring the batch again with other labels.)

    ltr curriculum --plugin examples/plugins/q_len.py --strategy q_len
"""

import numpy as np

from pipelines.plugins import difficulty


@difficulty("q_len", features=(), kind="label_free")  # reads no feature column, and no label
def q_len(labels, features, offsets, *, params):
    """Minus the number of documents of each query (higher is easier: the shortest first)."""
    return -np.diff(np.asarray(offsets)).astype(np.float64)
