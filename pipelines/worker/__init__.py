"""Inside a barrier task: the worker's environment (threads, tracker), its data path (Arrow -> bin codes
-> QuantileDMatrix) and the boosting loop (objectives, curves, checkpoints).

May import: ``pipelines.store`` and below (``plan``, ``data``, ``core``) and ``udfs``.
"""
