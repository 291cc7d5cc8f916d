"""Debezium's change events for PostgreSQL tables, in Connect's data model: each table's
key schema (its primary key's columns, ``<prefix>.<schema>.<table>.Key``), value schema
(every column, ``...Value``) and envelope schema (``...Envelope``, version 2: ``before``,
``after``, ``source``, ``transaction``, ``op``, ``ts_ms``, ``ts_us``, ``ts_ns``), the
source block (``io.debezium.connector.postgresql.Source``), and the conversion of each
column's text (what pgoutput and the snapshot's query send) into Debezium's value.

Types as Debezium maps them with ``time.precision.mode=adaptive``: int2/int4/int8 as
int16/int32/int64, oid as int64, float4/float8, bool, text/varchar/char/name as string,
numeric by ``decimal.handling.mode`` (``precise``: Connect's Decimal with its scale and
``connect.decimal.precision``, or ``io.debezium.data.VariableScaleDecimal`` for a numeric
without a declared scale; ``double``; ``string``), money likewise (a Decimal of
``money.fraction.digits``), date as ``io.debezium.time.Date`` (days), time as ``Time`` (ms,
precision <= 3) or ``MicroTime`` (us), timestamp as ``Timestamp`` (ms) or
``MicroTimestamp`` (us), timestamptz as ``ZonedTimestamp`` (ISO-8601 in UTC), interval by
``interval.handling.mode`` (``MicroDuration``, a month 365.25 / 12 days, or its ISO 8601
text), bytea by ``binary.handling.mode`` (bytes, base64, hex), json/jsonb as
``io.debezium.data.Json``, uuid as ``io.debezium.data.Uuid``, xml as
``io.debezium.data.Xml``, an enum as ``io.debezium.data.Enum`` with its labels
(``allowed``), a domain as its base type, and arrays of those (one-dimensional; a
multi-dimensional one flattened) as Connect arrays of optional elements. Any other type is
its text as a string (Debezium maps geometry, ranges and the like to types of its own, or
skips unknown types). A NOT NULL column is a required field; a value the change does not
carry (a delete's non-key columns under the default replica identity) is the type's zero,
as Debezium fills it; an unchanged TOASTed value is ``__debezium_unavailable_value`` (its
bytes for binary).

Does not own reading the changes (``postgres_cdc_decoder``, ``postgres_cdc_stream``) or
which tables are captured (``postgres_cdc``).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from functools import partial
from time import time_ns
from typing import Any

from strom.connect import data
from strom.connect.api import strom_version
from strom.connect.data import Schema, Struct

CONNECTOR = "postgresql"
UNAVAILABLE = "__debezium_unavailable_value"
SOURCE_SCHEMA_NAME = "io.debezium.connector.postgresql.Source"
ENUM = "io.debezium.data.Enum"
SNAPSHOT_VALUES = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
PRECISE, DOUBLE, STRING_MODE = "precise", "double", "string"
BYTES_MODE, BASE64_MODE, HEX_MODE = "bytes", "base64", "hex"
NUMERIC_MODE = "numeric"
DAYS_PER_MONTH = 365.25 / 12  # Debezium's MicroDuration: an average month

# PostgreSQL's type oids (pg_type.dat)
BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
JSON, XML, FLOAT4, FLOAT8, BPCHAR, VARCHAR = 114, 142, 700, 701, 1042, 1043
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, NUMERIC, UUID, JSONB = 1082, 1083, 1114, 1184, 1700, 2950, 3802
MONEY, INTERVAL = 790, 1186
# each array type's element type
ARRAY_ELEMENTS = {
    1000: BOOL, 1001: BYTEA, 1005: INT2, 1007: INT4, 1016: INT8, 1028: OID, 1009: TEXT,
    1014: BPCHAR, 1015: VARCHAR, 1021: FLOAT4, 1022: FLOAT8, 1231: NUMERIC, 2951: UUID,
    1182: DATE, 1183: TIME, 1115: TIMESTAMP, 1185: TIMESTAMPTZ, 199: JSON, 3807: JSONB,
    791: MONEY,
}  # fmt: skip

_EPOCH = datetime(1970, 1, 1)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_MICRO = timedelta(microseconds=1)
_INT64_MAX = 2**63 - 1


def _optional(schema: Schema, optional: bool) -> Schema:
    return Schema(
        schema.type,
        optional=optional,
        name=schema.name,
        version=schema.version,
        doc=schema.doc,
        parameters=schema.parameters,
        fields=schema.fields,
    )


SOURCE_SCHEMA = Schema(
    data.STRUCT,
    name=SOURCE_SCHEMA_NAME,
    version=1,
    fields=Schema.struct(
        [
            ("version", Schema(data.STRING)),
            ("connector", Schema(data.STRING)),
            ("name", Schema(data.STRING)),
            ("ts_ms", Schema(data.INT64)),
            (
                "snapshot",
                Schema(
                    data.STRING,
                    optional=True,
                    default="false",
                    name=ENUM,
                    version=1,
                    parameters={"allowed": SNAPSHOT_VALUES},
                ),
            ),
            ("db", Schema(data.STRING)),
            ("sequence", Schema(data.STRING, optional=True)),
            ("ts_us", Schema(data.INT64, optional=True)),
            ("ts_ns", Schema(data.INT64, optional=True)),
            ("schema", Schema(data.STRING)),
            ("table", Schema(data.STRING)),
            ("txId", Schema(data.INT64, optional=True)),
            ("lsn", Schema(data.INT64, optional=True)),
            ("xmin", Schema(data.INT64, optional=True)),
        ]
    ).fields,
)

TRANSACTION_SCHEMA = Schema(
    data.STRUCT,
    optional=True,
    name="event.block",
    version=1,
    fields=Schema.struct(
        [
            ("id", Schema(data.STRING)),
            ("total_order", Schema(data.INT64)),
            ("data_collection_order", Schema(data.INT64)),
        ]
    ).fields,
)


class Unchanged:
    """An unchanged TOASTed value, which a change does not send."""


UNCHANGED = Unchanged()


@dataclass(frozen=True)
class ColumnInfo:
    """A column as the catalog or a Relation message describes it."""

    name: str
    type_oid: int  # a domain's base type, as the catalog resolves it
    type_modifier: int = -1
    optional: bool = True
    enum_values: tuple[str, ...] | None = None  # an enum type's labels, in order
    declared_oid: int = 0  # the column's own type (a domain's), when not type_oid


@dataclass(frozen=True)
class TableInfo:
    schema: str
    name: str
    columns: tuple[ColumnInfo, ...]
    key_columns: tuple[str, ...]  # the primary key's, in its order

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(slots=True)
class EventSource:
    """Where one change comes from: the source block's varying fields."""

    ts_us: int  # the commit's time (streaming) or the read's (snapshot)
    snapshot: str  # "false", "true", "first", "last"...
    tx_id: int | None
    lsn: int | None
    last_commit_lsn: int | None = None


@dataclass(frozen=True)
class ValueSettings:
    decimal_mode: str = PRECISE
    binary_mode: str = BYTES_MODE
    interval_mode: str = NUMERIC_MODE
    money_fraction_digits: int = 2


Converter = Callable[[str], Any]


def _bool(text: str) -> bool:
    return text in ("t", "true")


def _decimal(text: str) -> Decimal | None:
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None  # NaN and infinities have no Decimal here


def _unscaled_bytes(unscaled: int) -> bytes:
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(size, "big", signed=True)


def _timestamp_micros(text: str) -> int:
    if text == "infinity":
        return _INT64_MAX
    if text == "-infinity":
        return -_INT64_MAX - 1
    moment = _parse_datetime(text)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return (moment - _EPOCH) // _MICRO


def _parse_datetime(text: str) -> datetime:
    if text.endswith(" BC"):
        raise ValueError(f"dates before the common era are not served: {text}")
    return datetime.fromisoformat(text)


def _zoned_timestamp(text: str) -> str:
    if text in ("infinity", "-infinity"):
        return text
    moment = _parse_datetime(text).astimezone(UTC)
    written = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        written += f".{moment.microsecond:06d}".rstrip("0")
    return written + "Z"


def _date_days(text: str) -> int:
    if text == "infinity":
        return 2**31 - 1
    if text == "-infinity":
        return -(2**31)
    return date.fromisoformat(text).toordinal() - _EPOCH_ORDINAL


def _time_micros(text: str) -> int:
    if text.startswith("24:00"):
        return 24 * 3600 * 1_000_000
    moment = time.fromisoformat(text)
    return (
        (moment.hour * 60 + moment.minute) * 60 + moment.second
    ) * 1_000_000 + moment.microsecond


def _bytea(text: str) -> bytes:
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    raise ValueError("bytea in the escape format: set bytea_output=hex")


def _precision(modifier: int, default: int = 6) -> int:
    return default if modifier < 0 else modifier


def column_schema(column: ColumnInfo, settings: ValueSettings) -> tuple[Schema, Converter]:
    """The Connect schema of a column and the function turning its text into the value."""
    oid, modifier, optional = column.type_oid, column.type_modifier, column.optional

    def plain(kind: str, convert: Converter, name: str | None = None) -> tuple[Schema, Converter]:
        version = 1 if name is not None else None
        return Schema(kind, optional=optional, name=name, version=version), convert

    if oid == INT2:
        return plain(data.INT16, int)
    if oid == INT4:
        return plain(data.INT32, int)
    if oid in (INT8, OID):
        return plain(data.INT64, int)
    if oid == FLOAT4:
        return plain(data.FLOAT32, float)
    if oid == FLOAT8:
        return plain(data.FLOAT64, float)
    if oid == BOOL:
        return plain(data.BOOLEAN, _bool)
    if oid == NUMERIC:
        return _numeric_schema(modifier, optional, settings.decimal_mode)
    if oid == DATE:
        return plain(data.INT32, _date_days, "io.debezium.time.Date")
    if oid == TIME:
        if _precision(modifier) <= 3:
            return plain(data.INT32, lambda t: _time_micros(t) // 1000, "io.debezium.time.Time")
        return plain(data.INT64, _time_micros, "io.debezium.time.MicroTime")
    if oid == TIMESTAMP:
        if _precision(modifier) <= 3:
            return plain(
                data.INT64, lambda t: _timestamp_micros(t) // 1000, "io.debezium.time.Timestamp"
            )
        return plain(data.INT64, _timestamp_micros, "io.debezium.time.MicroTimestamp")
    if oid == TIMESTAMPTZ:
        return plain(data.STRING, _zoned_timestamp, "io.debezium.time.ZonedTimestamp")
    if oid == BYTEA:
        if settings.binary_mode == BASE64_MODE:
            return plain(data.STRING, lambda t: base64.b64encode(_bytea(t)).decode())
        if settings.binary_mode == HEX_MODE:
            return plain(data.STRING, lambda t: _bytea(t).hex())
        return plain(data.BYTES, _bytea)
    if oid in (JSON, JSONB):
        return plain(data.STRING, str, "io.debezium.data.Json")
    if oid == UUID:
        return plain(data.STRING, str, "io.debezium.data.Uuid")
    if oid == XML:
        return plain(data.STRING, str, "io.debezium.data.Xml")
    if oid == INTERVAL:
        if settings.interval_mode == STRING_MODE:
            return plain(data.STRING, str, "io.debezium.time.Interval")
        return plain(data.INT64, _interval_micros, "io.debezium.time.MicroDuration")
    if oid == MONEY:
        return _money_schema(optional, settings)
    if column.enum_values is not None:
        schema = Schema(
            data.STRING,
            optional=optional,
            name=ENUM,
            version=1,
            parameters={"allowed": ",".join(column.enum_values)},
        )
        return schema, str
    element_oid = ARRAY_ELEMENTS.get(oid)
    if element_oid is not None:
        element, convert = column_schema(ColumnInfo("", element_oid, modifier), settings)
        return Schema.array(element, optional=optional), partial(_array, convert)
    return plain(data.STRING, str)


def _money_schema(optional: bool, settings: ValueSettings) -> tuple[Schema, Converter]:
    if settings.decimal_mode == DOUBLE:
        return Schema(data.FLOAT64, optional=optional), lambda t: float(_money(t))
    if settings.decimal_mode == STRING_MODE:
        return Schema(data.STRING, optional=optional), lambda t: str(_money(t))
    scale = settings.money_fraction_digits
    parameters = {"scale": str(scale)}
    schema = Schema(
        data.BYTES, optional=optional, name=data.DECIMAL, version=1, parameters=parameters
    )
    return schema, lambda t: _money(t).quantize(Decimal(1).scaleb(-scale))


def _money(text: str) -> Decimal:
    """money's text in the C locale (``-$1,234.56``) as a Decimal."""
    return Decimal(text.replace("$", "").replace(",", ""))


_ISO_INTERVAL = re.compile(
    r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)W)?(?:(-?\d+)D)?"
    r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d+)?)S)?)?"
)


def _interval_micros(text: str) -> int:
    """An interval in ISO 8601 (the connections' IntervalStyle) as Debezium's MicroDuration:
    a month is 365.25 / 12 days."""
    match = _ISO_INTERVAL.fullmatch(text)
    if match is None:
        raise ValueError(f"not an ISO 8601 interval: {text}")
    years, months, weeks, days, hours, minutes = (int(g or 0) for g in match.groups()[:6])
    seconds = float(match.group(7) or 0)
    day_count = (years * 12 + months) * DAYS_PER_MONTH + weeks * 7 + days
    return int(((day_count * 24 + hours) * 60 + minutes) * 60 * 1e6 + seconds * 1e6)


def _array_items(text: str) -> list[str | None]:
    """The elements of an array's text (``{1,NULL,"a b","c\\"d"}``), nested arrays
    flattened; NULL unquoted is None."""
    items: list[str | None] = []
    at, end = 0, len(text)
    while at < end:
        char = text[at]
        if char in "{},":
            at += 1
            continue
        if char == '"':
            at += 1
            value: list[str] = []
            while at < end and text[at] != '"':
                if text[at] == "\\":
                    at += 1
                value.append(text[at])
                at += 1
            items.append("".join(value))
            at += 1
            continue
        stop = at
        while stop < end and text[stop] not in ",}":
            stop += 1
        word = text[at:stop].strip()
        items.append(None if word == "NULL" else word)
        at = stop
    return items


def _array(convert: Converter, text: str) -> list[Any]:
    return [None if item is None else convert(item) for item in _array_items(text)]


def _numeric_schema(modifier: int, optional: bool, mode: str) -> tuple[Schema, Converter]:
    if mode == DOUBLE:
        return Schema(data.FLOAT64, optional=optional), float
    if mode == STRING_MODE:
        return Schema(data.STRING, optional=optional), str
    if modifier < 0:  # numeric without precision and scale: each value its own scale
        schema = Schema(
            data.STRUCT,
            optional=optional,
            name=VARIABLE_SCALE_DECIMAL,
            version=1,
            doc="Variable scaled decimal",
            fields=Schema.struct(
                [("scale", Schema(data.INT32)), ("value", Schema(data.BYTES))]
            ).fields,
        )

        def variable(text: str) -> Struct | None:
            value = _decimal(text)
            if value is None:
                return None
            exponent = value.as_tuple().exponent
            scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
            unscaled = int(value.scaleb(scale))
            return Struct(schema, {"scale": scale, "value": _unscaled_bytes(unscaled)})

        return schema, variable
    precision = ((modifier - 4) >> 16) & 0xFFFF
    scale = (modifier - 4) & 0xFFFF
    parameters = {"scale": str(scale), "connect.decimal.precision": str(precision)}
    schema = Schema(
        data.BYTES, optional=optional, name=data.DECIMAL, version=1, parameters=parameters
    )
    return schema, _decimal


def _zero(schema: Schema) -> Any:
    """The value Debezium gives a required column whose value a change does not carry."""
    if schema.name == data.DECIMAL:
        return Decimal(0)
    if schema.type in data.INTEGER_TYPES:
        return 0
    if schema.type in (data.FLOAT32, data.FLOAT64):
        return 0.0
    if schema.type == data.BOOLEAN:
        return False
    if schema.type == data.BYTES:
        return b""
    if schema.type == data.STRUCT:
        return Struct(schema, {"scale": 0, "value": b"\0"})
    if schema.type == data.ARRAY:
        return []
    return ""


@dataclass
class TableSchema:
    """One table's schemas and converters, for the topic ``<prefix>.<schema>.<table>``."""

    table: TableInfo
    topic: str
    key_schema: Schema | None
    value_schema: Schema
    envelope_schema: Schema
    converters: list[Converter]
    field_schemas: list[Schema]
    key_positions: list[int] = field(default_factory=list)

    @staticmethod
    def of(table: TableInfo, prefix: str, settings: ValueSettings) -> TableSchema:
        topic = f"{prefix}.{table.schema}.{table.name}"
        fields: list[tuple[str, Schema]] = []
        converters: list[Converter] = []
        for column in table.columns:
            schema, convert = column_schema(column, settings)
            fields.append((column.name, schema))
            converters.append(convert)
        value_schema = _optional(Schema.struct(fields, name=f"{topic}.Value"), True)
        names = [column.name for column in table.columns]
        positions = [names.index(k) for k in table.key_columns if k in names]
        key_schema = None
        if positions and len(positions) == len(table.key_columns):
            key_fields = [(names[i], _optional(fields[i][1], False)) for i in positions]
            key_schema = Schema.struct(key_fields, name=f"{topic}.Key")
        else:
            positions = []
        envelope = Schema.struct(
            [
                ("before", value_schema),
                ("after", value_schema),
                ("source", SOURCE_SCHEMA),
                ("transaction", TRANSACTION_SCHEMA),
                ("op", Schema(data.STRING)),
                ("ts_ms", Schema(data.INT64, optional=True)),
                ("ts_us", Schema(data.INT64, optional=True)),
                ("ts_ns", Schema(data.INT64, optional=True)),
            ],
            name=f"{topic}.Envelope",
        )
        envelope = Schema(data.STRUCT, name=envelope.name, version=2, fields=envelope.fields)
        return TableSchema(
            table,
            topic,
            key_schema,
            value_schema,
            envelope,
            converters,
            [schema for _, schema in fields],
            positions,
        )

    def row(self, texts: Sequence[str | Unchanged | None]) -> Struct:
        """The value struct of a row given as each column's text (None: SQL NULL, or a
        value the change does not carry; ``UNCHANGED``: an unchanged TOASTed value)."""
        values: dict[str, Any] = {}
        for i, (column, text) in enumerate(zip(self.table.columns, texts, strict=True)):
            schema = self.field_schemas[i]
            if text is None:
                values[column.name] = None if schema.optional else _zero(schema)
            elif isinstance(text, Unchanged):
                values[column.name] = _unavailable(schema)
            else:
                value = self.converters[i](text)  # None: a NaN numeric has no Decimal
                values[column.name] = (
                    _zero(schema) if value is None and not schema.optional else value
                )
        return Struct(self.value_schema, values)

    def key(self, row: Struct) -> Struct | None:
        if self.key_schema is None:
            return None
        return Struct(
            self.key_schema, {f.name: row.values.get(f.name) for f in self.key_schema.fields}
        )

    def envelope(
        self,
        op: str,
        before: Struct | None,
        after: Struct | None,
        source: EventSource,
        database: str,
        server: str,
        now_us: int,
    ) -> Struct:
        values = {
            "before": before,
            "after": after,
            "source": self.source(source, database, server),
            "transaction": None,
            "op": op,
            "ts_ms": now_us // 1000,
            "ts_us": now_us,
            "ts_ns": now_us * 1000,
        }
        return Struct(self.envelope_schema, values)

    def source(self, source: EventSource, database: str, server: str) -> Struct:
        sequence = None
        if source.lsn is not None and source.snapshot == "false":
            last = "null" if source.last_commit_lsn is None else f'"{source.last_commit_lsn}"'
            sequence = f'[{last},"{source.lsn}"]'  # as Jackson writes the list
        return Struct(
            SOURCE_SCHEMA,
            {
                "version": strom_version(),
                "connector": CONNECTOR,
                "name": server,
                "ts_ms": source.ts_us // 1000,
                "snapshot": source.snapshot,
                "db": database,
                "sequence": sequence,
                "ts_us": source.ts_us,
                "ts_ns": source.ts_us * 1000,
                "schema": self.table.schema,
                "table": self.table.name,
                "txId": source.tx_id,
                "lsn": source.lsn,
                "xmin": None,
            },
        )


def _unavailable(schema: Schema) -> Any:
    if schema.type == data.STRING:
        return UNAVAILABLE
    if schema.type == data.BYTES and schema.name is None:
        return UNAVAILABLE.encode()
    return None if schema.optional else _zero(schema)


def epoch_micros_now() -> int:
    return time_ns() // 1000
