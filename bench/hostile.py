"""Hostile clients: what bombs, slowloris and connection floods cost a broker, and what
the defences cost everyone else.

Starts a real broker (defaults, message.max.bytes 10 MB so that big legitimate batches
are accepted) and a probe: one client sending ApiVersions every 20 ms on its own
connection, timing each answer. Then, one phase after another:
  - quiet: the probe alone;
  - bombs, one kind at a time, each sent three times on fresh connections, with the
    broker's peak RSS above its idle RSS (VmHWM, reset before each kind through
    /proc/PID/clear_refs):
      * a Produce v0 gzip message set of ~128 kB holding 128 MiB;
      * a zstd v2 batch of a few kB holding 128 MiB, to a plain topic, to a compacted
        topic and to a topic with compression.type=lz4 (the broker would recompress);
      * a zstd batch holding 60 MiB (under the bound: accepted, recompressed to lz4);
      * a Fetch v3 of a stored gzip batch of a million small records (down-conversion);
  - slowloris: 300 connections that each declare a 1 MB request and send a byte a second;
  - idle flood: 3,000 connections opened and left silent;
  - everything at once: bombs in a loop, slowloris and the idle flood together.
For each phase the probe's median, p99 and worst answer time. Then a broker with
max.connections.per.ip=50: 200 connections from 127.0.0.1, and how many it holds.

With --baseline REV (default: the code before these defences, 259c7ea), normal produce
and consume of 100-B records (confluent-kafka tuned: acks=1, linger 5 ms, 1 MB batches;
and with the client's defaults) against a broker of this tree and one of REV, rounds
alternated, medians compared: throughput and the broker's CPU time per record.
--skip-compare leaves that out.

Usage: python bench/hostile.py [--records N] [--rounds R] [--baseline REV] [--skip-compare]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from broker_process import BrokerProcess  # noqa: E402
from legacy_messages import entry, message  # noqa: E402
from raw_client import RawClient  # noqa: E402
from test_old_message_formats import fetch as old_fetch  # noqa: E402
from test_old_message_formats import produce as old_produce  # noqa: E402

from strom.protocol.records import build_batch  # noqa: E402

MIB = 1024 * 1024
BASELINE = "259c7ea"


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field}")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


PROBE = """
import sys, time
sys.path.insert(0, sys.argv[2])
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from raw_client import RawClient
client = RawClient(int(sys.argv[1]), timeout=120)
request = ApiVersionsRequest(client_software_name="probe", client_software_version="1")
while True:
    started = time.monotonic()
    client.request(request)
    print(started, time.monotonic() - started, flush=True)
    time.sleep(0.02)
"""


class Probe:
    """ApiVersions every 20 ms on one connection, from a process of its own (so that the
    attackers' threads in this one cannot delay it); answer times by phase."""

    def __init__(self, port: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROBE, str(port), str(ROOT / "tests")],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.samples: list[tuple[float, float]] = []
        self.phases: dict[str, tuple[float, float]] = {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.phase_started = time.monotonic()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            sent, took = line.split()
            self.samples.append((float(sent), float(took)))

    def begin(self) -> None:
        self.phase_started = time.monotonic()

    def end(self, phase: str) -> str:
        """The answer times of requests sent since ``begin``, as one line."""
        self.phases[phase] = (self.phase_started, time.monotonic())
        time.sleep(0.5)  # a request sent just before the end may still be on its way
        low, high = self.phases[phase]
        times = sorted(took for sent, took in list(self.samples) if low <= sent < high)
        if not times:
            return "no answer at all"
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        return (
            f"median {statistics.median(times) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, "
            f"worst {times[-1] * 1e3:.1f} ms ({len(times)} requests)"
        )

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def produce_v2(port: int, topic: str, batch: bytes) -> int:
    with RawClient(port, timeout=120) as client:
        response = client.request(
            ProduceRequest(
                acks=1,
                timeout=datetime.timedelta(seconds=60),
                topic_data=(
                    TopicProduceData(
                        name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)
                    ),
                ),
            )
        )
    return int(response.responses[0].partition_responses[0].error_code)


class Bombs:
    """The bombs, made once."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.port = broker.port
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = {
            "plain": {},
            "compacted": {"cleanup.policy": "compact"},
            "recompressed": {"compression.type": "lz4"},
            "old": {},
            "many-small": {},
        }
        for _name, future in admin.create_topics(
            [NewTopic(n, 1, 1, config=c) for n, c in topics.items()]
        ).items():
            future.result(30)
        inner = entry(0, message(0, 0, b"k", b"\0" * (128 * MIB)))
        self.old_gzip = entry(0, message(0, 1, None, gzip.compress(inner, compresslevel=1)))
        self.zstd_128 = build_batch([(b"k", b"\0" * (128 * MIB))], codec=4)
        self.zstd_60 = build_batch([(b"k", b"\0" * (60 * MIB))], codec=4)
        many = build_batch([(None, b"x%050d" % i) for i in range(1_000_000)], codec=1)
        error = produce_v2(self.port, "many-small", many)
        if error:
            raise RuntimeError(f"storing the million-record batch failed: error {error}")

    def kinds(self) -> list[tuple[str, object]]:
        port = self.port

        def old_produce_bomb() -> object:
            with RawClient(port, timeout=120) as client:
                return old_produce(client, 0, "old", self.old_gzip)[0]

        def old_fetch_many() -> object:
            with RawClient(port, timeout=120) as client:
                error, data = old_fetch(client, 3, "many-small", 0)
            return error, len(data)

        def v2(topic: str, batch: bytes) -> object:
            return lambda: produce_v2(port, topic, batch)

        return [
            ("Produce v0 gzip message set, 128 MiB inside", old_produce_bomb),
            ("zstd batch, 128 MiB inside, plain topic", v2("plain", self.zstd_128)),
            ("zstd batch, 128 MiB inside, compacted topic", v2("compacted", self.zstd_128)),
            ("zstd batch, 128 MiB inside, lz4 topic", v2("recompressed", self.zstd_128)),
            ("zstd batch, 60 MiB inside, lz4 topic (accepted)", v2("recompressed", self.zstd_60)),
            ("Fetch v3 of a stored 1M-record gzip batch", old_fetch_many),
        ]


def slowloris(port: int, count: int, stop: threading.Event) -> None:
    """``count`` connections, each declaring a 1 MB request and trickling a byte a second."""
    sockets = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall((1_000_000).to_bytes(4, "big"))
        sockets.append(s)
    while not stop.wait(1.0):
        for s in sockets:
            try:
                s.send(b"\0")
            except OSError:
                pass
    for s in sockets:
        s.close()


def idle_flood(port: int, count: int, stop: threading.Event) -> None:
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    stop.wait()
    for s in sockets:
        s.close()


def bomb_loop(bombs: Bombs, stop: threading.Event) -> None:
    while not stop.is_set():
        for _, send in bombs.kinds():
            if stop.is_set():
                return
            send()  # type: ignore[operator]


def hostile(workdir: Path) -> None:
    broker = BrokerProcess(workdir / "hostile", {"message.max.bytes": str(10 * MIB)})
    broker.start(60)
    pid = broker.proc.pid  # type: ignore[union-attr]
    probe = None
    try:
        bombs = Bombs(broker)
        probe = Probe(broker.port)
        time.sleep(1)
        idle = status_kb(pid, "VmRSS")
        print(f"idle broker RSS: {idle / 1024:.0f} MB")
        probe.begin()
        time.sleep(3)
        print(f"probe, quiet: {probe.end('quiet')}")
        for name, send in bombs.kinds():
            reset_peak(pid)
            probe.begin()
            outcomes = [send() for _ in range(3)]  # type: ignore[operator]
            times = probe.end(name)
            peak = status_kb(pid, "VmHWM")
            print(
                f"bomb: {name}: answered {outcomes[0]}, peak RSS {(peak - idle) / 1024:+.0f} MB "
                f"above idle; probe {times}"
            )
        for name, attack, count in (
            ("slowloris, 300 connections", slowloris, 300),
            ("idle flood, 3,000 connections", idle_flood, 3000),
        ):
            stop = threading.Event()
            thread = threading.Thread(target=attack, args=(broker.port, count, stop))
            before = status_kb(pid, "VmRSS")
            thread.start()
            time.sleep(2)
            probe.begin()
            time.sleep(5)
            times = probe.end(name)
            grown = (status_kb(pid, "VmRSS") - before) / 1024
            print(f"{name}: broker RSS {grown:+.0f} MB; probe {times}")
            stop.set()
            thread.join()
        stop = threading.Event()
        threads = [
            threading.Thread(target=slowloris, args=(broker.port, 300, stop)),
            threading.Thread(target=idle_flood, args=(broker.port, 3000, stop)),
            threading.Thread(target=bomb_loop, args=(bombs, stop)),
        ]
        reset_peak(pid)
        for thread in threads:
            thread.start()
        time.sleep(2)
        probe.begin()
        time.sleep(15)
        times = probe.end("all at once")
        peak = status_kb(pid, "VmHWM")
        print(
            f"all at once (bombs in a loop, slowloris, idle flood): peak RSS "
            f"{(peak - idle) / 1024:+.0f} MB above idle; probe {times}"
        )
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        if probe is not None:
            probe.stop()
        broker.stop()


def per_ip_limit(workdir: Path) -> None:
    broker = BrokerProcess(workdir / "per-ip", {"max.connections.per.ip": "50"})
    broker.start(60)
    try:
        sockets = []
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", broker.port))
            sockets.append(s)
        time.sleep(1)
        held = 0
        request = ApiVersionsRequest(client_software_name="c", client_software_version="1")
        from strom.protocol.framing import encode_request

        for s in sockets:
            s.settimeout(5)
            try:
                s.sendall(encode_request(1, "c", request))
                if s.recv(4):
                    held += 1
            except OSError:
                pass
            finally:
                s.close()
        print(f"max.connections.per.ip=50: 200 connections opened, {held} held and served")
    finally:
        broker.stop()


class TreeBroker(BrokerProcess):
    """A broker run from another source tree (a worktree of an earlier commit)."""

    def __init__(self, tree: Path, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.tree = tree

    def command(self) -> list[str]:
        return ["env", "-C", str(self.tree), *super().command()]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(
    bootstrap: str, broker_pid: int, topic: str, records: int, tuned: bool
) -> tuple[float, float, float, float]:
    """Records per second of 100-B records to a 6-partition topic, produced then consumed,
    and the broker's CPU time per record (us) in each: throughput is what a client sees,
    the broker's CPU what the defences cost it, whatever else shares the machine."""
    settings = {"bootstrap.servers": bootstrap}
    if tuned:
        settings |= {"acks": "1", "linger.ms": "5", "batch.size": "1000000"}
    producer = Producer(settings)
    value = b"x" * 100
    cpu_before = cpu_seconds(broker_pid)
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % 6)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    produced = records / (time.perf_counter() - started)
    cpu_produce = (cpu_seconds(broker_pid) - cpu_before) / records * 1e6
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            **({"fetch.queue.backoff.ms": 10} if tuned else {}),
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(6)])
    got = 0
    cpu_before = cpu_seconds(broker_pid)
    started = time.perf_counter()
    while got < records:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
    consumed = records / (time.perf_counter() - started)
    cpu_consume = (cpu_seconds(broker_pid) - cpu_before) / records * 1e6
    consumer.close()
    return produced, consumed, cpu_produce, cpu_consume


def compare(workdir: Path, baseline: str, records: int, rounds: int) -> None:
    tree = workdir / "baseline-tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), baseline],
        check=True,
        capture_output=True,
    )
    if (tree / "strom/protocol/_record_walk.c").exists():  # built here, not in git
        for built in (ROOT / "strom/protocol").glob("_record_walk*.so"):
            shutil.copy(built, tree / "strom/protocol" / built.name)
    try:
        figures: dict[tuple[str, str, str], list[float]] = {}
        for round_ in range(rounds):
            for label in ("this tree", baseline) if round_ % 2 == 0 else (baseline, "this tree"):
                data = workdir / f"cmp-{round_}-{label.replace(' ', '-')}"
                broker = BrokerProcess(data) if label == "this tree" else TreeBroker(tree, data)
                broker.start(60)
                try:
                    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
                    for tuned in (True, False):
                        topic = "tuned" if tuned else "defaults"
                        admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
                        produced, consumed, cpu_produce, cpu_consume = throughput(
                            broker.bootstrap, broker.proc.pid, topic, records, tuned
                        )
                        figures.setdefault((label, topic, "produce"), []).append(produced)
                        figures.setdefault((label, topic, "consume"), []).append(consumed)
                        figures.setdefault((label, topic, "produce cpu"), []).append(cpu_produce)
                        figures.setdefault((label, topic, "consume cpu"), []).append(cpu_consume)
                finally:
                    broker.stop()
        for topic in ("tuned", "defaults"):
            for what in ("produce", "consume"):
                now = statistics.median(figures[("this tree", topic, what)])
                then = statistics.median(figures[(baseline, topic, what)])
                cpu_now = statistics.median(figures[("this tree", topic, what + " cpu")])
                cpu_then = statistics.median(figures[(baseline, topic, what + " cpu")])
                print(
                    f"{what} 100 B, client {topic}: {now / 1e3:.0f} k/s against {then / 1e3:.0f}"
                    f" k/s at {baseline} ({(now / then - 1) * 100:+.1f}%); broker CPU"
                    f" {cpu_now:.2f} us/record against {cpu_then:.2f}"
                    f" ({(cpu_now / cpu_then - 1) * 100:+.1f}%), medians of {rounds}"
                )
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--skip-attacks", action="store_true")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 20_000)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if not args.skip_attacks:
            hostile(workdir)
            per_ip_limit(workdir)
        if not args.skip_compare:
            compare(workdir, args.baseline, args.records, args.rounds)


if __name__ == "__main__":
    main()
