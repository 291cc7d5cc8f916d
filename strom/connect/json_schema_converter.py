"""Confluent's ``io.confluent.connect.json.JsonSchemaConverter``: Connect data to and from
JSON in Confluent's wire format (a zero byte, the schema id in four bytes, the JSON
text), its JSON Schema kept in a schema registry (Strom's or Confluent's).

Writing: the Connect schema becomes a JSON Schema as Confluent's JsonSchemaData makes it:
INT8..INT64 ``{"type": "integer", "connect.type": "int8"}`` (...``int64``), FLOAT32/64
``"number"`` with ``connect.type``, BOOLEAN ``"boolean"``, STRING ``"string"``, BYTES a
string of base64 (``connect.type: bytes``; a Decimal the same, or a number with
``decimal.format=NUMERIC``), an array ``"array"`` with ``items``, a map with required
string keys an ``"object"`` with ``additionalProperties`` and any other map an array of
``{key, value}`` objects (both ``connect.type: map``), a struct an ``"object"`` with
``properties``, each with its ``connect.index``; an optional schema is
``{"oneOf": [{"type": "null"}, ...]}``; the schema's name is its ``title``, its doc the
``description``, its version and parameters ``connect.version`` / ``connect.parameters``,
its default ``default``. Registered (type JSON) under ``<topic>-value`` / ``<topic>-key``
when ``auto.register.schemas`` (true), else the subject's latest version is written with.
Values: bytes and Decimals base64 (unscaled two's complement), the logical types'
numbers, an optional null as JSON null.

Reading: the schema the id names gives the Connect schema, as Confluent's reads any JSON
Schema: ``connect.type`` first, else ``"integer"`` INT64 and ``"number"`` FLOAT64;
``"object"`` a struct of its properties (in ``connect.index`` order), each required
unless under a ``oneOf`` with null; ``enum`` a string; a ``oneOf``/``anyOf`` of null and one
schema that schema made optional, of several a struct ``io.confluent.connect.json.OneOf``
of one optional field per choice (the value in the first choice it fits); local ``$ref``s
resolved. ``json.fail.invalid.schema=true`` checks each written value against its schema
(``jsonschema``) and fails the record that does not fit.

Settings as the AvroConverter's (``registry_converter``) plus ``decimal.format``,
``object.additional.properties`` and ``json.fail.invalid.schema``. Does not own the registry.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import jsonschema

from strom.connect import config_def as cd
from strom.connect.data import (
    ARRAY,
    BOOLEAN,
    BYTES,
    DECIMAL,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    MAP,
    STRING,
    STRUCT,
    DataException,
    Field,
    Schema,
    Struct,
)
from strom.connect.registry_converter import HEADER, WRITER_CACHE_SIZE, RegistryConverter

NAMESPACE = "io.confluent.connect.json"
CONNECT_TYPE = "connect.type"
CONNECT_VERSION = "connect.version"
CONNECT_PARAMETERS = "connect.parameters"
CONNECT_INDEX = "connect.index"
ONE_OF = NAMESPACE + ".OneOf"
ENUM = NAMESPACE + ".Enum"
_NUMBERS = {
    INT8: "integer",
    INT16: "integer",
    INT32: "integer",
    INT64: "integer",
    FLOAT32: "number",
    FLOAT64: "number",
}
_CONNECT_TYPES = {INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BYTES}
NULL_SCHEMA = {"type": "null"}


# Connect schemas to JSON Schema -----------------------------------------------------------


def json_schema(
    schema: Schema, numeric_decimals: bool = False, additional_properties: bool = True
) -> dict[str, Any]:
    """The JSON Schema of a Connect schema, as Confluent's JsonSchemaData makes it."""
    return _to_json_schema(schema, None, numeric_decimals, additional_properties)


def _to_json_schema(
    schema: Schema, index: int | None, numeric: bool, open_objects: bool
) -> dict[str, Any]:
    if schema.type == STRUCT and schema.optional:
        inner = _to_json_schema(
            _required(schema), None, numeric, open_objects
        )  # the struct's own title and properties inside
        made: dict[str, Any] = {"oneOf": [NULL_SCHEMA, inner]}
        if index is not None:
            made[CONNECT_INDEX] = index
        return made
    out: dict[str, Any]
    parameters = schema.parameters or {}
    if schema.type in _NUMBERS:
        out = {"type": _NUMBERS[schema.type]}
    elif schema.type == BOOLEAN:
        out = {"type": "boolean"}
    elif schema.type == STRING:
        symbols = [k[len(ENUM) + 1 :] for k in parameters if k.startswith(ENUM + ".")]
        out = {"type": "string", "enum": symbols} if ENUM in parameters else {"type": "string"}
    elif schema.type == BYTES:
        out = {"type": "number" if schema.name == DECIMAL and numeric else "string"}
    elif schema.type == ARRAY:
        assert schema.value_schema is not None
        out = {
            "type": "array",
            "items": _to_json_schema(schema.value_schema, None, numeric, open_objects),
        }
    elif schema.type == MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        if schema.key_schema.type == STRING and not schema.key_schema.optional:
            values = _to_json_schema(schema.value_schema, None, numeric, open_objects)
            out = {"type": "object", "additionalProperties": values}
        else:
            entry = {
                "type": "object",
                "properties": {
                    "key": _to_json_schema(schema.key_schema, 0, numeric, open_objects),
                    "value": _to_json_schema(schema.value_schema, 1, numeric, open_objects),
                },
            }
            out = {"type": "array", "items": entry}
    elif schema.type == STRUCT:
        properties = {
            f.name: _to_json_schema(f.schema, f.index, numeric, open_objects) for f in schema.fields
        }
        out = {"type": "object", "properties": properties}
        if not open_objects:
            out["additionalProperties"] = False
    else:
        raise DataException(f"Unsupported type {schema.type}")
    if schema.name is not None:
        out["title"] = schema.name
    if schema.type in _CONNECT_TYPES:
        out[CONNECT_TYPE] = schema.type
    elif schema.type == MAP:
        out[CONNECT_TYPE] = MAP
    if schema.version is not None:
        out[CONNECT_VERSION] = schema.version
    if schema.doc is not None:
        out["description"] = schema.doc
    own = {k: v for k, v in parameters.items() if not k.startswith(NAMESPACE)}
    if own:
        out[CONNECT_PARAMETERS] = own
    if schema.default is not None:
        out["default"] = _to_json_value(schema, schema.default, numeric)
    if schema.optional:
        out = {"oneOf": [NULL_SCHEMA, out]}
    if index is not None:
        out[CONNECT_INDEX] = index
    return out


def _required(schema: Schema) -> Schema:
    return Schema(
        schema.type,
        False,
        schema.default,
        schema.name,
        schema.version,
        schema.doc,
        schema.parameters,
        schema.fields,
        schema.key_schema,
        schema.value_schema,
    )


# Connect values to JSON -------------------------------------------------------------------


_OMIT = object()


def _to_json_value(schema: Schema, value: Any, numeric: bool) -> Any:
    if value is None:
        if schema.default is not None:
            return _to_json_value(schema, schema.default, numeric)
        return None if schema.optional else _OMIT
    if schema.name == DECIMAL:
        decimal = value if isinstance(value, Decimal) else Decimal(str(value))
        if numeric:
            return decimal
        scale = int((schema.parameters or {}).get("scale", "0"))
        unscaled = int(decimal.scaleb(scale))
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
    kind = schema.type
    if kind in (INT8, INT16, INT32, INT64):
        if isinstance(value, bool) or not isinstance(value, int):
            raise DataException(f"Invalid type for {kind.upper()}: {type(value).__name__}")
        return value
    if kind in (FLOAT32, FLOAT64):
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            raise DataException(f"Invalid type for {kind.upper()}: {type(value).__name__}")
        return float(value)
    if kind == BOOLEAN:
        if not isinstance(value, bool):
            raise DataException(f"Invalid type for BOOLEAN: {type(value).__name__}")
        return value
    if kind == STRING:
        if not isinstance(value, str):
            raise DataException(f"Invalid type for STRING: {type(value).__name__}")
        return value
    if kind == BYTES:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise DataException(f"Invalid type for BYTES: {type(value).__name__}")
        return base64.b64encode(bytes(value)).decode()
    if kind == ARRAY:
        assert schema.value_schema is not None
        items = [_to_json_value(schema.value_schema, item, numeric) for item in value]
        return [None if item is _OMIT else item for item in items]
    if kind == MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        if schema.key_schema.type == STRING and not schema.key_schema.optional:
            return {k: _to_json_value(schema.value_schema, v, numeric) for k, v in value.items()}
        return [
            {
                "key": _to_json_value(schema.key_schema, k, numeric),
                "value": _to_json_value(schema.value_schema, v, numeric),
            }
            for k, v in value.items()
        ]
    if kind == STRUCT:
        if not isinstance(value, Struct | dict):
            raise DataException(f"Invalid type for STRUCT: {type(value).__name__}")
        values = value.values if isinstance(value, Struct) else value
        if schema.name == ONE_OF:
            for field in schema.fields:
                if values.get(field.name) is not None:
                    return _to_json_value(field.schema, values[field.name], numeric)
            return None
        out = {}
        for field in schema.fields:
            item = _to_json_value(field.schema, values.get(field.name), numeric)
            if item is not _OMIT:
                out[field.name] = item
        return out
    raise DataException(f"Unsupported type {kind}")


def _dumps(value: Any) -> bytes:
    def fallback(item: Any) -> Any:
        if isinstance(item, Decimal):
            return float(item)
        raise TypeError(f"{type(item).__name__} is not JSON")

    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=fallback)
    return text.encode()


# JSON Schema to Connect schemas -----------------------------------------------------------


class _Reader:
    """One JSON Schema document read as Connect schemas (its local ``$ref``s resolved)."""

    def __init__(self, document: Any) -> None:
        self.document = document

    def resolve(self, node: Any) -> Any:
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            reference = node["$ref"]
            if not isinstance(reference, str) or not reference.startswith("#"):
                raise DataException(f"JSON Schema reference {reference} is not served")
            target: Any = self.document
            for part in filter(None, reference[1:].split("/")):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, dict) or part not in target:
                    raise DataException(f"JSON Schema reference {reference} not found")
                target = target[part]
            node, seen = target, seen + 1
            if seen > 32:
                raise DataException(f"JSON Schema reference {reference} loops")
        return node

    def schema(self, node: Any, optional: bool = False, depth: int = 0) -> Schema:
        if depth > 64:
            raise DataException("Recursive JSON Schemas are not served")
        node = self.resolve(node)
        if node is True or node == {} or not isinstance(node, dict):
            raise DataException("A JSON Schema that allows any value is not served")
        kind = node.get("type")
        if isinstance(kind, list):  # {"type": ["string", "null"]}
            choices = [dict(node, type=k) for k in kind]
            node, kind = {"oneOf": choices}, None
        for combined in ("oneOf", "anyOf"):
            if combined in node and kind is None:
                return self.union(node, node[combined], optional, depth)
        if "allOf" in node and kind is None:
            raise DataException("JSON Schema allOf is not served")
        connect_type = node.get(CONNECT_TYPE)
        made: Schema
        if "enum" in node or "const" in node:
            symbols = node["enum"] if "enum" in node else [node["const"]]
            params = {ENUM: ""} | {f"{ENUM}.{s}": str(s) for s in symbols if s is not None}
            made = Schema(STRING, parameters=params)
        elif kind in ("integer", "number"):
            if connect_type in _NUMBERS or connect_type == BYTES:
                made = Schema(connect_type)
            elif connect_type is not None:
                raise DataException(f"Unsupported type {connect_type}")
            else:
                made = Schema(INT64 if kind == "integer" else FLOAT64)
        elif kind == "boolean":
            made = Schema(BOOLEAN)
        elif kind == "string":
            made = Schema(BYTES if connect_type == BYTES else STRING)
        elif kind == "array":
            items = node.get("items")
            if items is None:
                raise DataException("Array schema did not specify the items type")
            entry = self.resolve(items)
            if connect_type == MAP and isinstance(entry, dict) and entry.get("type") == "object":
                properties = entry.get("properties", {})
                made = Schema.map(
                    self.schema(properties.get("key"), depth=depth + 1),
                    self.schema(properties.get("value"), depth=depth + 1),
                )
            else:
                made = Schema.array(self.schema(items, depth=depth + 1))
        elif kind == "object":
            if connect_type == MAP:
                values = node.get("additionalProperties")
                made = Schema.map(Schema(STRING), self.schema(values, depth=depth + 1))
            else:
                properties = node.get("properties", {})
                ordered = sorted(
                    enumerate(properties.items()),
                    key=lambda item: (
                        self.resolve(item[1][1]).get(CONNECT_INDEX, item[0])
                        if isinstance(self.resolve(item[1][1]), dict)
                        else item[0]
                    ),
                )
                made = Schema(
                    STRUCT,
                    fields=tuple(
                        Field(name, index, self.schema(sub, depth=depth + 1))
                        for index, (_, (name, sub)) in enumerate(ordered)
                    ),
                )
        elif kind == "null":
            raise DataException("A JSON Schema of null alone is not served")
        else:
            raise DataException(f"Unsupported JSON Schema {json.dumps(node)[:200]}")
        return self.decorated(made, node, optional)

    def decorated(self, made: Schema, node: dict[str, Any], optional: bool) -> Schema:
        parameters = dict(made.parameters or {})
        given = node.get(CONNECT_PARAMETERS)
        if isinstance(given, dict):
            parameters.update({str(k): str(v) for k, v in given.items()})
        version = node.get(CONNECT_VERSION)
        made = Schema(
            made.type,
            optional,
            None,
            made.name or node.get("title"),
            version if isinstance(version, int) else None,
            node.get("description"),
            parameters or None,
            made.fields,
            made.key_schema,
            made.value_schema,
        )
        if "default" in node and node["default"] is not None:
            made = Schema(
                made.type,
                made.optional,
                _to_connect_value(made, node["default"]),
                made.name,
                made.version,
                made.doc,
                made.parameters,
                made.fields,
                made.key_schema,
                made.value_schema,
            )
        return made

    def union(self, node: dict[str, Any], choices: Any, optional: bool, depth: int) -> Schema:
        resolved = [self.resolve(choice) for choice in choices]
        non_null = [c for c, r in zip(choices, resolved, strict=True) if r != NULL_SCHEMA]
        if len(resolved) == 2 and len(non_null) == 1:
            return self.schema(non_null[0], optional=True, depth=depth + 1)
        if len(resolved) == 1:
            return self.schema(non_null[0], optional=optional, depth=depth + 1)
        members = tuple(
            Field(f"{ONE_OF}.field.{index}", index, self.schema(choice, True, depth + 1))
            for index, choice in enumerate(non_null)
        )
        return Schema(
            STRUCT, optional or len(non_null) < len(resolved), name=ONE_OF, fields=members
        )


def connect_schema(document: Any) -> Schema:
    """The Connect schema of a JSON Schema document."""
    return _Reader(document).schema(document)


# JSON values to Connect -------------------------------------------------------------------


def _to_connect_value(schema: Schema, value: Any) -> Any:
    if value is None:
        if schema.default is not None:
            return schema.default
        return None
    if schema.name == DECIMAL:
        if isinstance(value, int | float):
            return Decimal(str(value))
        scale = int((schema.parameters or {}).get("scale", "0"))
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return Decimal(unscaled).scaleb(-scale)
    kind = schema.type
    if kind == BYTES:
        if not isinstance(value, str):
            raise DataException(f"Invalid type for BYTES: {type(value).__name__}")
        return base64.b64decode(value)
    if kind in (INT8, INT16, INT32, INT64):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise DataException(f"Invalid type for {kind.upper()}: {type(value).__name__}")
        return value
    if kind in (FLOAT32, FLOAT64):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DataException(f"Invalid type for {kind.upper()}: {type(value).__name__}")
        return float(value)
    if kind == ARRAY:
        assert schema.value_schema is not None
        return [_to_connect_value(schema.value_schema, item) for item in value]
    if kind == MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        if isinstance(value, dict):
            return {k: _to_connect_value(schema.value_schema, v) for k, v in value.items()}
        return {
            _to_connect_value(schema.key_schema, e.get("key")): _to_connect_value(
                schema.value_schema, e.get("value")
            )
            for e in value
        }
    if kind == STRUCT:
        if schema.name == ONE_OF:
            for field in schema.fields:
                if _fits(field.schema, value):
                    return Struct(schema, {field.name: _to_connect_value(field.schema, value)})
            raise DataException("The value fits none of the oneOf's schemas")
        if not isinstance(value, dict):
            raise DataException("Structs should be encoded as JSON objects")
        return Struct(
            schema,
            {f.name: _to_connect_value(f.schema, value.get(f.name)) for f in schema.fields},
        )
    return value


def _fits(schema: Schema, value: Any) -> bool:
    kind = schema.type
    if kind in (INT8, INT16, INT32, INT64):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in (FLOAT32, FLOAT64):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == BOOLEAN:
        return isinstance(value, bool)
    if kind in (STRING, BYTES):
        return isinstance(value, str)
    if kind == ARRAY or (kind == MAP and isinstance(value, list)):
        return isinstance(value, list)
    return isinstance(value, dict)


# The converter ----------------------------------------------------------------------------


class JsonSchemaConverter(RegistryConverter):
    CONFIG_DEF = RegistryConverter.CONFIG_DEF.merged(
        cd.ConfigDef(
            [
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
                    "object.additional.properties",
                    cd.BOOLEAN,
                    True,
                    cd.LOW,
                    "Whether to allow additional properties for object schemas.",
                ),
                cd.ConfigKey(
                    "json.fail.invalid.schema",
                    cd.BOOLEAN,
                    False,
                    cd.MEDIUM,
                    "Whether to fail serialization if the payload is not valid for the schema.",
                ),
            ]
        )
    )
    FORMAT = "JSON Schema"

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        super().configure(configs, is_key)
        self.numeric = self.settings["decimal.format"].upper() == "NUMERIC"
        self.open_objects = bool(self.settings["object.additional.properties"])
        self.validate = bool(self.settings["json.fail.invalid.schema"])
        # (topic, id(schema)) -> (schema, schema id, validator or None)
        self.writers: dict[tuple[str, int], tuple[Schema, int, Any]] = {}
        self.readers: dict[int, Schema] = {}

    def _writer(self, topic: str, schema: Schema) -> tuple[int, Any]:
        known = self.writers.get((topic, id(schema)))
        if known is not None and known[0] is schema:
            return known[1], known[2]
        schema_id = self.schema_id(topic)
        if schema_id is not None:
            document = json.loads(self.registry.schema(schema_id).schema_str or "{}")
        else:
            document = json_schema(schema, self.numeric, self.open_objects)
            text = json.dumps(document, separators=(",", ":"))
            schema_id = self.registry.register_typed(self.subject(topic), text, "JSON", [])
        validator = None
        if self.validate:
            validator = jsonschema.validators.validator_for(document)(document)
        with self.cache_lock:
            if len(self.writers) >= WRITER_CACHE_SIZE:
                self.writers.clear()
            self.writers[(topic, id(schema))] = (schema, schema_id, validator)
        return schema_id, validator

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None and (schema is None or schema.optional):
            return None
        if schema is None:
            raise DataException(
                "JsonSchemaConverter needs a schema: schemaless data cannot be written"
            )
        schema_id, validator = self._writer(topic, schema)
        document = _to_json_value(schema, value, self.numeric)
        if document is _OMIT:
            raise DataException("Conversion error: null value for a required schema")
        if validator is not None:
            error = jsonschema.exceptions.best_match(validator.iter_errors(document))
            if error is not None:
                raise DataException(
                    f"Failed to serialize JSON Schema data from topic {topic}: "
                    f"the value is not valid for its schema: {error.message}"
                )
        return HEADER.pack(0, schema_id) + _dumps(document)

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        schema_id = self.header(topic, data)
        schema = self.readers.get(schema_id)
        if schema is None:
            text = self.registry.schema(schema_id).schema_str or "null"
            try:
                schema = connect_schema(json.loads(text))
            except ValueError as exc:
                raise DataException(f"Invalid JSON Schema {schema_id}: {exc}") from None
            with self.cache_lock:
                self.readers[schema_id] = schema
        try:
            document = json.loads(data[HEADER.size :])
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataException(
                f"Failed to deserialize data for topic {topic} to JSON Schema: {exc}"
            ) from None
        return schema, _to_connect_value(schema, document)
