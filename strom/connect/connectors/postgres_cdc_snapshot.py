"""A consistent snapshot of the captured tables, as Debezium's PostgreSQL connector takes
it: one REPEATABLE READ transaction that adopts the snapshot the replication slot
exported when it was created (``SET TRANSACTION SNAPSHOT``), so the rows read are exactly
the database as of the slot's consistent point, and streaming from that point neither
misses nor repeats a change. Without an exported snapshot (``snapshot.mode=initial_only``)
the transaction is a plain REPEATABLE READ one.

Each table is read with a server-side cursor (``snapshot.fetch.size`` rows a round trip),
every value as its text, as pgoutput sends values; rows come table after table, in the
order given, each with the index of its table and whether it is the first or last of its
table and of the whole snapshot (Debezium's ``snapshot`` field: ``first``,
``first_in_data_collection``, ``true``, ``last_in_data_collection``, ``last``).

Does not own which tables are read, or the records made of the rows (``postgres_cdc``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.adapt import Loader

from strom.connect.api import ConnectException
from strom.connect.connectors.postgres_cdc_schema import TableInfo
from strom.connect.connectors.postgres_cdc_stream import Database, one_line


class _TextLoader(Loader):
    """Every value as the text its type's output function writes."""

    def load(self, data: Any) -> str:
        return bytes(data).decode()


@dataclass(frozen=True)
class SnapshotRow:
    table_index: int
    texts: tuple[str | None, ...]
    marker: str  # the source block's snapshot field


class SnapshotReader:
    """One snapshot transaction over ``tables``; ``rows()`` reads them all once."""

    def __init__(
        self,
        database: Database,
        tables: list[TableInfo],
        exported_snapshot: str | None,
        fetch_size: int,
    ) -> None:
        self.tables = tables
        self.fetch_size = fetch_size
        self.conn: psycopg.Connection[Any] = database.connect()
        try:
            self.conn.autocommit = False
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            if exported_snapshot is not None:
                self.conn.execute(
                    sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(exported_snapshot))
                )
            row = self.conn.execute("SELECT txid_current()").fetchone()
            self.tx_id = int(row[0]) if row is not None else None
        except psycopg.Error as exc:
            self.conn.close()
            raise ConnectException(f"cannot start the snapshot: {one_line(exc)}") from None
        for table in tables:
            for column in table.columns:
                self.conn.adapters.register_loader(column.type_oid, _TextLoader)

    def _table_rows(self, table: TableInfo) -> Iterator[tuple[str | None, ...]]:
        columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in table.columns)
        query = sql.SQL("SELECT {} FROM {}").format(
            columns, sql.Identifier(table.schema, table.name)
        )
        with self.conn.cursor(name=f"strom_snapshot_{id(table)}") as cursor:
            cursor.itersize = self.fetch_size
            try:
                cursor.execute(query)
                yield from cursor
            except psycopg.Error as exc:
                raise ConnectException(
                    f"reading {table.qualified} for the snapshot failed: {one_line(exc)}"
                ) from None

    def rows(self) -> Iterator[SnapshotRow]:
        """Every row of every table, each marked as Debezium marks snapshot records."""
        previous: tuple[int, tuple[str | None, ...]] | None = None
        first_of_table = True
        first_overall = True
        for index, table in enumerate(self.tables):
            for texts in self._table_rows(table):
                if previous is not None:
                    same_table = previous[0] == index
                    yield self._row(previous, first_overall, first_of_table, not same_table, False)
                    first_overall = False
                    first_of_table = not same_table
                previous = (index, texts)
        if previous is not None:
            yield self._row(previous, first_overall, first_of_table, True, True)

    @staticmethod
    def _row(
        row: tuple[int, tuple[str | None, ...]],
        first_overall: bool,
        first_of_table: bool,
        last_of_table: bool,
        last_overall: bool,
    ) -> SnapshotRow:
        if last_overall:
            marker = "last"
        elif first_overall:
            marker = "first"
        elif first_of_table:
            marker = "first_in_data_collection"
        elif last_of_table:
            marker = "last_in_data_collection"
        else:
            marker = "true"
        return SnapshotRow(row[0], row[1], marker)

    def close(self) -> None:
        try:
            self.conn.rollback()
        finally:
            self.conn.close()
