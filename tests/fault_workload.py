"""The workload and the checker of the fault tests (test_nemesis, test_replication_faults).

The workload: idempotent ``acks=all`` confluent-kafka producers write distinct values
(``p{producer}-{seq}``, to partition ``seq % partitions``) at a steady rate, and one
consumer reads every partition from the start throughout, noting every (partition,
offset, value) it is given. ``History`` keeps what the clients saw (delivery reports
with the times the records were sent and acknowledged, failures, consumed records)
and the notes of whoever makes the faults.

The checker is independent of the code under test: it uses only what confluent-kafka
reported and what it reads back after healing (``read_back``), and the replicas'
segment files (``segment_bytes``). ``check`` finds:

1. an acknowledged value not in its partition exactly once at the offset its report
   gave, or a value in the log twice. One exception, the client's and not the broker's:
   librdkafka's idempotent producer may bump its producer epoch at a leader change and
   send again, at sequence 0 of the new epoch, records it had sent before (its issue
   #4953: R1 lost with the old leader, R2-R5 answered OUT_OF_ORDER_SEQUENCE_NUMBER by the
   new one). No broker can tell those from new records, so a value whose copies were
   written by one producer id under rising epochs (read from the segment files' batch
   headers) counts as written once, at the copy its report gave; copies under one
   epoch stay a violation;
2. a producer's acknowledged values out of acknowledgement order in a partition;
3. a record the consumer was given that is no longer at its offset.

``report`` prints the history around the first violation, with what librdkafka said
of its idempotence meanwhile (its ``eos`` debug lines: errors of sequence, epoch bumps,
producer id changes; quiet while nothing goes wrong), and the wall-clock time of t=0,
to find the brokers' log lines of the same moment.
"""

from __future__ import annotations

import datetime
import logging
import struct
import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

CLIENT = {
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "socket.connection.setup.timeout.ms": 5000,
    "topic.metadata.refresh.interval.ms": 1000,
}


@dataclass(frozen=True)
class Workload:
    topic: str
    partitions: int
    producers: int = 2
    rate: int = 80  # records per second per producer


@dataclass(frozen=True)
class Ack:
    t: float
    sent: float  # when the record was handed to the producer
    producer: int
    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True)
class Seen:
    t: float
    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True)
class Violation:
    t: float
    partition: int
    offset: int
    text: str


@dataclass
class History:
    """What the clients and the nemesis saw, with times since the start."""

    t0: float = field(default_factory=time.monotonic)
    nemesis: list[tuple[float, str]] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    failures: list[tuple[float, int, int, bytes, str]] = field(default_factory=list)
    client_errors: list[tuple[float, str]] = field(default_factory=list)
    client_log: list[tuple[float, str]] = field(default_factory=list)  # librdkafka's eos debug
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def wall_clock_at_t0(self) -> str:
        """The local time of t=0, as the brokers' log lines write theirs."""
        at = datetime.datetime.now() - datetime.timedelta(seconds=self.now())
        return at.strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]

    def note(self, text: str) -> None:
        with self.lock:
            self.nemesis.append((self.now(), text))


def _fmt(value: bytes | None) -> str:
    return "<none>" if value is None else value.decode(errors="replace")


# The workload ------------------------------------------------------------------------


def produce(
    workload: Workload,
    index: int,
    bootstrap: str,
    history: History,
    stop: threading.Event,
    give_up: threading.Event,
) -> None:
    """Producer ``index`` writes until ``stop``, then flushes (until ``give_up``)."""

    def delivered(error: KafkaError | None, message: Message, sent: float) -> None:
        t = history.now()
        # librdkafka may report a record delivered without its offset (None, -1001 in C)
        # when it could not learn it, as under these faults: the record is in the log,
        # where is unknown (-1 here: only its presence and uniqueness are checked).
        offset = message.offset()
        with history.lock:
            if error is None:
                history.acks.append(
                    Ack(
                        t,
                        sent,
                        index,
                        message.partition(),
                        -1 if offset is None else offset,
                        message.value(),
                    )
                )
            else:
                history.failures.append(
                    (t, index, message.partition(), message.value(), str(error))
                )

    def note(text: str) -> None:
        with history.lock:
            history.client_errors.append((history.now(), f"producer {index}: {text}"))

    def on_error(error: KafkaError) -> None:
        if error.fatal() or error.code() == KafkaError._FATAL:
            note(str(error))

    class ClientLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = f"producer {index} librdkafka: {record.getMessage()}"
            with history.lock:
                history.client_log.append((history.now(), text))

    client_log = logging.Logger(f"fault-workload-producer-{index}", logging.DEBUG)
    client_log.addHandler(ClientLog())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "request.timeout.ms": 5000,
            "message.timeout.ms": 90000,
            "error_cb": on_error,
            "debug": "eos",
            "logger": client_log,
            **CLIENT,
        }
    )
    sequence = 0
    next_at = time.monotonic()
    left = 0
    try:
        while not stop.is_set():
            value = b"p%d-%06d" % (index, sequence)
            try:
                sent = history.now()
                producer.produce(
                    workload.topic,
                    value=value,
                    partition=sequence % workload.partitions,
                    on_delivery=lambda error, message, sent=sent: delivered(error, message, sent),
                )
            except BufferError:
                producer.poll(0.1)
                continue
            sequence += 1
            next_at += 1 / workload.rate
            while (wait := next_at - time.monotonic()) > 0:
                producer.poll(wait)
        deadline = time.monotonic() + 120
        while (left := producer.flush(0.5)) and not give_up.is_set():
            if time.monotonic() > deadline:
                break
    except KafkaException as exc:  # a fatal error: this producer writes no more
        note(f"stopped: {exc}")
        left = len(producer)
    if left:
        note(f"{left} records neither acknowledged nor failed")


def consume(workload: Workload, bootstrap: str, history: History, stop: threading.Event) -> None:
    """Read every partition from the start until ``stop``, noting what was given."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{workload.topic}-watcher",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **CLIENT,
        }
    )
    consumer.assign(
        [TopicPartition(workload.topic, p, OFFSET_BEGINNING) for p in range(workload.partitions)]
    )
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                with history.lock:
                    history.client_errors.append((history.now(), f"consumer: {message.error()}"))
                continue
            seen = Seen(history.now(), message.partition(), message.offset(), message.value())
            with history.lock:
                history.seen.append(seen)
    finally:
        consumer.close()


# The checker -------------------------------------------------------------------------


def read_back(workload: Workload, bootstrap: str) -> dict[int, dict[int, bytes]]:
    """Every record of every partition, offset -> value, from offset 0 to the high
    watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{workload.topic}-checker",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(workload.topic, p), timeout=10)[1]
            for p in range(workload.partitions)
        }
        consumer.assign([TopicPartition(workload.topic, p, 0) for p in range(workload.partitions)])
        got: dict[int, dict[int, bytes]] = {p: {} for p in range(workload.partitions)}
        done = {p for p in range(workload.partitions) if ends[p] == 0}
        deadline = time.monotonic() + 60
        while len(done) < workload.partitions and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            got[message.partition()][message.offset()] = message.value()
            if message.offset() >= ends[message.partition()] - 1:
                done.add(message.partition())
        assert len(done) == workload.partitions, (
            f"read back {[len(g) for g in got.values()]} of {ends}"
        )
        return got
    finally:
        consumer.close()


def segment_bytes(node_dir: Path, topic: str, partition: int) -> bytes:
    directory = node_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


# A record batch's header (magic 2): base offset, length, leader epoch, magic, CRC,
# attributes, last offset delta, first and max timestamps, producer id and epoch.
_BATCH_HEAD = struct.Struct(">qiibIhiqqqh")


def batch_writers(segment: bytes) -> dict[int, tuple[int, int]]:
    """The (producer id, producer epoch) of the batch holding each offset of a partition's
    segment files (``segment_bytes``), read from the batch headers."""
    writers: dict[int, tuple[int, int]] = {}
    position = 0
    while position + _BATCH_HEAD.size <= len(segment):
        base, length, _, _, _, _, last_delta, _, _, producer_id, producer_epoch = (
            _BATCH_HEAD.unpack_from(segment, position)
        )
        if length <= 0:
            break
        for offset in range(base, base + last_delta + 1):
            writers[offset] = (producer_id, producer_epoch)
        position += 12 + length
    return writers


def _sent_again_after_an_epoch_bump(
    places: list[tuple[int, int]], writers: dict[int, dict[int, tuple[int, int]]]
) -> bool:
    """The copies of one value were written by one producer id under rising epochs."""
    found = [writers.get(partition, {}).get(offset) for partition, offset in places]
    if any(w is None for w in found) or len({w[0] for w in found if w}) != 1:
        return False
    epochs = [w[1] for w in found if w]
    return all(a < b for a, b in pairwise(epochs))


def check(
    history: History,
    log: dict[int, dict[int, bytes]],
    writers: dict[int, dict[int, tuple[int, int]]] | None = None,
) -> list[Violation]:
    """The violations of the rules above; ``writers`` (partition -> ``batch_writers``)
    tells a client's re-send after an epoch bump from a duplicate."""
    violations: list[Violation] = []
    where: dict[bytes, list[tuple[int, int]]] = {}
    for partition, records in log.items():
        for offset, value in records.items():
            where.setdefault(value, []).append((partition, offset))
    resent = {
        value
        for value, places in where.items()
        if len(places) > 1 and _sent_again_after_an_epoch_bump(places, writers or {})
    }
    for ack in history.acks:  # a re-sent value is where its report says
        if ack.value in resent and (ack.partition, ack.offset) in where[ack.value]:
            where[ack.value] = [(ack.partition, ack.offset)]
    end = history.now()
    acked_at = {ack.value: ack.t for ack in history.acks}
    for value, places in where.items():
        if len(places) > 1:
            partition, offset = places[1]
            violations.append(
                Violation(
                    acked_at.get(value, end),
                    partition,
                    offset,
                    f"{_fmt(value)} is in the log twice: {places}",
                )
            )
    # 1. Every acknowledged value once, in its partition, at its offset.
    for ack in history.acks:
        places = where.get(ack.value, [])
        if not places:
            violations.append(
                Violation(
                    ack.t,
                    ack.partition,
                    ack.offset,
                    f"{_fmt(ack.value)} acknowledged at {ack.partition}/{ack.offset} "
                    f"(t={ack.t:.3f}) is lost",
                )
            )
        elif ack.offset >= 0 and places[0] != (ack.partition, ack.offset):
            there = log[ack.partition].get(ack.offset)
            violations.append(
                Violation(
                    ack.t,
                    ack.partition,
                    ack.offset,
                    f"{_fmt(ack.value)} acknowledged at {ack.partition}/{ack.offset} "
                    f"(t={ack.t:.3f}) is at {places}; that offset holds {_fmt(there)}",
                )
            )
    # 2. Each producer's acknowledged values in acknowledgement order, per partition.
    last: dict[tuple[int, int], tuple[int, Ack]] = {}
    for ack in history.acks:  # appended in the order the reports came
        places = [o for p, o in where.get(ack.value, []) if p == ack.partition]
        if not places:
            continue
        key = (ack.producer, ack.partition)
        before = last.get(key)
        if before is not None and places[0] <= before[0]:
            violations.append(
                Violation(
                    ack.t,
                    ack.partition,
                    places[0],
                    f"{_fmt(ack.value)} acknowledged after {_fmt(before[1].value)} is at "
                    f"offset {places[0]}, before it (offset {before[0]})",
                )
            )
        last[key] = (places[0], ack)
    # 3. Nothing the consumer was given vanished.
    for seen in history.seen:
        there = log[seen.partition].get(seen.offset)
        if there != seen.value:
            violations.append(
                Violation(
                    seen.t,
                    seen.partition,
                    seen.offset,
                    f"the consumer read {_fmt(seen.value)} at {seen.partition}/{seen.offset} "
                    f"(t={seen.t:.3f}); that offset now holds {_fmt(there)}",
                )
            )
    return violations


def report(
    history: History,
    log: dict[int, dict[int, bytes]],
    violations: list[Violation],
    rerun: str,
) -> str:
    """The history of the first violation (by the time the clients saw it)."""
    first = min(violations, key=lambda v: v.t)
    partition, offset = first.partition, first.offset
    lines = [
        rerun,
        f"t=0 was {history.wall_clock_at_t0()} (local time, as the brokers' logs write it)",
        f"{len(violations)} violation(s); the first: {first.text}",
        "",
        "nemesis:",
        *(f"  {t:8.3f}  {text}" for t, text in history.nemesis),
        "",
        "client errors:",
        *(f"  {t:8.3f}  {text}" for t, text in history.client_errors[:40]),
    ]
    if offset >= 0:
        lines += ["", f"partition {partition}, offset by offset: read back | acked | consumed"]
        for at in range(max(0, offset - 6), offset + 7):
            acked = [
                f"{_fmt(a.value)}@{a.t:.3f}"
                for a in history.acks
                if a.partition == partition and a.offset == at
            ]
            consumed: dict[bytes, float] = {}
            for seen in history.seen:
                if seen.partition == partition and seen.offset == at:
                    consumed.setdefault(seen.value, seen.t)
            mark = ">>" if at == offset else "  "
            lines.append(
                f"{mark}{at:6d}  {_fmt(log[partition].get(at)):10} | {' '.join(acked) or '-'} | "
                + (" ".join(f"{_fmt(v)}@{t:.3f}" for v, t in consumed.items()) or "-")
            )
    # The clients' events in this partition and the nemesis's, from a while before the
    # violation to just after it; consumed records only near the offset.
    events: list[tuple[float, str]] = [
        (t, f"NEMESIS   {text}") for t, text in history.nemesis if first.t - 15 < t < first.t + 3
    ]
    for ack in history.acks:
        if ack.partition == partition and first.t - 3 < ack.t < first.t + 1:
            events.append((ack.t, f"acked     {ack.offset:6d} {_fmt(ack.value)}"))
    for t, _, where, value, error in history.failures:
        if where == partition and first.t - 15 < t < first.t + 3:
            events.append((t, f"failed           {_fmt(value)}: {error}"))
    for seen in history.seen:
        if seen.partition == partition and abs(seen.offset - offset) <= 6:
            events.append((seen.t, f"consumed  {seen.offset:6d} {_fmt(seen.value)}"))
    events += [(t, f"ERROR     {text}") for t, text in history.client_errors]
    events += [
        (t, f"CLIENT    {text}") for t, text in history.client_log if first.t - 15 < t < first.t + 3
    ]
    events.sort()
    if len(events) > 100:
        middle = min(range(len(events)), key=lambda i: abs(events[i][0] - first.t))
        events = events[max(0, middle - 60) : middle + 40]
    lines += ["", f"partition {partition} around t={first.t:.3f}:"]
    lines += [f"  {t:8.3f}  {text}" for t, text in events]
    others = [v for v in violations if v is not first]
    lines += ["", f"{len(others)} other violation(s):", *(f"  {v.text}" for v in others[:20])]
    return "\n".join(lines)


# Running it ----------------------------------------------------------------------------


class Clients:
    """The workload's producers and consumer, each in a thread."""

    def __init__(self, workload: Workload, bootstrap: str, history: History) -> None:
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.give_up = threading.Event()
        self.producers = [
            threading.Thread(
                target=produce,
                args=(workload, i, bootstrap, history, self.stop_producing, self.give_up),
            )
            for i in range(workload.producers)
        ]
        self.consumer = threading.Thread(
            target=consume, args=(workload, bootstrap, history, self.stop_consuming)
        )

    def start(self) -> None:
        for thread in [*self.producers, self.consumer]:
            thread.start()

    def flush_producers(self) -> None:
        """Stop producing and wait until every record is acknowledged or failed."""
        self.stop_producing.set()
        for thread in self.producers:
            thread.join(150)

    def stop_consumer(self) -> None:
        self.stop_consuming.set()
        self.consumer.join(30)

    def close(self) -> None:
        self.stop_producing.set()
        self.stop_consuming.set()
        self.give_up.set()
        for thread in [*self.producers, self.consumer]:
            if thread.ident is not None:
                thread.join(150)


def differing_replicas(
    data_dirs: dict[int, Path], topic: str, partitions: int, timeout_s: float = 30
) -> dict[int, dict[int, int]]:
    """Partitions whose replicas' segment files still differ once the last fetches had
    ``timeout_s`` to land: partition -> {node: bytes}."""
    deadline = time.monotonic() + timeout_s
    while True:
        sizes = {
            p: {node: len(segment_bytes(d, topic, p)) for node, d in data_dirs.items()}
            for p in range(partitions)
        }
        differing = [
            p
            for p in range(partitions)
            if len({segment_bytes(d, topic, p) for d in data_dirs.values()}) > 1
        ]
        if not differing or time.monotonic() > deadline:
            return {p: sizes[p] for p in differing}
        time.sleep(0.5)


def judge(
    workload: Workload,
    bootstrap: str,
    history: History,
    data_dirs: dict[int, Path],
    rerun: str,
    extra: list[Violation] | None = None,
) -> str | None:
    """After healing: the replicas compared, everything read back and checked (plus the
    caller's ``extra`` violations). Prints a summary, or the report of the first
    violation; returns that violation's text, or None."""
    differing = differing_replicas(data_dirs, workload.topic, workload.partitions)
    log = read_back(workload, bootstrap)
    some_replica = next(iter(data_dirs.values()))
    writers = {
        p: batch_writers(segment_bytes(some_replica, workload.topic, p))
        for p in range(workload.partitions)
    }
    violations = check(history, log, writers) + list(extra or ())
    for partition, sizes in differing.items():
        violations.append(
            Violation(
                history.now(),
                partition,
                -1,
                f"replicas of {workload.topic}-{partition} differ: sizes {sizes}",
            )
        )
    print(
        f"{rerun}: {len(history.nemesis)} fault events, {len(history.acks)} acknowledged, "
        f"{len(history.failures)} failed, {len(history.seen)} consumed, "
        f"{sum(len(r) for r in log.values())} read back"
    )
    if not violations:
        for t, text in [*history.nemesis, *history.client_errors]:
            print(f"  {t:8.3f}  {text}")
        return None
    print(report(history, log, violations, rerun))
    return min(violations, key=lambda v: v.t).text
