"""Stateless pipeline: JSON events from one topic, filtered and reshaped, into another.

Input (``--source``, default ``events``): values like
``{"user": "ana", "action": "purchase", "amount": 12.5, "ts": 1700000000000}``.
Output (``--sink``, default ``purchases``): purchases of at least ``--min-amount``,
keyed by user, as ``{"user": "ana", "amount_cents": 1250, "ts": 1700000000000}``.
Malformed values are dropped. Each input record is read once from the checkpointed
offsets; the sink is at-least-once.

    python examples/pipelines/filter_map.py --bootstrap-server 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import main, read_topic, write_topic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

EVENT_SCHEMA = "user string, action string, amount double, ts long"


def purchases(events: DataFrame, min_amount: float) -> DataFrame:
    """Kafka rows of events -> (key, value) rows of purchases worth at least min_amount."""
    parsed = events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
    return parsed.where(
        (F.col("e.action") == "purchase") & (F.col("e.amount") >= F.lit(min_amount))
    ).select(
        F.col("e.user").alias("key"),
        F.to_json(
            F.struct(
                F.col("e.user").alias("user"),
                F.round(F.col("e.amount") * 100).cast("long").alias("amount_cents"),
                F.col("e.ts").alias("ts"),
            )
        ).alias("value"),
    )


def start(
    spark: SparkSession,
    bootstrap: str,
    *,
    checkpoint_dir: Path,
    available_now: bool = False,
    source: str = "events",
    sink: str = "purchases",
    min_amount: float = 10.0,
) -> list[StreamingQuery]:
    df = purchases(read_topic(spark, bootstrap, source), min_amount)
    return [write_topic(df, bootstrap, sink, checkpoint_dir / "filter_map", available_now)]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", default="events")
    parser.add_argument("--sink", default="purchases")
    parser.add_argument("--min-amount", type=float, default=10.0)


if __name__ == "__main__":
    main(__doc__.splitlines()[0], _arguments, start)
