"""ksql on one machine: the four figures of the ksql server's queries.

Starts a real broker process and a real ksql server (``strom ksql-server``, its Spark
``local[2]`` on the same machine) with their data in a temp dir, then:
  1. a filter and projection CSAS (``CREATE STREAM ... AS SELECT ... WHERE``) on Spark
     over a source stream holding N JSON records: records/s from its first output record
     in the sink topic to its last (the sink's high watermarks; also from the CREATE
     statement, which adds the Spark query's start);
  2. a tumbling-window ``COUNT(*) ... GROUP BY`` CTAS (EMIT CHANGES: one output record
     per input record) on Spark, measured the same way;
  3. a push query (``SELECT ... EMIT CHANGES`` on ``/query-stream``): records produced
     at a steady rate, each carrying its send time; the latency from the produce call
     to the row read by the HTTP client, p50 / p99 (the first second left out);
  4. pull queries by key (``SELECT * FROM <table> WHERE key = ...`` on
     ``/query-stream``) on the table of 2, one after another: latency p50 / p99 of the
     whole HTTP request (the first one, which materializes the table, is shown apart);
  5. only when asked (``--only aggregates``, no target in the issue): the CTAS of 2 with
     SUM, AVG, MIN and MAX of a column beside the COUNT, measured as 2;
  6. only when asked (``--only join``, no target in the issue): a stream-table join CSAS
     (the source stream enriched from a table of the 1,000 users, written before the
     query starts, JSON, ``JOIN ... ON`` the table's primary key), measured as 1.
Each persistent query runs once over W records first (the server's Spark and Python
workers warmed), as on a server that has been running a while; each round is a new
source stream and a new query. The server runs with its defaults (trigger interval
500 ms, at_least_once, shuffle partitions 2) except ``ksql.spark.master=local[2]`` and
a session timeout of 60 s for the servers' group (its heartbeats, late on a loaded
machine, stopped a running query).
Prints the figures against the targets, with the machine's load. Usage: python
bench/ksql.py [--records N] [--rounds R] [--only csas|count|push|pull|aggregates|join ...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402
from service_process import ServiceProcess  # noqa: E402

from strom.ksql.rest_client import KsqlRestClient  # noqa: E402

PARTITIONS = 2
USERS = 1000
WARM = 20_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
REGIONS = ("eu", "us", "apac", "latam")
TARGETS = {
    "csas": 200_000.0,  # records/s, at least
    "count": 100_000.0,
    "push_p50": 200.0,  # ms, at most
    "push_p99": 1000.0,
    "pull_p99": 20.0,
}


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


_WATCHERS: dict[str, Consumer] = {}


def end_offsets(bootstrap: str, topic: str) -> int:
    """The sum of the topic's high watermarks (0 while it does not exist), asked on one
    consumer kept open (a new consumer a check took long enough, on the loaded machine,
    to miss the first output of a query writing 100,000 records/s)."""
    consumer = _WATCHERS.get(bootstrap)
    if consumer is None:
        consumer = _WATCHERS[bootstrap] = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "bench-watch"}
        )
    found = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None:
        return 0
    return sum(
        consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
        for p in found.partitions
    )


def wait(check: Callable[[], bool], what: str, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def view(i: int) -> bytes:
    """The i-th JSON record of the source streams (about 80 bytes)."""
    return json.dumps(
        {
            "page": f"/p/{i % 5000}",
            "region": REGIONS[i % len(REGIONS)],
            "duration": i % 997,
            "ms": BASE_MS + i,
        }
    ).encode()


def produce(bootstrap: str, topic: str, first: int, count: int) -> float:
    """Records first..first+count-1 produced (timestamp BASE_MS + i, key the user);
    the seconds it took."""
    values = [view(i) for i in range(first, first + count)]
    keys = [f"u{i % USERS}".encode() for i in range(first, first + count)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
    started = time.perf_counter()
    send = producer.produce
    for offset, (key, value) in enumerate(zip(keys, values, strict=True)):
        while True:
            try:
                send(topic, value, key, timestamp=BASE_MS + first + offset)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise SystemExit(f"records to {topic} were not acknowledged")
    return time.perf_counter() - started


class Server:
    def __init__(self, broker: BrokerProcess, work: Path) -> None:
        overrides = {
            "bootstrap.servers": broker.bootstrap,
            "listeners": "http://127.0.0.1:0",
            "ksql.streams.state.dir": str(work / "ksql-state"),
            "ksql.spark.master": "local[2]",
            # one server: its query slots stay its own while the loaded machine delays
            # the group's heartbeats (10 s stopped a running query, which then wrote
            # its micro-batch again)
            "ksql.streams.session.timeout.ms": "60000",
        }
        args = [arg for k, v in overrides.items() for arg in ("--override", f"{k}={v}")]
        self.process = ServiceProcess(["ksql-server", *args, "--log-level", "WARNING"])
        self.client = KsqlRestClient(self.process.url)

    def ksql(self, text: str) -> Any:
        return self.client.ksql(text, {"auto.offset.reset": "earliest"})

    def query_stream(self, sql: str) -> list[bytes]:
        request = urllib.request.Request(
            self.process.url + "/query-stream",
            data=json.dumps({"sql": sql, "properties": {}}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return [line for line in response.read().split(b"\n") if line]


def create_stream(server: Server, name: str) -> None:
    server.ksql(
        f"CREATE STREAM {name} (user_id STRING KEY, page STRING, region STRING, "
        f"duration BIGINT, ms BIGINT) WITH (KAFKA_TOPIC='{name}', VALUE_FORMAT='JSON', "
        f"PARTITIONS={PARTITIONS});"
    )


def holds(broker: BrokerProcess, topic: str, count: int) -> Callable[[], bool]:
    return lambda: end_offsets(broker.bootstrap, topic) >= count


def persistent_rates(
    server: Server,
    broker: BrokerProcess,
    name: str,
    statement: str,
    outputs: Callable[[int, int], int],
    records: int,
    rounds: int,
) -> tuple[list[float], list[float]]:
    """``statement`` (with ``{source}`` and ``{sink}`` to fill in) run first over WARM
    records (the server's Spark warmed), then ``rounds`` times over a new source stream
    holding ``records`` records: (records/s from the first output record to the last,
    records/s from the CREATE statement to the last output record)."""
    processing, with_start = [], []
    for round_ in range(rounds + 1):
        source, sink = f"{name}_src{round_}", f"{name}_{round_}".upper()
        count = WARM if round_ == 0 else records
        create_stream(server, source)
        producing = produce(broker.bootstrap, source, 0, count)
        expected = outputs(0, count)
        server.ksql("TERMINATE ALL;")  # idle queries would still poll; the last one stays
        started = time.perf_counter()
        server.ksql(statement.format(source=source, sink=sink))
        wait(holds(broker, sink, 1), f"{sink}'s first record")
        first = time.perf_counter()
        wait(holds(broker, sink, expected), f"{sink}'s records")
        done = time.perf_counter()
        if round_ == 0:
            print(f"  {sink} (warm-up, {count:,} records): {done - started:.1f} s; {load()}")
            continue
        if expected > 1 and done - first < 0.1:
            print(f"  {sink}: its output appeared at once (not measured); {load()}")
            continue
        processing.append(count / (done - first))
        with_start.append(count / (done - started))
        print(
            f"  {sink}: {count:,} records (produced in {producing:.1f} s): first output "
            f"{first - started:.1f} s after CREATE, the rest {done - first:.2f} s later "
            f"({processing[-1]:,.0f}/s; {with_start[-1]:,.0f}/s with the start); {load()}"
        )
        got = end_offsets(broker.bootstrap, sink)
        if got != expected:
            print(f"  note: {sink} holds {got:,} records, {expected:,} expected")
    return processing, with_start


def join_rates(
    server: Server, broker: BrokerProcess, records: int, rounds: int
) -> tuple[list[float], list[float]]:
    """The source streams enriched from a table of the USERS users (a name each, written
    before the queries start): ``persistent_rates`` of the stream-table join CSAS."""
    server.ksql(
        "CREATE TABLE users (id STRING PRIMARY KEY, name STRING) WITH "
        f"(KAFKA_TOPIC='users', VALUE_FORMAT='JSON', PARTITIONS={PARTITIONS});"
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(USERS):
        producer.produce(
            "users", json.dumps({"name": f"n{i}"}).encode(), f"u{i}".encode(),
            timestamp=BASE_MS - 1000,
        )  # fmt: skip
    if producer.flush(120) != 0:
        raise SystemExit("the users were not acknowledged")
    return persistent_rates(
        server,
        broker,
        "enriched",
        "CREATE STREAM {sink} AS SELECT v.user_id, v.page, u.name FROM {source} v "
        "JOIN users u ON v.user_id = u.id EMIT CHANGES;",
        lambda first, count: count,
        records,
        rounds,
    )


def eu_outputs(first: int, count: int) -> int:
    return sum(1 for i in range(first, first + count) if REGIONS[i % len(REGIONS)] == "eu")


def push_latencies(server: Server, broker: BrokerProcess, rate: int, seconds: float) -> list[float]:
    """Milliseconds from each produce call to its row read by the client."""
    create_stream(server, "pushed")
    request = urllib.request.Request(
        server.process.url + "/query-stream",
        data=json.dumps(
            {
                "sql": "SELECT user_id, page, ms FROM pushed WHERE region = 'eu' EMIT CHANGES;",
                "properties": {"auto.offset.reset": "earliest"},
            }
        ).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    arrivals: list[tuple[int, int]] = []  # (sent ns, received ns)
    response = urllib.request.urlopen(request, timeout=120)
    response.readline()  # the header: the query is running

    def read() -> None:
        try:
            for line in response:
                received = time.time_ns()
                row = json.loads(line)
                if isinstance(row, list):
                    arrivals.append((int(row[2]), received))
        except (OSError, ValueError):  # the response closed at the end
            return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    total = int(rate * seconds)
    started = time.perf_counter()
    for i in range(total):
        due = started + i / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        value = json.dumps(
            {"page": f"/p/{i}", "region": "eu", "duration": i, "ms": time.time_ns()}
        ).encode()
        producer.produce("pushed", value, f"u{i % USERS}".encode())
        producer.poll(0)
    producer.flush(30)
    wait(lambda: len(arrivals) >= total, "the push query's rows", timeout=60)
    response.close()
    skip = rate  # the first second
    return [(received - sent) / 1e6 for sent, received in arrivals[skip:]]


def pull_latencies(server: Server, table: str, count: int) -> tuple[float, list[float]]:
    """The first pull query's milliseconds (it materializes the table), then ``count``
    more's, by a random user's key."""
    latencies = []
    first = 0.0
    for i in range(count + 1):
        user = f"u{random.randrange(USERS)}"
        started = time.perf_counter()
        lines = server.query_stream(f"SELECT * FROM {table} WHERE user_id = '{user}';")
        elapsed = (time.perf_counter() - started) * 1000
        if len(lines) < 2:
            raise SystemExit(f"pull query for {user} answered no row: {lines}")
        if i == 0:
            first = elapsed
        else:
            latencies.append(elapsed)
    return first, latencies


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def _rates_text(rates: list[float], with_start: list[float]) -> str:
    """A persistent query's rounds: records/s, then counting the query's start."""
    each = " / ".join(f"{r:,.0f}" for r in rates)
    started = " / ".join(f"{r:,.0f}" for r in with_start)
    return f"{each} records/s ({started} with the query's start)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000, help="per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--push-rate", type=int, default=1000, help="records/s")
    parser.add_argument("--push-seconds", type=float, default=15.0)
    parser.add_argument("--pulls", type=int, default=300)
    parser.add_argument(
        "--only",
        choices=("csas", "count", "push", "pull", "aggregates", "join"),
        action="append",
        default=None,
    )
    args = parser.parse_args()
    only = set(args.only or ("csas", "count", "push", "pull"))
    if "pull" in only:
        only.add("count")
    work = Path(tempfile.mkdtemp(prefix="strom-bench-ksql-"))
    broker = BrokerProcess(work / "broker", {"num.partitions": str(PARTITIONS)})
    broker.start()
    server: Server | None = None
    results: list[tuple[str, str, str, bool]] = []
    try:
        server = Server(broker, work)
        print(f"broker and ksql server started; {load()}")
        if "csas" in only:
            rates, with_start = persistent_rates(
                server,
                broker,
                "eu_views",
                "CREATE STREAM {sink} AS SELECT user_id, page, duration * 2 AS doubled "
                "FROM {source} WHERE region = 'eu' EMIT CHANGES;",
                eu_outputs,
                args.records,
                args.rounds,
            )
            results.append(
                (
                    f"CSAS filter + projection, {args.records:,} JSON records",
                    _rates_text(rates, with_start),
                    f">= {TARGETS['csas']:,.0f}",
                    max(rates) >= TARGETS["csas"],
                )
            )
        if "count" in only:
            rates, with_start = persistent_rates(
                server,
                broker,
                "per_minute",
                "CREATE TABLE {sink} AS SELECT user_id, COUNT(*) AS views FROM {source} "
                "WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY user_id EMIT CHANGES;",
                lambda first, count: count,
                args.records,
                args.rounds,
            )
            table = f"PER_MINUTE_{args.rounds}"
            results.append(
                (
                    f"CTAS tumbling COUNT GROUP BY ({USERS} keys), {args.records:,} records",
                    _rates_text(rates, with_start),
                    f">= {TARGETS['count']:,.0f}",
                    max(rates) >= TARGETS["count"],
                )
            )
        if "aggregates" in only:
            rates, with_start = persistent_rates(
                server,
                broker,
                "stats",
                "CREATE TABLE {sink} AS SELECT user_id, COUNT(*) AS views, "
                "SUM(duration) AS total, AVG(duration) AS mean, MIN(duration) AS shortest, "
                "MAX(duration) AS longest FROM {source} WINDOW TUMBLING (SIZE 1 MINUTE) "
                "GROUP BY user_id EMIT CHANGES;",
                lambda first, count: count,
                args.records,
                args.rounds,
            )
            results.append(
                (
                    f"CTAS tumbling COUNT, SUM, AVG, MIN, MAX ({USERS} keys), "
                    f"{args.records:,} records",
                    _rates_text(rates, with_start),
                    "(none)",
                    True,
                )
            )
        if "join" in only:
            rates, with_start = join_rates(server, broker, args.records, args.rounds)
            results.append(
                (
                    f"CSAS stream-table JOIN ({USERS}-row table), {args.records:,} records",
                    _rates_text(rates, with_start),
                    "(none)",
                    True,
                )
            )
        if "push" in only:
            latencies = push_latencies(server, broker, args.push_rate, args.push_seconds)
            p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
            print(f"  push: {len(latencies):,} rows, max {max(latencies):.1f} ms; {load()}")
            results.append(
                (
                    f"push query, produce to client row, {args.push_rate:,} records/s",
                    f"p50 {p50:.1f} ms, p99 {p99:.1f} ms",
                    f"p50 <= {TARGETS['push_p50']:.0f}, p99 <= {TARGETS['push_p99']:.0f}",
                    p50 <= TARGETS["push_p50"] and p99 <= TARGETS["push_p99"],
                )
            )
        if "pull" in only:
            first, latencies = pull_latencies(server, table, args.pulls)
            p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
            print(f"  pull: first {first:.0f} ms (materializes the table); {load()}")
            results.append(
                (
                    f"pull query by key on a windowed table, {args.pulls} queries",
                    f"p50 {p50:.1f} ms, p99 {p99:.1f} ms",
                    f"p99 <= {TARGETS['pull_p99']:.0f}",
                    p99 <= TARGETS["pull_p99"],
                )
            )
    except BaseException:
        if server is not None:
            print(f"the ksql server's log: {server.process.log_path}")
        raise
    finally:
        for watcher in _WATCHERS.values():
            watcher.close()
        if server is not None:
            server.process.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    width = max(len(r[0]) for r in results) if results else 0
    print()
    print(f"{'figure':<{width}}  {'measured':<36}  {'target':<24}  met")
    for name, measured, target, met in results:
        print(f"{name:<{width}}  {measured:<36}  {target:<24}  {'yes' if met else 'NO'}")
    print(f"(2 cores shared; {load()})")


if __name__ == "__main__":
    main()
