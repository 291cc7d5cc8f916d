"""The metastore: the streams, tables and custom types a ksql server knows, built from
the DDL statements it accepted (kept in the command topic and replayed at start).

Owns ``DataSource`` (a stream's or table's name, columns with KEY / PRIMARY KEY /
HEADERS, topic, key and value formats, timestamp column and format, window, the
statement that made it), turning a CREATE STREAM/TABLE statement into one with
ksqlDB's checks and messages (``source_from_statement``), ALTER ... ADD COLUMN
(``altered``), resolving custom types in column types, and adding and dropping sources
and types (``Metastore``). Pure: no
I/O; an invalid statement raises ``KsqlStatementError`` with ksqlDB's message.

Does not own the command topic, topics in the cluster, or the REST shapes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import statements as st
from strom.ksql.values import base

KEY_FORMATS = ("KAFKA", "JSON", "JSON_SR", "AVRO", "PROTOBUF", "PROTOBUF_NOSR", "DELIMITED", "NONE")
VALUE_FORMATS = ("JSON", "JSON_SR", "AVRO", "PROTOBUF", "PROTOBUF_NOSR", "DELIMITED", "KAFKA")
# The WITH properties of CREATE STREAM/TABLE, ksqlDB's CommonCreateConfigs and its
# source-only ones.
CREATE_PROPERTIES = frozenset(
    {
        "KAFKA_TOPIC",
        "PARTITIONS",
        "REPLICAS",
        "RETENTION_MS",
        "KEY_FORMAT",
        "VALUE_FORMAT",
        "FORMAT",
        "TIMESTAMP",
        "TIMESTAMP_FORMAT",
        "WRAP_SINGLE_VALUE",
        "VALUE_DELIMITER",
        "KEY_DELIMITER",
        "KEY_SCHEMA_ID",
        "VALUE_SCHEMA_ID",
        "KEY_SCHEMA_FULL_NAME",
        "VALUE_SCHEMA_FULL_NAME",
        "VALUE_AVRO_SCHEMA_FULL_NAME",
        "KEY_PROTOBUF_NULLABLE_REPRESENTATION",
        "VALUE_PROTOBUF_NULLABLE_REPRESENTATION",
        "WINDOW_TYPE",
        "WINDOW_SIZE",
        "SOURCE_CONNECTOR",
        "CLEANUP_POLICY",
    }
)
WINDOW_TYPES = ("TUMBLING", "HOPPING", "SESSION")
_PROTOBUF_NULLABLES = ("OPTIONAL", "WRAPPER")
_KAFKA_KEY_TYPES = ("INTEGER", "BIGINT", "DOUBLE", "STRING", "BYTES")
_LINE = "\n"


# Columns every source has (ksqlDB's system columns): no source or query may name one
SYSTEM_COLUMNS = frozenset({"ROWTIME", "ROWPARTITION", "ROWOFFSET", "WINDOWSTART", "WINDOWEND"})
_HEADERS_TYPE = "ARRAY<STRUCT<`KEY` STRING, `VALUE` BYTES>>"


class KsqlStatementError(Exception):
    """A statement ksqlDB would refuse; ``str()`` is its message."""


@dataclass(frozen=True)
class Column:
    name: str
    type: ex.SqlType
    namespace: str = "VALUE"  # KEY, VALUE or HEADER
    header_key: str | None = None  # HEADER('key'); None with HEADER: all headers

    def field_json(self) -> dict[str, Any]:
        """ksqlDB's ``FieldInfo``."""
        info: dict[str, Any] = {"name": self.name, "schema": self.type.schema_json()}
        if self.namespace != "VALUE":
            info["type"] = self.namespace
        if self.header_key is not None:
            info["headerKey"] = self.header_key
        return info


@dataclass(frozen=True)
class DataSource:
    kind: str  # STREAM or TABLE
    name: str
    columns: tuple[Column, ...]
    topic: str
    key_format: str
    value_format: str
    statement: str  # the CREATE statement's text
    timestamp_column: str | None = None
    timestamp_format: str | None = None
    window_type: str | None = None
    window_size_ms: int | None = None
    is_source: bool = False  # CREATE SOURCE TABLE/STREAM: read-only, materialized
    query_sink: bool = False  # made by CREATE ... AS SELECT (ksqlDB's CAS target)
    wrap_single_value: bool | None = None
    value_delimiter: str | None = None
    key_delimiter: str | None = None
    properties: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def key_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.namespace == "KEY")

    @property
    def value_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.namespace == "VALUE")

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    @property
    def is_windowed(self) -> bool:
        return self.window_type is not None


def _format_name(value: Any, allowed: tuple[str, ...]) -> str:
    text = str(value).strip().upper()
    if text not in allowed:
        raise KsqlStatementError(f"Unknown format: {value}")
    return text


def _formats(properties: dict[str, Any], defaults: tuple[str, str | None]) -> tuple[str, str]:
    both = properties.get("FORMAT")
    if both is not None and "VALUE_FORMAT" in properties:
        raise KsqlStatementError(
            "Cannot supply both 'VALUE_FORMAT' and 'FORMAT' properties, as 'FORMAT' sets both "
            "key and value formats. Either use just 'FORMAT', or use 'KEY_FORMAT' and "
            "'VALUE_FORMAT'."
        )
    if both is not None and "KEY_FORMAT" in properties:
        raise KsqlStatementError(
            "Cannot supply both 'KEY_FORMAT' and 'FORMAT' properties, as 'FORMAT' sets both "
            "key and value formats. Either use just 'FORMAT', or use 'KEY_FORMAT' and "
            "'VALUE_FORMAT'."
        )
    value = both if both is not None else properties.get("VALUE_FORMAT", defaults[1])
    if value is None:
        raise KsqlStatementError(
            "Statement is missing the 'VALUE_FORMAT' property from the WITH clause. Either "
            "provide one or set a default via the 'ksql.persistence.default.format.value' "
            "config."
        )
    key = both if both is not None else properties.get("KEY_FORMAT", defaults[0])
    return (
        _format_name(key, KEY_FORMATS),
        _format_name(value, VALUE_FORMATS),
    )


_MAP_KEY_REFUSALS = {  # a format that writes maps as objects: ksqlDB's message
    "JSON": "JSON only supports MAP types with STRING keys",
    "JSON_SR": "JSON only supports MAP types with STRING keys",
    "AVRO": "Avro only supports MAPs with STRING keys",
    "PROTOBUF": "PROTOBUF format only supports MAP types with STRING keys",
    "PROTOBUF_NOSR": "PROTOBUF format only supports MAP types with STRING keys",
}


def _non_string_map_key(sql_type: ex.SqlType) -> bool:
    if isinstance(sql_type, ex.MapType):
        return str(sql_type.key) != "STRING" or _non_string_map_key(sql_type.value)
    if isinstance(sql_type, ex.ArrayType):
        return _non_string_map_key(sql_type.element)
    if isinstance(sql_type, ex.StructType):
        return any(_non_string_map_key(f.type) for f in sql_type.fields)
    return False


def check_protobuf_nullable(props: dict[str, Any]) -> None:
    """KEY_ / VALUE_PROTOBUF_NULLABLE_REPRESENTATION, if given, OPTIONAL or WRAPPER (any
    case; a format other than PROTOBUF and PROTOBUF_NOSR leaves it unused, as ksqlDB)."""
    for side in ("KEY", "VALUE"):
        name = f"{side}_PROTOBUF_NULLABLE_REPRESENTATION"
        given = props.get(name)
        if given is not None and str(given).upper() not in _PROTOBUF_NULLABLES:
            raise KsqlStatementError(
                f"Invalid value {given} for configuration {name}: String must be one of: "
                + ", ".join(_PROTOBUF_NULLABLES)
            )


def check_serde_shapes(
    key_format: str,
    key_columns: Sequence[Column],
    value_format: str,
    value_columns: Sequence[Column],
    wrap_single_value: bool | None,
) -> None:
    """ksqlDB's refusals of columns a side's format cannot write as declared: a MAP with
    keys other than STRING in a format that writes maps as objects, WRAP_SINGLE_VALUE
    with more than one value column."""
    for fmt, columns in ((key_format, key_columns), (value_format, value_columns)):
        refusal = _MAP_KEY_REFUSALS.get(fmt)
        if refusal is not None and any(_non_string_map_key(c.type) for c in columns):
            raise KsqlStatementError(refusal)
    if wrap_single_value is not None and len(value_columns) > 1:
        raise KsqlStatementError("'WRAP_SINGLE_VALUE' is only valid for single-field value schemas")


def _holds_map(sql_type: ex.SqlType) -> bool:
    if isinstance(sql_type, ex.MapType):
        return True
    if isinstance(sql_type, ex.ArrayType):
        return _holds_map(sql_type.element)
    if isinstance(sql_type, ex.StructType):
        return any(_holds_map(f.type) for f in sql_type.fields)
    return False


def refuse_map_keys(key_columns: Sequence[Column]) -> None:
    """ksqlDB's refusal of a key column that is or holds a MAP (its serialized order is
    not stable, so equal keys could differ)."""
    for column in key_columns:
        if _holds_map(column.type):
            raise KsqlStatementError(
                "Map keys, including types that contain maps, are not supported as they may "
                "lead to unexpected behavior due to inconsistent serialization. Key column "
                f"name: `{column.name}`. Column type: {column.type}. See "
                "https://github.com/confluentinc/ksql/issues/6621 for more."
            )


class Metastore:
    """Streams, tables and custom types by name."""

    def __init__(self) -> None:
        self.sources: dict[str, DataSource] = {}
        self.types: dict[str, ex.SqlType] = {}

    # ---- types
    def resolve(self, sql_type: ex.SqlType) -> ex.SqlType:
        """``sql_type`` with every custom type replaced by what it names."""
        if isinstance(sql_type, ex.TypeReference):
            found = self.types.get(sql_type.name.upper()) or self.types.get(sql_type.name)
            if found is None:
                raise KsqlStatementError(f"Unknown type: {sql_type.name}")
            return found
        if isinstance(sql_type, ex.ArrayType):
            return ex.ArrayType(self.resolve(sql_type.element))
        if isinstance(sql_type, ex.MapType):
            return ex.MapType(self.resolve(sql_type.key), self.resolve(sql_type.value))
        if isinstance(sql_type, ex.StructType):
            return ex.StructType(
                tuple(ex.StructField(f.name, self.resolve(f.type)) for f in sql_type.fields)
            )
        return sql_type

    def register_type(self, statement: st.CreateType) -> str | None:
        """Adds the type; the message of a skipped IF NOT EXISTS, else None."""
        existing = self.types.get(statement.name)
        if existing is not None:
            message = (
                f"Cannot register custom type '{statement.name}' since it is already "
                f"registered with type: {existing}"
            )
            if statement.if_not_exists:
                return message
            raise KsqlStatementError(message)
        self.types[statement.name] = self.resolve(statement.type)
        return None

    def drop_type(self, statement: st.DropType) -> bool:
        """Whether the type was there (and is gone now)."""
        if statement.name not in self.types:
            if statement.if_exists:
                return False
            raise KsqlStatementError(f"Type {statement.name} does not exist.")
        del self.types[statement.name]
        return True

    # ---- sources
    def source(self, name: str) -> DataSource | None:
        return self.sources.get(name)

    def alternatives(self, name: str, kind: str | None = None) -> str:
        """ksqlDB's hint after "unknown source" errors: the sources (of ``kind``, if
        given) whose names differ from ``name`` only in case, "" when there are none."""
        found = sorted(
            (s for s in self.sources.values() if s.name.lower() == name.lower()),
            key=lambda s: s.name,
        )
        if kind is not None:
            found = [s for s in found if s.kind == kind.upper()]
        if not found:
            return ""
        if len(found) == 1:
            only = found[0].name
            if any(c.islower() for c in only):
                return (
                    f'\nDid you mean "{only}"? Hint: wrap the source name in double quotes to '
                    "make it case-sensitive."
                )
            return f"\nDid you mean {only}? Hint: try removing double quotes from the source name."
        listed = [f'"{s.name}" ({s.kind})' for s in found]
        joined = ", ".join(listed[:-1]) + ("," if len(listed) > 2 else "") + " or " + listed[-1]
        return (
            f"\nDid you mean {joined}? Hint: wrap the source name in double quotes to make it "
            "case-sensitive."
        )

    def check_can_add(self, source: DataSource, or_replace: bool) -> None:
        existing = self.sources.get(source.name)
        if or_replace and source.is_source:  # ksqlDB refuses it even for a new name
            raise KsqlStatementError(
                f"Cannot add {source.kind.lower()} '{source.name}': CREATE OR REPLACE is not "
                f"supported on source {source.kind.lower()}s."
            )
        if existing is None:
            return
        if not or_replace:
            raise KsqlStatementError(
                f"Cannot add {source.kind.lower()} '{source.name}': A "
                f"{existing.kind.lower()} with the same name already exists"
            )
        if existing.kind != source.kind:
            raise KsqlStatementError(
                f"Cannot add {source.kind.lower()} '{source.name}': A "
                f"{existing.kind.lower()} with the same name already exists"
            )
        if existing.is_source or source.is_source:
            raise KsqlStatementError(
                f"Cannot add {source.kind.lower()} '{source.name}': CREATE OR REPLACE is not "
                f"supported on source {source.kind.lower()}s."
            )

    def put_source(self, source: DataSource) -> None:
        self.sources[source.name] = source

    def droppable(self, statement: st.DropSource) -> DataSource | None:
        """The source DROP would remove, None when IF EXISTS finds none; ksqlDB's error
        when it cannot."""
        existing = self.sources.get(statement.name)
        if existing is None:
            if statement.if_exists:
                return None
            raise KsqlStatementError(
                f"{statement.kind.capitalize()} {statement.name} does not exist."
                + self.alternatives(statement.name, statement.kind)
            )
        if existing.kind != statement.kind:
            raise KsqlStatementError(
                f"Incompatible data source type is {existing.kind.lower()}, but statement was "
                f"DROP {statement.kind}"
            )
        return existing

    def altered(self, statement: st.AlterSource, text: str) -> DataSource:
        """The source ``statement`` (ALTER STREAM|TABLE ... ADD COLUMN) makes: the new
        columns added after the value columns, checked as ksqlDB checks them; ``text``
        becomes the source's statement, as ksqlDB keeps the ALTER's."""
        existing = self.sources.get(statement.name)
        kind = statement.kind.lower()
        if existing is None:
            raise KsqlStatementError(f"Source {statement.name} does not exist.")
        if existing.is_source:
            raise KsqlStatementError(
                f"Cannot alter {kind} '{statement.name}': ALTER operations are not supported "
                f"on source {kind}s."
            )
        if existing.kind != statement.kind:
            raise KsqlStatementError(
                f"Incompatible data source type is {existing.kind}, but statement was "
                f"ALTER {statement.kind}"
            )
        if existing.query_sink:
            raise KsqlStatementError("ALTER command is not supported for CREATE ... AS statements.")
        columns = list(existing.columns)
        for element in statement.columns:
            if any(c.name == element.name for c in columns):
                raise KsqlStatementError(
                    f"Cannot add column `{element.name}` to schema. A column with the same "
                    "name already exists."
                )
            columns.append(Column(element.name, self.resolve(element.type)))
        return replace(existing, columns=tuple(columns), statement=text)

    def remove_source(self, name: str) -> None:
        self.sources.pop(name, None)

    def source_from_statement(
        self,
        statement: st.CreateSource,
        text: str,
        default_formats: tuple[str, str | None] = ("KAFKA", None),
    ) -> DataSource:
        """The stream or table ``statement`` declares, checked as ksqlDB checks it."""
        props = statement.properties
        unknown = sorted(set(props) - CREATE_PROPERTIES)
        if unknown:
            raise KsqlStatementError(f"Invalid config variable(s) in the WITH clause: {unknown[0]}")
        check_delimiters(props)
        topic = props.get("KAFKA_TOPIC")
        if topic is None:
            raise KsqlStatementError(
                'Missing required property "KAFKA_TOPIC" which has no default value.'
            )
        named_value = props.get("FORMAT", props.get("VALUE_FORMAT"))
        if named_value is not None and str(named_value).strip().upper() == "NONE":
            values = [e for e in statement.elements if not e.is_key and e.constraint is None]
            if values:  # NONE holds no value columns
                raise KsqlStatementError(
                    "The 'NONE' format can only be used when no columns are defined. Got: ["
                    + ", ".join(f"`{e.name}` {self.resolve(e.type)}" for e in values)
                    + "]"
                )
        key_format, value_format = _formats(props, default_formats)
        check_format_settings(props, key_format, value_format)
        columns = self._columns(statement)
        key_columns = [c for c in columns if c.namespace == "KEY"]
        value_columns = [c for c in columns if c.namespace == "VALUE"]
        refuse_map_keys(key_columns)
        if statement.kind == "TABLE" and not key_columns and statement.elements:
            raise KsqlStatementError("Tables require a PRIMARY KEY. Please define the PRIMARY KEY.")
        if not columns:  # those of the registry's formats are inferred before
            if value_format in ("AVRO", "PROTOBUF", "JSON_SR"):
                raise KsqlStatementError("The statement does not define any columns.")
            raise KsqlStatementError("No columns supplied.")
        if key_columns and key_format == "NONE":
            raise KsqlStatementError(
                "The 'NONE' format can only be used when no columns are defined. Got: ["
                + ", ".join(f"`{c.name}` {c.type} KEY" for c in key_columns)
                + "]"
            )
        if key_format in ("KAFKA", "DELIMITED") or value_format in ("KAFKA", "DELIMITED"):
            self._check_primitive_formats(key_format, value_format, key_columns, value_columns)
        if key_format == "KAFKA" and len(key_columns) > 1:
            reason = (
                "The 'KAFKA' format only supports a single field. Got: ["
                + ", ".join(f"`{c.name}` {c.type} KEY" for c in key_columns)
                + "]"
            )
            raise KsqlStatementError(serde_refusal("key", "KAFKA", key_columns, reason))
        timestamp = props.get("TIMESTAMP")
        timestamp_format = props.get("TIMESTAMP_FORMAT")
        if timestamp is not None:
            timestamp = str(timestamp).strip("`").upper() if timestamp else None
            found = next((c for c in columns if c.name == timestamp), None)
            if found is None:
                raise KsqlStatementError(
                    "The TIMESTAMP column set in the WITH clause does not exist in the schema: "
                    f"'{timestamp}'"
                )
            kind = str(found.type)
            if kind not in ("BIGINT", "TIMESTAMP") and not (kind == "STRING" and timestamp_format):
                raise KsqlStatementError(
                    f"Timestamp column, `{timestamp}`, should be LONG(INT64), TIMESTAMP, or a "
                    "String with a timestamp_format specified."
                )
        window_type = props.get("WINDOW_TYPE")
        window_size = None
        if window_type is not None:
            window_type = str(window_type).upper()
            if window_type not in WINDOW_TYPES:
                raise KsqlStatementError(f"Unknown window type: {props['WINDOW_TYPE']}")
            window_size = _window_size(props.get("WINDOW_SIZE"), window_type)
            if not key_columns:
                raise KsqlStatementError("Windowed sources require a key column.")
        wrap = props.get("WRAP_SINGLE_VALUE")
        if wrap is not None and not isinstance(wrap, bool):
            raise KsqlStatementError(
                f"Invalid value {wrap} for property WRAP_SINGLE_VALUE: Expected a BOOLEAN"
            )
        if wrap is True and value_format in ("DELIMITED", "KAFKA"):
            raise KsqlStatementError(
                f"Format '{value_format}' does not support 'WRAP_SINGLE_VALUE' set to 'true'."
            )
        if wrap is False and value_format in ("PROTOBUF", "PROTOBUF_NOSR"):
            raise KsqlStatementError(
                f"Format '{value_format}' does not support 'WRAP_SINGLE_VALUE' set to 'false'."
            )
        check_protobuf_nullable(props)
        check_serde_shapes(key_format, key_columns, value_format, value_columns, wrap)
        return DataSource(
            kind=statement.kind,
            name=statement.name,
            columns=tuple(columns),
            topic=str(topic),
            key_format=key_format,
            value_format=value_format,
            statement=text,
            timestamp_column=timestamp,
            timestamp_format=str(timestamp_format) if timestamp_format else None,
            window_type=window_type,
            window_size_ms=window_size,
            is_source=statement.is_source,
            wrap_single_value=wrap,
            value_delimiter=_delimiter(props.get("VALUE_DELIMITER")),
            key_delimiter=_delimiter(props.get("KEY_DELIMITER")),
            properties=dict(props),
        )

    def _columns(self, statement: st.CreateSource) -> list[Column]:
        columns: list[Column] = []
        seen: set[str] = set()
        for element in statement.elements:
            if element.name.upper() in SYSTEM_COLUMNS:
                raise KsqlStatementError(
                    f"'{element.name}' is a reserved column name. You cannot use it as a name "
                    "for a column."
                )
            if element.name in seen:
                raise KsqlStatementError(f"Duplicate column names: `{element.name}`")
            seen.add(element.name)
            self._check_constraint(statement.kind, element)
            sql_type = self.resolve(element.type)
            if element.is_key:
                columns.append(Column(element.name, sql_type, "KEY"))
            elif element.constraint == "HEADERS":
                if str(sql_type) != _HEADERS_TYPE:
                    raise KsqlStatementError(
                        f"Invalid type for HEADERS column: expected {_HEADERS_TYPE}, got {sql_type}"
                    )
                columns.append(Column(element.name, sql_type, "HEADER"))
            elif element.constraint is not None:  # HEADER('key')
                key = element.constraint[len("HEADER('") : -2]
                if str(sql_type) != "BYTES":
                    raise KsqlStatementError(
                        f"Invalid type for HEADER('{key}') column: expected BYTES, got {sql_type}"
                    )
                columns.append(Column(element.name, sql_type, "HEADER", key))
            else:
                columns.append(Column(element.name, sql_type))
        return columns

    @staticmethod
    def _check_constraint(kind: str, element: st.TableElement) -> None:
        tail = (
            _LINE
            + "Tables have PRIMARY KEYs, which are unique and NON NULL."
            + _LINE
            + "Streams have KEYs, which have no uniqueness or NON NULL constraints."
        )
        if kind == "TABLE" and element.constraint == "KEY":
            raise KsqlStatementError(
                f"Column `{element.name}` is a 'KEY' column: please use 'PRIMARY KEY' for "
                "tables." + tail
            )
        if kind == "STREAM" and element.constraint == "PRIMARY KEY":
            raise KsqlStatementError(
                f"Column `{element.name}` is a 'PRIMARY KEY' column: please use 'KEY' for "
                "streams." + tail
            )

    @staticmethod
    def _check_primitive_formats(
        key_format: str, value_format: str, keys: list[Column], values: list[Column]
    ) -> None:
        for fmt, columns, what in ((key_format, keys, "key"), (value_format, values, "value")):
            reason = primitive_format_refusal(fmt, columns, what)
            if reason is not None:
                raise KsqlStatementError(serde_refusal(what, fmt, columns, reason))


def primitive_format_refusal(fmt: str, columns: list[Column], what: str) -> str | None:
    """Why ``fmt`` (KAFKA or DELIMITED) cannot hold ``columns`` (one side's), or None."""
    if fmt == "KAFKA":
        if what == "value" and len(columns) > 1:
            return (
                "The 'KAFKA' format only supports a single field. Got: ["
                + ", ".join(f"`{c.name}` {c.type}" for c in columns)
                + "]"
            )
        for column in columns:
            if str(column.type) not in _KAFKA_KEY_TYPES:  # its base type, as ksqlDB names it
                return f"The 'KAFKA' format does not support type '{base(column.type)}'"
    if fmt == "DELIMITED":
        for column in columns:
            if isinstance(column.type, ex.ArrayType | ex.MapType | ex.StructType):
                return (
                    f"The 'DELIMITED' format does not support type '{base(column.type)}', "
                    f"column: `{column.name}`"
                )
    return None


def serde_refusal(what: str, fmt: str, columns: Sequence[Column], reason: str) -> str:
    """ksqlDB's message for a side (``key`` or ``value``) its format cannot write: the
    format, the side's columns and the reason."""
    shown = ", ".join(f"`{c.name}` {c.type}{' KEY' if what == 'key' else ''}" for c in columns)
    return (
        f"{what.capitalize()} format does not support schema.\nformat: {fmt}\n"
        f"schema: Persistence{{columns=[{shown}], features=[]}}\nreason: {reason}"
    )


# WINDOW_SIZE's units: Java's TimeUnit names (a missing final S is added), in nanoseconds
_DURATION_UNITS_NS = {
    "NANOSECONDS": 1,
    "MICROSECONDS": 1_000,
    "MILLISECONDS": 1_000_000,
    "SECONDS": 1_000_000_000,
    "MINUTES": 60_000_000_000,
    "HOURS": 3_600_000_000_000,
    "DAYS": 86_400_000_000_000,
}


def _window_size(value: Any, window_type: str) -> int | None:
    if window_type == "SESSION":
        if value is not None:
            raise KsqlStatementError("'WINDOW_SIZE' should not be set for SESSION windows.")
        return None
    if value is None:
        raise KsqlStatementError(
            f"{window_type} windows require 'WINDOW_SIZE' to be provided in the WITH clause. "
            "For example: 'WINDOW_SIZE'='10 SECONDS'"
        )
    text = str(value)
    try:
        return _duration_ms(text)
    except ValueError as exc:
        raise KsqlStatementError(
            f"Configuration WINDOW_SIZE is invalid: Invalid duration: '{text}'. {exc}"
        ) from None


def _duration_ms(text: str) -> int:
    """``'10 SECONDS'`` in milliseconds, read as ksqlDB reads a duration: two parts split
    at each blank, a whole number and a unit."""
    parts = re.split(r"\s", text)
    if len(parts) != 2:
        raise ValueError(f"Expected 2 tokens, got: {len(parts)}")
    amount, unit = parts
    if not re.fullmatch(r"[+-]?[0-9]+", amount):
        raise ValueError(f"Not numeric: '{amount}'")
    unit = unit.upper()
    nanos = _DURATION_UNITS_NS.get(unit if unit.endswith("S") else unit + "S")
    if nanos is None:
        raise ValueError(
            f"Unknown time unit: '{unit}'\nSupported time units are: "
            + ", ".join(_DURATION_UNITS_NS)
        )
    return int(amount) * nanos // 1_000_000


def _delimiter(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    named = {"TAB": "\t", "SPACE": " "}
    return named.get(text.upper(), text)


def check_delimiters(properties: dict[str, Any]) -> None:
    """KEY_DELIMITER and VALUE_DELIMITER as ksqlDB reads them while it prepares the
    statement: one character, or TAB or SPACE by name."""
    for name in ("KEY_DELIMITER", "VALUE_DELIMITER"):
        value = properties.get(name)
        if value is None:
            continue
        text = str(value)
        if not text.strip():
            reason = (
                "Delimiter cannot be empty, if you meant to have a tab or space for delimiter, "
                "please use the special values 'TAB' or 'SPACE'"
            )
        elif len(text) == 1 or text in ("TAB", "SPACE"):
            continue
        else:
            reason = (
                f"Invalid delimiter value: '{text}'. Delimiter must be a single character or "
                "TAB,SPACE"
            )
        raise KsqlStatementError(
            f"Failed to prepare statement: Configuration {name} is invalid: {reason}\n"
            "Example valid value: ';'"
        )


# The format settings each format takes (ksqlDB's names for them in its messages)
_FORMAT_SETTINGS = {
    "DELIMITED": {"delimiter"},
    "AVRO": {"fullSchemaName", "schemaId"},
    "PROTOBUF": {"fullSchemaName", "schemaId"},
    "JSON_SR": {"fullSchemaName", "schemaId"},
}


def check_format_settings(properties: dict[str, Any], key_format: str, value_format: str) -> None:
    """A delimiter, schema full name or schema id given for a format that takes none
    (``JSON does not support the following configs: [delimiter]``), or given empty."""
    for side, fmt in (("KEY", key_format), ("VALUE", value_format)):
        given: dict[str, Any] = {}
        if properties.get(f"{side}_DELIMITER") is not None:
            given["delimiter"] = properties[f"{side}_DELIMITER"]
        full_name = properties.get(f"{side}_SCHEMA_FULL_NAME")
        if full_name is None and side == "VALUE":
            full_name = properties.get("VALUE_AVRO_SCHEMA_FULL_NAME")
        if full_name is not None:
            given["fullSchemaName"] = full_name
        if properties.get(f"{side}_SCHEMA_ID") is not None:
            given["schemaId"] = properties[f"{side}_SCHEMA_ID"]
        unsupported = [k for k in given if k not in _FORMAT_SETTINGS.get(fmt, set())]
        if unsupported:
            raise KsqlStatementError(
                f"{fmt} does not support the following configs: [{', '.join(unsupported)}]"
            )
        for key, value in given.items():
            if not str(value).strip():
                shown = ", ".join(f"{k}={str(v).strip()}" for k, v in given.items())
                raise KsqlStatementError(
                    f"{key} cannot be empty. Format configuration: {{{shown}}}"
                )
