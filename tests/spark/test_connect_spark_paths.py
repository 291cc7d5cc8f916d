"""The Spark runner's paths around the JVM, with a real broker: a source task's
JsonConverter values built from Arrow columns in Spark's Python workers and written there
(``strom.connect.spark_envelopes``), against the JVM's ``to_json`` path they replace (the
same JSON for every type they take: ints, booleans, doubles and floats with NaN and
infinities, strings with quotes, backslashes, control characters and non-ASCII text,
Timestamp before and after 1970, Date, nulls; with and without the schema's envelope;
each record written once); and the JDBC sink's micro-batches of offset ranges
(``strom.connect.spark_ranges``), read without Spark."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="needs the spark extra (pip install -e .[spark])")

from confluent_kafka import Producer
from kafka_helpers import consume_to_end, create_topic

from strom.connect import spark_ranges
from strom.connect.converters import JsonConverter
from strom.connect.data import DATE, TIMESTAMP, Schema
from strom.connect.spark_envelopes import EnvelopeWriter, arrow_writes
from strom.connect.spark_runner import _envelopes_in_arrow, _json_records
from strom.connect.spark_tasks import SourceBatch

T, D = dt.datetime, dt.date
ROWS = [
    (1, 2, True, 1.5, 0.5, "plain", T(2026, 1, 2, 3, 4, 5, 123456), D(2026, 1, 2)),
    (-5, None, False, 3.0, 1e20, 'q"uo\\te', T(1960, 1, 1, 0, 0, 0, 500), D(1960, 5, 6)),
    (None, 7, None, None, 1e-7, "ctl\x01é\n", None, None),
    (9, 9, True, float("nan"), float("inf"), None, T(1970, 1, 1), D(1970, 1, 1)),
    (0, -(2**62), False, float("-inf"), -2.25, "", T(2001, 9, 9, 1, 46, 40), D(2001, 9, 9)),
]
COLUMNS = "a int, b long, c boolean, d double, e float, f string, g timestamp, h date"


def value_schema() -> Schema:
    return Schema.struct([
        ("a", Schema("int32", optional=True)),
        ("b", Schema("int64", optional=True)),
        ("c", Schema("boolean", optional=True)),
        ("d", Schema("float64", optional=True)),
        ("e", Schema("float32", optional=True)),
        ("f", Schema("string", optional=True)),
        ("g", Schema("int64", optional=True, name=TIMESTAMP)),
        ("h", Schema("int32", optional=True, name=DATE)),
    ])  # fmt: skip


def test_arrow_built_values_read_as_the_jvm_path_writes_them(spark, broker) -> None:
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    rows = spark.createDataFrame(ROWS, COLUMNS)
    schema = value_schema()
    assert arrow_writes(schema)
    assert not arrow_writes(Schema.struct([("x", Schema("bytes"))]))
    for schemas in (True, False):
        converter = JsonConverter()
        converter.configure({"schemas.enable": str(schemas).lower()}, is_key=False)
        batch = SourceBatch("t", rows, schema, {}, None)
        assert _envelopes_in_arrow(batch, converter)
        jvm = [str(r["value"]).encode() for r in _json_records(batch, converter).collect()]
        topic = f"envelopes-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, 2)
        writer = EnvelopeWriter(
            topic, schema, schemas, {"kafka.bootstrap.servers": broker.bootstrap}
        )
        written = rows.mapInArrow(writer, "written long").collect()
        assert sum(r["written"] for r in written) == len(ROWS)
        arrow = [m.value() for m in consume_to_end(broker.bootstrap, topic)]
        assert len(arrow) == len(ROWS)  # each record once
        # JSON-equal, NaN compared as text; the float columns' exponents are written
        # as 1e+20 where the JVM writes 1.0E20: the same double.
        by_id = {json.dumps(payload(v)["b"]): payload(v) for v in arrow}
        assert by_id == {json.dumps(payload(v)["b"]): payload(v) for v in jvm}
        if schemas:
            assert {v.split(b',"payload":')[0] for v in arrow} == {
                v.split(b',"payload":')[0] for v in jvm
            }
        plain = sorted(v for v in arrow if b"E" not in v and b"e+" not in v and b"e-" not in v)
        assert plain and set(plain) <= set(jvm)  # the rest byte for byte


def payload(value: bytes | None) -> dict[str, object]:
    assert value is not None
    decoded = json.loads(value, parse_constant=str)
    found = decoded["payload"] if "payload" in decoded else decoded
    assert isinstance(found, dict)
    return found


def test_range_batches_cap_each_range_and_start_where_told(broker, monkeypatch) -> None:
    """The JDBC sink's micro-batches (``spark_ranges``): a topic-partition starts at the
    position ``first`` gives (the group's) or else at the earliest, each range holds at
    most RANGE_RECORDS offsets, and each range's records are read whole by the task's
    reading loop, which hands them to the writer."""
    topic = f"ranges-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(30):
        producer.produce(topic, f"r{n}".encode(), partition=0)
    for n in range(5):
        producer.produce(topic, f"s{n}".encode(), partition=1)
    producer.flush(10)
    monkeypatch.setattr(spark_ranges, "RANGE_RECORDS", 8)
    asked: list[list[str]] = []

    def first(topics: list[str]) -> dict[str, dict[str, int]]:
        asked.append(topics)
        return {topic: {"0": 10}}  # partition 1 has no commit: the earliest

    batches = spark_ranges.RangeBatches(
        {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}, first
    )
    seen: list[tuple[int, int, int]] = []
    values: list[bytes] = []

    def writer(arrows: list[pa.RecordBatch]) -> int:
        table = pa.Table.from_batches(arrows)
        values.extend(table["value"].to_pylist())
        return table.num_rows

    try:
        while (planned := batches.next()) is not None:
            ranges, ends = planned
            seen += [(r.partition, r.start, r.end) for r in ranges]
            written = list(spark_ranges.write_ranges(writer, batches.opts, ranges))
            assert written == [r.end - r.start for r in ranges]
            batches.advance(ends)
    finally:
        batches.close()
    assert asked == [[topic]]
    assert seen == [(0, 10, 18), (1, 0, 5), (0, 18, 26), (0, 26, 30)]
    assert sorted(values) == sorted(
        [f"r{n}".encode() for n in range(10, 30)] + [f"s{n}".encode() for n in range(5)]
    )
