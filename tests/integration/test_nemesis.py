"""A fault test in the style of Jepsen: a nemesis hurts one broker after another while
producers write and a consumer reads; after healing, a checker reads everything back.

The cluster: three combined nodes, a topic of three partitions with replication factor
3 and ``min.insync.replicas=2``. Every listener of every node sits behind a
fault-injecting TCP proxy (``fault_proxy``): the nodes advertise the proxy's port and
``controller.quorum.voters`` names the proxies, so every connection *to* a node, from
the other nodes (replica fetches, Raft, heartbeats, forwarding) and from the clients,
goes through its proxy.

The nemesis, for about 35 s, sleeps 1-2 s, picks a broker and a fault at random, holds
it for 1-3 s and heals it, one fault at a time (so a majority of the quorum and of every
ISR is always within reach); it notes the leaders and ISRs a client sees before the
fault and just before healing it:

- ``kill``: ``kill -9``; healed by starting the node again on its data directory;
- ``pause``: SIGSTOP; healed by SIGCONT;
- ``refuse``: its proxies reset every connection to it and refuse new ones;
- ``stall``: its proxies stop moving bytes to and from it (new connections are held),
  as in a partition that drops packets; healed by letting what was held through.

A cut (``refuse``, ``stall``) is an asymmetric partition: nobody reaches the node, the
test's clients included, but its own connections to the others go through *their*
proxies and still work: a cut leader can still heartbeat to the controller and ask for
ISR changes, while its followers and producers cannot reach it.

The workload: two idempotent ``acks=all`` producers write distinct values
(``p{producer}-{seq}``, to partition ``seq % 3``), and one consumer reads every
partition from the start throughout, noting every (partition, offset, value) it is given.

The checker is independent of the code under test: it uses only what confluent-kafka
reported (delivery reports, consumed records) and what it reads back after healing, and
the replicas' segment files. After the producers have flushed and every ISR is whole
again, it reads every partition from offset 0 and checks:

1. every acknowledged value (a delivery report without error) is in its partition
   exactly once, at the offset its report gave; no value is in the log twice;
2. in each partition, the acknowledged values of each producer are in the order in
   which they were acknowledged;
3. every record the consumer was given during the faults is still at its offset (no
   consumer saw a record that later vanished);
4. the replicas of each partition hold the same segment bytes.

Delivery errors are allowed: only what was acknowledged must survive.

Every run is reproducible from a seed: ``STROM_NEMESIS_SEED`` (1122 by default) drives
every random choice of the nemesis (victim, fault, how long), from one
``random.Random(seed)``. The seed fixes the schedule of faults, not the interleaving of
the processes, so a run that found a violation finds it again often, not always. On a
violation the test prints the seed, the nemesis's history, the offsets around the
first violation (what is there now, what was acknowledged there, what the consumer was
given there, with times), the clients' events around it, and the cluster's logs. No
assertion is on time: the waits after healing are bounds on liveness only. A run takes
about a minute.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cluster_process import Cluster, ClusterNode
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from fault_proxy import FaultProxy, ProxyHub
from kafka_helpers import wait_until

SEED = int(os.environ.get("STROM_NEMESIS_SEED", "1122"))
NEMESIS_S = 35.0  # about a dozen faults
TOPIC = "nemesis"
PARTITIONS = 3
PRODUCERS = 2
RATE = 80  # records per second per producer
FAULTS = ("kill", "pause", "refuse", "stall")

SETTINGS = {
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
}
CLIENT = {
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "socket.connection.setup.timeout.ms": 5000,
    "topic.metadata.refresh.interval.ms": 1000,
}


@dataclass(frozen=True)
class Ack:
    t: float
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
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str) -> None:
        with self.lock:
            self.nemesis.append((self.now(), text))


def _fmt(value: bytes | None) -> str:
    return "<none>" if value is None else value.decode(errors="replace")


# The workload ------------------------------------------------------------------------


def _produce(
    index: int, bootstrap: str, history: History, stop: threading.Event, give_up: threading.Event
) -> None:
    def delivered(error: KafkaError | None, message: Message) -> None:
        t = history.now()
        with history.lock:
            if error is None:
                history.acks.append(
                    Ack(t, index, message.partition(), message.offset(), message.value())
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

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "request.timeout.ms": 5000,
            "message.timeout.ms": 90000,
            "error_cb": on_error,
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
                producer.produce(
                    TOPIC, value=value, partition=sequence % PARTITIONS, on_delivery=delivered
                )
            except BufferError:
                producer.poll(0.1)
                continue
            sequence += 1
            next_at += 1 / RATE
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


def _consume(bootstrap: str, history: History, stop: threading.Event) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "nemesis-watcher",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **CLIENT,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
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


# The nemesis -------------------------------------------------------------------------


class Nemesis:
    def __init__(
        self, cluster: Cluster, proxies: dict[int, list[FaultProxy]], history: History
    ) -> None:
        self.cluster = cluster
        self.proxies = proxies
        self.history = history
        self.current: tuple[str, ClusterNode] | None = None

    def _leaders(self, admin: AdminClient) -> str:
        try:
            topic = admin.list_topics(TOPIC, timeout=1).topics[TOPIC]
            return " ".join(
                f"p{p}:{topic.partitions[p].leader}/isr{sorted(topic.partitions[p].isrs)}"
                for p in sorted(topic.partitions)
            )
        except Exception as exc:  # noqa: BLE001 - a note for the history only
            return f"(metadata: {exc})"

    def hurt(self, fault: str, node: ClusterNode, hold: float, admin: AdminClient) -> None:
        self.history.note(f"before: {self._leaders(admin)}")
        self.current = (fault, node)
        if fault == "kill":
            node.kill()
        elif fault == "pause":
            node.pause()
        elif fault == "refuse":
            for proxy in self.proxies[node.node_id]:
                proxy.refuse()
        else:
            for proxy in self.proxies[node.node_id]:
                proxy.stall()
        self.history.note(f"{fault} node {node.node_id} for {hold:.1f}s")

    def heal(self) -> None:
        if self.current is None:
            return
        fault, node = self.current
        self.history.note(f"heal {fault} of node {node.node_id}")
        if fault == "kill":
            node.start(60)
        elif fault == "pause":
            node.resume()
        else:
            for proxy in self.proxies[node.node_id]:
                proxy.heal()
        self.current = None
        self.history.note(f"healed node {node.node_id}")

    def run(self, rng: random.Random, seconds: float, admin: AdminClient) -> None:
        nodes = sorted(self.cluster.nodes)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(rng.uniform(1.0, 2.0))
            node = self.cluster.nodes[rng.choice(nodes)]
            fault = rng.choice(FAULTS)
            hold = rng.uniform(1.0, 3.0)
            self.hurt(fault, node, hold, admin)
            try:
                time.sleep(hold)
                self.history.note(f"during: {self._leaders(admin)}")
            finally:
                self.heal()


# The checker -------------------------------------------------------------------------


def _read_back(bootstrap: str) -> dict[int, dict[int, bytes]]:
    """Every record of every partition, offset -> value, from offset 0 to the high
    watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "nemesis-checker",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        done = {p for p in range(PARTITIONS) if ends[p] == 0}
        deadline = time.monotonic() + 60
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            got[message.partition()][message.offset()] = message.value()
            if message.offset() >= ends[message.partition()] - 1:
                done.add(message.partition())
        assert len(done) == PARTITIONS, f"read back {[len(g) for g in got.values()]} of {ends}"
        return got
    finally:
        consumer.close()


def _segment_bytes(node_dir: Path, partition: int) -> bytes:
    directory = node_dir / f"{TOPIC}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def _check(history: History, log: dict[int, dict[int, bytes]]) -> list[Violation]:
    violations: list[Violation] = []
    where: dict[bytes, list[tuple[int, int]]] = {}
    for partition, records in log.items():
        for offset, value in records.items():
            where.setdefault(value, []).append((partition, offset))
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


def _report(
    history: History,
    log: dict[int, dict[int, bytes]],
    violations: list[Violation],
) -> str:
    """The history of the first violation (by the time the clients saw it)."""
    first = min(violations, key=lambda v: v.t)
    partition, offset = first.partition, first.offset
    lines = [
        f"seed {SEED} (rerun: STROM_NEMESIS_SEED={SEED} pytest {__file__})",
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
    events.sort()
    if len(events) > 100:
        middle = min(range(len(events)), key=lambda i: abs(events[i][0] - first.t))
        events = events[max(0, middle - 60) : middle + 40]
    lines += ["", f"partition {partition} around t={first.t:.3f}:"]
    lines += [f"  {t:8.3f}  {text}" for t, text in events]
    others = [v for v in violations if v is not first]
    lines += ["", f"{len(others)} other violation(s):", *(f"  {v.text}" for v in others[:20])]
    return "\n".join(lines)


# The test ----------------------------------------------------------------------------


def test_nemesis_kills_pauses_and_cuts_off_brokers(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    print(f"nemesis seed {SEED}")
    hub = ProxyHub()
    proxies: dict[int, list[FaultProxy]] = {}

    def front(node_id: int, listener: str, port: int) -> int:
        proxy = hub.proxy(port)
        proxies.setdefault(node_id, []).append(proxy)
        return proxy.port

    cluster = Cluster.combined(tmp_path, overrides=SETTINGS, front=front)
    history = History()
    stop_producing = threading.Event()
    stop_consuming = threading.Event()
    give_up = threading.Event()
    threads: list[threading.Thread] = []
    nemesis = Nemesis(cluster, proxies, history)
    reported = False
    try:
        cluster.start_all()  # which may have moved a port another process took
        bootstrap = ",".join(f"127.0.0.1:{n.advertised_port}" for n in cluster.brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
        wait_until(
            lambda: sorted(admin.list_topics(timeout=3).brokers) == [1, 2, 3], 20, "3 brokers"
        )
        created = admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
        )
        created[TOPIC].result(15)

        def whole() -> bool:
            try:
                topic = admin.list_topics(TOPIC, timeout=3).topics[TOPIC]
            except KafkaException:
                return False
            return len(topic.partitions) == PARTITIONS and all(
                sorted(topic.partitions[p].isrs) == [1, 2, 3] and topic.partitions[p].leader > 0
                for p in range(PARTITIONS)
            )

        wait_until(whole, 20, "full ISRs")
        history.t0 = time.monotonic()
        threads = [
            threading.Thread(target=_produce, args=(i, bootstrap, history, stop_producing, give_up))
            for i in range(PRODUCERS)
        ]
        threads.append(threading.Thread(target=_consume, args=(bootstrap, history, stop_consuming)))
        for thread in threads:
            thread.start()
        nemesis.run(rng, NEMESIS_S, admin)
        history.note("nemesis done; everything healed")

        stop_producing.set()
        for thread in threads[:-1]:
            thread.join(150)
        history.note("producers flushed")
        wait_until(whole, 60, "every replica back in the ISR")
        history.note("every ISR whole")
        stop_consuming.set()
        threads[-1].join(30)

        # 4. The replicas' bytes agree once the last fetches have landed.
        deadline = time.monotonic() + 30
        while True:
            differing = [
                p
                for p in range(PARTITIONS)
                if len({_segment_bytes(n.data_dir, p) for n in cluster.brokers}) > 1
            ]
            if not differing or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        log = _read_back(bootstrap)
        violations = _check(history, log)
        for p in differing:
            sizes = {n.node_id: len(_segment_bytes(n.data_dir, p)) for n in cluster.brokers}
            violations.append(
                Violation(history.now(), p, -1, f"replicas of {TOPIC}-{p} differ: sizes {sizes}")
            )
        acked = len(history.acks)
        print(
            f"seed {SEED}: {len(history.nemesis)} nemesis events, {acked} acknowledged, "
            f"{len(history.failures)} failed, {len(history.seen)} consumed, "
            f"{sum(len(r) for r in log.values())} read back"
        )
        if not violations:
            for t, text in [*history.nemesis, *history.client_errors]:
                print(f"  {t:8.3f}  {text}")
        if violations:
            reported = True
            print(_report(history, log, violations))
            first = min(violations, key=lambda v: v.t)
            pytest.fail(f"seed {SEED}: {first.text}\n(history and logs printed above)")
        assert acked > 0, f"seed {SEED}: nothing was acknowledged"
    except BaseException:
        if not reported:
            print(f"nemesis seed {SEED}; history:")
            for t, text in history.nemesis:
                print(f"  {t:8.3f}  {text}")
        print("cluster logs:")
        print(cluster.logs())
        raise
    finally:
        nemesis.heal()
        stop_producing.set()
        stop_consuming.set()
        give_up.set()
        for thread in threads:
            thread.join(150)
        cluster.kill_all()
        hub.close()
