"""ListOffsets by timestamp, DeleteRecords, LogAppendTime, and segment rolls over the wire."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka_helpers import consume_all, consume_to_end, create_topic


def _produce(
    bootstrap: str, topic: str, values: list[bytes], timestamps: list[int] | None = None, **config
) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **config})
    delivered: list = []
    for i, value in enumerate(values):
        kwargs = {"timestamp": timestamps[i]} if timestamps else {}
        producer.produce(
            topic,
            value=value,
            partition=0,
            on_delivery=lambda err, msg: delivered.append((err, msg)),
            **kwargs,
        )
        producer.flush(10)  # one batch per record, so timestamps map to batches exactly
    assert all(err is None for err, _ in delivered)
    return [msg for _, msg in delivered]


def test_list_offsets_by_timestamp(broker) -> None:
    topic = "by-time"
    create_topic(broker.bootstrap, topic, 1)
    base = 1_700_000_000_000
    stamps = [base + 1000 * i for i in range(10)]
    _produce(broker.bootstrap, topic, [b"r%d" % i for i in range(10)], stamps)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(topic, 0)

    def lookup(spec: OffsetSpec):
        result = admin.list_offsets({tp: spec})[tp].result(10)
        return result.offset, result.timestamp

    assert lookup(OffsetSpec.earliest())[0] == 0
    assert lookup(OffsetSpec.latest())[0] == 10
    assert lookup(OffsetSpec.max_timestamp()) == (9, stamps[9])
    assert lookup(OffsetSpec.for_timestamp(stamps[3]))[0] == 3
    assert lookup(OffsetSpec.for_timestamp(stamps[3] - 1)) == (3, stamps[3])
    assert lookup(OffsetSpec.for_timestamp(base - 10_000))[0] == 0
    assert lookup(OffsetSpec.for_timestamp(stamps[9] + 1))[0] == -1  # none so late

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t"})
    [found] = consumer.offsets_for_times([TopicPartition(topic, 0, stamps[6])], timeout=10)
    consumer.close()
    assert found.offset == 6


def test_list_offsets_answers_per_record_inside_a_batch(broker) -> None:
    """ListOffsets looks inside the batch: MAX_TIMESTAMP names the record holding the
    largest timestamp, and a lookup by timestamp the first record at or after it, even
    when an earlier record of the same batch is older (Kafka answers per record)."""
    topic = "by-time-in-batch"
    create_topic(broker.bootstrap, topic, 1)
    base = 1_700_000_000_000
    stamps = [base, base + 5000, base + 2000, base + 1000]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    delivered = []
    for i, stamp in enumerate(stamps):
        producer.produce(
            topic,
            value=b"%d" % i,
            partition=0,
            timestamp=stamp,
            on_delivery=lambda err, msg: delivered.append((err, msg.offset())),
        )
    assert producer.flush(10) == 0
    assert sorted(delivered) == [(None, i) for i in range(4)]  # offsets 0-3, one batch

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(topic, 0)

    def lookup(spec: OffsetSpec):
        result = admin.list_offsets({tp: spec})[tp].result(10)
        return result.offset, result.timestamp

    assert lookup(OffsetSpec.max_timestamp()) == (1, base + 5000)
    assert lookup(OffsetSpec.for_timestamp(base)) == (0, base)
    assert lookup(OffsetSpec.for_timestamp(base + 1)) == (1, base + 5000)
    assert lookup(OffsetSpec.for_timestamp(base + 5001)) == (-1, -1)


def test_delete_records_moves_log_start(broker) -> None:
    topic = "deletable"
    create_topic(broker.bootstrap, topic, 1)
    _produce(broker.bootstrap, topic, [b"d%d" % i for i in range(20)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.delete_records([TopicPartition(topic, 0, 12)]).values()
    assert future.result(10).low_watermark == 12
    tp = TopicPartition(topic, 0)
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset == 12

    values = [m.value() for m in consume_to_end(broker.bootstrap, topic)]
    assert values == [b"d%d" % i for i in range(12, 20)]

    # an offset below the log start is out of range: the consumer resets as told
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "reset", "auto.offset.reset": "error"}
    )
    consumer.assign([TopicPartition(topic, 0, 3)])
    msg = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            break
    consumer.close()
    assert msg is not None and msg.error() is not None
    assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET

    # beyond the high watermark is refused
    [future] = admin.delete_records([TopicPartition(topic, 0, 999)]).values()
    with pytest.raises(Exception) as too_far:
        future.result(10)
    assert "OFFSET_OUT_OF_RANGE" in str(too_far.value)


def test_log_append_time_replaces_client_timestamps(broker) -> None:
    topic = "append-time"
    create_topic(broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    delivered = _produce(broker.bootstrap, topic, [b"a", b"b"], [1000, 2000])
    after = int(time.time() * 1000)
    for msg in delivered:
        kind, stamp = msg.timestamp()
        assert kind == 2 and before - 5 <= stamp <= after + 5  # LogAppendTime
    for msg in consume_all(broker.bootstrap, topic, 2):
        kind, stamp = msg.timestamp()
        assert kind == 2 and before - 5 <= stamp <= after + 5


@pytest.mark.parametrize("size", [30_000, 300_000])  # frame copied once / received whole
def test_large_batches_patched_in_the_received_frame(broker, size: int) -> None:
    topic = f"append-time-{size}"
    create_topic(broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    # Shrinking sizes: a large frame's buffer is reused for the next, smaller one.
    values = [bytes([i]) * (size - i * 997) for i in range(1, 4)]
    before = int(time.time() * 1000)
    delivered = _produce(broker.bootstrap, topic, values, [1000, 2000, 3000])
    after = int(time.time() * 1000)
    assert [msg.offset() for msg in delivered] == [0, 1, 2]
    messages = consume_all(broker.bootstrap, topic, 3, **{"check.crcs": True})
    assert [msg.value() for msg in messages] == values  # the CRC was recomputed in place
    for msg in messages:
        kind, stamp = msg.timestamp()
        assert kind == 2 and before - 5 <= stamp <= after + 5


def test_segments_roll_and_reads_cross_them(broker) -> None:
    topic = "rolling"
    create_topic(
        broker.bootstrap, topic, 1, {"segment.bytes": "16384", "index.interval.bytes": "1024"}
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1, "batch.size": 4000})
    for i in range(2000):
        producer.produce(topic, value=b"seg-%05d-" % i + b"p" * 80, partition=0)
    producer.flush(20)
    segments = sorted(Path(broker.data_dir, f"{topic}-0").glob("*.log"))
    assert len(segments) > 5
    assert segments[0].name == "00000000000000000000.log"
    assert all(len(s.stem) == 20 for s in segments)
    assert all(Path(s.with_suffix(".index")).exists() for s in segments)

    messages = consume_to_end(broker.bootstrap, topic)
    assert [m.offset() for m in messages] == list(range(2000))
    assert [m.value()[:10] for m in messages] == [b"seg-%05d-" % i for i in range(2000)]

    # a read starting in the middle of a later segment
    base = int(segments[3].stem)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "mid"})
    consumer.assign([TopicPartition(topic, 0, base + 3)])
    msg = None
    deadline = time.monotonic() + 60
    while msg is None and time.monotonic() < deadline:
        msg = consumer.poll(5)
    consumer.close()
    assert msg is not None, "no record in 60 s"
    assert msg.offset() == base + 3


def test_timestamps_out_of_range_are_refused_per_record(broker) -> None:
    """message.timestamp.before/after.max.ms: each record out of range is named (KIP-467);
    librdkafka fails it and the rest of its batch with the
    "different record" error; nothing is appended. In range, the same records pass."""
    topic = "timestamp-bounds"
    create_topic(
        broker.bootstrap,
        topic,
        1,
        {"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "60000"},
    )
    now = int(time.time() * 1000)
    stamps = {b"now": now, b"old": now - 3_600_000, b"future": now + 3_600_000}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    outcomes: dict[bytes, KafkaError | None] = {}
    for value, stamp in stamps.items():
        producer.produce(
            topic,
            value=value,
            partition=0,
            timestamp=stamp,
            on_delivery=lambda err, msg: outcomes.__setitem__(msg.value(), err),
        )
    assert producer.flush(10) == 0
    # librdkafka fails each record the broker names with INVALID_RECORD
    assert {value: err and err.code() for value, err in outcomes.items()} == {
        b"now": KafkaError._INVALID_DIFFERENT_RECORD,
        b"old": KafkaError.INVALID_RECORD,
        b"future": KafkaError.INVALID_RECORD,
    }
    delivered = _produce(broker.bootstrap, topic, [b"in range"], [int(time.time() * 1000)])
    assert delivered[0].offset() == 0
