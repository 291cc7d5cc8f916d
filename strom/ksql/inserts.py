"""Rows written into a stream or table from outside a query: INSERT INTO ... VALUES and
the rows of ``POST /inserts-stream``, one record each in the source's formats.

Owns ksqlDB's checks of the target (unknown, windowed, read-only source), turning an
INSERT's column list and values, or a JSON row, into the source's columns (names
matched as ksqlDB matches them; ROWTIME as the record's timestamp, else the TIMESTAMP
column's value), and producing the record (acknowledged by all in-sync replicas; one
stamped 0 through ``strom.zero_time``, as librdkafka would stamp it "now"). A
refusal is ``KsqlStatementError`` with ksqlDB's message.

Blocking (confluent-kafka): call from a worker thread. Does not own the formats'
bytes (``strom.ksql.formats``) or the metastore.
"""

from __future__ import annotations

import decimal
from typing import Any

from confluent_kafka import Producer

from strom.ksql import expressions as ex
from strom.ksql import formats
from strom.ksql import statements as st
from strom.ksql.config import KsqlServerConfig
from strom.ksql.kafka_calls import KafkaCallError, produce_and_wait
from strom.ksql.metastore import DataSource, KsqlStatementError, Metastore
from strom.ksql.planner import walk
from strom.ksql.registry_formats import REGISTRY_WRITTEN, RegistryFormats
from strom.zero_time import ZeroTimeError, ZeroTimeRecord, ZeroTimeWriter

ROWTIME = "ROWTIME"


def insertable(metastore: Metastore, target: str) -> DataSource:
    """The source rows may be written into, or ksqlDB's refusal."""
    source = metastore.source(target)
    if source is None:
        raise KsqlStatementError(
            f"Cannot insert values into an unknown stream/table: `{target}`"
            + metastore.alternatives(target)
        )
    if source.is_windowed:
        raise KsqlStatementError("Cannot insert values into windowed stream/table!")
    if source.is_source:
        raise KsqlStatementError(
            f"Cannot insert values into read-only {source.kind.lower()}: {source.name}"
        )
    return source


def _header_refusal(names: list[str]) -> KsqlStatementError:
    return KsqlStatementError("Cannot insert into HEADER columns: " + ", ".join(names))


# pseudo columns INSERT VALUES may not set (ksqlDB's SystemColumns)
NOT_INSERTABLE = ("ROWPARTITION", "ROWOFFSET")


def check_value_count(statement: st.InsertValues) -> None:
    """ksqlDB's parser's refusals (before the target is looked up): a column list and
    values of different lengths; a value naming a column of a source (``FOO.BAR``: no
    source is read)."""
    if statement.columns and len(statement.columns) != len(statement.values):
        raise KsqlStatementError(
            "Failed to prepare statement: Expected number columns and values to match: "
            f"{len(statement.columns)}, {len(statement.values)}"
        )
    for value in statement.values:
        for part in walk(value):
            if isinstance(part, ex.ColumnReference) and part.source is not None:
                raise KsqlStatementError(
                    f"Failed to prepare statement: '{part.source}' is not a valid "
                    "stream/table name or alias."
                )


def statement_values(source: DataSource, statement: st.InsertValues) -> dict[str, ex.Expression]:
    """INSERT VALUES' values by column name (all key and value columns without a list)."""
    headers = [c.name for c in source.columns if c.namespace == "HEADER"]
    if statement.columns:
        names = list(statement.columns)
        for name in names:
            if name in NOT_INSERTABLE:
                raise KsqlStatementError(f"Inserting into column `{name}` is not allowed.")
        if [n for n in names if n in headers]:
            raise _header_refusal([n for n in names if n in headers])
    else:
        if headers:
            raise _header_refusal(headers)
        names = [c.name for c in source.key_columns + source.value_columns]
    if len(names) != len(statement.values):
        raise KsqlStatementError(
            f"Expected a value for each column. Expected Columns: [{', '.join(names)}]. "
            f"Got {len(statement.values)} values"
        )
    return dict(zip(names, statement.values, strict=True))


def _json_expression(value: Any) -> ex.Expression:
    """A JSON value as the literal expression INSERT VALUES would have written."""
    if isinstance(value, list):
        return ex.ArrayConstructor(tuple(_json_expression(v) for v in value))
    if isinstance(value, dict):
        return ex.MapConstructor(
            tuple((ex.Literal(str(k)), _json_expression(v)) for k, v in value.items())
        )
    if isinstance(value, float):
        return ex.Literal(decimal.Decimal(repr(value)))
    return ex.Literal(value)


def _for_type(expression: ex.Expression, sql_type: ex.SqlType) -> ex.Expression:
    """A JSON object meant as a STRUCT (its fields matched case-insensitively)."""
    if isinstance(sql_type, ex.StructType) and isinstance(expression, ex.MapConstructor):
        by_name = {f.name.upper(): f for f in sql_type.fields}
        fields = []
        for key, value in expression.entries:
            name = str(key.value) if isinstance(key, ex.Literal) else ""
            found = next((f for f in sql_type.fields if f.name == name), None)
            found = found or by_name.get(name.upper())
            fields.append((found.name if found else name, _for_type(value, found.type))
                          if found else (name, value))  # fmt: skip
        return ex.StructConstructor(tuple(fields))
    if isinstance(sql_type, ex.ArrayType) and isinstance(expression, ex.ArrayConstructor):
        return ex.ArrayConstructor(tuple(_for_type(i, sql_type.element) for i in expression.items))
    if isinstance(sql_type, ex.MapType) and isinstance(expression, ex.MapConstructor):
        return ex.MapConstructor(
            tuple((k, _for_type(v, sql_type.value)) for k, v in expression.entries)
        )
    return expression


def json_values(source: DataSource, row: Any) -> dict[str, ex.Expression]:
    """A JSON row of ``/inserts-stream`` by column name: a key names a column as written
    or, unquoted, upper-cased, as ksqlDB resolves names."""
    if not isinstance(row, dict):
        raise KsqlStatementError("Each row must be a JSON object")
    values: dict[str, ex.Expression] = {}
    for key, value in row.items():
        name = key if source.column(key) is not None or key == ROWTIME else key.upper()
        column = source.column(name)
        expression = _json_expression(value)
        values[name] = _for_type(expression, column.type) if column is not None else expression
    return values


class RowWriter:
    """Produces rows into sources' topics with one shared producer."""

    def __init__(self, config: KsqlServerConfig, registry: RegistryFormats) -> None:
        self._config = config
        self._producer: Producer | None = None
        self._zero_time: ZeroTimeWriter | None = None  # for ROWTIME 0
        self._registry = registry

    def write(self, source: DataSource, values: dict[str, ex.Expression]) -> None:
        failed = f"Failed to insert values into '{source.name}'."
        try:
            formats.check_supported(source)
            row, timestamp = self._row(source, values)
            if source.key_format in REGISTRY_WRITTEN:
                key = self._registry.serialize(source, "key", source.key_columns, row)
            else:
                key = formats.key_bytes(source, row)
            if source.value_format in REGISTRY_WRITTEN:
                value = self._registry.serialize(source, "value", source.value_columns, row)
            else:
                value = formats.value_bytes(source, row)
        except KsqlStatementError as exc:
            raise KsqlStatementError(f"{failed} {exc}") from None
        if timestamp == 0:  # librdkafka would stamp it with the time of sending
            try:
                self._zero_time_writer().send([ZeroTimeRecord(source.topic, key, value)])
            except (ZeroTimeError, OSError, ConnectionError) as exc:
                raise KsqlStatementError(f"{failed} {exc}") from None
            return
        if self._producer is None:
            # keys placed as Kafka's Java producer (ksqlDB's) places them: murmur2
            settings = {"acks": "all", "linger.ms": 0, "partitioner": "murmur2_random"}
            self._producer = Producer(self._config.client_config(**settings))
        try:
            produce_and_wait(self._producer, source.topic, key, value, timestamp=timestamp or 0)
        except KafkaCallError as exc:
            raise KsqlStatementError(f"{failed} {exc}") from None

    def _zero_time_writer(self) -> ZeroTimeWriter:
        if self._zero_time is None:
            self._zero_time = ZeroTimeWriter(self._config.client_config())
        return self._zero_time

    @staticmethod
    def _row(
        source: DataSource, values: dict[str, ex.Expression]
    ) -> tuple[dict[str, Any], int | None]:
        row: dict[str, Any] = {}
        timestamp = None
        for name, expression in values.items():
            if name == ROWTIME:
                timestamp = formats.coerce(expression, ex.PrimitiveType("BIGINT"), name)
                continue
            column = source.column(name)
            if column is None:
                raise KsqlStatementError(f"Column name `{name}` does not exist.")
            if column.namespace == "HEADER":
                raise _header_refusal([name])
            row[name] = formats.coerce(expression, column.type, name)
        if timestamp is None and isinstance(row.get(source.timestamp_column or ""), int):
            timestamp = row[source.timestamp_column or ""]
        return row, timestamp

    def close(self) -> None:
        if self._zero_time is not None:
            self._zero_time.close()
        if self._producer is not None:
            self._producer.flush(30)
