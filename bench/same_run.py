"""Produce and consume against a broker of this tree and one of another commit, both up
at once and served bursts in turn: whatever else loads the machine falls on both alike.

Each round, for the client tuned (acks=1, linger 5 ms, 1 MB batches) and with its
defaults (acks=all, linger 5 ms), the two brokers in turn (the order alternating): a
producer writes --records 100-B records to a 6-partition topic, then a fresh consumer
reads them back. Kept per burst: the rate the client saw, the broker's CPU time (every
thread's, in nanoseconds from /proc/PID/task/*/schedstat, not /proc/PID/stat's 10 ms
ticks), the produce and fetch requests it answered (from its /metrics) and so the
records a produce request carried. Before the bursts, each broker's CPU a second while
idle, which every figure a record holds for as long as its burst lasts.

Why per request: with linger.ms 5 a produce request carries what the client gathered in
5 ms, so the broker's CPU a record moves with how fast the client ran (a client slowed
by the machine's load sends smaller requests, each costing the broker about the same);
the CPU a request of the same shape does not. Medians over the rounds are printed.

Then the same without a client's timing: requests of one fixed shape sent raw, five in
flight on one connection, the brokers in turn for --rounds bursts of --requests each:
Produce v10 (acks=all, 6 partitions, a batch of 150 records of 100 B each: what the
client sends with its defaults at about 900 records a request) and Fetch v16 reading
those batches back, one a partition per request. The broker's CPU a request.

Usage: python bench/same_run.py REV [--records N] [--rounds R] [--requests N]
       (bench/loop_lag.py --baseline REV runs it after its own figures)
"""

from __future__ import annotations

import argparse
import datetime
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v16 import request as fetch_v16
from kio.schema.produce.v10 import request as produce_v10

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from broker_process import BrokerProcess  # noqa: E402
from raw_client import RawClient  # noqa: E402

from strom.protocol.framing import encode_request  # noqa: E402
from strom.protocol.records import build_batch  # noqa: E402

PARTITIONS = 6
VALUE = b"x" * 100
SHAPE_RECORDS = 150  # a partition's batch in a fixed-shape request
IN_FLIGHT = 5
TUNED = {"acks": "1", "linger.ms": "5", "batch.size": "1000000"}
REQUESTS = re.compile(
    r'^kafka_network_requestmetrics_requests_total\{request="(\w+)",version="\d+"\} (\S+)$', re.M
)


class TreeBroker(BrokerProcess):
    """A broker run from another source tree (a worktree of an earlier commit)."""

    def __init__(self, tree: Path, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.tree = tree

    def command(self) -> list[str]:
        return ["env", "-C", str(self.tree), *super().command()]


@dataclass
class Burst:
    """What one burst of one path cost one broker."""

    records: int
    rate: float  # records/s the client saw
    cpu_per_record_us: float
    requests: float  # produce (or consumer fetch) requests the broker answered

    @property
    def records_per_request(self) -> float:
        return self.records / self.requests if self.requests else 0.0

    @property
    def cpu_per_request_us(self) -> float:
        return self.cpu_per_record_us * self.records_per_request


def broker_cpu_seconds(pid: int) -> float:
    """CPU time every thread of a process has used so far (schedstat: nanoseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def requests_answered(admin_port: int) -> dict[str, float]:
    """Requests answered so far, by API name (FetchConsumer and FetchFollower apart)."""
    url = f"http://127.0.0.1:{admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for name, count in REQUESTS.findall(text):
        counts[name] = counts.get(name, 0.0) + float(count)
    return counts


class Side:
    """One broker under comparison, with its producers (kept across bursts)."""

    def __init__(self, label: str, broker: BrokerProcess) -> None:
        self.label = label
        self.broker = broker
        broker.overrides["admin.listeners"] = f"http://127.0.0.1:{broker.extra_port('admin')}"
        self.producers: dict[str, Producer] = {}
        self.consumed: dict[str, int] = {}  # per topic: records read so far per partition

    def start(self) -> None:
        self.broker.start(90)
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        for topic, settings in (("tuned", TUNED), ("defaults", {})):
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            self.producers[topic] = Producer(
                {"bootstrap.servers": self.broker.bootstrap, **settings}
            )
            self.consumed[topic] = 0

    def _measured(self, work: Iterator[None], records: int, api: str) -> Burst:
        pid, port = self.broker.proc.pid, self.broker.ports["admin"]
        asked = requests_answered(port).get(api, 0.0)
        cpu = broker_cpu_seconds(pid)
        started = time.perf_counter()
        for _ in work:
            pass
        elapsed = time.perf_counter() - started
        cpu = broker_cpu_seconds(pid) - cpu
        asked = requests_answered(port).get(api, 0.0) - asked
        return Burst(records, records / elapsed, cpu / records * 1e6, asked)

    def produce(self, topic: str, records: int) -> Burst:
        producer = self.producers[topic]

        def work() -> Iterator[None]:
            for i in range(records):
                while True:
                    try:
                        producer.produce(topic, VALUE, partition=i % PARTITIONS)
                        break
                    except BufferError:
                        producer.poll(0.01)
            if producer.flush(120):
                raise RuntimeError(f"{self.label}: records left unsent after 120 s")
            yield

        return self._measured(work(), records, "Produce")

    def consume(self, topic: str, records: int) -> Burst:
        first = self.consumed[topic]
        self.consumed[topic] += records // PARTITIONS
        settings = {"fetch.queue.backoff.ms": 10} if topic == "tuned" else {}
        consumer = Consumer(
            {
                "bootstrap.servers": self.broker.bootstrap,
                "group.id": f"same-run-{topic}",
                "enable.auto.commit": False,
                **settings,
            }
        )

        def work() -> Iterator[None]:
            consumer.assign([TopicPartition(topic, p, first) for p in range(PARTITIONS)])
            got = 0
            deadline = time.monotonic() + 120
            while got < records // PARTITIONS * PARTITIONS:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.label}: {got} of {records} records read in 120 s")
                for message in consumer.consume(10_000, 1.0):
                    if message.error() is None:
                        got += 1
            yield

        try:
            return self._measured(work(), records, "FetchConsumer")
        finally:
            consumer.close()

    def topic_id(self, topic: str) -> uuid.UUID:
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        described = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
        bits = described.topic_id
        high = bits.get_most_significant_bits() & (2**64 - 1)
        return uuid.UUID(int=high << 64 | bits.get_least_significant_bits() & (2**64 - 1))

    def cpu_per_request_us(self, frames: list[bytes]) -> float:
        """The broker's CPU a request over ``frames`` sent IN_FLIGHT deep, answers read."""
        pid = self.broker.proc.pid
        with RawClient(self.broker.port, timeout=120) as client:
            cpu = broker_cpu_seconds(pid)
            sent = answered = 0
            while answered < len(frames):
                while sent < len(frames) and sent - answered < IN_FLIGHT:
                    client.send_bytes(frames[sent])
                    sent += 1
                client.read_frame()
                answered += 1
            return (broker_cpu_seconds(pid) - cpu) / len(frames) * 1e6


def produce_frames(topic: str, count: int) -> list[bytes]:
    batch = build_batch([(None, VALUE)] * SHAPE_RECORDS)
    request = produce_v10.ProduceRequest(
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            produce_v10.TopicProduceData(
                name=topic,
                partition_data=tuple(
                    produce_v10.PartitionProduceData(index=p, records=batch)
                    for p in range(PARTITIONS)
                ),
            ),
        ),
    )
    return [encode_request(1, "same-run", request)] * count  # the answers are not read


def fetch_frames(topic_id: uuid.UUID, count: int) -> list[bytes]:
    """Fetches of the batches ``produce_frames`` wrote, the n-th batch of each partition
    in the n-th request."""

    def fetch(n: int) -> fetch_v16.FetchRequest:
        partitions = tuple(
            fetch_v16.FetchPartition(
                partition=p,
                current_leader_epoch=-1,
                fetch_offset=n * SHAPE_RECORDS,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=len(VALUE) * SHAPE_RECORDS,
            )
            for p in range(PARTITIONS)
        )
        return fetch_v16.FetchRequest(
            max_wait=datetime.timedelta(0),
            min_bytes=1,
            max_bytes=50 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(fetch_v16.FetchTopic(topic_id=topic_id, partitions=partitions),),
            forgotten_topics_data=(),
            rack_id="",
        )

    return [encode_request(n + 1, "same-run", fetch(n)) for n in range(count)]


def idle_cpu_ms_a_second(sides: list[Side], seconds: float = 5.0) -> dict[str, float]:
    """The CPU each broker uses a second while no client asks anything (its periodic
    duties: Raft ticks, the loop's lag probe, flush checks)."""
    time.sleep(1.0)  # the producers' and topics' start-up settles
    before = {side.label: broker_cpu_seconds(side.broker.proc.pid) for side in sides}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {
        side.label: (broker_cpu_seconds(side.broker.proc.pid) - before[side.label]) / elapsed * 1e3
        for side in sides
    }


@contextmanager
def worktree(scratch: Path, revision: str) -> Iterator[Path]:
    """A detached worktree of ``revision``, with this tree's compiled record walk."""
    tree = scratch / "baseline-tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
        check=True,
        capture_output=True,
    )
    try:
        if (tree / "strom/protocol/_record_walk.c").exists():  # built here, not in git
            for built in (ROOT / "strom/protocol").glob("_record_walk*.so"):
                shutil.copy(built, tree / "strom/protocol" / built.name)
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )


def compare(scratch: Path, baseline: str, records: int, rounds: int, requests: int = 1000) -> None:
    with worktree(scratch, baseline) as tree:
        sides = [
            Side("this tree", BrokerProcess(scratch / "this-tree")),
            Side(baseline, TreeBroker(tree, scratch / "baseline")),
        ]
        figures: dict[tuple[str, str, str], list[Burst]] = {}
        shaped: dict[tuple[str, str], list[float]] = {}
        try:
            for side in sides:
                side.start()
            idle = idle_cpu_ms_a_second(sides)
            for round_ in range(rounds):
                for topic in ("tuned", "defaults"):
                    for side in sides if round_ % 2 == 0 else sides[::-1]:
                        for path in ("produce", "consume"):
                            burst = (side.produce if path == "produce" else side.consume)(
                                topic, records
                            )
                            figures.setdefault((side.label, topic, path), []).append(burst)
            for side in sides:
                admin = AdminClient({"bootstrap.servers": side.broker.bootstrap})
                admin.create_topics([NewTopic("shaped", PARTITIONS, 1)])["shaped"].result(30)
            produce = produce_frames("shaped", requests)
            fetches = {
                side.label: fetch_frames(side.topic_id("shaped"), rounds * requests)
                for side in sides
            }
            for round_ in range(rounds):
                for side in sides if round_ % 2 == 0 else sides[::-1]:
                    shaped.setdefault((side.label, "produce"), []).append(
                        side.cpu_per_request_us(produce)
                    )
                    fetch = fetches[side.label][round_ * requests : (round_ + 1) * requests]
                    shaped.setdefault((side.label, "fetch"), []).append(
                        side.cpu_per_request_us(fetch)
                    )
        finally:
            for side in sides:
                side.broker.stop()
    print(
        "idle, the broker's CPU a second: "
        + ", ".join(f"{ms:.1f} ms at {label}" for label, ms in idle.items())
        + " (in every figure a record, for as long as a burst lasts)"
    )
    print(f"same run, {rounds} rounds of {records:,} records a path, medians:")
    for topic in ("tuned", "defaults"):
        for path in ("produce", "consume"):
            now, then = figures[("this tree", topic, path)], figures[(baseline, topic, path)]
            print(f"  {path}, client {topic}: " + _against(now, then, baseline))
    print(
        f"fixed-shape requests ({PARTITIONS} partitions x {SHAPE_RECORDS} records),"
        f" {rounds} bursts, medians of the broker's CPU a request:"
    )
    for path in ("produce", "fetch"):
        now_us = statistics.median(shaped[("this tree", path)])
        then_us = statistics.median(shaped[(baseline, path)])
        print(
            f"  {path}: {now_us:.0f} us against {then_us:.0f} us at {baseline}"
            f" ({(now_us / then_us - 1) * 100:+.1f}%)"
        )


def _against(now: list[Burst], then: list[Burst], baseline: str) -> str:
    def median(bursts: list[Burst], figure: str) -> float:
        return float(statistics.median(getattr(burst, figure) for burst in bursts))

    def change(figure: str) -> str:
        return f"{(median(now, figure) / median(then, figure) - 1) * 100:+.1f}%"

    return (
        f"{median(now, 'rate') / 1e3:.0f} k/s against {median(then, 'rate') / 1e3:.0f} k/s at"
        f" {baseline} ({change('rate')}); broker CPU {median(now, 'cpu_per_record_us'):.3f}"
        f" us/record against {median(then, 'cpu_per_record_us'):.3f}"
        f" ({change('cpu_per_record_us')}), {median(now, 'cpu_per_request_us'):.0f} us/request"
        f" against {median(then, 'cpu_per_request_us'):.0f} ({change('cpu_per_request_us')});"
        f" {median(now, 'records_per_request'):.0f} records/request against"
        f" {median(then, 'records_per_request'):.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", help="a commit to compare produce and consume with")
    parser.add_argument("--records", type=int, default=200_000, help="per burst")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000, help="fixed-shape, per burst")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-same-run-") as scratch:
        compare(Path(scratch), args.baseline, args.records, args.rounds, args.requests)


if __name__ == "__main__":
    main()
