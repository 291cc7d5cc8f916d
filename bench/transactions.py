"""Transaction figures against one real broker process on this machine.

The client is confluent-kafka (librdkafka) in this process; records are 100 B, sent to
a 6-partition topic; every figure counts only records whose delivery report came back
without an error and transactions whose commit returned.

- produce: the same number of records sent in transactions of 100, 1,000 and 10,000
  records, and without transactions (an idempotent producer, which a transactional one
  is too), in the same run; with the client's defaults and tuned (linger.ms 20,
  batch.num.messages 100 k).
  A transaction costs the coordinator two round trips on top of the data
  (AddPartitionsToTxn, EndTxn) and a marker per partition, so small transactions pay
  more per record.
- commit latency: time of ``commit_transaction()`` for transactions of 100 records
  spread over the 6 partitions (the producer flushes them, then EndTxn is answered
  once PrepareCommit is written; the markers follow in the background), p50 and p99.
- consume: the topic of 1,000-record transactions, with one aborted in ten, read back by
  one consumer with isolation.level read_committed and read_uncommitted; records/s.

Usage: python bench/transactions.py [--records N] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402

RECORD = b"x" * 100
PARTITIONS = 6
TUNED = {"linger.ms": 20, "batch.num.messages": 100_000, "queue.buffering.max.messages": 2_000_000}


def create(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, PARTITIONS, replication_factor=1)])
    futures[name].result(30)


def delivery_counter() -> tuple[list[int], object]:
    counts = [0, 0]  # acknowledged, failed

    def on_delivery(err: object, _msg: object) -> None:
        counts[0 if err is None else 1] += 1

    return counts, on_delivery


def produce_plain(bootstrap: str, topic: str, count: int, tuned: bool) -> float:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, **(TUNED if tuned else {})}
    )
    counts, on_delivery = delivery_counter()
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, RECORD, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    assert counts == [count, 0], counts
    return count / elapsed


def produce_transactions(
    bootstrap: str, topic: str, count: int, per_txn: int, tuned: bool, abort_every: int = 0
) -> tuple[float, list[float]]:
    """Records/s over ``count`` records in transactions of ``per_txn``, and the commit
    latencies (s). With ``abort_every`` n, every n-th transaction is aborted instead."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            **(TUNED if tuned else {}),
        }
    )
    producer.init_transactions(30)
    counts, on_delivery = delivery_counter()
    commits: list[float] = []
    committed = 0
    started = time.perf_counter()
    txn = 0
    while committed < count:
        producer.begin_transaction()
        for _ in range(per_txn):
            while True:
                try:
                    producer.produce(topic, RECORD, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.01)
        txn += 1
        if abort_every and txn % abort_every == 0:
            producer.flush(60)
            producer.abort_transaction(60)
            continue
        t0 = time.perf_counter()
        producer.commit_transaction(60)
        commits.append(time.perf_counter() - t0)
        committed += per_txn
    elapsed = time.perf_counter() - started
    assert counts[1] == 0, counts
    return committed / elapsed, commits


def consume(bootstrap: str, topic: str, isolation: str) -> tuple[float, int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    at_end: set[int] = set()
    received = 0
    started = time.perf_counter()
    while len(at_end) < PARTITIONS:
        for msg in consumer.consume(10_000, 1.0):
            error = msg.error()
            if error is None:
                received += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
    elapsed = time.perf_counter() - started
    consumer.close()
    return received / elapsed, received


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--quick", action="store_true", help="30,000 records per figure")
    args = parser.parse_args()
    count = 30_000 if args.quick else args.records
    count -= count % 10_000  # whole transactions of every size
    count = max(count, 10_000)

    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"log.segment.bytes": "268435456"})
        broker.start()
        bootstrap = broker.bootstrap
        try:
            print(f"produce: {count:,} records of 100 B per figure, {PARTITIONS} partitions")
            for tuned in (False, True):
                label = "tuned" if tuned else "defaults"
                topic = f"plain-{label}"
                create(bootstrap, topic)
                plain = produce_plain(bootstrap, topic, count, tuned)
                print(f"  {label:8} no transactions      {plain:>10,.0f} records/s")
                for per_txn in (100, 1_000, 10_000):
                    topic = f"txn{per_txn}-{label}"
                    create(bootstrap, topic)
                    rate, _ = produce_transactions(bootstrap, topic, count, per_txn, tuned)
                    print(
                        f"  {label:8} {per_txn:>6,} per transaction {rate:>10,.0f} records/s"
                        f"  ({rate / plain:.2f}x)"
                    )

            create(bootstrap, "latency")
            _, commits = produce_transactions(bootstrap, "latency", 100 * 500, 100, False)
            print(
                f"commit latency, 100-record transactions over {PARTITIONS} partitions "
                f"({len(commits)} commits): p50 {statistics.median(commits) * 1000:.1f} ms, "
                f"p99 {percentile(commits, 0.99) * 1000:.1f} ms"
            )

            create(bootstrap, "mixed")
            produce_transactions(bootstrap, "mixed", count, 1_000, True, abort_every=10)
            for isolation in ("read_uncommitted", "read_committed"):
                rate, received = consume(bootstrap, "mixed", isolation)
                print(f"consume {isolation:16} {rate:>10,.0f} records/s ({received:,} records)")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
