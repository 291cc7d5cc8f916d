"""The Spark source's range reader (strom.spark.reader.read_range) against a real broker,
without Spark: the raw Fetch path gives the same rows as the confluent-kafka path for
every codec, honours the range bounds and the data-loss rule, survives a broker
restart, and hands the settings it does not speak to confluent-kafka."""

from __future__ import annotations

import logging
import uuid

import pytest

pytest.importorskip(
    "pyspark", reason="PySpark is not installed (the spark extra: pip install -e '.[spark]')"
)

import pyarrow as pa
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_helpers import create_topic

from strom.spark import reader
from strom.spark.kafka_meta import StromSourceError
from strom.spark.options import ReaderOptions
from strom.spark.reader import OffsetRange, raw_path_unsupported, read_range

BASE_TS = 1_700_000_000_000
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        (
            "headers",
            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
        ),
    ]
)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, count: int, **config: object) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for i in range(count):
        producer.produce(
            topic,
            key=[None, b"", f"k{i}".encode()][i % 3],
            value=None if i % 11 == 5 else (f"value-{i}-".encode() * (i % 40)),
            headers=[("n", str(i).encode()), ("none", None)] if i % 4 == 0 else None,
            timestamp=BASE_TS + i,
            partition=0,
        )
        if i % 97 == 0:
            producer.flush(10)  # several batches
    assert producer.flush(30) == 0


def _options(broker, **client: str) -> ReaderOptions:
    return ReaderOptions(
        bootstrap=broker.bootstrap,
        client={"bootstrap.servers": broker.bootstrap, **client},
        include_headers=True,
        poll_timeout_ms=10_000,
    )


def _rows(batches) -> list[dict]:
    return [row for batch in batches for row in batch.to_pylist()]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_raw_path_reads_what_confluent_kafka_reads(broker, codec: str) -> None:
    topic = _topic(f"raw-{codec}")
    create_topic(broker.bootstrap, topic, 1)
    _produce(broker.bootstrap, topic, 600, **{"compression.type": codec})
    opts = _options(broker)
    assert raw_path_unsupported(opts) is None
    for start, end in [(0, 600), (7, 595), (100, 101)]:
        r = OffsetRange(topic, 0, start, end)
        raw = _rows(read_range(r, opts, SCHEMA))
        via_librdkafka = _rows(reader._read_range_confluent(r, opts, SCHEMA))
        assert [row["offset"] for row in raw] == list(range(start, end))
        assert raw == via_librdkafka
    first = _rows(read_range(OffsetRange(topic, 0, 0, 5), opts, SCHEMA))
    assert [(row["key"], row["timestamp"].timestamp()) for row in first[:3]] == [
        (None, BASE_TS / 1000),
        (b"", (BASE_TS + 1) / 1000),
        (b"k2", (BASE_TS + 2) / 1000),
    ]
    assert first[0]["headers"] == [{"key": "n", "value": b"0"}, {"key": "none", "value": None}]
    assert first[1]["headers"] is None


def test_small_fetches_and_a_broker_restart_mid_range(fresh_broker, monkeypatch) -> None:
    monkeypatch.setattr(reader, "RETRY_BACKOFF_S", 0.05)
    fresh_broker.start()
    topic = _topic("raw-restart")
    create_topic(fresh_broker.bootstrap, topic, 1)
    _produce(fresh_broker.bootstrap, topic, 500)
    opts = _options(fresh_broker, **{"max.partition.fetch.bytes": "2000"})
    batches = read_range(OffsetRange(topic, 0, 0, 500), opts, SCHEMA)
    rows = _rows([next(batches)])
    assert 0 < len(rows) < 500
    fresh_broker.restart()
    rows += _rows(batches)
    assert [row["offset"] for row in rows] == list(range(500))


def test_records_deleted_while_planned_are_data_loss(broker) -> None:
    topic = _topic("raw-loss")
    create_topic(broker.bootstrap, topic, 1)
    _produce(broker.bootstrap, topic, 50)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 20)]).values():
        future.result(10)
    opts = _options(broker)
    with pytest.raises(StromSourceError, match=r"offset 5 of .* is no longer in the log"):
        list(read_range(OffsetRange(topic, 0, 5, 50), opts, SCHEMA))
    lenient = ReaderOptions(**{**opts.__dict__, "fail_on_data_loss": False})
    rows = _rows(read_range(OffsetRange(topic, 0, 5, 50), lenient, SCHEMA))
    assert [row["offset"] for row in rows] == list(range(20, 50))

    # a range past the end of the log (the topic was truncated or recreated)
    with pytest.raises(StromSourceError, match=r"ends at offset 50, before the end"):
        list(read_range(OffsetRange(topic, 0, 20, 60), opts, SCHEMA))
    rows = _rows(read_range(OffsetRange(topic, 0, 20, 60), lenient, SCHEMA))
    assert [row["offset"] for row in rows] == list(range(20, 50))


def test_unknown_topic_and_unreachable_broker_are_clear_errors(broker, monkeypatch) -> None:
    monkeypatch.setattr(reader, "RETRY_BACKOFF_S", 0.01)
    opts = _options(broker)
    with pytest.raises(StromSourceError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        list(read_range(OffsetRange(_topic("missing"), 0, 0, 10), opts, SCHEMA))
    gone = ReaderOptions(bootstrap="127.0.0.1:1", client={"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(StromSourceError, match="cannot reach a broker at 127.0.0.1:1"):
        list(read_range(OffsetRange("t", 0, 0, 10), gone, SCHEMA))


def test_settings_the_raw_client_does_not_speak_go_through_confluent_kafka(broker, caplog) -> None:
    assert raw_path_unsupported(_options(broker, **{"client.id": "x", "group.id": "g"})) is None
    assert raw_path_unsupported(_options(broker, **{"security.protocol": "PLAINTEXT"})) is None
    for setting in [
        {"security.protocol": "SASL_SSL"},
        {"sasl.mechanism": "PLAIN"},
        {"isolation.level": "read_committed"},
        {"check.crcs": "true"},
    ]:
        assert raw_path_unsupported(_options(broker, **setting)) is not None

    topic = _topic("raw-fallback")
    create_topic(broker.bootstrap, topic, 1)
    _produce(broker.bootstrap, topic, 30)
    opts = _options(broker, **{"isolation.level": "read_committed"})
    with caplog.at_level(logging.DEBUG, logger="strom.spark.reader"):
        rows = _rows(read_range(OffsetRange(topic, 0, 3, 30), opts, SCHEMA))
    assert [row["offset"] for row in rows] == list(range(3, 30))
    assert "through confluent-kafka: kafka.isolation.level=read_committed" in caplog.text
