"""The ``strom`` Spark source and sink: rows/s into Spark, against Parquet in the same run.

Starts a real broker process on a free port with its data in a temp dir, produces N
records of 100 B to a 6-partition topic, then with a local[2] SparkSession:
  1. counts the topic through ``spark.read.format("strom")`` (every row goes through
     the Python source as Arrow batches) and reads every column (``noop`` sink);
  2. writes the same rows to Parquet, and counts and reads them back the same way
     (the ratio is what the source costs against Spark's own columnar reader);
  3. writes the rows back to a new topic with ``df.write.format("strom")``.
Prints one line per figure. Usage: python bench/spark_source.py [--records N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402

RECORD = b"x" * 100
PARTITIONS = 6


def create(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(60)


def produce(bootstrap: str, topic: str, count: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "compression.type": "none",
            "enable.idempotence": False,
            "acks": "1",
        }
    )
    started = time.perf_counter()
    for i in range(count):
        try:
            producer.produce(topic, RECORD, partition=i % PARTITIONS)
        except BufferError:
            producer.poll(0.05)
            producer.produce(topic, RECORD, partition=i % PARTITIONS)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    return count / (time.perf_counter() - started)


def topic_size(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-size"})
    total = 0
    for p in range(PARTITIONS):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += high - low
    consumer.close()
    return total


def timed(label: str, rows: int, action) -> float:
    started = time.perf_counter()
    result = action()
    elapsed = time.perf_counter() - started
    if isinstance(result, int):
        assert result == rows, f"{label}: {result} rows, expected {rows}"
    rate = rows / elapsed
    print(f"{label:<44} {rows:>10,} rows in {elapsed:6.2f} s: {rate:>12,.0f} rows/s", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--sink-records", type=int, default=1_000_000)
    args = parser.parse_args()

    import strom.spark

    with tempfile.TemporaryDirectory(prefix="strom-bench-spark-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data")
        broker.start()
        try:
            bootstrap = broker.bootstrap
            create(bootstrap, "spark-in")
            rate = produce(bootstrap, "spark-in", args.records)
            print(f"setup: produced {args.records:,} x 100 B at {rate:,.0f} records/s")

            spark = strom.spark.local_session(
                "strom-bench",
                **{"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
            )
            spark.sparkContext.setLogLevel("ERROR")
            source = (
                spark.read.format("strom")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", "spark-in")
                .load()
            )
            n = args.records
            timed("warm-up: strom count (first job)", n, source.count)
            strom_count = timed("strom source -> count()", n, source.count)
            strom_noop = timed(
                "strom source -> every column (noop sink)",
                n,
                lambda: source.write.format("noop").mode("overwrite").save(),
            )

            parquet = str(Path(tmp) / "rows.parquet")
            source.write.parquet(parquet)
            table = spark.read.parquet(parquet)
            parquet_count = timed("parquet -> count() (footers only)", n, table.count)
            parquet_noop = timed(
                "parquet -> every column (noop sink)",
                n,
                lambda: table.write.format("noop").mode("overwrite").save(),
            )
            print(f"ratio strom/parquet, every column: {strom_noop / parquet_noop:.2f}")
            print(f"ratio strom/parquet, count():      {strom_count / parquet_count:.3f}")

            create(bootstrap, "spark-out")
            m = min(args.sink_records, n)
            rows = table.select("value").limit(m).repartition(2).cache()
            rows.count()
            timed(
                "strom sink (df.write, value only)",
                m,
                lambda: (
                    rows.write.format("strom")
                    .mode("append")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", "spark-out")
                    .save()
                ),
            )
            assert topic_size(bootstrap, "spark-out") == m
            spark.stop()
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
