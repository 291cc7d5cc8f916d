"""Produce and consume throughput with one confluent-kafka client, and broker RSS.

Starts a real broker process on a free port with its data in a temp dir, then:
  1. produces N records of 100 B to a 6-partition topic (acks=1, then acks=all) with
     bench/compare's tuned client settings (printed), counted from the broker: the
     topic's end offsets must have grown by N and no delivery may have failed,
  2. consumes them back with one consumer, then reads back what acks=all wrote,
  3. creates 1,000 partitions, writes one record to each, reads the broker's RSS,
     and times a restart with them.
Prints one line per figure. Usage: python bench/produce_consume.py [--records N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402

RECORD = b"x" * 100


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)


def produce(bootstrap: str, topic: str, count: int, acks: str) -> float:
    """Records/s the broker stored (as bench/compare counts: end offsets, failed deliveries)."""
    from compare_strom import produce as produce_figure

    fig = produce_figure(bootstrap, topic, count, 100, acks, 300)
    if fig.value is None:
        raise SystemExit(f"produce acks={acks}: {fig.note}")
    return fig.value


def consume(bootstrap: str, topic: str, count: int, partitions: int) -> float:
    """Records/s of one consumer reading ``count`` records (as bench/compare reads)."""
    from compare_strom import consume as consume_figure

    fig = consume_figure(bootstrap, topic, count, partitions, 300)
    if fig.value is None:
        raise SystemExit(f"consume: {fig.note}")
    print(f"  consumer: {fig.note}")
    return fig.value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions-for-rss", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"log.segment.bytes": "268435456"})
        broker.start()
        try:
            create(broker.bootstrap, "bench1", 6)
            create(broker.bootstrap, "benchall", 6)
            from compare_strom import non_default, read_back, tuned_producer

            producer_settings = {**tuned_producer("1"), "delivery.report.only.error": True}
            print(f"  producer settings not librdkafka's default: {non_default(producer_settings)}")
            rate = produce(broker.bootstrap, "bench1", args.records, "1")
            print(
                f"produce acks=1   100 B x {args.records:,}: {rate:,.0f} records/s "
                f"({rate * 100 / 1e6:.1f} MB/s)"
            )
            rate = produce(broker.bootstrap, "benchall", args.records, "all")
            print(
                f"produce acks=all 100 B x {args.records:,}: {rate:,.0f} records/s "
                f"({rate * 100 / 1e6:.1f} MB/s)"
            )
            rate = consume(broker.bootstrap, "bench1", args.records, 6)
            print(
                f"consume          100 B x {args.records:,}: {rate:,.0f} records/s "
                f"({rate * 100 / 1e6:.1f} MB/s)"
            )
            from compare_common import Figure

            back = read_back(Figure(1.0, ""), broker.bootstrap, "benchall", 6, args.records, 300)
            if back.value is None:
                raise SystemExit(f"acks=all: {back.note}")
            print(f"read back all {args.records:,} records written with acks=all")
            print(f"broker RSS after the runs: {rss_mb(broker.proc.pid):.0f} MB")
        finally:
            broker.stop()

        many = BrokerProcess(Path(tmp) / "many")
        many.start()
        try:
            per_topic = 100
            topics = args.partitions_for_rss // per_topic
            for t in range(topics):
                create(many.bootstrap, f"many-{t}", per_topic)
            producer = Producer({"bootstrap.servers": many.bootstrap, "linger.ms": 5})
            for t in range(topics):
                for p in range(per_topic):
                    producer.produce(f"many-{t}", RECORD, partition=p)
            if producer.flush(60):
                raise SystemExit("the records for the RSS run were not all delivered")
            del producer  # close the client before the broker stops
            partitions = topics * per_topic
            print(f"broker RSS with {partitions:,} partitions: {rss_mb(many.proc.pid):.0f} MB")
            many.stop()
            started = time.perf_counter()
            many.start()
            AdminClient({"bootstrap.servers": many.bootstrap}).list_topics(timeout=30)
            print(
                f"restart with {partitions:,} partitions: "
                f"{time.perf_counter() - started:.2f} s to serve metadata"
            )
            print(f"broker RSS after restart: {rss_mb(many.proc.pid):.0f} MB")
        finally:
            many.stop()


if __name__ == "__main__":
    main()
