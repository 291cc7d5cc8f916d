"""The schema registry (``strom schema-registry``) against a real broker, driven by
confluent-kafka's own SchemaRegistryClient and its Avro, JSON Schema and Protobuf
serialisers, and by plain HTTP for Confluent's REST answers.

Records round-trip through Strom in each format; an incompatible schema is refused with
409; a registry restarted reads every schema and id back from ``_schemas``; a second
registry on the same cluster agrees with the first, and registrations sent to both at
once get distinct ids (the secondary forwards to the elected primary, and a change
forwarded to an instance that is not the primary is refused there); two writers that
plan from the same state at once never give one id to two schemas (the log decides, the
loser plans again); bad input gets Confluent's error answers, never a 500.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from service_process import ServiceProcess

from strom.services.schema_registry.app import FORWARDED, NOT_PRIMARY
from strom.services.schema_registry.log import SchemasLog
from strom.services.schema_registry.schemas import AVRO, parse

ORDER_AVRO = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}],
}


class Registry(ServiceProcess):
    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(
            ["schema-registry", "--bootstrap-server", broker.bootstrap,
             "--listener", "http://127.0.0.1:0"]
        )  # fmt: skip
        assert self.banner.startswith("Strom schema registry on"), self.banner
        self.port = int(self.url.rsplit(":", 1)[1])

    def client(self) -> SchemaRegistryClient:
        return SchemaRegistryClient({"url": self.url})

    def http(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json", **(headers or {})},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[Registry]:
    process = Registry(broker)
    yield process
    if process.proc.poll() is None:
        process.stop()


def round_trip(
    broker: BrokerProcess, topic: str, serialize: Any, deserialize: Any, values: list
) -> list:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, serialize(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    consumer.subscribe([topic])
    out: list = []
    deadline = time.monotonic() + 30
    while len(out) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            out.append(
                deserialize(message.value(), SerializationContext(topic, MessageField.VALUE))
            )
    consumer.close()
    return out


def test_avro_round_trip(registry: Registry, broker: BrokerProcess) -> None:
    topic = f"avro-{uuid.uuid4().hex[:6]}"
    client = registry.client()
    serializer = AvroSerializer(client, json.dumps(ORDER_AVRO))
    deserializer = AvroDeserializer(client)
    values = [{"id": f"o{i}", "qty": i} for i in range(5)]
    assert round_trip(broker, topic, serializer, deserializer, values) == values
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.version == 1 and json.loads(latest.schema.schema_str)["name"] == "Order"


def test_json_schema_round_trip(registry: Registry, broker: BrokerProcess) -> None:
    topic = f"json-{uuid.uuid4().hex[:6]}"
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {"id": {"type": "string"}, "qty": {"type": "integer"}},
        "required": ["id"],
    }
    client = registry.client()
    serializer = JSONSerializer(json.dumps(schema), client)
    deserializer = JSONDeserializer(None, schema_registry_client=client)
    values = [{"id": f"j{i}", "qty": i} for i in range(5)]
    assert round_trip(broker, topic, serializer, deserializer, values) == values


def order_message_class() -> Any:
    proto = descriptor_pb2.FileDescriptorProto(
        name="order_test.proto", package="shop", syntax="proto3"
    )
    message = proto.message_type.add(name="Order")
    message.field.add(
        name="id",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    message.field.add(name="qty", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_round_trip(registry: Registry, broker: BrokerProcess) -> None:
    topic = f"proto-{uuid.uuid4().hex[:6]}"
    order = order_message_class()
    client = registry.client()
    serializer = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(order, {"use.deprecated.format": False})
    values = [order(id=f"p{i}", qty=i) for i in range(5)]
    assert round_trip(broker, topic, serializer, deserializer, values) == values


def test_an_incompatible_schema_is_refused_with_409(registry: Registry) -> None:
    client = registry.client()
    subject = f"orders-{uuid.uuid4().hex[:6]}-value"
    client.register_schema(subject, Schema(json.dumps(ORDER_AVRO), "AVRO"))
    added = dict(ORDER_AVRO, fields=[*ORDER_AVRO["fields"], {"name": "note", "type": "string"}])
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(added), "AVRO"))  # no default: BACKWARD
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    defaulted = dict(
        ORDER_AVRO,
        fields=[*ORDER_AVRO["fields"], {"name": "note", "type": "string", "default": ""}],
    )
    assert client.test_compatibility(subject, Schema(json.dumps(defaulted), "AVRO"))
    second = client.register_schema(subject, Schema(json.dumps(defaulted), "AVRO"))
    assert client.get_versions(subject) == [1, 2]
    assert client.register_schema(subject, Schema(json.dumps(defaulted), "AVRO")) == second
    status, body = registry.http("PUT", f"/config/{subject}", {"compatibility": "NONE"})
    assert (status, body) == (200, {"compatibility": "NONE"})
    client.register_schema(subject, Schema(json.dumps(added), "AVRO"))
    assert client.get_versions(subject) == [1, 2, 3]


def test_bad_input_gets_confluents_errors(registry: Registry) -> None:
    cases = [
        ("POST", "/subjects/x/versions", b"{not json", 400, 400),
        ("POST", "/subjects/x/versions", {"schema": '{"type": "nonsense"}'}, 422, 42201),
        ("POST", "/subjects/x/versions", {"schema": "{}", "schemaType": "XML"}, 422, 42201),
        ("GET", "/subjects/no-such-subject/versions", None, 404, 40401),
        ("GET", "/schemas/ids/999999", None, 404, 40403),
        ("PUT", "/config", {"compatibility": "SOMETIMES"}, 422, 42203),
        ("GET", "/no/such/route", None, 404, 404),
        (
            "POST",
            "/subjects/x/versions",
            b'{"schema": "' + b"a" * (17 * 1024 * 1024) + b'"}',
            413,
            413,
        ),
    ]
    for method, path, body, status, code in cases:
        got_status, got = registry.http(method, path, body)
        assert (got_status, got["error_code"]) == (status, code), (path, got)
        assert got["message"]
    subject = f"versions-{uuid.uuid4().hex[:6]}"
    registry.client().register_schema(subject, Schema(json.dumps(ORDER_AVRO), "AVRO"))
    assert registry.http("GET", f"/subjects/{subject}/versions/7")[1]["error_code"] == 40402
    assert registry.http("GET", f"/subjects/{subject}/versions/x")[1]["error_code"] == 42202
    assert registry.proc.poll() is None


def test_normalize_stores_one_text_for_one_schema(registry: Registry) -> None:
    subject = f"norm-{uuid.uuid4().hex[:6]}"
    unique = dict(ORDER_AVRO, name=f"Order{uuid.uuid4().hex[:6]}")  # never registered before
    spaced = json.dumps(unique, indent=4)
    status, body = registry.http(
        "POST", f"/subjects/{subject}/versions?normalize=true", {"schema": spaced}
    )
    assert status == 200, body
    stored = registry.http("GET", f"/schemas/ids/{body['id']}")[1]["schema"]
    assert stored != spaced and " " not in stored and json.loads(stored) == unique
    # Without normalize the text is kept as sent.
    plain = f"plain-{uuid.uuid4().hex[:6]}"
    other = dict(ORDER_AVRO, name=f"Plain{uuid.uuid4().hex[:6]}")
    status, body = registry.http(
        "POST", f"/subjects/{plain}/versions", {"schema": json.dumps(other, indent=2)}
    )
    assert registry.http("GET", f"/schemas/ids/{body['id']}")[1]["schema"] == json.dumps(
        other, indent=2
    )
    # A subject's config can ask for it; a JSON Schema is then stored with sorted keys.
    json_subject = f"norm-json-{uuid.uuid4().hex[:6]}"
    assert registry.http("PUT", f"/config/{json_subject}", {"normalize": True}) == (
        200,
        {"compatibility": "BACKWARD", "normalize": True},
    )
    assert registry.http("GET", f"/config/{json_subject}")[1] == {
        "compatibilityLevel": "BACKWARD",
        "normalize": True,
    }
    document = (
        '{"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}},'
        f' "title": "{uuid.uuid4().hex}"}}'
    )
    status, body = registry.http(
        "POST", f"/subjects/{json_subject}/versions", {"schema": document, "schemaType": "JSON"}
    )
    assert status == 200, body
    assert registry.http("GET", f"/schemas/ids/{body['id']}")[1]["schema"] == json.dumps(
        json.loads(document), sort_keys=True, separators=(",", ":")
    )
    assert registry.http("PUT", "/config/x", {"normalize": "yes"})[1]["error_code"] == 42203


def test_contexts_keep_their_own_ids(registry: Registry) -> None:
    client = registry.client()
    context = f".team{uuid.uuid4().hex[:6]}"
    plain = client.register_schema(
        f"ctx-{uuid.uuid4().hex[:6]}", Schema(json.dumps(dict(ORDER_AVRO, name="Plain")), "AVRO")
    )
    qualified = f":{context}:orders-value"
    staged = client.register_schema(qualified, Schema(json.dumps(ORDER_AVRO), "AVRO"))
    assert staged == 1 and plain > 1  # a new context counts from 1
    assert context in registry.http("GET", "/contexts")[1]
    assert qualified in registry.http("GET", "/subjects")[1]
    status, body = registry.http("GET", f"/schemas/ids/1?subject={qualified}")
    assert status == 200 and json.loads(body["schema"]) == ORDER_AVRO
    assert registry.http("GET", f"/schemas/ids/1/subjects?subject={qualified}")[1] == [qualified]
    assert registry.http("GET", f"/subjects/{qualified}/versions/1")[1]["id"] == 1


def test_deletes_soft_and_permanent(registry: Registry) -> None:
    subject = f"gone-{uuid.uuid4().hex[:6]}"
    client = registry.client()
    schema_id = client.register_schema(subject, Schema(json.dumps(ORDER_AVRO), "AVRO"))
    assert client.delete_subject(subject) == [1]
    assert subject not in client.get_subjects()
    assert registry.http("GET", "/subjects?deleted=true")[1].count(subject) == 1
    assert client.delete_subject(subject, permanent=True) == [1]
    assert registry.http("GET", "/subjects?deleted=true")[1].count(subject) == 0
    # The id is never reused: a new schema gets a higher one.
    other = dict(ORDER_AVRO, name="Other")
    assert client.register_schema(f"{subject}-2", Schema(json.dumps(other), "AVRO")) > schema_id


def test_a_restarted_registry_and_a_second_one_keep_every_schema(
    registry: Registry, broker: BrokerProcess
) -> None:
    subject = f"kept-{uuid.uuid4().hex[:6]}"
    first = registry.client().register_schema(subject, Schema(json.dumps(ORDER_AVRO), "AVRO"))
    second = Registry(broker)
    try:
        assert second.client().get_latest_version(subject).schema_id == first
        # A registration through the second is read by the first.
        other = dict(ORDER_AVRO, fields=[*ORDER_AVRO["fields"],
                                         {"name": "x", "type": "int", "default": 0}])  # fmt: skip
        via_second = second.client().register_schema(subject, Schema(json.dumps(other), "AVRO"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status, body = registry.http("GET", f"/schemas/ids/{via_second}")
            if status == 200:
                break
            time.sleep(0.2)
        assert status == 200 and json.loads(body["schema"])["fields"][-1]["name"] == "x"

        # Both take registrations at once: one primary hands out every id, none twice.
        def register(pair: tuple[Registry, int]) -> tuple[str, int]:
            instance, n = pair
            name = f"{subject}-many-{n}"
            schema = dict(ORDER_AVRO, name=f"Order{n}")
            return name, instance.client().register_schema(name, Schema(json.dumps(schema), "AVRO"))

        with ThreadPoolExecutor(8) as pool:
            ids = dict(pool.map(register, [(registry if n % 2 else second, n) for n in range(16)]))
        assert len(set(ids.values())) == 16
        for name, schema_id in ids.items():
            assert second.client().get_latest_version(name).schema_id == schema_id
            assert registry.client().get_latest_version(name).schema_id == schema_id

        # A change forwarded to the instance that is not the primary is refused there,
        # not made: the instance that forwarded it asks the group again.
        level = {"compatibility": "BACKWARD"}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            answers = sorted(
                (instance.http("PUT", f"/config/{subject}", level, {FORWARDED: "1"})
                 for instance in (registry, second)),
                key=lambda answer: answer[0],
            )  # fmt: skip
            if [status for status, _ in answers] == [200, 500]:
                break
            time.sleep(0.2)  # the group is still choosing its primary
        assert answers[0][1] == level and answers[1][1]["error_code"] == NOT_PRIMARY
    finally:
        second.stop()
    registry.stop()
    restarted = Registry(broker)
    try:
        client = restarted.client()
        assert client.get_versions(subject) == [1, 2]
        assert client.get_schema(first).schema_str == json.dumps(ORDER_AVRO)
    finally:
        restarted.stop()


def test_two_writers_at_once_never_give_one_id_to_two_schemas(broker: BrokerProcess) -> None:
    """Two registries' logs writing at once, as two primaries would while the election
    hands over, each planning every change from the same state before either writes:
    the record read second loses its claim for every reader and its writer plans again,
    so each id names one schema, both writers and a new reader agree on every subject,
    version and id, and each answer is what they hold."""
    topic = f"_schemas-{uuid.uuid4().hex[:8]}"
    settings = {"bootstrap.servers": broker.bootstrap}
    writers = [SchemasLog(settings, topic), SchemasLog(settings, topic)]
    rounds = 3

    def register(writer: SchemasLog, subject: str, planned_together: threading.Barrier) -> int:
        parsed = parse(AVRO, json.dumps(dict(ORDER_AVRO, name=subject.replace("-", "_"))))
        plans = 0

        def plan() -> Any:
            nonlocal plans
            plans += 1
            planned = writer.state.plan_register(subject, parsed)
            if plans == 1:
                planned_together.wait(10)  # both planned before either writes
            return planned

        return writer.change(plan)

    try:
        answers: dict[str, int] = {}
        with ThreadPoolExecutor(2) as pool:
            for n in range(rounds):
                for writer in writers:
                    writer.catch_up()  # the same state on both
                together = threading.Barrier(2)
                subjects = [f"w{w}-r{n}" for w in range(2)]
                registered = [
                    pool.submit(register, writer, subject, together)
                    for writer, subject in zip(writers, subjects, strict=True)
                ]
                answers.update(zip(subjects, (f.result(30) for f in registered), strict=True))
        assert len(set(answers.values())) == 2 * rounds
        assert writers[0].end_offset() >= 3 * rounds  # each round, one writer wrote again

        reader = SchemasLog(settings, topic)
        writers.append(reader)
        views = []
        for log in writers:
            log.catch_up()
            with log.lock:
                views.append(
                    {s: {v: (e.schema_id, json.loads(log.state.stored(s, e.schema_id).text)["name"])
                         for v, e in vs.items()} for s, vs in log.state.subjects.items()}
                )  # fmt: skip
        assert views[0] == views[1] == views[2]
        assert views[0] == {s: {1: (i, s.replace("-", "_"))} for s, i in answers.items()}
    finally:
        for log in writers:
            log.close()
