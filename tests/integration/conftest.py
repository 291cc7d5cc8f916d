"""The Connect stack the Spark-runner tests share (test_connect_jdbc.py, test_connect_lake.py):
one broker (with a schema registry inside), one distributed Connect worker with
exactly-once source support whose tasks run on its local SparkSession, one PostgreSQL
and one MariaDB, each started when a test first asks for it. The worker's JVM is the
dear part (a session's start and first job take 15-25 s on this machine), so the
modules share it: tests/conftest.py's scheduler sends both to one pytest-xdist worker,
one after the other. A test that kills the worker starts it again before it ends.

The stack is stopped once the last of those modules' tests is done (the next test is
another module's: their tests run one after the other), not at the end of the session, so
that it does not idle beside the rest of the suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from mariadb_process import MariaDBProcess
from postgres_process import PostgresProcess
from test_connect import Worker, distributed_properties

SHARING_MODULES = ("test_connect_jdbc.py", "test_connect_lake.py")
REGISTRY = "schema registry"

# What stops each part of the stack still running, in the order started.
_running: list[Callable[[], None]] = []


def _shares_the_stack(item: pytest.Item | None) -> bool:
    return item is not None and item.path.name in SHARING_MODULES


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _shares_the_stack(item) and not _shares_the_stack(nextitem):
        while _running:
            _running.pop()()


def _once(stop: Callable[[], None]) -> Callable[[], None]:
    """``stop`` made safe to call again (early here, then at the fixture's end)."""
    done: list[bool] = []

    def stop_once() -> None:
        if not done:
            done.append(True)
            stop()

    _running.append(stop_once)
    return stop_once


@pytest.fixture(scope="session")
def spark_connect_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Groups form at once: each sink connector's group would wait Kafka's 3 s first. A
    schema registry runs inside the broker for the Avro tests (``spark_connect_registry``)."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("spark-connect-broker") / "data",
        {"group.initial.rebalance.delay.ms": "0"},
    )
    registry_port = process.extra_port(REGISTRY)
    process.overrides["schema.registry.listener"] = f"http://127.0.0.1:{registry_port}"
    process.start()
    stop = _once(lambda: process.stop() if process.alive() else None)
    yield process
    stop()


@pytest.fixture(scope="session")
def spark_connect_registry(spark_connect_broker: BrokerProcess) -> str:
    """The URL of the schema registry served inside ``spark_connect_broker``."""
    return f"http://127.0.0.1:{spark_connect_broker.ports[REGISTRY]}"


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
            # source tasks on Spark write each poll in a transaction with its offsets
            "exactly.once.source.support=enabled\n"
        )
    process = Worker("distributed", properties)
    stop = _once(lambda: process.stop() if process.proc.poll() is None else None)
    yield process
    stop()


@pytest.fixture(scope="session")
def jdbc_postgres() -> Iterator[PostgresProcess]:
    process = PostgresProcess().start()
    stop = _once(process.stop)
    yield process
    stop()


@pytest.fixture(scope="session")
def jdbc_mariadb() -> Iterator[MariaDBProcess]:
    process = MariaDBProcess().start()
    stop = _once(process.stop)
    yield process
    stop()
