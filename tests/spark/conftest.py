"""The SparkSessions the Spark tests share, each with the ``strom`` format registered:
local[2] (2 shuffle partitions) for every test that asks for ``spark``, and for the tests
marked ``spark_cluster`` a session on a standalone cluster (a master and a worker process,
tests/spark/spark_cluster.py), which is started the first time such a test runs.

A driver has one active SparkContext at a time and starting one costs seconds, so one
``SparkSessions`` object keeps the active session and switches only when a test asks for
the other kind. The ``spark_cluster`` tests are moved to the end of the run, so that a run
starts the local session once and switches to the cluster once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from spark_cluster import StandaloneCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CLUSTER_MARK = "spark_cluster"

COMMON_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopTimeout": "10s",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{CLUSTER_MARK}: runs on a standalone Spark cluster (a master and a worker)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the standalone-cluster tests after all others (in their own order)."""
    on_cluster = [item for item in items if item.get_closest_marker(CLUSTER_MARK)]
    if on_cluster:
        items[:] = [item for item in items if not item.get_closest_marker(CLUSTER_MARK)]
        items += on_cluster


def executor_task_counts(session: SparkSession) -> dict[str, int]:
    """Tasks started so far per executor id, the driver left out, from Spark's status store.

    In local mode the only "executor" is the driver, so this is empty there.
    """
    summaries = session.sparkContext._jsc.sc().statusStore().executorList(True)
    counts = {}
    for i in range(summaries.size()):
        summary = summaries.apply(i)
        if summary.id() != "driver":
            counts[summary.id()] = summary.totalTasks()
    return counts


class SparkSessions:
    """The driver's one active SparkSession, local[2] or on the standalone cluster."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.mode: str | None = None
        self.session: SparkSession | None = None
        self.cluster: StandaloneCluster | None = None

    def local(self) -> SparkSession:
        if self.mode != "local" or self.session is None:
            self._stop_session()
            self._stop_cluster()
            self.session = self._create("strom-tests", "local[2]", {})
            self.mode = "local"
        return self.session

    def on_cluster(self) -> SparkSession:
        if self.mode != "cluster" or self.session is None:
            self._stop_session()
            if self.cluster is None:
                cluster = StandaloneCluster(self.work_dir / "cluster", cores=2, memory="1g")
                cluster.start()
                self.cluster = cluster
            conf = {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                # the executors run Python workers with this interpreter, which has strom
                "spark.pyspark.python": sys.executable,
                "spark.pyspark.driver.python": sys.executable,
                "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
                "spark.executor.memory": self.cluster.memory,
                # the executors' JVM options are the driver's (tests/conftest.py: C1 alone)
                "spark.executor.extraJavaOptions": os.environ.get("SPARK_SUBMIT_OPTS", ""),
                "spark.cores.max": str(self.cluster.cores),
            }
            self.session = self._create("strom-tests-cluster", self.cluster.master_url, conf)
            self.mode = "cluster"
            self._wait_for_executor(self.session)
        return self.session

    def _create(self, app_name: str, master: str, conf: dict[str, str]) -> SparkSession:
        import strom.spark

        # getOrCreate() would hand back a session that is still active, whatever its master
        _stop_any_active_context()
        session = strom.spark.local_session(app_name, master=master, **COMMON_CONF, **conf)
        session.sparkContext.setLogLevel("ERROR")
        actual = session.sparkContext.master
        if actual != master:
            session.stop()
            raise RuntimeError(f"asked for a session on {master}, got one on {actual}")
        return session

    def _wait_for_executor(self, session: SparkSession, timeout: float = 90.0) -> None:
        """Return once an executor (a JVM other than the driver) has registered."""
        assert self.cluster is not None
        deadline = time.monotonic() + timeout
        while session.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 2:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no executor registered within {timeout}s:\n{self.cluster.logs()}"
                    f"\n{self.executor_logs()}"
                )
            time.sleep(0.25)

    def executor_logs(self, limit: int = 4000) -> str:
        """The ends of the executors' stderr files in the worker's directory."""
        if self.cluster is None:
            return ""
        parts = []
        for path in sorted((self.cluster.work_dir / "worker").glob("*/*/stderr")):
            text = path.read_text(errors="replace")[-limit:]
            parts.append(f"--- executor {path.parent.name} ({path}), last lines:\n{text}")
        return "\n".join(parts)

    def _stop_session(self) -> None:
        if self.session is not None:
            self.session.stop()
        self.session = None
        self.mode = None

    def _stop_cluster(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        self.cluster = None

    def close(self) -> None:
        try:
            self._stop_session()
        finally:
            self._stop_cluster()


def _stop_any_active_context() -> None:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


@pytest.fixture(scope="session")
def spark_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSessions]:
    sessions = SparkSessions(tmp_path_factory.mktemp("spark"))
    yield sessions
    sessions.close()


@pytest.fixture
def spark(spark_sessions: SparkSessions) -> SparkSession:
    """The shared local[2] session (started once; again only after a cluster test)."""
    return spark_sessions.local()


@pytest.fixture
def spark_on_cluster(spark_sessions: SparkSessions) -> Iterator[SparkSession]:
    """The session on the standalone cluster. Checks that the test's work really ran there:
    the master is ``spark://...``, an executor other than the driver has registered, and
    the executors started tasks while the test ran."""
    session = spark_sessions.on_cluster()
    assert session.sparkContext.master.startswith("spark://"), session.sparkContext.master
    before = executor_task_counts(session)
    assert before, "no executor besides the driver"
    yield session
    after = executor_task_counts(session)
    ran = sum(after.values()) - sum(before.values())
    assert ran > 0, f"no task ran on the cluster's executors ({before} -> {after})"
