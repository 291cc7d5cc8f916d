"""Transient queries run in the server: push queries (``SELECT ... EMIT CHANGES [LIMIT
n]``) on a consumer thread with the operators of ``strom.ksql.operators`` (latency
matters: Spark's micro-batches are not used), and pull queries (a SELECT without EMIT
on a table or stream), answered from the rows the server materializes by reading the
table's topic.

Push: the source topic's partitions are read from their start (``auto.offset.reset``
``earliest``) or their end (``latest``, ksqlDB's default: the end offsets taken before
the server writes the query's header), without a consumer group;
each record is read into a row (one that does not read goes to the processing log and
is skipped), run through the operators (an aggregation's groups kept in a dict, a
record's stream time its source partition's, a group's windows closed by the stream
time of its last record's partition; a join's state per key, a stream-table join's
table read to its end first), and each output row handed to ``emit`` in the
projection's order; a table's tombstone is a ``TombstoneRow`` (a stream's null value
no row). The query ends at LIMIT, when the
client goes (``stopped``), or at TERMINATE / ``/close-query``.

Pull: a ``Materialized`` source keeps a consumer on its topic and its rows (a table's
by key, tombstones removing them; a stream's in order); each pull query first reads
up to the end of the topic (read_committed), then applies WHERE and the projection
to the rows.

Blocking (confluent-kafka): run on worker threads. Does not own HTTP or the registry.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)

from strom.ksql import expressions as ex
from strom.ksql import processing_log
from strom.ksql.join_flow import JoinFlow, flowing
from strom.ksql.metastore import DataSource
from strom.ksql.operators import Change, Operators, TableRegrouping
from strom.ksql.planner import QueryPlan
from strom.ksql.readers import RecordError, RecordReader, Row, SourceRecord

log = logging.getLogger(__name__)

POLL_S = 0.2
CATCH_UP_S = 30.0


class TombstoneRow(list[Any]):
    """A table's delete as a push query's row (a list of the projection's values): the
    source's key columns (and a windowed table's WINDOWSTART and WINDOWEND) that the
    projection has by name, every other column null, as ksqlDB's ``TombstoneFactory``
    makes it. ``/query`` writes it with ``"tombstone": true``; ``/query-stream`` and the
    websocket drop it, as ksqlDB's writers do. It counts towards LIMIT."""


class _Deleted(Change):
    """A table source's tombstone passed through a push query (its ``key``: the
    projection's values)."""


def _record(message: Any) -> SourceRecord:
    return SourceRecord(
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        timestamp=message.timestamp()[1],
        key=message.key(),
        value=message.value(),
        headers=message.headers(),
    )


def _consume(consumer: Consumer) -> list[Any]:
    """The records that have come: waits up to POLL_S for the first, then takes those
    already fetched (a consume() of many waits its whole timeout for them to come)."""
    first = consumer.poll(POLL_S)
    return [] if first is None else [first, *consumer.consume(499, 0)]


class PushQuery:
    """One push query's consumer loop."""

    def __init__(
        self,
        query_id: str,
        plan: QueryPlan,
        client: dict[str, Any],
        registry: Any,
        offset_reset: str,
        log_producer: Producer | None,
        log_topic: str,
    ) -> None:
        self.query_id = query_id
        self.plan = plan
        self.client = client
        self.offset_reset = offset_reset
        self.reader = RecordReader(plan.source, registry)
        self.operators = Operators(plan, self._expression_error)
        self.log_producer = log_producer
        self.log_topic = log_topic
        self.names = [p.name for p in plan.projection]
        self.stopped = threading.Event()
        self.scalable = query_id.startswith("SCALABLE_PUSH_QUERY_")
        self.groups: dict[tuple[Any, ...], dict[Any, Any]] = {}
        self.regrouping = (
            TableRegrouping(self.operators)
            if plan.aggregation is not None and plan.source.kind == "TABLE"
            else None
        )
        self.previous: dict[tuple[Any, ...], Any] = {}
        self.stream_times: dict[int, int] = {}  # by source partition
        self.group_partitions: dict[tuple[Any, ...], int] = {}  # a group's last record's
        join = plan.join
        self.right_reader = RecordReader(join.right, registry) if join is not None else None
        self.join_states: dict[Any, dict[str, Any]] = {}
        self.join_observed: dict[str, int] = {}  # by join side
        self.flow = JoinFlow(self.operators) if flowing(plan) else None
        self.readers = [RecordReader(s, registry) for s in plan.sources]
        self.flow_states: dict[tuple[int, Any], dict[Any, Any]] = {}
        # where a ``latest`` query starts: each partition's end when it was asked
        self.positions: dict[tuple[str, int], int] | None = None

    def take_position(self, partitions: list[int]) -> None:
        """Fixes where a ``latest`` query starts reading: the end offsets, now, of every
        partition it reads from its end (the source's ``partitions``, a stream-stream
        join's other side, a flow's other streams), so that records written once the
        client has the header (which is written after this) are read, as ksqlDB
        registers a push query before it answers. ``earliest`` starts at the
        beginning; a table joined is read from its start anyway."""
        if self.positions is not None:
            return
        if self.offset_reset == "earliest":
            self.positions = {}
            return
        topics: dict[str, list[int] | None] = {self.plan.source.topic: partitions}
        join = self.plan.join
        if self.flow is not None:
            tables = {s.topic for s in self.plan.sources if s.kind == "TABLE"}
            for source in self.plan.sources:
                if source.topic not in tables:
                    topics.setdefault(source.topic, None)
        elif join is not None and join.shape != "stream-table":
            topics.setdefault(join.right.topic, None)
        asking = Consumer(
            {**self.client, "group.id": f"_strom-ksql-{self.query_id}-{uuid.uuid4()}"}
        )
        positions: dict[tuple[str, int], int] = {}
        try:
            for topic, chosen in topics.items():
                if chosen is None:
                    metadata = asking.list_topics(topic, timeout=30).topics[topic]
                    chosen = sorted(metadata.partitions)
                for partition in chosen:
                    end = asking.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=30
                    )[1]
                    positions[(topic, partition)] = end
        finally:
            asking.close()
        self.positions = positions

    def _start(self, topic: str, partition: int) -> int:
        """Where a partition read from its start or end (``auto.offset.reset``) starts."""
        if self.offset_reset == "earliest":
            return OFFSET_BEGINNING
        assert self.positions is not None
        return self.positions.get((topic, partition), OFFSET_END)

    def _expression_error(self, message: str) -> None:
        self._log(processing_log.processing_error(self.query_id, message))

    def _unread(self, exc: RecordError, record: SourceRecord) -> None:
        """A record that does not read: logged to the processing log (unless quiet)."""
        if not exc.quiet:
            self._log(
                processing_log.deserialization_error(
                    self.query_id, exc.target, exc.message, record.topic
                )
            )

    def _log(self, entry: bytes) -> None:
        if self.log_producer is not None:
            try:
                self.log_producer.produce(self.log_topic, value=entry)
                self.log_producer.poll(0)
            except (BufferError, Exception) as exc:  # the log is best effort
                log.warning("processing log entry of %s not written: %s", self.query_id, exc)

    def run(self, emit: Callable[[list[Any]], None], partitions: list[int]) -> bool:
        """Runs until LIMIT (True) or until stopped (False). A join's table is read from
        its start, and up to its end before the first stream record is joined. LIMIT 0
        is reached at once."""
        if self.plan.limit is not None and self.plan.limit <= 0:
            return True
        self.take_position(partitions)
        if self.flow is not None:
            return self._run_flow(emit, partitions)
        consumer = Consumer(
            {
                **self.client,
                "group.id": f"_strom-ksql-{self.query_id}-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        source = self.plan.source.topic
        assigned = [TopicPartition(source, p, self._start(source, p)) for p in partitions]
        loading: dict[int, int] = {}  # the table's partitions still to read: their ends
        held: list[SourceRecord] = []  # stream records waiting for the table
        join = self.plan.join
        if join is not None and join.shape != "stream-table":  # both sides as one
            table = consumer.list_topics(join.right.topic, timeout=30).topics[join.right.topic]
            assigned += [
                TopicPartition(
                    join.right.topic, partition, self._start(join.right.topic, partition)
                )
                for partition in sorted(table.partitions)
            ]
        elif join is not None:  # the table read to its end before the stream joins it
            table = consumer.list_topics(join.right.topic, timeout=30).topics[join.right.topic]
            for partition in sorted(table.partitions):
                assigned.append(TopicPartition(join.right.topic, partition, OFFSET_BEGINNING))
                end = consumer.get_watermark_offsets(
                    TopicPartition(join.right.topic, partition), timeout=30
                )[1]
                if end > 0:
                    loading[partition] = end
        consumer.assign(assigned)
        emitted = 0
        limit = self.plan.limit
        try:
            while not self.stopped.is_set():
                messages = _consume(consumer)
                records = []
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            log.warning("push query %s: %s", self.query_id, error.str())
                        continue
                    record = _record(message)
                    if join is not None and join.shape != "stream-table":
                        records.append(record)
                    elif join is not None and record.topic == join.right.topic:
                        self.update_table(record)
                        if record.offset + 1 >= loading.get(record.partition, 0):
                            loading.pop(record.partition, None)
                    elif loading:
                        held.append(record)
                    else:
                        records.append(record)
                if not loading and held:
                    records, held = held + records, []
                for record in records:
                    for change in self.process(record):
                        if isinstance(change, _Deleted):
                            emit(TombstoneRow(change.key[n] for n in self.names))
                        elif change.value is None:
                            continue
                        else:
                            emit([change.value.get(n) for n in self.names])
                        emitted += 1
                        if limit is not None and emitted >= limit:
                            return True
        finally:
            consumer.close()
            if self.log_producer is not None:
                self.log_producer.flush(5)
        return False

    def _run_flow(self, emit: Callable[[list[Any]], None], partitions: list[int]) -> bool:
        """A chain of joins, a foreign-key join or GROUP BY over a join
        (``strom.ksql.join_flow``): every source's topic read, a table's from its start
        and to its end before the first stream record joins; each record through the
        flow's stages as soon as it comes, as a single source's."""
        consumer = Consumer(
            {
                **self.client,
                "group.id": f"_strom-ksql-{self.query_id}-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        tables = {s.topic for s in self.plan.sources if s.kind == "TABLE"}
        assigned: list[TopicPartition] = []
        loading: dict[tuple[str, int], int] = {}  # the tables' partitions still to read
        for topic in dict.fromkeys(s.topic for s in self.plan.sources):
            if topic == self.plan.source.topic and topic not in tables:
                assigned += [TopicPartition(topic, p, self._start(topic, p)) for p in partitions]
                continue
            metadata = consumer.list_topics(topic, timeout=30).topics[topic]
            for partition in sorted(metadata.partitions):
                if topic not in tables:
                    assigned.append(TopicPartition(topic, partition, self._start(topic, partition)))
                    continue
                assigned.append(TopicPartition(topic, partition, OFFSET_BEGINNING))
                end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[
                    1
                ]
                if end > 0:
                    loading[(topic, partition)] = end
        consumer.assign(assigned)
        held: list[SourceRecord] = []  # stream records waiting for the tables
        emitted = 0
        limit = self.plan.limit
        try:
            while not self.stopped.is_set():
                records: list[SourceRecord] = []
                for message in _consume(consumer):
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            log.warning("push query %s: %s", self.query_id, error.str())
                        continue
                    record = _record(message)
                    if record.topic in tables:
                        records.append(record)
                        position = (record.topic, record.partition)
                        if record.offset + 1 >= loading.get(position, 0):
                            loading.pop(position, None)
                    elif loading:
                        held.append(record)
                    else:
                        records.append(record)
                if not loading and held:
                    records, held = records + held, []
                for record in records:
                    for change in self._flow_record(record):
                        if change.value is None:
                            continue
                        emit([change.value.get(n) for n in self.names])
                        emitted += 1
                        if limit is not None and emitted >= limit:
                            return True
        finally:
            consumer.close()
            if self.log_producer is not None:
                self.log_producer.flush(5)
        return False

    def _flow_record(self, record: SourceRecord) -> list[Change]:
        """A record as a row of each source over its topic, through the flow."""
        assert self.flow is not None
        changes: list[Change] = []
        for index, source in enumerate(self.plan.sources):
            if source.topic != record.topic:
                continue
            try:
                row = self.readers[index].read(record)
            except RecordError as exc:
                self._unread(exc, record)
                continue
            stream_time = max(self.stream_times.get(-1, -1), row.timestamp)
            self.stream_times[-1] = stream_time
            changes += self.flow.process(index, row, self.flow_states, stream_time)
        return changes

    def update_table(self, record: SourceRecord) -> None:
        """A stream-table join's table record: its row kept by key."""
        self._join(record, "right")

    def _join(self, record: SourceRecord, side: str) -> list[Change]:
        reader = self.right_reader if side == "right" else self.reader
        assert reader is not None
        try:
            row = reader.read(record)
        except RecordError as exc:
            self._unread(exc, record)
            return []
        key = self.operators.key_of(side, row)
        if key is None:
            return []
        stream_time = max(self.stream_times.get(-1, -1), row.timestamp)
        self.stream_times[-1] = stream_time
        # each side's time, for a stream-stream join's window stores
        observed = self.join_observed
        observed[side] = max(observed.get(side, -1), row.timestamp)
        state = self.join_states.setdefault(key, {})
        changes = self.operators.join_step(state, side, row, stream_time, 0, observed)
        for other, kept in list(self.join_states.items()):
            if other != key:  # the stream time moved on for every key's window
                changes += self.operators.close_joins(kept, stream_time, 0, None, observed)
            if not any(kept.get(s) for s in ("left", "right")) and not kept.get("emitted"):
                del self.join_states[other]
        return changes

    def _deleted(self, row: Row) -> Change:
        """A table's delete, as ksqlDB's transient query passes it on (WHERE does not
        stop it): the projection's columns named as the source's key columns (and a
        windowed table's bounds) have the key's values, the others are null."""
        keys = {c.name for c in self.plan.source.key_columns}
        if self.plan.source.window_type is not None:
            keys |= {"WINDOWSTART", "WINDOWEND"}
        values = {n: row.columns.get(n) if n in keys else None for n in self.names}
        return _Deleted(values, None, row.timestamp)

    def process(self, record: SourceRecord) -> list[Change]:
        join = self.plan.join
        if join is not None:
            return self._join(record, "right" if record.topic == join.right.topic else "left")
        try:
            row = self.reader.read(record)
        except RecordError as exc:
            self._unread(exc, record)
            return []
        operators = self.operators
        if row.keyless and self.scalable and self.plan.source.key_columns:
            return []  # ksqlDB's scalable push query skips a null key (its registry's)
        if operators.plan.aggregation is None:
            if row.tombstone and self.plan.source.kind == "TABLE" and self.plan.join is None:
                return [] if row.keyless else [self._deleted(row)]
            return operators.stateless(row)
        # the record's stream time is its partition's, as a Kafka Streams task's
        partition = record.partition
        before = self.stream_times.get(partition, -1)
        stream_time = max(before, row.timestamp)
        self.stream_times[partition] = stream_time
        if self.regrouping is not None:
            key = self.regrouping.source_key(row)
            steps, kept = self.regrouping.changes(self.previous.get(key), row)
            if kept is None:
                self.previous.pop(key, None)
            else:
                self.previous[key] = kept
        else:
            grouped = operators.group(row)
            steps = [] if grouped is None else [(grouped[0], grouped[1], 1)]
        changes: list[Change] = []
        for group, columns, sign in steps:
            state = self.groups.setdefault(group, {})
            self.group_partitions[group] = partition
            changes += operators.aggregate(state, group, columns, stream_time, sign)
        if operators.window is not None:  # the windows of this partition's groups close
            for group, state in list(self.groups.items()):
                if self.group_partitions.get(group) != partition:
                    continue
                changes += operators.close_windows(state, group, stream_time, before)
                if not state:
                    del self.groups[group]
                    del self.group_partitions[group]
        return changes


class Materialized:
    """A source's rows, kept by reading its topic (a table's by key)."""

    def __init__(self, source: DataSource, client: dict[str, Any], registry: Any) -> None:
        self.source = source
        self.reader = RecordReader(source, registry)
        self.rows: dict[Any, Row] = {}
        # a table's rows by their key columns' values (their record keys, in rows' order)
        self.by_key: dict[tuple[Any, ...], dict[Any, None]] = {}
        self.stream_rows: list[Row] = []
        self.lock = threading.Lock()
        settings = {
            **client,
            "group.id": f"_strom-ksql-pull-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
        self.consumer = Consumer(settings)
        # The topic's ends asked on a connection of their own: on the reading consumer's
        # the question waits behind its idle fetch (up to fetch.wait.max.ms, 500 ms).
        self.ends = Consumer(settings)
        self.partitions: list[int] = []

    def catch_up(self, partitions: list[int]) -> None:
        """Reads the topic up to its end now."""
        topic = self.source.topic
        new = [p for p in partitions if p not in self.partitions]
        if new:
            self.partitions += new
            self.consumer.incremental_assign(
                [TopicPartition(topic, p, OFFSET_BEGINNING) for p in new]
            )
        ends = {
            p: self.ends.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in self.partitions
        }
        positions = {tp.partition: tp.offset for tp in self.consumer.position(
            [TopicPartition(topic, p) for p in self.partitions]
        )}  # fmt: skip
        waiting = {p for p in self.partitions if max(positions.get(p, -1), 0) < ends[p]}
        deadline = time.monotonic() + CATCH_UP_S
        while waiting and time.monotonic() < deadline:
            for message in self.consumer.consume(500, POLL_S):
                error = message.error()
                partition = message.partition() or 0
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        waiting.discard(partition)
                    continue
                self._apply(_record(message))
                if (message.offset() or 0) + 1 >= ends.get(partition, 0):
                    waiting.discard(partition)

    def _apply(self, record: SourceRecord) -> None:
        try:
            row = self.reader.read(record)
        except RecordError:
            return  # the persistent query that writes it logged it; a pull query skips it
        if self.source.kind != "TABLE":
            if not row.tombstone:  # a stream's null value is no row
                self.stream_rows.append(row)
            return
        key = (record.key,)
        if row.tombstone:
            gone = self.rows.pop(key, None)
            if gone is not None:
                found = self.by_key.get(self._key_columns(gone))
                if found is not None:
                    found.pop(key, None)
                    if not found:
                        del self.by_key[self._key_columns(gone)]
        else:
            if key not in self.rows:  # an update keeps its place, in both
                self.by_key.setdefault(self._key_columns(row), {})[key] = None
            self.rows[key] = row

    def _key_columns(self, row: Row) -> tuple[Any, ...]:
        return tuple(_hashable(row.columns.get(c.name)) for c in self.source.key_columns)

    def current(self, where: ex.Expression | None = None) -> list[Row]:
        """The rows that may satisfy ``where``: a table's rows of one key when ``where``
        requires that key (``KEY = literal``, alone or in an AND), else all of them; a
        table's in the order of their record keys' bytes (a windowed key's window
        after them), as ksqlDB's state store gives them (a LIMIT takes the first), a
        stream's in the order they came."""
        if self.source.kind != "TABLE":
            return list(self.stream_rows)
        wanted = _key_wanted(where, self.source)
        keys = self.rows if wanted is None else self.by_key.get(wanted, {})
        return [self.rows[k] for k in sorted(keys, key=_key_bytes)]

    def close(self) -> None:
        self.consumer.close()
        self.ends.close()


def _key_bytes(key: tuple[bytes | None]) -> bytes:
    """A materialized row's record key, for ordering (a null key first)."""
    return key[0] or b""


def _hashable(value: Any) -> Any:
    """A key column's value as an index's key: an ARRAY's a tuple, a MAP's or STRUCT's a
    tuple of its (name, value) pairs, at every depth."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value


def _key_wanted(where: ex.Expression | None, source: DataSource) -> tuple[Any] | None:
    """The key a pull query's WHERE requires (``KEY = literal``, of the key column's
    type, alone or in an AND), or None."""
    keys = source.key_columns
    if where is None or len(keys) != 1:
        return None
    if isinstance(where, ex.Logical):
        if where.operator != "AND":
            return None
        return _key_wanted(where.left, source) or _key_wanted(where.right, source)
    if not isinstance(where, ex.Comparison) or where.operator != "=":
        return None
    for column, literal in ((where.left, where.right), (where.right, where.left)):
        if (
            isinstance(column, ex.ColumnReference)
            and column.name == keys[0].name
            and isinstance(literal, ex.Literal)
        ):
            kind, value = str(keys[0].type), literal.value
            if kind == "STRING" and isinstance(value, str):
                return (value,)
            if kind in ("INTEGER", "BIGINT") and type(value) is int:
                return (value,)
    return None


def pull_rows(plan: QueryPlan, rows: list[Row]) -> list[list[Any]]:
    """WHERE and the projection over a materialized source's rows, up to LIMIT."""
    operators = Operators(plan)
    names = [p.name for p in plan.projection]
    out: list[list[Any]] = []
    for row in rows:
        for change in operators.stateless(row):
            if change.value is not None:
                out.append([change.value.get(n) for n in names])
        if plan.limit is not None and len(out) >= plan.limit:
            return out[: plan.limit]
    return out
