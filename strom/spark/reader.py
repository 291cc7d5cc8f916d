"""Reading one offset range of one topic-partition into Arrow record batches.

Owns how Spark's input partitions are cut (:func:`plan_ranges`: one per topic-partition
range, split further when ``minPartitions`` asks) and the loop a Spark task runs
(:func:`read_range`): a confluent-kafka consumer assigned to the range start, records
consumed in large batches and turned into Arrow columns without a Python object per
row beyond what the client hands out. The loop stops at the range end even where
that offset is not a record (compacted topics, transaction markers): a record at or
past the end, or the partition's end of log at or past it, closes the range.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from pyspark.sql.datasource import InputPartition

from strom.spark.kafka_meta import Offsets, StromSourceError, consumer_config, data_loss
from strom.spark.options import ReaderOptions

log = logging.getLogger(__name__)

CONSUME_BATCH = 20_000  # records per consume() call and per Arrow batch at most
POLL_S = 1.0

# Spark's timestampType: 0 CreateTime, 1 LogAppendTime (librdkafka counts from 1).
_TIMESTAMP_TYPE_OFFSET = pa.scalar(1, pa.int32())
_first, _second = itemgetter(0), itemgetter(1)  # of Message.timestamp(): (type, ms)


class OffsetRange(InputPartition):
    """Offsets [start, end) of one topic-partition: one Spark task's work."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class _Columns:
    key: list[Any]
    value: list[Any]
    offset: list[int]
    timestamp: list[tuple[int, int]]
    headers: list[Any] | None


def plan_ranges(starts: Offsets, ends: Offsets, min_partitions: int | None) -> list[OffsetRange]:
    """One range per partition with records, split into equal parts where
    ``min_partitions`` asks for more tasks than there are partitions."""
    ranges = [
        OffsetRange(topic, partition, starts[topic][partition], end)
        for topic, partitions in sorted(ends.items())
        for partition, end in sorted(partitions.items())
        if end > starts[topic][partition]
    ]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    split: list[OffsetRange] = []
    for r in ranges:
        parts = min(r.size, max(1, round(r.size * min_partitions / total)))
        bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
        split += [
            OffsetRange(r.topic, r.partition, a, b)
            for a, b in zip(bounds, bounds[1:], strict=False)
        ]
    return split


def _columns(messages: list[Message], include_headers: bool) -> _Columns:
    return _Columns(
        key=list(map(Message.key, messages)),
        value=list(map(Message.value, messages)),
        offset=list(map(Message.offset, messages)),
        timestamp=list(map(Message.timestamp, messages)),
        headers=list(map(Message.headers, messages)) if include_headers else None,
    )


def _record_batch(
    r: OffsetRange, cols: _Columns, schema: pa.Schema, topic: pa.Scalar, partition: pa.Scalar
) -> pa.RecordBatch:
    n = len(cols.offset)
    kinds = list(map(_first, cols.timestamp))
    times = list(map(_second, cols.timestamp))
    arrays = {
        "key": pa.array(cols.key, pa.binary()),
        "value": pa.array(cols.value, pa.binary()),
        "topic": pa.repeat(topic, n),
        "partition": pa.repeat(partition, n),
        "offset": pa.array(cols.offset, pa.int64()),
        # ms since the epoch; Spark's timestamp is µs in UTC
        "timestamp": pc.multiply(pa.array(times, pa.int64()), 1000).cast(
            schema.field("timestamp").type
        ),
        "timestampType": pc.subtract(pa.array(kinds, pa.int32()), _TIMESTAMP_TYPE_OFFSET),
    }
    if cols.headers is not None:
        arrays["headers"] = pa.array(cols.headers, schema.field("headers").type)
    return pa.RecordBatch.from_arrays([arrays[name] for name in schema.names], schema=schema)


def read_range(r: OffsetRange, opts: ReaderOptions, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches of ``schema`` (Spark's Kafka row schema)."""
    # librdkafka's default fetch sizes measured faster here than larger ones; its
    # fetch.queue.backoff.ms (1 s) idles the fetcher whenever a consume() batch leaves
    # the queue above queued.min.messages: 0 doubled one partition's rate (kafka.* wins)
    config = {"fetch.queue.backoff.ms": 0}
    config.update(consumer_config(opts, **{"enable.partition.eof": True}))
    consumer = Consumer(config)
    topic = pa.scalar(r.topic, pa.string())
    partition = pa.scalar(r.partition, pa.int32())
    poll_timeout = opts.poll_timeout_ms / 1000
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        position = r.start  # next offset wanted
        idle_since = time.monotonic()
        while position < r.end:
            messages = consumer.consume(CONSUME_BATCH, POLL_S)
            if not messages:
                if time.monotonic() - idle_since > poll_timeout:
                    raise StromSourceError(
                        f"no records from {r.topic}-{r.partition} at offset {position} within "
                        f"kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms} "
                        f"(the range ends at {r.end})"
                    )
                continue
            idle_since = time.monotonic()
            errors = [m for m in messages if m.error() is not None]
            if errors:
                messages = [m for m in messages if m.error() is None]
            # records arrive in offset order; keep those before the range end
            if messages and messages[-1].offset() >= r.end:
                messages = [m for m in messages if m.offset() < r.end]
            if messages:
                position = messages[-1].offset() + 1
                yield _record_batch(
                    r, _columns(messages, opts.include_headers), schema, topic, partition
                )
            for err in errors:
                position = _handle_error(consumer, r, opts, err, position)
    finally:
        consumer.close()


def _handle_error(
    consumer: Consumer, r: OffsetRange, opts: ReaderOptions, msg: Message, position: int
) -> int:
    """Act on an event from the consumer; return the next offset wanted."""
    error: KafkaError = msg.error()
    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        end_of_log = msg.offset()
        if end_of_log < r.end:
            data_loss(
                opts,
                f"{r.topic}-{r.partition} ends at offset {end_of_log}, before the end of the "
                f"range [{r.start}, {r.end}) the query planned to read",
            )
        return r.end  # what is left of the range is a gap (compaction, markers)
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(r.topic, r.partition), timeout=15, cached=False
        )
        data_loss(
            opts,
            f"offset {position} of {r.topic}-{r.partition} is no longer in the log "
            f"(it now holds [{low}, {high}))",
        )
        if low >= r.end or position >= high:
            return r.end
        consumer.assign([TopicPartition(r.topic, r.partition, low)])
        return low
    if error.fatal() or not error.retriable():
        raise KafkaException(error)
    log.warning("reading %s-%s: %s (retrying)", r.topic, r.partition, error.str())
    return position
