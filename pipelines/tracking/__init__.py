"""MLflow: the tracking store and its lock, the study's parent run, its children (created up front,
streamed live while they train, finished by their one owner).

May import: ``pipelines.study`` and below and ``udfs``.
"""
