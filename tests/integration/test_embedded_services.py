"""The schema registry and REST proxy inside ``strom broker``, each turned on by one
setting (``schema.registry.listener``, ``rest.proxy.listener``).

confluent-kafka's Avro serialiser registers through the embedded registry and its
records round-trip; the embedded REST proxy produces Avro records with the embedded
registry's ids; after ``kill -9`` and a restart the registry serves the same schemas
under the same ids; a bad listener setting is one line and the broker does not start;
a port already taken stops the broker with one line.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kafka_helpers import consume_all

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}],
}
SERVED = re.compile(r"(schema registry|REST proxy) on (http://127\.0\.0\.1:\d+)/")


def served_urls(broker: BrokerProcess, since: int, deadline_s: float = 60) -> dict[str, str]:
    """The URLs the broker's log says its services serve, once both are up."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = dict(SERVED.findall(broker.log_path.read_text(errors="replace")[since:]))
        if len(found) == 2:
            return found
        assert broker.alive(), broker.logs()
        time.sleep(0.1)
    raise AssertionError(f"services not up within {deadline_s}s:\n{broker.logs()}")


def post(url: str, body: Any, content_type: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": content_type}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.loads(response.read())


def test_registry_and_proxy_inside_the_broker(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        {
            "schema.registry.listener": "http://127.0.0.1:0",
            "rest.proxy.listener": "http://127.0.0.1:0",
        },
    )
    broker.start()
    try:
        urls = served_urls(broker, 0)
        registry = SchemaRegistryClient({"url": urls["schema registry"]})
        topic = f"orders-{uuid.uuid4().hex[:6]}"
        serialize = AvroSerializer(registry, json.dumps(ORDER))
        context = SerializationContext(topic, MessageField.VALUE)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        sent = [{"id": f"o{i}", "qty": i} for i in range(5)]
        for value in sent:
            producer.produce(topic, serialize(value, context))
        assert producer.flush(30) == 0
        schema_id = registry.get_latest_version(f"{topic}-value").schema_id

        status, body = post(
            f"{urls['REST proxy']}/topics/{topic}",
            {"value_schema_id": schema_id, "records": [{"value": {"id": "r", "qty": 9}}]},
            "application/vnd.kafka.avro.v2+json",
        )
        assert status == 200 and body["value_schema_id"] == schema_id, body
        deserialize = AvroDeserializer(registry)
        values = [deserialize(m.value(), context) for m in consume_all(broker.bootstrap, topic, 6)]
        assert values == [*sent, {"id": "r", "qty": 9}]

        # kill -9 and a restart: the same schema under the same id, read from _schemas.
        broker.proc.kill()
        broker.proc.wait(30)
        since = broker.log_path.stat().st_size
        broker.start()
        urls = served_urls(broker, since)
        again = SchemaRegistryClient({"url": urls["schema registry"]})
        assert json.loads(again.get_schema(schema_id).schema_str)["name"] == "Order"
        assert again.get_latest_version(f"{topic}-value").schema_id == schema_id
    finally:
        if broker.alive():
            broker.stop()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("schema.registry.listener=ftp://127.0.0.1:1", "is not http://HOST:PORT"),
        ("rest.proxy.listener=http://127.0.0.1:x", "has no valid port"),
    ],
)
def test_a_bad_service_listener_is_one_line(tmp_path: Path, setting: str, expected: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "broker", "--override",
         f"log.dirs={tmp_path / 'data'}", "--override", setting],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr


def test_a_taken_service_port_stops_the_broker_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = BrokerProcess(
            tmp_path / "data", {"rest.proxy.listener": f"http://127.0.0.1:{port}"}
        )
        broker.start()
        try:
            assert broker.proc is not None
            assert broker.proc.wait(60) == 1
        finally:
            if broker.alive():
                broker.stop()
    problems = [line for line in broker.logs().splitlines() if line.startswith("strom broker:")]
    assert len(problems) == 1, broker.logs()
    assert problems[0].startswith(
        f"strom broker: rest.proxy.listener: cannot listen on http://127.0.0.1:{port}: "
    )
    assert problems[0].endswith("address already in use"), problems
