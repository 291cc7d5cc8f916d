"""End-to-end latency: produce at a fixed rate, measure until a consumer has each record.

Owns the latency figure of issue 3: one confluent-kafka producer sends 100-B records
at a steady rate (default 10,000/s) with ``linger.ms=0`` and acks=1; one
confluent-kafka consumer in another process long-polls the same topic. Each value
carries the send time from ``time.monotonic_ns()`` (one clock for every process on
the machine), and the consumer records the delay when it gets the record. Prints
p50/p95/p99/p99.9/max over the records after a warm-up second.

    ./dev bench latency [--rate 10000] [--seconds 10] [--partitions 1]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from produce_consume import create  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402

STAMP = struct.Struct(">q")
RECORD_SIZE = 100


def consume(bootstrap: str, topic: str, partitions: int, count: int, ready, out) -> None:
    """Consumer process: wait for ``count`` records, send back their latencies in µs."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "latency",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "fetch.min.bytes": 1,
            "fetch.error.backoff.ms": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    consumer.consume(1, 1.0)  # connected and fetching before the producer starts
    ready.set()
    latencies: list[int] = []
    deadline = time.monotonic() + 120
    while len(latencies) < count and time.monotonic() < deadline:
        message = consumer.poll(0.1)  # returns as soon as one record is there
        if message is not None and message.error() is None:
            now = time.monotonic_ns()
            latencies.append((now - STAMP.unpack_from(message.value())[0]) // 1000)
    consumer.close()
    out.put(latencies)


def produce(bootstrap: str, topic: str, rate: int, seconds: float) -> int:
    """Send ``rate`` records a second for ``seconds``, each stamped as it is handed over."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 0,
            "enable.idempotence": False,
            "compression.type": "none",
        }
    )
    padding = b"p" * (RECORD_SIZE - STAMP.size)
    total = int(rate * seconds)
    interval = 1.0 / rate
    started = time.monotonic()
    for i in range(total):
        due = started + i * interval
        ahead = due - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)  # sleeping, not spinning: the broker needs the cores
        producer.produce(topic, STAMP.pack(time.monotonic_ns()) + padding)
        producer.poll(0)
    producer.flush(30)
    return total


def percentile(ordered: list[int], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000, help="records per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to produce")
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="strom-latency-") as tmp:
        broker = BrokerProcess(Path(tmp) / "strom", {})
        broker.start()
        try:
            create(broker.bootstrap, "latency", args.partitions)
            total = int(args.rate * args.seconds)
            ready, out = mp.Event(), mp.Queue()
            reader = mp.Process(
                target=consume,
                args=(broker.bootstrap, "latency", args.partitions, total, ready, out),
            )
            reader.start()
            ready.wait(30)
            produce(broker.bootstrap, "latency", args.rate, args.seconds)
            latencies = out.get(timeout=150)
            reader.join(10)
        finally:
            broker.stop()

    warmup = args.rate  # the first second: connections and caches settle
    measured = sorted(latencies[warmup:])
    if len(latencies) < total or not measured:
        print(f"only {len(latencies):,} of {total:,} records arrived")
        sys.exit(1)
    print(
        f"end-to-end latency, {args.rate:,} records/s of {RECORD_SIZE} B, linger.ms=0, acks=1, "
        f"{args.partitions} partition(s), {len(measured):,} records after a 1 s warm-up:"
    )
    print(
        f"  p50 {percentile(measured, 0.50):.2f} ms   p95 {percentile(measured, 0.95):.2f} ms   "
        f"p99 {percentile(measured, 0.99):.2f} ms   p99.9 {percentile(measured, 0.999):.2f} ms   "
        f"max {measured[-1] / 1000:.2f} ms   mean {statistics.fmean(measured) / 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
