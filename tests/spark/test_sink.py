"""The ``strom`` sink against a real broker: batch and streaming writes read back with
confluent-kafka, a windowed count computed by Spark checked against the test's own,
and the column rules reported before a query runs."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip(
    "pyspark", reason="PySpark is not installed (the spark extra: pip install -e '.[spark]')"
)

from kafka_helpers import consume_to_end, create_topic
from pyspark.sql import functions as F
from spark_helpers import produce

BASE_TS = 1_700_000_000_000  # a multiple of 10 s


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_batch_write_places_key_value_headers_and_partition(spark, broker) -> None:
    topic = _topic("sink")
    other = _topic("sink-other")
    create_topic(broker.bootstrap, topic, 4)
    create_topic(broker.bootstrap, other, 1)
    rows = [
        (
            f"k{i}",
            f"v{i}",
            i % 4 if i % 2 and i < 40 else None,
            [(f"h{i}", b"x")] if i % 3 == 0 else None,
            topic if i < 40 else other,
        )
        for i in range(50)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value string, partition int, "
        "headers array<struct<key: string, value: binary>>, topic string",
    )
    df.write.format("strom").mode("append").option(
        "kafka.bootstrap.servers", broker.bootstrap
    ).save()

    got = consume_to_end(broker.bootstrap, topic, timeout=30)  # to the end: duplicates show
    assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(40))
    by_value = {m.value(): m for m in got}
    for key, value, partition, headers, _topic_column in rows[:40]:
        msg = by_value[value.encode()]
        assert msg.key() == key.encode()
        if partition is not None:
            assert msg.partition() == partition
        assert (msg.headers() or None) == (headers or None)
    assert sorted(m.value() for m in consume_to_end(broker.bootstrap, other)) == sorted(
        f"v{i}".encode() for i in range(40, 50)
    )


def test_a_timestamp_of_0_is_written_as_0_in_the_rows_order(spark, broker) -> None:
    """librdkafka writes a produce timestamp of 0 as the time of sending: such rows go
    through ``strom.zero_time``, between the producer's rows before and after them."""
    topic = _topic("sink-zero")
    create_topic(broker.bootstrap, topic, 1)
    stamps = [BASE_TS, 0, 0, BASE_TS + 1, 0, BASE_TS + 2]
    rows = [(f"k{i}", f"v{i}", ts) for i, ts in enumerate(stamps)]
    df = spark.createDataFrame(rows, "key string, value string, timestamp long").coalesce(1)
    df.write.format("strom").mode("append").options(
        **{"kafka.bootstrap.servers": broker.bootstrap, "topic": topic}
    ).save()
    got = consume_to_end(broker.bootstrap, topic, timeout=30)
    assert [(m.key(), m.value(), m.timestamp()[1]) for m in got] == [
        (k.encode(), v.encode(), ts) for k, v, ts in rows
    ]


@pytest.mark.parametrize("stamps", [[BASE_TS, 0, BASE_TS + 1, 0], [BASE_TS, BASE_TS + 1]])
def test_exactly_once_keeps_a_timestamp_of_0(
    spark, broker, tmp_path: Path, stamps: list[int]
) -> None:
    """exactlyOnce: a micro-batch with rows stamped 0 is written in its transaction by
    Strom's own requests (librdkafka would stamp a 0 with the time of sending), one
    without by confluent-kafka's transactional producer: either way each record has its
    row's timestamp, 0 included, in the rows' order."""
    source, sink = _topic("eos-zero-in"), _topic("eos-zero")
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, sink, 1)
    produce(
        broker.bootstrap,
        source,
        [{"key": f"k{i}".encode(), "value": str(ts).encode()} for i, ts in enumerate(stamps)],
    )
    rows = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value", F.col("value").cast("string").cast("long").alias("timestamp"))
    )
    query = (
        rows.writeStream.format("strom")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    got = consume_to_end(broker.bootstrap, sink, timeout=30)
    assert [(m.key(), m.timestamp()[1]) for m in got] == [
        (f"k{i}".encode(), ts) for i, ts in enumerate(stamps)
    ]


def test_topic_option_overrides_the_topic_column(spark, broker) -> None:
    topic = _topic("sink-option")
    create_topic(broker.bootstrap, topic, 1)
    df = spark.createDataFrame([("nowhere", b"a"), ("nowhere", b"b")], "topic string, value binary")
    df.write.format("strom").mode("append").options(
        **{"kafka.bootstrap.servers": broker.bootstrap, "topic": topic}
    ).save()
    assert sorted(m.value() for m in consume_to_end(broker.bootstrap, topic)) == [b"a", b"b"]


def test_a_row_to_the_failure_topic_fails_the_write_after_the_rows_before_it(spark, broker) -> None:
    topic = _topic("sink-failure")
    create_topic(broker.bootstrap, topic, 1)
    rows = [(topic, "v0"), (topic, "v1"), ("!failed", "the reason"), (topic, "v3")]
    df = spark.createDataFrame(rows, "topic string, value string").coalesce(1)
    with pytest.raises(Exception, match="FailedRowError: the reason"):
        df.write.format("strom").mode("append").options(
            **{"kafka.bootstrap.servers": broker.bootstrap, "failureTopic": "!failed"}
        ).save()
    assert [m.value() for m in consume_to_end(broker.bootstrap, topic)] == [b"v0", b"v1"]


def test_windowed_count_is_written_by_the_streaming_sink(spark, broker, tmp_path: Path) -> None:
    source, sink = _topic("clicks"), _topic("clicks-per-10s")
    create_topic(broker.bootstrap, source, 6)
    create_topic(broker.bootstrap, sink, 1)
    users = ["ana", "bo", "cy", "dee"]
    events = [
        {"key": users[(i * 7) % 4].encode(), "value": b"{}", "timestamp": BASE_TS + i * 173}
        for i in range(400)
    ]
    # one event far later moves the watermark past every window above
    events.append({"key": b"ana", "value": b"{}", "timestamp": BASE_TS + 400 * 173 + 60_000})
    produce(broker.bootstrap, source, events)
    expected = Counter(
        (e["key"].decode(), (e["timestamp"] - BASE_TS) // 10_000 * 10_000 + BASE_TS)
        for e in events[:-1]
    )

    counts = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .withWatermark("timestamp", "10 seconds")
        .groupBy(F.window("timestamp", "10 seconds"), F.col("key"))
        .count()
        .select(
            F.col("key"),
            F.to_json(
                F.struct(F.unix_millis(F.col("window.start")).alias("start"), F.col("count"))
            ).alias("value"),
        )
    )
    query = (
        counts.writeStream.format("strom")
        .outputMode("append")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None

    written = consume_to_end(broker.bootstrap, sink, timeout=30)  # to the end: duplicates show
    windows = [(msg.key().decode(), json.loads(msg.value())) for msg in written]
    # each window once: append mode writes a window only once the watermark passed it
    assert sorted((key, w["start"], w["count"]) for key, w in windows) == sorted(
        (key, start, count) for (key, start), count in expected.items()
    )


@pytest.mark.parametrize(
    ("schema", "options", "message"),
    [
        ("key string", {"topic": "t"}, "the strom sink needs a value column"),
        ("key int, value string", {"topic": "t"}, "column key must be string or binary, not int"),
        ("value string", {}, "the strom sink needs a topic column or the topic option"),
        ("value string, partition long", {"topic": "t"}, "column partition must be int"),
        (
            "value string",
            {"topic": "t", "kafka.key.serializer": "x"},
            "option kafka.key.serializer is not allowed",
        ),
    ],
)
def test_sink_column_errors_come_before_writing(spark, broker, schema, options, message) -> None:
    df = spark.createDataFrame([], schema)
    with pytest.raises(Exception, match=message):
        df.write.format("strom").mode("append").options(
            **{"kafka.bootstrap.servers": broker.bootstrap, **options}
        ).save()
