"""kafka-python, aiokafka and kcat against a real broker."""

from __future__ import annotations

import asyncio
import subprocess

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic


def test_kafka_python_admin_produce_consume(broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("kp-topic", num_partitions=3, replication_factor=1)])
    assert "kp-topic" in admin.list_topics()
    (described,) = admin.describe_topics(["kp-topic"])
    assert {"READ", "WRITE", "DESCRIBE"} <= set(described["authorized_operations"])
    admin.close()

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    futures = [
        producer.send("kp-topic", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3)
        for i in range(300)
    ]
    producer.flush()
    metas = [f.get(timeout=10) for f in futures]
    producer.close()
    assert sorted(m.offset for m in metas if m.partition == 0) == list(range(100))

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    partitions = [TopicPartition("kp-topic", p) for p in range(3)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    got = {p: [] for p in range(3)}
    for msg in consumer:
        got[msg.partition].append((msg.offset, msg.value))
        if sum(len(v) for v in got.values()) == 300:
            break
    consumer.close()
    for p in range(3):
        assert [o for o, _ in got[p]] == list(range(100))
        assert [v for _, v in got[p]] == [b"v%d" % i for i in range(p, 300, 3)]


def test_aiokafka_produce_consume(broker) -> None:
    async def scenario() -> list[tuple[int, bytes]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", compression_type="gzip"
        )
        await producer.start()
        try:
            for i in range(200):
                await producer.send("aio-topic", value=b"m%d" % i, partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            tp = AioTopicPartition("aio-topic", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out: list[tuple[int, bytes]] = []
            while len(out) < 200:
                batch = await consumer.getmany(tp, timeout_ms=5000)
                if not batch:
                    break
                out += [(m.offset, m.value) for m in batch.get(tp, [])]
            return out
        finally:
            await consumer.stop()

    received = asyncio.run(scenario())
    assert received == [(i, b"m%d" % i) for i in range(200)]


def test_kcat_metadata_and_round_trip(broker) -> None:
    subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-P", "-t", "kcat-topic"],
        input=b"warm-up\n",
        check=True,
        timeout=30,
    )
    listing = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-L"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert f"broker 1 at 127.0.0.1:{broker.port}" in listing
    assert 'topic "kcat-topic" with 1 partitions' in listing

    lines = [f"line {i} " + "x" * (i % 17) for i in range(10_000)]
    subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-P", "-t", "kcat-topic"],
        input="\n".join(lines).encode() + b"\n",
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", "kcat-topic", "-o", "beginning", "-e", "-q"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    assert out.splitlines() == ["warm-up"] + lines
