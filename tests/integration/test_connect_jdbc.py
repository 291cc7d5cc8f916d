"""The JDBC connectors on the Spark runner: a real PostgreSQL (tests/postgres_process.py)
and MariaDB (tests/mariadb_process.py), a real broker, and a real distributed Connect
worker process whose tasks run on its local SparkSession, driven over its REST API. The
worker, broker and databases are the session's (tests/integration/conftest.py), shared
with test_connect_lake.py: the worker's JVM starts once, and once more after the kill.

Covers: a JDBC source in bulk mode copying a table into a topic in JsonConverter's
envelope with Confluent's schema; the JDBC sink upserting into PostgreSQL with
auto.create and deleting on tombstones; a sink's offsets reset, so that every batch is
replayed, leaving the table as one delivery does; a bad config refused with 400 naming
the key; a failed sink task's trace; MariaDB as a source (incrementing) and as a sink
(insert with exactly.once.delivery, upsert by ON DUPLICATE KEY UPDATE, delete); and one
kill -9 of the worker proving three things at once (one JVM restart for all): the JDBC
sink with exactly.once.delivery in insert mode and the lake sink write each record once,
and an incrementing source, killed while rows keep coming, resumes at the offset its last
committed transaction stored (Confluent's shape) with no row lost or repeated. Also:
Confluent's AvroConverter through the schema registry from a JDBC source to a JDBC sink,
read by confluent-kafka's deserializer on the way; and a source's topic created by its
topic.creation group. The worker has exactly-once source support: every source here
writes its polls in transactions with their offsets, and the topics are read with
read_committed.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from mariadb_process import MariaDBProcess
from postgres_process import PostgresProcess
from test_connect import Worker, error_of, wait_for

from strom.connect.connectors.lake_sink import committed_files

pytestmark = pytest.mark.timeout(240)

SOURCE_CLASS = "io.confluent.connect.jdbc.JdbcSourceConnector"
SINK_CLASS = "io.confluent.connect.jdbc.JdbcSinkConnector"
STREAM_TOTAL = 2000
STREAM_PRIME = 200  # before the kill: written by both sinks, so their queries run
STREAM_STEP = 40  # records a step, then a pause: about 1,000 a second
STREAM_PAUSE_S = 0.04


@pytest.fixture(scope="module")
def worker(spark_worker: Worker) -> Worker:
    return spark_worker


@pytest.fixture(scope="module")
def broker(spark_connect_broker: BrokerProcess) -> BrokerProcess:
    return spark_connect_broker


@pytest.fixture(scope="module")
def postgres(jdbc_postgres: PostgresProcess) -> PostgresProcess:
    return jdbc_postgres


@pytest.fixture(scope="module")
def mariadb(jdbc_mariadb: MariaDBProcess) -> MariaDBProcess:
    return jdbc_mariadb


def read_topic(broker: BrokerProcess, topic: str, at_least: int) -> list[Any]:
    """Every value of the topic (all partitions), JSON-decoded, once ``at_least`` have come
    and the reader is at the end of every partition (read_committed: what is committed)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"read-{topic}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})  # fmt: skip

    def partitions_of_topic() -> Any:
        found = consumer.list_topics(topic, timeout=10).topics[topic]
        return found.partitions if found.error is None else None

    partitions = set(wait_for(partitions_of_topic, f"topic {topic}", timeout=90))
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    values: list[Any] = []
    at_end: set[int] = set()

    def enough() -> bool:
        for m in consumer.consume(1000, 0.2):
            if m.error() is None:
                at_end.discard(m.partition())
                values.append(json.loads(m.value() or b"null"))
            elif m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
        return len(values) >= at_least and at_end >= partitions

    wait_for(enough, f"{at_least} records in {topic}", timeout=90)
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
    wait_for(  # KIP-558: the topic its task on Spark wrote to
        lambda: (
            worker.call("GET", "/connectors/pg-bulk/topics")
            == (200, {"pg-bulk": {"topics": ["bulk-items"]}})
        ),
        "the source's active topic",
    )
    worker.call("DELETE", "/connectors/pg-bulk")


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
    wait_for(  # KIP-558: the topic its task on Spark read from
        lambda: (
            worker.call("GET", "/connectors/pg-sink/topics")
            == (200, {"pg-sink": {"topics": ["accounts"]}})
        ),
        "the sink's active topic",
    )
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


def test_upsert_of_new_keys_inserts_and_of_known_keys_updates(postgres: PostgresProcess) -> None:
    """The PostgreSQL upsert's two ways (the sink's writer alone, no Spark): a batch of new
    keys goes in by a plain INSERT; a batch with a key already there is undone to a
    savepoint and upserted, and the table's next upserts in the process go straight to ON
    CONFLICT; either way the table ends as the records say."""
    from strom.connect.connectors import jdbc_sink
    from strom.connect.converters import JsonConverter, StringConverter

    postgres.query("CREATE TABLE plain_first (id BIGINT PRIMARY KEY, amount BIGINT)")
    props = {"name": "plain-first", "connection.url": postgres.jdbc_url,
             "connection.user": "postgres", "table.name.format": "plain_first",
             "insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id"}  # fmt: skip
    keys, values = StringConverter(), JsonConverter()
    keys.configure({}, is_key=True)
    values.configure({"schemas.enable": "true"}, is_key=False)
    writer = jdbc_sink.PartitionWriter(jdbc_sink.SinkSettings.of(props), keys, values)
    schema = {"type": "struct", "optional": False, "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "amount", "type": "int64", "optional": True},
    ]}  # fmt: skip
    where = (writer.settings.database.url, "plain_first")

    def batch(rows: list[tuple[int, int]], first_offset: int) -> pa.RecordBatch:
        envelopes = [json.dumps({"schema": schema, "payload": {"id": i, "amount": a}},
                                separators=(",", ":")).encode() for i, a in rows]  # fmt: skip
        return pa.RecordBatch.from_pydict({
            "key": pa.array([None] * len(rows), pa.binary()),
            "value": pa.array(envelopes, pa.binary()), "topic": ["plain"] * len(rows),
            "partition": pa.array([0] * len(rows), pa.int32()),
            "offset": pa.array(range(first_offset, first_offset + len(rows)), pa.int64()),
        })  # fmt: skip

    def write(rows: list[tuple[int, int]], first_offset: int) -> int:
        return writer.write([batch(rows, first_offset)])

    def table() -> list[tuple[object, ...]]:
        return postgres.query("SELECT id, amount FROM plain_first ORDER BY id")

    assert writer.payloads_of([batch([(1, 10)], 0)]) is not None  # Arrow reads them
    assert write([(1, 10), (2, 20), (1, 11)], 0) == 2
    assert where not in jdbc_sink._UPSERTS_BEFORE_PLAIN  # no key was there: plain INSERT
    assert write([(3, 30), (2, 21)], 3) == 2  # 2 is there: upserted
    assert jdbc_sink._UPSERTS_BEFORE_PLAIN[where] == jdbc_sink.PLAIN_INSERT_PAUSE
    assert write([(4, 40)], 5) == 1
    assert jdbc_sink._UPSERTS_BEFORE_PLAIN[where] == jdbc_sink.PLAIN_INSERT_PAUSE - 1
    assert table() == [(1, 11), (2, 21), (3, 30), (4, 40)]


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


def test_mariadb_source_and_sinks(
    worker: Worker, mariadb: MariaDBProcess, broker: BrokerProcess
) -> None:
    """MariaDB end to end: an incrementing source from a table, its topic inserted into
    another table by one sink, and keyed records upserted and deleted by another."""
    mariadb.query(
        "CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, item VARCHAR(40) NOT NULL, "
        "qty INT)"
    )
    mariadb.query("INSERT INTO orders (item, qty) VALUES "
                  + ", ".join(f"('o{i}', {i})" for i in range(1, 51)))  # fmt: skip
    records: list[tuple[str, Any]] = [(f"k{i}", row(f"k{i}", i)) for i in range(60)]
    records += [(f"k{i}", row(f"k{i}", -i)) for i in range(20)]  # updates
    records += [(f"k{i}", None) for i in range(50, 60)]  # tombstones
    produce(broker, "maria-accounts", records)
    common = {"connection.url": mariadb.jdbc_url, "connection.user": "root"}
    create(worker, "maria-inc", {
        **common, "connector.class": SOURCE_CLASS, "mode": "incrementing",
        "incrementing.column.name": "id", "table.whitelist": "orders",
        "topic.prefix": "maria-", "poll.interval.ms": "200",
    })  # fmt: skip
    create(worker, "maria-copy", {
        **common, "connector.class": SINK_CLASS, "topics": "maria-orders",
        "table.name.format": "orders_copy", "insert.mode": "insert", "auto.create": "true",
        "exactly.once.delivery": "true",
    })  # fmt: skip
    create(worker, "maria-upsert", {
        **common, "connector.class": SINK_CLASS, "topics": "maria-accounts",
        "table.name.format": "accounts", "insert.mode": "upsert", "pk.mode": "record_key",
        "pk.fields": "id", "auto.create": "true", "delete.enabled": "true",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    })  # fmt: skip
    values = read_topic(broker, "maria-orders", 50)
    assert sorted(v["payload"]["id"] for v in values) == list(range(1, 51))
    first = min(values, key=lambda v: v["payload"]["id"])
    assert first["payload"] == {"id": 1, "item": "o1", "qty": 1}
    fields = {f["field"]: f for f in first["schema"]["fields"]}
    assert fields["item"]["optional"] is False and fields["qty"]["optional"] is True
    assert fields["id"]["type"] == "int32" and first["schema"]["name"] == "orders"

    def table(sql: str) -> list[tuple[Any, ...]]:
        try:
            return mariadb.query(sql)
        except Exception:  # not created yet
            return []

    copied = [(i, f"o{i}", i) for i in range(1, 51)]
    wait_for(lambda: table("SELECT id, item, qty FROM orders_copy ORDER BY id") == copied,
             "the copied orders", timeout=90)  # fmt: skip
    assert mariadb.query(  # exactly.once.delivery's offsets, in the rows' transactions
        "SELECT topic, `partition`, `offset` FROM __strom_connect_offsets "
        "WHERE connector = 'maria-copy'"
    ) == [("maria-orders", 0, 50)]
    expected = sorted((f"k{i}", -i if i < 20 else i) for i in range(50))
    wait_for(lambda: table("SELECT id, amount FROM accounts ORDER BY id") == expected,
             "the upserted accounts", timeout=90)  # fmt: skip
    code, offsets = worker.call("GET", "/connectors/maria-inc/offsets")
    assert code == 200
    assert offsets["offsets"] == [
        {"partition": {"protocol": "1", "table": "strom.orders"}, "offset": {"incrementing": 50}}
    ]
    for name in ("maria-inc", "maria-copy", "maria-upsert"):
        worker.call("DELETE", f"/connectors/{name}")


def read_avro(broker: BrokerProcess, registry: str, topic: str, count: int) -> list[Any]:
    """``count`` values of ``topic``, read with confluent-kafka's Avro deserializer."""
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": registry}))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"read-{topic}",
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic])
    values: list[Any] = []
    context = SerializationContext(topic, MessageField.VALUE)

    def enough() -> bool:
        values.extend(deserialize(m.value(), context) for m in consumer.consume(100, 0.2)
                      if not m.error())  # fmt: skip
        return len(values) >= count

    try:
        wait_for(enough, f"{count} Avro records in {topic}", timeout=90)
    finally:
        consumer.close()
    return values


def test_avro_through_the_registry_source_to_sink(
    worker: Worker, postgres: PostgresProcess, broker: BrokerProcess, spark_connect_registry: str
) -> None:
    """Confluent's AvroConverter on tasks that run on Spark: the JDBC source registers its
    schema and writes Confluent's wire format (confluent-kafka's deserializer reads it),
    and the JDBC sink reads those records into rows (the lake sink decodes a record with
    the same converter call)."""
    registry = spark_connect_registry
    avro = {"value.converter": "io.confluent.connect.avro.AvroConverter",
            "value.converter.schema.registry.url": registry}  # fmt: skip
    postgres.query(
        "CREATE TABLE products (id INT PRIMARY KEY, name TEXT NOT NULL, price NUMERIC(8, 2), "
        "added TIMESTAMP)"
    )
    postgres.query(
        "INSERT INTO products SELECT i, 'product ' || i, i + 0.25, "
        "TIMESTAMP '2026-01-02 03:04:05' FROM generate_series(1, 40) i"
    )
    create(worker, "avro-source", {
        **avro, "connector.class": SOURCE_CLASS, "connection.url": postgres.jdbc_url,
        "connection.user": "postgres", "mode": "incrementing",
        "incrementing.column.name": "id", "table.whitelist": "products",
        "topic.prefix": "avro-", "poll.interval.ms": "200",
    })  # fmt: skip
    create(worker, "avro-jdbc", {
        **avro, "connector.class": SINK_CLASS, "connection.url": postgres.jdbc_url,
        "connection.user": "postgres", "topics": "avro-products",
        "table.name.format": "products_copy", "insert.mode": "upsert",
        "pk.mode": "record_value", "pk.fields": "id", "auto.create": "true",
    })  # fmt: skip
    values = read_avro(broker, registry, "avro-products", 40)
    assert sorted(v["id"] for v in values) == list(range(1, 41))
    first = min(values, key=lambda v: v["id"])
    assert first == {
        "id": 1, "name": "product 1", "price": Decimal("1.25"),
        "added": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    }  # fmt: skip
    subject = SchemaRegistryClient({"url": registry}).get_latest_version("avro-products-value")
    registered = json.loads(subject.schema.schema_str)
    assert registered["name"] == "products"
    assert [f["name"] for f in registered["fields"]] == ["id", "name", "price", "added"]

    def copied() -> list[tuple[Any, ...]]:
        no_task_failed(worker, "avro-source", "avro-jdbc")
        try:
            return postgres.query("SELECT id, name, price, added FROM products_copy ORDER BY id")
        except Exception:  # not created yet
            return []

    rows = wait_for(lambda: len(copied()) == 40 and copied(), "the copied products", timeout=90)
    assert rows[0] == (1, "product 1", Decimal("1.25"), dt.datetime(2026, 1, 2, 3, 4, 5))
    for name in ("avro-source", "avro-jdbc"):
        worker.call("DELETE", f"/connectors/{name}")


def test_topic_creation_and_transactions_on_spark(
    worker: Worker, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    """A JDBC source on Spark creates its topic by its topic.creation group (partitions,
    retention.ms) and, the worker having exactly-once source support, writes its polls
    in transactions with their offsets (``interval`` boundary): a read_committed reader
    sees each row once and the topic holds the transactions' markers. A header converter
    is taken (the JDBC source's records have no headers); a boundary the connector cannot
    define is refused in Kafka's words."""
    postgres.query("CREATE TABLE widgets (id SERIAL PRIMARY KEY, name TEXT NOT NULL)")
    postgres.query("INSERT INTO widgets (name) SELECT 'w' || i FROM generate_series(1, 30) i")
    config = {
        "connector.class": SOURCE_CLASS, "connection.url": postgres.jdbc_url,
        "connection.user": "postgres", "mode": "incrementing",
        "incrementing.column.name": "id", "table.whitelist": "widgets",
        "topic.prefix": "tc-", "poll.interval.ms": "200",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
        "topic.creation.groups": "wide",
        "topic.creation.wide.include": "tc-.*",
        "topic.creation.wide.partitions": "3",
        "topic.creation.wide.retention.ms": "86400000",
        "transaction.boundary": "interval", "transaction.boundary.interval.ms": "500",
        "exactly.once.support": "required",
        "header.converter": "org.apache.kafka.connect.storage.StringConverter",
    }  # fmt: skip
    create(worker, "tc-source", config)
    code, message = error_of(worker.call("POST", "/connectors", {"name": "tc-bad", "config": {
        **config, "transaction.boundary": "connector"}}))  # fmt: skip
    assert code == 400 and "connector-defined transaction boundaries" in message, message
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def topic() -> Any:
        found = admin.list_topics(timeout=10).topics.get("tc-widgets")  # no auto-creation
        return found if found is not None and found.error is None else None

    assert len(wait_for(topic, "the created topic", timeout=90).partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, "tc-widgets")
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["retention.ms"].value == "86400000"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tc-check",
                         "isolation.level": "read_committed"})  # fmt: skip
    consumer.assign([TopicPartition("tc-widgets", p, 0) for p in range(3)])
    ids: list[int] = []

    def read(count: int) -> bool:
        no_task_failed(worker, "tc-source")
        ids.extend(json.loads(m.value())["payload"]["id"]
                   for m in consumer.consume(100, 0.2) if not m.error())  # fmt: skip
        return len(ids) >= count

    try:
        wait_for(lambda: read(30), "the first 30 rows", timeout=90)
        postgres.query("INSERT INTO widgets (name) SELECT 'x' || i FROM generate_series(1, 10) i")
        wait_for(lambda: read(40), "the 10 rows more", timeout=90)
        ends = [consumer.get_watermark_offsets(TopicPartition("tc-widgets", p))[1]
                for p in range(3)]  # fmt: skip
    finally:
        consumer.close()
    assert sorted(ids) == list(range(1, 41))
    assert sum(ends) > 40  # each transaction's commit marker takes an offset

    def stored() -> Any:
        code, body = worker.call("GET", "/connectors/tc-source/offsets")
        return code == 200 and body["offsets"] and body["offsets"][0]["offset"]

    wait_for(lambda: stored() == {"incrementing": 40}, "the source's offset at 40")
    worker.call("DELETE", "/connectors/tc-source")


class StreamProducer(threading.Thread):
    """Produces ``total`` records {id, body} with a schema to a topic, a few at a time,
    so that the sinks are mid-stream when the worker is killed."""

    def __init__(self, broker: BrokerProcess, topic: str, total: int) -> None:
        super().__init__(daemon=True)
        self.broker, self.topic, self.total = broker, topic, total
        self.sent = 0
        self.stop_at = total

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 5})
        schema = {"type": "struct", "name": "event", "optional": False, "fields": [
            {"field": "id", "type": "int64", "optional": False},
            {"field": "body", "type": "string", "optional": True},
        ]}  # fmt: skip
        while self.sent < self.stop_at:
            for n in range(self.sent, min(self.sent + STREAM_STEP, self.stop_at)):
                value = {"schema": schema, "payload": {"id": n, "body": f"event {n}"}}
                producer.produce(self.topic, json.dumps(value), str(n), partition=n % 2)
            self.sent = min(self.sent + STREAM_STEP, self.stop_at)
            producer.flush(10)
            time.sleep(STREAM_PAUSE_S)
        producer.flush(10)

    def prime(self, count: int) -> None:
        """The first ``count`` records, before the thread starts."""
        self.stop_at = count
        self.run()
        self.stop_at = self.total


class RowWriter(threading.Thread):
    """Inserts rows into ``events`` a few at a time, each statement its own commit (ids
    rise in commit order, as an incrementing source needs), until told to stop."""

    def __init__(self, postgres: PostgresProcess) -> None:
        super().__init__(daemon=True)
        self.postgres = postgres
        self.written = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.05):
            self.postgres.query(
                "INSERT INTO events (body) SELECT 'w' || i FROM generate_series(1, 5) i"
            )
            self.written += 5

    def stop(self) -> int:
        """Stop; the rows written."""
        self.halt.set()
        self.join(30)
        return self.written


def no_task_failed(worker: Worker, *names: str) -> None:
    """Raise with its trace if a task of these connectors FAILED (no waiting for it)."""
    for name in names:
        for task in (worker.status(name) or {}).get("tasks", []):
            assert task["state"] != "FAILED", f"{name}: {task.get('trace')}"


def lake_count(table: Path) -> int:
    """The records in the lake sink's committed files, from their Parquet footers (a look
    cheap enough to repeat every 50 ms)."""
    return sum(pq.read_metadata(path).num_rows for path in committed_files(table))


def lake_ids(table: Path) -> list[int]:
    """The ids in the lake sink's committed files (its _spark_metadata log)."""
    ids: list[int] = []
    for path in committed_files(table):
        ids += pq.read_table(path, columns=["id"]).column("id").to_pylist()
    return sorted(ids)


# Two JVM starts, and at a load of 20-25 on 2 cores a sink's queries may fail to start
# several times running (Spark's 10 s for its Python source process to connect back;
# the runner starts them again): 120-270 s were seen, hence the generous deadlines.
@pytest.mark.timeout(600)
def test_killed_worker_resumes_each_record_once(
    worker: Worker, postgres: PostgresProcess, broker: BrokerProcess, spark_connect_dir: Path
) -> None:
    """kill -9 of the worker while two exactly-once sinks are mid-stream and an
    exactly-once JDBC source keeps reading new rows: once restarted, the JDBC sink in
    insert mode (no key: a record written twice would be two rows) and the lake sink's
    committed files hold each record once, and a read_committed reader of the source's
    topic sees each row once (a poll's transaction cut by the kill is aborted by the
    restarted task's producer; the offset committed with the last whole one says where
    to go on)."""
    # The sinks first: their queries' start (the lake's twice: once more to learn the
    # columns) is the slow part, and runs while the source starts and reads.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("stream", 2, 1)])["stream"].result(30)
    stream = StreamProducer(broker, "stream", STREAM_TOTAL)
    stream.prime(STREAM_PRIME)
    lake_dir = spark_connect_dir / "lake-eos"
    create(worker, "eos-jdbc", {
        "connector.class": SINK_CLASS, "connection.url": postgres.jdbc_url,
        "connection.user": "postgres", "topics": "stream", "table.name.format": "stream_rows",
        "insert.mode": "insert", "auto.create": "true", "exactly.once.delivery": "true",
    })  # fmt: skip
    create(worker, "eos-lake", {
        "connector.class": "LakeSink", "path": str(lake_dir), "topics": "stream",
        "rotate.interval.ms": "200",
    })  # fmt: skip
    postgres.query("CREATE TABLE events (id BIGSERIAL PRIMARY KEY, body TEXT)")
    postgres.query("INSERT INTO events (body) SELECT 'e' || i FROM generate_series(1, 100) i")
    create(worker, "pg-inc", {
        "connector.class": "JdbcSourceConnector", "connection.url": postgres.jdbc_url,
        "connection.user": "postgres", "mode": "incrementing",
        "incrementing.column.name": "id", "table.include.list": "events",
        "topic.prefix": "inc-", "poll.interval.ms": "200",
    })  # fmt: skip
    read_topic(broker, "inc-events", 100)

    def source_offsets() -> Any:
        code, body = worker.call("GET", "/connectors/pg-inc/offsets")
        return body["offsets"] if code == 200 and body["offsets"] else None

    assert wait_for(source_offsets, "the source's offsets") == [
        {"partition": {"protocol": "1", "table": "postgres.public.events"},
         "offset": {"incrementing": 100}}
    ]  # fmt: skip

    def rows() -> int:
        try:
            count = postgres.query("SELECT count(*) FROM stream_rows")[0][0]
        except Exception:  # not created yet
            return 0
        assert isinstance(count, int)
        return count

    table = lake_dir / "topics" / "stream"

    def primed() -> bool:
        no_task_failed(worker, "eos-jdbc", "eos-lake")
        return rows() >= STREAM_PRIME and lake_count(table) >= STREAM_PRIME

    wait_for(primed, "both sinks' queries running", timeout=300)
    writer = RowWriter(postgres)
    writer.start()
    wait_for(lambda: source_offsets()[0]["offset"]["incrementing"] > 100,  # type: ignore[index]
             "the source reading the new rows", timeout=60)  # fmt: skip
    stream.start()  # and kill once the table has a few batches more
    wait_for(lambda: rows() >= 2 * STREAM_PRIME, "the sinks mid-stream", timeout=120)
    worker.proc.kill()  # SIGKILL: batches in flight, offsets not yet committed in the group
    worker.proc.wait(30)
    events = 100 + writer.stop()  # rows up to the kill (and a few while it is down)
    assert rows() < STREAM_TOTAL or stream.sent < STREAM_TOTAL, "killed after the stream ended"
    worker.start()
    stream.join(120)
    wait_for(lambda: rows() >= STREAM_TOTAL, "every record in the table", timeout=300)
    ids = [r[0] for r in postgres.query("SELECT id FROM stream_rows ORDER BY id")]
    assert ids == list(range(STREAM_TOTAL))  # each once
    wait_for(lambda: lake_count(table) >= STREAM_TOTAL, "every record in the files",
             timeout=300)  # fmt: skip
    assert lake_ids(table) == list(range(STREAM_TOTAL))
    stored = postgres.query(
        'SELECT topic, "partition", "offset" FROM __strom_connect_offsets '
        "WHERE connector = 'eos-jdbc' ORDER BY 2"
    )
    assert stored == [("stream", 0, STREAM_TOTAL // 2), ("stream", 1, STREAM_TOTAL // 2)]
    values = read_topic(broker, "inc-events", events)
    assert sorted(v["payload"]["id"] for v in values) == list(range(1, events + 1))
    for name in ("pg-inc", "eos-jdbc", "eos-lake"):
        worker.call("DELETE", f"/connectors/{name}")
