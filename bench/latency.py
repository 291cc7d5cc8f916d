"""End-to-end latency: produce at a fixed rate, measure until a consumer has each record.

Owns the latency figure of issue 3: one confluent-kafka producer sends 100-B records
at a steady rate (default 10,000/s) with ``linger.ms=0`` and acks=1; one
confluent-kafka consumer in another process long-polls the same topic. Each value
carries the time it was scheduled to be sent (start + i / rate, on
``time.monotonic_ns()``, one clock for every process on the machine), not the time it
was handed over, so a producer that falls behind schedule has that delay counted too
(no coordinated omission); the consumer records the delay when it gets the record.
Prints the achieved send rate, how far behind schedule the sender fell, and
p50/p95/p99/p99.9/max over the records after a warm-up second. A run whose sender fell
behind (achieved rate under 99% of the target, or a record handed over more than
``--max-behind-ms`` after its time) or whose deliveries failed is refused: one line
saying why, exit code 1.

    ./dev bench latency [--rate 10000] [--seconds 10] [--partitions 1] [--max-behind-ms 100]
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


class Sent:
    """What the sender achieved: records, seconds, the worst lateness, failed deliveries."""

    def __init__(self) -> None:
        self.records = 0
        self.seconds = 0.0
        self.max_behind_ms = 0.0
        self.delivered = 0
        self.failed = 0
        self.first_error = ""

    def on_delivery(self, err, _msg) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            self.first_error = self.first_error or str(err)


def produce(bootstrap: str, topic: str, rate: int, seconds: float) -> Sent:
    """Send ``rate`` records a second for ``seconds``, each stamped with its scheduled time."""
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
    sent = Sent()
    started_ns = time.monotonic_ns()
    for i in range(total):
        due_ns = started_ns + i * 1_000_000_000 // rate
        ahead = (due_ns - time.monotonic_ns()) / 1e9
        if ahead > 0:
            time.sleep(ahead)  # sleeping, not spinning: the broker needs the cores
        else:
            sent.max_behind_ms = max(sent.max_behind_ms, -ahead * 1000)
        value = STAMP.pack(due_ns) + padding  # the intended send time, not "now"
        while True:
            try:
                producer.produce(topic, value, on_delivery=sent.on_delivery)
                break
            except BufferError:  # queue full: wait for it, the record stays late
                producer.poll(0.001)
        producer.poll(0)
    sent.seconds = (time.monotonic_ns() - started_ns) / 1e9
    sent.records = total
    left = producer.flush(30)
    sent.failed += left
    return sent


def percentile(ordered: list[int], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000, help="records per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to produce")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument(
        "--max-behind-ms",
        type=float,
        default=100.0,
        help="refuse the run if a record was handed over this late",
    )
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
            sent = produce(broker.bootstrap, "latency", args.rate, args.seconds)
            latencies = out.get(timeout=150)
            reader.join(10)
        finally:
            broker.stop()

    achieved = sent.records / sent.seconds
    print(
        f"sent {sent.records:,} records in {sent.seconds:.2f} s: {achieved:,.0f} records/s "
        f"of the {args.rate:,} asked for; at worst {sent.max_behind_ms:.1f} ms behind schedule; "
        f"{sent.delivered:,} delivered, {sent.failed:,} failed"
    )
    refused = []
    if achieved < 0.99 * args.rate:
        refused.append(f"achieved {achieved:,.0f} records/s, under 99% of {args.rate:,}")
    if sent.max_behind_ms > args.max_behind_ms:
        refused.append(
            f"a record was handed over {sent.max_behind_ms:.1f} ms after its scheduled time "
            f"(limit {args.max_behind_ms:g} ms)"
        )
    if sent.failed or sent.delivered != sent.records:
        refused.append(f"{sent.failed:,} deliveries failed ({sent.first_error or 'not reported'})")
    warmup = args.rate  # the first second: connections and caches settle
    measured = sorted(latencies[warmup:])
    if len(latencies) < total:
        refused.append(f"only {len(latencies):,} of {total:,} records arrived")
    elif not measured:
        refused.append("no record after the 1 s warm-up: run for longer")
    if refused:
        print("REFUSED: the run fell behind its schedule or lost records: " + "; ".join(refused))
        sys.exit(1)
    print(
        f"end-to-end latency from each record's scheduled send time, {args.rate:,} records/s "
        f"of {RECORD_SIZE} B, linger.ms=0, acks=1, {args.partitions} partition(s), "
        f"{len(measured):,} records after a 1 s warm-up:"
    )
    print(
        f"  p50 {percentile(measured, 0.50):.2f} ms   p95 {percentile(measured, 0.95):.2f} ms   "
        f"p99 {percentile(measured, 0.99):.2f} ms   p99.9 {percentile(measured, 0.999):.2f} ms   "
        f"max {measured[-1] / 1000:.2f} ms   mean {statistics.fmean(measured) / 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
