"""The plan executor's retries (:mod:`pipelines.execution.executor`): a failed job is started again, except once
the process is stopping (SIGTERM), when the failure is the stop's own cancelling of the job."""

from __future__ import annotations

import pytest

from pipelines.core.config import TrainConfig
from pipelines.core.signals import STOP
from pipelines.execution.executor import Execution, _retry_or_raise
from pipelines.plan.paths import parse_path, resolve
from pipelines.plan.trie import build_plan
from pipelines.store.checkpoints import CheckpointStore


@pytest.fixture
def stopping():
    STOP.clear()
    yield STOP
    STOP.clear()


def test_a_failed_job_is_retried_but_not_once_the_process_is_stopping(tmp_path, stopping):
    plan = build_plan([resolve(parse_path("lambdamart:4", "lambdamart:4"), {})], fold=1)
    store = CheckpointStore(str(tmp_path / "ckpt"))
    how = Execution.from_config(TrainConfig(job_retries=2), workers=1, nthread=1, parallel=1, resume_hint="x")
    cancelled = RuntimeError("[SPARK_JOB_CANCELLED] Job 3 cancelled as part of cancellation of all jobs")
    assert _retry_or_raise(cancelled, 0, plan, list(plan.nodes), store, how) is None  # started again
    stopping.set()
    with pytest.raises(RuntimeError, match="SPARK_JOB_CANCELLED"):
        _retry_or_raise(cancelled, 0, plan, list(plan.nodes), store, how)
