"""The JDBC connectors on the Spark runner: a real PostgreSQL (tests/postgres_process.py),
a real broker, and a real distributed Connect worker process whose tasks run on its local
SparkSession, driven over its REST API. One of each serves the module (the worker's JVM
starts once).

Covers: a JDBC source in bulk mode copying a table into a topic in JsonConverter's
envelope with Confluent's schema; incrementing mode with its offsets in the offsets topic
in Confluent's shape, resumed after the worker restarts with no row lost or repeated; the
JDBC sink upserting into PostgreSQL with auto.create and deleting on tombstones; a sink's
offsets reset, so that every batch is replayed, leaving the table as one delivery does;
and a bad config refused with 400 naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from postgres_process import PostgresProcess
from test_connect import Worker, distributed_properties, error_of, wait_for

pytestmark = pytest.mark.timeout(240)

SOURCE_CLASS = "io.confluent.connect.jdbc.JdbcSourceConnector"
SINK_CLASS = "io.confluent.connect.jdbc.JdbcSinkConnector"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresProcess]:
    process = PostgresProcess().start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def worker(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    workdir = tmp_path_factory.mktemp("connect-jdbc")
    properties = distributed_properties(workdir, broker, "connect-jdbc")
    with properties.open("a") as out:
        out.write(
            "spark.master=local[2]\n"
            "spark.sql.shuffle.partitions=2\n"
            # a JVM that starts sooner (C1 only): the tests start it twice
            "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1\n"
            f"spark.sql.streaming.checkpointLocation={workdir / 'checkpoints'}\n"
        )
    process = Worker("distributed", properties)
    yield process
    if process.proc.poll() is None:
        process.stop()


def read_topic(broker: BrokerProcess, topic: str, at_least: int) -> list[Any]:
    """Every value of the topic (all partitions) once ``at_least`` have come, JSON-decoded."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"read-{topic}",
                         "enable.auto.commit": False})  # fmt: skip

    def partitions_of_topic() -> Any:
        found = consumer.list_topics(topic, timeout=10).topics[topic]
        return found.partitions if found.error is None else None

    partitions = wait_for(partitions_of_topic, f"topic {topic}", timeout=90)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    values: list[Any] = []

    def take(timeout: float) -> None:
        values.extend(json.loads(m.value() or b"null") for m in consumer.consume(1000, timeout)
                      if not m.error())  # fmt: skip

    def enough() -> bool:
        take(0.2)
        return len(values) >= at_least

    wait_for(enough, f"{at_least} records in {topic}", timeout=90)
    take(1.0)
    consumer.close()
    return values


def create(worker: Worker, name: str, config: dict[str, str]) -> None:
    code, body = worker.call("POST", "/connectors", {"name": name, "config": config})
    assert code == 201, body


def test_source_bulk_copies_a_table(
    worker: Worker, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    postgres.query(
        "CREATE TABLE items (id INT PRIMARY KEY, name TEXT NOT NULL, price DOUBLE PRECISION, "
        "added TIMESTAMP)"
    )
    postgres.query(
        "INSERT INTO items SELECT i, 'item ' || i, i * 1.5, TIMESTAMP '2026-01-02 03:04:05' "
        "FROM generate_series(1, 500) i"
    )
    create(worker, "pg-bulk", {
        "connector.class": SOURCE_CLASS, "connection.url": postgres.jdbc_url,
        "connection.user": "postgres", "mode": "bulk", "table.whitelist": "items",
        "topic.prefix": "bulk-", "poll.interval.ms": "3600000",
    })  # fmt: skip
    values = read_topic(broker, "bulk-items", 500)
    assert len(values) == 500
    first = min(values, key=lambda v: v["payload"]["id"])
    assert first["payload"] == {
        "id": 1, "name": "item 1", "price": 1.5, "added": 1767323045000,
    }  # fmt: skip
    schema = first["schema"]
    assert schema["type"] == "struct" and schema["name"] == "items"
    assert schema["fields"][0] == {"type": "int32", "optional": False, "field": "id"}
    assert schema["fields"][2] == {"type": "float64", "optional": True, "field": "price"}
    assert schema["fields"][3]["name"] == "org.apache.kafka.connect.data.Timestamp"
    worker.call("DELETE", "/connectors/pg-bulk")


def test_source_incrementing_resumes_after_restart(
    worker: Worker, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    postgres.query("CREATE TABLE events (id BIGSERIAL PRIMARY KEY, body TEXT)")
    postgres.query("INSERT INTO events (body) SELECT 'e' || i FROM generate_series(1, 100) i")
    create(worker, "pg-inc", {
        "connector.class": "JdbcSourceConnector", "connection.url": postgres.jdbc_url,
        "connection.user": "postgres", "mode": "incrementing",
        "incrementing.column.name": "id", "table.include.list": "events",
        "topic.prefix": "inc-", "poll.interval.ms": "200",
    })  # fmt: skip
    read_topic(broker, "inc-events", 100)
    code, offsets = worker.call("GET", "/connectors/pg-inc/offsets")
    assert code == 200
    assert offsets["offsets"] == [
        {"partition": {"protocol": "1", "table": "postgres.public.events"},
         "offset": {"incrementing": 100}}
    ]  # fmt: skip
    worker.stop()
    postgres.query("INSERT INTO events (body) SELECT 'f' || i FROM generate_series(1, 50) i")
    worker.start()
    values = read_topic(broker, "inc-events", 150)
    ids = sorted(v["payload"]["id"] for v in values)
    assert ids == list(range(1, 151))  # none lost, none repeated
    worker.call("DELETE", "/connectors/pg-inc")


def produce(broker: BrokerProcess, topic: str, records: list[tuple[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for key, value in records:
        producer.produce(topic, None if value is None else json.dumps(value), key)
    producer.flush(10)


def row(key: str, amount: int) -> dict[str, Any]:
    schema = {"type": "struct", "name": "account", "optional": False, "fields": [
        {"field": "id", "type": "string", "optional": False},
        {"field": "amount", "type": "int64", "optional": True},
    ]}  # fmt: skip
    return {"schema": schema, "payload": {"id": key, "amount": amount}}


def test_sink_upserts_deletes_and_replays_as_once(
    worker: Worker, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    records: list[tuple[str, Any]] = [(f"k{i}", row(f"k{i}", i)) for i in range(200)]
    records += [(f"k{i}", row(f"k{i}", i * 10)) for i in range(100)]  # updates
    records += [(f"k{i}", None) for i in range(150, 200)]  # tombstones
    produce(broker, "accounts", records)
    create(worker, "pg-sink", {
        "connector.class": SINK_CLASS, "connection.url": postgres.jdbc_url,
        "connection.user": "postgres", "topics": "accounts", "insert.mode": "upsert",
        "pk.mode": "record_key", "pk.fields": "id", "auto.create": "true",
        "delete.enabled": "true",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    })  # fmt: skip
    expected = [(f"k{i}", i * 10 if i < 100 else i) for i in range(150)]

    def table() -> list[tuple[object, ...]]:
        try:
            return postgres.query("SELECT id, amount FROM accounts ORDER BY id")
        except Exception:
            return []

    wait_for(lambda: sorted(table()) == sorted(expected), "the upserted table", timeout=90)
    # every offset is committed in the group Kafka users see
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "connect-pg-sink"})
    wait_for(
        lambda: consumer.committed([TopicPartition("accounts", 0)], timeout=5)[0].offset == 350,
        "the sink's committed offset",
    )
    consumer.close()
    # paused: its query stops; resumed: it runs again from its checkpoint
    assert worker.call("PUT", "/connectors/pg-sink/pause")[0] == 202
    worker.wait_state("pg-sink", "PAUSED")
    assert worker.call("PUT", "/connectors/pg-sink/resume")[0] == 202
    worker.wait_state("pg-sink", "RUNNING")
    # reset the offsets: every record comes again; the table stays as it was
    assert worker.call("PUT", "/connectors/pg-sink/stop")[0] == 204
    worker.wait_state("pg-sink", "STOPPED", tasks=None)
    assert worker.call("DELETE", "/connectors/pg-sink/offsets")[0] == 200
    postgres.query("UPDATE accounts SET amount = -1 WHERE id = 'k0'")
    assert worker.call("PUT", "/connectors/pg-sink/resume")[0] == 202
    wait_for(lambda: sorted(table()) == sorted(expected), "the replayed table", timeout=90)
    worker.call("DELETE", "/connectors/pg-sink")


def test_bad_config_names_the_key(worker: Worker, postgres: PostgresProcess) -> None:
    code, message = error_of(worker.call("POST", "/connectors", {"name": "bad", "config": {
        "connector.class": SINK_CLASS, "connection.url": postgres.jdbc_url, "topics": "t",
        "delete.enabled": "true",
    }}))  # fmt: skip
    assert code == 400 and "delete.enabled" in message, message
    code, message = error_of(worker.call("POST", "/connectors", {"name": "bad", "config": {
        "connector.class": SOURCE_CLASS, "connection.url": "jdbc:oracle:thin:@x",
        "mode": "bulk", "topic.prefix": "p",
    }}))  # fmt: skip
    assert code == 400 and "connection.url" in message, message


def test_sink_failure_is_failed_with_its_trace(worker: Worker, postgres: PostgresProcess) -> None:
    create(worker, "pg-absent", {
        "connector.class": SINK_CLASS, "connection.url": postgres.jdbc_url,
        "connection.user": "postgres", "topics": "accounts", "table.name.format": "absent",
        "insert.mode": "upsert", "pk.mode": "record_key", "pk.fields": "id",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    })  # fmt: skip

    def failed() -> dict[str, Any] | None:
        status = worker.status("pg-absent")
        tasks = status["tasks"] if status else []
        return tasks[0] if tasks and tasks[0]["state"] == "FAILED" else None

    task = wait_for(failed, "the task FAILED", timeout=60)
    assert "Table absent is missing and auto-creation is disabled" in task["trace"]
    worker.call("DELETE", "/connectors/pg-absent")
