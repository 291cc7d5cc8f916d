"""Incremental snapshots of the PostgreSQL connector, as Debezium takes them: asked for by a
row in the signal table (``signal.data.collection``), read in chunks of the primary key's
order between streamed changes, each chunk framed by two watermark rows so that a change
streamed while the chunk was read wins over the chunk's copy of that row.

Signals are rows ``(id, type, data)`` inserted into the signal table, read from the
replication stream (Debezium's ``source`` channel): ``execute-snapshot`` with data
``{"data-collections": ["schema.table", ...], "type": "incremental"}`` queues those
tables; ``stop-snapshot`` with the same shape (no ``data-collections``: every table)
takes them off. A chunk is taken thus (Debezium's ``insert_insert`` watermarks): a
``snapshot-window-open`` row is inserted into the signal table, the next
``incremental.snapshot.chunk.size`` rows after the last key sent are selected (up to the
largest key the table had when its snapshot began), then a ``snapshot-window-close`` row is
inserted. When the stream brings the open row the window opens; a change of a row of the
chunk seen in it drops that row from the chunk (the streamed change is as new or newer);
when the stream brings the close row, the rows left are sent as ``r`` events
(``source.snapshot`` ``incremental``) at that point of the stream.

The progress is in the offsets of every record while a snapshot runs
(``incremental_snapshot_collections``, ``incremental_snapshot_primary_key``,
``incremental_snapshot_maximum_key``: JSON texts), each ``r`` record carrying its own
key, so a restarted task goes on after the last row stored, with a new chunk.

Does not own the stream, the records or their offsets' stream positions (``postgres_cdc``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.adapt import Loader

from strom.connect.api import ConnectException
from strom.connect.connectors.postgres_cdc_schema import TableInfo
from strom.connect.connectors.postgres_cdc_stream import Database, one_line

log = logging.getLogger(__name__)

EXECUTE_SNAPSHOT = "execute-snapshot"
STOP_SNAPSHOT = "stop-snapshot"
WINDOW_OPEN = "snapshot-window-open"
WINDOW_CLOSE = "snapshot-window-close"
INCREMENTAL = "incremental"
COLLECTIONS = "incremental_snapshot_collections"
PRIMARY_KEY = "incremental_snapshot_primary_key"
MAXIMUM_KEY = "incremental_snapshot_maximum_key"

Key = tuple[str | None, ...]


@dataclass(frozen=True)
class Signal:
    id: str
    type: str
    data: dict[str, Any]

    @staticmethod
    def of(columns: list[str], texts: list[Any]) -> Signal | None:
        """The signal an inserted row of the signal table holds (its ``id``, ``type`` and
        ``data`` columns, by name), or None when it is not one."""
        row = dict(zip(columns, texts, strict=False))
        kind, ident = row.get("type"), row.get("id")
        if not isinstance(kind, str) or not isinstance(ident, str):
            return None
        text = row.get("data")
        data: Any = {}
        if isinstance(text, str) and text.strip():
            try:
                data = json.loads(text)
            except ValueError:
                log.warning("signal %s (%s): its data is not JSON; ignored", ident, kind)
                return None
        return Signal(ident, kind, data if isinstance(data, dict) else {})

    def collections(self) -> list[str]:
        found = self.data.get("data-collections") or []
        return [str(c) for c in found] if isinstance(found, list) else [str(found)]


@dataclass
class Chunk:
    """The rows of one chunk waiting for their window to close, by key."""

    id: str
    table: str
    rows: dict[Key, tuple[str | None, ...]]
    last_key: Key | None  # the largest key read: the next chunk starts after it
    table_done: bool  # the chunk reached the table's maximum key (or its end)
    window_open: bool = False


@dataclass
class IncrementalSnapshot:
    """The tables queued for an incremental snapshot and the progress in the first."""

    tables: list[str] = field(default_factory=list)  # "schema.table", the first in progress
    last_key: Key | None = None  # of the first table: the last row sent
    maximum_key: Key | None = None  # of the first table, when its snapshot began

    @property
    def active(self) -> bool:
        return bool(self.tables)

    def offset_fields(self) -> dict[str, Any]:
        """The progress as offset fields (none when no snapshot runs)."""
        if not self.tables:
            return {}
        return {
            COLLECTIONS: json.dumps(self.tables),
            PRIMARY_KEY: None if self.last_key is None else json.dumps(list(self.last_key)),
            MAXIMUM_KEY: None if self.maximum_key is None else json.dumps(list(self.maximum_key)),
        }

    @staticmethod
    def from_offset(offset: Mapping[str, Any] | None) -> IncrementalSnapshot:
        state = IncrementalSnapshot()
        if not offset or not offset.get(COLLECTIONS):
            return state
        try:
            state.tables = [str(t) for t in json.loads(offset[COLLECTIONS])]
            if offset.get(PRIMARY_KEY):
                state.last_key = tuple(json.loads(offset[PRIMARY_KEY]))
            if offset.get(MAXIMUM_KEY):
                state.maximum_key = tuple(json.loads(offset[MAXIMUM_KEY]))
        except (ValueError, TypeError):
            log.warning("the stored incremental snapshot's progress is unreadable; not resumed")
            return IncrementalSnapshot()
        return state

    def add(self, tables: list[str]) -> list[str]:
        """Queue ``tables`` (those not queued yet); the ones added."""
        added = [t for t in tables if t not in self.tables]
        self.tables.extend(added)
        return added

    def remove(self, tables: list[str] | None) -> None:
        """Take ``tables`` (None: all) off the queue; the one in progress starts over if
        it is queued again."""
        if tables is None:
            tables = list(self.tables)
        if self.tables and self.tables[0] in tables:
            self.last_key = self.maximum_key = None
        self.tables = [t for t in self.tables if t not in tables]

    def table_finished(self) -> None:
        self.tables.pop(0)
        self.last_key = self.maximum_key = None


class _TextLoader(Loader):
    """Every value as the text its type's output function writes (as pgoutput's)."""

    def load(self, data: Any) -> str:
        return bytes(data).decode()


class ChunkReader:
    """The SQL side: the watermark rows in the signal table and the chunks' selects, on a
    connection of its own (each statement its own transaction)."""

    def __init__(self, database: Database, signal_table: tuple[str, str]) -> None:
        self.signal_table = signal_table
        self.conn: psycopg.Connection[Any] = database.connect()
        self.key_types: dict[str, list[str]] = {}

    def close(self) -> None:
        self.conn.close()

    def signal(self, ident: str, kind: str, data: Mapping[str, Any]) -> None:
        try:
            self.conn.execute(
                sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s)").format(
                    sql.Identifier(*self.signal_table)
                ),
                (ident, kind, json.dumps(data)),
            )
        except psycopg.Error as exc:
            raise ConnectException(
                f"signal.data.collection {'.'.join(self.signal_table)}: writing a "
                f"{kind} watermark failed: {one_line(exc)}"
            ) from None

    def _key_types(self, table: TableInfo) -> list[str]:
        if table.qualified not in self.key_types:
            rows = self.conn.execute(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
                (sql.Identifier(table.schema, table.name).as_string(self.conn),),
            ).fetchall()
            types = {str(name): str(kind) for name, kind in rows}
            self.key_types[table.qualified] = [types[k] for k in table.key_columns]
        return self.key_types[table.qualified]

    def _key_row(self, table: TableInfo, key: Key) -> sql.Composable:
        """``ROW($1::type1, ...)`` of a key's texts."""
        return sql.SQL("ROW({})").format(
            sql.SQL(", ").join(
                sql.SQL("{}::{}").format(sql.Literal(text), sql.SQL(kind))
                for text, kind in zip(key, self._key_types(table), strict=True)
            )
        )

    def _key_columns(self, table: TableInfo) -> sql.Composable:
        return sql.SQL(", ").join(sql.Identifier(k) for k in table.key_columns)

    def maximum_key(self, table: TableInfo) -> Key | None:
        """The table's largest key now, or None when it is empty."""
        self._register(table)
        query = sql.SQL("SELECT {} FROM {} ORDER BY {} LIMIT 1").format(
            self._key_columns(table),
            sql.Identifier(table.schema, table.name),
            sql.SQL(", ").join(
                sql.SQL("{} DESC").format(sql.Identifier(k)) for k in table.key_columns
            ),  # fmt: skip
        )
        row = self._run(table, query).fetchone()
        return None if row is None else tuple(row)

    def chunk(
        self, table: TableInfo, after: Key | None, maximum: Key, size: int
    ) -> list[tuple[str | None, ...]]:
        """Up to ``size`` rows with keys above ``after`` (None: from the first) and at
        most ``maximum``, in key order, every value as text."""
        self._register(table)
        keys = sql.SQL("ROW({})").format(self._key_columns(table))
        where = [sql.SQL("{} <= {}").format(keys, self._key_row(table, maximum))]
        if after is not None:
            where.append(sql.SQL("{} > {}").format(keys, self._key_row(table, after)))
        query = sql.SQL("SELECT {} FROM {} WHERE {} ORDER BY {} LIMIT {}").format(
            sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns),
            sql.Identifier(table.schema, table.name),
            sql.SQL(" AND ").join(where),
            self._key_columns(table),
            sql.Literal(size),
        )
        return [tuple(row) for row in self._run(table, query).fetchall()]

    def _register(self, table: TableInfo) -> None:
        for column in table.columns:
            self.conn.adapters.register_loader(column.type_oid, _TextLoader)

    def _run(self, table: TableInfo, query: sql.Composed) -> psycopg.Cursor[Any]:
        try:
            return self.conn.execute(query)
        except psycopg.Error as exc:
            raise ConnectException(
                f"reading {table.qualified} for an incremental snapshot failed: {one_line(exc)}"
            ) from None


def new_chunk_id() -> str:
    return str(uuid.uuid4())
