"""The lake sink on the Spark runner: a real broker and a real distributed Connect worker
(the session's, shared with test_connect_jdbc.py: tests/integration/conftest.py), driven
over its REST API, writing Parquet and JSON files read back here from the committed
files its ``_spark_metadata`` log lists (pyarrow; no second JVM in the test process).

Covers: Confluent's HDFS 3 class with store.url, ParquetFormat, FieldPartitioner and
flush.size, logical types (Timestamp, Decimal) as Parquet's; Confluent's HDFS 2 class with
hdfs.url, topics.dir, JsonFormat and TimeBasedPartitioner over a record field's time;
Strom's LakeSink with schemaless JSON, DefaultPartitioner over two partitions and a
field first seen mid-stream (its column learnt); a second connector over a directory whose
checkpoint it does not have FAILED in one line; bad settings refused in one line naming
the key. A kill -9 of the worker mid-stream, leaving each record in the files once, is in
test_connect_jdbc.py's kill test (one JVM restart for the JDBC and lake sinks together).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from broker_process import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from test_connect import Worker, error_of, wait_for

from strom.connect.connectors.lake_sink import committed_files

pytestmark = pytest.mark.timeout(300)

ORDER_SCHEMA = {"type": "struct", "name": "order", "optional": False, "fields": [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "region", "type": "string", "optional": False},
    {"field": "amount", "type": "bytes", "optional": True,
     "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
    {"field": "at", "type": "int64", "optional": False,
     "name": "org.apache.kafka.connect.data.Timestamp"},
]}  # fmt: skip
JAN_2_0300 = 1767322800000  # 2026-01-02T03:00:00Z in epoch millis


def order(n: int) -> dict[str, Any]:
    cents = 1000 + n  # amount 10.00 + n/100, as JsonConverter writes a Decimal
    amount = base64.b64encode(cents.to_bytes(2, "big", signed=True)).decode()
    at = JAN_2_0300 + n * 360_000  # every 6 minutes: hours 03 and 04
    return {"schema": ORDER_SCHEMA, "payload": {
        "id": n, "region": "eu" if n % 2 else "us", "amount": amount, "at": at}}  # fmt: skip


def produce(broker: BrokerProcess, topic: str, values: list[Any], partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n, value in enumerate(values):
        producer.produce(topic, json.dumps(value), partition=n % partitions)
    producer.flush(10)


def create(worker: Worker, name: str, config: dict[str, str]) -> None:
    code, body = worker.call("POST", "/connectors", {"name": name, "config": config})
    assert code == 201, body


def rows_of(worker: Worker, name: str, read: Any, table: Path) -> Any:
    """A wait's check: ``read(table)``, raising with its trace if the connector's task
    FAILED (rather than waiting out the deadline)."""

    def check() -> Any:
        for task in (worker.status(name) or {}).get("tasks", []):
            assert task["state"] != "FAILED", f"{name}: {task.get('trace')}"
        return read(table)

    return check


def parquet_rows(table: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Each committed Parquet file's rows, with the file's directory below ``table``."""
    found = []
    for path in committed_files(table):
        for row in pq.read_table(path).to_pylist():
            found.append((path.parent.relative_to(table), row))
    return found


def json_rows(table: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in committed_files(table):
        for line in path.read_text().splitlines():
            found.append((path.parent.relative_to(table), json.loads(line)))
    return found


def test_partitioners_formats_and_converters(
    spark_worker: Worker, spark_connect_broker: BrokerProcess, spark_connect_dir: Path
) -> None:
    worker, broker, root = spark_worker, spark_connect_broker, spark_connect_dir / "lake"
    produce(broker, "lake-orders", [order(n) for n in range(20)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("lake-plain", 2, 1)])["lake-plain"].result(30)
    produce(broker, "lake-plain", [{"id": n, "name": f"n{n}"} for n in range(10)], 2)
    create(worker, "lake-fields", {
        "connector.class": "io.confluent.connect.hdfs3.Hdfs3SinkConnector",
        "store.url": f"file://{root}/a", "topics": "lake-orders",
        "format.class": "io.confluent.connect.hdfs3.parquet.ParquetFormat",
        "partitioner.class": "io.confluent.connect.storage.partitioner.FieldPartitioner",
        "partition.field.name": "region", "flush.size": "3", "rotate.interval.ms": "200",
    })  # fmt: skip
    create(worker, "lake-hours", {
        "connector.class": "io.confluent.connect.hdfs.HdfsSinkConnector",
        "hdfs.url": f"{root}/b", "topics.dir": "data", "topics": "lake-orders",
        "format.class": "io.confluent.connect.hdfs.json.JsonFormat",
        "partitioner.class": "io.confluent.connect.storage.partitioner.TimeBasedPartitioner",
        "path.format": "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH",
        "partition.duration.ms": "3600000", "locale": "en-US", "timezone": "UTC",
        "timestamp.extractor": "RecordField", "timestamp.field": "at",
        "rotate.interval.ms": "200",
    })  # fmt: skip
    create(worker, "lake-plain", {
        "connector.class": "LakeSink", "path": f"{root}/c", "topics": "lake-plain",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false", "rotate.interval.ms": "200",
    })  # fmt: skip

    # FieldPartitioner: region=<value> directories, at most flush.size records a file
    fields = root / "a" / "topics" / "lake-orders"
    by_region = rows_of(worker, "lake-fields", parquet_rows, fields)
    wait_for(lambda: len(by_region()) >= 20, "the orders by region", timeout=180)
    rows = parquet_rows(fields)
    assert sorted(row["id"] for _, row in rows) == list(range(20))
    assert {str(where) for where, _ in rows} == {"region=eu", "region=us"}
    assert all((str(where) == "region=eu") == (row["id"] % 2 == 1) for where, row in rows)
    assert all(len(pq.read_table(p)) <= 3 for p in committed_files(fields))
    first = next(row for _, row in rows if row["id"] == 1)
    assert str(first["amount"]) == "10.01"
    assert first["at"] == dt.datetime(2026, 1, 2, 3, 6, tzinfo=dt.UTC)
    assert "region" not in first  # in the directory's name, as Hive lays it out

    # TimeBasedPartitioner over the record's field, JSON lines under topics.dir
    hours = root / "b" / "data" / "lake-orders"
    by_hour_rows = rows_of(worker, "lake-hours", json_rows, hours)
    wait_for(lambda: len(by_hour_rows()) >= 20, "the orders by hour", timeout=60)
    by_hour: dict[str, list[int]] = {}
    for where, row in json_rows(hours):
        by_hour.setdefault(str(where), []).append(row["id"])
    assert {k: sorted(v) for k, v in by_hour.items()} == {
        "year=2026/month=01/day=02/hour=03": list(range(10)),
        "year=2026/month=01/day=02/hour=04": list(range(10, 20)),
    }

    # schemaless JSON: columns inferred, partition=<n>; a new field is a new column
    plain = root / "c" / "topics" / "lake-plain"
    plain_rows = rows_of(worker, "lake-plain", parquet_rows, plain)
    wait_for(lambda: len(plain_rows()) >= 10, "the schemaless records", timeout=60)
    produce(broker, "lake-plain", [{"id": n, "name": f"n{n}", "vip": True} for n in range(10, 14)])
    wait_for(lambda: len(plain_rows()) >= 14, "the records with a new field", timeout=90)
    rows = parquet_rows(plain)
    assert sorted(row["id"] for _, row in rows) == list(range(14))
    assert {str(where) for where, _ in rows} == {"partition=0", "partition=1"}
    assert all(row.get("vip") is (True if row["id"] >= 10 else None) for _, row in rows)

    # a second connector over a directory whose checkpoint it does not have
    create(worker, "lake-again", {
        "connector.class": "LakeSink", "path": f"{root}/c", "topics": "lake-plain",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
    })  # fmt: skip
    trace = worker.wait_task_failed("lake-again")["tasks"][0]["trace"]
    assert "holds committed files but the checkpoint" in trace, trace
    for name in ("lake-fields", "lake-hours", "lake-plain", "lake-again"):
        worker.call("DELETE", f"/connectors/{name}")


@pytest.mark.parametrize(
    ("settings", "key", "words"),
    [
        ({"hdfs.url": "hdfs://namenode:8020"}, "hdfs.url", "local or mounted directory"),
        ({"format.class": "io.confluent.connect.hdfs.avro.AvroFormat"}, "format.class",
         "ParquetFormat and JsonFormat are served"),
        ({"partitioner.class": "FieldPartitioner"}, "partition.field.name", "required"),
        ({"partitioner.class": "TimeBasedPartitioner", "path.format": "YYYY/MM",
          "partition.duration.ms": "3600000"}, "path.format", "'name'=pattern"),
        ({"partitioner.class": "HourlyPartitioner", "timezone": "Mars/Olympus"}, "timezone",
         "not a time zone"),
        ({"timestamp.extractor": "Soon"}, "timestamp.extractor", "String must be one of"),
    ],
)  # fmt: skip
def test_bad_settings_are_one_line(
    spark_worker: Worker, tmp_path: Path, settings: dict[str, str], key: str, words: str
) -> None:
    config = {"connector.class": "LakeSink", "path": str(tmp_path), "topics": "t", **settings}
    code, message = error_of(
        spark_worker.call("POST", "/connectors", {"name": "bad-lake", "config": config})
    )
    assert code == 400 and "contains the following 1 error(s)" in message, message
    error = message.splitlines()[1]  # Kafka's layout: one line per error
    assert key in error and words in error and "Traceback" not in message, message
