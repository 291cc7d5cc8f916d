"""The REST proxy (``strom rest-proxy``) against a real broker, spoken to as curl
would (HTTP with Confluent's content types) and checked against confluent-kafka.

Records produced through v2 (JSON and binary) and v3 (one record, and a stream of
them) are read back through a v2 consumer instance and through confluent-kafka; v3
listings match the AdminClient; a consumer instance not used expires; bad input gets
Confluent's error answers, never a 500.
"""

from __future__ import annotations

import base64
import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from service_process import ServiceProcess

V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
AVRO_V2 = "application/vnd.kafka.avro.v2+json"


class Proxy(ServiceProcess):
    def __init__(self, broker: BrokerProcess, *extra: str) -> None:
        super().__init__(
            ["rest-proxy", "--bootstrap-server", broker.bootstrap,
             "--listener", "http://127.0.0.1:0", *extra]
        )  # fmt: skip
        assert self.banner.startswith("Strom REST proxy on"), self.banner

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = V2
    ) -> tuple[int, Any]:
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": content_type}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            text, status = exc.read(), exc.code
        if not text:
            return status, None
        try:
            return status, json.loads(text)
        except ValueError:
            return status, [json.loads(line) for line in text.decode().splitlines() if line]


@pytest.fixture(scope="module")
def proxy(broker: BrokerProcess) -> Iterator[Proxy]:
    process = Proxy(broker, "--consumer-instance-timeout-ms", "2000")
    yield process
    process.stop()


def new_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    name = f"rest-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return name


def read_all(broker: BrokerProcess, topic: str, count: int) -> list[tuple[bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        out += [(m.key(), m.value()) for m in consumer.consume(100, 0.5) if m.error() is None]
    consumer.close()
    return out


def test_v2_produce_json_and_binary_then_consume_through_an_instance(
    proxy: Proxy, broker: BrokerProcess
) -> None:
    topic = new_topic(broker)
    records = [{"key": f"k{i}", "value": {"n": i, "tags": ["a", "b"]}} for i in range(20)]
    status, body = proxy.call("POST", f"/topics/{topic}", {"records": records}, JSON_V2)
    assert status == 200, body
    assert [o["offset"] for o in body["offsets"]] == list(range(20))
    binary = [{"value": base64.b64encode(b"\x00raw\xff").decode()}]
    raw_topic = new_topic(broker)
    status, body = proxy.call(
        "POST", f"/topics/{raw_topic}/partitions/0", {"records": binary}, BINARY_V2
    )
    assert status == 200 and body["offsets"][0]["offset"] == 0
    assert read_all(broker, raw_topic, 1) == [(None, b"\x00raw\xff")]
    seen = read_all(broker, topic, 20)
    assert seen[0] == (b'"k0"', b'{"n": 0, "tags": ["a", "b"]}')
    # A v2 consumer instance reads the JSON records back.
    group = f"g-{uuid.uuid4().hex[:6]}"
    status, created = proxy.call(
        "POST",
        f"/consumers/{group}",
        {"name": "c1", "format": "json", "auto.offset.reset": "earliest"},
    )
    assert status == 200 and created["base_uri"].endswith(f"/consumers/{group}/instances/c1")
    base = f"/consumers/{group}/instances/c1"
    assert (
        proxy.call(
            "POST", base + "/assignments", {"partitions": [{"topic": topic, "partition": 0}]}
        )[0]
        == 204
    )
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        status, batch = proxy.call("GET", base + "/records?timeout=1000")
        assert status == 200, batch
        got += [r for r in batch if r["offset"] < 20]
    assert [r["value"] for r in got[:20]] == [r["value"] for r in records]
    assert got[0]["key"] == "k0" and got[0]["partition"] == 0
    status, _ = proxy.call(
        "POST", base + "/offsets", {"offsets": [{"topic": topic, "partition": 0, "offset": 20}]}
    )
    assert status == 200
    status, committed = proxy.call(
        "GET", base + "/offsets", {"partitions": [{"topic": topic, "partition": 0}]}
    )
    assert committed["offsets"][0]["offset"] == 20
    assert proxy.call("DELETE", base)[0] == 204
    assert proxy.call("GET", base + "/records")[1]["error_code"] == 40403


def test_a_subscribed_instance_and_seek(proxy: Proxy, broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    group = f"s-{uuid.uuid4().hex[:6]}"
    _, created = proxy.call(
        "POST", f"/consumers/{group}", {"format": "binary", "auto.offset.reset": "earliest"}
    )
    base = f"/consumers/{group}/instances/{created['instance_id']}"
    assert proxy.call("POST", base + "/subscription", {"topics": [topic]})[0] == 204
    assert proxy.call("GET", base + "/subscription")[1] == {"topics": [topic]}
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 10 and time.monotonic() < deadline:
        _, batch = proxy.call("GET", base + "/records?timeout=1000")
        values += [base64.b64decode(r["value"]) for r in batch]
    assert values == [f"v{i}".encode() for i in range(10)]
    seek = {"offsets": [{"topic": topic, "partition": 0, "offset": 7}]}
    assert proxy.call("POST", base + "/positions", seek)[0] == 204
    _, batch = proxy.call("GET", base + "/records?timeout=2000")
    assert base64.b64decode(batch[0]["value"]) == b"v7"
    proxy.call("DELETE", base)


def test_v3_listings_match_the_admin_client(proxy: Proxy, broker: BrokerProcess) -> None:
    topic = new_topic(broker, partitions=3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster_id = admin.describe_cluster().result(15).cluster_id
    status, clusters = proxy.call("GET", "/v3/clusters")
    assert status == 200 and [c["cluster_id"] for c in clusters["data"]] == [cluster_id]
    base = f"/v3/clusters/{cluster_id}"
    _, brokers = proxy.call("GET", base + "/brokers")
    metadata = admin.list_topics(timeout=15)
    assert [b["broker_id"] for b in brokers["data"]] == sorted(metadata.brokers)
    _, topics = proxy.call("GET", base + "/topics")
    assert {t["topic_name"] for t in topics["data"]} == set(admin.list_topics(timeout=15).topics)
    _, one = proxy.call("GET", f"{base}/topics/{topic}")
    assert one["partitions_count"] == 3 and one["replication_factor"] == 1
    _, partitions = proxy.call("GET", f"{base}/topics/{topic}/partitions")
    assert [p["partition_id"] for p in partitions["data"]] == [0, 1, 2]
    _, configs = proxy.call("GET", f"{base}/topics/{topic}/configs")
    assert {"cleanup.policy", "retention.ms"} <= {c["name"] for c in configs["data"]}
    status, made = proxy.call(
        "POST",
        base + "/topics",
        {"topic_name": f"{topic}-v3", "partitions_count": 2},
        "application/json",
    )
    assert status == 201 and made["partitions_count"] == 2
    assert (
        proxy.call("POST", base + "/topics", {"topic_name": f"{topic}-v3"}, "application/json")[1][
            "error_code"
        ]
        == 40002
    )
    # One record, then a stream of three in one request.
    one = {
        "partition_id": 1,
        "key": {"type": "STRING", "data": "k"},
        "value": {"type": "JSON", "data": {"x": 1}},
    }
    status, result = proxy.call("POST", f"{base}/topics/{topic}/records", one, "application/json")
    assert status == 200 and result["error_code"] == 200 and result["partition_id"] == 1

    def record(i: int) -> bytes:
        data = base64.b64encode(f"s{i}".encode()).decode()
        return json.dumps({"partition_id": 2, "value": {"type": "BINARY", "data": data}}).encode()

    stream = b"".join(record(i) for i in range(3))
    status, results = proxy.call(
        "POST", f"{base}/topics/{topic}/records", stream, "application/json"
    )
    assert status == 200 and [r["offset"] for r in results] == [0, 1, 2]
    # Lags of a group, as the AdminClient sees its offsets.
    group = f"lag-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 2, 1)], asynchronous=False)
    consumer.close()
    _, lags = proxy.call("GET", f"{base}/consumer-groups/{group}/lags")
    assert [(lag["partition_id"], lag["lag"]) for lag in lags["data"]] == [(2, 2)]
    _, groups = proxy.call("GET", base + "/consumer-groups")
    assert group in {g["consumer_group_id"] for g in groups["data"]}


def test_a_v3_stream_is_answered_while_it_arrives(proxy: Proxy, broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    _, clusters = proxy.call("GET", "/v3/clusters")
    path = f"/v3/clusters/{clusters['data'][0]['cluster_id']}/topics/{topic}/records"
    host, port = proxy.url.removeprefix("http://").split(":")

    def chunk(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    def record(i: int) -> bytes:
        return json.dumps({"value": {"type": "STRING", "data": f"s{i}"}}).encode()

    received = b""

    def read_until(marker: bytes) -> None:
        nonlocal received
        deadline = time.monotonic() + 30
        while marker not in received:
            assert time.monotonic() < deadline, received
            data = connection.recv(65536)
            assert data, received
            received += data

    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        # The first record is answered before the body goes on; the second one is split
        # across chunks; a third object is cut off by the end of the body.
        connection.sendall(chunk(record(0)))
        read_until(b'"offset": 0')
        second = record(1)
        connection.sendall(chunk(second[:7]))
        connection.sendall(chunk(second[7:] + b'{"value": '))
        read_until(b'"offset": 1')
        connection.sendall(b"0\r\n\r\n")
        read_until(b"\r\n0\r\n\r\n")
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" in head.lower()
    lines = [json.loads(line) for line in body.split(b"\n") if line.startswith(b"{")]
    assert [(r["error_code"], r.get("offset")) for r in lines] == [(200, 0), (200, 1), (400, None)]
    assert read_all(broker, topic, 2) == [(None, b"s0"), (None, b"s1")]


def test_an_unused_consumer_instance_expires(proxy: Proxy) -> None:
    group = f"e-{uuid.uuid4().hex[:6]}"
    _, created = proxy.call("POST", f"/consumers/{group}", {"name": "idle"})
    base = f"/consumers/{group}/instances/idle"
    assert proxy.call("GET", base + "/subscription")[0] == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proxy.call("GET", base + "/subscription")[0] == 404:
            break
        time.sleep(2.6)  # each use starts the timeout (2 s) again; wait longer than it
    assert proxy.call("GET", base + "/subscription")[1]["error_code"] == 40403


def test_bad_input_gets_confluents_errors(proxy: Proxy, broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    cases = [
        ("POST", f"/topics/{topic}", b"{oops", JSON_V2, 400),
        ("POST", f"/topics/{topic}", {"records": []}, JSON_V2, 422),
        ("POST", f"/topics/{topic}", {"records": [{"value": 1}]}, "text/plain", 415),
        ("POST", "/topics/no-such-topic-here", {"records": [{"value": 1}]}, JSON_V2, 404),
        ("POST", f"/topics/{topic}/partitions/9", {"records": [{"value": 1}]}, JSON_V2, 404),
        ("POST", f"/topics/{topic}", {"records": [{"value": "%%%"}]}, BINARY_V2, 422),
        ("POST", f"/topics/{topic}", {"records": [{"value": {"a": 1}}]}, AVRO_V2, 422),
        ("GET", "/consumers/g/instances/none/records", None, V2, 404),
        ("POST", "/consumers/g", {"format": "xml"}, V2, 422),
        ("GET", "/v3/clusters/not-this-one/topics", None, "application/json", 404),
        ("GET", "/no/such/path", None, V2, 404),
    ]  # fmt: skip
    for method, path, body, content_type, status in cases:
        got_status, got = proxy.call(method, path, body, content_type)
        assert got_status == status, (path, got)
        assert got["error_code"] and got["message"], (path, got)
    assert proxy.proc.poll() is None
