"""What a user gets with the clients' default settings, against tuned ones, and why.

Starts a broker, fills a 6-partition topic with N records of 100 B, then measures with
confluent-kafka (librdkafka):
  - produce with the client's defaults (acks=all, linger.ms 5), and tuned (acks=1,
    linger.ms 5, 1 MB batches, a deep queue);
  - consume with the defaults in the loop most programs write (``poll()`` per record),
    the defaults with ``consume(1000)`` batches, and tuned (``fetch.queue.backoff.ms``
    10, ``queued.min.messages`` 1 M, batches); for each, the time the consumer sat idle
    in gaps longer than 200 ms (librdkafka's fetch backoff, 1 s by default);
  - what Strom answers to a Fetch with librdkafka's default limits (50 MB per request,
    1 MB per partition): bytes and whole batches per partition, and how long the broker
    takes to answer.
Prints one line per figure. Usage: python bench/client_defaults.py [--records N]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402
from raw_client import RawClient  # noqa: E402

RECORD = b"x" * 100
PARTITIONS = 6
GAP_S = 0.2

TUNED_PRODUCER = {
    "acks": "1",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_000_000,
}
TUNED_CONSUMER = {"fetch.queue.backoff.ms": 10, "queued.min.messages": 1_000_000}


def produce(bootstrap: str, topic: str, count: int, settings: dict) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, **settings})
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, RECORD)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return count / (time.perf_counter() - started)


def consume(bootstrap: str, topic: str, count: int, settings: dict, batch: int) -> tuple:
    """Records/s after the first record, and seconds idle in gaps over GAP_S."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"defaults-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **settings,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    first = last = 0.0
    idle = 0.0
    deadline = time.monotonic() + 300
    while seen < count and time.monotonic() < deadline:
        if batch == 1:
            message = consumer.poll(1.0)
            got = 0 if message is None or message.error() else 1
        else:
            got = sum(1 for m in consumer.consume(batch, 1.0) if not m.error())
        if not got:
            continue
        now = time.perf_counter()
        if seen == 0:
            first = now
        elif now - last > GAP_S:
            idle += now - last
        last = now
        seen += got
    consumer.close()
    return seen / (last - first), idle, last - first


def fetch_shape(port: int, topic: str) -> str:
    """A Fetch with librdkafka's default limits from offset 0 of every partition."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    from strom.protocol.records import iter_headers

    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=52_428_800,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=tuple(
                    FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1_048_576)
                    for p in range(PARTITIONS)
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    with RawClient(port) as client:
        started = time.perf_counter()
        response = client.request(request)
        took = time.perf_counter() - started
    parts = response.responses[0].partitions
    sizes = [len(p.records) for p in parts]
    batches = [sum(1 for _ in iter_headers(bytes(p.records))) for p in parts]
    return (
        f"bytes per partition {min(sizes):,}-{max(sizes):,} (limit 1,048,576), "
        f"batches per partition {min(batches)}-{max(batches)}, answered in {took * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    count = args.records
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data")
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for name in ("defaults", "tuned"):
                admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(60)
            rate = produce(broker.bootstrap, "defaults", count, {})
            print(f"produce, client defaults (acks=all, linger.ms 5): {rate:,.0f} records/s")
            rate = produce(broker.bootstrap, "tuned", count, TUNED_PRODUCER)
            print(f"produce, tuned (acks=1, 1 MB batches):            {rate:,.0f} records/s")
            print(f"fetch with librdkafka's default limits: {fetch_shape(broker.port, 'tuned')}")
            for label, settings, batch in (
                ("consume, client defaults, poll() per record", {}, 1),
                ("consume, client defaults, consume(1000)     ", {}, 1000),
                ("consume, tuned, consume(1000)               ", TUNED_CONSUMER, 1000),
            ):
                rate, idle, took = consume(broker.bootstrap, "tuned", count, settings, batch)
                print(
                    f"{label}: {rate:,.0f} records/s; idle in gaps over "
                    f"{GAP_S * 1000:.0f} ms: {idle:.2f} s of {took:.2f} s"
                )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
