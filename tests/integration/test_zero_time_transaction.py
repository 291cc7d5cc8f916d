"""``strom.zero_time.ZeroTimeTransaction`` against a real broker: records written in a
Kafka transaction by Strom's own requests keep their timestamps, 0 included (librdkafka
would stamp a 0 with the time of sending), become visible to read_committed readers at
the commit with the group offset sent with them, and stay unseen when aborted."""

from __future__ import annotations

import uuid

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    TopicPartition,
)
from kafka_helpers import create_topic

from strom.zero_time import ZeroTimeRecord, ZeroTimeTransaction


def _read(
    bootstrap: str, topic: str, isolation: str, partitions: int
) -> list[tuple[int, int, bytes | None]]:
    """(partition, CreateTime, value) of every record to each partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    found: list[tuple[int, int, bytes | None]] = []
    at_end: set[int] = set()
    idle = 0
    try:
        while len(at_end) < partitions and idle < 60:
            message = consumer.poll(0.5)
            if message is None:
                idle += 1
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            kind, stamp = message.timestamp()
            assert kind == TIMESTAMP_CREATE_TIME
            found.append((message.partition(), stamp, message.value()))
    finally:
        consumer.close()
    assert len(at_end) == partitions, "did not reach the end of every partition"
    return sorted(found)


def test_a_transaction_keeps_a_timestamp_of_0_and_commits_its_offset(broker) -> None:
    topic = f"zt-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    transactional_id = f"zt-tx-{topic}"
    config = {"bootstrap.servers": broker.bootstrap}
    with ZeroTimeTransaction(config, transactional_id) as transaction:
        transaction.init()
        transaction.send(
            [
                ZeroTimeRecord(topic, b"a", b"zero", partition=0),
                ZeroTimeRecord(topic, b"b", b"five", partition=1, timestamp=5),
            ]
        )
        transaction.send([ZeroTimeRecord(topic, b"c", b"zero again", partition=0)])
        transaction.send_offsets(transactional_id, topic, 0, 3, "micro-batch 3")
        transaction.commit()
    expected = [(0, 0, b"zero"), (0, 0, b"zero again"), (1, 5, b"five")]
    assert _read(broker.bootstrap, topic, "read_committed", 2) == expected
    marker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": transactional_id})
    try:
        (committed,) = marker.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        marker.close()
    assert (committed.offset, committed.metadata) == (3, "micro-batch 3")

    # The next run of the same id: a new epoch; what it aborts is never read committed.
    with ZeroTimeTransaction(config, transactional_id) as transaction:
        transaction.init()
        transaction.send([ZeroTimeRecord(topic, b"d", b"aborted", partition=1)])
        transaction.abort()
    assert _read(broker.bootstrap, topic, "read_committed", 2) == expected
    uncommitted = _read(broker.bootstrap, topic, "read_uncommitted", 2)
    assert (1, 0, b"aborted") in uncommitted
