"""The ``strom`` PySpark data source: batch and streaming reads of Kafka topics, and the
entry point of the sink, mirroring Spark's Kafka connector (options, row schema, offsets).

Owns the Spark-facing classes: :class:`StromDataSource` (schema and option checks at
``load()``), :class:`StromBatchReader` (``spark.read``) and :class:`StromStreamReader`
(``spark.readStream``: offsets ``{"topic": {"partition": offset}}`` in the checkpoint,
``maxOffsetsPerTrigger``, ``Trigger.AvailableNow``, partitions created while the query
runs, data-loss checks). Reading records is :mod:`strom.spark.reader`'s, topic metadata
:mod:`strom.spark.kafka_meta`'s, writing :mod:`strom.spark.sink`'s.

Differs from Spark's connector: a subscribed topic that does not exist is an error at
``load()`` while failOnDataLoss is true (Spark's waits for it); ``minOffsetsPerTrigger``
and ``maxTriggerDelay`` are not supported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from strom.spark.kafka_meta import (
    JsonOffsets,
    KafkaMeta,
    Offsets,
    StromSourceError,
    data_loss,
    from_json,
    to_json,
)
from strom.spark.options import ReaderOptions, StromOptionError, parse_reader_options
from strom.spark.reader import OffsetRange, plan_ranges, read_range

log = logging.getLogger(__name__)

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_COLUMN = "headers array<struct<key: string, value: binary>>"


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


class StromDataSource(DataSource):
    """``format("strom")``: Kafka topics as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def schema(self) -> str:
        # Spark asks for the schema at load(): the place to report wrong options.
        opts = parse_reader_options(self.options, streaming=None)
        if opts.fail_on_data_loss and opts.named_topics():
            meta = KafkaMeta(opts)
            try:
                missing = meta.unknown_topics()
            finally:
                meta.close()
            if missing:
                raise StromOptionError(
                    f"unknown topic or partition {', '.join(missing)} at {opts.bootstrap} "
                    "(failOnDataLoss is true; create it first, or set failOnDataLoss=false)"
                )
        return KAFKA_SCHEMA + (", " + HEADERS_COLUMN if opts.include_headers else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return StromBatchReader(parse_reader_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StromStreamReader(parse_reader_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from strom.spark.sink import StromBatchWriter

        return StromBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from strom.spark.sink import StromStreamWriter

        return StromStreamWriter(self.options, schema)


class _RangeReader:
    """What batch and stream readers share: reading one planned range in a task."""

    opts: ReaderOptions
    spark_schema: StructType

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # Spark's one empty partition
            return iter(())
        return read_range(partition, self.opts, _arrow_schema(self.spark_schema))


def _check_starts(
    opts: ReaderOptions, starts: Offsets, earliest: Offsets, ends: Offsets
) -> Offsets:
    """Start offsets moved into the log where data is gone (or fail, per failOnDataLoss)."""
    checked: Offsets = {}
    for topic, partitions in ends.items():
        checked[topic] = {}
        for partition, end in partitions.items():
            start = starts[topic][partition]
            low = earliest[topic][partition]
            if start > end:
                data_loss(
                    opts,
                    f"{topic}-{partition}: offset {start} is past the end of the log ({end}); "
                    "the topic may have been deleted and recreated",
                )
                start = min(low, end)
            elif start < low:
                data_loss(
                    opts,
                    f"{topic}-{partition}: offsets [{start}, {low}) are no longer in the log",
                )
                start = low
            checked[topic][partition] = start
    return checked


class StromBatchReader(_RangeReader, DataSourceReader):
    def __init__(self, opts: ReaderOptions, schema: StructType) -> None:
        self.opts = opts
        self.spark_schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        meta = KafkaMeta(self.opts)
        try:
            current = meta.partitions()
            starts = meta.resolve(self.opts.starting, current, "startingOffsets")
            ends = meta.resolve(self.opts.ending, current, "endingOffsets")
            for topic, partitions in ends.items():
                for partition, end in partitions.items():
                    if starts[topic][partition] > end:
                        raise StromOptionError(
                            f"{topic}-{partition}: the starting offset "
                            f"{starts[topic][partition]} is after the ending offset {end}"
                        )
            starts = _check_starts(self.opts, starts, meta.earliest(current), ends)
        finally:
            meta.close()
        return plan_ranges(starts, ends, self.opts.min_partitions)


class StromStreamReader(_RangeReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; its offsets are Spark's Kafka JSON ``{"topic": {"0": 42}}``."""

    def __init__(self, opts: ReaderOptions, schema: StructType) -> None:
        self.opts = opts
        self.spark_schema = schema
        self._meta: KafkaMeta | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow stops here

    def __getstate__(self) -> dict[str, Any]:  # the consumer stays on the driver
        state = dict(self.__dict__)
        state["_meta"] = None
        return state

    @property
    def meta(self) -> KafkaMeta:
        if self._meta is None:
            self._meta = KafkaMeta(self.opts)
        return self._meta

    def initialOffset(self) -> JsonOffsets:
        current = self.meta.partitions()
        return to_json(self.meta.resolve(self.opts.starting, current, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.meta.latest(self.meta.partitions())

    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        starts = from_json(start)
        current = self.meta.partitions()
        if self._target is not None:  # AvailableNow: nothing newer than the target
            current = {
                t: [p for p in ps if p in self._target.get(t, {})] for t, ps in current.items()
            }
        latest = self.meta.latest(current)
        if self._target is not None:
            latest = {
                t: {p: min(o, self._target[t][p]) for p, o in ps.items()}
                for t, ps in latest.items()
            }
        new = {t: [p for p in ps if p not in starts.get(t, {})] for t, ps in current.items()}
        earliest_new = self.meta.earliest({t: ps for t, ps in new.items() if ps})
        begin: Offsets = {}
        for topic, partitions in latest.items():
            begin[topic] = {}
            for partition in partitions:
                known = starts.get(topic, {}).get(partition)
                if known is None:
                    log.info("new partition %s-%s, reading it from the start", topic, partition)
                    known = earliest_new[topic][partition]
                begin[topic][partition] = known
        if isinstance(limit, ReadMaxRows):
            latest = _limit(begin, latest, limit.max_rows)
        # partitions that went away keep their offsets so the JSON never loses them
        for topic, partitions in starts.items():
            for partition, offset in partitions.items():
                latest.setdefault(topic, {}).setdefault(partition, offset)
        return to_json(latest)

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> Sequence[InputPartition]:
        starts = from_json(start)
        ends = from_json(end)
        new = {t: [p for p in ps if p not in starts.get(t, {})] for t, ps in ends.items()}
        new = {t: ps for t, ps in new.items() if ps}
        if new:
            for topic, partitions in self.meta.earliest(new).items():
                starts.setdefault(topic, {}).update(partitions)
        moved = {t: {p: o for p, o in ps.items() if o != starts[t][p]} for t, ps in ends.items()}
        moved = {t: ps for t, ps in moved.items() if ps}
        earliest = self.meta.earliest({t: list(ps) for t, ps in moved.items()})
        starts = _check_starts(self.opts, starts, earliest, moved)
        return plan_ranges(starts, moved, self.opts.min_partitions)

    def commit(self, end: JsonOffsets) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to Kafka."""

    def stop(self) -> None:
        if self._meta is not None:
            self._meta.close()
            self._meta = None


def _limit(begin: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """Cap a trigger at ``max_rows`` records, shared out in proportion to what each
    partition has waiting (as Spark's maxOffsetsPerTrigger does)."""
    waiting = {(t, p): max(0, latest[t][p] - begin[t][p]) for t, ps in latest.items() for p in ps}
    total = sum(waiting.values())
    if total <= max_rows:
        return latest
    shares = {key: count * max_rows // total for key, count in waiting.items()}
    left = max_rows - sum(shares.values())
    for key in sorted(waiting, key=lambda k: waiting[k] - shares[k], reverse=True)[:left]:
        shares[key] += 1
    capped: Offsets = {}
    for (topic, partition), share in shares.items():
        capped.setdefault(topic, {})[partition] = begin[topic][partition] + share
    return capped


__all__ = ["StromDataSource", "StromSourceError", "StromOptionError"]
