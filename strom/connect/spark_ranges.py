"""Micro-batches over Kafka offset ranges, for sink tasks on Spark that read their own
records (``SparkSinkTask.range_writer``: the JDBC sink).

The driver side (:class:`RangeBatches`) is the sink's stream reader without Structured
Streaming: it keeps where each topic-partition is, and at each micro-batch asks the
broker for the ends and plans one range per topic-partition that moved, of at most
``RANGE_RECORDS`` offsets (the ``strom`` source's ``plan_ranges``, so a topic-partition
is read by one Spark task at a time, which exactly-once delivery relies on). Where a
topic-partition starts the first time it is seen is the caller's (the group's committed
offsets, or the task's own stored ahead of them; else the earliest).
:func:`write_ranges_job` runs a micro-batch as one Spark job of one task per range, each
fetching and decoding its range with the ``strom`` source's reader and writing it in the
same Python process (:func:`write_ranges`): the records never enter the JVM. Committing
the batch's ends in the group is the runner's.

A position that is no longer in the log (retention, a topic deleted and made again) is
skipped with a warning, as the ``strom`` source does with failOnDataLoss=false. Does not
own how records are written (the task's writer) nor the group (the runner's).
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from strom.spark.kafka_meta import JsonOffsets, Offsets
    from strom.spark.options import ReaderOptions
    from strom.spark.reader import OffsetRange

# A range's writer: its records as Arrow batches (key, value, topic, partition, offset,
# timestamp, timestampType), the rows it wrote.
RangeWriter = Callable[[list["pa.RecordBatch"]], int]
# Where topic-partitions seen the first time start: ``{topic: {"partition": offset}}``,
# -2 (or none) for the earliest.
FirstPositions = Callable[[list[str]], "JsonOffsets"]

_HEAP_FROZEN: list[bool] = []
# Offsets a range covers at most: a Spark task holds its range's records at once (about
# 170 MB for 250,000 records of 670 bytes); a longer backlog takes several micro-batches.
RANGE_RECORDS = 250_000


class RangeBatches:
    """The offset ranges of each micro-batch of a sink's topics (``options``: the
    ``strom`` source's, ``subscribe`` or ``subscribePattern`` with ``kafka.*``)."""

    def __init__(self, options: Mapping[str, str], first: FirstPositions) -> None:
        from strom.spark.kafka_meta import KafkaMeta
        from strom.spark.options import parse_reader_options

        self.opts: ReaderOptions = parse_reader_options(
            {**options, "failOnDataLoss": "false"}, streaming=True
        )
        self.meta = KafkaMeta(self.opts)
        self.first = first
        self.positions: Offsets = {}  # the next offset of each topic-partition

    def next(self) -> tuple[list[OffsetRange], Offsets] | None:
        """The ranges of the next micro-batch and the positions it ends at (which
        ``advance`` takes once it is written); None when nothing moved."""
        from strom.spark.kafka_meta import data_loss
        from strom.spark.reader import plan_ranges

        current = self.meta.partitions()
        self._start_new(current)
        latest = self.meta.latest(current)
        moved = {
            topic: {p: end for p, end in ends.items() if end != self.positions[topic][p]}
            for topic, ends in latest.items()
        }
        moved = {topic: ends for topic, ends in moved.items() if ends}
        if not moved:
            return None
        earliest = self.meta.earliest({topic: list(ends) for topic, ends in moved.items()})
        starts: Offsets = {}
        for topic, ends in moved.items():
            for partition, end in ends.items():
                start, low = self.positions[topic][partition], earliest[topic][partition]
                if start > end:
                    data_loss(
                        self.opts,
                        f"{topic}-{partition}: offset {start} is past the end of the log "
                        f"({end}); the topic may have been deleted and made again",
                    )
                    start = min(low, end)
                elif start < low:
                    data_loss(
                        self.opts,
                        f"{topic}-{partition}: offsets [{start}, {low}) are no longer in the log",
                    )
                    start = low
                starts.setdefault(topic, {})[partition] = start
                ends[partition] = min(end, start + RANGE_RECORDS)
        return plan_ranges(starts, moved, None), moved

    def _start_new(self, current: dict[str, list[int]]) -> None:
        new = {
            topic: [p for p in partitions if p not in self.positions.get(topic, {})]
            for topic, partitions in current.items()
        }
        new = {topic: partitions for topic, partitions in new.items() if partitions}
        if not new:
            return
        known = self.first(sorted(new))
        unknown: dict[str, list[int]] = {}
        for topic, partitions in new.items():
            for partition in partitions:
                offset = int(known.get(topic, {}).get(str(partition), -2))
                if offset >= 0:
                    self.positions.setdefault(topic, {})[partition] = offset
                else:
                    unknown.setdefault(topic, []).append(partition)
        for topic, offsets in self.meta.earliest(unknown).items():
            self.positions.setdefault(topic, {}).update(offsets)

    def advance(self, ends: Offsets) -> None:
        for topic, offsets in ends.items():
            self.positions.setdefault(topic, {}).update(offsets)

    def close(self) -> None:
        self.meta.close()


def write_ranges_job(
    spark: SparkSession, ranges: list[OffsetRange], opts: ReaderOptions, writer: RangeWriter
) -> int:
    """Run one Spark job of one task per range, each reading its range and handing it to
    ``writer``; the rows written."""
    rdd = spark.sparkContext.parallelize(ranges, len(ranges))
    return sum(rdd.mapPartitions(functools.partial(write_ranges, writer, opts)).collect())


def write_ranges(
    writer: RangeWriter, opts: ReaderOptions, ranges: Iterable[OffsetRange]
) -> Iterator[int]:
    """In a Spark task: fetch and decode each range's records into Arrow (the ``strom``
    source's reader), and write them with ``writer``."""
    from strom.spark.reader import read_range

    freeze_worker_heap()
    schema = _record_schema()
    for offset_range in ranges:
        yield writer(list(read_range(offset_range, opts, schema)))


@functools.cache
def _record_schema() -> pa.Schema:
    """The ``strom`` source's columns (Spark's Kafka rows) without headers, in Arrow."""
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("timestampType", pa.int32()),
        ]
    )


def freeze_worker_heap() -> None:
    """In a reused Spark Python worker, move its objects, once, to the collector's
    permanent generation. Such a worker runs a full ``gc.collect()`` after every task,
    which walks every object of its imports (PySpark, Arrow, psycopg...: over 100,000):
    30-60 ms of CPU a task, each micro-batch's tasks. Frozen, they are no longer walked;
    what the tasks make afterwards is collected as before. Elsewhere (a test calling a
    writer itself) nothing is done."""
    if not _HEAP_FROZEN and os.environ.get("SPARK_REUSE_WORKER"):  # as pyspark.daemon reads it
        gc.freeze()
        _HEAP_FROZEN.append(True)
