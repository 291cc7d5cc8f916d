"""TLS and basic authentication on the HTTP services, and Avro through the REST proxy.

Two schema registries serve https with basic auth on one cluster: confluent-kafka's
SchemaRegistryClient and AvroSerializer work with credentials and the test CA, a change
sent to the secondary reaches the primary over TLS with the caller's credentials, a
request without credentials gets 401 and a challenge, a wrong password 401, a user
without a role 403, plain http nothing. A REST proxy reaches that registry with its
``schema.registry.*`` settings: Avro records produced through it are read back by an
Avro consumer instance and by confluent-kafka's AvroDeserializer. Bad settings are one
line and exit code 2. JSON Schema and Protobuf records go the same way; a record that
breaks its schema, or a schema that does not compile, is refused with 422.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, free_port
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from kafka_helpers import consume_all, create_topic, wait_until
from service_process import ServiceProcess
from tls_certs import make_ca

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}],
}
AVRO_V2 = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"
PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"


class Service(ServiceProcess):
    """A ``strom <command>`` process; its banner line read."""

    def __init__(self, command: str, broker: BrokerProcess, listener: str, *extra: str) -> None:
        super().__init__(
            [command, "--bootstrap-server", broker.bootstrap, "--listener", listener, *extra]
        )
        self.url = listener


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pki")
    ca = make_ca(folder)
    server = ca.issue("registry", "/CN=registry")
    users = folder / "users.properties"
    users.write_text(
        "# name: password, roles\n"
        "alice: secret,admin\n"
        "carol: MD5:5ebe2294ecd0e0f08eab7690d2a6ee69,admin\n"  # md5("secret")
        "bob: pw,reader\n"
    )
    config = folder / "registry.properties"
    config.write_text(
        f"ssl.keystore.location={server.bundle}\n"
        f"ssl.truststore.location={ca.cert}\n"
        "authentication.method=BASIC\n"
        "authentication.realm=SchemaRegistry\n"
        "authentication.roles=admin\n"
        f"authentication.users.file={users}\n"
    )
    return {"ca": ca.cert, "config": config, "folder": folder}


@pytest.fixture(scope="module")
def registries(broker: BrokerProcess, pki: dict[str, Path]) -> Iterator[list[Service]]:
    started: list[Service] = []
    try:
        for _ in range(2):
            listener = f"https://127.0.0.1:{free_port()}"
            started.append(
                Service("schema-registry", broker, listener, "--config", str(pki["config"]))
            )
        yield started
    finally:
        for service in started:
            service.stop()


def call(
    url: str, ca: Path | None, user: str | None, method: str = "GET", body: Any = None,
    content_type: str = "application/vnd.schemaregistry.v1+json",
) -> tuple[int, dict[str, str], Any]:  # fmt: skip
    headers = {"Content-Type": content_type}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(user.encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as response:
            return response.status, dict(response.headers), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


def test_registries_over_tls_with_basic_auth(
    registries: list[Service], pki: dict[str, Path]
) -> None:
    first, second = registries
    assert first.banner.startswith(f"Strom schema registry on {first.url}/"), first.banner
    subject = f"orders-{uuid.uuid4().hex[:6]}-value"
    client = SchemaRegistryClient(
        {
            "url": first.url,
            "basic.auth.user.info": "alice:secret",
            "ssl.ca.location": str(pki["ca"]),
        }
    )
    schema_id = client.register_schema(subject, Schema(json.dumps(ORDER), "AVRO"))
    # Both instances answer it (the secondary once it has read the primary's record from
    # _schemas); a change sent to each (one forwards it to the primary over TLS with the
    # caller's credentials) gets one id per schema.
    for service in registries:
        url = f"{service.url}/schemas/ids/{schema_id}"
        wait_until(
            lambda url=url: call(url, pki["ca"], "carol:secret")[0] != 404, 30, f"{url} found"
        )
        status, _, body = call(url, pki["ca"], "carol:secret")
        assert status == 200 and json.loads(body["schema"])["name"] == "Order", body
    ids = set()
    for i, service in enumerate(registries):
        evolved = dict(
            ORDER, fields=[*ORDER["fields"], {"name": f"f{i}", "type": "int", "default": 0}]
        )
        status, _, body = call(
            f"{service.url}/subjects/{subject}/versions", pki["ca"], "alice:secret", "POST",
            {"schema": json.dumps(evolved)},
        )  # fmt: skip
        assert status == 200, body
        ids.add(body["id"])
    assert len(ids) == 2 and schema_id not in ids
    status, _, versions = call(
        f"{second.url}/subjects/{subject}/versions", pki["ca"], "alice:secret"
    )
    assert versions == [1, 2, 3]

    status, headers, body = call(f"{first.url}/subjects", pki["ca"], None)
    assert status == 401 and body["error_code"] == 401
    assert headers["WWW-Authenticate"] == 'Basic realm="SchemaRegistry"'
    assert call(f"{first.url}/subjects", pki["ca"], "alice:wrong")[0] == 401
    assert call(f"{first.url}/subjects", pki["ca"], "carol:wrong")[0] == 401
    status, _, body = call(f"{first.url}/subjects", pki["ca"], "bob:pw")
    assert status == 403 and body == {"error_code": 403, "message": "Forbidden"}
    with pytest.raises(Exception, match="Unauthorized|401"):
        SchemaRegistryClient({"url": first.url, "ssl.ca.location": str(pki["ca"])}).get_subjects()
    plain = first.url.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain + "/subjects", timeout=10).read()


def test_rest_proxy_produces_avro_through_a_secured_registry(
    broker: BrokerProcess, registries: list[Service], pki: dict[str, Path]
) -> None:
    folder = pki["folder"]
    proxy_config = folder / "proxy.properties"
    proxy_config.write_text(
        "schema.registry.basic.auth.user.info=alice:secret\n"
        f"schema.registry.ssl.ca.location={pki['ca']}\n"
    )
    topic = f"avro-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1)
    proxy = Service(
        "rest-proxy", broker, f"http://127.0.0.1:{free_port()}",
        "--schema-registry-url", registries[0].url, "--config", str(proxy_config),
    )  # fmt: skip
    try:
        records = [{"value": {"id": f"o{i}", "qty": i}} for i in range(10)]
        status, _, body = call(
            f"{proxy.url}/topics/{topic}", None, None, "POST",
            {"value_schema": json.dumps(ORDER), "records": records}, AVRO_V2,
        )  # fmt: skip
        assert status == 200, body
        assert [o["offset"] for o in body["offsets"]] == list(range(10))
        schema_id = body["value_schema_id"]
        assert isinstance(schema_id, int)

        # confluent-kafka's AvroDeserializer reads what the proxy wrote.
        registry = SchemaRegistryClient(
            {"url": registries[0].url, "basic.auth.user.info": "alice:secret",
             "ssl.ca.location": str(pki["ca"])}
        )  # fmt: skip
        deserialize = AvroDeserializer(registry)
        context = SerializationContext(topic, MessageField.VALUE)
        raw = [m.value() for m in consume_all(broker.bootstrap, topic, 10)]
        assert all(int.from_bytes(v[1:5], "big") == schema_id for v in raw)
        assert [deserialize(v, context) for v in raw] == [r["value"] for r in records]

        # An Avro consumer instance of the proxy reads them back as JSON.
        got = read_through_instance(proxy.url, "avro", topic, 10)
        assert [r["value"] for r in got] == [r["value"] for r in records]

        # JSON Schema records: validated, written in the wire format, read back.
        json_topic = f"js-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, json_topic, 1)
        order_schema = {
            "type": "object",
            "properties": {"id": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["id", "qty"],
        }
        body_in = {"value_schema": json.dumps(order_schema), "records": records}
        status, _, body = call(
            f"{proxy.url}/topics/{json_topic}", None, None, "POST", body_in, JSONSCHEMA_V2
        )
        assert status == 200 and isinstance(body["value_schema_id"], int), body
        bad = {"value_schema": json.dumps(order_schema), "records": [{"value": {"id": 1}}]}
        status, _, body = call(
            f"{proxy.url}/topics/{json_topic}", None, None, "POST", bad, JSONSCHEMA_V2
        )
        assert status == 422 and body["error_code"] == 42203, body
        got = read_through_instance(proxy.url, "jsonschema", json_topic, 10)
        assert [r["value"] for r in got] == [r["value"] for r in records]

        # Protobuf records: a .proto schema, then its id; the bytes are Confluent's wire
        # format (checked here with a class built from a descriptor, not by the proxy).
        proto_topic = f"pb-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, proto_topic, 1)
        order_proto = (
            'syntax = "proto3"; package shop; message Order { string id = 1; int32 qty = 2; }'
        )
        status, _, body = call(
            f"{proxy.url}/topics/{proto_topic}", None, None, "POST",
            {"value_schema": order_proto, "records": records[:5]}, PROTOBUF_V2,
        )  # fmt: skip
        assert status == 200, body
        proto_id = body["value_schema_id"]
        status, _, body = call(
            f"{proxy.url}/topics/{proto_topic}", None, None, "POST",
            {"value_schema_id": proto_id, "records": records[5:]}, PROTOBUF_V2,
        )  # fmt: skip
        assert status == 200 and body["value_schema_id"] == proto_id, body
        order_class = message_class_of(
            "Order", [("id", 1, "TYPE_STRING"), ("qty", 2, "TYPE_INT32")]
        )
        raw = [m.value() for m in consume_all(broker.bootstrap, proto_topic, 10)]
        assert all(v[:6] == b"\x00" + proto_id.to_bytes(4, "big") + b"\x00" for v in raw)
        decoded = [order_class.FromString(v[6:]) for v in raw]
        assert [(m.id, m.qty) for m in decoded] == [(f"o{i}", i) for i in range(10)]
        got = read_through_instance(proxy.url, "protobuf", proto_topic, 10)
        assert [r["value"] for r in got] == [r["value"] for r in records]
        status, _, body = call(
            f"{proxy.url}/topics/{proto_topic}", None, None, "POST",
            {"value_schema": "message {", "records": records[:1]}, PROTOBUF_V2,
        )  # fmt: skip
        assert status == 422 and "Expected message name" in body["message"], body
    finally:
        proxy.stop()


def message_class_of(name: str, fields: list[tuple[str, int, str]]) -> Any:
    file = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    message = file.message_type.add(name=name)
    for field_name, number, kind in fields:
        message.field.add(
            name=field_name,
            number=number,
            type=descriptor_pb2.FieldDescriptorProto.Type.Value(kind),
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))


def read_through_instance(proxy_url: str, form: str, topic: str, count: int) -> list[Any]:
    """``count`` records of ``topic`` read through a new v2 consumer instance of format
    ``form``, assigned partition 0; each answer has that format's content type."""
    v2 = "application/vnd.kafka.v2+json"
    content_type = f"application/vnd.kafka.{form}.v2+json"
    group = f"{form}-{uuid.uuid4().hex[:6]}"
    status, _, _ = call(
        f"{proxy_url}/consumers/{group}", None, None, "POST",
        {"name": "c", "format": form, "auto.offset.reset": "earliest"}, v2,
    )  # fmt: skip
    assert status == 200
    base = f"{proxy_url}/consumers/{group}/instances/c"
    assigned = {"partitions": [{"topic": topic, "partition": 0}]}
    assert call(base + "/assignments", None, None, "POST", assigned, v2)[0] == 204
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        status, headers, batch = call(base + "/records?timeout=1000", None, None,
                                      content_type=content_type)  # fmt: skip
        assert status == 200, batch
        assert headers["Content-Type"].startswith(content_type)
        got += batch
    return got


@pytest.mark.parametrize(
    ("listener", "lines", "expected"),
    [
        ("https://127.0.0.1:0", [], "ssl.keystore.location"),
        ("http://127.0.0.1:0", ["authentication.method=BASIC"], "authentication.users.file"),
        ("http://127.0.0.1:0", ["authentication.method=DIGEST"], "is not NONE or BASIC"),
        ("http://127.0.0.1:0", ["listeners=http://x:1"], "unknown setting listeners"),
        ("http://127.0.0.1:0", ["ssl.keystore.location=/x"], "need an https:// listener"),
        ("ftp://127.0.0.1:1", [], "is not http://HOST:PORT or https://HOST:PORT"),
        ("http://127.0.0.1:0", ["authentication.method=BASIC", "authentication.users.file=/nope"],
         "cannot read /nope"),
    ],
)  # fmt: skip
def test_bad_service_settings_are_one_line(
    broker: BrokerProcess, tmp_path: Path, listener: str, lines: list[str], expected: str
) -> None:
    config = tmp_path / "service.properties"
    config.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "schema-registry", "--bootstrap-server",
         broker.bootstrap, "--listener", listener, "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    problem = done.stderr.strip().splitlines()[-1]
    assert expected in problem, done.stderr
