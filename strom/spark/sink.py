"""The ``strom`` sink: rows of a batch or streaming DataFrame produced to Kafka topics.

Owns the column contract of Spark's Kafka sink (``value`` required; ``key``,
``headers``, ``topic``, ``partition`` optional; the ``topic`` option overrides the
column; beyond Spark's, an optional ``timestamp`` column, epoch ms or a timestamp, sets
the records' timestamps: one of 0 is written as 0, through :mod:`strom.zero_time`, where
librdkafka would write the time of sending; under exactlyOnce a micro-batch task with
such a row in its first 64 MB writes its whole transaction through
``strom.zero_time.ZeroTimeTransaction``)
and the delivery
guarantee: each Spark task flushes its producer and fails
if any record was not acknowledged before it reports success, so a committed batch
is in Kafka: at-least-once, as Spark's Kafka sink (a retried task may write twice).
Records without a partition are placed by Kafka's Java partitioner (murmur2 of the
key), as Spark's sink places them. With ``exactlyOnce=true`` a stream write task writes
its rows in one Kafka transaction per micro-batch instead, and a replayed micro-batch
writes nothing a committed one wrote (:mod:`strom.spark.exactly_once`).

A row whose topic is the ``failureTopic`` option's is not a record: the task writes the
rows before it (flushed, acknowledged), then fails with ``FailedRowError``, the row's
value its message, and writes none after it. A ksql query whose record fails its
processing ends so, as a Kafka Streams task stops at the record its processor threw
on; with exactlyOnce the task's transaction is aborted, its rows unseen.

Differs from Spark's Kafka sink: PySpark lets Python stream writers run in append mode
only (no update or complete mode); an aggregation in update mode writes through
``foreachBatch`` and ``batch.write.format("strom")``. ``df.write`` needs
``mode("append")`` (Spark refuses the default ErrorIfExists for Python sources).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from strom.spark.exactly_once import (
    StromSinkError,
    TaskTransaction,
    ZeroTimeTaskTransaction,
    current_write_task,
)
from strom.spark.options import StromOptionError, WriterOptions, parse_writer_options
from strom.zero_time import ZeroTimeRecord, ZeroTimeTransaction, ZeroTimeWriter

log = logging.getLogger(__name__)

# exactlyOnce under a timestamp column: how much of a task's rows may be read ahead to
# find a row stamped 0 (which needs Strom's own transaction requests)
_HOLD_BYTES = 64 * 1024 * 1024

FLUSH_TIMEOUT_S = 120.0


class FailedRowError(Exception):
    """A row to the ``failureTopic`` option's topic: the write fails with its value."""


@dataclass
class WrittenRecords(WriterCommitMessage):
    count: int
    batch_id: int | None = None  # exactlyOnce: the micro-batch the task wrote
    skipped: bool = False  # exactlyOnce: an earlier run of the task had committed it


def _is_text_or_bytes(dtype: DataType) -> bool:
    return isinstance(dtype, StringType | BinaryType)


def _check_columns(schema: StructType, opts: WriterOptions) -> None:
    """Spark's Kafka sink column rules, checked before any task runs."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise StromOptionError(
            "the strom sink needs a value column (string or binary); got columns "
            + ", ".join(schema.fieldNames())
        )
    for column in ("value", "key"):
        if column in fields and not _is_text_or_bytes(fields[column]):
            raise StromOptionError(
                f"column {column} must be string or binary, not {fields[column].simpleString()}"
            )
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise StromOptionError(f"column topic must be string, not {fields['topic'].simpleString()}")
    if "topic" not in fields and opts.topic is None:
        raise StromOptionError("the strom sink needs a topic column or the topic option")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise StromOptionError(
            f"column partition must be int, not {fields['partition'].simpleString()}"
        )
    if "headers" in fields:
        headers = fields["headers"]
        element = headers.elementType if isinstance(headers, ArrayType) else None
        if not (
            isinstance(element, StructType)
            and [f.name for f in element.fields] == ["key", "value"]
            and isinstance(element["key"].dataType, StringType)
            and isinstance(element["value"].dataType, BinaryType)
        ):
            raise StromOptionError(
                "column headers must be array<struct<key: string, value: binary>>, not "
                + headers.simpleString()
            )


class _ArrowProducer:
    """Writing one task's Arrow batches with one confluent-kafka producer."""

    def __init__(self, options: Any, schema: StructType, *, streaming: bool) -> None:
        self.opts = parse_writer_options(options, streaming=streaming)
        _check_columns(schema, self.opts)
        self.columns = {f.name.lower(): f.name for f in schema.fields}

    def _config(self, failures: list[KafkaError]) -> dict[str, Any]:
        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err)

        return {
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random",
            **self.opts.client,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
        }

    def _column(self, batch: pa.RecordBatch, name: str) -> list[Any] | None:
        column = self.columns.get(name)
        return batch.column(column).to_pylist() if column is not None else None

    def _timestamps(self, batch: pa.RecordBatch) -> list[int | None] | None:
        """The ``timestamp`` column as epoch milliseconds (a long, or a timestamp)."""
        column = self.columns.get("timestamp")
        if column is None:
            return None
        values = batch.column(column)
        if pa.types.is_timestamp(values.type):
            values = values.cast(pa.timestamp("ms", tz=values.type.tz)).cast(pa.int64())
        stamps: list[int | None] = values.to_pylist()
        return stamps

    def _topics(self, batch: pa.RecordBatch) -> Iterable[str]:
        if self.opts.topic is not None:
            return repeat(self.opts.topic, batch.num_rows)
        topics = self._column(batch, "topic")
        assert topics is not None  # no topic option: the column is there (_check_columns)
        if None in topics:
            raise StromOptionError("a row has a null topic and no topic option is set")
        return topics

    def _produce(
        self,
        producer: Producer,
        batches: Iterable[pa.RecordBatch],
        failures: list[KafkaError],
        zero_time: bool = False,
    ) -> int:
        """Produce every row of ``batches``; stop at the first failed delivery reported.
        With ``zero_time``, rows stamped 0 go through ``strom.zero_time`` (librdkafka
        would stamp them with the time of sending), after the producer's earlier rows
        are flushed and before its later ones, so that each partition keeps the rows'
        order."""
        produce = producer.produce
        written = 0
        held: list[ZeroTimeRecord] = []
        writer: ZeroTimeWriter | None = None

        def write_held() -> None:
            nonlocal writer
            _flush_acknowledged(producer, failures)
            if writer is None:
                writer = ZeroTimeWriter(self.opts.client)
            writer.send(held)
            held.clear()

        for batch in batches:
            n = batch.num_rows
            values = self._column(batch, "value")
            assert values is not None  # a column every sink has (_check_columns)
            keys = self._column(batch, "key") or repeat(None, n)
            topics = self._topics(batch)
            partitions = self._column(batch, "partition")
            headers = self._column(batch, "headers")
            timestamps = self._timestamps(batch)
            rows: Any = zip(topics, values, keys, strict=False)
            if partitions is None and headers is None and timestamps is None:
                extra: Any = repeat({}, n)
            else:
                extra = (
                    _extras(p, h, t)
                    for p, h, t in zip(
                        partitions or repeat(None, n),
                        headers or repeat(None, n),
                        timestamps or repeat(None, n),
                        strict=False,
                    )
                )
            for (topic, value, key), kwargs in zip(rows, extra, strict=False):
                if topic == self.opts.failure_topic and topic is not None:
                    if held:
                        write_held()
                    if writer is not None:
                        writer.close()
                    _flush_acknowledged(producer, failures)
                    text = value.decode(errors="replace") if isinstance(value, bytes) else value
                    raise FailedRowError(text or "a row failed")
                if zero_time and kwargs.get("timestamp") == 0:
                    held.append(_zero_time_record(topic, key, value, kwargs))
                    continue
                if held:
                    write_held()
                try:
                    produce(topic, value, key, **kwargs)
                except BufferError:
                    producer.poll(0.05)
                    produce(topic, value, key, **kwargs)
            producer.poll(0)
            written += n
            if failures:
                break
        try:
            if held:
                write_held()
        finally:
            if writer is not None:
                writer.close()
        return written

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        if self.opts.exactly_once:
            return self._write_in_transaction(iterator)
        failures: list[KafkaError] = []
        producer = Producer(self._config(failures))
        written = self._produce(producer, iterator, failures, zero_time=True)
        _flush_acknowledged(producer, failures)
        return WrittenRecords(written)

    def _write_in_transaction(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        """exactlyOnce: the task's rows in one transaction with its micro-batch marker.
        Under a ``timestamp`` column the task's rows are read first: when one is stamped
        0 the transaction is written by Strom's own requests (``ZeroTimeTaskTransaction``),
        as librdkafka would stamp it with the time of sending."""
        task = current_write_task()
        batches: Iterator[pa.RecordBatch] = (b for b in iterator if b.num_rows)
        zero_time = False
        if "timestamp" in self.columns:
            # read ahead until a row stamped 0, held in memory up to _HOLD_BYTES: past
            # that the task goes the librdkafka way (a later row stamped 0 is written
            # with the time of writing), so a large backlog is not held whole
            held: list[pa.RecordBatch] = []
            size = 0
            for batch in batches:
                held.append(batch)
                size += batch.nbytes
                if 0 in (self._timestamps(batch) or ()):
                    zero_time = True
                    break
                if size > _HOLD_BYTES:
                    break
            batches = chain(held, batches)
        first = next(batches, None)
        if first is None:  # nothing to write, nothing to mark
            return WrittenRecords(0, batch_id=task.batch_id)
        marker_topic = next(iter(self._topics(first.slice(0, 1))))
        failures: list[KafkaError] = []

        def produce(producer: Producer) -> int:
            written = self._produce(producer, chain([first], batches), failures)
            if failures:
                raise KafkaException(failures[0])
            return written

        def produce_own(transaction: ZeroTimeTransaction) -> int:
            return self._produce_own(transaction, chain([first], batches))

        kind = ZeroTimeTaskTransaction if zero_time else TaskTransaction
        transaction = kind(
            task,
            self.opts.transactional_id_prefix,
            self._config(failures),
            self.opts.client,
            marker_topic,
        )
        outcome = transaction.run(produce_own if zero_time else produce)
        if outcome.skipped:
            for _ in batches:  # Spark's input is read to its end either way
                pass
        return WrittenRecords(outcome.written, batch_id=task.batch_id, skipped=outcome.skipped)

    def _produce_own(
        self, transaction: ZeroTimeTransaction, batches: Iterable[pa.RecordBatch]
    ) -> int:
        """Every row of ``batches`` written in ``transaction``, each with its timestamp (0
        kept; a null the time of writing); at a ``failureTopic`` row, the rows before it
        written, then ``FailedRowError``."""
        written = 0
        for batch in batches:
            n = batch.num_rows
            values = self._column(batch, "value")
            assert values is not None  # a column every sink has (_check_columns)
            keys = self._column(batch, "key") or repeat(None, n)
            partitions = self._column(batch, "partition") or repeat(None, n)
            headers = self._column(batch, "headers") or repeat(None, n)
            timestamps = self._timestamps(batch) or repeat(None, n)
            records: list[ZeroTimeRecord] = []
            rows = zip(
                self._topics(batch), values, keys, partitions, headers, timestamps, strict=False
            )
            for topic, value, key, partition, header, timestamp in rows:
                if topic == self.opts.failure_topic and topic is not None:
                    transaction.send(records)
                    text = value.decode(errors="replace") if isinstance(value, bytes) else value
                    raise FailedRowError(text or "a row failed")
                record = _zero_time_record(topic, key, value, _extras(partition, header))
                record.timestamp = int(time.time() * 1000) if timestamp is None else timestamp
                records.append(record)
            transaction.send(records)
            written += n
        return written


def _flush_acknowledged(producer: Producer, failures: list[KafkaError]) -> None:
    """Flush ``producer``; raise the first failed delivery, or a timeout for records
    neither acknowledged nor failed."""
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if failures:
        raise KafkaException(failures[0])
    if remaining:
        raise KafkaException(
            KafkaError(KafkaError._MSG_TIMED_OUT, f"{remaining} records not acknowledged")
        )


def _zero_time_record(
    topic: str, key: str | bytes | None, value: str | bytes | None, kwargs: dict[str, Any]
) -> ZeroTimeRecord:
    def data(blob: str | bytes | None) -> bytes | None:
        return blob.encode() if isinstance(blob, str) else blob

    return ZeroTimeRecord(
        topic, data(key), data(value), kwargs.get("headers", ()), kwargs.get("partition")
    )


def _extras(
    partition: int | None, headers: list[dict[str, Any]] | None, timestamp: int | None = None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if partition is not None:
        kwargs["partition"] = partition
    if timestamp is not None:
        kwargs["timestamp"] = timestamp
    if headers:
        kwargs["headers"] = [(h["key"], h["value"]) for h in headers]
    return kwargs


class StromBatchWriter(DataSourceArrowWriter):
    """``df.write.format("strom")``."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self.task = _ArrowProducer(options, schema, streaming=False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        return self.task.write(iterator)


class StromStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("strom")``: each micro-batch's tasks flush (or commit their
    transactions, with exactlyOnce) before Spark commits the micro-batch."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self.task = _ArrowProducer(options, schema, streaming=True)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        return self.task.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = [m for m in messages if isinstance(m, WrittenRecords)]
        count = sum(m.count for m in written)
        if not self.task.opts.exactly_once:
            log.debug("micro-batch %d: %d records written", batchId, count)
            return
        # The tasks named their transactions' markers after the batch id they were told.
        wrong = {m.batch_id for m in written if m.batch_id != batchId}
        if wrong:
            raise StromSinkError(
                f"micro-batch {batchId}: write tasks marked micro-batch(es) "
                f"{sorted(wrong, key=lambda b: -1 if b is None else b)}"
            )
        skipped = sum(m.skipped for m in written)
        log.debug(
            "micro-batch %d: %d records committed in transactions; %d task(s) had committed "
            "theirs before a restart",
            batchId,
            count,
            skipped,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.task.opts.exactly_once:
            log.warning(
                "micro-batch %d aborted; the transactions its tasks committed stay, and its "
                "replay writes only what they did not commit",
                batchId,
            )
        else:
            log.warning(
                "micro-batch %d aborted; records already written stay (at-least-once)", batchId
            )
