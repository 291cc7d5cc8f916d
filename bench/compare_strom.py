"""Strom's side of ``bench/compare``: one confluent-kafka producer and one consumer.

Owns: the Strom workloads of the side-by-side run. A broker is started as
``bench/produce_consume.py`` does (``tests/broker_process.py``, free port on
127.0.0.1, data in a temp dir), then, after a 50,000-record warm-up (the peers get
the same one):
  - 100-B records to a 6-partition topic, acks=1 and acks=all, consumed back, with the
    tuned client settings below, and again with the client's defaults;
  - 100-KB records, produce and consume MB/s (the consume reads from page cache);
  - a broker with ``log.flush.interval.ms=1000`` (fsync of what is older than 1 s,
    checked each second: Redis's ``appendfsync everysec``), 100-B records, acks=all;
  - a broker with ``log.flush.interval.messages=1`` (fsync of every append before it is
    acknowledged: Redis's ``appendfsync always``), 100-B records, acks=all, and 100-KB
    records in ~1 MB batches to one partition, produce MB/s.
A produce is counted from the broker, not from the client: delivery reports with an
error are counted (``delivery.report.only.error``), and the topic's end offsets after
the run must have grown by every record sent, or the figure is n/a with the reason.
What the acks=all and fsync runs wrote is read back (untimed) and must be all there.
Every client setting that is not librdkafka's default is in the figure's note.
Does not own the peers, the machine limits or the table.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

from compare_common import Figure
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka import libversion as _libversion

sys.path.insert(0, str(Path(__file__).resolve().parent))
from produce_consume import create  # noqa: E402

from strom.cli.perf_test import consume_batch_size  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402

SMALL = 100
LARGE = 100_000
BATCH_1MB = 1_048_576
WARMUP = 50_000  # records of 100 B before the measured runs, for Strom and every peer

# librdkafka 2.x's defaults for the settings this bench sets, to name the ones it changes
LIBRDKAFKA_DEFAULTS: dict[str, object] = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "message.max.bytes": 1_000_000,
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "none",
    "enable.idempotence": False,
    "delivery.report.only.error": False,
    "enable.auto.commit": True,
    "queued.min.messages": 100_000,
    "queued.max.messages.kbytes": 65_536,
    "fetch.queue.backoff.ms": 1000,
}


def tuned_producer(acks: str, batch_size: int = 1_000_000) -> dict[str, object]:
    settings: dict[str, object] = {
        "acks": acks,
        "linger.ms": 5,
        "batch.size": batch_size,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
        "compression.type": "none",
        "enable.idempotence": False,
    }
    settings["message.max.bytes"] = max(1_000_000, batch_size + 12)  # a whole batch fits
    return settings


TUNED_CONSUMER: dict[str, object] = {
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


def client_name() -> str:
    return f"confluent-kafka (librdkafka {_libversion()[0]})"


def non_default(settings: dict[str, object]) -> str:
    """The settings that differ from librdkafka's defaults, as ``k=v`` (or "defaults")."""
    changed = [
        f"{k}={v}"
        for k, v in settings.items()
        if k not in LIBRDKAFKA_DEFAULTS or LIBRDKAFKA_DEFAULTS[k] != v
    ]
    return ", ".join(changed) if changed else "client defaults"


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of the topic's high watermarks, from the broker."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compare-offsets"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


class _Failures:
    def __init__(self) -> None:
        self.count = 0
        self.first = ""

    def __call__(self, err, _msg) -> None:
        if err is not None:  # only errors are reported (delivery.report.only.error)
            self.count += 1
            self.first = self.first or str(err)


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    size: int,
    acks: str,
    timeout: float,
    batch_size: int = 1_000_000,
    partitions: int = 6,
    settings: dict[str, object] | None = None,
) -> Figure:
    """Produce ``count`` records of ``size`` bytes; records/s with MB/s in ``extra``.

    ``settings`` replaces the tuned ones (``{}``: the client's defaults). Counted from
    the broker: the end offsets must have grown by ``count`` and no delivery failed.
    """
    payload = b"x" * size
    conf = tuned_producer(acks, batch_size) if settings is None else dict(settings)
    conf["delivery.report.only.error"] = True
    failures = _Failures()
    before = end_offsets(bootstrap, topic, partitions)
    # one callback for the producer, called for failed deliveries only
    producer = Producer({"bootstrap.servers": bootstrap, **conf, "on_delivery": failures})
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
    stored = end_offsets(bootstrap, topic, partitions) - before
    note = f"{count:,} x {size:,} B, {client_name()}, {non_default(conf)}"
    if remaining or sent < count:
        return Figure.na(
            "rec/s", f"timed out after {elapsed:.0f}s ({stored:,} of {count:,} stored)"
        )
    if failures.count or stored != count:
        return Figure.na(
            "rec/s",
            f"{stored:,} of {count:,} stored, {failures.count:,} deliveries failed"
            f" ({failures.first or 'no error reported'})",
        )
    rate = stored / elapsed
    return Figure(rate, "rec/s", note, {"MB/s": rate * size / 1e6, "seconds": elapsed})


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    partitions: int,
    timeout: float,
    defaults: bool = False,
) -> Figure:
    """Read ``count`` records from offset 0 of every partition; records/s and MB/s.

    Tuned: ``TUNED_CONSUMER``, ``consume()`` in batches, the cyclic GC off. ``defaults``:
    the client's defaults (a group id is required) and one ``poll()`` per record, the
    loop most programs write, GC on.
    """
    conf = {} if defaults else dict(TUNED_CONSUMER)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compare", **conf})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    nbytes = 0
    batch = 1000
    # Every Message is tracked by the cyclic GC: a batch of 80,000 set off over a hundred
    # collections, each walking what the batch held so far (a fifth of the time). No
    # cycles are made here, so the collector waits until the run is over.
    if not defaults:
        gc.disable()
    started = time.perf_counter()
    try:
        while seen < count:
            if defaults:
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    seen += 1
                    nbytes += len(message)
            else:
                # consume() waits for a whole batch or the timeout: ask for ~8 MB at a
                # time, and no more than remain, else it waits out the timeout.
                messages = consumer.consume(min(batch, count - seen), 1.0)
                if any(map(Message.error, messages)):  # loops in C, as the client's tools do
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
    how = "poll() per record, GC on" if defaults else "consume() batches, GC off while reading"
    return Figure(
        seen / elapsed,
        "rec/s",
        f"{seen:,} records, {client_name()}, {non_default(conf)}, {how}",
        {"MB/s": nbytes / elapsed / 1e6, "seconds": elapsed},
    )


def read_back(
    fig: Figure, bootstrap: str, topic: str, partitions: int, count: int, timeout: float
) -> Figure:
    """``fig`` if all ``count`` records of ``topic`` read back (untimed), else n/a."""
    if fig.value is None:
        return fig
    got = consume(bootstrap, topic, count, partitions, timeout)
    stored = end_offsets(bootstrap, topic, partitions)
    if got.value is None or stored != count:
        return Figure.na(fig.unit, f"read back: {got.note}; end offsets sum to {stored:,}")
    fig.note += f"; all {count:,} read back"
    return fig


def run(
    tmp: Path,
    small: int,
    large: int,
    synced: int,
    timeout: float,
    say=print,
    synced_small: int | None = None,
) -> dict[str, Figure]:
    """Every Strom figure of the comparison, keyed by name."""
    synced_small = synced_small or max(10_000, small // 10)
    out: dict[str, Figure] = {}
    broker = BrokerProcess(tmp / "strom", {"log.segment.bytes": "268435456"})
    broker.start()
    try:
        names = ("warmup", "small1", "smallall", "large", "smalldefaults")
        for name in names:
            create(broker.bootstrap, name, 6)
        say(f"strom: warm-up, {WARMUP:,} x 100 B (not counted)")
        produce(broker.bootstrap, "warmup", WARMUP, SMALL, "1", timeout)
        say("strom: produce 100 B acks=1")
        out["strom.produce.100B.acks1"] = produce(
            broker.bootstrap, "small1", small, SMALL, "1", timeout
        )
        say("strom: produce 100 B acks=all")
        fig = produce(broker.bootstrap, "smallall", small, SMALL, "all", timeout)
        say("strom: read back what acks=all wrote (untimed)")
        out["strom.produce.100B.acksall"] = read_back(
            fig, broker.bootstrap, "smallall", 6, small, timeout
        )
        say("strom: produce 100 B, client defaults")
        out["strom.produce.100B.defaults"] = produce(
            broker.bootstrap, "smalldefaults", small, SMALL, "all", timeout, settings={}
        )
        say("strom: consume 100 B")
        out["strom.consume.100B"] = consume(broker.bootstrap, "small1", small, 6, timeout)
        say("strom: consume 100 B, client defaults, poll()")
        out["strom.consume.100B.defaults"] = consume(
            broker.bootstrap, "small1", small, 6, timeout, defaults=True
        )
        say("strom: produce 100 KB")
        out["strom.produce.100KB"] = produce(broker.bootstrap, "large", large, LARGE, "1", timeout)
        say("strom: consume 100 KB")
        out["strom.consume.100KB"] = consume(broker.bootstrap, "large", large, 6, timeout)
    finally:
        _stop(broker)

    every_second = BrokerProcess(tmp / "strom-flush1s", {"log.flush.interval.ms": "1000"})
    every_second.start()
    try:
        for name in ("warmup", "flush1s"):
            create(every_second.bootstrap, name, 6)
        produce(every_second.bootstrap, "warmup", WARMUP, SMALL, "1", timeout)
        say("strom: produce 100 B acks=all, log.flush.interval.ms=1000")
        fig = produce(every_second.bootstrap, "flush1s", small, SMALL, "all", timeout)
        out["strom.produce.100B.flush1s"] = read_back(
            fig, every_second.bootstrap, "flush1s", 6, small, timeout
        )
    finally:
        _stop(every_second)

    fsynced = BrokerProcess(tmp / "strom-fsync", {"log.flush.interval.messages": "1"})
    fsynced.start()
    try:
        for name, partitions in (("warmup", 6), ("syncedsmall", 6), ("synced", 1)):
            create(fsynced.bootstrap, name, partitions)
        produce(fsynced.bootstrap, "warmup", WARMUP, SMALL, "1", timeout)
        say("strom: produce 100 B acks=all, fsync every write")
        fig = produce(fsynced.bootstrap, "syncedsmall", synced_small, SMALL, "all", timeout)
        out["strom.produce.100B.fsync"] = read_back(
            fig, fsynced.bootstrap, "syncedsmall", 6, synced_small, timeout
        )
        say("strom: produce 1 MB batches, fsync every write")
        fig = produce(
            fsynced.bootstrap,
            "synced",
            synced,
            LARGE,
            "all",
            timeout,
            batch_size=BATCH_1MB,
            partitions=1,
        )
        out["strom.produce.1MB.fsync"] = read_back(
            fig, fsynced.bootstrap, "synced", 1, synced, timeout
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
