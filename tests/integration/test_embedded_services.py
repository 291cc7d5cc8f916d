"""The schema registry and REST proxy inside ``strom broker``, each turned on by one
setting (``schema.registry.listener``, ``rest.proxy.listener``).

confluent-kafka's Avro serialiser registers through the embedded registry and its
records round-trip; the embedded REST proxy produces Avro records with the embedded
registry's ids; after ``kill -9`` and a restart the registry serves the same schemas
under the same ids; a bad listener setting is one line and the broker does not start;
a port already taken stops the broker with one line.

With the standalone services' settings prefixed ``schema.registry.`` and ``rest.proxy.``
both serve https and ask for basic authentication: an anonymous write to either is
refused with 401, an authorized one accepted, and the proxy reaches the secured registry
with its ``rest.proxy.schema.registry.*`` client settings; a bad one of those settings is
one line and the broker does not start.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
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
from kafka_helpers import consume_all, consume_to_end, create_topic
from tls_certs import make_ca

AVRO_V2 = "application/vnd.kafka.avro.v2+json"
ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}],
}
SERVED = re.compile(r"(schema registry|REST proxy) on (https?://127\.0\.0\.1:\d+)/")


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


def post(
    url: str,
    body: Any,
    content_type: str,
    user: str | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, Any]:
    """POST ``body`` as JSON; (status, JSON answer), an error status included. ``user``:
    ``name:password`` for basic authentication."""
    headers = {"Content-Type": content_type}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(user.encode()).decode()
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refusal:
        return refusal.code, json.loads(refusal.read() or b"null")


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


def test_secured_registry_and_proxy_inside_the_broker(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "pki")
    server = ca.issue("services", "/CN=services")
    users = tmp_path / "users.properties"
    users.write_text("alice: secret,admin\nproxy: proxy-secret,admin\nbob: pw,reader\n")
    secured = {
        "ssl.keystore.location": str(server.bundle),
        "authentication.method": "BASIC",
        "authentication.users.file": str(users),
        "authentication.roles": "admin",
    }
    overrides = {
        "schema.registry.listener": "https://127.0.0.1:0",
        **{f"schema.registry.{key}": value for key, value in secured.items()},
        "schema.registry.authentication.realm": "SchemaRegistry",
        "rest.proxy.listener": "https://127.0.0.1:0",
        **{f"rest.proxy.{key}": value for key, value in secured.items()},
        "rest.proxy.schema.registry.basic.auth.user.info": "proxy:proxy-secret",
        "rest.proxy.schema.registry.ssl.ca.location": str(ca.cert),
    }
    broker = BrokerProcess(tmp_path / "data", overrides)
    broker.start()
    try:
        urls = served_urls(broker, 0)
        registry_url, proxy_url = urls["schema registry"], urls["REST proxy"]
        assert registry_url.startswith("https://") and proxy_url.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(ca.cert))
        topic = f"orders-{uuid.uuid4().hex[:6]}"
        subject = f"{topic}-value"
        schema = {"schema": json.dumps(ORDER)}

        # The registry: no credentials, a wrong password or a user without the role: no
        # schema registered; alice's goes in.
        registry_type = "application/vnd.schemaregistry.v1+json"
        versions = f"{registry_url}/subjects/{subject}/versions"
        status, body = post(versions, schema, registry_type, context=trusted)
        assert status == 401 and body["error_code"] == 401, body
        assert post(versions, schema, registry_type, "alice:wrong", trusted)[0] == 401
        assert post(versions, schema, registry_type, "bob:pw", trusted)[0] == 403
        status, body = post(versions, schema, registry_type, "alice:secret", trusted)
        assert status == 200, body
        schema_id = body["id"]
        client = SchemaRegistryClient(
            {"url": registry_url, "basic.auth.user.info": "alice:secret",
             "ssl.ca.location": str(ca.cert)}
        )  # fmt: skip
        assert client.get_latest_version(subject).schema_id == schema_id

        # The REST proxy: an anonymous produce is refused and writes nothing; alice's
        # Avro records go in, the proxy fetching the schema from the secured registry.
        create_topic(broker.bootstrap, topic, 1)
        record = {"value_schema_id": schema_id, "records": [{"value": {"id": "r", "qty": 9}}]}
        status, body = post(f"{proxy_url}/topics/{topic}", record, AVRO_V2, context=trusted)
        assert status == 401 and body["error_code"] == 401, body
        status, body = post(f"{proxy_url}/topics/{topic}", record, AVRO_V2, "alice:secret", trusted)
        assert status == 200 and body["value_schema_id"] == schema_id, body
        assert all("error" not in offset or not offset["error"] for offset in body["offsets"])
        deserialize = AvroDeserializer(client)
        context = SerializationContext(topic, MessageField.VALUE)
        values = [deserialize(m.value(), context) for m in consume_to_end(broker.bootstrap, topic)]
        assert values == [{"id": "r", "qty": 9}]  # alice's record, and only hers
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(proxy_url.replace("https:", "http:") + "/topics", timeout=10)
    finally:
        if broker.alive():
            broker.stop()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (["schema.registry.listener=ftp://127.0.0.1:1"], "is not http://HOST:PORT"),
        (["rest.proxy.listener=http://127.0.0.1:x"], "has no valid port"),
        (["schema.registry.listener=http://127.0.0.1:0",
          "schema.registry.authentication.method=BASIC"],
         "schema.registry.authentication.method=BASIC needs "
         "schema.registry.authentication.users.file"),
        (["rest.proxy.listener=http://127.0.0.1:0",
          "rest.proxy.authentication.method=DIGEST"],
         "rest.proxy.authentication.method: must be one of NONE, BASIC"),
        (["rest.proxy.listener=http://127.0.0.1:0",
          "rest.proxy.ssl.keystore.location=/x"],
         "rest.proxy.ssl.* settings need an https:// listener"),
        (["schema.registry.listener=https://127.0.0.1:0",
          "schema.registry.ssl.keystore.location=/nope"],
         "schema.registry.ssl.keystore.location: cannot read /nope"),
        (["rest.proxy.listener=http://127.0.0.1:0", "rest.proxy.authentication.method=BASIC",
          "rest.proxy.authentication.users.file=/nope"],
         "rest.proxy.authentication.users.file: cannot read /nope"),
    ],
)  # fmt: skip
def test_a_bad_service_setting_is_one_line(
    tmp_path: Path, settings: list[str], expected: str
) -> None:
    overrides = [arg for setting in settings for arg in ("--override", setting)]
    done = subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "broker", "--override",
         f"log.dirs={tmp_path / 'data'}", *overrides],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
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
