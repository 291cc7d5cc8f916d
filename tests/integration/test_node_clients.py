"""Node.js clients against Strom: KafkaJS against the broker, and ksqldb-client (which
speaks HTTP/2 with prior knowledge, as ksqlDB's own clients do) against the ksql server;
and the HTTP/2 path of a ksqlDB client from PyPI (ksql-python-ng) beside it.

The Node programs are under tests/node/ (``./dev test`` installs their packages, pinned
by its package-lock.json, into tests/node/node_modules). Each prints what it saw as JSON
lines; the tests assert on those and on what confluent-kafka reads back.

- KafkaJS: admin (create, metadata, configs described and altered, partitions added,
  delete), produce with acks=-1 uncompressed, gzip and snappy, a group of two members
  consuming every record once with their offsets committed, transactions (committed,
  aborted, with a group's offsets) and an idempotent producer.
- ksqldb-client: connect, CREATE STREAM, listStreams, insertInto, a push query's rows
  as they come, terminatePushQuery, a pull query, disconnect; beside it on Node's own
  HTTP/2 client, a push query whose stream is reset (the query ends) and
  /inserts-stream with each row sent after the previous one's acknowledgement.
"""

from __future__ import annotations

import json
import struct
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_helpers import create_topic
from test_ksql import KsqlServer

NODE_DIR = Path(__file__).resolve().parent.parent / "node"


@pytest.fixture(scope="module")
def node_modules() -> Path:
    installed = NODE_DIR / "node_modules"
    assert (installed / "kafkajs").is_dir() and (installed / "ksqldb-client").is_dir(), (
        "tests/node/node_modules is missing: ./dev test installs it (npm ci in tests/node)"
    )
    return installed


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Groups form at once (Kafka's 3 s first rebalance delay would only add waiting)."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("node-broker") / "data", {"group.initial.rebalance.delay.ms": "0"}
    )
    process.start()
    yield process
    if process.alive():
        process.stop()


def run_node(script: str, *args: str) -> list[dict[str, Any]]:
    """A Node program's JSON lines; it exits with 0 or the test fails with its output."""
    done = subprocess.run(
        ["node", str(NODE_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, (events[-3:], done.stderr[-3000:])
    return events


def one(events: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [found] = [e for e in events if e["event"] == name]
    return found


def read_all(
    broker: BrokerProcess, topic: str, partitions: int, expected: int, **config: str
) -> list[Any]:
    """Every record of ``topic`` (``expected`` of them) read with confluent-kafka."""
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False}
        | config
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records = []
    try:
        for _ in range(60):
            records += consumer.consume(1000, 1.0)
            if len(records) >= expected:
                break
    finally:
        consumer.close()
    assert all(r.error() is None for r in records), [r.error() for r in records]
    return records


def prefix() -> str:
    return f"node-{uuid.uuid4().hex[:6]}"


def test_kafkajs_admin(node_modules: Path, broker: BrokerProcess) -> None:
    name = prefix()
    events = run_node("kafkajs_scenarios.js", "admin", broker.bootstrap, name)
    assert one(events, "created")["created"] is True
    assert one(events, "created-again")["created"] is False  # TOPIC_ALREADY_EXISTS
    [topic] = one(events, "metadata")["topics"]
    assert topic["name"] == f"{name}-admin"
    assert topic["partitions"] == [{"partition": p, "leader": 1, "replicas": [1]} for p in range(3)]
    assert one(events, "topics")["topics"] == [f"{name}-admin"]
    cluster = one(events, "cluster")
    assert cluster["brokers"] == [{"nodeId": 1, "host": "127.0.0.1", "port": broker.port}]
    assert cluster["controller"] == 1 and cluster["clusterId"]
    configs = one(events, "configs")
    assert configs["errorCode"] == 0
    assert configs["entries"]["retention.ms"] == "3600000"
    assert configs["entries"]["cleanup.policy"] == "delete"
    assert one(events, "partitions")["count"] == 4
    assert one(events, "deleted")["topics"] == []


def test_kafkajs_produce_acks_all_compressed(node_modules: Path, broker: BrokerProcess) -> None:
    name = prefix()
    events = run_node("kafkajs_scenarios.js", "produce", broker.bootstrap, name)
    sent = {e["codec"]: e["results"] for e in events if e["event"] == "sent"}
    assert list(sent) == ["none", "gzip", "snappy"]
    for position, codec in enumerate(sent):
        assert sorted(sent[codec], key=lambda r: r["partition"]) == [
            {"partition": p, "errorCode": 0, "baseOffset": str(25 * position)} for p in (0, 1)
        ]
    records = read_all(broker, f"{name}-produced", 2, 150)
    by_partition = {p: [r for r in records if r.partition() == p] for p in (0, 1)}
    for p, got in by_partition.items():
        assert [r.offset() for r in got] == list(range(75))
        expected = [
            (f"{codec}-{i % 5}", f"{codec} record {i} " + "x" * i, codec, str(i))
            for codec in ("none", "gzip", "snappy")
            for i in range(p, 50, 2)
        ]
        assert [
            (r.key().decode(), r.value().decode(), *(v.decode() for _, v in r.headers()))
            for r in got
        ] == expected


def test_kafkajs_group_of_two_consumes_every_record_once(
    node_modules: Path, broker: BrokerProcess
) -> None:
    name = prefix()
    topic = f"{name}-grouped"
    create_topic(broker.bootstrap, topic, 4)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(200):
        producer.produce(topic, value=f"record {i}", partition=i % 4)
    assert producer.flush(30) == 0
    events = run_node("kafkajs_scenarios.js", "group", broker.bootstrap, name, "200")
    records = [e for e in events if e["event"] == "record"]
    assert sorted(r["value"] for r in records) == sorted(f"record {i}" for i in range(200))
    members = {r["member"] for r in records}
    assert members == {"a", "b"}  # both members had partitions, and nobody read twice
    by_partition: dict[int, set[str]] = {}
    for r in records:
        by_partition.setdefault(r["partition"], set()).add(r["member"])
        assert r["value"] == f"record {int(r['offset']) * 4 + r['partition']}"
    assert all(len(m) == 1 for m in by_partition.values()), by_partition
    committed = {p["partition"]: p["offset"] for p in one(events, "committed")["partitions"]}
    assert committed == {p: "50" for p in range(4)}
    assert one(events, "group") == {"event": "group", "state": "Empty", "protocol": "consumer"}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{name}-group"})
    try:
        seen = consumer.committed([TopicPartition(topic, p) for p in range(4)], 30)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in seen} == {p: 50 for p in range(4)}


def test_kafkajs_transactions_and_idempotence(node_modules: Path, broker: BrokerProcess) -> None:
    name = prefix()
    events = run_node("kafkajs_scenarios.js", "transaction", broker.bootstrap, name)
    assert [e["event"] for e in events] == [
        "committed",
        "aborted",
        "committed-with-offsets",
        "idempotent",
    ]
    # partition 1: two committed records, their marker, an aborted record, its marker
    assert one(events, "idempotent") == {"event": "idempotent", "baseOffset": "5", "errorCode": 0}
    topic = f"{name}-txn"
    committed = read_all(broker, topic, 2, 6, **{"isolation.level": "read_committed"})
    assert sorted(r.value().decode() for r in committed) == [
        "committed 0", "committed 1", "committed 2", "committed 3", "idempotent", "with offsets",
    ]  # fmt: skip
    everything = read_all(broker, topic, 2, 8, **{"isolation.level": "read_uncommitted"})
    assert sorted(r.value().decode() for r in everything if r.value().startswith(b"aborted")) == [
        "aborted 0",
        "aborted 1",
    ]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{name}-txn-group"})
    try:
        [offset] = consumer.committed([TopicPartition(topic, 1)], 30)
    finally:
        consumer.close()
    assert offset.offset == 2


@pytest.fixture(scope="module")
def ksql_server(broker: BrokerProcess) -> Iterator[KsqlServer]:
    process = KsqlServer(broker)
    yield process
    if process.proc.poll() is None:
        process.stop()


def test_ksqldb_client_over_http2(
    node_modules: Path, broker: BrokerProcess, ksql_server: KsqlServer
) -> None:
    name = f"NODE_{uuid.uuid4().hex[:6].upper()}"
    port = ksql_server.url.rsplit(":", 1)[1].rstrip("/")
    events = run_node("ksqldb_client_scenario.js", port, broker.bootstrap, name)
    created = one(events, "created")
    assert created["status"] == 200
    assert created["rows"][0]["commandStatus"]["status"] == "SUCCESS"
    refused = one(events, "refused")
    assert refused["status"] == 400 and refused["error"]["@type"] == "statement_error"
    assert f"{name}_ORDERS" in [s["name"] for s in one(events, "streams")["streams"]]
    inserted = [e for e in events if e["event"] == "inserted"]
    assert [(e["status"], e["rows"]) for e in inserted] == [(200, [{"status": "ok", "seq": 0}])] * 2
    # the two rows there, then the one inserted while the query ran, as they came
    assert [e["row"] for e in events if e["event"] == "row"] == [
        {"ID": 1, "ITEM": "apple", "TENFOLD": 30},
        {"ID": 2, "ITEM": "pear", "TENFOLD": 50},
        {"ID": 3, "ITEM": "plum", "TENFOLD": 70},
    ]
    running = one(events, "running")
    assert running["queryIds"] == [running["queryId"]]
    assert one(events, "terminated")["status"] == 200
    ended = one(events, "push-ended")
    assert ended["status"] == 200
    assert ended["metadata"]["queryId"] == running["queryId"]
    assert ended["metadata"]["columnNames"] == ["ID", "ITEM", "TENFOLD"]
    assert one(events, "after-terminate")["queryIds"] == []
    # the query of the stream the client reset ended (the script waited for it to go)
    assert one(events, "reset")["queryId"].startswith(f"transient_{name}_ORDERS_")
    assert one(events, "after-reset")["queryIds"] == []
    pulled = one(events, "pulled")
    assert pulled["status"] == 200 and pulled["rows"] == [{"ITEM": "pear", "PRICE": 6}]
    assert pulled["metadata"]["columnNames"] == ["ITEM", "PRICE"]
    assert one(events, "disconnected") == {"event": "disconnected"}
    # rows written one at a time, each after the last one's acknowledgement
    assert one(events, "inserts-stream")["acks"] == [
        {"status": "ok", "seq": 0},
        {"status": "ok", "seq": 1},
    ]
    records = read_all(broker, f"{name.lower()}_orders", 1, 5)
    assert [(r.key(), json.loads(r.value())) for r in records] == [
        (struct.pack(">i", 1), {"ITEM": "apple", "QTY": 3}),
        (struct.pack(">i", 2), {"ITEM": "pear", "QTY": 5}),
        (struct.pack(">i", 3), {"ITEM": "plum", "QTY": 7}),
        (struct.pack(">i", 4), {"ITEM": "fig", "QTY": 1}),
        (struct.pack(">i", 5), {"ITEM": "kiwi", "QTY": 2}),
    ]


def test_ksql_python_push_query_over_http2(ksql_server: KsqlServer) -> None:
    """ksql-python-ng from PyPI takes HTTP/2 (httpx, prior knowledge) for /query-stream
    when asked to: the same server answers it on the same port."""
    from ksql import KSQLAPI

    name = f"PY_{uuid.uuid4().hex[:6].upper()}"
    ksql_server.ok(
        f"CREATE STREAM {name} (id INT KEY, kind STRING) "
        f"WITH (kafka_topic='{name.lower()}', value_format='JSON', partitions=1);"
        f"INSERT INTO {name} (id, kind) VALUES (1, 'view');"
        f"INSERT INTO {name} (id, kind) VALUES (2, 'click');"
    )
    lines = KSQLAPI(ksql_server.url).query(
        f"SELECT kind, id FROM {name} EMIT CHANGES LIMIT 2;",
        stream_properties={"auto.offset.reset": "earliest"},
        use_http2=True,
    )
    header, *rows = [json.loads(line) for line in lines]
    assert header["columnNames"] == ["KIND", "ID"]
    assert rows == [["view", 1], ["click", 2]]
