"""Kafka Connect's converters, by their Kafka class names: the bytes of a record's key or
value to and from Connect data (``data.Schema`` and a value).

- ``JsonConverter`` (``org.apache.kafka.connect.json.JsonConverter``): with
  ``schemas.enable=true`` (the default) each message is Kafka's envelope
  ``{"schema": {...}, "payload": ...}``, the schema in Kafka's JSON form (``type``,
  ``optional``, ``name``, ``version``, ``doc``, ``parameters``, a struct's ``fields``
  each with its ``field`` name, an array's ``items``, a map's ``keys`` and ``values``);
  bytes are base64, a map with non-string keys is a list of ``[key, value]`` pairs, a
  Decimal is base64 of its unscaled two's complement bytes or a number
  (``decimal.format=BASE64|NUMERIC``). Reading plain JSON with ``schemas.enable=true``
  is Kafka's error telling the user to set it to false. Output is compact, as Jackson
  writes it.
- ``StringConverter`` (``org.apache.kafka.connect.storage.StringConverter``): text in
  ``converter.encoding`` (UTF-8), any value by its string form.
- ``ByteArrayConverter`` (``org.apache.kafka.connect.converters.ByteArrayConverter``):
  bytes as they are; anything else is a ``DataException``.

A converter is configured with the settings under its prefix (``value.converter.``
stripped) and whether it converts keys. Does not own choosing the class (``plugins``).
"""

from __future__ import annotations

import base64
import datetime
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import Any

from strom.connect import config_def as cd
from strom.connect.data import (
    ARRAY,
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
    INTEGER_TYPES,
    MAP,
    OPTIONAL_BYTES_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING,
    STRUCT,
    TIME,
    TIMESTAMP,
    TYPES,
    DataException,
    Schema,
    SchemaAndValue,
    Struct,
)

ENVELOPE_HINT = (
    'JsonConverter with schemas.enable requires "schema" and "payload" fields and may not '
    "contain additional fields. If you are trying to deserialize plain JSON data, set "
    "schemas.enable=false in your converter configuration."
)


class Converter(ABC):
    """Bytes of one side of a record (key or value) to and from Connect data."""

    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "converter.type",
                cd.STRING,
                None,
                cd.LOW,
                "How this converter will be used: key, value or header.",
                check=cd.one_of("key", "value", "header"),
            )
        ]
    )

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        """Settings under the converter's prefix; ConfigError (one line) for a bad one."""
        self.is_key = is_key
        self.settings = self.CONFIG_DEF.parse(configs)

    @abstractmethod
    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        """The bytes of ``value`` for a record of ``topic``."""

    @abstractmethod
    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        """(schema, value) of the bytes of a record of ``topic``."""


def java_string(value: Any) -> str:
    """A value as Java's ``toString`` writes the simple ones (``true``, ``1.5``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class StringConverter(Converter):
    CONFIG_DEF = Converter.CONFIG_DEF.merged(
        cd.ConfigDef(
            [
                cd.ConfigKey(
                    "converter.encoding",
                    cd.STRING,
                    "UTF-8",
                    cd.HIGH,
                    "The name of the Java character set to use for encoding strings as byte "
                    "arrays.",
                )
            ]
        )
    )

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        super().configure(configs, is_key)
        encoding = self.settings["converter.encoding"]
        try:
            "".encode(encoding)
        except LookupError:
            raise cd.invalid("converter.encoding", encoding, "unknown character set") from None
        self.encoding = encoding

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        return None if value is None else java_string(value).encode(self.encoding)

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return OPTIONAL_STRING_SCHEMA, None
        try:
            return OPTIONAL_STRING_SCHEMA, data.decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise DataException(
                f"Failed to deserialize string: not {self.encoding} text ({exc.reason})"
            ) from None


class ByteArrayConverter(Converter):
    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is not None and schema.type != BYTES:
            raise DataException(
                f"Invalid schema type for ByteArrayConverter: {schema.type.upper()}"
            )
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise DataException(
                f"ByteArrayConverter is not compatible with objects of type {type(value).__name__}"
            )
        return None if value is None else bytes(value)

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        return OPTIONAL_BYTES_SCHEMA, data


class JsonConverter(Converter):
    CONFIG_DEF = Converter.CONFIG_DEF.merged(
        cd.ConfigDef(
            [
                cd.ConfigKey(
                    "schemas.enable",
                    cd.BOOLEAN,
                    True,
                    cd.HIGH,
                    "Include schemas within each of the serialized values and keys.",
                ),
                cd.ConfigKey(
                    "schemas.cache.size",
                    cd.INT,
                    1000,
                    cd.HIGH,
                    "The maximum number of schemas that can be cached in this converter instance.",
                ),
                cd.ConfigKey(
                    "decimal.format",
                    cd.STRING,
                    "BASE64",
                    cd.LOW,
                    "Controls which format this converter will serialize decimals in: BASE64 "
                    "or NUMERIC.",
                    check=cd.one_of("BASE64", "NUMERIC", case_sensitive=False),
                ),
                cd.ConfigKey(
                    "replace.null.with.default",
                    cd.BOOLEAN,
                    True,
                    cd.LOW,
                    "Whether to replace fields that have a default value and that are null "
                    "to the default value.",
                ),
            ]
        )
    )

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        super().configure(configs, is_key)
        self.schemas_enabled = self.settings["schemas.enable"]
        self.numeric_decimals = self.settings["decimal.format"].upper() == "NUMERIC"
        self.replace_null = self.settings["replace.null.with.default"]
        # Kafka's schemas.cache.size: each schema's JSON text, by the schema object (kept
        # alive by the entry, so its id stays its own), written once, not once a record
        self.schema_texts: dict[int, tuple[Schema, str]] = {}
        # and each schema's payload writer: _to_json with its struct walks and type
        # checks planned once per schema
        self.writers: dict[int, tuple[Schema, Callable[[Any], Any]]] = {}
        self.cache_size = self.settings["schemas.cache.size"]

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is None and value is None:
            return None
        payload = _schemaless_to_json(value) if schema is None else self._writer(schema)(value)
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        if self.schemas_enabled:
            text = f'{{"schema":{self._schema_text(schema)},"payload":{text}}}'
        return text.encode()

    def _schema_text(self, schema: Schema | None) -> str:
        if schema is None:
            return "null"
        cached = self.schema_texts.get(id(schema))
        if cached is not None and cached[0] is schema:
            return cached[1]
        text = json.dumps(schema_to_json(schema), separators=(",", ":"), ensure_ascii=False)
        if len(self.schema_texts) >= self.cache_size:
            self.schema_texts.clear()
        self.schema_texts[id(schema)] = (schema, text)
        return text

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        try:
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataException(
                f"Converting byte[] to Kafka Connect data failed due to serialization error: {exc}"
            ) from None
        if not self.schemas_enabled:
            return None, document
        if not isinstance(document, dict) or set(document) != {"schema", "payload"}:
            raise DataException(ENVELOPE_HINT)
        if document["schema"] is None:
            return None, document["payload"]
        schema = schema_from_json(document["schema"])
        return schema, self._from_json(schema, document["payload"])

    def _writer(self, schema: Schema) -> Callable[[Any], Any]:
        cached = self.writers.get(id(schema))
        if cached is not None and cached[0] is schema:
            return cached[1]
        if len(self.writers) >= self.cache_size:
            self.writers.clear()
        writer = self._plan(schema)
        self.writers[id(schema)] = (schema, writer)
        return writer

    def _plan(self, schema: Schema) -> Callable[[Any], Any]:
        """``lambda value: self._to_json(schema, value)``, with a struct's fields and the
        common primitives checked directly (anything else, and null, as _to_json does)."""
        generic = partial(self._to_json, schema)
        if schema.type == STRUCT and schema.name != DECIMAL:
            fields = [(f.name, self._plan(f.schema)) for f in schema.fields]

            def struct(value: Any) -> Any:
                if value is None:
                    return generic(None)
                values = value.values if isinstance(value, Struct) else value
                return {name: write(values.get(name)) for name, write in fields}

            return struct
        exact = _EXACT_TYPES.get(schema.type) if schema.name != DECIMAL else None
        if exact is None:
            return generic

        def primitive(value: Any) -> Any:
            return value if type(value) in exact else generic(value)

        return primitive

    def _to_json(self, schema: Schema | None, value: Any) -> Any:
        if schema is None:
            return _schemaless_to_json(value)
        if value is None:
            if self.replace_null and schema.default is not None:
                value = schema.default
            elif schema.optional:
                return None
            else:
                raise DataException(
                    "Conversion error: null value for field that is required and has no "
                    "default value"
                )
        if schema.name == DECIMAL:
            decimal = Decimal(value)
            if self.numeric_decimals:
                return float(decimal) if decimal != decimal.to_integral() else int(decimal)
            scale = int((schema.parameters or {}).get("scale", "0"))
            unscaled = int(decimal.scaleb(scale))
            size = max(1, (unscaled.bit_length() + 8) // 8)
            return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
        if schema.type == BYTES:
            return base64.b64encode(bytes(value)).decode()
        if schema.type == ARRAY:
            return [self._to_json(schema.value_schema, item) for item in value]
        if schema.type == MAP:
            assert schema.key_schema is not None
            if schema.key_schema.type == STRING:
                return {k: self._to_json(schema.value_schema, v) for k, v in value.items()}
            return [
                [self._to_json(schema.key_schema, k), self._to_json(schema.value_schema, v)]
                for k, v in value.items()
            ]
        if schema.type == STRUCT:
            values = value.values if isinstance(value, Struct) else value
            return {f.name: self._to_json(f.schema, values.get(f.name)) for f in schema.fields}
        return _check_primitive(schema, value)

    def _from_json(self, schema: Schema | None, value: Any) -> Any:
        if schema is None:
            return value
        if value is None:
            if schema.default is not None and self.replace_null:
                return schema.default
            if schema.optional:
                return None
            raise DataException(f"Invalid null value for required {schema.type.upper()} field")
        if schema.name == DECIMAL:
            scale = int((schema.parameters or {}).get("scale", "0"))
            if isinstance(value, int | float):
                return Decimal(str(value))
            unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
            return Decimal(unscaled).scaleb(-scale)
        if schema.type == BYTES:
            return base64.b64decode(value)
        if schema.type == ARRAY:
            return [self._from_json(schema.value_schema, item) for item in value]
        if schema.type == MAP:
            if isinstance(value, dict):
                return {k: self._from_json(schema.value_schema, v) for k, v in value.items()}
            return {
                self._from_json(schema.key_schema, k): self._from_json(schema.value_schema, v)
                for k, v in value
            }
        if schema.type == STRUCT:
            if not isinstance(value, dict):
                raise DataException("Structs should be encoded as JSON objects")
            return Struct(
                schema,
                {f.name: self._from_json(f.schema, value.get(f.name)) for f in schema.fields},
            )
        return _check_primitive(schema, value)


# The Python types a primitive's value passes _check_primitive with unchanged (None and
# any other type take the general path).
_EXACT_TYPES: dict[str, tuple[type, ...]] = {
    **{kind: (int,) for kind in INTEGER_TYPES},
    FLOAT32: (int, float),
    FLOAT64: (int, float),
    BOOLEAN: (bool,),
    STRING: (str,),
}


def _check_primitive(schema: Schema, value: Any) -> Any:
    kind = schema.type
    if kind in INTEGER_TYPES and (isinstance(value, bool) or not isinstance(value, int)):
        raise DataException(f"Invalid type for {kind.upper()}: {type(value).__name__}")
    if kind in (FLOAT32, FLOAT64) and not isinstance(value, int | float):
        raise DataException(f"Invalid type for {kind.upper()}: {type(value).__name__}")
    if kind == BOOLEAN and not isinstance(value, bool):
        raise DataException(f"Invalid type for BOOLEAN: {type(value).__name__}")
    if kind == STRING and not isinstance(value, str):
        raise DataException(f"Invalid type for STRING: {type(value).__name__}")
    return value


def _schemaless_to_json(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Struct):
        raise DataException("Cannot convert a Struct without its schema; give the schema")
    if isinstance(value, list | tuple):
        return [_schemaless_to_json(item) for item in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _schemaless_to_json(v) for k, v in value.items()}
        return [[_schemaless_to_json(k), _schemaless_to_json(v)] for k, v in value.items()]
    if isinstance(value, Decimal):
        return float(value)
    return value


def schema_to_json(schema: Schema) -> dict[str, Any]:
    """A schema in Kafka's JSON form, its keys in the order JsonConverter writes them."""
    out: dict[str, Any] = {"type": schema.type}
    if schema.type == ARRAY and schema.value_schema is not None:
        out["items"] = schema_to_json(schema.value_schema)
    elif schema.type == MAP and schema.key_schema is not None and schema.value_schema is not None:
        out["keys"] = schema_to_json(schema.key_schema)
        out["values"] = schema_to_json(schema.value_schema)
    elif schema.type == STRUCT:
        out["fields"] = [{**schema_to_json(f.schema), "field": f.name} for f in schema.fields]
    out["optional"] = schema.optional
    if schema.name is not None:
        out["name"] = schema.name
    if schema.version is not None:
        out["version"] = schema.version
    if schema.doc is not None:
        out["doc"] = schema.doc
    if schema.parameters:
        out["parameters"] = dict(schema.parameters)
    if schema.default is not None:
        out["default"] = schema.default
    return out


def schema_from_json(document: Any) -> Schema:
    """A schema from Kafka's JSON form; DataException naming what is wrong."""
    if not isinstance(document, dict) or not isinstance(document.get("type"), str):
        raise DataException("Schema must contain 'type' field")
    kind = document["type"]
    if kind not in TYPES:
        raise DataException(f"Unknown schema type: {kind}")
    common: dict[str, Any] = {
        "optional": bool(document.get("optional", False)),
        "name": document.get("name"),
        "version": document.get("version"),
        "doc": document.get("doc"),
        "parameters": document.get("parameters"),
        "default": document.get("default"),
    }
    if kind == ARRAY:
        if "items" not in document:
            raise DataException("Array schema did not specify the element type")
        return Schema(ARRAY, value_schema=schema_from_json(document["items"]), **common)
    if kind == MAP:
        if "keys" not in document or "values" not in document:
            raise DataException("Map schema did not specify the key and value types")
        return Schema(
            MAP,
            key_schema=schema_from_json(document["keys"]),
            value_schema=schema_from_json(document["values"]),
            **common,
        )
    if kind == STRUCT:
        fields = document.get("fields")
        if not isinstance(fields, list):
            raise DataException('Struct schema\'s "fields" argument is not an array.')
        built = []
        for field in fields:
            if not isinstance(field, dict) or not isinstance(field.get("field"), str):
                raise DataException("Struct schema's field name not specified properly")
            built.append((field["field"], schema_from_json(field)))
        struct = Schema.struct(built)
        return Schema(STRUCT, fields=struct.fields, **common)
    return Schema(kind, **common)


# Header converters --------------------------------------------------------------------------


class HeaderConverter(ABC):
    """A record header's bytes to and from a Connect value with its schema (Kafka's
    ``HeaderConverter``), configured with the settings under ``header.converter.``."""

    @abstractmethod
    def configure_header(self, configs: dict[str, Any]) -> None:
        """Settings under ``header.converter.``; ConfigError (one line) for a bad one."""

    @abstractmethod
    def from_connect_header(
        self, topic: str, header_key: str, schema: Schema | None, value: Any
    ) -> bytes | None:
        """The bytes of one header of a record of ``topic``."""

    @abstractmethod
    def to_connect_header(self, topic: str, header_key: str, data: bytes | None) -> SchemaAndValue:
        """The schema and value of one header's bytes."""


class _ConverterHeaders(HeaderConverter):
    """Kafka's StringConverter, JsonConverter and ByteArrayConverter are header converters
    too: a header as the converter writes a record's value."""

    def configure_header(self, configs: dict[str, Any]) -> None:
        assert isinstance(self, Converter)
        self.configure({**configs, "converter.type": "header"}, is_key=False)

    def from_connect_header(
        self, topic: str, header_key: str, schema: Schema | None, value: Any
    ) -> bytes | None:
        assert isinstance(self, Converter)
        return self.from_connect_data(topic, schema, value)

    def to_connect_header(self, topic: str, header_key: str, data: bytes | None) -> SchemaAndValue:
        assert isinstance(self, Converter)
        return SchemaAndValue(*self.to_connect_data(topic, data))


class StringHeaderConverter(_ConverterHeaders, StringConverter):
    """``StringConverter`` as a header converter."""


class JsonHeaderConverter(_ConverterHeaders, JsonConverter):
    """``JsonConverter`` as a header converter."""


class ByteArrayHeaderConverter(_ConverterHeaders, ByteArrayConverter):
    """``ByteArrayConverter`` as a header converter."""


class SimpleHeaderConverter(HeaderConverter):
    """Kafka's ``SimpleHeaderConverter`` (the default): a header's value as text in UTF-8,
    as Kafka's ``Values.convertToString`` writes it (strings as they are, numbers and
    booleans as their text, bytes in base64, arrays ``[1,2]``, maps ``{"a":1}``, structs
    ``{"field":value}``, Date ``yyyy-MM-dd``, Time ``HH:mm:ss.SSSZ``, Timestamp
    ``yyyy-MM-ddTHH:mm:ss.SSSZ``), read back with the schema ``Values.parseString`` infers
    (BOOLEAN, the smallest integer type that holds the number, FLOAT32 or FLOAT64, an
    ARRAY or MAP of JSON text, the logical types from those ISO forms, else STRING). Bytes
    that are not UTF-8 read as BYTES."""

    CONFIG_DEF = Converter.CONFIG_DEF

    def configure_header(self, configs: dict[str, Any]) -> None:
        self.settings = self.CONFIG_DEF.parse(configs)

    def from_connect_header(
        self, topic: str, header_key: str, schema: Schema | None, value: Any
    ) -> bytes | None:
        if value is None:
            return None
        return value_to_string(schema, value).encode("utf-8")

    def to_connect_header(self, topic: str, header_key: str, data: bytes | None) -> SchemaAndValue:
        if data is None:
            return SchemaAndValue(None, None)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return SchemaAndValue(OPTIONAL_BYTES_SCHEMA, data)
        return parse_string(text)


_EPOCH_DAY = datetime.date(1970, 1, 1)
_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME_TEXT = re.compile(r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?Z")
_TIMESTAMP_TEXT = re.compile(r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2}(?:\.\d{1,3})?Z)")
_INTEGER_SCHEMAS = ((INT8, 7), (INT16, 15), (INT32, 31), (INT64, 63))


def value_to_string(schema: Schema | None, value: Any, embedded: bool = False) -> str:
    """A Connect value as Kafka's ``Values.convertToString`` writes it."""
    name = schema.name if schema is not None else None
    if value is None:
        return "null"
    if name == DATE and isinstance(value, int):
        return (_EPOCH_DAY + datetime.timedelta(days=value)).isoformat()
    if name == TIME and isinstance(value, int):
        moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=value)
        return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    if name == TIMESTAMP and isinstance(value, int):
        moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=value)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    if isinstance(value, bool | int | float | Decimal):
        return java_string(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) if embedded else value
    if isinstance(value, bytes | bytearray | memoryview):
        text = base64.b64encode(bytes(value)).decode()
        return f'"{text}"' if embedded else text
    element = schema.value_schema if schema is not None else None
    if isinstance(value, list | tuple):
        return "[" + ",".join(value_to_string(element, item, True) for item in value) + "]"
    if isinstance(value, Struct):
        return (
            "{"
            + ",".join(
                f"{json.dumps(f.name)}:{value_to_string(f.schema, value.values.get(f.name), True)}"
                for f in value.schema.fields
            )
            + "}"
        )
    if isinstance(value, dict):
        keys = schema.key_schema if schema is not None else None
        return (
            "{"
            + ",".join(
                f"{value_to_string(keys, k, True)}:{value_to_string(element, v, True)}"
                for k, v in value.items()
            )
            + "}"
        )
    return str(value)


def parse_string(text: str) -> SchemaAndValue:
    """The schema and value Kafka's ``Values.parseString`` infers from a header's text."""
    stripped = text.strip()
    if not stripped:
        return SchemaAndValue(Schema(STRING), text)
    if stripped == "null":
        return SchemaAndValue(None, None)
    if stripped.lower() in ("true", "false"):
        return SchemaAndValue(Schema(BOOLEAN), stripped.lower() == "true")
    number = _number(stripped)
    if number is not None:
        return number
    if _DATE_TEXT.fullmatch(stripped):
        day = datetime.date.fromisoformat(stripped)
        return SchemaAndValue(Schema(INT32, name=DATE, version=1), (day - _EPOCH_DAY).days)
    if (found := _TIME_TEXT.fullmatch(stripped)) is not None:
        hours, minutes, seconds, fraction = found.groups()
        millis = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1000
        return SchemaAndValue(
            Schema(INT32, name=TIME, version=1), millis + int((fraction or "0").ljust(3, "0"))
        )
    if (found := _TIMESTAMP_TEXT.fullmatch(stripped)) is not None:
        moment = datetime.datetime.fromisoformat(stripped.replace("Z", "+00:00"))
        return SchemaAndValue(
            Schema(INT64, name=TIMESTAMP, version=1), int(moment.timestamp() * 1000)
        )
    if stripped[0] in '["{':
        try:
            document = json.loads(stripped)
        except ValueError:
            return SchemaAndValue(Schema(STRING), text)
        return _inferred(document)
    return SchemaAndValue(Schema(STRING), text)


def _number(text: str) -> SchemaAndValue | None:
    try:
        decimal = Decimal(text)
    except ArithmeticError:
        return None
    if not decimal.is_finite() or text.lower().startswith(("inf", "nan", "+inf", "-inf")):
        return None
    if decimal == decimal.to_integral_value() and "." not in text and "e" not in text.lower():
        whole = int(decimal)
        for kind, bits in _INTEGER_SCHEMAS:
            if -(2**bits) <= whole < 2**bits:
                return SchemaAndValue(Schema(kind), whole)
        return SchemaAndValue(
            Schema(BYTES, name=DECIMAL, version=1, parameters={"scale": "0"}), decimal
        )
    as_float = float(decimal)
    if abs(as_float) <= 3.4028234663852886e38:
        return SchemaAndValue(Schema(FLOAT32), as_float)
    return SchemaAndValue(Schema(FLOAT64), as_float)


def _inferred(document: Any) -> SchemaAndValue:
    """A parsed JSON value with the schema Kafka would infer (None when mixed)."""
    if isinstance(document, str):
        return SchemaAndValue(Schema(STRING), document)
    if isinstance(document, bool):
        return SchemaAndValue(Schema(BOOLEAN), document)
    if isinstance(document, int | float):
        found = _number(json.dumps(document))
        return found if found is not None else SchemaAndValue(Schema(FLOAT64), document)
    if isinstance(document, list):
        items = [_inferred(item) for item in document]
        common = _common_schema(items)
        return SchemaAndValue(
            None if common is None else Schema.array(common), [item.value for item in items]
        )
    if isinstance(document, dict):
        values = {key: _inferred(item) for key, item in document.items()}
        common = _common_schema(list(values.values()))
        schema = None if common is None else Schema.map(Schema(STRING), common)
        return SchemaAndValue(schema, {key: item.value for key, item in values.items()})
    return SchemaAndValue(None, None)


def _common_schema(items: list[SchemaAndValue]) -> Schema | None:
    schemas = {item.schema for item in items if item.schema is not None}
    integer = [s for s in schemas if s.type in INTEGER_TYPES and s.name is None]
    if integer and len(integer) == len(schemas):  # widen to the largest integer
        return Schema(max((s.type for s in integer), key=INTEGER_TYPES.index))
    return next(iter(schemas)) if len(schemas) == 1 else None


# Kafka's names (and their short aliases, and Strom's own) of the header converters.
_HEADER_CONVERTERS: tuple[tuple[type[HeaderConverter], str], ...] = (
    (SimpleHeaderConverter, "org.apache.kafka.connect.storage.SimpleHeaderConverter"),
    (StringHeaderConverter, "org.apache.kafka.connect.storage.StringConverter"),
    (JsonHeaderConverter, "org.apache.kafka.connect.json.JsonConverter"),
    (ByteArrayHeaderConverter, "org.apache.kafka.connect.converters.ByteArrayConverter"),
)


def header_converter_class(name: str) -> type[HeaderConverter] | None:
    """The header converter a class name (Kafka's, its simple name or that without
    ``Converter``, or Strom's) means; None when it names none."""
    wanted = name.strip()
    for cls, kafka in _HEADER_CONVERTERS:
        base = next(
            c for c in cls.__mro__ if c is SimpleHeaderConverter or c.__bases__ == (Converter,)
        )
        simple = kafka.rsplit(".", 1)[-1]
        names = {kafka, simple, simple.removesuffix("Converter"), f"{__name__}.{base.__name__}"}
        if wanted in names:
            return cls
    return None


def header_converter_names() -> list[str]:
    return [kafka for _, kafka in _HEADER_CONVERTERS]
