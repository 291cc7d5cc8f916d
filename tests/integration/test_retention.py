"""Retention over the wire: retention.ms and retention.bytes delete the oldest closed
segments on the broker's check interval, the log start offset moves, and a consumer
positioned below it is reset by auto.offset.reset."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
)
from kafka_helpers import create_topic

DAY = 86_400_000
VALUE = b"x" * 600  # with segment.bytes=1000 every record gets a segment of its own


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("retention") / "data",
        {"log.retention.check.interval.ms": "200"},
    )
    process.start()
    yield process
    if process.alive():
        process.stop()


def _produce(bootstrap: str, topic: str, timestamps: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for ts in timestamps:
        producer.produce(topic, value=VALUE, partition=0, timestamp=ts)
        producer.flush(10)  # one batch per record
    assert len(producer) == 0


def _earliest(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset


def _wait_for_earliest(bootstrap: str, topic: str, expected: int, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while (earliest := _earliest(bootstrap, topic)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return earliest


def _segment_files(broker: BrokerProcess, topic: str, suffix: str) -> list[int]:
    directory = Path(broker.data_dir) / f"{topic}-0"
    return sorted(int(p.name[:20]) for p in directory.iterdir() if p.name.endswith(suffix))


def test_retention_by_time_and_consumer_reset(broker) -> None:
    topic = "retained-by-time"
    create_topic(broker.bootstrap, topic, 1, {"segment.bytes": "1000", "retention.ms": str(DAY)})
    now = int(time.time() * 1000)
    _produce(broker.bootstrap, topic, [now - 3 * DAY] * 6 + [now] * 4)
    assert _wait_for_earliest(broker.bootstrap, topic, 6) == 6
    assert _segment_files(broker, topic, ".log") == [6, 7, 8, 9]
    # file.delete.delay.ms (60 s by default): the old files wait under *.deleted
    assert _segment_files(broker, topic, ".log.deleted") == [0, 1, 2, 3, 4, 5]

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 2)])  # below the log start offset
    offsets = []
    deadline = time.monotonic() + 20
    while len(offsets) < 4 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            offsets.append(msg.offset())
    consumer.close()
    assert offsets == [6, 7, 8, 9]


def test_retention_by_size(broker) -> None:
    topic = "retained-by-size"
    create_topic(broker.bootstrap, topic, 1, {"segment.bytes": "1000", "file.delete.delay.ms": "0"})
    _produce(broker.bootstrap, topic, [int(time.time() * 1000)] * 10)
    directory = Path(broker.data_dir) / f"{topic}-0"
    sizes = [(directory / f"{base:020d}.log").stat().st_size for base in range(10)]
    assert len(set(sizes)) == 1
    # Keep at least 3.5 segments' worth: four segments stay, the six oldest go.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry(
        "retention.bytes", str(sizes[0] * 7 // 2), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(10)
    assert _wait_for_earliest(broker.bootstrap, topic, 6) == 6
    assert _segment_files(broker, topic, ".log") == [6, 7, 8, 9]
    assert _segment_files(broker, topic, ".deleted") == []  # no delay: unlinked at once
