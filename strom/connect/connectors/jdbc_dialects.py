"""What the JDBC connectors need to know of each database, by the ``connection.url``
users give Confluent's connectors: ``jdbc:postgresql://host:port/db``,
``jdbc:sqlite:/path/file.db``, ``jdbc:mysql://`` or ``jdbc:mariadb://host:port/db``.

Owns parsing the URL (user and password from ``connection.user`` /
``connection.password`` or the URL's parameters), the JDBC driver class Spark's JDBC
reader loads, identifier quoting, the SQL column type of a Connect schema (as Confluent's
dialects map them), the statements of the sink's insert modes (upsert as
``INSERT ... ON CONFLICT DO UPDATE`` or ``ON DUPLICATE KEY UPDATE``), and a DB-API
connection from Python where Strom writes or looks itself (psycopg for PostgreSQL, PyMySQL
for MariaDB/MySQL, sqlite3 for SQLite).

Does not own what the connectors do with them (``jdbc_sink``, ``jdbc_source``).
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from strom.connect import config_def as cd
from strom.connect import data
from strom.connect.config_def import ConfigValue

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
        data.INT8: "SMALLINT",
        data.INT16: "SMALLINT",
        data.INT32: "INT",
        data.INT64: "BIGINT",
        data.FLOAT32: "REAL",
        data.FLOAT64: "DOUBLE PRECISION",
        data.BOOLEAN: "BOOLEAN",
        data.STRING: "TEXT",
        data.BYTES: "BYTEA",
        data.DECIMAL: "DECIMAL",
        data.DATE: "DATE",
        data.TIME: "TIME",
        data.TIMESTAMP: "TIMESTAMP",
    },
    SQLITE: {
        data.INT8: "INTEGER",
        data.INT16: "INTEGER",
        data.INT32: "INTEGER",
        data.INT64: "INTEGER",
        data.FLOAT32: "REAL",
        data.FLOAT64: "REAL",
        data.BOOLEAN: "INTEGER",
        data.STRING: "TEXT",
        data.BYTES: "BLOB",
        data.DECIMAL: "NUMERIC",
        data.DATE: "NUMERIC",
        data.TIME: "NUMERIC",
        data.TIMESTAMP: "NUMERIC",
    },
    MYSQL: {
        data.INT8: "TINYINT",
        data.INT16: "SMALLINT",
        data.INT32: "INT",
        data.INT64: "BIGINT",
        data.FLOAT32: "FLOAT",
        data.FLOAT64: "DOUBLE",
        data.BOOLEAN: "TINYINT",
        data.STRING: "TEXT",
        data.BYTES: "VARBINARY(1024)",
        data.DECIMAL: "DECIMAL(65,{scale})",
        data.DATE: "DATE",
        data.TIME: "TIME(3)",
        data.TIMESTAMP: "DATETIME(3)",
    },
}


def connection_keys() -> list[cd.ConfigKey]:
    """The connection settings both JDBC connectors take, as Confluent's."""
    return [
        cd.ConfigKey(
            "connection.url",
            cd.STRING,
            cd.REQUIRED,
            cd.HIGH,
            "JDBC connection URL, e.g. jdbc:postgresql://localhost:5432/db",
            check=cd.non_empty,
        ),
        cd.ConfigKey("connection.user", cd.STRING, "", cd.HIGH, "JDBC connection user."),
        cd.ConfigKey("connection.password", cd.PASSWORD, "", cd.HIGH, "JDBC password."),
    ]


def check_connection_url(results: dict[str, ConfigValue]) -> dict[str, Any]:
    """Add to ``connection.url``'s errors one for a URL Strom cannot reach; answer each
    key's value."""
    values = {name: result.value for name, result in results.items()}
    url = results["connection.url"]
    if url.errors:
        return values
    try:
        parse_url(str(url.value))
    except JdbcUrlError as exc:
        url.errors.append(f"Invalid value for configuration connection.url: {exc}")
    return values


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
        """Spark JDBC reader options reaching this database. A MariaDB URL is given as
        ``jdbc:mysql:`` (MariaDB's driver takes it), which Spark's MySQL dialect knows
        (backquoted names); with ``jdbc:mariadb:`` Spark would quote names as strings."""
        url = self.url
        if self.kind == MYSQL and url.startswith("jdbc:mariadb:"):
            url = "jdbc:mysql:" + url[len("jdbc:mariadb:") :]
            url += ("&" if "?" in url else "?") + "permitMysqlScheme"
        options = {"url": url, "driver": self.driver}
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

    def column_type(self, schema: data.Schema, key: bool = False) -> str:
        """The SQL type of a column holding ``schema``'s values (Confluent's mapping); a
        string in a MariaDB/MySQL primary key is ``VARCHAR(256)`` (a TEXT cannot be one)."""
        types = _TYPES[self.kind]
        if key and self.kind == MYSQL and schema.type == data.STRING and not schema.name:
            return "VARCHAR(256)"
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
        """A DB-API connection (psycopg, PyMySQL or sqlite3), not in autocommit."""
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
        try:
            import pymysql
        except ImportError:
            raise JdbcUrlError(
                "reaching MariaDB/MySQL from Python needs PyMySQL (pip install pymysql)"
            ) from None
        return pymysql.connect(
            host=self.host,
            port=self.port,
            database=self.name or None,
            user=self.user or "root",
            password=self.password,
            autocommit=False,
        )

    def current_schema(self) -> str:
        """SQL naming the schema an unqualified table is in (the database on MariaDB/MySQL)."""
        return "DATABASE()" if self.kind == MYSQL else "current_schema()"


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
