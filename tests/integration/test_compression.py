"""Broker-side compression: a topic with compression.type=zstd stores zstd batches
for a producer that sends them uncompressed, and every client reads them back;
``producer`` keeps what the producer sent."""

from __future__ import annotations

import subprocess
from pathlib import Path

from confluent_kafka import Producer
from kafka_helpers import (
    consume_to_end,
    create_topic,
    read_with_aiokafka,
    read_with_kafka_python,
)

from strom.protocol.records import CODEC_GZIP, CODEC_ZSTD, iter_headers

VALUES = [b"value %d " % i + b"z" * (i % 50) for i in range(300)]


def _produce(bootstrap: str, topic: str, compression: str, values: list[bytes] = VALUES) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 200}
    )
    for i, value in enumerate(values):
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

    read = read_with_kafka_python(broker.bootstrap, topic, len(VALUES) - 1, idle_s=5)
    assert [r.value for r in read] == VALUES
    read = read_with_aiokafka(broker.bootstrap, topic, len(VALUES) - 1)
    assert [r.value for r in read] == VALUES

    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert out.split(b"\n")[: len(VALUES)] == VALUES


def test_producer_setting_keeps_the_producers_codec(broker) -> None:
    # Values that gzip shrinks even one at a time: librdkafka sends a batch uncompressed
    # when compressing would not make it smaller, and how it batches depends on timing.
    values = [b"value %d " % i + b"z" * 200 for i in range(300)]
    topic = "gzip-as-sent"
    create_topic(broker.bootstrap, topic, 1)
    _produce(broker.bootstrap, topic, "gzip", values)
    assert _stored_codecs(broker, topic) == {CODEC_GZIP}
    assert [m.value() for m in consume_to_end(broker.bootstrap, topic)] == values
