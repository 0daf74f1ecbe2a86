"""Airflow 3 DAG ``ltr_study``: the whole study, one spark-submit job per step (docs/reference/airflow-dag.md).

::

    study -> generate? -> generate -> ingest? -> ingest -> record_ingest -> difficulty? -> difficulty
          -> grid_setup -> parent -> units -> train (one task per unfinished unit of the plan, mapped) -> report

Trigger it with params (every one optional; their descriptions are in the trigger form)::

    airflow dags trigger ltr_study --conf '{"conf": "conf/paper.yaml", "src": "/data/MSLR-WEB30K",
                                            "set": ["work_dir=/data/ltr"], "spark_conn_id": "spark_default"}'

This file only wires: the decisions are :mod:`pipelines.app.study_tasks` (plain functions, tested without
Airflow), the spark-submit steps :class:`pipelines.app.airflow.LtrSubmitOperator`. The deployment's own
settings are environment variables read where this file is parsed (Airflow fixes retries and concurrency
then): ``LTR_TASK_RETRIES`` (3), ``LTR_RETRY_DELAY_S`` (60, exponential back-off up to
``LTR_MAX_RETRY_DELAY_S``, 900), ``LTR_TRAINING_SLOTS`` (2 training tasks of a run at once),
``LTR_TRAINING_POOL`` (an Airflow pool for them; empty: ``default_pool``), ``LTR_JOBS_DIR`` (the jobs'
scripts; default: the installed package's). Nothing is configured by editing this file, which may be copied
alone into Airflow's dags folder. ``max_active_runs=1``: two runs of one study would share its checkpoints
and parent run. A skipped step is Airflow's short-circuit (``ignore_downstream_trigger_rules=False`` skips
just the step after it; the steps further down run with ``trigger_rule="none_failed"``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, task

from pipelines.app.airflow import LtrSubmitOperator, fail_fast, resolve_study_task, study_params, unit_args_task
from pipelines.app.study_tasks import (
    difficulty_needed,
    generate_needed,
    ingest_needed,
    record_ingest,
    study_parent,
)
from pipelines.core.config import jobs_dir

#: The jobs' scripts: the installed package's (or ``$LTR_JOBS_DIR``), wherever this file was copied.
JOBS = str(jobs_dir())


def _env_number(name: str, default: float) -> float:
    text = os.environ.get(name, "")
    try:
        return float(text) if text.strip() else default
    except ValueError:
        raise ValueError(f"${name}={text!r}: expected a number") from None


RETRIES = int(_env_number("LTR_TASK_RETRIES", 3))
RETRY_DELAY = timedelta(seconds=_env_number("LTR_RETRY_DELAY_S", 60))
MAX_RETRY_DELAY = timedelta(seconds=_env_number("LTR_MAX_RETRY_DELAY_S", 900))
#: A pool that does not exist would leave the training tasks scheduled forever (Airflow only logs it).
TRAINING_POOL = os.environ.get("LTR_TRAINING_POOL", "") or "default_pool"
#: Training applications of one study at once (memory per application: benchmarks/RESULTS.md, "Memory").
TRAINING_SLOTS = int(_env_number("LTR_TRAINING_SLOTS", 2))


def _submit(step: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "application": os.path.join(JOBS, f"{step}.py"),
        "name": f"ltr-{step}",
        "conn_id": "spark_default",
        **kwargs,
    }


with DAG(
    dag_id="ltr_study",
    description="curriculum and continuation learning-to-rank study: ingest, difficulty, grid by plan units, report",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["ltr", "spark", "mlflow"],
    doc_md=__doc__,
    default_args={
        "retries": RETRIES,
        "retry_delay": RETRY_DELAY,
        "retry_exponential_backoff": True,
        "max_retry_delay": MAX_RETRY_DELAY,
    },
    params=study_params(),
) as dag:
    study = task(fail_fast(resolve_study_task), task_id="study", multiple_outputs=True)()
    gen_check = task.short_circuit(
        fail_fast(generate_needed), task_id="generate_needed", ignore_downstream_trigger_rules=False
    )(study)
    generate = LtrSubmitOperator(task_id="generate", **_submit("generate", application_args=study["generate_args"]))
    ingest_check = task.short_circuit(
        fail_fast(ingest_needed),
        task_id="ingest_needed",
        ignore_downstream_trigger_rules=False,
        trigger_rule="none_failed",
    )(study)
    ingest = LtrSubmitOperator(task_id="ingest", **_submit("ingest", application_args=study["ingest_args"]))
    recorded = task(fail_fast(record_ingest), task_id="record_ingest")(study, ingest_check)
    diff_check = task.short_circuit(
        fail_fast(difficulty_needed),
        task_id="difficulty_needed",
        ignore_downstream_trigger_rules=False,
        trigger_rule="none_failed",
    )(study)
    difficulty = LtrSubmitOperator(
        task_id="difficulty", **_submit("difficulty", application_args=study["difficulty_args"])
    )
    setup = LtrSubmitOperator(
        task_id="grid_setup", trigger_rule="none_failed", **_submit("grid", application_args=study["setup_args"])
    )
    parent = task(fail_fast(study_parent), task_id="parent", multiple_outputs=True)(study)
    units = task(fail_fast(unit_args_task), task_id="units")(study, parent)
    train = LtrSubmitOperator.partial(
        task_id="train",
        map_index_template="{{ task.unit_label }}",
        pool=TRAINING_POOL,
        max_active_tis_per_dagrun=TRAINING_SLOTS,
        **_submit("grid"),
    ).expand_kwargs(units)
    # none_failed: after a finished study, train is mapped over no unit (skipped) and the report still runs;
    # a unit that failed for good (retries spent) leaves the report upstream_failed: it never reports a part
    report = LtrSubmitOperator(
        task_id="report",
        trigger_rule="none_failed",
        **_submit("report", application_args=["--run-id", parent["parent_run_id"], study["report_args"]]),
    )
    gen_check >> generate >> ingest_check >> ingest >> recorded >> diff_check >> difficulty
    difficulty >> setup >> parent >> units >> train >> report
