"""What the example pipelines share: a local SparkSession with the ``strom`` format,
reading a topic as a stream, writing a stream to a topic, and the command line.

Every pipeline module exposes ``start(spark, bootstrap, ..., checkpoint_dir,
available_now)`` that starts its streaming queries and returns them, so that a test
(or a notebook) can drive it; ``python <module>.py --bootstrap-server HOST:PORT``
runs it until Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

import strom.spark

log = logging.getLogger(__name__)


def session(app_name: str) -> SparkSession:
    return strom.spark.local_session(app_name, **{"spark.sql.shuffle.partitions": "2"})


def read_topic(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> DataFrame:
    """The topic as a streaming DataFrame of Kafka rows, from its start by default."""
    reader = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    return reader.options(**options).load()


def write_topic(
    df: DataFrame,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    available_now: bool,
    output_mode: str = "append",
) -> StreamingQuery:
    """Start writing ``df`` (columns key, value) to ``topic``; Trigger.AvailableNow
    when ``available_now`` (process what is there, then stop), else every second.

    Spark offers Python stream writers the append mode only, so an ``update`` query
    writes each micro-batch's changed rows with the batch sink from ``foreachBatch``
    (the same records, at-least-once too).
    """
    if output_mode == "update":

        def write_batch(batch: DataFrame, _batch_id: int) -> None:
            batch.write.format("strom").mode("append").option(
                "kafka.bootstrap.servers", bootstrap
            ).option("topic", topic).save()

        writer = df.writeStream.outputMode("update").foreachBatch(write_batch)
    else:
        writer = (
            df.writeStream.format("strom")
            .outputMode(output_mode)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
        )
    writer = writer.option("checkpointLocation", str(checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="1 second")
    return started(writer.start(), available_now)


def started(query: StreamingQuery, available_now: bool) -> StreamingQuery:
    """With Trigger.AvailableNow, wait until ``query`` has processed what is there, so
    that a pipeline's queries run one after another: each query starts Python workers,
    and on a busy machine many starting at once can miss Spark's connect-back timeout.
    Otherwise return at once: the query runs until stopped."""
    if available_now:
        query.awaitTermination()
    return query


def main(
    description: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    start: Callable[..., Sequence[StreamingQuery]],
    argv: Sequence[str] | None = None,
) -> None:
    """Parse the command line, start the pipeline, and wait for its queries."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT")
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="where the queries keep their progress (default: a temp dir)",
    )
    parser.add_argument(
        "--available-now", action="store_true", help="process what the topics hold now, then stop"
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    checkpoint_dir = args.checkpoint_dir or Path(tempfile.mkdtemp(prefix="strom-pipeline-"))
    spark = session(parser.prog)
    spark.sparkContext.setLogLevel("WARN")
    options: dict[str, Any] = {
        k: v
        for k, v in vars(args).items()
        if k not in ("bootstrap_server", "checkpoint_dir", "available_now")
    }
    queries = start(
        spark,
        args.bootstrap_server,
        checkpoint_dir=checkpoint_dir,
        available_now=args.available_now,
        **options,
    )
    log.info("started %d queries; checkpoints under %s", len(queries), checkpoint_dir)
    try:
        for query in queries:
            query.awaitTermination()
    except KeyboardInterrupt:
        for query in queries:
            query.stop()
    finally:
        spark.stop()
