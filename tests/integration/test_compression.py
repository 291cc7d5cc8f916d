"""Broker-side compression: a topic with compression.type=zstd stores zstd batches
for a producer that sends them uncompressed, and every client reads them back;
``producer`` keeps what the producer sent."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka_helpers import consume_to_end, create_topic

from strom.protocol.records import CODEC_GZIP, CODEC_ZSTD, iter_headers

VALUES = [b"value %d " % i + b"z" * (i % 50) for i in range(300)]


def _produce(bootstrap: str, topic: str, compression: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 200}
    )
    for i, value in enumerate(VALUES):
        producer.produce(topic, key=b"k%d" % i, value=value, partition=0)
    assert producer.flush(10) == 0


def _stored_codecs(broker, topic: str) -> set[int]:
    data = (Path(broker.data_dir) / f"{topic}-0" / f"{0:020d}.log").read_bytes()
    return {header.codec for header in iter_headers(data)}


def test_zstd_topic_recompresses_and_every_client_reads(broker) -> None:
    topic = "zstd-topic"
    create_topic(broker.bootstrap, topic, 1, {"compression.type": "zstd"})
    _produce(broker.bootstrap, topic, "none")
    assert _stored_codecs(broker, topic) == {CODEC_ZSTD}

    assert [m.value() for m in consume_to_end(broker.bootstrap, topic)] == VALUES

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == len(VALUES):
            break
    consumer.close()
    assert got == VALUES

    async def aio() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            atp = AioTopicPartition(topic, 0)
            consumer.assign([atp])
            await consumer.seek_to_beginning(atp)
            out: list[bytes] = []
            while len(out) < len(VALUES):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 10)
                out += [r.value for records in batch.values() for r in records]
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(aio()) == VALUES

    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert out.split(b"\n")[: len(VALUES)] == VALUES


def test_producer_setting_keeps_the_producers_codec(broker) -> None:
    topic = "gzip-as-sent"
    create_topic(broker.bootstrap, topic, 1)
    _produce(broker.bootstrap, topic, "gzip")
    assert _stored_codecs(broker, topic) == {CODEC_GZIP}
    assert [m.value() for m in consume_to_end(broker.bootstrap, topic)] == VALUES
