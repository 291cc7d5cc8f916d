"""Connect's schema registry converters and source settings on a real broker, registry and
worker: Confluent's ProtobufConverter and JsonSchemaConverter round trip Connect data, write
what confluent-kafka's Protobuf and JSON Schema deserializers read and read what its
serializers write; a worker writes a FileStream source with each. One broker, one registry
and one distributed worker serve the whole module."""

from __future__ import annotations

import base64
import json
import threading
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.confluent.type import decimal_pb2
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pool, message_factory
from google.type import date_pb2
from service_process import ServiceProcess
from test_connect import Worker, wait_for

from strom.connect.api import SourceRecord, SourceTask
from strom.connect.data import (
    BOOLEAN,
    BYTES,
    DATE,
    DECIMAL,
    FLOAT64,
    INT8,
    INT32,
    INT64,
    STRING,
    TIMESTAMP,
    DataException,
    Schema,
    Struct,
)
from strom.connect.json_schema_converter import JsonSchemaConverter
from strom.connect.plugins import Plugins
from strom.connect.protobuf_converter import ProtobufConverter, known_pool
from strom.connect.runtime import InWorkerRunner, TaskSpec
from strom.connect.stores import STARTED, FileOffsetStore
from strom.connect.worker_config import DISTRIBUTED, WorkerConfig
from strom.services.protobuf_schemas import compile_proto

ADDRESS = Schema.struct([("city", Schema(STRING)), ("zip", Schema(STRING, optional=True))])
ORDER = Schema.struct(
    [
        ("tiny", Schema(INT8)),
        ("count", Schema(INT32)),
        ("id", Schema(INT64)),
        ("price", Schema(FLOAT64)),
        ("paid", Schema(BOOLEAN)),
        ("note", Schema(STRING, optional=True)),
        ("blob", Schema(BYTES)),
        ("tags", Schema.array(Schema(INT32))),
        ("labels", Schema.map(Schema(STRING), Schema(INT64))),
        ("address", ADDRESS),
        ("amount", Schema(BYTES, name=DECIMAL, version=1, parameters={"scale": "2"})),
        ("day", Schema(INT32, name=DATE, version=1)),
        ("at", Schema(INT64, name=TIMESTAMP, version=1)),
    ],
    name="shop.Order",
)
# The message Confluent's ProtobufData makes of ORDER, written by hand.
ORDER_PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/type/date.proto";
import "confluent/type/decimal.proto";
message Order {
  int32 tiny = 1;
  int32 count = 2;
  int64 id = 3;
  double price = 4;
  bool paid = 5;
  string note = 6;
  bytes blob = 7;
  repeated int32 tags = 8;
  repeated ConnectDefault1Entry labels = 9;
  ConnectDefault2 address = 10;
  confluent.type.Decimal amount = 11;
  google.type.Date day = 12;
  google.protobuf.Timestamp at = 13;
  message ConnectDefault1Entry { string key = 1; int64 value = 2; }
  message ConnectDefault2 { string city = 1; string zip = 2; }
}
"""


def order_value() -> Struct:
    return Struct(
        ORDER,
        {
            "tiny": -3,
            "count": 70000,
            "id": 2**40,
            "price": 9.75,
            "paid": True,
            "note": None,
            "blob": b"\x00\xff",
            "tags": [1, 2],
            "labels": {"a": 1},
            "address": Struct(ADDRESS, {"city": "Oslo", "zip": None}),
            "amount": Decimal("12.34"),
            "day": 19000,
            "at": 1_700_000_000_123,
        },
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data")
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[str]:
    process = ServiceProcess(
        ["schema-registry", "--bootstrap-server", broker.bootstrap,
         "--listener", "http://127.0.0.1:0"]
    )  # fmt: skip
    yield process.url
    process.stop()


def protobuf(registry: str, **settings: str) -> ProtobufConverter:
    made = ProtobufConverter()
    made.configure({"schema.registry.url": registry, **settings}, is_key=False)
    return made


def json_schema(registry: str, **settings: str) -> JsonSchemaConverter:
    made = JsonSchemaConverter()
    made.configure({"schema.registry.url": registry, **settings}, is_key=False)
    return made


def latest(registry: str, subject: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{registry}/subjects/{subject}/versions/latest") as answer:
        found: dict[str, Any] = json.loads(answer.read())
    return found


def value_context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def order_class() -> Any:
    """The hand-written Order message's class, compiled by protoc."""
    imports = {
        module.DESCRIPTOR.name: base64.b64encode(module.DESCRIPTOR.serialized_pb).decode()
        for module in (date_pb2, decimal_pb2)
    }
    files = compile_proto(ORDER_PROTO, imports)
    pool = known_pool()
    main = files.file[-1]
    pool.Add(main)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


# Protobuf -------------------------------------------------------------------------------------


def test_protobuf_round_trips_and_confluent_kafka_reads_it(registry: str) -> None:
    written = protobuf(registry).from_connect_data("pb-orders", ORDER, order_value())
    assert written is not None and written[:1] == b"\x00" and written[5:6] == b"\x00"
    registered = latest(registry, "pb-orders-value")
    assert registered["schemaType"] == "PROTOBUF"
    assert int.from_bytes(written[1:5], "big") == registered["id"]

    schema, value = protobuf(registry).to_connect_data("pb-orders", written)  # a cold cache
    assert schema is not None and schema.name == "Order"
    fields = {f.name: f.schema for f in schema.fields}
    assert [f.name for f in schema.fields] == [f.name for f in ORDER.fields]
    assert all(s.optional for s in fields.values())  # proto3: every field optional
    assert fields["tiny"].type == INT8  # connect.type kept in confluent.field_meta
    assert fields["id"].parameters == {"io.confluent.connect.protobuf.Tag": "3"}
    assert fields["amount"].name == DECIMAL and fields["amount"].parameters["scale"] == "2"
    assert fields["labels"].key_schema.type == STRING  # type: ignore[union-attr]
    expected = dict(order_value().values, note="")  # an unset proto3 string reads ""
    got = dict(value.values)
    assert got.pop("address").values == {"city": "Oslo", "zip": ""}
    assert got == {k: v for k, v in expected.items() if k != "address"}

    message_class = order_class()
    read = ProtobufDeserializer(
        message_class, {"use.deprecated.format": False}, SchemaRegistryClient({"url": registry})
    )(written, value_context("pb-orders"))
    assert (read.tiny, read.count, read.id, read.paid) == (-3, 70000, 2**40, True)
    assert read.address.city == "Oslo" and list(read.tags) == [1, 2]
    assert [(e.key, e.value) for e in read.labels] == [("a", 1)]
    assert (read.day.year, read.day.month, read.day.day) == (2022, 1, 8)
    assert read.at.seconds == 1_700_000_000 and read.at.nanos == 123_000_000
    assert int.from_bytes(read.amount.value, "big", signed=True) == 1234 and read.amount.scale == 2


def test_protobuf_reads_what_confluent_kafka_writes(registry: str) -> None:
    message_class = order_class()
    message = message_class(tiny=1, id=5, note="hi", tags=[3])
    message.address.city = "Rome"
    message.labels.add(key="k", value=9)
    message.at.seconds = 10
    serialize = ProtobufSerializer(
        message_class, SchemaRegistryClient({"url": registry}), {"use.deprecated.format": False}
    )
    data = serialize(message, value_context("pb-clicks"))
    schema, value = protobuf(registry).to_connect_data("pb-clicks", data)
    assert schema is not None and schema.name == "Order"
    assert value.values["id"] == 5 and value.values["note"] == "hi" and value.values["tags"] == [3]
    assert value.values["labels"] == {"k": 9} and value.values["at"] == 10_000
    assert value.values["address"].values["city"] == "Rome"
    assert value.get("amount") is None and value.get("day") is None  # unset messages

    primitive = protobuf(registry).from_connect_data("pb-words", Schema(STRING), "hello")
    assert protobuf(registry).to_connect_data("pb-words", primitive) == (Schema(STRING), "hello")


def test_protobuf_bad_input_is_one_clear_error(registry: str) -> None:
    with pytest.raises(DataException, match="Unknown magic byte"):
        protobuf(registry).to_connect_data("pb-orders", b"{not protobuf}")
    with pytest.raises(DataException, match="needs a schema"):
        protobuf(registry).from_connect_data("pb-orders", None, {"a": 1})
    with pytest.raises(DataException, match="Unsupported root schema of type ARRAY"):
        protobuf(registry).from_connect_data("pb-x", Schema.array(Schema(INT32)), [1])
    bad = Struct(ORDER, dict(order_value().values, count="many"))
    with pytest.raises(DataException, match="Invalid type for INT32: str"):
        protobuf(registry).from_connect_data("pb-orders", ORDER, bad)


# JSON Schema ----------------------------------------------------------------------------------


def test_json_schema_round_trips_and_confluent_kafka_reads_it(registry: str) -> None:
    written = json_schema(registry).from_connect_data("js-orders", ORDER, order_value())
    assert written is not None and written[:1] == b"\x00"
    registered = latest(registry, "js-orders-value")
    assert registered["schemaType"] == "JSON"
    document = json.loads(registered["schema"])
    assert document["title"] == "shop.Order" and document["type"] == "object"
    assert document["properties"]["tiny"] == {
        "type": "integer",
        "connect.type": "int8",
        "connect.index": 0,
    }
    assert document["properties"]["note"] == {
        "oneOf": [{"type": "null"}, {"type": "string"}],
        "connect.index": 5,
    }

    schema, value = json_schema(registry).to_connect_data("js-orders", written)
    assert schema == ORDER
    assert value == order_value()

    read = JSONDeserializer(None, schema_registry_client=SchemaRegistryClient({"url": registry}))(
        written, value_context("js-orders")
    )
    assert read["id"] == 2**40 and read["note"] is None and read["blob"] == "AP8="
    assert read["address"] == {"city": "Oslo", "zip": None} and read["amount"] == "BNI="


def test_json_schema_reads_what_confluent_kafka_writes(registry: str) -> None:
    plain = {
        "type": "object",
        "title": "Click",
        "properties": {
            "user": {"type": "string"},
            "ms": {"type": "integer"},
            "score": {"type": "number"},
            "ref": {"oneOf": [{"type": "null"}, {"type": "string"}]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["user"],
    }
    serialize = JSONSerializer(json.dumps(plain), SchemaRegistryClient({"url": registry}))
    data = serialize(
        {"user": "ann", "ms": 5, "score": 0.5, "ref": None, "tags": ["x"]},
        value_context("js-clicks"),
    )
    schema, value = json_schema(registry).to_connect_data("js-clicks", data)
    assert schema is not None and schema.name == "Click"
    assert [(f.name, f.schema.type, f.schema.optional) for f in schema.fields] == [
        ("user", STRING, False),
        ("ms", INT64, False),
        ("score", FLOAT64, False),
        ("ref", STRING, True),
        ("tags", "array", False),
    ]
    assert value.values == {"user": "ann", "ms": 5, "score": 0.5, "ref": None, "tags": ["x"]}


def test_json_schema_checks_values_when_asked_and_refuses_bad_bytes(registry: str) -> None:
    closed = json_schema(
        registry,
        **{"json.fail.invalid.schema": "true", "auto.register.schemas": "false"},
    )
    json_schema(registry).from_connect_data("js-checked", ADDRESS, Struct(ADDRESS, {"city": "A"}))
    other = Schema.struct([("city", Schema(INT32))])
    with pytest.raises(DataException, match="not valid for its schema"):
        closed.from_connect_data("js-checked", other, Struct(other, {"city": 5}))
    with pytest.raises(DataException, match="Unknown magic byte"):
        json_schema(registry).to_connect_data("js-orders", b"{}")


# A worker writing with them -------------------------------------------------------------------


def test_a_worker_writes_a_file_source_with_each_converter(
    broker: BrokerProcess, registry: str, tmp_path: Path
) -> None:
    source_file = tmp_path / "in.txt"
    source_file.write_text("first\nsecond\n")
    worker_file = tmp_path / "standalone.properties"
    worker_file.write_text(
        f"bootstrap.servers={broker.bootstrap}\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=io.confluent.connect.protobuf.ProtobufConverter\n"
        f"value.converter.schema.registry.url={registry}\n"
        f"offset.storage.file.filename={tmp_path / 'offsets'}\n"
        "offset.flush.interval.ms=200\nlisteners=http://127.0.0.1:0\n"
    )
    pb_source = tmp_path / "pb.properties"
    pb_source.write_text(
        f"name=pb-src\nconnector.class=FileStreamSource\nfile={source_file}\ntopic=pb-lines\n"
        "transforms=hoist\ntransforms.hoist.type=org.apache.kafka.connect.transforms.HoistField$Value\n"
        "transforms.hoist.field=line\n"
    )
    js_source = tmp_path / "js.properties"
    js_source.write_text(
        f"name=js-src\nconnector.class=FileStreamSource\nfile={source_file}\ntopic=js-lines\n"
        "value.converter=JsonSchemaConverter\n"
        f"value.converter.schema.registry.url={registry}\n"
    )
    process = Worker("standalone", worker_file, pb_source, js_source)
    client = SchemaRegistryClient({"url": registry})
    pool = descriptor_pool.DescriptorPool()
    pool.Add(
        compile_proto('syntax = "proto3"; message ConnectDefault1 { string line = 1; }').file[-1]
    )
    line_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("ConnectDefault1"))
    readers = {
        "pb-lines": ProtobufDeserializer(line_class, {"use.deprecated.format": False}, client),
        "js-lines": JSONDeserializer(None, schema_registry_client=client),
    }
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "conv-check",
            "auto.offset.reset": "earliest",
        }
    )
    lines: dict[str, list[Any]] = {topic: [] for topic in readers}
    try:
        # librdkafka looks again for a subscribed topic that does not exist yet only every
        # topic.metadata.refresh.interval.ms (5 min): subscribe once the worker made both.
        wait_for(
            lambda: set(readers) <= set(consumer.list_topics(timeout=5).topics),
            "the worker's two topics",
        )
        consumer.subscribe(list(readers))

        def all_four() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                topic = message.topic()
                lines[topic].append(readers[topic](message.value(), value_context(topic)))
            return sum(map(len, lines.values())) == 4

        wait_for(all_four, "both lines of both topics read back with confluent-kafka")
        assert [m.line for m in lines["pb-lines"]] == ["first", "second"]
        assert lines["js-lines"] == ["first", "second"]
    finally:
        consumer.close()
        process.stop()


# Transaction boundaries (KIP-618) -------------------------------------------------------------


class NumbersTask(SourceTask):
    """Polls the records "0", "1"... of its config's ``plan``: batches separated by ``|``,
    each number optionally followed by ``c`` (commit after it) or ``a`` (abort after it),
    a batch ending in ``!c`` / ``!a`` committing or aborting after the batch."""

    def start(self, props: dict[str, str]) -> None:
        self.topic = props["topic"]
        self.batches = props["plan"].split("|")
        self.idle = threading.Event()

    def poll(self) -> list[SourceRecord] | None:
        if not self.batches:
            self.idle.wait(0.05)
            return None
        batch, _, after_batch = self.batches.pop(0).partition("!")
        records = []
        transactions = self.context.transaction_context()
        for item in batch.split(","):
            number = item.rstrip("ca")
            record = SourceRecord(
                {"numbers": self.topic},
                {"n": int(number)},
                self.topic,
                0,
                key_schema=Schema(STRING),
                key=number,  # a compacted topic takes keyed records only
                value_schema=Schema(STRING),
                value=number,
            )
            records.append(record)
            if item.endswith("c") and transactions is not None:
                transactions.commit_transaction(record)
            elif item.endswith("a") and transactions is not None:
                transactions.abort_transaction(record)
        if after_batch == "c" and transactions is not None:
            transactions.commit_transaction()
        elif after_batch == "a" and transactions is not None:
            transactions.abort_transaction()
        return records

    def stop(self) -> None:
        self.idle.set()


@pytest.fixture(scope="module")
def eos_runner(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An exactly-once worker's task runner in this process, on the real broker."""
    config = WorkerConfig(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "eos-bounds",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": "eos-bounds-configs",
            "offset.storage.topic": "eos-bounds-offsets",
            "status.storage.topic": "eos-bounds-status",
            "exactly.once.source.support": "enabled",
        },
        DISTRIBUTED,
    )
    store = FileOffsetStore(str(tmp_path_factory.mktemp("eos") / "offsets"))
    runner = InWorkerRunner(config, Plugins.builtin(), store, lambda *state: None)
    yield runner
    runner.stop_all()


def run_numbers(runner: Any, name: str, plan: str, **settings: str) -> None:
    config = {"name": name, "connector.class": "FileStreamSource", "topic": name, **settings}
    task = {"topic": name, "plan": plan}
    runner.start(TaskSpec((name, 0), "source", NumbersTask, task, config), STARTED)


def committed(broker: BrokerProcess, topic: str, count: int) -> tuple[list[str], int]:
    """The first ``count`` values a read_committed reader sees and the partition's end
    offset once they are there (each transaction's marker takes an offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"{topic}-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    try:

        def all_read() -> bool:
            values.extend(
                m.value().decode() for m in consumer.consume(100, 0.2) if m.error() is None
            )
            return len(values) >= count

        wait_for(all_read, f"{count} committed records of {topic}")
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=False)[1]
    finally:
        consumer.close()
    return values, end


def test_interval_boundaries_make_fewer_transactions_than_polls(
    broker: BrokerProcess, eos_runner: Any
) -> None:
    plan = "|".join(str(n) for n in range(20))  # one record a poll
    run_numbers(eos_runner, "by-poll", plan)
    run_numbers(
        eos_runner,
        "by-interval",
        plan,
        **{"transaction.boundary": "interval", "transaction.boundary.interval.ms": "1500"},
    )
    expected = [str(n) for n in range(20)]
    values, end = committed(broker, "by-poll", 20)
    assert values == expected and end == 40  # each poll's record, then its marker
    values, end = committed(broker, "by-interval", 20)
    assert values == expected and end - 20 < 20  # far fewer markers than polls
    assert eos_runner.offset_store.get("by-interval", {"numbers": "by-interval"}) == {"n": 19}


def test_a_connector_defines_its_transactions(broker: BrokerProcess, eos_runner: Any) -> None:
    run_numbers(
        eos_runner, "by-task", "0,1,2!c|3,4c,5|6,7!a|8,9c", **{"transaction.boundary": "connector"}
    )
    values, end = committed(broker, "by-task", 7)
    # 0-2 committed after their batch, 3-4 after 4; 5-7 aborted with the batch; 8-9 after 9
    assert values == ["0", "1", "2", "3", "4", "8", "9"]
    assert end >= 10  # the seven records and three commit markers (the aborted may be unsent)
    wait_for(
        lambda: eos_runner.offset_store.get("by-task", {"numbers": "by-task"}) == {"n": 9},
        "the committed offset after 9",
    )


# Topic creation (KIP-158) ---------------------------------------------------------------------


def test_a_source_creates_its_topics_by_their_creation_groups(
    broker: BrokerProcess, eos_runner: Any
) -> None:
    creation = {
        "topic.creation.groups": "compacted",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "3",
        "topic.creation.compacted.include": "tc-compact-.*",
        "topic.creation.compacted.exclude": "tc-compact-not",
        "topic.creation.compacted.partitions": "2",
        "topic.creation.compacted.cleanup.policy": "compact",
    }
    for topic in ("tc-compact-users", "tc-compact-not"):
        run_numbers(eos_runner, topic, "0|1", **creation)
        committed(broker, topic, 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert len(topics["tc-compact-users"].partitions) == 2
    assert len(topics["tc-compact-not"].partitions) == 3  # excluded: the default group's
    resources = [ConfigResource("topic", t) for t in ("tc-compact-users", "tc-compact-not")]
    described = {r.name: f.result(timeout=10) for r, f in admin.describe_configs(resources).items()}
    assert described["tc-compact-users"]["cleanup.policy"].value == "compact"
    assert described["tc-compact-not"]["cleanup.policy"].value == "delete"


# Header converters ----------------------------------------------------------------------------


def test_headers_are_written_by_the_connectors_header_converter(
    broker: BrokerProcess, eos_runner: Any
) -> None:
    insert = {
        "transforms": "tag",
        "transforms.tag.type": "org.apache.kafka.connect.transforms.InsertHeader",
        "transforms.tag.header": "n",
        "transforms.tag.value.literal": "42",
    }
    run_numbers(eos_runner, "hc-simple", "0", **insert)  # the worker's: SimpleHeaderConverter
    run_numbers(
        eos_runner,
        "hc-json",
        "0",
        **insert,
        **{"header.converter": "org.apache.kafka.connect.json.JsonConverter"},
    )
    headers = {}
    for topic in ("hc-simple", "hc-json"):
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"{topic}-check",
                "isolation.level": "read_committed",
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            message = wait_for(
                lambda c=consumer: next((m for m in c.consume(10, 0.2) if m.error() is None), None),
                f"the record of {topic}",
            )
        finally:
            consumer.close()
        headers[topic] = message.headers()
    assert headers["hc-simple"] == [("n", b"42")]
    assert headers["hc-json"] == [
        ("n", b'{"schema":{"type":"int8","optional":false},"payload":42}')
    ]
