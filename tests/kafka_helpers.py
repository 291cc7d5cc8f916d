"""Helpers the integration tests share: create topics and read them with confluent-kafka."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AclBinding, AclBindingFilter, AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition


def create_topic(bootstrap: str, name: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
    )
    futures[name].result(timeout=10)


def _consumer(bootstrap: str, topic: str, **extra) -> tuple[Consumer, list[int]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "enable.auto.commit": False,
            **extra,
        }
    )
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    return consumer, partitions


def consume_all(
    bootstrap: str, topic: str, expected: int, timeout: float = 30.0, **extra
) -> list[Message]:
    """Read from the log start of every partition until ``expected`` records arrived."""
    consumer, _ = _consumer(bootstrap, topic, **extra)
    messages: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(messages) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        messages.append(msg)
    consumer.close()
    return messages


def consume_to_end(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Message]:
    """Read every partition from its log start to its end (partition EOF)."""
    consumer, partitions = _consumer(bootstrap, topic, **{"enable.partition.eof": True})
    at_end: set[int] = set()
    messages: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(at_end) < len(partitions) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            raise KafkaException(msg.error())
        at_end.discard(msg.partition())
        messages.append(msg)
    consumer.close()
    assert len(at_end) == len(partitions), "did not reach the end of every partition"
    return messages


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` every 0.1 s; fail the test naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def read_with_kafka_python(bootstrap: str, topic: str, last_offset: int, idle_s: float = 10):
    """Records of partition 0 of ``topic`` read by kafka-python from its beginning up to
    the one at ``last_offset``, or until ``idle_s`` passes without a record."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=int(idle_s * 1000),
    )
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records = []
    for record in consumer:
        records.append(record)
        if record.offset >= last_offset:
            break
    consumer.close()
    return records


def read_with_aiokafka(bootstrap: str, topic: str, last_offset: int):
    """Records of partition 0 of ``topic`` read by aiokafka from its beginning up to the
    one at ``last_offset``; each fetch may wait 10 s."""

    async def read() -> list:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            atp = AioTopicPartition(topic, 0)
            consumer.assign([atp])
            await consumer.seek_to_beginning(atp)
            records: list = []
            deadline = time.monotonic() + 60
            while not records or records[-1].offset < last_offset:
                assert time.monotonic() < deadline, f"aiokafka did not reach {last_offset}"
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 10)
                records += [r for got in batch.values() for r in got]
            return records
        finally:
            await consumer.stop()

    return asyncio.run(read())


def delete_acls(admin: AdminClient, *bindings: AclBinding, timeout: float = 10) -> None:
    """Delete exactly ``bindings`` (a filter matching each one), waiting for each answer."""
    filters = [
        AclBindingFilter(
            b.restype,
            b.name,
            b.resource_pattern_type,
            b.principal,
            b.host,
            b.operation,
            b.permission_type,
        )
        for b in bindings
    ]
    for future in admin.delete_acls(filters).values():
        future.result(timeout)
