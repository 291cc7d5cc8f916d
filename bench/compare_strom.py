"""Strom's side of ``bench/compare``: one confluent-kafka producer and one consumer.

Owns: the Strom workloads of the side-by-side run. A broker is started as
``bench/produce_consume.py`` does (``tests/broker_process.py``, free port on
127.0.0.1, data in a temp dir), then:
  - 100-B records to a 6-partition topic, acks=1 and acks=all, consumed back;
  - 100-KB records, produce and consume MB/s (the consume reads from page cache);
  - a second broker with ``log.flush.interval.messages=1`` (fsync on every append),
    100-KB records in ~1 MB batches to one partition, produce MB/s.
Does not own the peers, the machine limits or the table.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

from compare_common import Figure
from confluent_kafka import Consumer, Message, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from produce_consume import create  # noqa: E402

from strom.cli.perf_test import consume_batch_size  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402

SMALL = 100
LARGE = 100_000
BATCH_1MB = 1_048_576


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    size: int,
    acks: str,
    timeout: float,
    batch_size: int = 1_000_000,
) -> Figure:
    """Produce ``count`` records of ``size`` bytes; records/s with MB/s in ``extra``."""
    payload = b"x" * size
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": batch_size,
            "message.max.bytes": max(1_000_000, batch_size + 12),
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "compression.type": "none",
            "enable.idempotence": False,
        }
    )
    started = time.perf_counter()
    deadline = started + timeout
    sent = 0
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:  # the client's queue is full: let it drain
                producer.poll(0.01)
        sent += 1
        if i % 10_000 == 0:
            producer.poll(0)
            if time.perf_counter() > deadline:
                break
    remaining = producer.flush(max(1.0, deadline - time.perf_counter()))
    elapsed = time.perf_counter() - started
    del producer
    if remaining or sent < count:
        return Figure.na(
            "rec/s", f"timed out after {elapsed:.0f}s ({sent - remaining:,} of {count:,} delivered)"
        )
    rate = count / elapsed
    return Figure(
        rate, "rec/s", f"{count:,} x {size:,} B", {"MB/s": rate * size / 1e6, "seconds": elapsed}
    )


def consume(bootstrap: str, topic: str, count: int, partitions: int, timeout: float) -> Figure:
    """Read ``count`` records from offset 0 of every partition; records/s and MB/s."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compare",
            "enable.auto.commit": False,
            # Fetch sizes stay librdkafka's (50 MB a request, 1 MB a partition): larger
            # partition fetches were slower here, as the client copies out of the
            # socket from memory that no longer fits the cache.
            "queued.min.messages": 1_000_000,
            "queued.max.messages.kbytes": 262_144,
            # librdkafka's default (1000 ms) leaves the consumer idle for a second
            # whenever its prefetch queue reaches the limits above.
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    nbytes = 0
    batch = 1000
    # Every Message is tracked by the cyclic GC: a batch of 80,000 set off over a hundred
    # collections, each walking what the batch held so far (a fifth of the time). No
    # cycles are made here, so the collector waits until the run is over.
    gc.disable()
    started = time.perf_counter()
    try:
        while seen < count:
            # consume() waits for a whole batch or the timeout: ask for ~8 MB at a time,
            # and no more than remain, else it waits out the timeout.
            messages = consumer.consume(min(batch, count - seen), 1.0)
            if any(map(Message.error, messages)):  # loops in C, as the client's own tools do
                messages = [m for m in messages if m.error() is None]
            seen += len(messages)
            nbytes += sum(map(len, messages))  # len() of a Message is its value's
            if seen:
                batch = consume_batch_size(seen, nbytes, 100_000)
            if time.perf_counter() - started > timeout:
                break
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
        consumer.close()
    if seen < count:
        return Figure.na("rec/s", f"timed out after {elapsed:.0f}s ({seen:,} of {count:,})")
    return Figure(
        seen / elapsed,
        "rec/s",
        f"{seen:,} records",
        {"MB/s": nbytes / elapsed / 1e6, "seconds": elapsed},
    )


def run(
    tmp: Path, small: int, large: int, synced: int, timeout: float, say=print
) -> dict[str, Figure]:
    """Every Strom figure of the comparison, keyed by name."""
    out: dict[str, Figure] = {}
    broker = BrokerProcess(tmp / "strom", {"log.segment.bytes": "268435456"})
    broker.start()
    try:
        for name in ("warmup", "small1", "smallall", "large"):
            create(broker.bootstrap, name, 6)
        say("strom: warm-up, 50,000 x 100 B (not counted)")
        produce(broker.bootstrap, "warmup", 50_000, SMALL, "1", timeout)
        say("strom: produce 100 B acks=1")
        out["strom.produce.100B.acks1"] = produce(
            broker.bootstrap, "small1", small, SMALL, "1", timeout
        )
        say("strom: produce 100 B acks=all")
        out["strom.produce.100B.acksall"] = produce(
            broker.bootstrap, "smallall", small, SMALL, "all", timeout
        )
        say("strom: consume 100 B")
        out["strom.consume.100B"] = consume(broker.bootstrap, "small1", small, 6, timeout)
        say("strom: produce 100 KB")
        out["strom.produce.100KB"] = produce(broker.bootstrap, "large", large, LARGE, "1", timeout)
        say("strom: consume 100 KB")
        out["strom.consume.100KB"] = consume(broker.bootstrap, "large", large, 6, timeout)
    finally:
        _stop(broker)

    fsynced = BrokerProcess(tmp / "strom-fsync", {"log.flush.interval.messages": "1"})
    fsynced.start()
    try:
        create(fsynced.bootstrap, "synced", 1)
        say("strom: produce 1 MB batches, fsync every write")
        out["strom.produce.1MB.fsync"] = produce(
            fsynced.bootstrap, "synced", synced, LARGE, "all", timeout, batch_size=BATCH_1MB
        )
    finally:
        _stop(fsynced)
    return out


def _stop(broker: BrokerProcess) -> None:
    if broker.proc is None:
        return
    try:
        broker.stop(timeout=20)
    except Exception:  # noqa: BLE001 - never leave the broker behind
        broker.kill()
