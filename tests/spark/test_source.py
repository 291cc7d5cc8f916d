"""The ``strom`` source against a real broker: streaming and batch reads, checkpoints,
new partitions, data loss, and wrong options reported before a query starts."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip(
    "pyspark", reason="PySpark is not installed (the spark extra: pip install -e '.[spark]')"
)

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka_helpers import create_topic
from spark_helpers import Produced, produce, read_stream

BASE_TS = 1_700_000_000_000


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _records(count: int, first: int = 0) -> list[dict]:
    records = []
    for i in range(first, first + count):
        record: dict = {
            "key": f"k{i % 17}".encode() if i % 5 else None,
            "value": f"value-{i}".encode(),
            "timestamp": BASE_TS + i,
        }
        if i % 3 == 0:
            record["headers"] = [("n", str(i).encode()), ("empty", None)]
        records.append(record)
    return records


def _as_produced(row) -> Produced:
    # collect() gives naive datetimes in this process's local time zone
    return Produced(
        row.key,
        row.value,
        row.partition,
        row.offset,
        round(row.timestamp.timestamp() * 1000),
        [(h.key, h.value) for h in row.headers] if row.headers is not None else None,
    )


def _options(broker, **extra) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap, **extra}


def test_stream_reads_each_record_once_with_its_fields(spark, broker, tmp_path: Path) -> None:
    topic = _topic("stream")
    create_topic(broker.bootstrap, topic, 6)
    produced = produce(broker.bootstrap, topic, _records(600))
    assert {p.partition for p in produced} == set(range(6))

    rows = read_stream(
        spark,
        _options(broker, subscribe=topic, startingOffsets="earliest", includeHeaders="true"),
        tmp_path / "checkpoint",
    )
    assert len(rows) == 600
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}  # CreateTime
    assert sorted(map(_as_produced, rows), key=lambda p: (p.partition, p.offset)) == sorted(
        produced, key=lambda p: (p.partition, p.offset)
    )


def test_restart_from_checkpoint_reads_exactly_the_new_records(
    spark, broker, tmp_path: Path
) -> None:
    topic = _topic("restart")
    create_topic(broker.bootstrap, topic, 6)
    first = produce(broker.bootstrap, topic, _records(300))
    options = _options(
        broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="150"
    )
    checkpoint = tmp_path / "checkpoint"

    rows = read_stream(spark, options, checkpoint)
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (p.partition, p.offset) for p in first
    )

    second = produce(broker.bootstrap, topic, _records(120, first=300))
    rows = read_stream(spark, options, checkpoint)
    assert sorted((r.partition, r.offset, r.value) for r in rows) == sorted(
        (p.partition, p.offset, p.value) for p in second
    )

    assert read_stream(spark, options, checkpoint) == []


def test_partitions_added_while_running_are_read_from_their_start(
    spark, broker, tmp_path: Path
) -> None:
    topic = _topic("grow")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, [{"value": b"a", "partition": p} for p in (0, 1)])
    options = _options(broker, subscribe=topic, startingOffsets="earliest")
    checkpoint = tmp_path / "checkpoint"
    assert len(read_stream(spark, options, checkpoint)) == 2

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(10)
    added = produce(
        broker.bootstrap, topic, [{"value": f"b{p}".encode(), "partition": p} for p in range(4)]
    )
    rows = read_stream(spark, options, checkpoint)
    assert sorted((r.partition, r.offset, r.value) for r in rows) == sorted(
        (p.partition, p.offset, p.value) for p in added
    )


def test_starting_offsets_latest_reads_only_what_comes_after(spark, broker, tmp_path: Path) -> None:
    topic = _topic("latest")
    create_topic(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, _records(30))
    options = _options(broker, subscribe=topic)  # streaming default: latest
    checkpoint = tmp_path / "checkpoint"
    assert read_stream(spark, options, checkpoint) == []
    later = produce(broker.bootstrap, topic, _records(9, first=30))
    rows = read_stream(spark, options, checkpoint)
    assert sorted(r.value for r in rows) == sorted(p.value for p in later)


def test_batch_read_between_starting_and_ending_offsets(spark, broker) -> None:
    topic = _topic("batch")
    create_topic(broker.bootstrap, topic, 6)
    produced = produce(broker.bootstrap, topic, _records(240))
    per_partition = {p: sorted(x.offset for x in produced if x.partition == p) for p in range(6)}
    start = {str(p): 3 for p in range(6)} | {"5": -2}
    end = {str(p): 10 for p in range(6)} | {"4": -1}
    df = (
        spark.read.format("strom")
        .options(**_options(broker, subscribe=topic))
        .option("startingOffsets", f'{{"{topic}": {_json(start)}}}')
        .option("endingOffsets", f'{{"{topic}": {_json(end)}}}')
        .load()
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    want = []
    for p in range(6):
        lo = 0 if p == 5 else 3
        hi = len(per_partition[p]) if p == 4 else 10
        want += [(p, o) for o in range(lo, hi)]
    assert got == sorted(want)

    whole = spark.read.format("strom").options(**_options(broker, subscribe=topic)).load()
    assert whole.count() == 240


def test_batch_read_by_assign_and_timestamp_split_by_min_partitions(spark, broker) -> None:
    topic = _topic("assign")
    create_topic(broker.bootstrap, topic, 3)
    produced = produce(broker.bootstrap, topic, _records(90))
    df = (
        spark.read.format("strom")
        .options(**_options(broker))
        .option("assign", f'{{"{topic}": [0, 2]}}')
        .option("startingTimestamp", str(BASE_TS + 45))
        .option("minPartitions", "8")
        .load()
    )
    assert df.rdd.getNumPartitions() >= 8
    got = sorted((r.partition, r.offset) for r in df.collect())
    want = sorted(
        (p.partition, p.offset)
        for p in produced
        if p.partition in (0, 2) and p.timestamp_ms >= BASE_TS + 45
    )
    assert got == want


def test_records_deleted_before_read_fail_or_are_skipped(spark, broker) -> None:
    topic = _topic("loss")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, _records(50))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 20)])
    for future in futures.values():
        future.result(10)
    start = f'{{"{topic}": {{"0": 5}}}}'

    reader = spark.read.format("strom").options(**_options(broker, subscribe=topic))
    with pytest.raises(Exception, match=r"offsets \[5, 20\) are no longer in the log"):
        reader.option("startingOffsets", start).load().collect()

    rows = (
        reader.option("startingOffsets", start).option("failOnDataLoss", "false").load().collect()
    )
    assert sorted(r.offset for r in rows) == list(range(20, 50))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"subscribe": "t", "assign": '{"t": [0]}'},
            "exactly one of the options subscribe, subscribePattern, assign",
        ),
        ({}, "exactly one of the options subscribe, subscribePattern, assign is required"),
        (
            {"subscribe": "t", "startingOffsets": '{"t": {"0": 1'},
            "option startingOffsets is not valid JSON",
        ),
        (
            {"subscribe": "t", "startingOffsets": "first"},
            "option startingOffsets must be earliest, latest or JSON",
        ),
        (
            {"subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'},
            "offset -3 of t-0 is not valid",
        ),
        ({"assign": '{"t": "0"}'}, "option assign: topic 't' must map to a list"),
        (
            {"subscribe": "t", "maxOffsetsPerTrigger": "many"},
            "option maxOffsetsPerTrigger must be an integer",
        ),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, "option failOnDataLoss must be true or"),
        (
            {"subscribe": "t", "kafka.auto.offset.reset": "earliest"},
            "option kafka.auto.offset.reset is not allowed",
        ),
        (
            {"subscribe": "t", "startingOffset": "earliest"},
            "unknown option for the strom source: startingoffset",
        ),
    ],
)
def test_wrong_options_fail_at_load(spark, broker, options, message) -> None:
    with pytest.raises(Exception, match=_re(message)):
        spark.readStream.format("strom").options(**_options(broker, **options)).load()


def test_missing_bootstrap_and_unknown_topic_fail_at_load(spark, broker) -> None:
    with pytest.raises(Exception, match="option kafka.bootstrap.servers is required"):
        spark.readStream.format("strom").option("subscribe", "t").load()
    missing = _topic("missing")
    with pytest.raises(Exception, match=f"unknown topic or partition {missing} at"):
        spark.readStream.format("strom").options(**_options(broker, subscribe=missing)).load()
    # with failOnDataLoss=false the query may wait for the topic, as Spark's does
    spark.readStream.format("strom").options(
        **_options(broker, subscribe=missing, failOnDataLoss="false")
    ).load()


def test_batch_only_options_are_refused_for_streams_and_back(spark, broker) -> None:
    topic = _topic("modes")
    create_topic(broker.bootstrap, topic, 1)
    df = (
        spark.readStream.format("strom")
        .options(**_options(broker, subscribe=topic, endingOffsets="latest"))
        .load()
    )
    with pytest.raises(Exception, match="endingOffsets .* is for batch reads only"):
        df.writeStream.format("memory").queryName("never").start().awaitTermination(30)
    with pytest.raises(Exception, match="startingOffsets cannot be latest for a batch read"):
        spark.read.format("strom").options(
            **_options(broker, subscribe=topic, startingOffsets="latest")
        ).load().collect()


def _json(mapping: dict[str, int]) -> str:
    return "{" + ", ".join(f'"{k}": {v}' for k, v in mapping.items()) + "}"


def _re(text: str) -> str:
    import re

    return re.escape(text)
