"""Rows written with a schema the user named by id (KEY_SCHEMA_ID / VALUE_SCHEMA_ID), as
ksqlDB writes a source created with one: Confluent's wire format (a zero byte, that
schema id, the data) of the registered schema, its fields named as it names them.

Owns checking a CREATE ... AS SELECT's columns against such a schema, matching a row's
columns (upper-cased, as inferred) to the registered schema's
fields, case aside, at every level (an Avro record's fields, a JSON Schema object's
properties, a Protobuf message's fields), and encoding: Avro with the registered schema
(fastavro), JSON_SR as JSON text, PROTOBUF as the registered message (its message
indexes, then the message). Pure: the registry's answers are given.

Does not own fetching or registering schemas, nor ksqlDB's own schemas
(``strom.ksql.registry_formats``).
"""

from __future__ import annotations

import base64
import decimal
import io
import json
import struct
from typing import Any

from strom.ksql import protobuf_rows
from strom.ksql.metastore import Column, KsqlStatementError

SCHEMA_ID_PROPERTIES = {"key": "KEY_SCHEMA_ID", "value": "VALUE_SCHEMA_ID"}


def _column_text(column: Column) -> str:
    return f"`{column.name}` {column.type}"


def check_query_columns(columns: list[Column], registered: list[Column], is_key: bool) -> None:
    """A CREATE ... AS SELECT's key or value columns against those of the schema its
    KEY_SCHEMA_ID / VALUE_SCHEMA_ID names, as ksqlDB checks them: each must be the
    schema's column at its place (name and type)."""
    at = {index: (c.name, str(c.type)) for index, c in enumerate(registered)}
    differing = [c for index, c in enumerate(columns) if at.get(index) != (c.name, str(c.type))]
    if differing:
        raise KsqlStatementError(
            f"The following {'key' if is_key else 'value'} columns are changed, missing or "
            f"reordered: [{', '.join(_column_text(c) for c in differing)}]. Schema from "
            f"schema registry is [{', '.join(_column_text(c) for c in registered)}]"
        )


def _header(schema_id: int) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id)


def _by_upper(value: dict[str, Any]) -> dict[str, Any]:
    return {str(k).upper(): v for k, v in value.items()}


# ---- Avro ---------------------------------------------------------------------------------


def _avro_branch(schema: Any, value: Any) -> Any:
    """The branch of a union a non-null value is written in: the first that is not null."""
    if isinstance(schema, list):
        present = [s for s in schema if s != "null"]
        return present[0] if present else "null"
    return schema


def avro_named(schema: Any, value: Any) -> Any:
    """``value`` (columns and STRUCT fields upper-cased) with the names of the Avro
    ``schema``'s records; a DATE, TIME or TIMESTAMP stays a number."""
    if value is None:
        return None
    schema = _avro_branch(schema, value)
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record" and isinstance(value, dict):
            given = _by_upper(value)
            return {
                f["name"]: _with_default(f, avro_named(f["type"], given.get(f["name"].upper())))
                for f in schema["fields"]
            }
        if kind == "array" and isinstance(value, list):
            return [avro_named(schema["items"], v) for v in value]
        if kind == "map" and isinstance(value, dict):
            return {k: avro_named(schema["values"], v) for k, v in value.items()}
    return value


def _with_default(field: dict[str, Any], value: Any) -> Any:
    """A null written in a record's field as the field's default, when it has one (as
    ksqlDB's Avro serializer writes it)."""
    return field["default"] if value is None and "default" in field else value


def encode_avro(schema_text: str, schema_id: int, value: Any) -> bytes:
    """``value`` in Confluent's Avro wire format with the registered schema."""
    from fastavro import parse_schema, schemaless_writer

    schema = json.loads(schema_text)
    out = io.BytesIO()
    out.write(_header(schema_id))
    schemaless_writer(out, parse_schema(schema), avro_named(schema, value))
    return out.getvalue()


# ---- JSON Schema ----------------------------------------------------------------------------


def _json_plain(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def json_named(schema: Any, value: Any) -> Any:
    """``value`` with the property names of the JSON ``schema``'s objects."""
    if value is None:
        return None
    if isinstance(schema, dict):
        for union in ("oneOf", "anyOf"):
            if union in schema:
                present = [s for s in schema[union] if s.get("type") != "null"]
                return json_named(present[0] if present else {}, value)
        properties = schema.get("properties")
        if isinstance(properties, dict) and isinstance(value, dict):
            given = _by_upper(value)
            return {
                name: json_named(sub, given.get(name.upper()))
                for name, sub in properties.items()
                if given.get(name.upper()) is not None
            }
        if schema.get("type") == "array" and isinstance(value, list):
            return [json_named(schema.get("items", {}), v) for v in value]
        if isinstance(value, dict):
            extra = schema.get("additionalProperties", {})
            return {
                k: json_named(extra if isinstance(extra, dict) else {}, v) for k, v in value.items()
            }
    if isinstance(value, list):
        return [json_named({}, v) for v in value]
    return _json_plain(value)


def encode_json(schema_text: str, schema_id: int, value: Any) -> bytes:
    """``value`` as JSON_SR with the registered schema's property names."""
    schema = json.loads(schema_text)
    text = json.dumps(json_named(schema, value), separators=(",", ":"))
    return _header(schema_id) + text.encode()


# ---- Protobuf -------------------------------------------------------------------------------


def _message_indexes(descriptor: Any) -> list[int]:
    """Confluent's message indexes of a message: its place in its file, nested ones in
    their parents."""
    path: list[int] = []
    current = descriptor
    while current.containing_type is not None:
        parent = current.containing_type
        path.append(list(parent.nested_types).index(current))
        current = parent
    path.append(list(current.file.message_types_by_name.values()).index(current))
    return list(reversed(path))


def encode_protobuf(message_class: Any, schema_id: int, row: dict[str, Any]) -> bytes:
    """``row`` as the registered message, in Confluent's Protobuf wire format."""
    from strom.services.protobuf_schemas import encode_indexes

    message = protobuf_rows.fill(message_class(), row)
    indexes = encode_indexes(_message_indexes(message_class.DESCRIPTOR))
    return _header(schema_id) + indexes + bytes(message.SerializeToString())
