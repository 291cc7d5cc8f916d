"""Joins: a stream-stream join within a time bound, and a stream enriched from a
compacted "table" topic.

1. Ad impressions (``--impressions``) joined with clicks (``--clicks``) on ``ad``
   when the click comes at most ``--within`` after the impression. Both values are
   JSON ``{"ad": "a1", "user": "u1"}``; the Kafka timestamp is the event time.
   Watermarks on both sides bound the state Spark keeps. Output (``--attributed``):
   ``{"ad", "user", "shown", "clicked"}`` keyed by ad.
2. Orders (``--orders``, JSON ``{"order": "o1", "customer": "c1", "amount": 20.0}``)
   enriched with the customer's profile from ``--customers``, a compacted topic keyed
   by customer id whose latest value per key is the row (a null value deletes it).
   The table is re-read in every micro-batch, so updates to it show up in the next
   batch. Output (``--enriched``): the order plus ``name`` and ``tier``.

    python examples/pipelines/joins.py --bootstrap-server 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import main, read_topic, started, write_topic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

AD_EVENT = "ad string, user string"
ORDER = "order string, customer string, amount double"
CUSTOMER = "name string, tier string"


def attributed_clicks(impressions: DataFrame, clicks: DataFrame, within: str) -> DataFrame:
    """Kafka rows of impressions and clicks -> (key, value) rows of clicks with the
    impression they follow within ``within``."""
    shown = (
        impressions.select(
            F.from_json(F.col("value").cast("string"), AD_EVENT).alias("i"),
            F.col("timestamp").alias("shown"),
        )
        .select("i.ad", "i.user", "shown")
        .withWatermark("shown", within)
    )
    clicked = (
        clicks.select(
            F.from_json(F.col("value").cast("string"), AD_EVENT).alias("c"),
            F.col("timestamp").alias("clicked"),
        )
        .select(F.col("c.ad").alias("click_ad"), F.col("c.user").alias("click_user"), "clicked")
        .withWatermark("clicked", within)
    )
    joined = shown.join(
        clicked,
        F.expr(
            f"ad = click_ad AND user = click_user AND clicked >= shown "
            f"AND clicked <= shown + interval {within}"
        ),
    )
    return joined.select(
        F.col("ad").alias("key"),
        F.to_json(
            F.struct(
                "ad",
                "user",
                F.unix_millis("shown").alias("shown"),
                F.unix_millis("clicked").alias("clicked"),
            )
        ).alias("value"),
    )


def customer_table(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """The compacted topic as a table: the latest value per key, deletions removed."""
    rows = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    latest = rows.groupBy("key").agg(
        F.max_by("value", F.struct("timestamp", "partition", "offset")).alias("value")
    )
    return latest.where(F.col("value").isNotNull()).select(
        F.col("key").cast("string").alias("customer"),
        F.from_json(F.col("value").cast("string"), CUSTOMER).alias("profile"),
    )


def enrich(orders: DataFrame, customers: DataFrame) -> DataFrame:
    """Parsed orders joined with the customer table -> (key, value) rows."""
    return orders.join(customers, "customer", "left").select(
        F.col("order").alias("key"),
        F.to_json(
            F.struct(
                "order",
                "customer",
                "amount",
                F.col("profile.name").alias("name"),
                F.col("profile.tier").alias("tier"),
            )
        ).alias("value"),
    )


def start(
    spark: SparkSession,
    bootstrap: str,
    *,
    checkpoint_dir: Path,
    available_now: bool = False,
    impressions: str = "impressions",
    clicks: str = "clicks",
    attributed: str = "attributed-clicks",
    within: str = "1 minute",
    orders: str = "orders",
    customers: str = "customers",
    enriched: str = "enriched-orders",
) -> list[StreamingQuery]:
    joined = attributed_clicks(
        read_topic(spark, bootstrap, impressions), read_topic(spark, bootstrap, clicks), within
    )
    first = write_topic(joined, bootstrap, attributed, checkpoint_dir / "attributed", available_now)

    def enrich_batch(batch: DataFrame, _batch_id: int) -> None:
        parsed = batch.select(F.from_json(F.col("value").cast("string"), ORDER).alias("o")).select(
            "o.*"
        )
        table = customer_table(batch.sparkSession, bootstrap, customers)
        enrich(parsed, table).write.format("strom").mode("append").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", enriched).save()

    writer = (
        read_topic(spark, bootstrap, orders)
        .writeStream.foreachBatch(enrich_batch)
        .option("checkpointLocation", str(checkpoint_dir / "enriched"))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime="1 second")
    )
    return [first, started(writer.start(), available_now)]


def _arguments(parser: argparse.ArgumentParser) -> None:
    for name, default in [
        ("impressions", "impressions"),
        ("clicks", "clicks"),
        ("attributed", "attributed-clicks"),
        ("within", "1 minute"),
        ("orders", "orders"),
        ("customers", "customers"),
        ("enriched", "enriched-orders"),
    ]:
        parser.add_argument(f"--{name}", default=default)


if __name__ == "__main__":
    main(__doc__.splitlines()[0], _arguments, start)
