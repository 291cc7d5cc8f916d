"""Confluent's AvroConverter on a real schema registry (``strom schema-registry``): Connect
data round trips through it, what it writes is read by confluent-kafka's Avro
deserializer and what that library's serializer writes is read by it, the schema is
registered under ``<topic>-value`` as Confluent's converter registers it, bad bytes are
one clear error; and a standalone worker writes a FileStream source's lines with it."""

from __future__ import annotations

import datetime
import json
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from service_process import ServiceProcess
from test_connect import Worker, wait_for

from strom.connect.avro_converter import AvroConverter, RegistryError, avro_schema
from strom.connect.data import (
    BOOLEAN,
    BYTES,
    DATE,
    DECIMAL,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    TIME,
    TIMESTAMP,
    DataException,
    Schema,
    Struct,
)

ADDRESS = Schema.struct([("city", Schema(STRING)), ("zip", Schema(STRING, optional=True))])
ORDER = Schema.struct(
    [
        ("tiny", Schema(INT8)),
        ("small", Schema(INT16)),
        ("count", Schema(INT32)),
        ("id", Schema(INT64)),
        ("ratio", Schema(FLOAT32)),
        ("price", Schema(FLOAT64)),
        ("paid", Schema(BOOLEAN)),
        ("note", Schema(STRING, optional=True)),
        ("blob", Schema(BYTES)),
        ("tags", Schema.array(Schema(INT32))),
        ("labels", Schema.map(Schema(STRING), Schema(INT64))),
        ("by_code", Schema.map(Schema(INT32), Schema(STRING))),
        ("address", ADDRESS),
        ("amount", Schema(BYTES, name=DECIMAL, version=1, parameters={"scale": "2"})),
        ("day", Schema(INT32, name=DATE, version=1)),
        ("at_time", Schema(INT32, name=TIME, version=1)),
        ("at", Schema(INT64, name=TIMESTAMP, version=1)),
    ],
    name="shop.Order",
)


def order_value() -> Struct:
    address = Struct(ADDRESS, {"city": "Oslo", "zip": None})
    return Struct(
        ORDER,
        {
            "tiny": -3,
            "small": 300,
            "count": 70000,
            "id": 2**40,
            "ratio": 0.5,
            "price": 9.75,
            "paid": True,
            "note": None,
            "blob": b"\x00\xff",
            "tags": [1, 2],
            "labels": {"a": 1},
            "by_code": {7: "seven"},
            "address": address,
            "amount": Decimal("12.34"),
            "day": 19000,
            "at_time": 3_600_000,
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


def converter(registry: str, **settings: str) -> AvroConverter:
    made = AvroConverter()
    made.configure({"schema.registry.url": registry, **settings}, is_key=False)
    return made


def test_connect_data_round_trips_and_the_schema_is_registered(registry: str) -> None:
    avro = converter(registry)
    written = avro.from_connect_data("orders", ORDER, order_value())
    assert written is not None and written[0] == 0
    schema, value = converter(registry).to_connect_data("orders", written)  # a cold cache
    assert schema == ORDER
    assert value == order_value()
    with urllib.request.urlopen(f"{registry}/subjects/orders-value/versions/latest") as answer:
        registered = json.loads(json.loads(answer.read())["schema"])
    assert registered == avro_schema(ORDER)
    assert registered["name"] == "Order" and registered["namespace"] == "shop"
    tiny = next(f for f in registered["fields"] if f["name"] == "tiny")
    assert tiny["type"] == {"type": "int", "connect.type": "int8"}
    assert avro.from_connect_data("orders", ORDER.__class__(STRING, optional=True), None) is None


def test_confluent_kafka_reads_what_it_writes_and_the_other_way(registry: str) -> None:
    client = SchemaRegistryClient({"url": registry})
    written = converter(registry).from_connect_data("shop", ORDER, order_value())
    read = AvroDeserializer(client)(written, SerializationContext("shop", MessageField.VALUE))
    assert read["id"] == 2**40 and read["address"] == {"city": "Oslo", "zip": None}
    assert read["amount"] == Decimal("12.34")
    assert read["day"] == datetime.date(1970, 1, 1) + datetime.timedelta(days=19000)
    assert read["by_code"] == [{"key": 7, "value": "seven"}]

    plain = {
        "type": "record",
        "name": "Click",
        "namespace": "web",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "ms", "type": "long"},
            {"name": "ref", "type": ["null", "string"], "default": None},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        ],
    }
    serialize = AvroSerializer(client, json.dumps(plain))
    data = serialize(
        {"user": "ann", "ms": 5, "ref": None, "kind": "B"},
        SerializationContext("clicks", MessageField.VALUE),
    )
    schema, value = converter(registry).to_connect_data("clicks", data)
    assert schema is not None and schema.name == "web.Click"
    assert [(f.name, f.schema.type, f.schema.optional) for f in schema.fields] == [
        ("user", STRING, False),
        ("ms", INT64, False),
        ("ref", STRING, True),
        ("kind", STRING, False),
    ]
    assert value.values == {"user": "ann", "ms": 5, "ref": None, "kind": "B"}


def test_without_auto_register_the_subjects_latest_schema_is_written_with(registry: str) -> None:
    converter(registry).from_connect_data("latest", ORDER, order_value())  # registers it
    fixed = converter(registry, **{"auto.register.schemas": "false"})
    written = fixed.from_connect_data("latest", ORDER, order_value())
    with urllib.request.urlopen(f"{registry}/subjects/latest-value/versions/latest") as answer:
        assert int.from_bytes(written[1:5], "big") == json.loads(answer.read())["id"]
    with pytest.raises(RegistryError, match="404 Subject 'unregistered-value' not found"):
        fixed.from_connect_data("unregistered", ORDER, order_value())


def test_bad_bytes_schemaless_data_and_no_registry_are_one_clear_error(registry: str) -> None:
    with pytest.raises(DataException, match="Unknown magic byte"):
        converter(registry).to_connect_data("orders", b"{not avro}")
    with pytest.raises(DataException, match="needs a schema"):
        converter(registry).from_connect_data("orders", None, {"a": 1})
    with pytest.raises(RegistryError, match="cannot reach the schema registry"):
        converter("http://127.0.0.1:9").from_connect_data("orders", ORDER, order_value())


def test_a_worker_writes_a_file_source_with_the_avro_converter(
    broker: BrokerProcess, registry: str, tmp_path: Path
) -> None:
    source_file = tmp_path / "in.txt"
    source_file.write_text("first\nsecond\n")
    worker_file = tmp_path / "standalone.properties"
    worker_file.write_text(
        f"bootstrap.servers={broker.bootstrap}\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=io.confluent.connect.avro.AvroConverter\n"
        f"value.converter.schema.registry.url={registry}\n"
        f"offset.storage.file.filename={tmp_path / 'offsets'}\n"
        "offset.flush.interval.ms=200\nlisteners=http://127.0.0.1:0\n"
    )
    source = tmp_path / "source.properties"
    source.write_text(
        f"name=avro-src\nconnector.class=FileStreamSource\nfile={source_file}\ntopic=avro-lines\n"
    )
    process = Worker("standalone", worker_file, source)
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": registry}))
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "avro-check",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["avro-lines"])
    lines: list[str] = []
    try:

        def both() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                context = SerializationContext("avro-lines", MessageField.VALUE)
                lines.append(deserialize(message.value(), context))
            return len(lines) == 2

        wait_for(both, "both lines read back with confluent-kafka's Avro deserializer")
        assert lines == ["first", "second"]
    finally:
        consumer.close()
        process.stop()
