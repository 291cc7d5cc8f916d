"""PostgreSQL change data capture (Debezium's PostgresConnector in the Connect worker):
the latency from a change's commit to its record being readable in the topic, at a steady
rate of single-row transactions.

Starts a real broker, a real PostgreSQL (tests/postgres_process.py) and a real Connect
worker process (``strom connect-standalone``, or ``connect-distributed`` with
exactly-once source support with ``--exactly-once``) running the connector on one table.
Writers (``--writers`` connections, 1, each a loop inside the server) commit single-row
inserts at ``--rate`` per second in all for ``--seconds``; a consumer (read_committed)
takes each record as it comes and measures, for each change, its receive time minus its
commit time (the source block's ``ts_us``, PostgreSQL's clock, the same machine's), and
the record's timestamp (set when the worker sent it) minus the commit time. Prints p50,
p99 and max of both, the rate the writers achieved, the rate records arrived, and the
worker's CPU time a change. With ``--drain N`` it measures the worker's capacity instead:
the worker is stopped while N changes are committed, and the rate it then drains them at
is printed. Usage: python bench/connect_cdc.py [--rate N] [--seconds S] [--writers W]
[--exactly-once] [--schemaless] [--timeline] [--flush-ms MS] [--drain N]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402
from postgres_process import PostgresProcess  # noqa: E402
from service_process import ServiceProcess  # noqa: E402

TOPIC = "bench.public.changes"


def write(port: int, rate: float, count: int, first_id: int, step: int, done: Any) -> None:
    """Commit ``count`` single-row inserts, one every ``1 / rate`` s on schedule, from a
    loop inside the server (a DO block committing each row: no client round trip a
    change, so the writer takes little of the host the connector is measured on). A late
    commit is sent at once; the loop sleeps whenever it is a millisecond ahead."""
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                         autocommit=True) as connection:  # fmt: skip
        # PostgreSQL's default: a commit returns once its WAL is flushed, and logical
        # decoding sends only flushed WAL (the test server's default is off, which leaves
        # commits to the WAL writer's 200 ms rounds)
        connection.execute("SET synchronous_commit = on")
        begin = time.monotonic()
        connection.execute(
            f"""DO $$
            DECLARE
                started timestamptz := clock_timestamp();
                ahead interval;
            BEGIN
                FOR n IN 0..{int(count) - 1} LOOP
                    ahead := started + ((n + 1) / {float(rate)}) * interval '1 second'
                             - clock_timestamp();
                    IF ahead > interval '1 millisecond' THEN
                        PERFORM pg_sleep(extract(epoch FROM ahead));
                    END IF;
                    INSERT INTO changes (id, payload)
                        VALUES ({int(first_id)} + n * {int(step)}, 'x');
                    COMMIT;
                END LOOP;
            END $$"""
        )
        with done.get_lock():
            done.value = max(done.value, time.monotonic() - begin)


def worker_files(work: Path, broker: BrokerProcess, postgres: PostgresProcess,
                 args: argparse.Namespace) -> list[str]:  # fmt: skip
    schemas = "false" if args.schemaless else "true"
    common = (
        f"bootstrap.servers={broker.bootstrap}\n"
        "key.converter=org.apache.kafka.connect.json.JsonConverter\n"
        "value.converter=org.apache.kafka.connect.json.JsonConverter\n"
        f"key.converter.schemas.enable={schemas}\nvalue.converter.schemas.enable={schemas}\n"
        f"offset.flush.interval.ms={args.flush_ms}\nlisteners=http://127.0.0.1:0\n"
    )
    properties = work / "worker.properties"
    if args.exactly_once:
        properties.write_text(
            common + "group.id=bench-cdc\nconfig.storage.topic=bench-configs\n"
            "offset.storage.topic=bench-offsets\nstatus.storage.topic=bench-status\n"
            "config.storage.replication.factor=1\noffset.storage.replication.factor=1\n"
            "status.storage.replication.factor=1\nexactly.once.source.support=enabled\n"
        )
        return ["connect-distributed", str(properties)]
    properties.write_text(common + f"offset.storage.file.filename={work / 'offsets'}\n")
    connector = work / "cdc.json"
    connector.write_text(json.dumps({"name": "bench-cdc", "config": connector_config(postgres)}))
    return ["connect-standalone", str(properties), str(connector)]


def connector_config(postgres: PostgresProcess) -> dict[str, str]:
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1", "database.port": str(postgres.port),
        "database.user": "postgres", "database.dbname": "postgres",
        "topic.prefix": "bench", "table.include.list": "public.changes",
    }  # fmt: skip


def create_connector(url: str, postgres: PostgresProcess) -> None:
    import urllib.request

    body = json.dumps({"name": "bench-cdc", "config": connector_config(postgres)}).encode()
    request = urllib.request.Request(url + "/connectors", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 201


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drain(
    worker: ServiceProcess, postgres: PostgresProcess, consumer: Consumer, count: int
) -> None:
    """The worker's capacity: stopped (SIGSTOP) while ``count`` single-row transactions
    are committed, then let go: the rate it drains them at, and its CPU time a change."""
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        # single-row transactions, as the steady run commits them
        postgres.query(
            f"DO $$ BEGIN FOR i IN 1..{int(count)} LOOP "
            "INSERT INTO changes (id, payload) VALUES (i, 'x'); COMMIT; END LOOP; END $$"
        )
    finally:
        cpu = cpu_seconds(worker.proc.pid)
        begin = time.monotonic()
        os.kill(worker.proc.pid, signal.SIGCONT)
    received = 0
    while received < count:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None and message.value() is not None:
            received += 1
    elapsed = time.monotonic() - begin
    cpu = cpu_seconds(worker.proc.pid) - cpu
    print(f"drained {count:,} changes in {elapsed:.1f} s: {count / elapsed:,.0f} changes/s; "
          f"worker CPU {cpu / count * 1e6:.0f} us a change; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip


class WalSenderSampler(threading.Thread):
    """Twice a second: what the slot's walsender waits on, and how far what it has sent is
    behind the WAL flushed (it decodes in commit order, one transaction after another)."""

    def __init__(self, postgres: PostgresProcess) -> None:
        super().__init__(daemon=True)
        self.postgres = postgres
        self.halt = threading.Event()
        self.waits: dict[str, int] = {}
        self.behind_bytes: list[int] = []

    def run(self) -> None:
        query = (
            "SELECT coalesce(a.wait_event_type || ':' || a.wait_event, 'on CPU'), "
            "pg_wal_lsn_diff(pg_current_wal_flush_lsn(), r.sent_lsn)::bigint "
            "FROM pg_stat_replication r JOIN pg_stat_activity a ON a.pid = r.pid"
        )
        with self.postgres.connect() as connection:
            while not self.halt.wait(0.5):
                for wait, behind in connection.execute(query).fetchall():
                    self.waits[wait] = self.waits.get(wait, 0) + 1
                    self.behind_bytes.append(int(behind or 0))

    def report(self) -> str:
        self.halt.set()
        self.join(5)
        waits = ", ".join(f"{w} {n}" for w, n in sorted(self.waits.items(), key=lambda i: -i[1]))
        worst = max(self.behind_bytes, default=0)
        return f"walsender samples: {waits}; its send behind the WAL flushed by up to {worst:,} B"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--writers", type=int, default=1, help="connections committing changes")
    parser.add_argument("--exactly-once", action="store_true")
    parser.add_argument("--flush-ms", type=int, default=60000,
                        help="the worker's offset.flush.interval.ms (Kafka's default)")  # fmt: skip
    parser.add_argument("--drain", type=int, default=0, help="measure the drain of N changes")
    parser.add_argument("--timeline", action="store_true", help="latency by second of commit")
    parser.add_argument("--schemaless", action="store_true", help="JsonConverter without schemas")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="strom-bench-cdc-"))
    broker = BrokerProcess(work / "broker")
    broker.start()
    postgres = PostgresProcess().start()
    worker: ServiceProcess | None = None
    try:
        postgres.query("CREATE TABLE changes (id BIGINT PRIMARY KEY, payload TEXT)")
        worker = ServiceProcess(worker_files(work, broker, postgres, args), work / "worker.log")
        if args.exactly_once:
            create_connector(worker.url, postgres)
        slot = "SELECT active FROM pg_replication_slots WHERE slot_name = 'debezium'"
        deadline = time.monotonic() + 120
        while postgres.query(slot) != [(True,)]:
            if time.monotonic() > deadline:
                raise SystemExit(f"the connector did not start streaming:\n{worker.output()}")
            time.sleep(0.1)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-cdc",
                             "isolation.level": "read_committed", "fetch.wait.max.ms": 10,
                             "enable.auto.commit": False})  # fmt: skip
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        # one change first: the topic exists and the consumer reads it before the clock runs
        postgres.query("INSERT INTO changes (id, payload) VALUES (0, 'warm-up')")
        while True:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"no warm-up change in the topic:\n{worker.output()}")
        if args.drain:
            drain(worker, postgres, consumer, args.drain)
            consumer.close()
            return
        done = multiprocessing.Value("d", 0.0)
        expected = int(args.rate * args.seconds)
        each = expected // args.writers
        expected = each * args.writers
        writers = [
            multiprocessing.Process(
                target=write,
                args=(postgres.port, args.rate / args.writers, each, w + 1, args.writers, done),
            )
            for w in range(args.writers)
        ]
        worker_cpu = cpu_seconds(worker.proc.pid)
        sampler = WalSenderSampler(postgres)
        sampler.start()
        started = time.time()
        for writer in writers:
            writer.start()
        latencies_ms: list[float] = []
        last = 0.0
        committed_at: list[float] = []
        produced_ms: list[float] = []  # commit to the worker's send (the record's time)
        deadline = time.monotonic() + args.seconds + 300
        while len(latencies_ms) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.1)  # each record as soon as it comes
            if message is not None and message.error() is None and message.value() is not None:
                received = time.time()
                document = json.loads(message.value())
                payload = document["payload"] if "payload" in document else document
                committed_us = payload["source"]["ts_us"]
                latencies_ms.append((received * 1e6 - committed_us) / 1000)
                produced_ms.append(message.timestamp()[1] - committed_us / 1000)
                committed_at.append(payload["source"]["ts_us"] / 1e6)
                last = received
        worker_cpu = cpu_seconds(worker.proc.pid) - worker_cpu
        for writer in writers:
            writer.join()
        consumer.close()
        written = expected / done.value if done.value else 0.0
        print(f"changes: {len(latencies_ms)} of {expected} "
              f"({'exactly once, distributed' if args.exactly_once else 'standalone'}, "
              f"{'schemaless' if args.schemaless else 'with schemas'})")  # fmt: skip
        print(f"writer: {written:,.0f} commits/s achieved (target {args.rate:,}/s)")
        print(sampler.report())
        print(f"worker: {worker_cpu:.1f} s of CPU, {worker_cpu / expected * 1e6:.0f} us a change; "
              f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        if latencies_ms:
            arrived = len(latencies_ms) / max(last - started, 1e-9)
            print(f"arrived: {arrived:,.0f} records/s from the first commit to the last record")
            print(
                f"commit to topic: p50 {percentile(latencies_ms, 0.5):.1f} ms, "
                f"p99 {percentile(latencies_ms, 0.99):.1f} ms, max {max(latencies_ms):.1f} ms"
            )
            print(
                f"commit to the worker's send: p50 {percentile(produced_ms, 0.5):.1f} ms, "
                f"p99 {percentile(produced_ms, 0.99):.1f} ms, max {max(produced_ms):.1f} ms"
            )
        if args.timeline and committed_at:
            print("second of commit: changes, to topic p50 / max, to the send p50 / max (ms)")
            start = committed_at[0]
            seconds: dict[int, list[tuple[float, float]]] = {}
            for at, latency, sent in zip(committed_at, latencies_ms, produced_ms, strict=True):
                seconds.setdefault(int(at - start), []).append((latency, sent))
            for second, pairs in sorted(seconds.items()):
                topic = [p[0] for p in pairs]
                send = [p[1] for p in pairs]
                print(f"  {second:3d}: {len(pairs):5d}, {percentile(topic, 0.5):7.1f} / "
                      f"{max(topic):7.1f}, {percentile(send, 0.5):7.1f} / "
                      f"{max(send):7.1f}")  # fmt: skip
    finally:
        if worker is not None:
            worker.stop()
        postgres.stop()
        broker.stop()


if __name__ == "__main__":
    main()
