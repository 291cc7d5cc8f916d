"""What the JDBC connectors need to know of each database, by the ``connection.url``
users give Confluent's connectors: ``jdbc:postgresql://host:port/db``,
``jdbc:sqlite:/path/file.db``, ``jdbc:mysql://`` or ``jdbc:mariadb://host:port/db``.

Owns parsing the URL (user and password from ``connection.user`` /
``connection.password`` or the URL's parameters), the JDBC driver class Spark's JDBC
reader loads, identifier quoting, the SQL column type of a Connect schema (as Confluent's
dialects map them), the statements of the sink's insert modes (upsert as
``INSERT ... ON CONFLICT DO UPDATE`` or ``ON DUPLICATE KEY UPDATE``), and a DB-API
connection from Python where Strom writes itself (psycopg for PostgreSQL, sqlite3 for
SQLite; MariaDB/MySQL has no Python driver here, so its sink is refused).

Does not own what the connectors do with them (``jdbc_sink``, ``jdbc_source``).
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from strom.connect.data import (
    BOOLEAN,
    BYTES,
    DATE,
    DECIMAL,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    TIME,
    TIMESTAMP,
    Schema,
)

POSTGRESQL = "postgresql"
SQLITE = "sqlite"
MYSQL = "mysql"
DRIVERS = {
    POSTGRESQL: "org.postgresql.Driver",
    SQLITE: "org.sqlite.JDBC",
    MYSQL: "org.mariadb.jdbc.Driver",
}
_TYPES = {
    POSTGRESQL: {
        INT8: "SMALLINT",
        INT16: "SMALLINT",
        INT32: "INT",
        INT64: "BIGINT",
        FLOAT32: "REAL",
        FLOAT64: "DOUBLE PRECISION",
        BOOLEAN: "BOOLEAN",
        STRING: "TEXT",
        BYTES: "BYTEA",
        DECIMAL: "DECIMAL",
        DATE: "DATE",
        TIME: "TIME",
        TIMESTAMP: "TIMESTAMP",
    },
    SQLITE: {
        INT8: "INTEGER",
        INT16: "INTEGER",
        INT32: "INTEGER",
        INT64: "INTEGER",
        FLOAT32: "REAL",
        FLOAT64: "REAL",
        BOOLEAN: "INTEGER",
        STRING: "TEXT",
        BYTES: "BLOB",
        DECIMAL: "NUMERIC",
        DATE: "NUMERIC",
        TIME: "NUMERIC",
        TIMESTAMP: "NUMERIC",
    },
    MYSQL: {
        INT8: "TINYINT",
        INT16: "SMALLINT",
        INT32: "INT",
        INT64: "BIGINT",
        FLOAT32: "FLOAT",
        FLOAT64: "DOUBLE",
        BOOLEAN: "TINYINT",
        STRING: "TEXT",
        BYTES: "VARBINARY(1024)",
        DECIMAL: "DECIMAL(65,{scale})",
        DATE: "DATE",
        TIME: "TIME(3)",
        TIMESTAMP: "DATETIME(3)",
    },
}


class JdbcUrlError(ValueError):
    """A ``connection.url`` Strom cannot use; the message says why."""


@dataclass(frozen=True)
class Database:
    """One database reached by a JDBC URL."""

    kind: str
    url: str  # the JDBC URL, for Spark's JDBC reader
    host: str = ""
    port: int = 0
    name: str = ""  # the database (catalog); SQLite: the file
    user: str = ""
    password: str = field(default="", repr=False)

    @property
    def driver(self) -> str:
        return DRIVERS[self.kind]

    def spark_options(self) -> dict[str, str]:
        """Spark JDBC reader options reaching this database."""
        options = {"url": self.url, "driver": self.driver}
        if self.user:
            options["user"] = self.user
        if self.password:
            options["password"] = self.password
        return options

    def quote(self, identifier: str) -> str:
        if self.kind == MYSQL:
            return "`" + identifier.replace("`", "``") + "`"
        return '"' + identifier.replace('"', '""') + '"'

    def table(self, name: str) -> str:
        """A table name as written (``schema.table`` split and each part quoted)."""
        return ".".join(self.quote(part) for part in name.split("."))

    def column_type(self, schema: Schema) -> str:
        """The SQL type of a column holding ``schema``'s values (Confluent's mapping)."""
        types = _TYPES[self.kind]
        sql = types.get(schema.name or "") or types.get(schema.type)
        if sql is None:
            raise JdbcUrlError(f"no {self.kind} column type for the Connect type {schema.type}")
        scale = (schema.parameters or {}).get("scale", "0")
        return sql.format(scale=scale)

    def upsert(self, table: str, columns: list[str], keys: list[str]) -> str:
        """One row's upsert statement with DB-API placeholders."""
        names = ", ".join(self.quote(c) for c in columns)
        marks = ", ".join([self.placeholder] * len(columns))
        values = [c for c in columns if c not in keys]
        if self.kind == MYSQL:
            sets = ", ".join(f"{self.quote(c)}=VALUES({self.quote(c)})" for c in values or keys)
            return f"INSERT INTO {table} ({names}) VALUES ({marks}) ON DUPLICATE KEY UPDATE {sets}"
        conflict = ", ".join(self.quote(c) for c in keys)
        action = (
            "DO UPDATE SET "
            + ", ".join(f"{self.quote(c)}=EXCLUDED.{self.quote(c)}" for c in values)
            if values
            else "DO NOTHING"
        )
        return f"INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT ({conflict}) {action}"

    @property
    def placeholder(self) -> str:
        return "?" if self.kind == SQLITE else "%s"

    def connect(self) -> Any:
        """A DB-API connection (psycopg or sqlite3), not in autocommit."""
        if self.kind == SQLITE:
            return sqlite3.connect(self.name, timeout=30)
        if self.kind == POSTGRESQL:
            import psycopg

            return psycopg.connect(
                host=self.host,
                port=self.port,
                dbname=self.name,
                user=self.user or None,
                password=self.password or None,
            )
        raise JdbcUrlError(
            f"writing to {self.kind} needs a Python driver Strom does not ship; "
            "PostgreSQL and SQLite are served"
        )


def parse_url(url: str, user: str = "", password: str = "") -> Database:
    """The database a JDBC URL names; JdbcUrlError for one Strom does not serve."""
    if not url.startswith("jdbc:"):
        raise JdbcUrlError(f"{url!r} is not a JDBC URL (jdbc:postgresql://host:port/db)")
    rest = url[len("jdbc:") :]
    scheme, _, target = rest.partition(":")
    if scheme == SQLITE:
        path = target.split("?", 1)[0]
        if not path or path == ":memory:":
            raise JdbcUrlError("a SQLite connection.url needs a file: jdbc:sqlite:/path/file.db")
        return Database(SQLITE, url, name=path)
    kind = {"postgresql": POSTGRESQL, "mysql": MYSQL, "mariadb": MYSQL}.get(scheme)
    if kind is None:
        raise JdbcUrlError(
            f"no dialect for {url!r}: PostgreSQL, MariaDB/MySQL and SQLite are served"
        )
    parsed = urllib.parse.urlsplit(rest)
    params = dict(urllib.parse.parse_qsl(parsed.query))
    default_port = 5432 if kind == POSTGRESQL else 3306
    try:
        port = parsed.port or default_port
    except ValueError:
        raise JdbcUrlError(f"bad port in {url!r}") from None
    return Database(
        kind,
        url,
        host=parsed.hostname or "localhost",
        port=port,
        name=parsed.path.lstrip("/"),
        user=user or params.get("user", ""),
        password=password or params.get("password", ""),
    )
