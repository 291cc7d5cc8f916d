"""Kafka Connect's data model in Python: a ``Schema`` (type, optional, name, version,
doc, parameters, a struct's fields, an array's or map's element schemas) and a
``Struct`` (a struct value with its schema), with the common schemas Kafka names
(``Schema.STRING_SCHEMA``, ``OPTIONAL_STRING_SCHEMA``...).

Values are plain Python: ``str``, ``int``, ``float``, ``bool``, ``bytes``, ``list``,
``dict``, ``Struct`` and None; a schemaless value (no schema) is any of them. Logical
types (Decimal, Date, Time, Timestamp) are schemas with Kafka's names over their
underlying type; their conversion is the converters' business.

Does not own serialisation (``converters``) or records (``api``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INT8 = "int8"
INT16 = "int16"
INT32 = "int32"
INT64 = "int64"
FLOAT32 = "float32"
FLOAT64 = "float64"
BOOLEAN = "boolean"
STRING = "string"
BYTES = "bytes"
ARRAY = "array"
MAP = "map"
STRUCT = "struct"
PRIMITIVE_TYPES = (INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN, STRING, BYTES)
TYPES = (*PRIMITIVE_TYPES, ARRAY, MAP, STRUCT)
INTEGER_TYPES = (INT8, INT16, INT32, INT64)

DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"


class DataException(ValueError):
    """A value that does not fit its schema, or bytes a converter cannot read."""


@dataclass(frozen=True)
class Field:
    name: str
    index: int
    schema: Schema


@dataclass(frozen=True)
class Schema:
    """A Connect schema. Build structs with ``Schema.struct([...])``."""

    type: str
    optional: bool = False
    default: Any = None
    name: str | None = None
    version: int | None = None
    doc: str | None = None
    parameters: dict[str, str] | None = None
    fields: tuple[Field, ...] = ()
    key_schema: Schema | None = None
    value_schema: Schema | None = None

    @staticmethod
    def struct(
        fields: list[tuple[str, Schema]], name: str | None = None, optional: bool = False
    ) -> Schema:
        return Schema(
            STRUCT,
            optional=optional,
            name=name,
            fields=tuple(Field(n, i, s) for i, (n, s) in enumerate(fields)),
        )

    @staticmethod
    def array(element: Schema, optional: bool = False) -> Schema:
        return Schema(ARRAY, optional=optional, value_schema=element)

    @staticmethod
    def map(key: Schema, value: Schema, optional: bool = False) -> Schema:
        return Schema(MAP, optional=optional, key_schema=key, value_schema=value)

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


@dataclass(frozen=True)
class SchemaAndValue:
    """A value with its schema (None: schemaless), as a record's typed header holds it."""

    schema: Schema | None
    value: Any


STRING_SCHEMA = Schema(STRING)
OPTIONAL_STRING_SCHEMA = Schema(STRING, optional=True)
BYTES_SCHEMA = Schema(BYTES)
OPTIONAL_BYTES_SCHEMA = Schema(BYTES, optional=True)
INT32_SCHEMA = Schema(INT32)
INT64_SCHEMA = Schema(INT64)
BOOLEAN_SCHEMA = Schema(BOOLEAN)
FLOAT64_SCHEMA = Schema(FLOAT64)


@dataclass
class Struct:
    """A struct value: its schema and a value per field (by name)."""

    schema: Schema
    values: dict[str, Any] = field(default_factory=dict)

    def put(self, name: str, value: Any) -> Struct:
        if self.schema.field(name) is None:
            raise DataException(f"{name} is not a valid field name")
        self.values[name] = value
        return self

    def get(self, name: str) -> Any:
        if self.schema.field(name) is None:
            raise DataException(f"{name} is not a valid field name")
        return self.values.get(name)
