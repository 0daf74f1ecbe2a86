"""What processes share on storage: node checkpoints, leases (one writer per node), a fold's global
histogram cuts, and the results read back from finished nodes.

May import: ``pipelines.plan``, ``pipelines.data``, ``pipelines.core`` and ``udfs``.
"""
