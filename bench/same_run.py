"""Produce and consume against a broker of this tree and one of another commit, both up
at once and served bursts in turn: whatever else loads the machine falls on both alike.

Each round, for the client tuned (acks=1, linger 5 ms, 1 MB batches) and with its
defaults (acks=all, linger 5 ms), the two brokers in turn (the order alternating): a
producer writes --records 100-B records to a 6-partition topic, then a fresh consumer
reads them back. Kept per burst: the rate the client saw, the broker's CPU time (every
thread's, in nanoseconds from /proc/PID/task/*/schedstat, not /proc/PID/stat's 10 ms
ticks), the produce and fetch requests it answered (from its /metrics) and so the
records a produce request carried.

Why per request: with linger.ms 5 a produce request carries what the client gathered in
5 ms, so the broker's CPU a record moves with how fast the client ran (a client slowed
by the machine's load sends smaller requests, each costing the broker about the same);
the CPU a request of the same shape does not. Medians over the rounds are printed.

Usage: python bench/same_run.py REV [--records N] [--rounds R]
       (bench/loop_lag.py --baseline REV runs it after its own figures)
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from broker_process import BrokerProcess  # noqa: E402

PARTITIONS = 6
VALUE = b"x" * 100
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


def compare(scratch: Path, baseline: str, records: int, rounds: int) -> None:
    with worktree(scratch, baseline) as tree:
        sides = [
            Side("this tree", BrokerProcess(scratch / "this-tree")),
            Side(baseline, TreeBroker(tree, scratch / "baseline")),
        ]
        figures: dict[tuple[str, str, str], list[Burst]] = {}
        try:
            for side in sides:
                side.start()
            for round_ in range(rounds):
                for topic in ("tuned", "defaults"):
                    for side in sides if round_ % 2 == 0 else sides[::-1]:
                        for path in ("produce", "consume"):
                            burst = (side.produce if path == "produce" else side.consume)(
                                topic, records
                            )
                            figures.setdefault((side.label, topic, path), []).append(burst)
        finally:
            for side in sides:
                side.broker.stop()
    print(f"same run, {rounds} rounds of {records:,} records a path, medians:")
    for topic in ("tuned", "defaults"):
        for path in ("produce", "consume"):
            now, then = figures[("this tree", topic, path)], figures[(baseline, topic, path)]
            print(f"  {path}, client {topic}: " + _against(now, then, baseline))


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-same-run-") as scratch:
        compare(Path(scratch), args.baseline, args.records, args.rounds)


if __name__ == "__main__":
    main()
