"""``from_confluent_avro`` and ``to_confluent_avro`` in real PySpark, against a broker
running its embedded schema registry.

Records written by confluent-kafka's AvroSerializer (nested records, arrays, maps,
enums, nullable fields, timestamps, decimals) decode into Spark columns, including
records written with an older schema, resolved to the latest one; a value that is not
in the wire format fails the query or becomes null; a struct column written back with
``to_confluent_avro`` is read by confluent-kafka's AvroDeserializer as the same values.
"""

from __future__ import annotations

import datetime
import decimal
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip(
    "pyspark", reason="PySpark is not installed (the spark extra: pip install -e '.[spark]')"
)

from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kafka_helpers import create_topic
from pyspark.sql import functions as F
from pyspark.sql import types as T

from strom.spark.avro import AvroColumnError, from_confluent_avro, spark_type, to_confluent_avro

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "qty", "type": "int"},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {
                        "name": "tier",
                        "type": {"type": "enum", "name": "Tier", "symbols": ["A", "B"]},
                    },
                ],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
    ],
}
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}],
}
SERVED = re.compile(r"schema registry on (http://127\.0\.0\.1:\d+)/")


@pytest.fixture(scope="module")
def registry_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, str]]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("avro") / "data", {"schema.registry.listener": "http://127.0.0.1:0"}
    )
    broker.start()
    try:
        deadline = time.monotonic() + 60
        while not (found := SERVED.search(broker.log_path.read_text(errors="replace"))):
            assert broker.alive() and time.monotonic() < deadline, broker.logs()
            time.sleep(0.1)
        yield broker, found.group(1)
    finally:
        broker.stop()


def order(i: int) -> dict[str, Any]:
    return {
        "id": f"o{i}",
        "qty": i,
        "customer": {"name": f"c{i}", "tier": "AB"[i % 2]},
        "tags": ["x"] * i,
        "attrs": {"k": i * 10},
        "note": None if i % 2 else f"n{i}",
        "at": datetime.datetime(2026, 1, 1, 12, 0, i, tzinfo=datetime.UTC),
        "price": decimal.Decimal(f"{i}.25"),
    }


def produce(broker: BrokerProcess, registry: SchemaRegistryClient, topic: str, schema: dict,
            values: list[Any]) -> None:  # fmt: skip
    serialize = AvroSerializer(registry, json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, value if isinstance(value, bytes) else serialize(value, context))
    assert producer.flush(30) == 0


def batch(spark: Any, broker: BrokerProcess, topic: str) -> Any:
    return (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .load()
    )


def test_records_decode_into_spark_columns(spark: Any, registry_broker: Any) -> None:
    broker, url = registry_broker
    registry = SchemaRegistryClient({"url": url})
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker, registry, topic, ORDER_V1, [order(i) for i in range(3)])
    produce(broker, registry, topic, ORDER_V2, [{**order(3), "channel": "app"}])

    decoded = batch(spark, broker, topic).select(
        "offset", from_confluent_avro("value", url, subject=f"{topic}-value").alias("o")
    )
    fields = decoded.schema["o"].dataType
    assert fields["customer"].dataType == T.StructType(
        [T.StructField("name", T.StringType(), False), T.StructField("tier", T.StringType(), False)]
    )
    assert fields["price"].dataType == T.DecimalType(9, 2)
    assert fields["note"].nullable and not fields["qty"].nullable
    rows = decoded.orderBy("offset").select("o.*").collect()
    assert [r.asDict(recursive=True) for r in rows] == [
        {**order(i), "at": order(i)["at"].astimezone().replace(tzinfo=None),
         "channel": "app" if i == 3 else "web"}
        for i in range(4)
    ]  # fmt: skip

    # A value not in the wire format: the query fails, or it reads as null.
    produce(broker, registry, topic, ORDER_V1, [b"plain text"])
    failing = batch(spark, broker, topic).select(
        from_confluent_avro("value", url, subject=f"{topic}-value")
    )
    with pytest.raises(Exception, match="wire format"):
        failing.collect()
    lenient = batch(spark, broker, topic).select(
        from_confluent_avro(F.col("value"), url, subject=f"{topic}-value", mode="PERMISSIVE").alias(
            "o"
        )
    )
    assert [r.o is None for r in lenient.collect()] == [False] * 4 + [True]


def test_a_struct_column_is_written_for_confluents_deserializer(
    spark: Any, registry_broker: Any
) -> None:
    broker, url = registry_broker
    source = f"orders-{uuid.uuid4().hex[:6]}"
    target = f"orders-out-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, target, 1)
    registry = SchemaRegistryClient({"url": url})
    produce(broker, registry, source, ORDER_V1, [order(i) for i in range(5)])
    orders = batch(spark, broker, source).select(
        from_confluent_avro("value", url, subject=f"{source}-value").alias("o")
    )
    (
        orders.select(
            to_confluent_avro("o", url, f"{target}-value", json.dumps(ORDER_V1)).alias("value")
        )
        .write.format("strom")
        .mode("append")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", target)
        .save()
    )
    deserialize = AvroDeserializer(registry)
    context = SerializationContext(target, MessageField.VALUE)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex})
    consumer.assign([TopicPartition(target, 0, 0)])
    values: list[Any] = []
    deadline = time.monotonic() + 30
    while len(values) < 5 and time.monotonic() < deadline:
        values += [deserialize(m.value(), context) for m in consumer.consume(100, 0.5)]
    consumer.close()
    assert sorted(values, key=lambda v: v["qty"]) == [order(i) for i in range(5)]
    assert registry.get_latest_version(f"{target}-value").schema_id > 0


def test_avro_types_map_as_sparks_avro_package_maps_them() -> None:
    assert spark_type({"type": "array", "items": ["null", "int"]}) == T.ArrayType(
        T.IntegerType(), True
    )
    assert spark_type({"type": "int", "logicalType": "date"}) == T.DateType()
    assert spark_type({"type": "fixed", "name": "F", "size": 4}) == T.BinaryType()
    recursive_names = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["X"]}},
            {"name": "b", "type": "E"},
        ],
    }
    assert spark_type(recursive_names) == T.StructType(
        [T.StructField("a", T.StringType(), False), T.StructField("b", T.StringType(), False)]
    )
    with pytest.raises(AvroColumnError, match="several non-null types"):
        spark_type(["null", "int", "string"])
