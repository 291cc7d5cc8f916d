"""Rows as record bytes in ksqlDB's serialization formats, for INSERT INTO ... VALUES.

Owns turning an INSERT's literal values into a source's column types (ksqlDB's
coercions: a number widened to BIGINT, DOUBLE or DECIMAL, a string into a TIMESTAMP,
DATE or TIME, constructors of ARRAY, MAP and STRUCT), and writing a row's key and
value as ksqlDB does:

- ``KAFKA``: one column, INTEGER as 4 big-endian bytes, BIGINT as 8, DOUBLE as 8 IEEE
  754 bytes, STRING as UTF-8, BYTES as they are;
- ``JSON``: an object of the columns (a single key column is written alone, as is a
  single value column with ``WRAP_SINGLE_VALUE=false``); DECIMAL as a JSON number,
  TIMESTAMP as epoch milliseconds, DATE as days, TIME as milliseconds of the day,
  BYTES as base64;
- ``DELIMITED``: the columns joined by the delimiter (``,`` by default), quoted as
  ksqlDB's CSV printer quotes them (also a field with blanks at either end), null as
  nothing;
- ``NONE``: no key.

- ``PROTOBUF_NOSR``: the columns' message (``strom.ksql.protobuf_rows``) alone, no
  schema registry.

AVRO, JSON_SR and PROTOBUF are written by ``strom.ksql.registry_formats``.

Does not own the producer or the metastore.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import re
import struct
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import protobuf_rows
from strom.ksql.evaluation import Scope, compile_expression
from strom.ksql.metastore import Column, DataSource, KsqlStatementError
from strom.ksql.values import double_text

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
SUPPORTED_FORMATS = (
    "KAFKA", "JSON", "DELIMITED", "NONE", "AVRO", "JSON_SR", "PROTOBUF", "PROTOBUF_NOSR",
)  # fmt: skip


def _mismatch(column: str, sql_type: ex.SqlType, value: Any) -> KsqlStatementError:
    return KsqlStatementError(
        f"Expected type {sql_type} for field `{column}` but got {value!r}"
        if not isinstance(value, str)
        else f"Expected type {sql_type} for field `{column}` but got '{value}'(STRING)"
    )


def coerce(expression: ex.Expression, sql_type: ex.SqlType, column: str) -> Any:
    """The value of an expression in ``sql_type``'s Python form: a literal's or a
    constructor's converted, another one evaluated first."""
    if isinstance(expression, ex.Cast):
        return coerce(expression.operand, sql_type, column)
    if isinstance(expression, ex.Literal):
        return _convert(expression.value, sql_type, column)
    if isinstance(expression, ex.ArrayConstructor) and isinstance(sql_type, ex.ArrayType):
        return [coerce(item, sql_type.element, column) for item in expression.items]
    if isinstance(expression, ex.MapConstructor) and isinstance(sql_type, ex.MapType):
        return {
            coerce(k, sql_type.key, column): coerce(v, sql_type.value, column)
            for k, v in expression.entries
        }
    if isinstance(expression, ex.StructConstructor) and isinstance(sql_type, ex.StructType):
        # the column's fields; one the constructor has and the column not is dropped, as
        # ksqlDB's coercion of a struct drops it
        given = dict(expression.fields)
        return {
            f.name: coerce(given[f.name], f.type, column) if f.name in given else None
            for f in sql_type.fields
        }
    # another expression (ksqlDB evaluates any): its value over no row
    compiled = compile_expression(expression, Scope({}))
    return _coerce_value(compiled.evaluate({}), compiled.sql_type, sql_type, column)


def _coerce_value(value: Any, given: ex.SqlType, sql_type: ex.SqlType, column: str) -> Any:
    """An evaluated value of type ``given`` in ``sql_type``'s Python form."""
    if value is None or given == sql_type:
        return value
    if isinstance(sql_type, ex.ArrayType) and isinstance(given, ex.ArrayType):
        return [_coerce_value(v, given.element, sql_type.element, column) for v in value]
    if isinstance(sql_type, ex.MapType) and isinstance(given, ex.MapType):
        return {
            _coerce_value(k, given.key, sql_type.key, column): _coerce_value(
                v, given.value, sql_type.value, column
            )
            for k, v in value.items()
        }
    if isinstance(sql_type, ex.StructType) and isinstance(given, ex.StructType):
        types = {f.name: f.type for f in given.fields}
        return {
            f.name: _coerce_value(value.get(f.name), types[f.name], f.type, column)
            if f.name in types
            else None
            for f in sql_type.fields
        }
    return _convert(value, sql_type, column)


def _convert(value: Any, sql_type: ex.SqlType, column: str) -> Any:
    if value is None:
        return None
    if isinstance(sql_type, ex.DecimalType):
        if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
            raise _mismatch(column, sql_type, value)
        quantum = decimal.Decimal(1).scaleb(-sql_type.scale)
        number = decimal.Decimal(str(value)).quantize(quantum, rounding=decimal.ROUND_HALF_UP)
        if len(number.as_tuple().digits) > sql_type.precision:
            raise KsqlStatementError(
                f"Cannot fit decimal '{value}' into DECIMAL({sql_type.precision}, "
                f"{sql_type.scale}) without rounding."
            )
        return number
    if not isinstance(sql_type, ex.PrimitiveType):
        raise _mismatch(column, sql_type, value)
    name = sql_type.name
    if name == "BOOLEAN" and isinstance(value, bool):
        return value
    if isinstance(value, bool):
        raise _mismatch(column, sql_type, value)
    if name in ("INTEGER", "BIGINT") and isinstance(value, int):
        limit = 2**31 if name == "INTEGER" else 2**63
        if not -limit <= value < limit:
            raise _mismatch(column, sql_type, value)
        return value
    if name == "DOUBLE" and isinstance(value, int | float | decimal.Decimal):
        return float(value)
    if name == "STRING" and isinstance(value, str):
        return value
    if name == "BYTES" and isinstance(value, str):
        return value.encode()
    if name in ("TIMESTAMP", "DATE", "TIME"):
        return _temporal(value, name, sql_type, column)
    raise _mismatch(column, sql_type, value)


def _temporal(value: Any, name: str, sql_type: ex.SqlType, column: str) -> int:
    """TIMESTAMP: epoch ms; DATE: epoch days; TIME: ms of the day."""
    if isinstance(value, int) and name == "TIMESTAMP":
        return value
    if not isinstance(value, str):
        raise _mismatch(column, sql_type, value)
    try:
        if name == "DATE":
            return (datetime.date.fromisoformat(value) - _EPOCH.date()).days
        if name == "TIME":
            t = datetime.time.fromisoformat(value)
            return ((t.hour * 60 + t.minute) * 60 + t.second) * 1000 + t.microsecond // 1000
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise _mismatch(column, sql_type, value) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int((moment - _EPOCH) / datetime.timedelta(milliseconds=1))


# ---- writing ---------------------------------------------------------------------------


def _json_text(value: Any) -> str:
    """JSON with DECIMAL written as a number and BYTES as base64."""
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return json.dumps(base64.b64encode(value).decode())
    if isinstance(value, float) and not math.isfinite(value):
        return f'"{double_text(value)}"'  # Java's names: NaN, Infinity, -Infinity
    if isinstance(value, list):
        return "[" + ",".join(_json_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(f"{json.dumps(_map_key(k))}:{_json_text(v)}" for k, v in value.items())
            + "}"
        )
    return json.dumps(value)


def _map_key(key: Any) -> str:
    """A map's key as a JSON field name: a null key is written as ``null``, as ksqlDB's
    JSON writer does."""
    return "null" if key is None else str(key)


def _kafka_bytes(column: Column, value: Any) -> bytes | None:
    if value is None:
        return None
    kind = str(column.type)
    if kind == "INTEGER":
        return struct.pack(">i", value)
    if kind == "BIGINT":
        return struct.pack(">q", value)
    if kind == "DOUBLE":
        return struct.pack(">d", value)
    if kind == "STRING":
        return str(value).encode()
    if kind == "BYTES":
        return bytes(value)
    raise KsqlStatementError(f"The 'KAFKA' format does not support type '{kind}'")


def _delimited_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, float):
        return double_text(value)  # Java's Double.toString, as ksqlDB's printer
    return str(value)


_ASCII_ALNUM = re.compile(r"[0-9A-Za-z]")


def _delimited_field(text: str, delimiter: str, first: bool) -> str:
    """One field as ksqlDB's CSV printer writes it (Commons CSV's minimal quoting): quoted
    when it is the line's first and empty or not starting with an ASCII letter or digit
    (``"-10"``), when it starts with a character up to ``#`` (blanks and controls among
    them), holds the delimiter, a quote or a line break, or ends with a blank or control
    character; quotes inside doubled."""
    if not text:
        quote = first
    else:
        quote = (
            (first and not _ASCII_ALNUM.match(text))
            or text[0] <= "#"
            or any(c in text for c in (delimiter, '"', "\n", "\r"))
            or text[-1] <= " "
        )
    return '"' + text.replace('"', '""') + '"' if quote else text


def delimited_line(values: list[Any], delimiter: str) -> str:
    """A DELIMITED record of ``values``: a null is nothing, never quoted."""
    return delimiter.join(
        "" if value is None else _delimited_field(_delimited_text(value), delimiter, i == 0)
        for i, value in enumerate(values)
    )


def _serialize(
    fmt: str,
    columns: tuple[Column, ...],
    row: dict[str, Any],
    delimiter: str | None,
    unwrap_single: bool,
    nullable: str | None = None,
) -> bytes | None:
    if fmt == "NONE" or not columns:
        return None
    values = [row.get(c.name) for c in columns]
    if fmt == "KAFKA":
        return _kafka_bytes(columns[0], values[0])
    if fmt == "JSON":
        if unwrap_single and len(columns) == 1:
            return None if values[0] is None else _json_text(values[0]).encode()
        return _json_text({c.name: v for c, v in zip(columns, values, strict=True)}).encode()
    if fmt == "DELIMITED":
        if all(v is None for v in values) and len(values) == 1:
            return None
        return delimited_line(values, delimiter or ",").encode()
    if fmt == "PROTOBUF_NOSR":
        try:
            typed = tuple((c.name, c.type) for c in columns)
            return protobuf_rows.bare_bytes(typed, row, nullable)
        except protobuf_rows.ProtobufRowError as exc:
            raise KsqlStatementError(str(exc)) from None
    raise KsqlStatementError(f"INSERT VALUES into the {fmt} format is not supported yet")


def key_bytes(source: DataSource, row: dict[str, Any]) -> bytes | None:
    nullable = protobuf_rows.nullable_representation(source.properties, "key")
    return _serialize(
        source.key_format, source.key_columns, row, source.key_delimiter, True, nullable
    )


def value_bytes(source: DataSource, row: dict[str, Any]) -> bytes | None:
    unwrap = source.wrap_single_value is False
    nullable = protobuf_rows.nullable_representation(source.properties, "value")
    return _serialize(
        source.value_format, source.value_columns, row, source.value_delimiter, unwrap, nullable
    )


def check_supported(source: DataSource) -> None:
    for fmt in (source.key_format, source.value_format):
        if fmt not in SUPPORTED_FORMATS:
            raise KsqlStatementError(f"INSERT VALUES into the {fmt} format is not supported yet")
