"""Records of a stream's or table's topic read into rows, and rows written back as
records: the serialization formats' reading side (the writing side of KAFKA, JSON and
DELIMITED is ``strom.ksql.formats``', of AVRO, JSON_SR and PROTOBUF
``strom.ksql.registry_formats``'), as a query reads its source and writes its sink.

A row is a dict of column name to value in the evaluator's Python forms (BOOLEAN bool,
INTEGER / BIGINT int, DOUBLE float, DECIMAL Decimal, STRING str, BYTES bytes,
TIMESTAMP epoch ms, DATE epoch days, TIME ms of the day, ARRAY list, MAP dict, STRUCT
dict, null None), with the pseudo columns ROWTIME (the record's timestamp, or the
source's TIMESTAMP column), ROWPARTITION and ROWOFFSET, and WINDOWSTART / WINDOWEND for
a windowed source (its key carries the window: the key's bytes, then the window start
as 8 big-endian bytes; a session window's end, then its start; a record without key
bytes has a null key, its key columns and window bounds null, as ksqlDB reads it).

Formats read: KAFKA (one column: INTEGER 4 bytes, BIGINT 8, DOUBLE 8, STRING UTF-8,
BYTES), JSON (an object's fields matched case-insensitively, or a single column's
value alone), DELIMITED (CSV with the source's delimiter), NONE, and through the schema
registry's wire format AVRO (the writer's schema), JSON_SR and PROTOBUF (the writer's
message from the registry, read by ``strom.ksql.protobuf_rows``), and PROTOBUF_NOSR (the
columns' message alone). A record that does
not read raises ``RecordError`` naming the side (key or value) and why, which a query
logs to the processing log and skips.

Does not own the consumer, the producer or the processing log.
"""

from __future__ import annotations

import base64
import binascii
import csv
import datetime
import decimal
import io
import json
import struct
from dataclasses import dataclass
from typing import Any

from strom.ksql import datetime_patterns as patterns
from strom.ksql import expressions as ex
from strom.ksql import formats
from strom.ksql.metastore import Column, DataSource, KsqlStatementError
from strom.ksql.values import DECIMAL_CONTEXT, java_hash_map_order

REGISTRY_FORMATS = ("AVRO", "JSON_SR", "PROTOBUF")


class RecordError(Exception):
    """A record that does not read as its source's formats; ``quiet`` for one that is
    dropped without a processing log entry (a table's record without a key, which Kafka
    Streams' table source skips)."""

    def __init__(
        self, target: str, message: str, quiet: bool = False, timestamp: bool = False
    ) -> None:
        super().__init__(message)
        self.target = target  # key or value
        self.message = message
        self.quiet = quiet
        self.timestamp = timestamp  # its TIMESTAMP column does not read


@dataclass
class SourceRecord:
    """A record as it was consumed."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None = None


@dataclass
class Row:
    """A record read: its columns, whether its value was null (``tombstone``: a
    table's delete, a stream's null row; only the key and pseudo columns are set), and
    whether its key was (``keyless``: no key bytes, or JSON's ``null`` for key columns in
    an object; ksqlDB's null key, its key columns null)."""

    columns: dict[str, Any]
    tombstone: bool = False
    keyless: bool = False

    @property
    def timestamp(self) -> int:
        return int(self.columns["ROWTIME"])


# ---- values from JSON ---------------------------------------------------------------------


class _Mismatch(Exception):
    pass


class _ExactFloat(float):
    """A JSON number with a fraction or exponent, with the text it was written as."""

    text: str

    def __new__(cls, text: str) -> _ExactFloat:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _holds_decimal(sql_type: ex.SqlType) -> bool:
    if isinstance(sql_type, ex.DecimalType):
        return True
    if isinstance(sql_type, ex.ArrayType):
        return _holds_decimal(sql_type.element)
    if isinstance(sql_type, ex.MapType):
        return _holds_decimal(sql_type.value)
    if isinstance(sql_type, ex.StructType):
        return any(_holds_decimal(f.type) for f in sql_type.fields)
    return False


def _number(value: Any, path: str, sql_type: ex.SqlType) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | str | decimal.Decimal):
        raise _Mismatch(f"Can't convert type. sourceType: {_json_kind(value)}, requiredType: "
                        f"{sql_type}, path: {path}")  # fmt: skip
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "BooleanNode"
    if isinstance(value, int):
        return "IntNode" if -(2**31) <= value < 2**31 else "LongNode"
    if isinstance(value, float):
        return "DoubleNode"
    if isinstance(value, str):
        return "TextNode"
    if isinstance(value, list):
        return "ArrayNode"
    if isinstance(value, dict):
        return "ObjectNode"
    return "NullNode"


def _mismatch(value: Any, sql_type: ex.SqlType, path: str) -> _Mismatch:
    """A JSON value ``sql_type`` does not take (made when raised: its text costs more
    than reading most values)."""
    return _Mismatch(
        f"Can't convert type. sourceType: {_json_kind(value)}, requiredType: {sql_type}, "
        f"path: {path}"
    )


def from_json(value: Any, sql_type: ex.SqlType, path: str = "$") -> Any:
    """A JSON value as ``sql_type``'s Python form, as ksqlDB's JSON deserializer coerces."""
    if value is None:
        return None
    if isinstance(sql_type, ex.DecimalType):
        number = _number(value, path, sql_type)
        try:
            result = decimal.Decimal(
                number.text if isinstance(number, _ExactFloat) else str(number)
            )
        except decimal.InvalidOperation:
            raise _mismatch(value, sql_type, path) from None
        return result.quantize(decimal.Decimal(1).scaleb(-sql_type.scale), context=DECIMAL_CONTEXT)
    if isinstance(sql_type, ex.ArrayType):
        if not isinstance(value, list):
            raise _mismatch(value, sql_type, path)
        return [from_json(v, sql_type.element, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(sql_type, ex.MapType):
        if not isinstance(value, dict):
            raise _mismatch(value, sql_type, path)
        entries = {
            from_json(k, sql_type.key, path): from_json(v, sql_type.value, f"{path}.{k}")
            for k, v in value.items()
        }
        if all(isinstance(k, str) for k in entries):  # in the order ksqlDB's map has them
            return java_hash_map_order(entries)
        return entries
    if isinstance(sql_type, ex.StructType):
        if not isinstance(value, dict):
            raise _mismatch(value, sql_type, path)
        by_upper = {str(k).upper(): v for k, v in value.items()}
        return {
            f.name: from_json(
                value[f.name] if f.name in value else by_upper.get(f.name.upper()),
                f.type,
                f"{path}.{f.name}",
            )
            for f in sql_type.fields
        }
    name = str(sql_type)
    if name == "BOOLEAN":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise _mismatch(value, sql_type, path)
    if name == "STRING":
        if isinstance(value, str):
            return value
        if isinstance(value, list | dict):
            return json.dumps(value, separators=(",", ":"))
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
    if name == "BYTES":
        if not isinstance(value, str):
            raise _mismatch(value, sql_type, path)
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise _mismatch(value, sql_type, path) from None
    if name in ("INTEGER", "BIGINT", "TIMESTAMP", "DATE", "TIME"):
        number = _number(value, path, sql_type)
        try:
            whole = int(number) if not isinstance(number, str) else int(number.strip())
        except ValueError:
            raise _mismatch(value, sql_type, path) from None
        if name == "INTEGER" and not -(2**31) <= whole < 2**31:
            raise _mismatch(value, sql_type, path)
        return whole
    if name == "DOUBLE":
        number = _number(value, path, sql_type)
        try:
            return float(number)
        except ValueError:
            raise _mismatch(value, sql_type, path) from None
    raise _mismatch(value, sql_type, path)


def _text_value(text: str, sql_type: ex.SqlType, path: str) -> Any:
    """A DELIMITED field as ``sql_type``."""
    if text == "":
        return None
    name = str(sql_type)
    if name == "STRING":
        return text
    if name == "BOOLEAN":
        return text.strip().lower() == "true"
    if name == "BYTES":
        return from_json(text, sql_type, path)
    if isinstance(sql_type, ex.DecimalType) or name in (
        "INTEGER", "BIGINT", "DOUBLE", "TIMESTAMP", "DATE", "TIME"
    ):  # fmt: skip
        return from_json(text.strip(), sql_type, path)
    raise _Mismatch(f"The 'DELIMITED' format does not support type '{sql_type}'")


# ---- the formats ------------------------------------------------------------------------


def _kafka_value(data: bytes, column: Column) -> Any:
    kind = str(column.type)
    if kind == "INTEGER":
        if len(data) != 4:
            raise _Mismatch("Size of data received by IntegerDeserializer is not 4")
        return struct.unpack(">i", data)[0]
    if kind == "BIGINT":
        if len(data) != 8:
            raise _Mismatch("Size of data received by LongDeserializer is not 8")
        return struct.unpack(">q", data)[0]
    if kind == "DOUBLE":
        if len(data) != 8:
            raise _Mismatch("Size of data received by DoubleDeserializer is not 8")
        return struct.unpack(">d", data)[0]
    if kind == "STRING":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Mismatch(f"Invalid UTF-8: {exc}") from None
    if kind == "BYTES":
        return bytes(data)
    raise _Mismatch(f"The 'KAFKA' format does not support type '{kind}'")


def _fields(data: Any, columns: tuple[Column, ...], alone: bool, path: str = "$") -> dict[str, Any]:
    """An object's (or a lone value's) columns."""
    if alone:
        return {columns[0].name: from_json(data, columns[0].type, path)}
    if not isinstance(data, dict):
        if len(columns) == 1:  # a single column's value written alone
            return {columns[0].name: from_json(data, columns[0].type, path)}
        raise _Mismatch(
            f"Can't convert type. sourceType: {_json_kind(data)}, requiredType: STRUCT, "
            f"path: {path}"
        )
    by_upper = {str(k).upper(): v for k, v in data.items()}
    return {
        c.name: from_json(
            data[c.name] if c.name in data else by_upper.get(c.name.upper()),
            c.type,
            f"{path}.{c.name}",
        )
        for c in columns
    }


def _strip_registry_header(data: bytes) -> tuple[int, bytes]:
    if len(data) < 5 or data[0] != 0:
        raise _Mismatch("Unknown magic byte!")
    return struct.unpack(">I", data[1:5])[0], data[5:]


class SideReader:
    """Reads one side (key or value) of a source's records."""

    def __init__(
        self,
        source: DataSource,
        side: str,
        columns: tuple[Column, ...],
        registry: Any = None,
    ) -> None:
        self.side = side
        self.columns = columns
        self.format = source.key_format if side == "key" else source.value_format
        self.delimiter = (source.key_delimiter if side == "key" else source.value_delimiter) or ","
        self.alone = len(columns) == 1 and (side == "key" or source.wrap_single_value is False)
        self.registry = registry
        # KEY_ / VALUE_PROTOBUF_NULLABLE_REPRESENTATION: the columns' message without a registry
        nullable = source.properties.get(f"{side.upper()}_PROTOBUF_NULLABLE_REPRESENTATION")
        self.nullable = None if nullable is None else str(nullable).upper()
        self._proto: Any = None
        # JSON numbers keep their text for DECIMAL columns (a float has 17 digits at most)
        self._parse_float = _ExactFloat if any(_holds_decimal(c.type) for c in columns) else None

    def read(self, data: bytes | None) -> dict[str, Any] | None:
        """The side's columns; None for a side that is null (no bytes, or JSON's
        ``null`` for columns in an object): the record's row or key is null, as ksqlDB's."""
        if not self.columns or self.format == "NONE":
            return {}
        if data is None:
            return None
        fmt = self.format
        if fmt == "KAFKA":
            return {self.columns[0].name: _kafka_value(data, self.columns[0])}
        if fmt == "JSON":
            try:
                parsed = json.loads(data, parse_float=self._parse_float)
            except (ValueError, UnicodeDecodeError) as exc:
                raise _Mismatch(f"Invalid JSON: {exc}") from None
            if parsed is None and not self.alone:
                return None
            return _fields(parsed, self.columns, self.alone)
        if fmt == "DELIMITED":
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _Mismatch(f"Invalid UTF-8: {exc}") from None
            fields = next(csv.reader([text], delimiter=self.delimiter), [])
            if len(fields) != len(self.columns):
                raise _Mismatch(
                    f"Column count mismatch on deserialization. expected: {len(self.columns)}, "
                    f"got: {len(fields)}"
                )
            return {
                c.name: _text_value(f, c.type, f"$.{c.name}")
                for c, f in zip(self.columns, fields, strict=True)
            }
        if fmt == "JSON_SR":
            _, body = _strip_registry_header(data)
            try:
                parsed = json.loads(body, parse_float=self._parse_float)
            except (ValueError, UnicodeDecodeError) as exc:
                raise _Mismatch(f"Invalid JSON: {exc}") from None
            return _fields(parsed, self.columns, self.alone)
        if fmt == "AVRO":
            return self._read_avro(data)
        if fmt == "PROTOBUF":
            return self._read_protobuf(data)
        if fmt == "PROTOBUF_NOSR":
            from strom.ksql import protobuf_rows

            columns = tuple((c.name, c.type) for c in self.columns)
            try:
                read = protobuf_rows.read_bare(columns, data, self.nullable)
                return _fields(read, self.columns, False)
            except _Mismatch:
                raise
            except Exception as exc:  # protobuf's DecodeError, a type it cannot hold
                raise _Mismatch(f"Could not read PROTOBUF_NOSR: {exc}") from None
        raise _Mismatch(f"Reading the {fmt} format is not supported yet")

    def _read_avro(self, data: bytes) -> dict[str, Any]:
        import fastavro

        if self.registry is None:
            raise _Mismatch("AVRO needs 'ksql.schema.registry.url'")
        schema_id, body = _strip_registry_header(data)
        try:
            schema = self.registry.avro_schema(schema_id)
            decoded = fastavro.schemaless_reader(io.BytesIO(body), schema, None)
        except KsqlStatementError as exc:
            raise _Mismatch(str(exc)) from None
        except Exception as exc:  # the registry's or the decoder's error
            raise _Mismatch(f"Could not read AVRO: {exc}") from None
        return _fields(_avro_plain(decoded), self.columns, self.alone)

    def _read_protobuf(self, data: bytes) -> dict[str, Any]:
        from strom.ksql import protobuf_rows
        from strom.services.protobuf_schemas import ProtoSchemaError, decode_indexes

        schema_id, body = _strip_registry_header(data)
        try:
            indexes, at = decode_indexes(body, 0)
        except ProtoSchemaError as exc:
            raise _Mismatch(f"Could not read PROTOBUF: {exc}") from None
        try:
            message = self._proto_class(schema_id, indexes)()
            message.ParseFromString(body[at:])
        except _Mismatch:
            raise
        except Exception as exc:  # the registry's, or protobuf's DecodeError
            raise _Mismatch(f"Could not read PROTOBUF: {exc}") from None
        return _fields(protobuf_rows.plain(message), self.columns, False)

    def _proto_class(self, schema_id: int, indexes: list[int]) -> Any:
        """The writer's message class, from the registry; without one, the class of the
        columns as ksqlDB writes them."""
        if self.registry is not None:
            try:
                return self.registry.protobuf_class(schema_id, indexes)
            except KsqlStatementError as exc:
                raise _Mismatch(str(exc)) from None
        if self._proto is None:
            from strom.ksql import protobuf_rows

            columns = [(c.name, c.type) for c in self.columns]
            self._proto = protobuf_rows.RowMessages(columns, self.nullable).message_class()
        return self._proto


def _avro_plain(value: Any) -> Any:
    """Avro's decoded values as JSON-like ones (bytes as base64, times as numbers)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        return value
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, datetime.date):
        return (value - datetime.date(1970, 1, 1)).days
    if isinstance(value, datetime.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + (
            value.microsecond // 1000
        )
    if isinstance(value, list):
        return [_avro_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _avro_plain(v) for k, v in value.items()}
    return value


# ---- timestamps -------------------------------------------------------------------------


def parse_timestamp(text: str, java_pattern: str) -> int:
    """A string timestamp in a Java DateTimeFormatter pattern, as epoch ms (UTC when the
    pattern has no zone), read as STRINGTOTIMESTAMP reads it (``ValueError`` when it
    does not fit)."""
    moment, _, _ = patterns.parse_datetime(text, java_pattern, datetime.UTC)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (moment - epoch) // datetime.timedelta(milliseconds=1)


# ---- whole records ----------------------------------------------------------------------


class RecordReader:
    """Reads a source's records into rows (``RecordError`` for one that does not read)."""

    def __init__(self, source: DataSource, registry: Any = None) -> None:
        self.source = source
        self.keys = SideReader(source, "key", source.key_columns, registry)
        self.values = SideReader(source, "value", source.value_columns, registry)
        self.headers = [c for c in source.columns if c.namespace == "HEADER"]
        self.session = source.window_type == "SESSION"
        self.windowed = source.is_windowed
        self.table = source.kind == "TABLE"

    def read(self, record: SourceRecord) -> Row:
        key = record.key
        row: dict[str, Any] = {}
        if self.windowed and key is None:  # Kafka Streams' windowed key deserializers: null
            row["WINDOWSTART"] = row["WINDOWEND"] = None  # ksqlDB's null windowed key
        elif self.windowed and key is not None:
            width = 16 if self.session else 8
            if len(key) < width:
                raise RecordError("key", "A windowed key is shorter than its window")
            if self.session:
                end, start = struct.unpack(">qq", key[-16:])
            else:
                (start,) = struct.unpack(">q", key[-8:])
                end = start + (self.source.window_size_ms or 0)
            key = key[:-width]
            row["WINDOWSTART"], row["WINDOWEND"] = start, end
        try:
            keys = self.keys.read(key)
        except _Mismatch as exc:
            raise RecordError("key", str(exc)) from None
        keyless = keys is None
        if keys is None:  # ksqlDB's null key: the key columns null
            if self.table:  # Kafka Streams' table source skips it
                raise RecordError("key", "A table's record without a key", quiet=True)
            keys = dict.fromkeys(c.name for c in self.source.key_columns)
        row.update(keys)
        values: dict[str, Any] | None = None
        if record.value is not None or self.source.value_format == "NONE":
            try:
                values = self.values.read(record.value)
            except _Mismatch as exc:
                raise RecordError("value", str(exc)) from None
        tombstone = values is None  # a null value: a table's delete, a stream's null row
        row.update({c.name: None for c in self.source.value_columns} if values is None else values)
        for column in self.headers:
            row[column.name] = _header_value(column, record.headers or [])
        row["ROWPARTITION"] = record.partition
        row["ROWOFFSET"] = record.offset
        row["ROWTIME"] = self._timestamp(row, record)
        return Row(row, tombstone, keyless)

    def _timestamp(self, row: dict[str, Any], record: SourceRecord) -> int:
        column = self.source.timestamp_column
        if column is None:
            return record.timestamp
        value = row.get(column)
        if value is None:
            raise RecordError("value", f"The TIMESTAMP column {column} is null", timestamp=True)
        if isinstance(value, str):
            try:
                moment = parse_timestamp(value, self.source.timestamp_format or "")
            except ValueError as exc:
                raise RecordError(
                    "value", f"Could not parse timestamp '{value}': {exc}", timestamp=True
                ) from None
        else:
            moment = int(value)
        if moment < 0:  # Kafka Streams skips a record its extractor gives no valid time,
            # with a warning of its own, not in the processing log (nor fatal)
            raise RecordError(
                "value", f"The TIMESTAMP column {column} is negative: {moment}", quiet=True
            )
        return moment


def _header_value(column: Column, headers: list[tuple[str, bytes | None]]) -> Any:
    if column.header_key is None:  # HEADERS: all of them
        return [{"KEY": k, "VALUE": v} for k, v in headers]
    found = [v for k, v in headers if k == column.header_key]
    return found[-1] if found else None


# ---- writing ----------------------------------------------------------------------------


class RecordWriter:
    """Writes a sink's rows as key and value bytes, as INSERT VALUES writes them."""

    def __init__(self, sink: DataSource, registry: Any = None) -> None:
        self.sink = sink
        self.registry = registry
        self.session = sink.window_type == "SESSION"

    def key(self, row: dict[str, Any], window: tuple[int, int] | None) -> bytes | None:
        sink = self.sink
        if sink.key_format in REGISTRY_FORMATS:
            data = self._registry_bytes("key", sink.key_columns, row)
        else:
            data = formats.key_bytes(sink, row)
        if window is None or not sink.is_windowed:
            return data
        start, end = window
        bounds = struct.pack(">qq", end, start) if self.session else struct.pack(">q", start)
        return (data or b"") + bounds

    def value(self, row: dict[str, Any] | None) -> bytes | None:
        if row is None:
            return None
        sink = self.sink
        if sink.value_format in REGISTRY_FORMATS:
            return self._registry_bytes("value", sink.value_columns, row)
        return formats.value_bytes(sink, row)

    def _registry_bytes(
        self, side: str, columns: tuple[Column, ...], row: dict[str, Any]
    ) -> bytes | None:
        if self.registry is None:
            raise KsqlStatementError(
                "The AVRO, PROTOBUF and JSON_SR formats need 'ksql.schema.registry.url'"
            )
        data: bytes | None = self.registry.serialize(self.sink, side, columns, row)
        return data
