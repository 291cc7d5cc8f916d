"""Real-time fraud detection: card transactions in, suspicious patterns out within a
micro-batch or two (a second each by default).

Input (``--transactions``, default ``transactions``): JSON values
``{"card": "4000-1", "amount": 25.0, "merchant": "m1", "country": "DE", "ts": ms}``
keyed by card; the Kafka timestamp is the event time.
Output (``--alerts``, default ``fraud-alerts``): JSON alerts keyed by card:
  - ``large_amount``: one transaction of at least ``--large`` (stateless);
  - ``velocity``: ``--burst`` or more transactions on a card within one ``--window``;
  - ``geo_spread``: transactions from two or more countries on a card within one
    ``--travel-window`` (a card cannot be in two countries within minutes).
The windowed patterns run in update mode, so an alert goes out in the micro-batch
that crosses the threshold, not when the window closes; a later transaction in the
same window repeats the alert with the new figures (``window_start`` tells them apart).

    python examples/pipelines/fraud_detection.py --bootstrap-server 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import main, read_topic, write_topic
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

TRANSACTION = "card string, amount double, merchant string, country string, ts long"


def parse(rows: DataFrame) -> DataFrame:
    return (
        rows.select(F.from_json(F.col("value").cast("string"), TRANSACTION).alias("t"), "timestamp")
        .select("t.*", "timestamp")
        .where(F.col("card").isNotNull())
    )


def _alert(pattern: str, detail: Column, window_start: Column | None = None) -> list[Column]:
    fields = [
        F.col("card"),
        F.lit(pattern).alias("pattern"),
        detail.alias("detail"),
    ]
    if window_start is not None:
        fields.append(F.unix_millis(window_start).alias("window_start"))
    return [F.col("card").alias("key"), F.to_json(F.struct(*fields)).alias("value")]


def large_amounts(transactions: DataFrame, large: float) -> DataFrame:
    return transactions.where(F.col("amount") >= large).select(
        *_alert("large_amount", F.struct("amount", "merchant", "country", "ts"))
    )


def velocity(transactions: DataFrame, burst: int, window: str, delay: str) -> DataFrame:
    counted = (
        transactions.withWatermark("timestamp", delay)
        .groupBy(F.window("timestamp", window), "card")
        .agg(F.count("*").alias("transactions"), F.sum("amount").alias("total"))
    )
    return counted.where(F.col("transactions") >= burst).select(
        *_alert("velocity", F.struct("transactions", "total"), F.col("window.start"))
    )


def geo_spread(transactions: DataFrame, window: str, delay: str) -> DataFrame:
    spread = (
        transactions.withWatermark("timestamp", delay)
        .groupBy(F.window("timestamp", window), "card")
        .agg(F.array_sort(F.collect_set("country")).alias("countries"))
    )
    return spread.where(F.size("countries") >= 2).select(
        *_alert("geo_spread", F.struct("countries"), F.col("window.start"))
    )


def start(
    spark: SparkSession,
    bootstrap: str,
    *,
    checkpoint_dir: Path,
    available_now: bool = False,
    transactions: str = "transactions",
    alerts: str = "fraud-alerts",
    large: float = 1000.0,
    burst: int = 5,
    window: str = "1 minute",
    travel_window: str = "10 minutes",
    delay: str = "1 minute",
) -> list[StreamingQuery]:
    def incoming() -> DataFrame:
        return parse(read_topic(spark, bootstrap, transactions))

    patterns = {
        "large_amount": (large_amounts(incoming(), large), "append"),
        "velocity": (velocity(incoming(), burst, window, delay), "update"),
        "geo_spread": (geo_spread(incoming(), travel_window, delay), "update"),
    }
    return [
        write_topic(df, bootstrap, alerts, checkpoint_dir / name, available_now, mode)
        for name, (df, mode) in patterns.items()
    ]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transactions", default="transactions")
    parser.add_argument("--alerts", default="fraud-alerts")
    parser.add_argument("--large", type=float, default=1000.0)
    parser.add_argument("--burst", type=int, default=5)
    parser.add_argument("--window", default="1 minute")
    parser.add_argument("--travel-window", default="10 minutes")
    parser.add_argument("--delay", default="1 minute", help="watermark delay")


if __name__ == "__main__":
    main(__doc__.splitlines()[0], _arguments, start)
