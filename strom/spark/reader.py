"""Reading one offset range of one topic-partition into Arrow record batches.

Owns how Spark's input partitions are cut (:func:`plan_ranges`: one per topic-partition
range, split further when ``minPartitions`` asks) and the loop a Spark task runs
(:func:`read_range`). The loop stops at the range end even where that offset is not a
record (compacted topics, transaction markers): a record at or past the end, or the
partition's end of log at or past it, closes the range.

Two paths read a range:

- the raw path (the default): :class:`~strom.spark.fetcher.PartitionFetcher` fetches
  record batches over the Kafka protocol and :mod:`strom.spark.batch_decode` turns
  whole fetches into Arrow columns with numpy, with no Python object per record;
- the confluent-kafka path, for what the raw client does not speak: ``kafka.*``
  settings other than those in ``RAW_SETTINGS`` (TLS and SASL, i.e. a
  ``kafka.security.protocol`` other than plaintext; ``kafka.isolation.level=
  read_committed``, whose aborted-transaction filtering is librdkafka's;
  ``kafka.check.crcs=true``), and batches in the old message formats (magic 0/1),
  from the first such batch on.

Without ``kafka.isolation.level`` the raw path reads uncommitted, like Spark's Kafka
source (librdkafka alone would default to read_committed).
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

from strom.protocol.errors import ErrorCode
from strom.protocol.records import CorruptBatchError, UnsupportedMagicError
from strom.spark.batch_decode import RecordColumns, complete_batches, decode
from strom.spark.fetcher import (
    FETCH_MAX_BYTES,
    RETRIABLE_ERRORS,
    FetchError,
    PartitionFetcher,
    RetriableFetchError,
)
from strom.spark.kafka_meta import Offsets, StromSourceError, consumer_config, data_loss
from strom.spark.options import ReaderOptions

log = logging.getLogger(__name__)

CONSUME_BATCH = 20_000  # records per consume() call and per Arrow batch at most
POLL_S = 1.0
FETCH_RETRIES = 10  # in a row, after connection loss or a leadership error
RETRY_BACKOFF_S = 0.5
MAX_FETCH_BYTES = 1 << 30  # a fetch grows up to this to hold one batch whole

# kafka.* settings the raw path honours (client.id) or that do not change what it
# reads (the confluent-kafka consumer's tuning); (setting, value) pairs allow one value.
RAW_SETTINGS = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "group.id",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.min.bytes",
        "fetch.wait.max.ms",
        "fetch.queue.backoff.ms",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "socket.timeout.ms",
        "request.timeout.ms",
        "enable.partition.eof",
        ("security.protocol", "plaintext"),
        ("isolation.level", "read_uncommitted"),
        ("check.crcs", "false"),
    }
)

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
    offset: list[int | None]  # confluent-kafka's type; every consumed record has one
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
    reason = raw_path_unsupported(opts)
    if reason is not None:
        log.debug("reading %s-%s through confluent-kafka: %s", r.topic, r.partition, reason)
        yield from _read_range_confluent(r, opts, schema)
        return
    yield from _read_range_raw(r, opts, schema)


def raw_path_unsupported(opts: ReaderOptions) -> str | None:
    """Why the raw path cannot serve ``opts`` (a kafka.* setting), or None if it can."""
    for key, value in opts.client.items():
        if key not in RAW_SETTINGS and (key, str(value).lower()) not in RAW_SETTINGS:
            return f"kafka.{key}={value}"
    return None


def _read_range_confluent(
    r: OffsetRange, opts: ReaderOptions, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
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
            if messages and _offset(messages[-1]) >= r.end:
                messages = [m for m in messages if _offset(m) < r.end]
            if messages:
                position = _offset(messages[-1]) + 1
                yield _record_batch(
                    r, _columns(messages, opts.include_headers), schema, topic, partition
                )
            for err in errors:
                position = _handle_error(consumer, r, opts, err, position)
    finally:
        consumer.close()


def _offset(message: Message) -> int:
    """The offset of a consumed record or end-of-partition event (confluent-kafka types
    it optional: a message being produced has none yet)."""
    offset = message.offset()
    assert offset is not None
    return offset


def _handle_error(
    consumer: Consumer, r: OffsetRange, opts: ReaderOptions, msg: Message, position: int
) -> int:
    """Act on an event from the consumer; return the next offset wanted."""
    error = msg.error()
    assert error is not None  # only events are handed here
    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        end_of_log = _offset(msg)
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


def _arrow_batch(
    cols: RecordColumns, schema: pa.Schema, topic: pa.Scalar, partition: pa.Scalar
) -> pa.RecordBatch:
    n = len(cols)
    arrays = {
        "key": cols.key,
        "value": cols.value,
        "topic": pa.repeat(topic, n),
        "partition": pa.repeat(partition, n),
        "offset": pa.array(cols.offset, pa.int64()),
        "timestamp": pa.Array.from_buffers(
            schema.field("timestamp").type, n, [None, pa.py_buffer(cols.timestamp_us)]
        ),
        "timestampType": pa.array(cols.timestamp_type, pa.int32()),
    }
    if cols.headers is not None:
        arrays["headers"] = pa.array(cols.headers, schema.field("headers").type)
    return pa.RecordBatch.from_arrays([arrays[name] for name in schema.names], schema=schema)


class _RawRead:
    """The raw path's state for one range: where it is, the fetcher, retries."""

    def __init__(self, r: OffsetRange, opts: ReaderOptions, fetcher: PartitionFetcher) -> None:
        self.r = r
        self.opts = opts
        self.fetcher = fetcher
        self.position = r.start  # next offset wanted
        self.in_flight = False  # a fetch for self.position was sent
        self.failures = 0

    @property
    def name(self) -> str:
        return f"{self.r.topic}-{self.r.partition}"

    def send(self, offset: int) -> None:
        """Ask for ``offset``; a lost connection is noticed at the next receive."""
        try:
            self.fetcher.send_fetch(offset)
            self.in_flight = True
        except RetriableFetchError:
            self.in_flight = False

    def retry(self, problem: str) -> None:
        self.failures += 1
        if self.failures > FETCH_RETRIES:
            raise StromSourceError(
                f"cannot read {self.name} at offset {self.position}: {problem} "
                f"({FETCH_RETRIES} retries)"
            )
        log.warning("reading %s: %s (retrying)", self.name, problem)
        self.fetcher.close()
        self.in_flight = False
        time.sleep(RETRY_BACKOFF_S)

    def out_of_range(self) -> None:
        """OFFSET_OUT_OF_RANGE: data loss, then the log start or the range's end."""
        low, high = self.fetcher.log_bounds()
        data_loss(
            self.opts,
            f"offset {self.position} of {self.name} is no longer in the log "
            f"(it now holds [{low}, {high}))",
        )
        if low >= self.r.end or self.position >= high:
            self.position = self.r.end
        else:
            self.position = low


def _fetch_bytes(opts: ReaderOptions) -> int:
    """The raw path's fetch size: FETCH_MAX_BYTES unless kafka.fetch.max.bytes or
    kafka.max.partition.fetch.bytes ask for less (it reads one partition)."""
    size = FETCH_MAX_BYTES
    for key in ("fetch.max.bytes", "max.partition.fetch.bytes"):
        if key in opts.client:
            try:
                size = min(size, max(1, int(opts.client[key])))
            except ValueError:
                raise StromSourceError(
                    f"option kafka.{key} must be a number of bytes, not {opts.client[key]!r}"
                ) from None
    return size


def _read_range_raw(
    r: OffsetRange, opts: ReaderOptions, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    topic = pa.scalar(r.topic, pa.string())
    partition = pa.scalar(r.partition, pa.int32())
    poll_timeout = opts.poll_timeout_ms / 1000
    client_id = opts.client.get("client.id", "strom-spark")
    fetcher = PartitionFetcher(
        opts.bootstrap, r.topic, r.partition, client_id=client_id, max_bytes=_fetch_bytes(opts)
    )
    with fetcher:
        read = _RawRead(r, opts, fetcher)
        idle_since = time.monotonic()
        while read.position < r.end:
            try:
                if not read.in_flight:
                    fetcher.send_fetch(read.position)
                read.in_flight = False
                fetched = fetcher.receive_fetch()
                if fetched.error_code == ErrorCode.offset_out_of_range:
                    read.out_of_range()
                    continue
            except RetriableFetchError as exc:
                read.retry(str(exc))
                continue
            except FetchError as exc:
                raise StromSourceError(
                    f"cannot read {read.name} at offset {read.position}: {exc}"
                ) from None
            if fetched.error_code in RETRIABLE_ERRORS:
                read.retry(fetched.error_code.name.upper())
                continue
            if fetched.error_code != ErrorCode.none:
                raise StromSourceError(
                    f"cannot read {read.name} at offset {read.position}: "
                    f"{fetched.error_code.name.upper()}"
                )
            read.failures = 0
            records = fetched.records
            try:
                batches = complete_batches(records)
            except UnsupportedMagicError:
                batches = []
                magic = records[16] if len(records) > 16 else None
                log.info(
                    "%s holds message format v%s at offset %d: reading on with confluent-kafka",
                    read.name,
                    magic,
                    read.position,
                )
                yield from _read_range_confluent(
                    OffsetRange(r.topic, r.partition, read.position, r.end), opts, schema
                )
                return
            except CorruptBatchError as exc:
                raise StromSourceError(
                    f"corrupt record batch in {read.name} at offset {read.position}: {exc}"
                ) from None
            if batches:
                first = read.position
                read.position = max(first, batches[-1].next_offset)
                if read.position < r.end:
                    read.send(read.position)  # the broker reads on while this is decoded
                try:
                    runs = decode(
                        records,
                        batches,
                        first=first,
                        end=r.end,
                        include_headers=opts.include_headers,
                    )
                except CorruptBatchError as exc:
                    raise StromSourceError(
                        f"corrupt record batch in {read.name} after offset {first}: {exc}"
                    ) from None
                for cols in runs:
                    yield _arrow_batch(cols, schema, topic, partition)
                idle_since = time.monotonic()
                continue
            if records:  # one batch larger than the fetch size: ask for more bytes
                if fetcher.max_bytes >= MAX_FETCH_BYTES:
                    raise StromSourceError(
                        f"a record batch of {read.name} at offset {read.position} is larger "
                        f"than {MAX_FETCH_BYTES} bytes"
                    )
                fetcher.max_bytes *= 2
                continue
            end_of_log = fetched.high_watermark
            if end_of_log >= r.end:
                return  # nothing left before the range end: a gap (compaction, markers)
            if end_of_log <= read.position:
                data_loss(
                    opts,
                    f"{read.name} ends at offset {end_of_log}, before the end of the "
                    f"range [{r.start}, {r.end}) the query planned to read",
                )
                return
            if time.monotonic() - idle_since > poll_timeout:
                raise StromSourceError(
                    f"no records from {read.name} at offset {read.position} within "
                    f"kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms} "
                    f"(the range ends at {r.end})"
                )
