"""On the driver: a plan's nodes as Spark barrier jobs, retries of a failed job, and the progress
that reaches the driver over the network.

May import: ``pipelines.worker`` and below (``store``, ``plan``, ``data``, ``core``) and ``udfs``.
"""
