"""Kafka's type-changing transforms: ``Cast`` (``spec``: ``field:type,...`` or one type
for the whole key or value; int8..int64, float32, float64, boolean, string; bytes only
to string, as base64) and ``TimestampConverter`` (``field``, ``target.type`` string, unix,
Date, Time or Timestamp, ``format`` a SimpleDateFormat pattern, ``unix.precision``),
schemaful and schemaless, with Kafka's messages.

Integers narrow as Java's casts do (wrapping), text parses as Java's ``parseX`` (out of
range is Kafka's "was out of range" error), and booleans read ``true`` in any case.
Strom's values of the logical types are their encoded numbers (Timestamp: milliseconds
since the epoch; Date: days since the epoch; Time: milliseconds since midnight), what
the JsonConverter writes; a ``datetime`` is read as a Timestamp. So without a schema
an integer is a unix time and a ``datetime`` a Timestamp, and TimestampConverter writes
Date, Time and Timestamp as those numbers.

Does not own the SimpleDateFormat patterns (``java_dates``).
"""

from __future__ import annotations

import base64
import dataclasses
import struct
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from strom.config import ConfigError
from strom.connect import config_def as cd
from strom.connect.api import ConnectException
from strom.connect.converters import java_string
from strom.connect.data import (
    BOOLEAN,
    BYTES,
    DATE,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    TIME,
    TIMESTAMP,
    DataException,
    Schema,
    Struct,
)
from strom.connect.transforms.base import (
    KEY,
    REPLACE_NULL_WITH_DEFAULT,
    VALUE,
    ConnectRecord,
    SidedTransformation,
    checked_by,
    field_value,
    java_list,
    require_map,
    require_struct,
    struct_schema_like,
)
from strom.connect.transforms.java_dates import MS_PER_DAY, JavaDateFormat, epoch_ms

CAST_OUTPUT_TYPES = (INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN, STRING)
CAST_INPUT_TYPES = (*CAST_OUTPUT_TYPES, BYTES)
_INT_BITS = {INT8: 8, INT16: 16, INT32: 32, INT64: 64}
WHOLE_VALUE = ""
_ISO_FORMATS = {
    TIMESTAMP: JavaDateFormat("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"),
    DATE: JavaDateFormat("yyyy-MM-dd"),
    TIME: JavaDateFormat("HH:mm:ss.SSS'Z'"),
}


def _java_set(types: tuple[str, ...]) -> str:
    return "[" + ", ".join(t.upper() for t in types) + "]"


def parse_cast_spec(mappings: list[str]) -> dict[str, str]:
    """``{field or WHOLE_VALUE: type}``; ConfigError in Kafka's words."""
    if not mappings:
        raise ConfigError("Must specify at least one field to cast.")
    casts: dict[str, str] = {}
    for mapping in mappings:
        parts = mapping.split(":")
        if len(parts) > 2:
            raise cd.invalid("renames", java_list(mappings), f"Invalid rename mapping: {mapping}")
        field, kind = (WHOLE_VALUE, parts[0]) if len(parts) == 1 else parts
        kind = kind.strip().lower()
        if kind not in (*CAST_INPUT_TYPES, "array", "map", "struct"):
            raise ConfigError(f"Invalid type found in casting spec: {kind}")
        if kind not in CAST_OUTPUT_TYPES:
            raise ConfigError(
                f"Cast transformation does not support casting to {kind.upper()}; supported "
                f"types are {_java_set(CAST_OUTPUT_TYPES)}"
            )
        casts[field.strip()] = kind
    if WHOLE_VALUE in casts and len(mappings) > 1:
        raise ConfigError(
            "Cast transformations that specify a type to cast the entire value to may ony "
            "specify a single cast in their spec"
        )
    return casts


def _inferred_type(value: Any) -> str:
    """Kafka's ``ConnectSchema.schemaType`` of a schemaless value."""
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return INT64
    if isinstance(value, float | Decimal):
        return FLOAT64
    if isinstance(value, str):
        return STRING
    if isinstance(value, bytes | bytearray):
        return BYTES
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, Struct):
        return "struct"
    raise DataException(
        f"Cast transformation was passed a value of type {type(value).__name__} which is not "
        "supported by Connect's data API"
    )


def _wrapped(number: int, bits: int) -> int:
    """Java's narrowing of an integer to ``bits`` bits."""
    half = 1 << (bits - 1)
    return (number + half) % (1 << bits) - half


def cast_value(schema: Schema | None, value: Any, target: str) -> Any:
    """``value`` (of ``schema``, or inferred) cast to ``target``, as Kafka's Cast."""
    if value is None:
        return None
    source = schema.type if schema is not None else _inferred_type(value)
    if source not in CAST_INPUT_TYPES:
        raise DataException(
            f"Cast transformation does not support casting from {source.upper()}; supported "
            f"types are {_java_set(CAST_INPUT_TYPES)}"
        )
    if isinstance(value, datetime):
        value = epoch_ms(value)
    if target == STRING:
        return _cast_to_string(schema, value)
    if isinstance(value, bytes | bytearray):
        raise DataException(f"Unexpected type in Cast transformation: {type(value).__name__}")
    try:
        if target in _INT_BITS:
            bits = _INT_BITS[target]
            if isinstance(value, str):
                if value != value.strip():  # Java's parseInt takes no spaces
                    raise ValueError(value)
                number = int(value)
                if _wrapped(number, bits) != number:
                    raise ValueError(value)
                return number
            return _wrapped(int(value), bits)
        if target in (FLOAT32, FLOAT64):
            real = float(value)
            if target == FLOAT32:
                real = struct.unpack("f", struct.pack("f", real))[0]
            return real
        if isinstance(value, str):
            return value.lower() == "true"
        return int(value) != 0 if not isinstance(value, bool) else value
    except (ValueError, OverflowError, struct.error):
        raise DataException(
            f"Value ({java_string(value)}) was out of range for requested data type"
        ) from None


def _cast_to_string(schema: Schema | None, value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if schema is not None and schema.name in _ISO_FORMATS and isinstance(value, int):
        milliseconds = value * MS_PER_DAY if schema.name == DATE else value
        return _ISO_FORMATS[schema.name].format(milliseconds)
    return java_string(value)


class Cast(SidedTransformation):
    """Cast fields or the entire key or value to a specific type."""

    PURPOSE = "cast types"
    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "spec",
                cd.LIST,
                cd.REQUIRED,
                cd.HIGH,
                "List of fields and the type to cast them to of the form field1:type,field2:type "
                "to cast fields of Maps or Structs. A single type to cast the entire value. Valid "
                "types are int8, int16, int32, int64, float32, float64, boolean, and string. Note "
                "that binary fields can only be cast to string.",
                check=checked_by(parse_cast_spec),
            ),
            REPLACE_NULL_WITH_DEFAULT,
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.casts = parse_cast_spec(self.settings["spec"])
        self.whole = self.casts.get(WHOLE_VALUE)
        self.replace_null = self.settings["replace.null.with.default"]

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self.operating_value(record)
        if value is None:
            return record
        schema = self.operating_schema(record)
        if schema is None:
            if self.whole is not None:
                return self.with_operand(record, None, cast_value(None, value, self.whole))
            updated = dict(require_map(value, self.PURPOSE))
            for name, target in self.casts.items():
                updated[name] = cast_value(None, updated.get(name), target)
            return self.with_operand(record, None, updated)
        if self.whole is not None:
            new_schema = Schema(
                self.whole,
                optional=schema.optional,
                default=cast_value(schema, schema.default, self.whole),
                name=schema.name if self.whole == schema.type else None,
                version=schema.version,
                doc=schema.doc,
                parameters=schema.parameters,
            )
            return self.with_operand(record, new_schema, cast_value(schema, value, self.whole))
        struct_value = require_struct(value, self.PURPOSE)
        fields = []
        for f in schema.fields:
            field_target = self.casts.get(f.name)
            if field_target is None:
                fields.append((f.name, f.schema))
                continue
            default = cast_value(f.schema, f.schema.default, field_target)
            cast_schema = Schema(field_target, optional=f.schema.optional, default=default)
            fields.append((f.name, cast_schema))
        new_schema = dataclasses.replace(
            struct_schema_like(schema, fields),
            optional=schema.optional,
        )
        values = {}
        for f in schema.fields:
            original = field_value(struct_value, f, self.replace_null)
            wanted = self.casts.get(f.name)
            values[f.name] = original if wanted is None else cast_value(f.schema, original, wanted)
        return self.with_operand(record, new_schema, Struct(new_schema, values))


class CastKey(Cast):
    SIDE = KEY


class CastValue(Cast):
    SIDE = VALUE


# TimestampConverter

TYPE_STRING = "string"
TYPE_UNIX = "unix"
TYPE_DATE = "Date"
TYPE_TIME = "Time"
TYPE_TIMESTAMP = "Timestamp"
_LOGICAL = {TYPE_DATE: DATE, TYPE_TIME: TIME, TYPE_TIMESTAMP: TIMESTAMP}
# unix.precision: (milliseconds per unit, units per millisecond)
_UNIX_UNITS = {
    "seconds": (1000, 1),
    "milliseconds": (1, 1),
    "microseconds": (1, 1000),
    "nanoseconds": (1, 1_000_000),
}


def timestamp_schema(target: str, optional: bool) -> Schema:
    """The schema of a timestamp of ``target`` type."""
    if target == TYPE_STRING:
        return Schema(STRING, optional=optional)
    if target == TYPE_UNIX:
        return Schema(INT64, optional=optional)
    underlying = INT32 if target in (TYPE_DATE, TYPE_TIME) else INT64
    return Schema(underlying, optional=optional, name=_LOGICAL[target], version=1)


def timestamp_type_of_schema(schema: Schema) -> str:
    for kind, name in _LOGICAL.items():
        if schema.name == name:
            return kind
    if schema.type == STRING:
        return TYPE_STRING
    if schema.type == INT64:
        return TYPE_UNIX
    raise ConnectException(f"Schema {schema} does not correspond to a known timestamp type format")


def _inferred_timestamp_type(value: Any) -> str:
    if isinstance(value, datetime):
        return TYPE_TIMESTAMP
    if isinstance(value, int) and not isinstance(value, bool):
        return TYPE_UNIX
    if isinstance(value, str):
        return TYPE_STRING
    raise DataException(
        f"TimestampConverter does not support {type(value).__name__} objects as timestamps"
    )


class TimestampConverter(SidedTransformation):
    """Convert timestamps between different formats such as Unix epoch, strings, and
    Connect Date/Timestamp types; applies to individual fields or to the entire value."""

    PURPOSE = "converting timestamp formats"
    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "field",
                cd.STRING,
                "",
                cd.HIGH,
                "The field containing the timestamp, or empty if the entire value is a timestamp",
            ),
            cd.ConfigKey(
                "target.type",
                cd.STRING,
                cd.REQUIRED,
                cd.HIGH,
                "The desired timestamp representation: string, unix, Date, Time, or Timestamp",
                check=cd.one_of(TYPE_STRING, TYPE_UNIX, TYPE_DATE, TYPE_TIME, TYPE_TIMESTAMP),
            ),
            cd.ConfigKey(
                "format",
                cd.STRING,
                "",
                cd.MEDIUM,
                "A SimpleDateFormat-compatible format for the timestamp. Used to generate the "
                "output when type=string or used to parse the input if the input is a string.",
            ),
            cd.ConfigKey(
                "unix.precision",
                cd.STRING,
                "milliseconds",
                cd.LOW,
                "The desired Unix precision for the timestamp: seconds, milliseconds, "
                "microseconds, or nanoseconds. Used to generate the output when type=unix or "
                "used to parse the input if the input is a Long.",
                check=cd.one_of("nanoseconds", "microseconds", "milliseconds", "seconds"),
            ),
            REPLACE_NULL_WITH_DEFAULT,
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.field: str = self.settings["field"]
        self.target: str = self.settings["target.type"]
        pattern: str = self.settings["format"]
        self.ms_per_unit, self.units_per_ms = _UNIX_UNITS[self.settings["unix.precision"]]
        self.replace_null = self.settings["replace.null.with.default"]
        if self.target == TYPE_STRING and not pattern.strip():
            raise ConfigError(
                "TimestampConverter requires format option to be specified when using string "
                "timestamps"
            )
        self.format: JavaDateFormat | None = None
        if pattern.strip():
            try:
                self.format = JavaDateFormat(pattern)
            except ValueError:
                raise ConfigError(
                    "TimestampConverter requires a SimpleDateFormat-compatible pattern for "
                    f"string timestamps: {pattern}"
                ) from None

    def _to_ms(self, value: Any, kind: str) -> int:
        if kind == TYPE_STRING:
            if not isinstance(value, str):
                raise DataException(
                    f"Expected string timestamp to be a String, but found {type(value).__name__}"
                )
            assert self.format is not None  # a string source needs the format to read it
            try:
                return self.format.parse(value)
            except ValueError:
                raise DataException(
                    f"Could not parse timestamp: value ({value}) does not match pattern "
                    f"({self.format.pattern})"
                ) from None
        if isinstance(value, datetime):
            return epoch_ms(value)
        if kind == TYPE_UNIX:
            if not isinstance(value, int) or isinstance(value, bool):
                raise DataException(
                    f"Expected Unix timestamp to be a Long, but found {type(value).__name__}"
                )
            return value * self.ms_per_unit // self.units_per_ms
        if not isinstance(value, int) or isinstance(value, bool):
            raise DataException(
                f"Expected {kind} to be a java.util.Date, but found {type(value).__name__}"
            )
        return value * MS_PER_DAY if kind == TYPE_DATE else value

    def _from_ms(self, milliseconds: int) -> Any:
        if self.target == TYPE_STRING:
            assert self.format is not None  # configure requires it for string
            return self.format.format(milliseconds)
        if self.target == TYPE_UNIX:
            return milliseconds * self.units_per_ms // self.ms_per_unit
        if self.target == TYPE_DATE:
            return milliseconds // MS_PER_DAY
        if self.target == TYPE_TIME:
            return milliseconds % MS_PER_DAY
        return milliseconds

    def convert(self, value: Any, kind: str | None) -> Any:
        if value is None:
            return None
        return self._from_ms(self._to_ms(value, kind or _inferred_timestamp_type(value)))

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self.operating_value(record)
        schema = self.operating_schema(record)
        if schema is None:
            if value is None or not self.field:
                return self.with_operand(record, None, self.convert(value, None))
            updated = dict(require_map(value, self.PURPOSE))
            updated[self.field] = self.convert(updated.get(self.field), None)
            return self.with_operand(record, None, updated)
        if not self.field:
            new_schema = timestamp_schema(self.target, schema.optional)
            return self.with_operand(
                record, new_schema, self.convert(value, timestamp_type_of_schema(schema))
            )
        struct_value = None if value is None else require_struct(value, self.PURPOSE)
        fields = [
            (
                f.name,
                timestamp_schema(self.target, f.schema.optional)
                if f.name == self.field
                else f.schema,
            )
            for f in schema.fields
        ]
        new_schema = dataclasses.replace(
            struct_schema_like(schema, fields), optional=schema.optional
        )
        if struct_value is None:
            return self.with_operand(record, new_schema, None)
        values = {}
        for f in schema.fields:
            original = field_value(struct_value, f, self.replace_null)
            if f.name == self.field:
                values[f.name] = self.convert(original, timestamp_type_of_schema(f.schema))
            else:
                values[f.name] = original
        return self.with_operand(record, new_schema, Struct(new_schema, values))


class TimestampConverterKey(TimestampConverter):
    SIDE = KEY


class TimestampConverterValue(TimestampConverter):
    SIDE = VALUE
