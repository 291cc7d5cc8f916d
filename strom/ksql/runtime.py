"""Persistent queries on Spark: each CREATE STREAM / TABLE AS SELECT and INSERT INTO ...
SELECT is one Structured Streaming query on the server's SparkSession, reading its
source topic with the ``strom`` source and writing its sink topic (and the processing
log) with the ``strom`` sink; the query's operators (``strom.ksql.operators``) run
inside Spark's tasks.

- A query without aggregation is one ``mapInArrow``: records read into rows
  (``strom.ksql.readers``), the operators, rows written as records (a record that does
  not read becomes a processing log entry in the same output).
- An aggregation is a ``mapInArrow`` (read, filter, the grouping key) then
  ``groupBy(key).transformWithStateInPandas``: the group's windows and accumulators in
  Spark's state store (RocksDB), the rows of a key taken in (partition, offset) order;
  windowed aggregations run in event time, their watermark the stream time and taken
  so that Spark drops no row (``_watermarked_keeping_late_rows``): the operators drop
  late rows by ksqlDB's rules. A record's stream time is
  its source partition's, as ksqlDB's: the grouping step gives each row the largest
  time of its partition's kept rows up to it, at least the watermark (the stream time
  when the micro-batch began: exact with one partition; with several, the most
  advanced one's). EMIT FINAL writes a window right after its group's record whose
  stream time closes it, or, closed by other groups' records, at its group's next
  record or from an event-time timer in the next micro-batch. On the batch path
  (``strom.ksql.arrow_aggregate``) a group's rows come in packed, a few rows per group
  and task, and its records leave in one row per source partition. Each record
  leaves with the place of the source record that made it; the records are then
  gathered by source partition, unpacked and sorted there by offset
  (``strom.ksql.packed_output``), so that they are written in the order of the
  records that made them.
- A join reads both sources' topics in one query: a ``mapInArrow`` keys each row by
  its join key, then ``groupBy(key).transformWithStateInPandas`` keeps each key's join
  state (a table's row, a stream's records within the window) and joins the rows in
  the order Kafka Streams' task takes their records (each source partition's in offset
  order, partitions chosen between by their next record's own timestamp:
  ``run_join_keying``); a stream-stream join's window closes on an event-time timer. A
  chain of joins, a foreign-key join or an aggregation over a join runs its stages
  (``strom.ksql.join_flow``) as one ``transformWithStateInPandas`` each, every stage
  passing on the rows of the stages after it, then the aggregation's steps. A join's
  records are gathered by source partition and sorted there by the time and place of
  the records that made them (``packed_output.in_join_order``), as ksqlDB writes them
  (not key by key); rows for an aggregation are placed by their time when records of
  two topics make them.
- Records keep their timestamps (ROWTIME, or the sink's TIMESTAMP column); the sink
  places them by key (murmur2, as Kafka's partitioner). With
  ``processing.guarantee=exactly_once_v2`` the sink writes each micro-batch in Kafka
  transactions (``exactlyOnce``): a restarted query resumes from its checkpoint without
  writing anything twice for read_committed readers.
- A record the query cannot get past (``values.ProcessingFailure``: a DECIMAL SUM that
  overflows, a TIMESTAMP column that does not read under
  ksql.timestamp.throw.on.invalid; a row that does not serialize) fails the query as
  ksqlDB's task fails at it: the step gives the sink, in the record's place, a row to
  ``FAILED_TOPIC`` holding the error in ksqlDB's words; the sink writes the records
  before it, then fails the micro-batch, and the query's state gives the error
  (``failure_reason``). The reading step before an aggregation or a join (a bad
  TIMESTAMP column) passes the failure on with the processing log entries, marked
  (``FAILURE_MARK``), at its record's place, and reads none of the task's records after
  it: the records before it, and its entry, are written, then the query fails, as for
  a query without state.
- Checkpoints live under ``ksql.streams.state.dir`` / query id, so a query restarted by
  the server (the command topic replayed) resumes where it stopped.

Spark finds the ``strom`` data source through the JVM thread's active session, so each
start sets it first. Does not own the query registry, planning or the REST API.
"""

from __future__ import annotations

import logging
import pickle
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.ksql import processing_log
from strom.ksql.join_flow import ORDER, flowing, tie_order
from strom.ksql.planner import QueryPlan
from strom.ksql.query_stats import OBSERVED, RuntimeStats
from strom.ksql.values import ProcessingFailure

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from strom.ksql.join_flow import JoinFlow

log = logging.getLogger(__name__)

OUTPUT_SCHEMA = "topic string, key binary, value binary, timestamp long"
# an aggregation's records, with the source partition, offset and sequence that order them
PLACED_SCHEMA = OUTPUT_SCHEMA + ", part int, off long, seq long"
PACKED_OUTPUT_SCHEMA = PLACED_SCHEMA + ", packed binary"  # strom.ksql.packed_output
# a join's records, with the time, tie order, source partition and offset of the record
# its step took, and a sequence, that order them (``packed_output.in_join_order``)
JOINED_SCHEMA = OUTPUT_SCHEMA + ", at long, tie int, part int, off long, seq long"
PLACE_SPAN = 1 << 20  # an input row's ``seq`` times this, plus its output's index
GROUPED_SCHEMA = "grp binary, part int, off long, seq int, ts timestamp, payload binary"
# a join's keyed rows: with the place of their record among the task's records (``at``)
# and their source partition's stream time (``pt``) (``run_join_keying``)
JOIN_KEYED_SCHEMA = GROUPED_SCHEMA + ", at long, pt long, wm timestamp"
# a flow's rows, with the place of the source record they come from among the task's
# records (``at``: ``run_join_keying``'s)
CHAINED_SCHEMA = (
    "grp binary, stage int, part int, off long, seq int, ts timestamp, payload binary, at long"
)
LOG_GROUP = b"\x00processing-log"  # the group of processing log entries, passed through
# the sink's failureTopic: a row to it, after the records its failing record's
# predecessors made, fails the micro-batch with its value (``ProcessingFailure``)
FAILED_TOPIC = "!query-failed"  # no Kafka topic is named so ('!' is not allowed)
# a processing log entry so marked (in ``LOG_GROUP``) is the query's failure, its text
# after the mark: the steps pass it on with the entries, the sink gets it as its
# ``FAILED_TOPIC`` row (``_log_row``)
FAILURE_MARK = b"\x00query-failed\x00"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PACKED_ROWS = 500_000  # a grouping task's rows packed by group at most at once
STEPS_KEPT = 64  # EMIT FINAL's moves of the stream time a grouped row carries at most


@dataclass(frozen=True)
class QuerySpec:
    """What a Spark task needs to run a query's operators (picklable)."""

    query_id: str
    plan: QueryPlan
    client: dict[str, Any] = field(hash=False)  # librdkafka settings of the cluster
    registry_url: str | None
    registry_settings: dict[str, str] = field(hash=False)
    log_topic: str
    exactly_once: bool
    offset_reset: str  # earliest, latest, or the offsets latest stood for at creation (JSON)
    trigger_ms: int
    # ksql.timestamp.throw.on.invalid: a TIMESTAMP column that does not read fails the query
    timestamp_throw_on_invalid: bool = False

    @property
    def sink_topic(self) -> str:
        assert self.plan.sink is not None
        return self.plan.sink.topic


# ---- inside Spark's tasks -----------------------------------------------------------------


class _TaskParts:
    """A query's reader, operators and writer, built once per Python worker."""

    def __init__(self, spec: QuerySpec) -> None:
        from strom.ksql.arrow_aggregate import compile_aggregation, compile_grouping
        from strom.ksql.arrow_stateless import compile_stateless
        from strom.ksql.operators import Operators
        from strom.ksql.readers import RecordReader, RecordWriter
        from strom.ksql.registry_formats import RegistryFormats

        registry = (
            RegistryFormats(spec.registry_url, spec.registry_settings)
            if spec.registry_url
            else None
        )
        self.spec = spec
        aggregation = spec.plan.aggregation
        self.plan_windowed = aggregation is not None and aggregation.window is not None
        self.errors: list[bytes] = []
        self.reader = RecordReader(spec.plan.source, registry)
        join = spec.plan.join
        self.right_reader = RecordReader(join.right, registry) if join is not None else None
        self.readers = [RecordReader(s, registry) for s in spec.plan.sources]
        self._flow: JoinFlow | None = None
        self.operators = Operators(spec.plan, self._on_error)
        assert spec.plan.sink is not None
        self.writer = RecordWriter(spec.plan.sink, registry)
        self.batch_stateless = compile_stateless(spec.plan)  # None: record at a time
        self.batch_grouping = compile_grouping(spec.plan)
        self.batch_aggregation = compile_aggregation(spec.plan)

    def flow(self) -> JoinFlow:
        """The plan's join stages (a chain, a foreign-key join, GROUP BY over a join)."""
        if self._flow is None:
            from strom.ksql.join_flow import JoinFlow

            self._flow = JoinFlow(self.operators)
        return self._flow

    def _on_error(self, message: str) -> None:
        self.errors.append(processing_log.processing_error(self.spec.query_id, message))

    def take_errors(self) -> list[bytes]:
        errors, self.errors = self.errors, []
        return errors


_PARTS: dict[str, _TaskParts] = {}
_PARTS_LOCK = threading.Lock()


def _parts(spec: QuerySpec) -> _TaskParts:
    with _PARTS_LOCK:
        found = _PARTS.get(spec.query_id)
        if found is None or found.spec != spec:
            found = _PARTS[spec.query_id] = _TaskParts(spec)
        return found


def _source_records(batch: pa.RecordBatch) -> Iterator[Any]:
    import pyarrow as pa

    from strom.ksql.readers import SourceRecord

    names = batch.schema.names
    columns = {name: batch.column(name) for name in names}
    micros = columns["timestamp"].cast(pa.int64()).to_pylist()
    keys = columns["key"].to_pylist()
    values = columns["value"].to_pylist()
    topics = columns["topic"].to_pylist()
    partitions = columns["partition"].to_pylist()
    offsets = columns["offset"].to_pylist()
    headers = columns["headers"].to_pylist() if "headers" in columns else None
    for index in range(batch.num_rows):
        record_headers = (
            [(h["key"], h["value"]) for h in headers[index] or []] if headers is not None else None
        )
        yield SourceRecord(
            topic=topics[index],
            partition=partitions[index],
            offset=offsets[index],
            timestamp=(micros[index] or 0) // 1000,
            key=keys[index],
            value=values[index],
            headers=record_headers,
        )


def _read(
    parts: _TaskParts,
    record: Any,
    out: list[tuple[Any, ...]],
    right: bool = False,
    source: int | None = None,
) -> Any:
    """The record's row (as a row of the plan's ``source``-th source when given), or
    None (its processing log entry added to ``out``)."""
    from strom.ksql.readers import RecordError

    try:
        if source is not None:
            return parts.readers[source].read(record)
        if right:
            assert parts.right_reader is not None
            return parts.right_reader.read(record)
        return parts.reader.read(record)
    except RecordError as exc:
        if exc.quiet:
            return None
        if exc.timestamp:  # ksqlDB's timestamp extractor logs it
            entry = processing_log.timestamp_error(parts.spec.query_id, exc.message)
        else:
            entry = processing_log.deserialization_error(
                parts.spec.query_id, exc.target, exc.message, record.topic
            )
        out.append((parts.spec.log_topic, None, entry, None))
        if exc.timestamp and parts.spec.timestamp_throw_on_invalid:  # logged, then fatal
            raise ProcessingFailure(
                "Fatal user code error in TimestampExtractor callback for record (topic = "
                f"{record.topic}, partition = {record.partition}, offset = {record.offset}, "
                f"timestamp = {record.timestamp}): {exc.message}"
            ) from None
        return None


def _failed(text: str) -> tuple[Any, ...]:
    """The sink's row that fails the micro-batch with ``text`` (``FAILED_TOPIC``)."""
    return (FAILED_TOPIC, None, text.encode(), None)


def _read_entries(
    parts: _TaskParts, record: Any, source: int | None = None, right: bool = False
) -> tuple[Any, list[bytes], bool]:
    """A reading step's record before a step with state: its row (None when it has
    none), its processing log entries and whether the query fails at it (then its
    entries end with the failure, marked: ``FAILURE_MARK``)."""
    out: list[tuple[Any, ...]] = []
    try:
        row = _read(parts, record, out, right, source)
    except ProcessingFailure as exc:  # logged, then the query fails there
        return None, [o[2] for o in out] + [FAILURE_MARK + str(exc).encode()], True
    return row, [o[2] for o in out], False


def _log_row(spec: QuerySpec, payload: bytes) -> tuple[Any, ...]:
    """A processing log entry passed on as the sink's row: the query's failure
    (``FAILURE_MARK``) as the row that fails the micro-batch."""
    if payload.startswith(FAILURE_MARK):
        return _failed(payload[len(FAILURE_MARK) :].decode())
    return (spec.log_topic, None, payload, None)


def _failure_text(spec: QuerySpec, error: Exception, part: int, off: int) -> str:
    """A record's processing failure as ksqlDB's Kafka Streams words it (the record's
    place when the query reads one source, whose offsets the aggregation keeps)."""
    if spec.plan.joins:
        return f"Exception caught in process. {error}"
    return (
        f"Exception caught in process. topic={spec.plan.source.topic}, partition={part}, "
        f"offset={off}: {error}"
    )


def _write(parts: _TaskParts, changes: list[Any], out: list[tuple[Any, ...]]) -> None:
    """The changes as the sink's records; one that does not serialize is logged, then
    fails the query there (ksqlDB's LoggingSerializer logs and throws again, and Kafka
    Streams fails the task): the rows after it are not written."""
    from strom.ksql.metastore import KsqlStatementError

    topic = parts.spec.sink_topic
    for change in changes:
        try:
            key = None if change.keyless else parts.writer.key(change.key, change.window)
            value = parts.writer.value(change.value)
        except KsqlStatementError as exc:
            entry = processing_log.processing_error(
                parts.spec.query_id, f"Error serializing the row: {exc}"
            )
            out.append((parts.spec.log_topic, None, entry, None))
            out.append(
                _failed(
                    f"Exception caught in process. Unable to serialize record to {topic}: {exc}"
                )
            )
            continue
        out.append((topic, key, value, change.timestamp))


def _output_batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    import pyarrow as pa

    topics, keys, values, timestamps = (
        (list(c) for c in zip(*rows, strict=True)) if rows else ([], [], [], [])
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array(topics, pa.string()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(timestamps, pa.int64()),
        ],
        names=["topic", "key", "value", "timestamp"],
    )


def run_stateless(spec: QuerySpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow of a query without aggregation: a batch at a time on Arrow when the
    plan and the batch allow it (``strom.ksql.arrow_stateless``), else record at a time
    (a null value under the sink's TIMESTAMP column stamped with its source partition's
    stream time over the task's records of the micro-batch)."""
    parts = _parts(spec)
    stream_times: dict[int, int] = {}  # each source partition's, over the task's records
    for batch in batches:
        if parts.batch_stateless is not None:
            done = parts.batch_stateless.run(batch)
            if done is not None:
                yield done
                continue
        out: list[tuple[Any, ...]] = []
        for record in _source_records(batch):
            try:
                row = _read(parts, record, out)
            except ProcessingFailure as exc:  # the records before it written, then fatal
                out.append(_failed(str(exc)))
                yield _output_batch(out)
                return
            if row is None:
                continue
            stream_time = max(stream_times.get(record.partition, -1), row.timestamp)
            stream_times[record.partition] = stream_time
            changes = parts.operators.stateless(row, stream_time)
            for entry in parts.take_errors():
                out.append((spec.log_topic, None, entry, None))
            _write(parts, changes, out)
        yield _output_batch(out)


class _Grouped:
    """Rows of the grouped frame: (group, partition, offset, sequence, timestamp in
    microseconds, payload)."""

    def __init__(self) -> None:
        self.rows: list[tuple[bytes, int, int, int, int, bytes]] = []

    def add(self, group: bytes, record: Any, sequence: int, ms: int, payload: bytes) -> None:
        self.rows.append((group, record.partition, record.offset, sequence, ms * 1000, payload))

    def batch(self) -> pa.RecordBatch:
        import pyarrow as pa

        columns: list[Any] = list(zip(*self.rows, strict=True)) if self.rows else [()] * 6
        return pa.RecordBatch.from_arrays(
            [
                pa.array(columns[0], pa.binary()),
                pa.array(columns[1], pa.int32()),
                pa.array(columns[2], pa.int64()),
                pa.array(columns[3], pa.int32()),
                pa.array(columns[4], pa.timestamp("us", tz="UTC")),
                pa.array(columns[5], pa.binary()),
            ],
            names=["grp", "part", "off", "seq", "ts", "payload"],
        )


def run_grouping(spec: QuerySpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow before an aggregation: each row's group (pickled) and the row with its
    sign and its source partition's stream time at it and before it (pickled; ksqlDB's
    stream time: the largest time of the partition's rows the aggregation keeps, up to
    this one; -1 before the task's first in the micro-batch); with EMIT FINAL, also the
    partition's moves of the stream time so far that close a window unwritten (the last
    ``STEPS_KEPT``), by which a group whose window another group's record closed tells
    whether ksqlDB wrote it (``Operators.close_windows``). Over a table, the group is
    the source key's, for the regrouping step that follows (which knows the row's
    previous group)."""
    from strom.ksql.arrow_aggregate import GroupPacker, stamp_stream_times

    parts = _parts(spec)
    table = spec.plan.source.kind == "TABLE"
    packer = GroupPacker()  # an aggregation's batches on Arrow, packed by group
    stream_times: dict[int, int] = {}  # each source partition's, over the task's rows
    steps: dict[int, tuple[tuple[int, int], ...]] = {}  # EMIT FINAL's, by partition
    for batch in batches:
        if parts.batch_grouping is not None:
            keyed = parts.batch_grouping.keyed(batch)
            if keyed is not None:
                stamp_stream_times(keyed, stream_times)
                packer.add(keyed)
                if packer.rows >= PACKED_ROWS:
                    yield packer.flush()
                continue
        grouped = _Grouped()
        for record in _source_records(batch):
            row, entries, failing = _read_entries(parts, record)
            if failing:  # passed on: the task's records after it are not read
                for entry in entries:
                    grouped.add(LOG_GROUP, record, 0, record.timestamp, entry)
                yield grouped.batch()
                if packer.rows:
                    yield packer.flush()
                return
            if row is not None and table:
                key = tuple(row.columns.get(c.name) for c in spec.plan.source.key_columns)
                grouped.add(pickle.dumps(key), record, 0, row.timestamp, pickle.dumps(row))
                continue
            found = parts.operators.group(row) if row is not None else None
            for entry in entries + parts.take_errors():
                grouped.add(LOG_GROUP, record, 0, record.timestamp, entry)
            if found is not None:
                group, columns = found
                row_time = int(columns["ROWTIME"])
                before = stream_times.get(record.partition, -1)
                stream_time = max(before, row_time)
                stream_times[record.partition] = stream_time
                made = steps.get(record.partition, ())
                if stream_time > before and parts.operators.expiring(before, stream_time):
                    made = steps[record.partition] = (*made, (before, stream_time))[-STEPS_KEPT:]
                payload = pickle.dumps((columns, 1, stream_time, before, made))
                grouped.add(pickle.dumps(group), record, 0, row_time, payload)
        yield grouped.batch()
    if packer.rows:
        yield packer.flush()


def run_join_keying(spec: QuerySpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow before a join: each row of either source keyed by its join key, with
    its side and its sequence, its place at a tie (``join_flow.tie_order``: a table's
    change before the stream record it serves, a left table's before a right one's),
    and where its record comes among the task's records (``at``, ``pt``).

    A join's task takes each source partition's records in offset order and, between
    partitions, the one whose next record's timestamp is the lowest (Kafka Streams'
    choice). Taken so, a record comes after every record of a partition whose largest
    record timestamp so far is lower than its partition's: ``at``, the largest record
    timestamp of its partition in the micro-batch up to it, orders the task's records
    as that choice does (ties: ``tie_order``, then partition and offset). The record
    timestamps are the records' own, as written, not a TIMESTAMP column's: they follow
    the order the records were written in (ksqlDB's test driver takes a case's records
    in that order, whatever their TIMESTAMP columns say). ``pt``: the largest row time
    of the record's partition up to it, the time its side of the join has reached."""
    parts = _parts(spec)
    join = spec.plan.join
    assert join is not None
    right_topic = join.right.topic
    written_times: dict[tuple[str, int], int] = {}  # by source partition, the largest
    row_times: dict[tuple[str, int], int] = {}
    for batch in batches:
        grouped = _JoinKeyed()
        for record in _source_records(batch):
            place = (record.topic, record.partition)
            at = _task_place(written_times, record)
            right = record.topic == right_topic
            row, entries, failing = _read_entries(parts, record, right=right)
            side = "right" if right else "left"
            if failing:  # at its place; the task's records after it are not read
                tie = tie_order(spec.plan, 0, side)
                for entry in entries:
                    grouped.add(LOG_GROUP, record, tie, record.timestamp, entry, at, -1)
                yield grouped.batch()
                return
            key = parts.operators.key_of(side, row) if row is not None else None
            for entry in entries + parts.take_errors():
                grouped.add(LOG_GROUP, record, 0, record.timestamp, entry, at, -1)
            if row is not None:
                row_times[place] = max(row_times.get(place, -1), row.timestamp)
            if key is not None:
                payload = pickle.dumps((side, row))
                tie = tie_order(spec.plan, 0, side)
                pt = row_times[place]
                grouped.add(pickle.dumps(key), record, tie, row.timestamp, payload, at, pt, side)
        yield grouped.batch()


def _task_place(written_times: dict[tuple[str, int], int], record: Any) -> int:
    """A record's place among its task's records (``run_join_keying``'s ``at``): the
    largest record timestamp of its source partition up to it, kept in
    ``written_times``."""
    place = (record.topic, record.partition)
    at: int = max(written_times.get(place, -1), record.timestamp)
    written_times[place] = at
    return at


class _JoinKeyed:
    """Rows of a join's keyed frame (``JOIN_KEYED_SCHEMA``): ``_Grouped``'s, then the
    record's place among the task's records, its partition's stream time and the time
    the stream-stream join's watermark is taken from (``_side_watermark_ms``)."""

    def __init__(self) -> None:
        self.grouped = _Grouped()
        self.at: list[int] = []
        self.pt: list[int] = []
        self.wm: list[int] = []

    def add(
        self,
        group: bytes,
        record: Any,
        sequence: int,
        ms: int,
        payload: bytes,
        at: int,
        pt: int,
        side: str | None = None,
    ) -> None:
        self.grouped.add(group, record, sequence, ms, payload)
        self.at.append(at)
        self.pt.append(pt)
        # a processing log entry's record never reaches the join: its time counts not
        self.wm.append(0 if side is None else _side_watermark_ms(ms, side) * 1000)

    def batch(self) -> pa.RecordBatch:
        import pyarrow as pa

        batch = self.grouped.batch()
        return pa.RecordBatch.from_arrays(
            [
                *batch.columns,
                pa.array(self.at, pa.int64()),
                pa.array(self.pt, pa.int64()),
                pa.array(self.wm, pa.timestamp("us", tz="UTC")),
            ],
            names=[*batch.schema.names, "at", "pt", "wm"],
        )


def _side_watermark_ms(ms: int, side: str) -> int:
    """A stream-stream join row's time as its watermark is taken from: twice its time,
    plus one on the right side, so that the watermark (the largest of them) gives both
    the stream time and the side that reached it (``_stream_time_and_side``)."""
    return 2 * ms + (side == "right")


def _stream_time_and_side(timer_values: Any) -> tuple[int, str]:
    """A stream-stream join's stream time (the largest record time of the micro-batches
    before; 0 before any) and the side whose window store has reached it, from its
    watermark (``_side_watermark_ms``)."""
    watermark = max(_watermark(timer_values), 0)
    return watermark // 2, "right" if watermark % 2 else "left"


def _join_processor(spec: QuerySpec) -> Any:
    """A join key's state in Spark's state store (a table's row, a stream's records
    within the window), its rows joined in the order the task takes their records
    (``run_join_keying``'s ``at``, ``tie_order`` at a tie, then partition and offset).
    A stream-stream join's stream time at a record: the latest of its partition's
    (``pt``), the key's own records' and the watermark's (the stream time when the
    micro-batch began, and the side that reached it: ``_stream_time_and_side``)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    class JoinProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            schema = StructType([StructField("row", BinaryType())])
            self.handle = handle
            self.state = handle.getValueState("table_row", schema)

        def _save(self, parts: _TaskParts, stored: dict[str, Any]) -> None:
            """The key's state kept, and (stream-stream) a timer for its next record to
            leave the window: an event-time timer, the watermark being the stream time
            (the largest record time of the micro-batches before; 0 before any) with its
            side (``_side_watermark_ms``: twice the stream time, plus one)."""
            operators = parts.operators
            if operators.join is not None and operators.join.shape == "stream-stream":
                due = operators.next_join_close(stored)
                due = None if due is None else 2 * (due + 1)
                if stored.get("timer") not in (None, due):
                    self.handle.deleteTimer(stored["timer"])
                    stored["timer"] = None
                if due is not None and stored.get("timer") is None:
                    self.handle.registerTimer(due)
                    stored["timer"] = due
            if any(stored.get(side) for side in ("left", "right")) or stored.get("emitted"):
                self.state.update((pickle.dumps(stored),))
            else:
                self.state.clear()

        def handleExpiredTimer(
            self, key: Any, timerValues: Any, expiredTimerInfo: Any
        ) -> Iterator[pd.DataFrame]:
            parts = _parts(spec)
            stored = pickle.loads(self.state.get()[0]) if self.state.exists() else {}
            stored["timer"] = None
            # the timer fires once the stream time (of records: the watermark starts at 0
            # and a timer is due after its records' times) has passed its record's close
            stream_time, ahead = _stream_time_and_side(timerValues)
            stored["time"] = max(stored.get("time", -1), stream_time)
            out: list[tuple[Any, ...]] = []
            # the side that reached the stream time has its window store there, the other
            # taken to have moved on with it as far behind as the key last saw it: records
            # the stores no longer keep leave the state
            observed = {**parts.operators.sides_at(stored, stream_time), ahead: stream_time}
            closed = parts.operators.close_joins(stored, stored["time"], 0, None, observed)
            _write(parts, closed, out)
            self._save(parts, stored)
            # after the records of the stream time that closed them
            yield from _frames(_joined(out, stored["time"], 2, stored.get("part", -1), -1))

        def handleInputRows(
            self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
        ) -> Iterator[pd.DataFrame]:
            import pandas as pd

            parts = _parts(spec)
            frames = list(rows)
            frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
            out: list[tuple[Any, ...]] = []
            if key[0] == LOG_GROUP:
                yield from _frames(_logged(spec, frame))
                return
            order = _in_time_order(frame)
            join_key = pickle.loads(key[0])  # the rows' join key, as the keying found it
            found = self.state.get()  # None when the key has none (one call, not two)
            stored = pickle.loads(found[0]) if found is not None else {}
            operators = parts.operators
            windowed = operators.join is not None and operators.join.shape == "stream-stream"
            # a stream-table join's state is the table's row: stream records alone leave
            # it as it was (its time is not read), and it is not written again
            changed = operators.join is None or operators.join.shape != "stream-table"
            # the stream time of the micro-batches before (0: none), and the side there
            stream_time, ahead = _stream_time_and_side(timerValues) if windowed else (-1, "")
            if stream_time > 0:
                stored["time"] = max(stored.get("time", -1), stream_time)
            for tie, part, off, at, pt, payload in zip(
                frame["seq"].to_numpy()[order].tolist(), frame["part"].to_numpy()[order].tolist(),
                frame["off"].to_numpy()[order].tolist(), frame["at"].to_numpy()[order].tolist(),
                frame["pt"].to_numpy()[order].tolist(), frame["payload"].to_numpy()[order],
                strict=True,
            ):  # fmt: skip
                side, row = pickle.loads(payload)
                changed = changed or side == "right"
                stored["time"] = max(stored.get("time", -1), row.timestamp, pt)
                stored["part"] = part
                written: list[tuple[Any, ...]] = []
                # a side's window store has seen its partition's records; the one that
                # reached the stream time, that time
                observed = {side: pt} if windowed else None
                if observed is not None and stream_time > 0:
                    observed[ahead] = max(observed.get(ahead, -1), stream_time)
                joined = operators.join_rows(
                    stored, side, row, stored["time"], 0, join_key, observed
                )
                _write(parts, [c for j in joined for c in operators.finish(j)], written)
                written.extend((spec.log_topic, None, e, None) for e in parts.take_errors())
                out += _joined(written, at, tie, part, off)
            if windowed:
                operators.note_side_lags(stored, stored["time"])
            if changed:
                self._save(parts, stored)
            if out:
                yield _joined_frame(out)

        def close(self) -> None:
            return None

    return JoinProcessor()


def _in_time_order(frame: pd.DataFrame) -> Any:
    """The positions of a keyed step's rows in the order its key takes them: by their
    place among the task's records (``at``; the time when the rows have none), then
    sequence (``tie_order`` at a tie), source partition and offset;
    numpy's stable lexsort (pandas' multi-column sort costs milliseconds a key, most
    keys having few rows)."""
    import numpy as np

    return np.lexsort(
        (
            frame["off"].to_numpy(),
            frame["part"].to_numpy(),
            frame["seq"].to_numpy(),
            frame["at"].to_numpy() * 1000 if "at" in frame else _row_micros(frame),
        )
    )


def _row_micros(frame: pd.DataFrame) -> Any:
    """The grouped rows' ``ts`` in microseconds (numpy's int64)."""
    return frame["ts"].values.astype("datetime64[us]").astype("int64")


def _joined_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """A join step's output rows (``JOINED_SCHEMA``) as a frame, built from numpy
    arrays (``_frame``'s nullable columns cost more than the rows, most keys giving a
    few): the timestamp nullable only when a row has none (a processing log entry)."""
    import numpy as np
    import pandas as pd

    topics, keys, values, timestamps, at, tie, part, off, seq = zip(*rows, strict=True)
    return pd.DataFrame(
        {
            "topic": np.array(topics, dtype=object),
            "key": np.array(keys, dtype=object),
            "value": np.array(values, dtype=object),
            "timestamp": (
                pd.array(timestamps, dtype="Int64")
                if None in timestamps
                else np.array(timestamps, dtype=np.int64)
            ),
            "at": np.array(at, dtype=np.int64),
            "tie": np.array(tie, dtype=np.int32),
            "part": np.array(part, dtype=np.int32),
            "off": np.array(off, dtype=np.int64),
            "seq": np.array(seq, dtype=np.int64),
        },
        copy=False,
    )


def run_flow_keying(spec: QuerySpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow before a flow of join stages: each record read as a row of every
    source over its topic, keyed for its first stage (the stage, the tie order and the
    message in the row), with its place among the task's records (``at``, as
    ``run_join_keying`` gives it)."""
    parts = _parts(spec)
    flow = parts.flow()
    sources = spec.plan.sources
    written_times: dict[tuple[str, int], int] = {}  # by source partition, the largest
    for batch in batches:
        chained = _Chained()
        for record in _source_records(batch):
            at = _task_place(written_times, record)
            for index, source in enumerate(sources):
                if source.topic != record.topic:
                    continue
                row, entries, failing = _read_entries(parts, record, source=index)
                if failing:  # at its place; the task's records after it are not read
                    tie = _source_tie(spec.plan, index)
                    for entry in entries:
                        chained.add(LOG_GROUP, -1, record, tie, record.timestamp, entry, at)
                    yield chained.batch()
                    return
                messages = flow.entries(index, row) if row is not None else []
                for entry in entries + parts.take_errors():
                    chained.add(LOG_GROUP, -1, record, 0, record.timestamp, entry, at)
                for message in messages:
                    chained.add(
                        pickle.dumps(message.key), message.stage, record, message.order,
                        message.timestamp, pickle.dumps(message.payload), at,
                    )  # fmt: skip
        yield chained.batch()


def _source_tie(plan: QueryPlan, source: int) -> int:
    """The tie order (``tie_order``) of the rows of the plan's ``source``-th source at
    its first join."""
    if source == 0:
        return 0 if plan.joins[0].foreign_key else tie_order(plan, 0, "left")
    return tie_order(plan, source - 1, "right")


class _Chained:
    """Rows of a flow of join stages: (group, stage, partition, offset, tie order,
    timestamp in microseconds, payload, place among the task's records); the stage -1
    for processing log entries."""

    def __init__(self) -> None:
        self.rows: list[tuple[bytes, int, int, int, int, int, bytes, int]] = []

    def add(
        self, group: bytes, stage: int, record: Any, order: int, ms: int, payload: bytes, at: int
    ) -> None:
        self.rows.append(
            (group, stage, record.partition, record.offset, order, ms * 1000, payload, at)
        )

    def batch(self) -> pa.RecordBatch:
        import pyarrow as pa

        columns: list[Any] = list(zip(*self.rows, strict=True)) if self.rows else [()] * 8
        return pa.RecordBatch.from_arrays(
            [
                pa.array(columns[0], pa.binary()),
                pa.array(columns[1], pa.int32()),
                pa.array(columns[2], pa.int32()),
                pa.array(columns[3], pa.int64()),
                pa.array(columns[4], pa.int32()),
                pa.array(columns[5], pa.timestamp("us", tz="UTC")),
                pa.array(columns[6], pa.binary()),
                pa.array(columns[7], pa.int64()),
            ],
            names=["grp", "stage", "part", "off", "seq", "ts", "payload", "at"],
        )


def _flow_processor(spec: QuerySpec, stage_index: int, output: str) -> Any:
    """One stage of a flow of joins: the rows for it run in their key's state (Spark's
    state store), in the order the task takes the records they come from (``at``,
    ``tie_order`` at a tie, then partition and offset); the rows for
    later stages pass through. ``output``: "chain" (rows for the next stages), "grouped"
    (rows for the aggregation after the last join) or "records" (the sink's)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    class FlowProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.state = handle.getValueState(
                "flow_state", StructType([StructField("state", BinaryType())])
            )

        def _windowed(self, parts: _TaskParts) -> int | None:
            """Stream-stream: the stage's join (its reach from the watermark)."""
            from strom.ksql.join_flow import JOIN

            stage = parts.flow().stages[stage_index]
            if stage.kind == JOIN and spec.plan.joins[stage.step].shape == "stream-stream":
                return stage.step
            return None

        def _emit(
            self,
            parts: _TaskParts,
            messages: list[Any],
            changes: list[Any],
            place: tuple[int, int, int, int],
        ) -> list[tuple[Any, ...]]:
            """The rows a message gave; ``place``: the place among the task's records,
            tie order, source partition and offset of the record it came from."""
            rows: list[tuple[Any, ...]] = []
            if output == "records":
                _write(parts, changes, rows)
                rows.extend((spec.log_topic, None, e, None) for e in parts.take_errors())
                return _joined(rows, *place)
            errors = parts.take_errors()
            at, tie, part, off = place
            taken = at
            timed = output == "grouped" and _timed_places(spec.plan)
            if timed:  # for the aggregation, which takes a group's rows in (partition,
                # offset, sequence) order: the offset is the time, the sequence the tie
                # order then the offset (mod 2^27), as the join steps take them at a
                # tie (the regrouping doubles it: within int32)
                off, tie = at, (tie << 27) + off % (1 << 27)
            flow_stages = parts.flow().stages
            for message in messages:
                order = tie if timed else message.order
                source = part
                if flow_stages[message.stage].kind == ORDER:  # by the left row's partition
                    source = message.payload.row.columns.get("ROWPARTITION", part)
                row = (
                    pickle.dumps(message.key), message.stage, part if source is None else source,
                    off, order, message.timestamp * 1000, pickle.dumps(message.payload), taken,
                )  # fmt: skip
                rows.append(row)
            rows.extend((LOG_GROUP, -1, 0, 0, 0, 0, e, 0) for e in errors)
            return rows

        def _frame(self, rows: list[tuple[Any, ...]]) -> Iterator[pd.DataFrame]:
            if not rows:
                return
            if output == "records":
                yield _frame(rows)
                return
            yield _chained_frame(rows, grouped=output == "grouped")

        def _save(self, parts: _TaskParts, stored: dict[str, Any], step: int | None) -> None:
            if step is not None:  # an event-time timer for the next record to leave
                due = parts.operators.next_join_close(stored, step)
                due = None if due is None else due + 1 - parts.operators.join_reach(step)
                if stored.get("timer") not in (None, due):
                    self.handle.deleteTimer(stored["timer"])
                    stored["timer"] = None
                if due is not None and stored.get("timer") is None:
                    self.handle.registerTimer(due)
                    stored["timer"] = due
            if any(v for k, v in stored.items() if k not in ("time", "timer", "part")):
                self.state.update((pickle.dumps(stored),))
            else:
                self.state.clear()

        def handleInputRows(
            self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
        ) -> Iterator[pd.DataFrame]:
            import pandas as pd

            from strom.ksql.join_flow import Message

            parts = _parts(spec)
            frame = pd.concat(list(rows), ignore_index=True)
            passing = frame[frame["stage"] != stage_index]
            out: list[tuple[Any, ...]] = []
            if len(passing):
                if output == "records":  # only processing log entries are left
                    out = _logged(spec, passing)
                else:
                    out = list(passing.itertuples(index=False, name=None))
                if output == "grouped" and _timed_places(spec.plan):
                    out = [_timed_log_row(r) for r in out]
            mine = frame[frame["stage"] == stage_index]
            if len(mine):
                mine = mine.sort_values(["at", "seq", "part", "off"], kind="stable")
                group = pickle.loads(key[0])
                stored = pickle.loads(self.state.get()[0]) if self.state.exists() else {}
                step = self._windowed(parts)
                if step is not None:
                    watermark = _watermark(timerValues)
                    if watermark > 0:  # none before the first batch's end (0 then)
                        reach = watermark + parts.operators.join_reach(step)
                        stored["time"] = max(stored.get("time", -1), reach)
                flow = parts.flow()
                for part, off, seq, ts, payload, at in zip(
                    mine["part"], mine["off"], mine["seq"], mine["ts"], mine["payload"],
                    mine["at"], strict=True,
                ):  # fmt: skip
                    timestamp = int(ts.value // 1_000_000)
                    stored["time"] = max(stored.get("time", -1), timestamp)
                    stored["part"] = int(part)
                    content = pickle.loads(payload)
                    message = Message(stage_index, group, content, timestamp, int(seq))
                    state = stored.setdefault("state", {})
                    messages, changes = flow.step(message, state, stored["time"])
                    place = (int(at), int(seq), int(part), int(off))
                    out += self._emit(parts, messages, changes, place)
                self._save(parts, stored, step)
            if output != "records":
                out = [_chained_row(r, output == "grouped") for r in out]
            yield from self._frame(out)

        def handleExpiredTimer(
            self, key: Any, timerValues: Any, expiredTimerInfo: Any
        ) -> Iterator[pd.DataFrame]:
            parts = _parts(spec)
            step = self._windowed(parts)
            stored = pickle.loads(self.state.get()[0]) if self.state.exists() else {}
            stored["timer"] = None
            if step is None:
                return
            reach = _watermark(timerValues) + parts.operators.join_reach(step)
            stored["time"] = max(stored.get("time", -1), reach)
            group = pickle.loads(key[0])
            state = stored.setdefault("state", {})
            # both sides taken to have reached the stream time: records the stores no
            # longer keep leave the state
            observed = {"left": stored["time"], "right": stored["time"]}
            flow = parts.flow()
            messages, changes = flow.close(stage_index, group, state, stored["time"], observed)
            # after the records of the stream time that closed them
            place = (stored["time"], 2, stored.get("part", -1), -1)
            out = self._emit(parts, messages, changes, place)
            self._save(parts, stored, step)
            if output != "records":
                out = [_chained_row(r, output == "grouped") for r in out]
            yield from self._frame(out)

        def close(self) -> None:
            return None

    return FlowProcessor()


def _timed_log_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A processing log entry's chained row passed on to an aggregation whose rows are
    placed by their time (as a flow stage's ``_emit`` places them): placed so too, by its
    record's place among the task's records (``at``) and tie order."""
    group, stage, part, off, tie, ts, payload, at = row
    return (group, stage, part, at, (tie << 27) + off % (1 << 27), ts, payload, at)


def run_in_order(spec: QuerySpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow of a foreign-key join's ``order`` stage: a task's results of the
    micro-batch (gathered by the left rows' source partition, as ksqlDB's task of the
    left table's partition writes them: each key's all in one task, from the joins of
    any foreign key) sorted by the time, tie order and place of the records that made
    them, then written: a key's last result is its newest, and the keys' results come
    in their records' order too."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from strom.ksql.join_flow import Message

    received = [batch for batch in batches if batch.num_rows]
    if not received:
        return
    table = pa.Table.from_batches(received)
    times = table.column("ts").cast(pa.int64())  # microseconds
    table = table.set_column(table.schema.get_field_index("ts"), "ts", times)
    keys = [(column, "ascending") for column in ("at", "seq", "part", "off")]
    table = table.take(pc.sort_indices(table, sort_keys=keys))
    parts = _parts(spec)
    flow = parts.flow()
    out: list[tuple[Any, ...]] = []
    rows = table.to_pylist()  # a failure after the entries at its place (stable)
    rows.sort(key=lambda r: r["stage"] == -1 and r["payload"].startswith(FAILURE_MARK))
    rows.sort(key=lambda r: (r["at"], r["seq"], r["part"], r["off"]))
    for row in rows:
        if row["stage"] == -1:  # a processing log entry
            out.append(_log_row(spec, row["payload"]))
            continue
        timestamp = int(row["ts"]) // 1000
        payload = pickle.loads(row["payload"])
        message = Message(row["stage"], pickle.loads(row["grp"]), payload, timestamp, row["seq"])
        _write(parts, flow.step(message, {}, timestamp)[1], out)
        out.extend((spec.log_topic, None, e, None) for e in parts.take_errors())
    if out:
        yield _output_batch(out)


def _chained_row(row: tuple[Any, ...], grouped: bool) -> tuple[Any, ...]:
    """A chained row (group, stage, partition, offset, order, timestamp, payload, place)
    as the aggregation's grouped row (the stage and place dropped, the payload as it
    expects) when ``grouped``; a timestamp in microseconds either way."""
    ts = row[5]
    if hasattr(ts, "value"):  # a pandas Timestamp passing through
        ts = int(ts.value // 1000)
    if not grouped:
        return (*row[:5], ts, row[6], row[7])
    return (row[0], row[2], row[3], row[4], ts, row[6])


def _chained_frame(rows: list[tuple[Any, ...]], grouped: bool) -> pd.DataFrame:
    import pandas as pd

    names = (
        ["grp", "part", "off", "seq", "ts", "payload"]
        if grouped
        else ["grp", "stage", "part", "off", "seq", "ts", "payload", "at"]
    )
    frame = pd.DataFrame(rows, columns=names)
    frame["ts"] = pd.to_datetime(frame["ts"], unit="us", utc=True)
    for column in ("part", "seq", *(() if grouped else ("stage",))):
        frame[column] = frame[column].astype("int32")
    frame["off"] = frame["off"].astype("int64")
    if not grouped:
        frame["at"] = frame["at"].astype("int64")
    return frame


def _regroup_processor(spec: QuerySpec) -> Any:
    """Over a table: each source key's last group kept, so an update is an undo in its
    old group and an add in its new one (ksqlDB's table GROUP BY)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    class RegroupProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.state = handle.getValueState(
                "previous", StructType([StructField("row", BinaryType())])
            )

        def handleInputRows(
            self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
        ) -> Iterator[pd.DataFrame]:
            import pandas as pd

            from strom.ksql.operators import TableRegrouping

            parts = _parts(spec)
            frame = pd.concat(list(rows), ignore_index=True).sort_values(
                ["part", "off", "seq"], kind="stable"
            )
            regrouping = TableRegrouping(parts.operators)
            previous = pickle.loads(self.state.get()[0]) if self.state.exists() else None
            grouped = _Grouped()
            for part, off, seq, payload in zip(
                frame["part"], frame["off"], frame["seq"], frame["payload"], strict=True
            ):
                if key[0] == LOG_GROUP:  # processing log entries pass through
                    grouped.add(LOG_GROUP, _Position(int(part), int(off)), 0, 0, payload)
                    continue
                row = pickle.loads(payload)
                steps, previous = regrouping.changes(previous, row)
                record = _Position(int(part), int(off))
                # a join's rows of one time keep their order (their ``seq``) in the
                # groups: an undo and an add (at most two) after it
                for step, (group, columns, sign) in enumerate(steps):
                    grouped.add(
                        pickle.dumps(group), record, 2 * int(seq) + step, row.timestamp,
                        pickle.dumps((columns, sign)),
                    )  # fmt: skip
            for entry in parts.take_errors():
                grouped.add(LOG_GROUP, _Position(0, 0), 0, 0, entry)
            if previous is None:
                self.state.clear()
            else:
                self.state.update((pickle.dumps(previous),))
            if grouped.rows:
                yield grouped.batch().to_pandas()

        def close(self) -> None:
            return None

    return RegroupProcessor()


@dataclass(frozen=True)
class _Position:
    partition: int
    offset: int


def _placed(
    rows: list[tuple[Any, ...]], partition: int, offset: int, first: int
) -> list[tuple[Any, ...]]:
    """Output rows with the place that orders them: the source record's partition and
    offset, and a sequence from ``first`` (``PLACED_SCHEMA``)."""
    return [(*row, partition, offset, first + n) for n, row in enumerate(rows)]


def _aggregate_processor(spec: QuerySpec, packed: bool = False) -> Any:
    """Its output is ``PLACED_SCHEMA``'s: each record with the place of the source record
    that made it (a closed window's, from a timer, the partition -1 and the window's
    end), so that ``_in_record_order`` writes them in the source's order. ``packed``:
    ``PACKED_OUTPUT_SCHEMA``'s, the batch path's records of a group in one row
    (``strom.ksql.packed_output``), others plain."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    def _plain(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            if packed:
                frame["packed"] = None
            yield frame

    class AggregateProcessor(StatefulProcessor):
        """One group's windows and accumulators in Spark's state store."""

        def init(self, handle: Any) -> None:
            schema = StructType([StructField("state", BinaryType())])
            self.handle = handle
            self.state = handle.getValueState("windows", schema)

        def _load(self) -> dict[str, Any]:
            found = self.state.get()  # None when there is none: one call to the JVM
            if found is not None:
                loaded: dict[str, Any] = pickle.loads(found[0])
                return loaded
            return {"windows": {}, "stream_time": -1, "timer": None}

        def _save(self, parts: _TaskParts, stored: dict[str, Any]) -> None:
            if not stored["windows"] and parts.operators.window is not None:
                self.state.clear()
                return
            self.state.update((pickle.dumps(stored),))

        def _timer(self, parts: _TaskParts, stored: dict[str, Any]) -> None:
            if not parts.plan_windowed:
                return
            # the watermark is the stream time (``_aggregated``'s event time)
            watermark_due = parts.operators.next_close(stored["windows"])
            if stored["timer"] is not None and stored["timer"] != watermark_due:
                self.handle.deleteTimer(stored["timer"])
                stored["timer"] = None
            if watermark_due is not None and stored["timer"] is None:
                self.handle.registerTimer(watermark_due)
                stored["timer"] = watermark_due

        def handleInputRows(
            self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
        ) -> Iterator[pd.DataFrame]:
            import pandas as pd

            parts = _parts(spec)
            frames = list(rows)
            if parts.batch_aggregation is not None and key[0] != LOG_GROUP:
                yield from self._batch(parts, key, frames, timerValues)
                return
            frame = pd.concat(frames, ignore_index=True)
            frame = frame.sort_values(["part", "off", "seq"], kind="stable")
            places = zip(
                frame["part"].tolist(), frame["off"].tolist(), frame["seq"].tolist(), strict=True
            )
            out: list[tuple[Any, ...]] = []
            if key[0] == LOG_GROUP:  # a failure after the entries at its place
                for (part, off, seq), payload in zip(places, frame["payload"], strict=True):
                    row = _log_row(spec, payload)
                    last = int(row[0] == FAILED_TOPIC)
                    out.append((*row, part, off, seq * PLACE_SPAN + last))
                yield from _plain(_frames(out))
                return
            group = pickle.loads(key[0])
            stored = self._load()
            floor = _watermark(timerValues) if parts.plan_windowed else -1
            operators = parts.operators
            # EMIT FINAL: a window closes after the update of the record that passes its
            # end and grace, and is written there (ksqlDB's onWindowClose); those that
            # an earlier micro-batch's stream time closed go before every record
            final = parts.plan_windowed and operators.plan.emit_final
            if final:
                closed = operators.close_windows(stored["windows"], group, floor)
                out += _closed_first(parts, closed, stored.get("part"))
            closed_through = -1  # the stream time that closed this group's windows
            place = (0, 0, 0)
            for (part, off, seq), payload in zip(places, frame["payload"], strict=True):
                row, sign, *partition_time = pickle.loads(payload)
                before: int | None = None
                steps: tuple[tuple[int, int], ...] = ()
                if partition_time:  # the source partition's stream time at the row
                    if final:  # where a later micro-batch writes its closed windows
                        stored["part"] = part
                    stream_time = max(partition_time[0], floor, closed_through)
                    if len(partition_time) > 2:
                        before = max(partition_time[1], floor, closed_through)
                        steps = tuple((max(a, floor), b) for a, b in partition_time[2])
                else:  # a join's or a table's row: the group's own latest
                    stream_time = max(stored["stream_time"], floor, int(row["ROWTIME"]))
                stored["stream_time"] = max(stored["stream_time"], stream_time)
                try:
                    changes = operators.aggregate(stored["windows"], group, row, stream_time, sign)
                except ProcessingFailure as exc:  # the group's rows after it not taken
                    failure = _failed(_failure_text(spec, exc, part, off))
                    out += _placed([failure], part, off, seq * PLACE_SPAN)
                    yield from _plain(_frames(out))  # the micro-batch fails: nothing saved
                    return
                written: list[tuple[Any, ...]] = []
                _write(parts, changes, written)
                if not partition_time or final:
                    open_windows = len(stored["windows"])
                    closed = operators.close_windows(
                        stored["windows"], group, stream_time, before, steps
                    )
                    _write(parts, closed, written)
                    if final and len(stored["windows"]) < open_windows:
                        closed_through = stream_time  # a later row of another partition
                        # is judged by it too: it would not reopen a window written
                written.extend((spec.log_topic, None, e, None) for e in parts.take_errors())
                out += _placed(written, part, off, seq * PLACE_SPAN)
                place = (part, off, seq * PLACE_SPAN + len(written))
            # closed once the group's rows are in (as the batch path closes them): rows of
            # two partitions each ran under their own partition's stream time
            closed = parts.operators.close_windows(stored["windows"], group, stored["stream_time"])
            written = []
            _write(parts, closed, written)
            out += _placed(written, *place)
            self._timer(parts, stored)
            self._save(parts, stored)
            yield from _plain(_frames(out))

        def _batch(
            self, parts: _TaskParts, key: Any, frames: list[pd.DataFrame], timerValues: Any
        ) -> Iterator[pd.DataFrame]:
            """The aggregation on Arrow (``strom.ksql.arrow_aggregate``): the rows'
            times and arguments, in (partition, offset) order, are all it reads (a
            packed row holds several rows')."""
            import numpy as np
            import pandas as pd

            aggregation = parts.batch_aggregation
            assert aggregation is not None
            frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
            seqs = frame["seq"].to_numpy()
            order = np.lexsort((seqs, frame["off"].to_numpy(), frame["part"].to_numpy()))
            payloads = frame["payload"].to_numpy()[order]
            stamps = _row_times(frame)[order]
            positions = (
                frame["part"].to_numpy()[order],
                frame["off"].to_numpy()[order],
                seqs[order],
            )
            records = aggregation.records(positions, stamps, payloads, parts.operators._values)
            stored = self._load()
            floor = _watermark(timerValues) if parts.plan_windowed else -1
            done = aggregation.run(stored, pickle.loads(key[0]), records, floor)
            self._timer(parts, stored)
            self._save(parts, stored)
            if done is None:
                return
            if packed:  # the group's records of a partition in a row (a few when many)
                from strom.ksql.packed_output import PACKED_RECORDS, pack

                sources = done.column("part").to_numpy()  # in (partition, offset) order
                edges = [0, *(np.flatnonzero(sources[1:] != sources[:-1]) + 1), len(sources)]
                blobs, places = [], []
                for start, end in zip(edges, edges[1:], strict=False):
                    for first in range(start, end, PACKED_RECORDS):
                        blobs.append(pack(done.slice(first, min(PACKED_RECORDS, end - first))))
                        places.append(int(sources[start]))
                nothing = [None] * len(blobs)
                yield pd.DataFrame(
                    {"topic": nothing, "key": nothing, "value": nothing,
                     "timestamp": pd.array(nothing, dtype="Int64"),
                     "part": pd.array(places, dtype="int32"),
                     "off": pd.array(nothing, dtype="Int64"),
                     "seq": pd.array(nothing, dtype="Int64"), "packed": blobs}
                )  # fmt: skip
                return
            yield pd.DataFrame(
                {name: done.column(name).to_numpy(zero_copy_only=False)
                 for name in done.schema.names}
            )  # fmt: skip

        def handleExpiredTimer(
            self, key: Any, timerValues: Any, expiredTimerInfo: Any
        ) -> Iterator[pd.DataFrame]:
            parts = _parts(spec)
            group = pickle.loads(key[0])
            stored = self._load()
            stored["timer"] = None
            stream_time = max(stored["stream_time"], _watermark(timerValues))
            stored["stream_time"] = stream_time
            closed = parts.operators.close_windows(stored["windows"], group, stream_time)
            out = _closed_first(parts, closed, stored.get("part"))
            self._timer(parts, stored)
            self._save(parts, stored)
            yield from _plain(_frames(out))

        def close(self) -> None:
            return None

    return AggregateProcessor()


def _timed_places(plan: QueryPlan) -> bool:
    """Whether the rows a query's joins give an aggregation are placed by their time:
    when records of more than one topic make them (a table-table, stream-stream or
    foreign-key join in the chain), whose offsets do not compare; else (only the first
    stream's records) by their offsets."""
    return any(j.shape != "stream-table" or j.foreign_key for j in plan.joins)


def _joined(
    rows: list[tuple[Any, ...]], at: int, tie: int, part: int, off: int
) -> list[tuple[Any, ...]]:
    """A join's output rows with what orders them (``JOINED_SCHEMA``): the time, tie
    order, source partition and offset of the record its step took, and a sequence."""
    return [(*row, at, tie, part, off, n) for n, row in enumerate(rows)]


def _logged(spec: QuerySpec, frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Processing log entries passed on (a keyed frame's payloads) as a join's output
    rows, at their records' places (a failure's: its place among the task's records and
    its tie order, after its record's entries)."""
    rows = []
    for payload, ts, at, tie, part, off in zip(
        frame["payload"], _row_times(frame).tolist(), frame["at"].tolist(),
        frame["seq"].tolist(), frame["part"].tolist(), frame["off"].tolist(), strict=True,
    ):  # fmt: skip
        row = _log_row(spec, payload)
        if row[0] == FAILED_TOPIC:  # after its entries (at its time, or before it)
            rows.append((*row, at, tie, part, off, 1))
        else:
            rows.append((*row, ts, 0, part, off, 0))
    return rows


def _closed_first(
    parts: _TaskParts, closed: list[Any], partition: int | None
) -> list[tuple[Any, ...]]:
    """The rows of windows closed by the stream time of an earlier micro-batch, placed
    before the records of the group's source ``partition`` (its last; offset -1, the
    window's start as the sequence), so that the task writing that partition's records
    writes them first (no partition known: source partition -1), in the order of their
    windows' starts (ksqlDB's EMIT FINAL fetches the closed windows in that order)."""
    out: list[tuple[Any, ...]] = []
    for change in closed:
        written: list[tuple[Any, ...]] = []
        _write(parts, [change], written)
        start = change.window[0] if change.window is not None else change.timestamp
        if partition is None:
            out += [(*row, -1, start, len(out) + n) for n, row in enumerate(written)]
        else:
            out += [(*row, partition, -1, start) for row in written]
    return out


def _row_times(frame: pd.DataFrame) -> Any:
    """The grouped rows' ROWTIME (their ``ts``, in ms; numpy's int64), in the frame's
    order (``values`` of a zoned column: the UTC instants)."""
    return frame["ts"].values.astype("datetime64[ms]").astype("int64")


def _watermark(timer_values: Any) -> int:
    try:
        return int(timer_values.getCurrentWatermarkInMs())
    except Exception:  # processing-time queries have none
        return -1


def _frames(rows: list[tuple[Any, ...]]) -> Iterator[pd.DataFrame]:
    """The output rows as one frame; none when there are none (an empty frame's columns
    have no types Arrow could convert)."""
    if rows:
        yield _frame(rows)


def _frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """Output rows as a frame of ``OUTPUT_SCHEMA`` (or ``PLACED_SCHEMA``: 7-tuples;
    ``JOINED_SCHEMA``: 9-tuples)."""
    import pandas as pd

    columns = {
        "topic": [r[0] for r in rows],
        "key": [r[1] for r in rows],
        "value": [r[2] for r in rows],
        "timestamp": pd.array([r[3] for r in rows], dtype="Int64"),
    }
    if rows and len(rows[0]) == 9:  # JOINED_SCHEMA
        for index, (name, dtype) in enumerate(
            [("at", "int64"), ("tie", "int32"), ("part", "int32"), ("off", "int64"),
             ("seq", "int64")], start=4,
        ):  # fmt: skip
            columns[name] = pd.array([r[index] for r in rows], dtype=dtype)
    elif rows and len(rows[0]) > 4:
        columns["part"] = pd.array([r[4] for r in rows], dtype="int32")
        columns["off"] = pd.array([r[5] for r in rows], dtype="int64")
        columns["seq"] = pd.array([r[6] for r in rows], dtype="int64")
    return pd.DataFrame(columns)


# ---- the driver ---------------------------------------------------------------------------

# a record's processing failure in the text of the Spark exception that ended the query:
# the sink's (after the records before it) or one raised in a step
_FAILURE_RE = re.compile(r"\b(?:FailedRowError|ProcessingFailure): ([^\n]+)")


def failure_reason(text: str) -> str:
    """Why Spark ended a query, in one line: a record's processing failure as the query
    gave it, else the first line of Spark's exception."""
    found = _FAILURE_RE.search(text)
    if found is not None:
        return found.group(1).strip()
    lines = text.splitlines()
    return lines[0] if lines else text


def _progress_listener(stats: RuntimeStats) -> Any:
    """A listener giving ``stats`` each finished micro-batch's progress (Spark calls it
    on its listener thread, the query's name its ksql query id)."""
    import json

    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            if progress.name:
                stats.progress(progress.name, json.loads(progress.json))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return ProgressListener()


def _observed(output: DataFrame, spec: QuerySpec) -> DataFrame:
    """``output`` reporting in each micro-batch's progress (``OBSERVED``) the rows it
    wrote and those of them that are processing-log entries (the rest are the sink's)."""
    from pyspark.sql import functions as F

    logged = F.when(F.col("topic") == F.lit(spec.log_topic), 1).otherwise(0)
    return output.observe(
        OBSERVED, F.count(F.lit(1)).alias("written"), F.sum(logged).alias("logged")
    )


class SparkQueries:
    """The server's SparkSession (started with the first query), its streaming
    queries by ksql query id, and their runtime statistics (``stats``, fed by Spark's
    progress reports)."""

    def __init__(
        self,
        master: str,
        settings: dict[str, str],
        state_dir: Path,
        stats: RuntimeStats | None = None,
    ) -> None:
        self.master = master
        self.settings = {
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
            "spark.sql.streaming.stopTimeout": "30s",
            **settings,
        }
        self.state_dir = state_dir
        self.session: SparkSession | None = None
        self.queries: dict[str, StreamingQuery] = {}
        self.stats = stats if stats is not None else RuntimeStats()
        self._lock = threading.RLock()

    def _session(self) -> SparkSession:
        with self._lock:
            if self.session is None:
                import strom.spark

                log.info("starting the ksql server's SparkSession on %s", self.master)
                self.session = strom.spark.local_session(
                    "strom-ksql", master=self.master, **self.settings
                )
                self.session.sparkContext.setLogLevel("ERROR")
                self.session.streams.addListener(_progress_listener(self.stats))
            spark = self.session
        # The ``strom`` data source is found through the JVM thread's active session.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[union-attr]
        return spark

    def warm(self) -> None:
        """Starts the SparkSession ahead of any query of this server's."""
        self._session()

    def checkpoint(self, query_id: str) -> Path:
        return self.state_dir / query_id

    def start(self, spec: QuerySpec) -> None:
        """Starts the query (resuming from its checkpoint, if any)."""
        spark = self._session()
        plan = spec.plan
        source = plan.source
        reader = (
            spark.readStream.format("strom")
            .option("kafka.bootstrap.servers", spec.client["bootstrap.servers"])
            .option("subscribe", ",".join(dict.fromkeys(s.topic for s in plan.sources)))
            .option("startingOffsets", spec.offset_reset)
            .option("failOnDataLoss", "false")
        )
        for key, value in spec.client.items():
            if key != "bootstrap.servers":
                reader = reader.option(f"kafka.{key}", str(value))
        if spec.exactly_once:  # as Kafka Streams reads under exactly_once_v2
            reader = reader.option("kafka.isolation.level", "read_committed")
        if any(c.namespace == "HEADER" for s in plan.sources for c in s.columns):
            reader = reader.option("includeHeaders", "true")
        frame = reader.load()
        if flowing(plan):
            output = _flow_output(frame, spec)
        elif plan.join is not None:
            keyed = frame.mapInArrow(
                lambda batches: run_join_keying(spec, batches), JOIN_KEYED_SCHEMA
            )
            windowed = plan.join.shape == "stream-stream"
            if windowed:  # the watermark gives the stream time and its side
                marked = keyed.withWatermark("wm", "0 milliseconds")
                keyed = marked.drop("wm")
            else:
                keyed = keyed.drop("wm")
            joined = keyed.groupBy("grp").transformWithStateInPandas(
                statefulProcessor=_join_processor(spec),
                outputStructType=JOINED_SCHEMA,
                outputMode="Append",
                timeMode="EventTime" if windowed else "None",
            )
            output = _in_join_order(joined)
        elif plan.aggregation is None:
            output = frame.mapInArrow(lambda batches: run_stateless(spec, batches), OUTPUT_SCHEMA)
        else:
            grouped = frame.mapInArrow(lambda batches: run_grouping(spec, batches), GROUPED_SCHEMA)
            output = _aggregated(grouped, spec, regroup=source.kind == "TABLE")
        writer = (
            _observed(output, spec)
            .writeStream.format("strom")
            .queryName(spec.query_id)
            .option("kafka.bootstrap.servers", spec.client["bootstrap.servers"])
            .option("checkpointLocation", str(self.checkpoint(spec.query_id)))
            .option("failureTopic", FAILED_TOPIC)
            .trigger(processingTime=f"{spec.trigger_ms} milliseconds")
        )
        for key, value in spec.client.items():
            if key != "bootstrap.servers":
                writer = writer.option(f"kafka.{key}", str(value))
        if spec.exactly_once:
            writer = writer.option("exactlyOnce", "true").option(
                "transactionalIdPrefix", f"ksql-{spec.query_id}"
            )
        self.stats.started(spec.query_id, spec.sink_topic)
        query = writer.start()
        with self._lock:
            self.queries[spec.query_id] = query

    def state(self, query_id: str) -> tuple[str, str | None]:
        """RUNNING, ERROR (with the reason) or NOT_RUNNING."""
        query = self.queries.get(query_id)
        if query is None:
            return "NOT_RUNNING", None
        if query.isActive:
            return "RUNNING", None
        error = query.exception()
        return ("ERROR", failure_reason(str(error))) if error is not None else ("NOT_RUNNING", None)

    def stop(self, query_id: str, delete_state: bool = False) -> None:
        with self._lock:
            query = self.queries.pop(query_id, None)
        self.stats.stopped(query_id)
        if query is not None:
            try:
                query.stop()
            except Exception as exc:  # a query that failed already
                log.warning("stopping %s: %s", query_id, exc)
        if delete_state:
            shutil.rmtree(self.checkpoint(query_id), ignore_errors=True)

    def close(self) -> None:
        for query_id in list(self.queries):
            self.stop(query_id)
        with self._lock:
            if self.session is not None:
                self.session.stop()
                self.session = None


def _aggregated(grouped: DataFrame, spec: QuerySpec, regroup: bool) -> DataFrame:
    """The aggregation's steps over the grouped rows: over a table's changes the
    regrouping first (the undo of a key's old row), then the groups' accumulators."""
    plan = spec.plan
    assert plan.aggregation is not None
    if regroup:
        grouped = grouped.groupBy("grp").transformWithStateInPandas(
            statefulProcessor=_regroup_processor(spec),
            outputStructType=GROUPED_SCHEMA,
            outputMode="Append",
            timeMode="None",
        )
    windowed = plan.aggregation.window is not None
    if windowed:  # the watermark is the stream time; the operators drop late rows
        grouped = _watermarked_keeping_late_rows(grouped, 0)
    from strom.ksql.arrow_aggregate import compile_aggregation
    from strom.ksql.packed_output import unpack_in_order as unpack

    packed = compile_aggregation(plan) is not None  # the batch path's records packed
    aggregated = grouped.groupBy("grp").transformWithStateInPandas(
        statefulProcessor=_aggregate_processor(spec, packed),
        outputStructType=PACKED_OUTPUT_SCHEMA if packed else PLACED_SCHEMA,
        outputMode="Append",
        timeMode="EventTime" if windowed else "None",
    )
    # in the order of the source records that made them, per source partition (ksqlDB
    # writes every update so with ``cache.max.bytes.buffering`` 0): the groups' records
    # gathered by source partition (a packed row holds one partition's), there unpacked
    # and sorted by offset (Spark sorts no stream)
    return _by_source_partition(aggregated).mapInArrow(unpack, OUTPUT_SCHEMA)


def _by_source_partition(placed: DataFrame) -> DataFrame:
    """The rows gathered by their source partition (``part``), partition p in shuffle
    partition p modulo their number: hashed as they are, Spark puts partitions 0 and 1
    in one of two (and so one task would write both)."""
    from pyspark.sql import functions as F

    buckets = int(placed.sparkSession.conf.get("spark.sql.shuffle.partitions") or 1)
    values = F.array(*[F.lit(_bucket_value(p, buckets)) for p in range(-1, SPREAD_PARTITIONS)])
    bucket = F.coalesce(F.try_element_at(values, F.col("part") + 2), F.col("part"))
    return placed.repartition(buckets, bucket)


SPREAD_PARTITIONS = 256  # source partitions spread over the shuffle's (beyond: hashed)


def _bucket_value(partition: int, buckets: int) -> int:
    """The least int that Spark's hash partitioning (Murmur3 of the int, seed 42, taken
    modulo ``buckets``) puts in shuffle partition ``partition`` modulo ``buckets``."""
    wanted = partition % buckets
    value = 0
    while _spark_int_hash(value) % buckets != wanted:
        value += 1
    return value


def _spark_int_hash(value: int) -> int:
    """Spark's ``hash`` of an INT (Murmur3 x86 32-bit of its 4 bytes, seed 42), signed."""
    mask = 0xFFFFFFFF

    def rotated(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    k1 = rotated((value & mask) * 0xCC9E2D51 & mask, 15) * 0x1B873593 & mask
    h1 = (rotated(42 ^ k1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & mask
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def _flow_output(frame: DataFrame, spec: QuerySpec) -> DataFrame:
    """A flow of join stages (``strom.ksql.join_flow``) on Spark: the records keyed for
    their first stage, then one ``transformWithStateInPandas`` per join stage (each
    passing on the rows of the stages after it), then the aggregation, if any; a
    foreign-key join's ``order`` stage is a ``mapInArrow`` over its results gathered
    by their key (``run_in_order``)."""
    from strom.ksql.join_flow import JOIN, REGROUP, stages

    plan = spec.plan
    flow_stages = stages(plan)
    ordered = flow_stages[-1].kind == ORDER
    joins = [i for i, s in enumerate(flow_stages) if s.kind not in (REGROUP, "aggregate", ORDER)]
    current = frame.mapInArrow(lambda batches: run_flow_keying(spec, batches), CHAINED_SCHEMA)
    windowed = [
        s.step
        for s in flow_stages
        if s.kind == JOIN and plan.joins[s.step].shape == "stream-stream"
    ]
    if windowed:  # the watermark trails the stream time by the longest join reach
        reach = max(_join_reach(plan, step) for step in windowed)
        current = _watermarked_keeping_late_rows(current, reach)
    for index in joins:
        last = index == joins[-1] and not ordered
        output = "chain" if not last else ("records" if plan.aggregation is None else "grouped")
        schema = {"chain": CHAINED_SCHEMA, "grouped": GROUPED_SCHEMA}.get(output, JOINED_SCHEMA)
        stage = flow_stages[index]
        event_time = stage.kind == JOIN and stage.step in windowed
        current = current.groupBy("grp").transformWithStateInPandas(
            statefulProcessor=_flow_processor(spec, index, output),
            outputStructType=schema,
            outputMode="Append",
            timeMode="EventTime" if event_time else "None",
        )
    if ordered:  # a left row's results in its partition's task, sorted there
        gathered = _by_source_partition(current)
        return gathered.mapInArrow(lambda batches: run_in_order(spec, batches), OUTPUT_SCHEMA)
    if plan.aggregation is None:
        return _in_join_order(current)
    return _aggregated(current, spec, regroup=any(s.kind == REGROUP for s in flow_stages))


def _in_join_order(joined: DataFrame) -> DataFrame:
    """A join's records (``JOINED_SCHEMA``) gathered by source partition, as ksqlDB's
    task of a partition writes them, and sorted there by the records that made them
    (``packed_output.in_join_order``): each key's in the order its step made them, the
    keys' interleaved as their records are, not key by key."""
    from strom.ksql.packed_output import in_join_order

    return _by_source_partition(joined).mapInArrow(in_join_order, OUTPUT_SCHEMA)


def _watermarked_keeping_late_rows(frame: DataFrame, delay_ms: int) -> DataFrame:
    """The query's watermark (the rows' largest time less ``delay_ms``) taken from a
    copy of their time column that is dropped at once: the event-time steps after it
    get their timers by it, but no row is dropped as late (Spark drops a row at or
    before the watermark only in a step whose input has the watermarked column), so a
    row for a later join of a chain reaches it, each stream-stream join judges a late
    record by ksqlDB's rules (``Operators.join_rows``), and so does a windowed
    aggregation (a record of time 0 included: Spark would drop it in the first
    micro-batch, whose watermark is 0)."""
    from pyspark.sql import functions

    marked = frame.withColumn("wm", functions.col("ts"))
    return marked.withWatermark("wm", f"{delay_ms} milliseconds").drop("wm")


def _join_reach(plan: QueryPlan, step: int = 0) -> int:
    from strom.ksql.operators import DEFAULT_GRACE_MS

    join = plan.joins[step]
    grace = DEFAULT_GRACE_MS if join.grace_ms is None else join.grace_ms
    return join.before_ms + join.after_ms + grace
