"""What a user or a scheduler starts: the ``ltr`` command line (``cli``), the whole pipeline of ``ltr run``,
``ltr grid`` and ``ltr train``, ``ltr pack``, the Airflow operator and the study's task decisions.

May import: everything below it (``report``, ``tracking``, ``study``, ``execution``, ``worker``, ``store``,
``plan``, ``data``, ``core``) and ``udfs``. Nothing imports it but ``jobs/``.
"""
