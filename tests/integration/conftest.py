"""The Connect stack the Spark-runner tests share (test_connect_jdbc.py, test_connect_lake.py):
one broker, one distributed Connect worker whose tasks run on its local SparkSession, one
PostgreSQL and one MariaDB, each started when a test first asks for it and kept for the
session. The worker's JVM is the dear part (a session's start and first job take 15-25 s
on this machine), so the modules share it: tests/conftest.py's scheduler sends both to
one pytest-xdist worker. A test that kills the worker starts it again before it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from mariadb_process import MariaDBProcess
from postgres_process import PostgresProcess
from test_connect import Worker, distributed_properties


@pytest.fixture(scope="session")
def spark_connect_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Groups form at once: each sink connector's group would wait Kafka's 3 s first."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("spark-connect-broker") / "data",
        {"group.initial.rebalance.delay.ms": "0"},
    )
    process.start()
    yield process
    if process.alive():
        process.stop()


@pytest.fixture(scope="session")
def spark_connect_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-connect")


@pytest.fixture(scope="session")
def spark_worker(spark_connect_broker: BrokerProcess, spark_connect_dir: Path) -> Iterator[Worker]:
    properties = distributed_properties(spark_connect_dir, spark_connect_broker, "connect-spark")
    with properties.open("a") as out:
        out.write(
            "spark.master=local[2]\n"
            "spark.sql.shuffle.partitions=2\n"
            # a JVM that starts sooner (C1 only): 12 s against 19 s for a session here
            "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1\n"
            f"spark.sql.streaming.checkpointLocation={spark_connect_dir / 'checkpoints'}\n"
            # the worker killed by test_connect_jdbc.py leaves the group sooner
            "session.timeout.ms=6000\n"
        )
    process = Worker("distributed", properties)
    yield process
    if process.proc.poll() is None:
        process.stop()


@pytest.fixture(scope="session")
def jdbc_postgres() -> Iterator[PostgresProcess]:
    process = PostgresProcess().start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def jdbc_mariadb() -> Iterator[MariaDBProcess]:
    process = MariaDBProcess().start()
    yield process
    process.stop()
