"""Confluent's JDBC source connector (``io.confluent.connect.jdbc.JdbcSourceConnector``) with
its keys, on Spark: ``connection.url`` / ``connection.user`` / ``connection.password``,
``mode`` (bulk, incrementing, timestamp, timestamp+incrementing),
``incrementing.column.name``, ``timestamp.column.name``, ``table.whitelist`` (or
``table.include.list``), ``table.blacklist`` (or ``table.exclude.list``), ``query``,
``topic.prefix``, ``poll.interval.ms`` and ``batch.max.rows``.

Each poll reads with Spark's JDBC reader: a table's topic is ``<topic.prefix><table>``
(``query``: ``topic.prefix`` itself), each row one record with a null key and a struct
value of the columns in Connect's types (the struct named after the table, as Confluent
names it). Bulk mode copies the whole table at each poll, its read split over Spark tasks
by ranges of an integer column. Incrementing mode reads the rows above the stored offset
up to the column's maximum at the start of the poll (split by ranges of that column);
timestamp modes read the rows whose timestamp is past the offset and before the database's
current time.

Offsets are Confluent's: the source partition
``{"protocol": "1", "table": "<db>.<schema>.<table>"}``
(``{"query": "query"}`` for a query), the offset ``{"incrementing": N}`` and/or
``{"timestamp": millis, "timestamp_nanos": nanos of the second}``, stored by the runner once
the poll's records are acknowledged, so a restarted connector neither repeats nor loses rows.
``batch.max.rows`` is the JDBC fetch size (rows per round trip), bounding what a reader
buffers, as Confluent's bounds its buffer. One task per table at most (``tasks.max``
divides the tables).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from strom.connect import config_def as cd
from strom.connect import data
from strom.connect.api import SourceConnector, Task
from strom.connect.config_def import ConfigValue
from strom.connect.connectors.jdbc_dialects import (
    POSTGRESQL,
    SQLITE,
    Database,
    check_connection_url,
    connection_keys,
    parse_url,
)
from strom.connect.data import Schema
from strom.connect.spark_tasks import SourceBatch, SparkSourceTask

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger(__name__)

BULK, INCREMENTING, TIMESTAMP_MODE, BOTH = (
    "bulk",
    "incrementing",
    "timestamp",
    "timestamp+incrementing",
)
WAIT_STEP_S = 0.1


class JdbcSourceConnector(SourceConnector):
    def exactly_once_support(self, config: Mapping[str, str]) -> bool | None:
        return True  # on Spark, each poll's rows and its offset are one transaction

    CONFIG_DEF = cd.ConfigDef(
        [
            *connection_keys(),
            cd.ConfigKey(
                "mode",
                cd.STRING,
                "",
                cd.HIGH,
                "The mode for updating a table each time it is polled: bulk, incrementing, "
                "timestamp or timestamp+incrementing.",
                check=cd.one_of(BULK, INCREMENTING, TIMESTAMP_MODE, BOTH),
            ),
            cd.ConfigKey(
                "incrementing.column.name",
                cd.STRING,
                "",
                cd.MEDIUM,
                "The name of the strictly incrementing column to use to detect new rows.",
            ),
            cd.ConfigKey(
                "timestamp.column.name",
                cd.LIST,
                "",
                cd.MEDIUM,
                "The names of the timestamp columns to use to detect new or modified rows.",
            ),
            cd.ConfigKey("table.whitelist", cd.LIST, "", cd.MEDIUM, "Tables to copy."),
            cd.ConfigKey("table.include.list", cd.LIST, "", cd.MEDIUM, "As table.whitelist."),
            cd.ConfigKey("table.blacklist", cd.LIST, "", cd.MEDIUM, "Tables not to copy."),
            cd.ConfigKey("table.exclude.list", cd.LIST, "", cd.MEDIUM, "As table.blacklist."),
            cd.ConfigKey("query", cd.STRING, "", cd.MEDIUM, "A query to copy instead of tables."),
            cd.ConfigKey(
                "topic.prefix",
                cd.STRING,
                cd.REQUIRED,
                cd.HIGH,
                "Prefix to prepend to table names to generate the name of the Kafka topic.",
            ),
            cd.ConfigKey(
                "poll.interval.ms",
                cd.INT,
                5000,
                cd.HIGH,
                "Frequency in ms to poll for new data in each table.",
                check=cd.at_least(1),
            ),
            cd.ConfigKey(
                "batch.max.rows",
                cd.INT,
                100,
                cd.LOW,
                "Maximum number of rows to include in a single batch when polling.",
                check=cd.at_least(1),
            ),
        ]
    )

    def validate(self, props: Mapping[str, str]) -> dict[str, ConfigValue]:
        results = super().validate(props)
        values = check_connection_url(results)
        mode = values.get("mode")
        if not mode and not results["mode"].errors:
            results["mode"].errors.append(
                "Invalid value  for configuration mode: String must be one of: bulk, "
                "timestamp, incrementing, timestamp+incrementing"
            )
        if mode in (INCREMENTING, BOTH) and not values.get("incrementing.column.name"):
            results["incrementing.column.name"].errors.append(
                f"Missing configuration incrementing.column.name, required in mode {mode}"
            )
        if mode in (TIMESTAMP_MODE, BOTH) and not values.get("timestamp.column.name"):
            results["timestamp.column.name"].errors.append(
                f"Missing configuration timestamp.column.name, required in mode {mode}"
            )
        tables = values.get("table.whitelist") or values.get("table.include.list")
        if values.get("query") and tables:
            results["query"].errors.append(
                "Invalid configuration query: do not specify table filtering "
                "(table.whitelist) when using a query"
            )
        return results

    def start(self, props: dict[str, str]) -> None:
        self.props = dict(props)
        self.values = self.CONFIG_DEF.parse(props)

    def task_class(self) -> type[Task]:
        return JdbcSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        if self.values["query"]:
            return [dict(self.props)]
        tables = self.values["table.whitelist"] or self.values["table.include.list"]
        if not tables:
            tables = list_tables(database_of(self.values))
        excluded = set(self.values["table.blacklist"] or self.values["table.exclude.list"])
        tables = [t for t in tables if t not in excluded]
        if not tables:
            return []
        count = min(max_tasks, len(tables))
        return [{**self.props, "tables": ",".join(tables[i::count])} for i in range(count)]

    def stop(self) -> None:
        pass


def database_of(values: Mapping[str, Any]) -> Database:
    return parse_url(
        values["connection.url"], values["connection.user"], values["connection.password"]
    )


def list_tables(database: Database) -> list[str]:
    """The tables of the database (its current schema), through a Python connection."""
    connection = database.connect()
    try:
        cursor = connection.cursor()
        if database.kind == SQLITE:
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        else:
            cursor.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                f"AND table_schema = {database.current_schema()} ORDER BY table_name"
            )
        return [row[0] for row in cursor.fetchall()]
    finally:
        connection.close()


class JdbcSourceTask(SparkSourceTask):
    def start(self, props: dict[str, str]) -> None:
        values = JdbcSourceConnector.CONFIG_DEF.parse(props)
        self.database = database_of(values)
        self.mode = values["mode"]
        self.incrementing = values["incrementing.column.name"]
        self.timestamps = values["timestamp.column.name"]
        self.query = values["query"]
        self.prefix = values["topic.prefix"]
        self.poll_interval_s = values["poll.interval.ms"] / 1000
        self.fetch_size = values["batch.max.rows"]
        self.tables = [t for t in props.get("tables", "").split(",") if t]
        self.next_poll = 0.0
        self.not_null: dict[str, set[str]] = {}

    def stop(self) -> None:
        pass

    def poll_batches(self, stopping: Callable[[], bool]) -> list[SourceBatch]:
        while time.monotonic() < self.next_poll:
            if stopping():
                return []
            time.sleep(min(WAIT_STEP_S, self.next_poll - time.monotonic()))
        self.next_poll = time.monotonic() + self.poll_interval_s
        if self.query:
            batch = self.read(f"({self.query}) strom_query", self.prefix, {"query": "query"})
            return [batch] if batch is not None else []
        batches = []
        for table in self.tables:
            partition = {"protocol": "1", "table": self.qualified(table)}
            batch = self.read(self.database.table(table), self.prefix + table, partition, table)
            if batch is not None:
                batches.append(batch)
        return batches

    def qualified(self, table: str) -> str:
        """``<db>.<schema>.<table>``, as Confluent names a table in its source partition."""
        if "." in table or self.database.kind == SQLITE:
            return table
        schema = "public" if self.database.kind == POSTGRESQL else ""
        return ".".join(p for p in (self.database.name, schema, table) if p)

    def reader_options(self) -> dict[str, str]:
        return {**self.database.spark_options(), "fetchsize": str(self.fetch_size)}

    def scalar(self, sql: str) -> Any:
        rows = (
            self.spark.read.format("jdbc")
            .options(**self.reader_options())
            .option("query", sql)
            .load()
            .collect()
        )
        return rows[0][0] if rows else None

    def read(
        self,
        source: str,
        topic: str,
        partition: dict[str, str],
        name: str | None = None,
    ) -> SourceBatch | None:
        offset = self.offsets.offset(partition) or {}
        q = self.database.quote
        conditions: list[str] = []
        new_offset: dict[str, Any] | None = None
        split_column: str | None = None
        bounds: tuple[int, int] | None = None
        if self.mode in (INCREMENTING, BOTH):
            column = q(self.incrementing)
            last = int(offset.get("incrementing", -1))
            top = self.scalar(f"SELECT MAX({column}) FROM {source} s")
            if top is None or int(top) <= last:
                if self.mode == INCREMENTING:
                    return None
            else:
                top = int(top)
                if self.mode == INCREMENTING:
                    conditions.append(f"{column} > {last} AND {column} <= {top}")
                    new_offset = {"incrementing": top}
                    split_column, bounds = self.incrementing, (last + 1, top + 1)
        if self.mode in (TIMESTAMP_MODE, BOTH):
            conditions, new_offset = self.timestamp_window(source, offset)
            if not conditions:
                return None
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        select = f"(SELECT * FROM {source} s{where}) strom_rows"
        options = {**self.reader_options(), "dbtable": select}
        if self.mode == BULK:
            split_column, bounds = self.bulk_split(source, through_driver=name is not None)
        parallelism = self.spark.sparkContext.defaultParallelism
        if split_column is not None and bounds is not None and bounds[1] > bounds[0]:
            options.update(
                partitionColumn=split_column,
                lowerBound=str(bounds[0]),
                upperBound=str(bounds[1]),
                numPartitions=str(max(1, parallelism)),
            )
        rows = self.spark.read.format("jdbc").options(**options).load()
        if self.mode == BOTH and new_offset is not None:
            new_offset = self.last_row_offset(rows)
        required = self.required_columns(name) if name else set()
        schema = connect_schema(rows.schema, name or "query", required)
        return SourceBatch(topic, rows, schema, partition, new_offset)

    def required_columns(self, table: str) -> set[str]:
        """The table's NOT NULL columns (Spark's JDBC reader calls every column nullable;
        Confluent's schema makes these fields required), read with the Python driver."""
        if table in self.not_null:
            return self.not_null[table]
        found: set[str] = set()
        connection = self.database.connect()
        try:
            cursor = connection.cursor()
            if self.database.kind == SQLITE:
                cursor.execute(f"PRAGMA table_info({self.database.quote(table)})")
                found = {row[1] for row in cursor.fetchall() if row[3] or row[5]}
            else:
                schema_name, _, name = table.rpartition(".")
                current = self.database.current_schema()
                cursor.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    f"AND table_schema = COALESCE(NULLIF(%s, ''), {current}) "
                    "AND is_nullable = 'NO'",
                    (name, schema_name),
                )
                found = {row[0] for row in cursor.fetchall()}
        finally:
            connection.close()
        self.not_null[table] = found
        return found

    def bulk_split(
        self, source: str, through_driver: bool
    ) -> tuple[str | None, tuple[int, int] | None]:
        """An integer column to split a bulk read by, and its bounds: asked of a table
        through the Python driver (a round trip, where a Spark job is a scheduled task and
        its Python-to-JVM hops: a tenth of a second on a busy machine), of a query through
        Spark's reader, which alone has seen it work."""
        from pyspark.sql.types import IntegerType, LongType, ShortType

        probe = (
            self.spark.read.format("jdbc")
            .options(**self.reader_options())
            .option("query", f"SELECT * FROM {source} s WHERE 1 = 0")
            .load()
        )
        for field in probe.schema.fields:
            if isinstance(field.dataType, IntegerType | LongType | ShortType):
                q = self.database.quote(field.name)
                sql = f"SELECT MIN({q}), MAX({q}) FROM {source} s"
                if through_driver:
                    connection = self.database.connect()
                    try:
                        cursor = connection.cursor()
                        cursor.execute(sql)
                        low, high = cursor.fetchone()
                        connection.rollback()
                    finally:
                        connection.close()
                else:
                    row = (
                        self.spark.read.format("jdbc")
                        .options(**self.reader_options())
                        .option("query", sql)
                        .load()
                        .collect()[0]
                    )
                    low, high = row[0], row[1]
                if low is None:
                    return None, None
                return field.name, (int(low), int(high) + 1)
        return None, None

    def timestamp_window(
        self, source: str, offset: Mapping[str, Any]
    ) -> tuple[list[str], dict[str, Any] | None]:
        """The conditions selecting rows past the stored timestamp (and id) and before
        the database's time now; in timestamp mode also at most the newest timestamp
        among them, which is the new offset (as Confluent stores the last row's), so a
        row whose timestamp is older than now but newer than that comes next time."""
        now = self.scalar("SELECT CURRENT_TIMESTAMP")
        if now is None:
            return [], None
        millis = offset.get("timestamp")
        nanos = int(offset.get("timestamp_nanos") or 0)
        stamp = "COALESCE(" + ", ".join(self.database.quote(c) for c in self.timestamps) + ")"
        upper = _sql_timestamp(now)
        conditions = [f"{stamp} < {upper}"]
        if millis is not None:
            last = dt.datetime(1970, 1, 1) + dt.timedelta(
                seconds=int(millis) // 1000, microseconds=nanos // 1000
            )
            lower = _sql_timestamp(last)
            if self.mode == BOTH:
                column = self.database.quote(self.incrementing)
                last_id = int(offset.get("incrementing", -1))
                conditions.append(
                    f"({stamp} > {lower} OR ({stamp} = {lower} AND {column} > {last_id}))"
                )
            else:
                conditions.append(f"{stamp} > {lower}")
        if self.mode == BOTH:
            return conditions, _timestamp_offset(now)  # replaced by the last row's
        newest = self.scalar(
            f"SELECT MAX({stamp}) FROM {source} s WHERE {' AND '.join(conditions)}"
        )
        if newest is None:
            return [], None
        conditions[0] = f"{stamp} <= {_sql_timestamp(newest)}"
        return conditions, _timestamp_offset(newest)

    def last_row_offset(self, rows: DataFrame) -> dict[str, Any] | None:
        from pyspark.sql import functions as F

        stamp = F.coalesce(*[F.col(c) for c in self.timestamps])
        last = (
            rows.select(stamp.alias("ts"), F.col(self.incrementing).alias("id"))
            .orderBy(F.desc("ts"), F.desc("id"))
            .limit(1)
            .collect()
        )
        if not last:
            return None
        return {**_timestamp_offset(last[0]["ts"]), "incrementing": int(last[0]["id"])}


def _sql_timestamp(moment: dt.datetime) -> str:
    return f"TIMESTAMP '{moment.replace(tzinfo=None).isoformat(sep=' ')}'"


def _timestamp_offset(moment: dt.datetime) -> dict[str, int]:
    """Confluent's timestamp offset: epoch millis and the nanoseconds of the second."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    epoch = moment - dt.datetime(1970, 1, 1)
    millis = epoch.days * 86_400_000 + epoch.seconds * 1000 + epoch.microseconds // 1000
    return {"timestamp": millis, "timestamp_nanos": moment.microsecond * 1000}


def connect_schema(spark_schema: StructType, name: str, required: set[str] | None = None) -> Schema:
    """The Connect struct of a row of columns, as Confluent's source maps JDBC types; the
    ``required`` columns (NOT NULL) are not optional."""
    required = required or set()
    return Schema.struct(
        [
            (f.name, _connect_type(f.dataType, f.nullable and f.name not in required))
            for f in spark_schema.fields
        ],
        name=name,
    )


def _connect_type(data_type: DataType, nullable: bool) -> Schema:
    from pyspark.sql import types as T

    simple = {
        T.ByteType: data.INT8,
        T.ShortType: data.INT16,
        T.IntegerType: data.INT32,
        T.LongType: data.INT64,
        T.FloatType: data.FLOAT32,
        T.DoubleType: data.FLOAT64,
        T.BooleanType: data.BOOLEAN,
        T.StringType: data.STRING,
        T.BinaryType: data.BYTES,
    }
    for spark_type, connect in simple.items():
        if isinstance(data_type, spark_type):
            return Schema(connect, optional=nullable)
    if isinstance(data_type, T.DecimalType):
        parameters = {
            "scale": str(data_type.scale),
            "connect.decimal.precision": str(data_type.precision),
        }
        return Schema(
            data.BYTES, optional=nullable, name=data.DECIMAL, version=1, parameters=parameters
        )
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        return Schema(data.INT64, optional=nullable, name=data.TIMESTAMP, version=1)
    if isinstance(data_type, T.DateType):
        return Schema(data.INT32, optional=nullable, name=data.DATE, version=1)
    return Schema(data.STRING, optional=nullable)
