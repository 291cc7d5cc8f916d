"""What metrics cost: produce and consume throughput against a broker with the admin
listener (metrics kept, scraped every 5 s as Prometheus would) and one without, in the
same run, rounds alternated (which broker goes first too); medians printed. Also the
time metrics add to one request (measured in-process, without the network), and the
time one scrape of /metrics takes with many topics.

    .venv/bin/python bench/metrics.py [--records N] [--rounds N] [--topics N]

confluent-kafka with its defaults for produce except acks=1 (librdkafka's defaults
batch), consuming with fetch.queue.backoff.ms=10 (see docs/performance.md); 100-byte
records to a 1-partition topic per round. Delivery reports without error are counted,
not records handed to the client.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess, free_port  # noqa: E402

RECORD = b"x" * 100


def produce(bootstrap: str, topic: str, count: int) -> float:
    delivered = 0

    def on_delivery(error, _message) -> None:
        nonlocal delivered
        if error is None:
            delivered += 1

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1"})
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, RECORD, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    assert delivered == count, f"{count - delivered} records not acknowledged"
    return count / elapsed


def consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen, first = 0, 0.0
    deadline = time.monotonic() + 300
    while seen < count and time.monotonic() < deadline:
        got = sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
        if got and not seen:
            first = time.perf_counter()
        seen += got
    elapsed = time.perf_counter() - first
    consumer.close()
    assert seen >= count, f"read {seen} of {count}"
    return count / elapsed


class Scraper(threading.Thread):
    """GETs /metrics every ``every`` seconds, as a Prometheus server would."""

    def __init__(self, url: str, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.url, self.every = url, every
        self.stopped = threading.Event()
        self.times: list[float] = []

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            started = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=30) as response:
                response.read()
            self.times.append(time.perf_counter() - started)


def per_request_cost(calls: int = 200_000) -> float:
    """Microseconds the request path spends on metrics for one Produce request of one
    batch: the batch counted, the request's count, time and queue time recorded."""
    from types import SimpleNamespace

    from strom.broker.metrics import BrokerMetrics
    from strom.broker.network.router import RequestContext
    from strom.protocol.framing import codec_for

    metrics = BrokerMetrics()
    ctx = RequestContext(None, 0, 9, 0, None, codec_for(0, 9), "bench", {})  # type: ignore[arg-type]
    header = SimpleNamespace(size=16_384, record_count=150)
    response = SimpleNamespace(throttle_time=None)
    started = time.perf_counter()
    for _ in range(calls):
        ctx.started_ns = time.perf_counter_ns()
        metrics.appended("bench", (header,))
        metrics.request_done(ctx, None, response)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topics", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        admin_port = free_port()
        on = BrokerProcess(Path(tmp) / "on", {"admin.listeners": f"http://127.0.0.1:{admin_port}"})
        off = BrokerProcess(Path(tmp) / "off")
        on.start()
        off.start()
        url = f"http://127.0.0.1:{admin_port}/metrics"
        results: dict[str, dict[str, list[float]]] = {
            "on": {"produce": [], "consume": []},
            "off": {"produce": [], "consume": []},
        }
        cost_us = per_request_cost()
        print(f"metrics on the request path: {cost_us:.2f} µs per Produce request")
        try:
            for round_ in range(args.rounds):
                order = [("on", on), ("off", off)]
                if round_ % 2:
                    order.reverse()
                for name, broker in order:
                    topic = f"bench-{round_}"
                    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                    scraper = Scraper(url) if name == "on" else None
                    if scraper is not None:
                        scraper.start()
                    results[name]["produce"].append(produce(broker.bootstrap, topic, args.records))
                    results[name]["consume"].append(consume(broker.bootstrap, topic, args.records))
                    if scraper is not None:
                        scraper.stopped.set()
            for kind in ("produce", "consume"):
                with_metrics = statistics.median(results["on"][kind])
                without = statistics.median(results["off"][kind])
                print(
                    f"{kind} 100 B records: metrics on {with_metrics:,.0f}/s, off "
                    f"{without:,.0f}/s ({with_metrics / without:.3f}x)  [rounds on: "
                    f"{', '.join(f'{v / 1000:.0f}k' for v in results['on'][kind])}; off: "
                    f"{', '.join(f'{v / 1000:.0f}k' for v in results['off'][kind])}]"
                )
            admin = AdminClient({"bootstrap.servers": on.bootstrap})
            names = [f"many-{i}" for i in range(args.topics)]
            for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
                future.result(120)
            scrapes = []
            for _ in range(5):
                started = time.perf_counter()
                with urllib.request.urlopen(url, timeout=60) as response:
                    body = response.read()
                scrapes.append(time.perf_counter() - started)
            print(
                f"one scrape with {args.topics + 50:,} partitions: "
                f"{statistics.median(scrapes) * 1000:.0f} ms, {len(body) / 1e6:.1f} MB"
            )
        finally:
            on.stop()
            off.stop()


if __name__ == "__main__":
    main()
