"""Kafka Connect's JDBC connectors and lake sink on the Spark runner: rows/s of the JDBC
source in bulk mode (a 10-column PostgreSQL table into a topic), of the JDBC sink in upsert
mode and in insert mode with exactly.once.delivery (the topic into PostgreSQL tables), and
of the lake sink (the topic into Parquet files, one directory per Kafka partition).

Starts a real broker and a real PostgreSQL (tests/postgres_process.py) in temp dirs, and
runs the tasks through ``SparkRunner`` itself (the code a worker runs, without its REST
API) on a local[2] SparkSession started before the clock starts (a worker starts it once).
The source figure is from the task's start to the last record acknowledged in the topic;
the sink figures from the task's start to the last row in the table (the lake's: in its
committed files). Prints one line per figure. Usage: python bench/connect.py [--rows N] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
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
WARM_ROWS = 20_000


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watch"})
    try:
        metadata = consumer.list_topics(topic, timeout=5).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
            for p in metadata.partitions
        )
    finally:
        consumer.close()


def wait(check: object, what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--profile", action="store_true", help="profile the driver's thread")
    args = parser.parse_args()
    rows = args.rows
    work = Path(tempfile.mkdtemp(prefix="strom-bench-connect-"))
    broker = BrokerProcess(work / "broker", {"num.partitions": "4"})
    broker.start()
    postgres = PostgresProcess().start()
    try:
        columns = ", ".join(f"c{i} BIGINT" for i in range(1, COLUMNS))
        postgres.query(f"CREATE TABLE wide (id BIGINT PRIMARY KEY, {columns})")
        values = ", ".join(f"i * {i}" for i in range(1, COLUMNS))
        postgres.query(f"INSERT INTO wide SELECT i, {values} FROM generate_series(1, {rows}) i")
        postgres.query(f"CREATE TABLE warm AS SELECT * FROM wide WHERE id <= {WARM_ROWS}")
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
        profiler = cProfile.Profile() if args.profile else None

        def copy_source(table: str, count: int) -> float:
            config = {
                "connector.class": "JdbcSourceConnector",
                "connection.url": postgres.jdbc_url,
                "connection.user": "postgres",
                "mode": "bulk",
                "tables": table,
                "topic.prefix": "bench-",
                "poll.interval.ms": "3600000",
                "batch.max.rows": "10000",
            }
            spec = TaskSpec((f"source-{table}", 0), SOURCE, JdbcSourceTask, config, config)
            started = time.perf_counter()
            runner.start(spec, STARTED)
            topic = f"bench-{table}"
            wait(lambda: end_offset(broker.bootstrap, topic) >= count, f"{topic}'s records")
            elapsed = time.perf_counter() - started
            runner.stop([spec.task_id])
            check_failures()
            return count / elapsed

        def copy_sink(table: str, count: int, exactly_once: bool = False) -> float:
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
            spec = TaskSpec((f"sink-{target}", 0), SINK, JdbcSinkTask, config, config)

            def copied() -> bool:
                try:
                    found = postgres.query(f"SELECT count(*) FROM {target}")[0][0]
                except Exception:
                    return False
                return isinstance(found, int) and found >= count

            started = time.perf_counter()
            runner.start(spec, STARTED)
            wait(copied, f"{target}'s rows")
            elapsed = time.perf_counter() - started
            runner.stop([spec.task_id])
            check_failures()
            return count / elapsed

        def copy_lake(table: str, count: int) -> float:
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

            started = time.perf_counter()
            runner.start(spec, STARTED)
            wait(written, f"{files}'s rows")
            elapsed = time.perf_counter() - started
            runner.stop([spec.task_id])
            check_failures()
            return count / elapsed

        def check_failures() -> None:
            failed = [s for s in states if s[1] == "FAILED"]
            if failed:
                raise SystemExit(f"a task failed: {failed[0][2]}")

        # A worker's first Spark jobs start its Python workers and warm the JVM: a small
        # table first, as a worker that has been running a while.
        copy_source("warm", WARM_ROWS)
        copy_sink("warm", WARM_ROWS)
        copy_lake("warm", WARM_ROWS)
        if profiler is not None:
            profiler.enable()
        rate = copy_source("wide", rows)
        print(f"JDBC source bulk, {COLUMNS} columns, {rows} rows: {rate:,.0f} rows/s")
        rate = copy_sink("wide", rows)
        print(f"JDBC sink upsert, {COLUMNS} columns, {rows} rows: {rate:,.0f} rows/s")
        rate = copy_sink("wide", rows, exactly_once=True)
        print(
            f"JDBC sink insert, exactly.once.delivery, {COLUMNS} columns, {rows} rows: "
            f"{rate:,.0f} rows/s"
        )
        rate = copy_lake("wide", rows)
        print(f"Lake sink, Parquet, {COLUMNS} columns, {rows} rows: {rate:,.0f} rows/s")
        if profiler is not None:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)
        runner.stop_all()
    finally:
        postgres.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)  # the topics, files and checkpoints


if __name__ == "__main__":
    main()
