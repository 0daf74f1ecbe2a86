"""The Spark applications (`spark-submit jobs/<step>.py`) and the Airflow DAG: thin wiring over `pipelines`.

A package only so that the import contracts (`.importlinter`) can check that nothing imports it back.
"""
