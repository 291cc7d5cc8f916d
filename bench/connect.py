"""Kafka Connect's JDBC connectors and lake sink on the Spark runner: rows/s of the JDBC
source in bulk mode (a 10-column PostgreSQL table into a topic), of the JDBC sink in upsert
mode and in insert mode with exactly.once.delivery (the topic into PostgreSQL tables), and
of the lake sink (the topic into Parquet files, one directory per Kafka partition).

Starts a real broker and a real PostgreSQL (tests/postgres_process.py) in temp dirs, and
runs the tasks through ``SparkRunner`` itself (the code a worker runs, without its REST
API) on a local[2] SparkSession started before the clock starts (a worker starts it once).
The source figure is from the task's start to the last record acknowledged in the topic;
the sink figures from the task's start to the last row written (each sink's table is made
beforehand, as ``auto.create`` makes it, with one more column the database fills with the
time each row is written), the lake's to the last row in its committed files. Each copy
follows a warm-up copy of the same kind (``--warm-rows``; a running worker's JIT has
compiled the copy's code). Each figure also gives the CPU time a row cost, all processes
together and by part (the driver's JVM, Spark's Python workers running the tasks, Spark's
Python planning processes: data sources looked up, planned and committed, a stream's
offsets asked; the broker, PostgreSQL's backends; a process that exited unreaped is lost,
so a part may come out a little short), which the load of others on a shared machine
changes much less than the rows/s; ``--jvm-threads`` splits the JVM's by its threads (the
JIT compilers, the garbage collector, Spark's tasks...). Prints one line per figure.
Usage: python bench/connect.py [--rows N] [--warm-rows N] [--batch-size N] [--fetch-rows N]
[--figures source,upsert,once,lake] [--profile] [--jvm-threads]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import os
import pstats
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402
from postgres_process import PostgresProcess  # noqa: E402

from strom.connect.connectors.jdbc_sink import JdbcSinkTask  # noqa: E402
from strom.connect.connectors.jdbc_source import JdbcSourceTask  # noqa: E402
from strom.connect.connectors.lake_sink import LakeSinkTask, committed_files  # noqa: E402
from strom.connect.plugins import SINK, SOURCE, Plugins  # noqa: E402
from strom.connect.runtime import TaskSpec  # noqa: E402
from strom.connect.spark_runner import SparkRunner  # noqa: E402
from strom.connect.stores import STARTED, FileOffsetStore  # noqa: E402
from strom.connect.worker_config import STANDALONE, WorkerConfig  # noqa: E402

COLUMNS = 10


class TopicWatch:
    """The end offsets of a topic, asked by one consumer (not one made for each look: the
    watching should cost the machine little beside the copy it watches)."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watch"})

    def end_offset(self, topic: str) -> int:
        metadata = self.consumer.list_topics(topic, timeout=5).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        return sum(
            self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
            for p in metadata.partitions
        )

    def close(self) -> None:
        self.consumer.close()


TICKS_PER_S = os.sysconf("SC_CLK_TCK")


SPARK_JVM, PYTHON_PLANNING = "Spark's JVM", "Spark's Python planning"
PART_OF_COMMAND = (  # the part of the pipeline a process is, by its command line
    ("bin/java", SPARK_JVM),  # first: its class path names pyspark too
    ("pyspark.daemon pyspark.worker", "Spark's Python workers"),  # the tasks' Python
    # the others: data sources looked up, planned, committed, a stream's offsets asked
    ("pyspark", PYTHON_PLANNING),
    ("strom.cli.main broker", "broker"),
    ("postgres", "PostgreSQL"),
)


def cpu_by_part(roots: list[int]) -> dict[str, float]:
    """CPU seconds (user and system) of the processes under ``roots`` by part of the
    pipeline, with what their reaped children used (a Python worker that exited counts
    in its parent; one the JVM started, a data source's planning or a stream's offsets
    runner, in Spark's Python planning)."""
    children: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    reaped: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        pid, parent = int(entry), int(fields[1])
        children.setdefault(parent, []).append(pid)
        times[pid] = int(fields[11]) + int(fields[12])  # utime stime
        reaped[pid] = int(fields[13]) + int(fields[14])  # cutime cstime
    parts: dict[str, float] = {}
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            command = ""
        part = next((name for key, name in PART_OF_COMMAND if key in command), "the driver")
        parts[part] = parts.get(part, 0.0) + times.get(pid, 0) / TICKS_PER_S
        children_part = PYTHON_PLANNING if part == SPARK_JVM else part
        parts[children_part] = parts.get(children_part, 0.0) + reaped.get(pid, 0) / TICKS_PER_S
        todo.extend(children.get(pid, []))
    return parts


def cpu_seconds(roots: list[int]) -> float:
    return sum(cpu_by_part(roots).values())


JVM_THREADS = (  # a JVM thread's group, by the start of its name (/proc's comm: 15 bytes)
    ("C1 CompilerThre", "JIT"),
    ("C2 CompilerThre", "JIT"),
    ("GC Thread", "GC"),
    ("G1 ", "GC"),
    ("VM Thread", "GC"),
    ("Executor task", "Spark's tasks"),
)


def jvm_threads(root: int) -> dict[str, float]:
    """CPU seconds of the JVMs under ``root`` by group of threads: the JIT compilers, the
    garbage collector, Spark's task threads, the others by their names' start, and
    (``exited``) what threads that ended used (the process's own times less its live
    threads')."""
    groups: dict[str, float] = {}
    for pid in _descendants(root):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"bin/java" not in command:
                continue
            own = _ticks(Path(f"/proc/{pid}/stat").read_text())
            live = 0
            for task in Path(f"/proc/{pid}/task").iterdir():
                try:
                    name = (task / "comm").read_text().strip()
                    ticks = _ticks((task / "stat").read_text())
                except OSError:
                    continue
                live += ticks
                group = next(
                    (g for start, g in JVM_THREADS if name.startswith(start)),
                    re.sub(r"[-#]?\d+$", "", name),  # Thread-4, pool-2-thread-1...: the kind
                )
                groups[group] = groups.get(group, 0.0) + ticks / TICKS_PER_S
            groups["exited"] = groups.get("exited", 0.0) + (own - live) / TICKS_PER_S
        except OSError:
            continue
    return groups


def _ticks(stat: str) -> int:
    """A process's or thread's own CPU ticks (user and system) from its ``stat``."""
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def wait(check: object, what: str, timeout: float = 600.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(step)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--warm-rows",
        type=int,
        default=200_000,
        help="rows of the warm-up copies (a running worker's JIT has compiled the copy's code)",
    )
    parser.add_argument("--profile", action="store_true", help="profile the driver's thread")
    parser.add_argument(
        "--jvm-threads",
        action="store_true",
        help="also the JVM's CPU a row by group of threads (JIT, GC, Spark's tasks...)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="the sinks' batch.size (default: theirs)"
    )
    parser.add_argument(
        "--fetch-rows",
        type=int,
        default=10_000,
        help="the source's batch.max.rows, its JDBC fetch size (0: the connector's default)",
    )
    parser.add_argument(
        "--figures",
        default="source,upsert,once,lake",
        help="which figures (source is always run: the sinks read its topic)",
    )
    args = parser.parse_args()
    figures = set(args.figures.split(","))
    rows = args.rows
    work = Path(tempfile.mkdtemp(prefix="strom-bench-connect-"))
    broker = BrokerProcess(work / "broker", {"num.partitions": "4"})
    broker.start()
    postgres = PostgresProcess().start()
    postmaster = int((postgres.data / "postmaster.pid").read_text().split()[0])
    roots = [os.getpid(), postmaster]
    try:
        columns = ", ".join(f"c{i} BIGINT" for i in range(1, COLUMNS))
        postgres.query(f"CREATE TABLE wide (id BIGINT PRIMARY KEY, {columns})")
        values = ", ".join(f"i * {i}" for i in range(1, COLUMNS))
        postgres.query(f"INSERT INTO wide SELECT i, {values} FROM generate_series(1, {rows}) i")
        postgres.query(f"CREATE TABLE warm AS SELECT * FROM wide WHERE id <= {args.warm_rows}")
        config = WorkerConfig(
            {
                "bootstrap.servers": broker.bootstrap,
                "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "offset.storage.file.filename": str(work / "offsets"),
                "spark.master": "local[2]",
                "spark.sql.shuffle.partitions": "2",
                "spark.sql.streaming.checkpointLocation": str(work / "checkpoints"),
            },
            STANDALONE,
        )
        store = FileOffsetStore(str(work / "offsets"))
        store.start()
        states: list[tuple[object, str, str | None]] = []
        runner = SparkRunner(
            config, Plugins.builtin(), store, lambda t, s, tr: states.append((t, s, tr))
        )
        runner.sessions.get()  # the worker's JVM, started once
        watch = TopicWatch(broker.bootstrap)
        profiler = cProfile.Profile() if args.profile else None

        def copy_source(table: str, count: int) -> str:
            config = {
                "connector.class": "JdbcSourceConnector",
                "connection.url": postgres.jdbc_url,
                "connection.user": "postgres",
                "mode": "bulk",
                "tables": table,
                "topic.prefix": "bench-",
                "poll.interval.ms": "3600000",
            }
            if args.fetch_rows:
                config["batch.max.rows"] = str(args.fetch_rows)
            spec = TaskSpec((f"source-{table}", 0), SOURCE, JdbcSourceTask, config, config)
            cpu = cpu_by_part(roots)
            start_threads()
            started = time.perf_counter()
            runner.start(spec, STARTED)
            topic = f"bench-{table}"
            wait(lambda: watch.end_offset(topic) >= count, f"{topic}'s records")
            elapsed = time.perf_counter() - started
            used = spent(cpu)
            runner.stop([spec.task_id])
            check_failures()
            return figure(count, elapsed, used)

        def copy_sink(table: str, count: int, exactly_once: bool = False) -> str:
            target = f"{table}_once" if exactly_once else f"{table}_copy"
            config = {
                "name": f"sink-{target}",
                "connector.class": "JdbcSinkConnector",
                "connection.url": postgres.jdbc_url,
                "connection.user": "postgres",
                "topics": f"bench-{table}",
                "table.name.format": target,
                "insert.mode": "upsert",
                "pk.mode": "record_value",
                "pk.fields": "id",
                "auto.create": "true",
            }
            if exactly_once:
                config.update({"insert.mode": "insert", "exactly.once.delivery": "true"})
            if args.batch_size:
                config["batch.size"] = str(args.batch_size)
            spec = TaskSpec((f"sink-{target}", 0), SINK, JdbcSinkTask, config, config)
            # The table the sink would create, and a column the database fills as each row
            # is written: the copy's end is read from it. The rows written are looked at
            # once a second in the database's statistics, counted once those say all are
            # (a count scans the table: a second of PostgreSQL's CPU a million rows when
            # the table was counted each second).
            postgres.query(
                f"CREATE TABLE {target} (id BIGINT PRIMARY KEY, {columns}, "
                "copied_at TIMESTAMPTZ DEFAULT clock_timestamp())"
            )

            def copied() -> bool:
                written = postgres.query(
                    "SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relname = %s",
                    target,
                )
                if not written or not isinstance(written[0][0], int) or written[0][0] < count:
                    return False
                found = postgres.query(f"SELECT count(*) FROM {target}")[0][0]
                return isinstance(found, int) and found >= count

            cpu = cpu_by_part(roots)
            start_threads()
            started = time.time()
            runner.start(spec, STARTED)
            wait(copied, f"{target}'s rows", step=1.0)
            last = postgres.query(f"SELECT max(copied_at) FROM {target}")[0][0]
            used = spent(cpu)
            assert isinstance(last, datetime.datetime)
            elapsed = last.timestamp() - started
            runner.stop([spec.task_id])
            check_failures()
            return figure(count, elapsed, used)

        def copy_lake(table: str, count: int) -> str:
            config = {
                "name": f"lake-{table}",
                "connector.class": "LakeSink",
                "path": str(work / "lake"),
                "topics": f"bench-{table}",
                "rotate.interval.ms": "1000",
            }
            spec = TaskSpec((f"lake-{table}", 0), SINK, LakeSinkTask, config, config)
            files = work / "lake" / "topics" / f"bench-{table}"

            def written() -> bool:  # Parquet footers hold the row counts
                import pyarrow.parquet as pq

                rows: int = sum(pq.read_metadata(p).num_rows for p in committed_files(files))
                return rows >= count

            cpu = cpu_by_part(roots)
            start_threads()
            started = time.perf_counter()
            runner.start(spec, STARTED)
            wait(written, f"{files}'s rows", step=0.2)
            elapsed = time.perf_counter() - started
            used = spent(cpu)
            runner.stop([spec.task_id])
            check_failures()
            return figure(count, elapsed, used)

        threads_before: dict[str, float] = {}

        def spent(before: dict[str, float]) -> dict[str, float]:
            after = cpu_by_part(roots)
            return {part: after[part] - before.get(part, 0.0) for part in after}

        def start_threads() -> None:
            if args.jvm_threads:
                threads_before.clear()
                threads_before.update(jvm_threads(os.getpid()))

        def threads_spent(count: int) -> str:
            if not args.jvm_threads:
                return ""
            after = jvm_threads(os.getpid())
            used = {g: after[g] - threads_before.get(g, 0.0) for g in after}
            return (
                " [JVM threads: "
                + ", ".join(
                    f"{g} {seconds / count * 1e6:.1f}"
                    for g, seconds in sorted(used.items(), key=lambda item: -item[1])
                    if seconds / count * 1e6 >= 0.05
                )
                + "]"
            )

        def figure(count: int, elapsed: float, cpu: dict[str, float]) -> str:
            load = os.getloadavg()[0]
            total = sum(cpu.values())
            parts = ", ".join(
                f"{part} {seconds / count * 1e6:.1f}"
                for part, seconds in sorted(cpu.items(), key=lambda item: -item[1])
            )
            return (
                f"{count / elapsed:,.0f} rows/s; CPU {total / count * 1e6:.1f} us a row "
                f"({parts}; {total / elapsed:.2f} cores busy; load average {load:.1f})"
                + threads_spent(count)
            )

        def check_failures() -> None:
            failed = [s for s in states if s[1] == "FAILED"]
            if failed:
                raise SystemExit(f"a task failed: {failed[0][2]}")

        # A worker's first Spark jobs start its Python workers and warm the JVM: a small
        # table first, as a worker that has been running a while.
        copy_source("warm", args.warm_rows)
        if figures & {"upsert", "once"}:
            copy_sink("warm", args.warm_rows)
        if "lake" in figures:
            copy_lake("warm", args.warm_rows)
        if profiler is not None:
            profiler.enable()
        result = copy_source("wide", rows)
        print(f"JDBC source bulk, {COLUMNS} columns, {rows} rows: {result}", flush=True)
        if "upsert" in figures:
            result = copy_sink("wide", rows)
            print(f"JDBC sink upsert, {COLUMNS} columns, {rows} rows: {result}", flush=True)
        if "once" in figures:
            result = copy_sink("wide", rows, exactly_once=True)
            print(
                f"JDBC sink insert, exactly.once.delivery, {COLUMNS} columns, {rows} rows: "
                f"{result}",
                flush=True,
            )
        if "lake" in figures:
            result = copy_lake("wide", rows)
            print(f"Lake sink, Parquet, {COLUMNS} columns, {rows} rows: {result}", flush=True)
        if profiler is not None:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)
        runner.stop_all()
        watch.close()
    finally:
        postgres.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)  # the topics, files and checkpoints


if __name__ == "__main__":
    main()
