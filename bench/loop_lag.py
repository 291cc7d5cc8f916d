"""The broker's event-loop lag under mixed work: does anything make every client wait?

Starts a real broker with an admin listener and a time-based flush (log.flush.interval.ms,
so the periodic duty fsyncs every partition often; checkpoints every second), fills a
topic of several segments, restarts the broker (so that the fill's start-up is not
counted) and then, for --seconds, at once:
  - a producer of 100-B records (confluent-kafka, the client's defaults) at --rate;
  - a consumer tailing that topic;
  - a consumer catching up from the start of the filled topic (its old segments; the
    page cache is dropped first where this machine allows it, making them cold);
  - a metadata change every second (a topic created, or a config altered).
The loop's lag is read from ``/metrics`` (``strom_event_loop_lag_seconds``, sampled every
10 ms by the broker): p50, p99 (the upper bound of the bucket holding it) and the worst
since the probe started; beside them what the producer and the tailing consumer moved.

With --baseline REV, then: produce and consume of 100-B records (the client tuned and
with its defaults) against a broker of this tree and one of REV, both up at once and
served bursts in turn (bench/same_run.py): rates, the broker's CPU a record and a
request; what moving the disk off the loop cost the ordinary paths. --skip-lag runs
that comparison alone.

Usage: python bench/loop_lag.py [--seconds S] [--rate R] [--fill N]
                                [--baseline REV [--records N] [--rounds R] [--skip-lag]]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from broker_process import BrokerProcess  # noqa: E402

LAG = "strom_event_loop_lag_seconds"
SAMPLE = re.compile(r'^(\w+)(?:\{le="([^"]+)"\})? (\S+)$')


def scrape(port: int) -> tuple[dict[float, float], float, float]:
    """(cumulative bucket counts by upper bound, count, worst lag) from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    buckets: dict[float, float] = {}
    count = worst = 0.0
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        name, le, number = match.groups()
        if name == f"{LAG}_bucket" and le is not None:
            buckets[float(le)] = float(number)
        elif name == f"{LAG}_count":
            count = float(number)
        elif name == "strom_event_loop_lag_max_seconds":
            worst = float(number)
    return buckets, count, worst


def quantile_bound(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding quantile ``q`` of the lags between scrapes."""
    total = after[float("inf")] - before.get(float("inf"), 0.0)
    for bound in sorted(after):
        if after[bound] - before.get(bound, 0.0) >= q * total:
            return bound
    return float("inf")


def fill(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, b"c" * 100)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)


def drop_page_cache() -> bool:
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=int, default=20_000, help="records/s produced")
    parser.add_argument("--fill", type=int, default=2_000_000, help="records in the cold topic")
    parser.add_argument("--baseline", help="a commit to compare produce and consume with")
    parser.add_argument("--records", type=int, default=200_000, help="per comparison burst")
    parser.add_argument("--rounds", type=int, default=5, help="comparison bursts per path")
    parser.add_argument("--skip-lag", action="store_true", help="the comparison alone")
    args = parser.parse_args()
    if not args.skip_lag:
        lag(args)
    if args.baseline:
        from same_run import compare  # bench/ is this script's directory

        with tempfile.TemporaryDirectory(prefix="strom-loop-lag-cmp-") as scratch:
            compare(Path(scratch), args.baseline, args.records, args.rounds)


def lag(args: argparse.Namespace) -> None:

    with tempfile.TemporaryDirectory(prefix="strom-loop-lag-") as scratch:
        broker = BrokerProcess(Path(scratch) / "data")
        broker.overrides.update(
            {
                "admin.listeners": f"http://127.0.0.1:{broker.extra_port('admin')}",
                "log.flush.interval.ms": "200",
                "log.flush.scheduler.interval.ms": "100",
                "log.flush.offset.checkpoint.interval.ms": "1000",
                "log.segment.bytes": str(32 << 20),
            }
        )
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        cold, hot = "cold", "hot"
        for name in (cold, hot):
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
        started = time.monotonic()
        fill(broker.bootstrap, cold, args.fill)
        print(f"filled {cold}: {args.fill:,} records in {time.monotonic() - started:.1f} s")
        broker.stop()
        cold_cache = drop_page_cache()
        broker.start()
        port = broker.ports["admin"]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        time.sleep(2)

        stop = threading.Event()
        moved = {"produced": 0, "tailed": 0, "caught_up": 0, "metadata": 0}

        def produce() -> None:
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            interval = 1 / args.rate
            due = time.monotonic()
            while not stop.is_set():
                due += interval * 100
                for _ in range(100):
                    try:
                        producer.produce(hot, b"h" * 100)
                    except BufferError:
                        producer.poll(0.01)
                moved["produced"] += 100
                producer.poll(0)
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            producer.flush(30)

        def consume(topic: str, key: str, reset: str) -> None:
            consumer = Consumer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "group.id": f"lag-{uuid.uuid4().hex[:6]}",
                    "auto.offset.reset": reset,
                    "enable.auto.commit": False,
                }
            )
            consumer.subscribe([topic])
            while not stop.is_set():
                for message in consumer.consume(1000, 0.2):
                    if message.error() is None:
                        moved[key] += 1
            consumer.close()

        def change_metadata() -> None:
            turn = 0
            while not stop.wait(1.0):
                if turn % 2 == 0:
                    name = f"meta-{turn}"
                    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
                else:
                    retention = ConfigEntry(
                        "retention.ms",
                        str(86_400_000 + turn),
                        incremental_operation=AlterConfigOpType.SET,
                    )
                    resource = ConfigResource("topic", hot, incremental_configs=[retention])
                    admin.incremental_alter_configs([resource])[resource].result(15)
                moved["metadata"] += 1
                turn += 1

        before, _, _ = scrape(port)
        workers = [
            threading.Thread(target=produce),
            threading.Thread(target=consume, args=(hot, "tailed", "latest")),
            threading.Thread(target=consume, args=(cold, "caught_up", "earliest")),
            threading.Thread(target=change_metadata),
        ]
        for worker in workers:
            worker.start()
        time.sleep(args.seconds)
        after, count, worst = scrape(port)
        stop.set()
        for worker in workers:
            worker.join(60)
        broker.stop()

    samples = after[float("inf")] - before.get(float("inf"), 0.0)
    cache = "page cache dropped" if cold_cache else "page cache kept (no permission)"
    print(f"cold segments: {cache}")
    print(
        f"moved in {args.seconds:.0f} s: produced {moved['produced'] / args.seconds:,.0f}/s, "
        f"tailed {moved['tailed'] / args.seconds:,.0f}/s, caught up "
        f"{moved['caught_up'] / args.seconds:,.0f}/s, {moved['metadata']} metadata changes"
    )
    print(
        f"event-loop lag over {samples:,.0f} samples: p50 <= "
        f"{quantile_bound(before, after, 0.5) * 1000:g} ms, p99 <= "
        f"{quantile_bound(before, after, 0.99) * 1000:g} ms, max {worst * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
