"""The connections a PostgreSQL change capture holds: the replication connection
(``replication=database``, libpq through ``psycopg.pq``) that creates the logical
replication slot (``CREATE_REPLICATION_SLOT ... LOGICAL pgoutput``, exporting its
snapshot), starts streaming (``START_REPLICATION SLOT ... LOGICAL lsn (proto_version '1',
publication_names '...')``), reads the server's CopyData messages without blocking longer
than asked and sends standby status updates; and the SQL side (``psycopg``): the
publication, the slots, and the catalog's description of tables (columns, types, NOT NULL,
primary keys).

Every connection asks the server for UTC, ISO dates, ISO 8601 intervals, money in the C
locale and hex bytea, so the text of a value reads the same from a snapshot's query and
from pgoutput.

Does not own what the messages mean (``postgres_cdc_decoder``) or when positions are
confirmed (``postgres_cdc``).
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq, sql

from strom.connect.api import ConnectException
from strom.connect.connectors.postgres_cdc_decoder import (
    Keepalive,
    XLogData,
    decode_copy_message,
    encode_standby_status,
    lsn_text,
    parse_lsn,
    postgres_micros,
)
from strom.connect.connectors.postgres_cdc_schema import ColumnInfo, TableInfo

log = logging.getLogger(__name__)

SESSION_OPTIONS = (
    "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=iso_8601 -c lc_monetary=C "
    "-c bytea_output=hex -c extra_float_digits=3"
)


@dataclass(frozen=True)
class Database:
    """Where the database is and who connects (``database.*``)."""

    host: str
    port: int
    user: str
    password: str
    dbname: str
    sslmode: str = "prefer"

    def conninfo(self, replication: bool = False) -> str:
        parts: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "dbname": self.dbname,
            "sslmode": self.sslmode,
            "options": SESSION_OPTIONS,
            "application_name": "strom-cdc",
            "connect_timeout": 30,
        }
        if self.password:
            parts["password"] = self.password
        if replication:
            parts["replication"] = "database"
        return psycopg.conninfo.make_conninfo(**parts)

    def connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.conninfo(), autocommit=True)
        except psycopg.Error as exc:
            raise ConnectException(
                f"cannot connect to PostgreSQL {self.where}: {one_line(exc)}"
            ) from None

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}/{self.dbname} as {self.user}"


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class CreatedSlot:
    consistent_point: int
    snapshot_name: str | None


class ReplicationConnection:
    """A ``replication=database`` connection: slot creation and the COPY BOTH stream."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.conn = pq.PGconn.connect(database.conninfo(replication=True).encode())
        if self.conn.status != pq.ConnStatus.OK:
            message = self.conn.get_error_message()
            self.conn.finish()
            raise ConnectException(
                f"cannot open a replication connection to PostgreSQL {database.where}: "
                f"{message.strip().splitlines()[0] if message.strip() else 'refused'}"
            )
        self.streaming = False
        self.buffered: list[bytes] = []

    def command(self, text: str) -> list[tuple[str | None, ...]]:
        """A replication command, its rows as text (a failure is a ConnectException)."""
        result = self.conn.exec_(text.encode())
        if result.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            message = result.get_error_message().strip() or "failed"
            raise ConnectException(f"{text.split(' ')[0]} failed: {message.splitlines()[0]}")
        rows = []
        for row in range(result.ntuples):
            values = (result.get_value(row, col) for col in range(result.nfields))
            rows.append(tuple(None if v is None else bytes(v).decode() for v in values))
        return rows

    def create_slot(self, slot: str, export_snapshot: bool) -> CreatedSlot:
        mode = "EXPORT_SNAPSHOT" if export_snapshot else "NOEXPORT_SNAPSHOT"
        rows = self.command(f"CREATE_REPLICATION_SLOT {quote_ident(slot)} LOGICAL pgoutput {mode}")
        _, point, snapshot, _ = rows[0]
        assert point is not None
        return CreatedSlot(parse_lsn(point), snapshot)

    def start(self, slot: str, publication: str, start_lsn: int) -> None:
        publications = quote_ident(publication).replace("'", "''")
        command = (
            f"START_REPLICATION SLOT {quote_ident(slot)} LOGICAL {lsn_text(start_lsn)} "
            f"(proto_version '1', publication_names '{publications}')"
        )
        self.conn.send_query(command.encode())
        result = self.conn.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            message = "" if result is None else result.get_error_message().strip()
            raise ConnectException(f"START_REPLICATION failed: {message.splitlines()[0]}")
        self.conn.nonblocking = 1
        self.streaming = True

    def read(self, timeout_s: float) -> XLogData | Keepalive | None:
        """The next message from the server, waiting at most ``timeout_s``; None if none."""
        deadline = time.monotonic() + timeout_s
        while True:
            size, data = self.conn.get_copy_data(1)
            if size > 0:
                return decode_copy_message(data)
            if size == -1:
                result = self.conn.get_result()
                message = "" if result is None else result.get_error_message().strip()
                raise ConnectException(f"the replication stream ended: {message or 'closed'}")
            if size < -1:
                raise ConnectException(
                    f"the replication stream failed: {self.conn.get_error_message().strip()}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.conn.socket], [], [], left)
            if ready:
                self.conn.consume_input()

    def send_status(self, flushed: int, reply_requested: bool = False) -> None:
        """A standby status update: written and flushed (and applied) up to ``flushed``."""
        clock = postgres_micros(time.time_ns() // 1000)
        message = encode_standby_status(flushed, flushed, flushed, clock, reply_requested)
        if self.conn.put_copy_data(message) != 1:
            raise ConnectException(
                f"sending a status update failed: {self.conn.get_error_message().strip()}"
            )
        while self.conn.flush() == 1:  # the socket is full: wait until it drains
            select.select([], [self.conn.socket], [], 1.0)

    def close(self) -> None:
        try:
            if self.streaming:
                self.conn.put_copy_end()
                self.conn.flush()
        except Exception:  # closing: the connection may be gone already
            log.debug("ending the replication stream", exc_info=True)
        self.conn.finish()


class Catalog:
    """The SQL connection of a capture: publication, slots, tables' descriptions."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.conn = database.connect()

    def close(self) -> None:
        self.conn.close()

    def slot(self, name: str) -> tuple[str | None, int | None] | None:
        """The slot's plugin and confirmed flush LSN, or None when there is no such slot."""
        row = self.conn.execute(
            "SELECT plugin, confirmed_flush_lsn::text, database FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (name,),
        ).fetchone()
        if row is None:
            return None
        if row[2] != self.database.dbname:
            raise ConnectException(
                f"slot.name {name} is a slot of database {row[2]}, not {self.database.dbname}"
            )
        return row[0], None if row[1] is None else parse_lsn(row[1])

    def drop_slot(self, name: str, wait_s: float = 3.0) -> None:
        """Drop the slot, once no connection streams from it (a replication connection
        just closed lets it go a moment later)."""
        deadline = time.monotonic() + wait_s
        query = "SELECT active FROM pg_replication_slots WHERE slot_name = %s"
        while (row := self.conn.execute(query, (name,)).fetchone()) and row[0]:
            if time.monotonic() > deadline:
                break  # the drop names the process that holds it
            time.sleep(0.05)
        self.conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))

    def publication(self, name: str) -> bool | None:
        """Whether the publication publishes all tables; None when it does not exist."""
        row = self.conn.execute(
            "SELECT puballtables FROM pg_publication WHERE pubname = %s", (name,)
        ).fetchone()
        return None if row is None else bool(row[0])

    def create_publication(self, name: str, tables: Iterable[tuple[str, str]] | None) -> None:
        """``FOR ALL TABLES`` when ``tables`` is None, else ``FOR TABLE`` those."""
        if tables is None:
            statement = sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES").format(sql.Identifier(name))
        else:
            statement = sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                sql.Identifier(name),
                sql.SQL(", ").join(sql.Identifier(s, t) for s, t in tables),
            )
        self.conn.execute(statement)

    def set_publication_tables(self, name: str, tables: list[tuple[str, str]]) -> None:
        statement = sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
            sql.Identifier(name), sql.SQL(", ").join(sql.Identifier(s, t) for s, t in tables)
        )
        self.conn.execute(statement)

    def tables(self) -> list[tuple[str, str]]:
        """Every ordinary (and partitioned) table outside the system schemas."""
        rows = self.conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%%' AND n.nspname NOT LIKE 'pg_temp%%' "
            "ORDER BY 1, 2"
        ).fetchall()
        return [(schema, name) for schema, name in rows]

    def describe(self, schema: str, name: str) -> TableInfo:
        """The table's columns (name, type, modifier, nullability) and primary key."""
        oid = self.conn.execute(
            "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s",
            (schema, name),
        ).fetchone()
        if oid is None:
            raise ConnectException(f"table {schema}.{name} not found")
        return self.describe_oid(int(oid[0]))

    def describe_oid(self, oid: int) -> TableInfo:
        names = self.conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.oid = %s",
            (oid,),
        ).fetchone()
        if names is None:
            raise ConnectException(f"table of oid {oid} not found")
        # a domain as its base type; an enum with its labels
        columns = self.conn.execute(
            "SELECT a.attname, b.oid, CASE WHEN t.typtype = 'd' THEN t.typtypmod "
            "ELSE a.atttypmod END, a.attnotnull, CASE WHEN b.typtype = 'e' THEN "
            "(SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder) FROM pg_enum e "
            "WHERE e.enumtypid = b.oid) END, a.atttypid "
            "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype "
            "ELSE t.oid END "
            "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (oid,),
        ).fetchall()
        key = self.conn.execute(
            "SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, n) "
            "JOIN pg_attribute a ON a.attnum = k.attnum "
            "WHERE i.indrelid = %s AND i.indisprimary AND a.attrelid = i.indrelid ORDER BY k.n",
            (oid,),
        ).fetchall()
        return TableInfo(
            names[0],
            names[1],
            tuple(
                ColumnInfo(n, int(t), int(m), not notnull, None if e is None else tuple(e), d)
                for n, t, m, notnull, e, d in columns
            ),
            tuple(k for (k,) in key),
        )
