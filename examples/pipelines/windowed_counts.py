"""Windowed aggregation with a watermark: clicks per page in tumbling, hopping (sliding)
and session windows, each window's final count written back to a topic.

Input (``--source``, default ``clicks``): one record per click, keyed by page; the
record's Kafka timestamp is the event time. Output (``--sink``, default
``click-counts``): one record per closed window, keyed by page, valued
``{"kind": "tumbling", "page": "home", "start": ms, "end": ms, "count": n}``.
Windows close when the watermark (latest event time seen minus ``--delay``) passes
their end, so each is written once (append mode); events later than that are dropped.

    python examples/pipelines/windowed_counts.py --bootstrap-server 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import main, read_topic, write_topic
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

KINDS = ("tumbling", "sliding", "session")


def window_column(kind: str, size: str, slide: str, gap: str) -> Column:
    if kind == "tumbling":
        return F.window("timestamp", size)
    if kind == "sliding":
        return F.window("timestamp", size, slide)
    if kind == "session":
        return F.session_window("timestamp", gap)
    raise ValueError(f"unknown window kind {kind!r}; one of {', '.join(KINDS)}")


def counts(
    clicks: DataFrame,
    kind: str,
    *,
    size: str = "1 minute",
    slide: str = "30 seconds",
    gap: str = "30 seconds",
    delay: str = "10 seconds",
) -> DataFrame:
    """Kafka rows of clicks -> (key, value) rows, one per page and closed window."""
    win = "session_window" if kind == "session" else "window"
    return (
        clicks.withWatermark("timestamp", delay)
        .groupBy(window_column(kind, size, slide, gap), F.col("key").cast("string").alias("page"))
        .count()
        .select(
            F.col("page").alias("key"),
            F.to_json(
                F.struct(
                    F.lit(kind).alias("kind"),
                    F.col("page"),
                    F.unix_millis(F.col(f"{win}.start")).alias("start"),
                    F.unix_millis(F.col(f"{win}.end")).alias("end"),
                    F.col("count"),
                )
            ).alias("value"),
        )
    )


def start(
    spark: SparkSession,
    bootstrap: str,
    *,
    checkpoint_dir: Path,
    available_now: bool = False,
    source: str = "clicks",
    sink: str = "click-counts",
    kinds: tuple[str, ...] = KINDS,
    size: str = "1 minute",
    slide: str = "30 seconds",
    gap: str = "30 seconds",
    delay: str = "10 seconds",
) -> list[StreamingQuery]:
    """One query per window kind, all writing to ``sink``."""
    queries = []
    for kind in kinds:
        df = counts(
            read_topic(spark, bootstrap, source), kind, size=size, slide=slide, gap=gap, delay=delay
        )
        queries.append(write_topic(df, bootstrap, sink, checkpoint_dir / kind, available_now))
    return queries


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", default="clicks")
    parser.add_argument("--sink", default="click-counts")
    parser.add_argument("--size", default="1 minute", help="tumbling/sliding window length")
    parser.add_argument("--slide", default="30 seconds", help="sliding window step")
    parser.add_argument("--gap", default="30 seconds", help="session inactivity gap")
    parser.add_argument("--delay", default="10 seconds", help="watermark delay")


if __name__ == "__main__":
    main(__doc__.splitlines()[0], _arguments, start)
