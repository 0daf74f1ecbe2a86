"""The OpenMP settings and the CPU count of pipelines.core.threads."""

from __future__ import annotations

import os

from pipelines.core import threads
from pipelines.core.config import SparkConfig
from pipelines.core.session import session_properties


def test_the_settings_yield_to_a_users_own_wait_policy(monkeypatch):
    for k in threads.USER_CHOICE:
        monkeypatch.delenv(k, raising=False)
    assert threads.thread_environment() == {"GOMP_SPINCOUNT": "1000"}
    assert threads.thread_environment({"OMP_WAIT_POLICY": "ACTIVE"}) == {}
    assert threads.apply() == {"GOMP_SPINCOUNT": "1000"} and os.environ["GOMP_SPINCOUNT"] == "1000"
    assert threads.apply() == {}  # set once
    # a cluster's executors get the same, or the user's choice of this process
    props = session_properties(SparkConfig(), "spark://h:7077", {})
    assert props["spark.executorEnv.GOMP_SPINCOUNT"] == "1000"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    props = session_properties(SparkConfig(), "spark://h:7077", {})
    assert props["spark.executorEnv.OMP_WAIT_POLICY"] == "PASSIVE" and "spark.executorEnv.GOMP_SPINCOUNT" not in props
    # spark-submit's own --conf wins
    props = session_properties(SparkConfig(), "spark://h:7077", {"spark.executorEnv.OMP_WAIT_POLICY": "ACTIVE"})
    assert "spark.executorEnv.OMP_WAIT_POLICY" not in props


def test_usable_cpus_reads_the_cgroup_quota(tmp_path, monkeypatch):
    affinity = len(os.sched_getaffinity(0))
    quota = threads._cgroup_quota
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: 2 threads' worth
    assert quota(tmp_path) == 1.5
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: 1.5)
    assert threads.usable_cpus() == min(affinity, 2)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert quota(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert quota(v1) is None
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    assert quota(v1) == 0.5
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: 0.5)
    assert threads.usable_cpus() == 1
