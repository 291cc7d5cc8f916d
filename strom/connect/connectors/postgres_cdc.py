"""PostgreSQL change data capture as Debezium's PostgreSQL connector does it
(``io.debezium.connector.postgresql.PostgresConnector``), in the worker
(``runtime.InWorkerRunner``): one task, one logical replication slot, one ordered stream.

Keys (Debezium's): ``database.hostname``, ``database.port`` (5432), ``database.user``,
``database.password``, ``database.dbname``, ``database.sslmode``, ``topic.prefix``
(required), ``plugin.name`` (``pgoutput`` only), ``slot.name`` (debezium),
``slot.drop.on.stop`` (false),
``publication.name`` (dbz_publication), ``publication.autocreate.mode`` (``all_tables``,
``filtered``: a publication of the captured tables, kept to them; ``disabled``: it must
exist), ``table.include.list`` / ``table.exclude.list`` and ``schema.include.list`` /
``schema.exclude.list`` (comma-separated regular expressions matching the whole
``schema.table`` / schema name, case-insensitively), ``snapshot.mode`` (``initial``,
``never`` / ``no_data``, ``initial_only``, ``always``), ``snapshot.fetch.size``,
``max.batch.size``, ``decimal.handling.mode``, ``interval.handling.mode``,
``money.fraction.digits``, ``binary.handling.mode``,
``time.precision.mode`` (adaptive), ``tombstones.on.delete``, ``heartbeat.interval.ms``
(0: none), ``topic.heartbeat.prefix``, and for incremental snapshots
``signal.data.collection`` (the signal table, ``schema.table``),
``signal.enabled.channels`` (``source`` only) and ``incremental.snapshot.chunk.size``
(1024).

The task: with no completed snapshot in its offsets (``initial``), or at every start
(``always``), it (re)creates the slot exporting its snapshot, reads every captured table
in that snapshot (op ``r``), then streams from the slot's consistent point; otherwise it
streams from the slot, skipping what its offsets say is in Kafka already. A snapshot a
crash interrupted is taken again, as Debezium does: when its offsets say some of its
records are in Kafka, the slot it began with is kept and streamed from the LSN recorded
(so a row already sent gets the changes made since, a delete included), the new snapshot
read at the present; when none are (nothing stored, or under
``transaction.boundary=connector`` the snapshot's one transaction aborted), as at a first
start. With ``transaction.boundary=connector`` the snapshot is one transaction, committed
after its last record, and each streamed poll one more. Each change is
Debezium's envelope on ``<topic.prefix>.<schema>.<table>`` keyed by the primary key; a
delete is followed by a tombstone; an update that changes the key is a delete, a
tombstone and a create. Truncates are skipped with a log line. With a signal table, its
``execute-snapshot`` and ``stop-snapshot`` rows, read from the stream, start and stop
incremental snapshots: tables read in chunks between streamed changes
(``postgres_cdc_incremental``); the signal table's own rows are not sent.

Offsets are Debezium's: partition ``{"server": topic.prefix}``; a snapshot record's offset
``{"snapshot": "INITIAL", "last_snapshot_record", "snapshot_completed", "lsn", "txId",
"ts_usec"}``; a change's ``{"lsn", "lsn_proc", "lsn_commit", "lsn_events_processed",
"txId", "ts_usec", "messageType"}``, where ``lsn_commit`` is the LSN of the change's own
transaction's commit and ``lsn_events_processed`` how many changes at ``lsn`` are done. On
restart, transactions committed before ``lsn_commit`` are skipped, and in that one the
changes up to the stored one, so a restart neither loses nor repeats a change (each
poll's records with their offsets in one transaction under exactly-once source support;
at least once without). The slot is told a position is flushed only once the records
before it are stored (``commit()``, after the runtime has stored their offsets), so it
keeps whatever is not yet in Kafka.

Does not own the decoding (``postgres_cdc_decoder``), the connections
(``postgres_cdc_stream``), the snapshot's reads (``postgres_cdc_snapshot``), the
incremental snapshots' state and chunk reads (``postgres_cdc_incremental``) or the events'
schemas (``postgres_cdc_schema``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from strom.connect import config_def as cd
from strom.connect import data
from strom.connect.api import ConnectException, SourceConnector, SourceRecord, SourceTask, Task
from strom.connect.config_def import ConfigValue
from strom.connect.connectors.postgres_cdc_decoder import (
    NULL,
    UNCHANGED_TOAST,
    Begin,
    Column,
    Commit,
    Delete,
    Insert,
    Keepalive,
    Relation,
    Truncate,
    Update,
    XLogData,
    decode_message,
    epoch_micros,
    lsn_text,
    parse_lsn,
)
from strom.connect.connectors.postgres_cdc_incremental import (
    EXECUTE_SNAPSHOT,
    INCREMENTAL,
    STOP_SNAPSHOT,
    WINDOW_CLOSE,
    WINDOW_OPEN,
    Chunk,
    ChunkReader,
    IncrementalSnapshot,
    Key,
    Signal,
    new_chunk_id,
)
from strom.connect.connectors.postgres_cdc_schema import (
    BASE64_MODE,
    BYTES_MODE,
    DOUBLE,
    HEX_MODE,
    NUMERIC_MODE,
    PRECISE,
    STRING_MODE,
    UNCHANGED,
    ColumnInfo,
    EventSource,
    TableInfo,
    TableSchema,
    Unchanged,
    ValueSettings,
    epoch_micros_now,
)
from strom.connect.connectors.postgres_cdc_snapshot import SnapshotReader, SnapshotRow
from strom.connect.connectors.postgres_cdc_stream import (
    Catalog,
    Database,
    ReplicationConnection,
)
from strom.connect.data import Schema, Struct

log = logging.getLogger(__name__)

INITIAL, NEVER, NO_DATA, INITIAL_ONLY, ALWAYS = (
    "initial",
    "never",
    "no_data",
    "initial_only",
    "always",
)
ALL_TABLES, FILTERED, DISABLED = "all_tables", "filtered", "disabled"
SERVER = "server"
SOURCE_CHANNEL = "source"
SNAPSHOT_TYPE = "INITIAL"
STATUS_INTERVAL_S = 10.0
CONFIRM_INTERVAL_S = 0.2
POLL_WAIT_S = 0.2
TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]+")
OPERATIONS = {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}


def _only_pgoutput(name: str, value: Any) -> None:
    if value is not None and value != "pgoutput":
        raise cd.invalid(
            name,
            value,
            "only pgoutput is served by Strom (the logical decoding plugin built into "
            "PostgreSQL 10 and later)",
        )


def _topic_prefix(name: str, value: Any) -> None:
    if value is not None and not TOPIC_PREFIX.fullmatch(str(value)):
        raise cd.invalid(
            name,
            value,
            "The topic.prefix may contain only alphanumeric characters, '.', '-' and '_'",
        )


def _regex_list(name: str, value: Any) -> None:
    for pattern in value or []:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise cd.invalid(name, pattern, f"not a regular expression: {exc}") from None


def _schema_table(name: str, value: Any) -> None:
    if value is not None and len(str(value).split(".")) != 2:
        raise cd.invalid(name, value, "give the signal table as schema.table")


def _only_source_channel(name: str, value: Any) -> None:
    for channel in value or []:
        if channel != SOURCE_CHANNEL:
            raise cd.invalid(
                name, channel, "only the source channel (the signal table) is served by Strom"
            )


def _key(name: str, kind: str, default: Any, doc: str, **extra: Any) -> cd.ConfigKey:
    importance = cd.HIGH if default is cd.REQUIRED else cd.MEDIUM
    return cd.ConfigKey(name, kind, default, importance, doc, **extra)


CONFIG_DEF = cd.ConfigDef(
    [
        _key("database.hostname", cd.STRING, cd.REQUIRED, "The PostgreSQL server's host name."),
        _key("database.port", cd.INT, 5432, "The PostgreSQL server's port.", check=cd.at_least(1)),
        _key("database.user", cd.STRING, cd.REQUIRED, "The user to connect as."),
        _key("database.password", cd.PASSWORD, "", "The user's password."),
        _key("database.dbname", cd.STRING, cd.REQUIRED, "The database to capture."),
        _key(
            "database.sslmode",
            cd.STRING,
            "prefer",
            "libpq's sslmode for every connection.",
            check=cd.one_of("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
        ),
        _key(
            "topic.prefix",
            cd.STRING,
            cd.REQUIRED,
            "The logical name of the server: the prefix of every topic and the source "
            "partition of the offsets.",
            check=_topic_prefix,
        ),
        _key(
            "plugin.name",
            cd.STRING,
            "pgoutput",
            "The logical decoding plugin: pgoutput.",
            check=_only_pgoutput,
        ),
        _key(
            "slot.name",
            cd.STRING,
            "debezium",
            "The logical replication slot's name.",
            check=cd.non_empty,
        ),
        _key(
            "slot.drop.on.stop",
            cd.BOOLEAN,
            False,
            "Whether the slot is dropped when the task stops (its changes not yet read lost).",
        ),
        _key(
            "publication.name",
            cd.STRING,
            "dbz_publication",
            "The publication streamed.",
            check=cd.non_empty,
        ),
        _key(
            "publication.autocreate.mode",
            cd.STRING,
            ALL_TABLES,
            "all_tables: create the publication for all tables when it is missing; "
            "filtered: create it (or set it) for the captured tables; disabled: it must "
            "exist.",
            check=cd.one_of(ALL_TABLES, FILTERED, DISABLED),
        ),
        _key(
            "table.include.list",
            cd.LIST,
            "",
            "Regular expressions of the schema.table names to capture.",
            check=_regex_list,
        ),
        _key(
            "table.exclude.list",
            cd.LIST,
            "",
            "Regular expressions of the schema.table names not to capture.",
            check=_regex_list,
        ),
        _key(
            "schema.include.list",
            cd.LIST,
            "",
            "Regular expressions of the schemas to capture.",
            check=_regex_list,
        ),
        _key(
            "schema.exclude.list",
            cd.LIST,
            "",
            "Regular expressions of the schemas not to capture.",
            check=_regex_list,
        ),
        _key(
            "snapshot.mode",
            cd.STRING,
            INITIAL,
            "When to snapshot the tables: initial, never, no_data, initial_only, always.",
            check=cd.one_of(INITIAL, NEVER, NO_DATA, INITIAL_ONLY, ALWAYS),
        ),
        _key(
            "snapshot.fetch.size",
            cd.INT,
            10240,
            "Rows a snapshot read fetches at a time.",
            check=cd.at_least(1),
        ),
        _key(
            "max.batch.size", cd.INT, 2048, "The most records a poll returns.", check=cd.at_least(1)
        ),
        _key(
            "decimal.handling.mode",
            cd.STRING,
            PRECISE,
            "numeric as precise (Decimal), double or string.",
            check=cd.one_of(PRECISE, DOUBLE, STRING_MODE),
        ),
        _key(
            "interval.handling.mode",
            cd.STRING,
            NUMERIC_MODE,
            "interval as numeric (io.debezium.time.MicroDuration, microseconds, a month "
            "365.25 / 12 days) or string (ISO 8601).",
            check=cd.one_of(NUMERIC_MODE, STRING_MODE),
        ),
        _key(
            "money.fraction.digits",
            cd.SHORT,
            2,
            "The scale of the Decimal a money value is, with decimal.handling.mode=precise.",
            check=cd.at_least(0),
        ),
        _key(
            "binary.handling.mode",
            cd.STRING,
            BYTES_MODE,
            "bytea as bytes, base64 or hex.",
            check=cd.one_of(BYTES_MODE, BASE64_MODE, HEX_MODE),
        ),
        _key(
            "time.precision.mode",
            cd.STRING,
            "adaptive",
            "Temporal types as adaptive (the column's precision chooses ms or us).",
            check=cd.one_of("adaptive"),
        ),
        _key(
            "tombstones.on.delete", cd.BOOLEAN, True, "Whether a delete is followed by a tombstone."
        ),
        _key(
            "heartbeat.interval.ms",
            cd.INT,
            0,
            "How often, when no change comes, a heartbeat record carries the position (0: never).",
            check=cd.at_least(0),
        ),
        _key(
            "topic.heartbeat.prefix",
            cd.STRING,
            "__debezium-heartbeat",
            "The prefix of the heartbeat topic, <prefix>.<topic.prefix>.",
        ),
        _key(
            "signal.data.collection",
            cd.STRING,
            None,
            "The signal table, schema.table (columns id, type, data): its execute-snapshot and "
            "stop-snapshot rows, read from the stream, start and stop incremental snapshots.",
            check=_schema_table,
        ),
        _key(
            "signal.enabled.channels",
            cd.LIST,
            SOURCE_CHANNEL,
            "Where signals come from: source (the signal table).",
            check=_only_source_channel,
        ),
        _key(
            "incremental.snapshot.chunk.size",
            cd.INT,
            1024,
            "Rows an incremental snapshot reads at a time, between streamed changes.",
            check=cd.at_least(1),
        ),
    ]
)


class TableFilter:
    """Which ``schema.table`` names are captured, as Debezium's include/exclude lists say
    (whole-name matches, case-insensitive)."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        def patterns(key: str) -> list[re.Pattern[str]]:
            return [re.compile(p, re.IGNORECASE) for p in settings.get(key) or [] if p]

        self.tables_in = patterns("table.include.list")
        self.tables_out = patterns("table.exclude.list")
        self.schemas_in = patterns("schema.include.list")
        self.schemas_out = patterns("schema.exclude.list")

    def captures(self, schema: str, table: str) -> bool:
        name = f"{schema}.{table}"
        if self.schemas_in and not any(p.fullmatch(schema) for p in self.schemas_in):
            return False
        if any(p.fullmatch(schema) for p in self.schemas_out):
            return False
        if self.tables_in and not any(p.fullmatch(name) for p in self.tables_in):
            return False
        return not any(p.fullmatch(name) for p in self.tables_out)


class PostgresConnector(SourceConnector):
    CONFIG_DEF = CONFIG_DEF

    def exactly_once_support(self, config: Mapping[str, str]) -> bool | None:
        return True  # each poll's changes commit with their LSNs in one transaction

    def can_define_transaction_boundaries(self, config: Mapping[str, str]) -> bool:
        return True  # the snapshot one transaction, then each poll's changes one

    def validate(self, props: Mapping[str, str]) -> dict[str, ConfigValue]:
        results = super().validate(props)
        for kind in ("table", "schema"):
            include, exclude = f"{kind}.include.list", f"{kind}.exclude.list"
            if results[include].value and results[exclude].value:
                results[exclude].errors.append(
                    f'"{include}" is already specified; "{exclude}" may not be used with it'
                )
        return results

    def start(self, props: dict[str, str]) -> None:
        self.props = dict(props)
        self.settings = CONFIG_DEF.parse(props)

    def task_class(self) -> type[Task]:
        return PostgresConnectorTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props)]  # one slot is one ordered stream: one task

    def stop(self) -> None:
        pass


@dataclass
class ResumePoint:
    """Where the stored offsets say streaming stands: the changes of the transaction
    committing at ``commit_lsn`` up to the ``events``-th at ``lsn`` are in Kafka, and
    everything committed before."""

    commit_lsn: int
    lsn: int
    events: int

    @staticmethod
    def of(offset: Mapping[str, Any] | None) -> ResumePoint | None:
        if not offset or "lsn_commit" not in offset:
            return None
        return ResumePoint(
            int(offset["lsn_commit"]),
            int(offset["lsn"]),
            int(offset.get("lsn_events_processed", 0)),
        )

    def covers(self, commit_lsn: int, lsn: int, events: int) -> bool:
        """Whether the change (the ``events``-th at ``lsn`` of the transaction committing
        at ``commit_lsn``) is in Kafka already."""
        if commit_lsn != self.commit_lsn:
            return commit_lsn < self.commit_lsn
        return lsn < self.lsn or (lsn == self.lsn and events <= self.events)


def snapshot_completed(offset: Mapping[str, Any] | None) -> bool:
    if not offset:
        return False
    if "lsn_commit" in offset:
        return True  # streaming started: the snapshot, if any, was done
    return bool(offset.get("last_snapshot_record") or offset.get("snapshot_completed"))


@dataclass
class _Transaction:
    commit_lsn: int
    commit_us: int  # since 1970
    xid: int


def _texts(columns: tuple[Column, ...] | None) -> list[str | Unchanged | None] | None:
    if columns is None:
        return None
    texts: list[str | Unchanged | None] = []
    for column in columns:
        if column.kind == NULL:
            texts.append(None)
        elif column.kind == UNCHANGED_TOAST:
            texts.append(UNCHANGED)
        else:
            texts.append((column.data or b"").decode())
    return texts


def _key_of(texts: list[str | Unchanged | None], positions: list[int]) -> Key:
    """A row's key as texts (a key is never an unchanged TOASTed value)."""
    return tuple(text if isinstance(text, str) else None for text in (texts[i] for i in positions))


def _now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


HEARTBEAT_KEY_SCHEMA = Schema.struct(
    [("serverName", Schema(data.STRING))], name="io.debezium.connector.common.ServerNameKey"
)
HEARTBEAT_VALUE_SCHEMA = Schema.struct(
    [("ts_ms", Schema(data.INT64))], name="io.debezium.connector.common.Heartbeat"
)


class PostgresConnectorTask(SourceTask):
    """Snapshot, then stream; see the module's docstring."""

    def start(self, props: dict[str, str]) -> None:
        self.settings = CONFIG_DEF.parse(props)
        self.prefix: str = self.settings["topic.prefix"]
        self.partition = {SERVER: self.prefix}
        self.database = Database(
            self.settings["database.hostname"],
            self.settings["database.port"],
            self.settings["database.user"],
            self.settings["database.password"],
            self.settings["database.dbname"],
            self.settings["database.sslmode"],
        )
        self.values = ValueSettings(
            self.settings["decimal.handling.mode"],
            self.settings["binary.handling.mode"],
            self.settings["interval.handling.mode"],
            self.settings["money.fraction.digits"],
        )
        self.filter = TableFilter(self.settings)
        self.tombstones: bool = self.settings["tombstones.on.delete"]
        self.batch_size: int = self.settings["max.batch.size"]
        self.heartbeat_s = self.settings["heartbeat.interval.ms"] / 1000
        self.heartbeat_topic = f"{self.settings['topic.heartbeat.prefix']}.{self.prefix}"
        self.slot: str = self.settings["slot.name"]
        self.publication: str = self.settings["publication.name"]
        self.replication: ReplicationConnection | None = None
        self.snapshot: SnapshotReader | None = None
        self.snapshot_rows: Iterator[SnapshotRow] | None = None
        self.snapshot_schemas: list[TableSchema] = []
        self.relations: dict[int, TableSchema | None] = {}
        self.transaction: _Transaction | None = None
        self.skipping: ResumePoint | None = None
        self.event_lsn = 0
        self.events_at_lsn = 0
        self.last_commit_lsn: int | None = None
        self.clean_lsn = 0  # every change before it has been read (no transaction open)
        self.polled_lsn = 0  # what may be confirmed once the records polled so far are stored
        self.stored_lsn = 0  # what may be confirmed now
        self.confirmed_lsn = 0  # what the slot was told last
        self.last_position: ResumePoint | None = None  # of the last change polled
        self.unstored = False
        self.last_status = 0.0
        self.lock = threading.Lock()  # poll and commit on the task's thread; stop on another
        self.stopping = False
        self.last_record = time.monotonic()
        self.stream_start = 0
        self.catalog = Catalog(self.database)
        signal_table = self.settings["signal.data.collection"]
        channels = self.settings["signal.enabled.channels"] or []
        self.signal_table: tuple[str, str] | None = None
        if signal_table and SOURCE_CHANNEL in channels:
            signal_schema, signal_name = str(signal_table).split(".", 1)
            self.signal_table = (signal_schema, signal_name)
        self.signal_columns: dict[int, list[str]] = {}  # the signal table's relations
        self.incremental = IncrementalSnapshot()
        self.chunk: Chunk | None = None
        self.chunk_reader: ChunkReader | None = None
        self.chunk_size: int = self.settings["incremental.snapshot.chunk.size"]
        self.incremental_tables: dict[str, tuple[TableInfo, TableSchema]] = {}
        try:
            self._prepare()
        except Exception:
            self.stop()
            raise

    def _prepare(self) -> None:
        offset = self.context.offset_storage_reader.offset(self.partition)
        mode = self.settings["snapshot.mode"]
        done = snapshot_completed(offset)
        snapshot = mode == ALWAYS or (mode in (INITIAL, INITIAL_ONLY) and not done)
        # A snapshot a crash interrupted after some of its records were stored: taken again
        # (as Debezium does), streaming from the slot it began with, so that a row it sent
        # and a change made since (an update, a delete) gets that change.
        interrupted = snapshot and mode != ALWAYS and bool(offset) and "lsn" in (offset or {})
        self.streams = mode != INITIAL_ONLY
        tables = self._captured_tables()
        if self.signal_table is not None and self.streams:
            self._check_signal_table()
            self.chunk_reader = ChunkReader(self.database, self.signal_table)
            self.incremental = IncrementalSnapshot.from_offset(offset)
        self._ensure_publication(tables)
        exported: str | None = None
        if self.streams:
            slot = self.catalog.slot(self.slot)
            if slot is not None and slot[0] != "pgoutput":
                raise ConnectException(
                    f"slot.name {self.slot} is a slot of plugin {slot[0]}, not pgoutput"
                )
            if snapshot and slot is not None and not interrupted:
                log.info("dropping slot %s to take a snapshot consistent with a new one", self.slot)
                self.catalog.drop_slot(self.slot)
                slot = None
            self.replication = ReplicationConnection(self.database)
            if slot is None:
                created = self.replication.create_slot(self.slot, export_snapshot=snapshot)
                exported = created.snapshot_name
                self.stream_start = created.consistent_point
                if (not snapshot or interrupted) and offset:
                    log.warning(
                        "slot %s did not exist: created it at %s; changes committed before "
                        "that and not yet captured are lost",
                        self.slot,
                        lsn_text(created.consistent_point),
                    )
                log.info("created slot %s at %s", self.slot, lsn_text(created.consistent_point))
            elif interrupted:
                assert offset is not None
                self.stream_start = int(offset["lsn"])
                log.info(
                    "the snapshot begun at %s was interrupted: taking it again, then streaming "
                    "slot %s from %s",
                    lsn_text(self.stream_start),
                    self.slot,
                    lsn_text(self.stream_start),
                )
        if snapshot:
            self._start_snapshot(tables, exported)
            return
        if mode == INITIAL_ONLY:
            log.info("snapshot.mode=initial_only and the snapshot is done: nothing to stream")
            return
        self.skipping = ResumePoint.of(offset)
        if self.skipping is not None:
            self.stream_start = self.skipping.commit_lsn
        elif offset and offset.get("lsn") is not None:
            self.stream_start = int(offset["lsn"])  # the snapshot's consistent point
        self._start_streaming()

    def _captured_tables(self) -> list[tuple[str, str]]:
        return [
            (s, t)
            for s, t in self.catalog.tables()
            if self.filter.captures(s, t) and (s, t) != self.signal_table
        ]

    def _check_signal_table(self) -> None:
        assert self.signal_table is not None
        name = ".".join(self.signal_table)
        try:
            info = self.catalog.describe(*self.signal_table)
        except ConnectException:
            raise ConnectException(f"signal.data.collection {name}: no such table") from None
        missing = {"id", "type", "data"} - {c.name for c in info.columns}
        if missing:
            raise ConnectException(
                f"signal.data.collection {name}: the signal table needs the columns id, type "
                f"and data (missing: {', '.join(sorted(missing))})"
            )

    def _ensure_publication(self, tables: list[tuple[str, str]]) -> None:
        mode = self.settings["publication.autocreate.mode"]
        exists = self.catalog.publication(self.publication)
        if mode == DISABLED:
            if exists is None:
                raise ConnectException(
                    f"publication.name {self.publication} does not exist and "
                    "publication.autocreate.mode is disabled"
                )
            return
        if mode == ALL_TABLES:
            if exists is None:
                log.info("creating publication %s for all tables", self.publication)
                self.catalog.create_publication(self.publication, None)
            return
        if not tables:
            raise ConnectException(
                "publication.autocreate.mode=filtered, but no table matches the include and "
                "exclude lists"
            )
        if self.signal_table is not None:
            tables = [*tables, self.signal_table]  # signals are read from the stream
        if exists is None:
            log.info("creating publication %s for %d tables", self.publication, len(tables))
            self.catalog.create_publication(self.publication, tables)
        elif exists:
            raise ConnectException(
                f"publication {self.publication} publishes all tables; "
                "publication.autocreate.mode=filtered needs one of the captured tables"
            )
        else:
            self.catalog.set_publication_tables(self.publication, tables)

    def _start_snapshot(self, tables: list[tuple[str, str]], exported: str | None) -> None:
        infos = [self.catalog.describe(s, t) for s, t in tables]
        self.snapshot_schemas = [TableSchema.of(i, self.prefix, self.values) for i in infos]
        self.snapshot = SnapshotReader(
            self.database, infos, exported, self.settings["snapshot.fetch.size"]
        )
        if not self.streams:
            row = self.catalog.conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            self.stream_start = 0 if row is None else parse_lsn(row[0])
        self.snapshot_us = epoch_micros_now()
        self.snapshot_rows = self.snapshot.rows()
        log.info("snapshot of %d tables started at %s", len(infos), lsn_text(self.stream_start))

    def _start_streaming(self) -> None:
        assert self.replication is not None
        self.replication.start(self.slot, self.publication, self.stream_start)
        self.clean_lsn = max(self.clean_lsn, self.stream_start)
        self.polled_lsn = max(self.polled_lsn, self.stream_start)
        log.info("streaming slot %s from %s", self.slot, lsn_text(self.stream_start))

    # --- polling -----------------------------------------------------------------------

    def poll(self) -> list[SourceRecord] | None:
        with self.lock:
            if self.stopping:
                return None
            if self.snapshot_rows is not None:
                return self._poll_snapshot()
            if self.replication is not None and self.replication.streaming:
                return self._poll_stream(self.replication)
        time.sleep(POLL_WAIT_S)  # initial_only, once its snapshot is done
        return None

    def _poll_stream(self, replication: ReplicationConnection) -> list[SourceRecord]:
        records: list[SourceRecord] = []
        wait_s = POLL_WAIT_S
        while len(records) < self.batch_size:
            try:
                message = replication.read(wait_s)
            except ConnectException as exc:
                self._reconnect(exc)
                break
            if message is None:
                break
            wait_s = 0.0  # take what has come, then return it at once
            if isinstance(message, Keepalive):
                if self.transaction is None:
                    self.clean_lsn = max(self.clean_lsn, message.wal_end)
                if message.reply_requested:
                    self._send_status()
                continue
            self._handle(message, records)
        if self.incremental.active and self.chunk is None and self.transaction is None:
            self._next_chunk()
        self.polled_lsn = self.transaction.commit_lsn if self.transaction else self.clean_lsn
        if records:
            self.unstored = True
            self.last_record = time.monotonic()
        elif self._heartbeat_due():
            records.append(self._heartbeat())
            self.unstored = True
        if not self.unstored:
            self.stored_lsn = max(self.stored_lsn, self.polled_lsn)
        self._confirm_when_due()
        self._end_transaction(records)
        return records

    def _reconnect(self, failure: ConnectException) -> None:
        """The stream broke (the server's wal_sender_timeout while the task was paused, a
        network fault): stream again from the slot, skipping what was polled already."""
        log.warning("replication stream of slot %s lost (%s); reconnecting", self.slot, failure)
        if self.replication is not None:
            self.replication.close()
            self.replication = None
        self.transaction = None
        self.skipping = self.last_position
        start = self.confirmed_lsn
        if self.last_position is not None:
            start = max(start, self.last_position.commit_lsn)
        self.replication = ReplicationConnection(self.database)
        self.stream_start = start
        self._start_streaming()

    def _poll_snapshot(self) -> list[SourceRecord]:
        assert self.snapshot_rows is not None and self.snapshot is not None
        records: list[SourceRecord] = []
        for row in self.snapshot_rows:
            schema = self.snapshot_schemas[row.table_index]
            last = row.marker == "last"
            offset = {
                "last_snapshot_record": last,
                "lsn": self.stream_start,
                "txId": self.snapshot.tx_id,
                "ts_usec": self.snapshot_us,
                "snapshot": SNAPSHOT_TYPE,
                "snapshot_completed": last,
            }
            source = EventSource(
                self.snapshot_us, row.marker, self.snapshot.tx_id, self.stream_start
            )
            after = schema.row(row.texts)
            records.append(self._record(schema, "r", None, after, source, offset))
            if len(records) >= self.batch_size:
                return records
        self.snapshot.close()
        self.snapshot = None
        self.snapshot_rows = None
        log.info("snapshot done")
        self._end_transaction(records)  # the whole snapshot: one transaction
        if self.streams:
            self._start_streaming()
        return records

    def _end_transaction(self, records: list[SourceRecord]) -> None:
        """With ``transaction.boundary=connector``: commit the open transaction after this
        batch (the snapshot's last, or a streamed poll's)."""
        transactions = self.context.transaction_context()
        if transactions is not None and records:
            transactions.commit_transaction()

    def _handle(self, frame: XLogData, records: list[SourceRecord]) -> None:
        message = decode_message(frame.payload)
        if isinstance(message, Begin):
            self.transaction = _Transaction(
                message.final_lsn, epoch_micros(message.commit_time), message.xid
            )
            self.event_lsn = self.events_at_lsn = 0
            if self.skipping is not None and message.final_lsn > self.skipping.commit_lsn:
                self.skipping = None
        elif isinstance(message, Commit):
            self.last_commit_lsn = message.commit_lsn
            self.clean_lsn = max(self.clean_lsn, message.end_lsn)
            self.transaction = None
        elif isinstance(message, Relation):
            if (message.namespace or "pg_catalog", message.name) == self.signal_table:
                self.signal_columns[message.oid] = [c.name for c in message.columns]
            self.relations[message.oid] = self._relation_schema(message)
        elif isinstance(message, Insert | Update | Delete):
            self._change(frame.wal_start, message, records)
        elif isinstance(message, Truncate):
            log.info("skipping a TRUNCATE of %d tables (not captured)", len(message.relation_oids))

    def _relation_schema(self, relation: Relation) -> TableSchema | None:
        schema_name = relation.namespace or "pg_catalog"
        if not self.filter.captures(schema_name, relation.name):
            return None
        if (schema_name, relation.name) == self.signal_table:
            return None  # its rows are signals, not changes to send
        try:
            described = self.catalog.describe_oid(relation.oid)
            catalog = {c.name: c for c in described.columns}
            key = described.key_columns
        except ConnectException:  # dropped since: what the stream says is all there is
            catalog = {}
            key = ()
        names = {c.name for c in relation.columns}
        if not key or not set(key) <= names:
            key = tuple(c.name for c in relation.columns if c.part_of_key)
        columns = []
        for column in relation.columns:
            known = catalog.get(column.name)
            if known is not None and known.declared_oid == column.type_oid:
                columns.append(known)  # the catalog's (a domain's base type, enum labels)
            else:  # the column changed since this change: the stream's type
                optional = True if known is None else known.optional
                columns.append(
                    ColumnInfo(column.name, column.type_oid, column.type_modifier, optional)
                )
        info = TableInfo(schema_name, relation.name, tuple(columns), key)
        return TableSchema.of(info, self.prefix, self.values)

    def _change(
        self, lsn: int, message: Insert | Update | Delete, records: list[SourceRecord]
    ) -> None:
        transaction = self.transaction
        if transaction is None:
            raise ConnectException(f"a change at {lsn_text(lsn)} outside a transaction")
        if lsn != self.event_lsn:
            self.event_lsn, self.events_at_lsn = lsn, 0
        self.events_at_lsn += 1
        if self.skipping is not None and self.skipping.covers(
            transaction.commit_lsn, lsn, self.events_at_lsn
        ):
            return
        if message.relation_oid not in self.relations:
            raise ConnectException(
                f"a change of relation {message.relation_oid} before its Relation"
            )
        position = {
            "lsn": lsn,
            "lsn_proc": lsn,
            "lsn_commit": transaction.commit_lsn,
            "lsn_events_processed": self.events_at_lsn,
            "txId": transaction.xid,
            "ts_usec": transaction.commit_us,
        }
        if message.relation_oid in self.signal_columns and isinstance(message, Insert):
            signal = Signal.of(self.signal_columns[message.relation_oid], _texts(message.new) or [])
            if signal is not None:
                self._signal(signal, transaction, lsn, position, records)
            return
        schema = self.relations[message.relation_oid]
        if schema is None:
            return  # a table not captured
        source = EventSource(
            transaction.commit_us, "false", transaction.xid, lsn, self.last_commit_lsn
        )
        if isinstance(message, Insert):
            op, before_texts, after_texts = "c", None, _texts(message.new)
        elif isinstance(message, Update):
            op = "u"
            before_texts = _texts(message.old if message.old is not None else message.old_key)
            after_texts = _texts(message.new)
        else:
            op = "d"
            before_texts = _texts(message.old if message.old is not None else message.old_key)
            after_texts = None
        self.last_position = ResumePoint(transaction.commit_lsn, lsn, self.events_at_lsn)
        offset = {
            **position,
            "messageType": OPERATIONS[op],
            **self.incremental.offset_fields(),
        }
        chunk = self.chunk
        if chunk is not None and chunk.window_open and chunk.table == schema.table.qualified:
            for texts in (before_texts, after_texts):  # the streamed change wins
                if texts is not None:
                    chunk.rows.pop(_key_of(texts, schema.key_positions), None)
        before = None if before_texts is None else schema.row(before_texts)
        after = None if after_texts is None else schema.row(after_texts)
        if op == "u" and before is not None and after is not None:
            old_key, new_key = schema.key(before), schema.key(after)
            if old_key is not None and old_key.values != (new_key.values if new_key else None):
                # the key changed: the old key's row is deleted and the new one created
                records.append(self._record(schema, "d", before, None, source, offset))
                if self.tombstones:
                    records.append(self._tombstone(schema, old_key, offset))
                records.append(self._record(schema, "c", None, after, source, offset))
                return
        records.append(self._record(schema, op, before, after, source, offset))
        if op == "d" and self.tombstones and before is not None:
            key = schema.key(before)
            if key is not None:
                records.append(self._tombstone(schema, key, offset))

    # --- incremental snapshots (postgres_cdc_incremental) ----------------------------------

    def _signal(
        self,
        signal: Signal,
        transaction: _Transaction,
        lsn: int,
        position: dict[str, Any],
        records: list[SourceRecord],
    ) -> None:
        chunk = self.chunk
        if signal.type == EXECUTE_SNAPSHOT:
            kind = str(signal.data.get("type") or INCREMENTAL).lower()
            if kind != INCREMENTAL:
                log.warning("signal %s: a %s snapshot is not served (incremental is); ignored",
                            signal.id, kind)  # fmt: skip
                return
            unserved = [k for k in ("additional-conditions", "surrogate-key") if signal.data.get(k)]
            if unserved:  # a snapshot of more rows than asked for would mislead: none
                log.warning("signal %s: %s not served; ignored", signal.id, ", ".join(unserved))
                return
            added = self.incremental.add(
                [t for t in signal.collections() if self._incremental_table(t, signal.id)]
            )
            log.info("signal %s: incremental snapshot of %s", signal.id, ", ".join(added) or "-")
        elif signal.type == STOP_SNAPSHOT:
            tables = signal.collections() or None
            self.incremental.remove(tables)
            if chunk is not None and (tables is None or chunk.table in tables):
                self.chunk = None
            log.info("signal %s: incremental snapshot of %s stopped", signal.id,
                     ", ".join(tables) if tables else "every table")  # fmt: skip
        elif chunk is not None and signal.id == f"{chunk.id}-open" and signal.type == WINDOW_OPEN:
            chunk.window_open = True
        elif chunk is not None and signal.id == f"{chunk.id}-close" and signal.type == WINDOW_CLOSE:
            self._send_chunk(chunk, transaction, lsn, position, records)
            self.chunk = None

    def _incremental_table(self, name: str, signal_id: str) -> bool:
        """Whether ``name`` (schema.table) can be snapshotted incrementally: captured, with
        a primary key. Its description is kept for the chunks."""
        schema_name, _, table = name.partition(".")
        if (
            not table
            or not self.filter.captures(schema_name, table)
            or ((schema_name, table) == self.signal_table)
        ):
            log.warning("signal %s: %s is not a captured table; skipped", signal_id, name)
            return False
        try:
            info = self.catalog.describe(schema_name, table)
        except ConnectException:
            log.warning("signal %s: no table %s; skipped", signal_id, name)
            return False
        if not info.key_columns:
            log.warning("signal %s: %s has no primary key to read it in chunks by; skipped",
                        signal_id, name)  # fmt: skip
            return False
        self.incremental_tables[name] = (info, TableSchema.of(info, self.prefix, self.values))
        return True

    def _next_chunk(self) -> None:
        """Read the next chunk of the first queued table between two watermarks."""
        assert self.chunk_reader is not None
        while self.incremental.active:
            name = self.incremental.tables[0]
            if name not in self.incremental_tables and not self._incremental_table(name, "-"):
                self.incremental.table_finished()
                continue
            info, schema = self.incremental_tables[name]
            if self.incremental.maximum_key is None:
                self.incremental.maximum_key = self.chunk_reader.maximum_key(info)
                if self.incremental.maximum_key is None:
                    log.info("incremental snapshot of %s: the table is empty", name)
                    self.incremental.table_finished()
                    continue
            chunk_id = new_chunk_id()
            self.chunk_reader.signal(
                f"{chunk_id}-open", WINDOW_OPEN, {"openWindowTimestamp": _now_text()}
            )
            rows = self.chunk_reader.chunk(
                info, self.incremental.last_key, self.incremental.maximum_key, self.chunk_size
            )
            self.chunk_reader.signal(
                f"{chunk_id}-close", WINDOW_CLOSE, {"closeWindowTimestamp": _now_text()}
            )
            keyed: dict[Key, tuple[str | None, ...]] = {
                tuple(row[i] for i in schema.key_positions): row for row in rows
            }
            last_key = tuple(rows[-1][i] for i in schema.key_positions) if rows else None
            done = len(rows) < self.chunk_size or last_key == self.incremental.maximum_key
            self.chunk = Chunk(chunk_id, name, keyed, last_key or self.incremental.last_key, done)
            return

    def _send_chunk(
        self,
        chunk: Chunk,
        transaction: _Transaction,
        lsn: int,
        position: dict[str, Any],
        records: list[SourceRecord],
    ) -> None:
        """The chunk's rows no streamed change replaced, as ``r`` events here in the stream;
        each record's offset carries its key as the progress."""
        _, schema = self.incremental_tables[chunk.table]
        source = EventSource(
            transaction.commit_us, INCREMENTAL, transaction.xid, lsn, self.last_commit_lsn
        )
        self.last_position = ResumePoint(transaction.commit_lsn, lsn, self.events_at_lsn)
        for key, texts in chunk.rows.items():
            self.incremental.last_key = key
            offset = {**position, "messageType": "READ", **self.incremental.offset_fields()}
            records.append(self._record(schema, "r", None, schema.row(list(texts)), source, offset))
        self.incremental.last_key = chunk.last_key
        if chunk.table_done:
            log.info("incremental snapshot of %s done", chunk.table)
            self.incremental.table_finished()

    def _record(
        self,
        schema: TableSchema,
        op: str,
        before: Struct | None,
        after: Struct | None,
        source: EventSource,
        offset: dict[str, Any],
    ) -> SourceRecord:
        envelope = schema.envelope(
            op,
            before,
            after,
            source,
            self.database.dbname,
            self.prefix,
            epoch_micros_now(),
        )
        row = after if after is not None else before
        return SourceRecord(
            self.partition,
            offset,
            schema.topic,
            key_schema=schema.key_schema,
            key=None if row is None else schema.key(row),
            value_schema=schema.envelope_schema,
            value=envelope,
        )

    def _tombstone(self, schema: TableSchema, key: Struct, offset: dict[str, Any]) -> SourceRecord:
        return SourceRecord(
            self.partition, offset, schema.topic, key_schema=schema.key_schema, key=key
        )

    def _heartbeat_due(self) -> bool:
        return (
            self.heartbeat_s > 0
            and self.transaction is None
            and self.last_commit_lsn is not None
            and time.monotonic() - self.last_record >= self.heartbeat_s
        )

    def _heartbeat(self) -> SourceRecord:
        """A record on the heartbeat topic carrying the position: every transaction up to
        the last commit read is done."""
        self.last_record = time.monotonic()
        assert self.last_commit_lsn is not None
        offset = {
            "lsn": self.clean_lsn,
            "lsn_proc": self.clean_lsn,
            "lsn_commit": self.last_commit_lsn,
            "lsn_events_processed": 0,
            "ts_usec": epoch_micros_now(),
            **self.incremental.offset_fields(),
        }
        now_ms = epoch_micros_now() // 1000
        return SourceRecord(
            self.partition,
            offset,
            self.heartbeat_topic,
            key_schema=HEARTBEAT_KEY_SCHEMA,
            key=Struct(HEARTBEAT_KEY_SCHEMA, {"serverName": self.prefix}),
            value_schema=HEARTBEAT_VALUE_SCHEMA,
            value=Struct(HEARTBEAT_VALUE_SCHEMA, {"ts_ms": now_ms}),
        )

    def commit(self) -> None:
        """The records polled so far are stored: their position may be confirmed."""
        with self.lock:
            self.unstored = False
            self.stored_lsn = max(self.stored_lsn, self.polled_lsn)
            self._confirm_when_due()

    def _confirm_when_due(self) -> None:
        """Tell the slot what is stored: soon after it advances, and every 10 s anyway
        (PostgreSQL's wal_receiver_status_interval)."""
        since = time.monotonic() - self.last_status
        advanced = self.stored_lsn > self.confirmed_lsn
        if (advanced and since >= CONFIRM_INTERVAL_S) or since >= STATUS_INTERVAL_S:
            self._send_status()

    def _send_status(self) -> None:
        if self.replication is None or not self.replication.streaming:
            return
        self.confirmed_lsn = max(self.confirmed_lsn, self.stored_lsn)
        self.replication.send_status(self.confirmed_lsn)
        self.last_status = time.monotonic()

    def stop(self) -> None:
        """Called from another thread: waits for a running poll, then closes."""
        self.stopping = True
        with self.lock:
            catalog = getattr(self, "catalog", None)
            for closing in (self.snapshot, self.replication, getattr(self, "chunk_reader", None)):
                if closing is None:
                    continue
                try:
                    closing.close()
                except Exception:  # stopping: a connection already gone is no failure
                    log.debug("closing a connection", exc_info=True)
            if catalog is not None:
                try:
                    if self.settings["slot.drop.on.stop"] and catalog.slot(self.slot):
                        log.info("dropping slot %s (slot.drop.on.stop)", self.slot)
                        catalog.drop_slot(self.slot)
                    catalog.close()
                except Exception:
                    log.warning("slot %s not dropped", self.slot, exc_info=True)
            self.snapshot = None
            self.snapshot_rows = None
            self.replication = None
            self.chunk_reader = None
