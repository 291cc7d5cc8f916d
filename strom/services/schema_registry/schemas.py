"""Schemas as the registry understands them, sans-I/O: parsing, the canonical form two
registrations are compared by, and compatibility between versions.

Owns, per schema type:
- AVRO: parsed by the ``avro`` library (references resolved as named types), compared
  in its canonical JSON; compatibility by ``avro.compatibility``'s reader/writer check,
  the rules of the Avro specification Confluent applies.
- JSON: parsed as JSON and checked as a JSON Schema by ``jsonschema``; compatibility by
  the main rules Confluent documents for JSON Schema (a type narrowed or changed, a
  property newly required, one removed from a closed content model, enum values
  removed, ``additionalProperties`` closed: each incompatible in the direction where
  old data would no longer validate), applied recursively to properties and items.
- PROTOBUF: a base64-encoded ``FileDescriptorProto`` (what confluent-kafka's
  serialiser registers; read by the ``protobuf`` library), compared by its messages and
  fields, with Confluent's Protobuf rules: a message removed, the package or syntax
  changed, a field number whose kind changed (outside the wire-compatible groups
  int32/uint32/int64/uint64/bool, sint32/sint64, fixed32/sfixed32, fixed64/sfixed64,
  string/bytes), a required field added or removed are incompatible. ``.proto`` text
  (what Confluent's Java serialisers and the REST API send) is compiled to its
  descriptor by ``protoc`` (grpcio-tools' build, in a child process, with the
  well-known types and the schema's references as imports) and then compared and
  checked as a descriptor is; a file that does not compile is refused with protoc's
  message.

Compatibility levels as Confluent's: BACKWARD (the new schema reads data written with
the previous one), FORWARD (the previous reads the new), FULL (both), their
_TRANSITIVE forms (against every earlier version), NONE.

Does not own storage (``store``) or HTTP (``app``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import avro.compatibility
import avro.errors
import avro.name
import avro.schema
import jsonschema
from google.protobuf import descriptor_pb2

from strom.services.protobuf_schemas import ProtoSchemaError, compile_proto, file_descriptor

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
TYPES = (JSON, PROTOBUF, AVRO)
LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)


class InvalidSchema(ValueError):
    """A schema that does not parse (Confluent's 42201)."""


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int


@dataclass
class ParsedSchema:
    schema_type: str
    text: str  # as registered
    canonical: str  # what two registrations are compared by
    references: list[Reference] = field(default_factory=list)
    avro: Any = None
    json_schema: Any = None
    proto: Any = None  # descriptor_pb2.FileDescriptorProto, when registered as one


def parse(
    schema_type: str,
    text: str,
    references: list[Reference] | None = None,
    resolved: dict[str, str] | None = None,
) -> ParsedSchema:
    """Parse ``text``; ``resolved`` maps each reference's name to its schema text."""
    references = references or []
    if schema_type == AVRO:
        names = avro.name.Names()
        try:
            for name in sorted(resolved or {}):
                avro.schema.make_avsc_object(json.loads((resolved or {})[name]), names)
            parsed = avro.schema.make_avsc_object(json.loads(text), names)
        except (ValueError, avro.errors.AvroException, TypeError, AttributeError) as exc:
            raise InvalidSchema(f"Invalid schema {text}: {exc}") from None
        # The whole schema (defaults and docs kept, as Confluent compares), keys sorted.
        canonical = json.dumps(parsed.to_json(), sort_keys=True, separators=(",", ":"))
        return ParsedSchema(AVRO, text, canonical, references, avro=parsed)
    if schema_type == JSON:
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise InvalidSchema(f"Invalid schema {text}: {exc}") from None
        if not isinstance(document, dict | bool):
            raise InvalidSchema(f"Invalid schema {text}: a JSON Schema is an object or a boolean")
        try:
            validator = jsonschema.validators.validator_for(document)
            # a boolean is a JSON Schema too, which jsonschema checks (its stubs say dict)
            validator.check_schema(document)  # type: ignore[arg-type]
        except jsonschema.SchemaError as exc:
            raise InvalidSchema(f"Invalid schema {text}: {exc.message}") from None
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
        return ParsedSchema(JSON, text, canonical, references, json_schema=document)
    if schema_type == PROTOBUF:
        proto = file_descriptor(text)
        if proto is None:
            try:
                proto = compile_proto(text, resolved or {}).file[-1]
            except ProtoSchemaError as exc:
                raise InvalidSchema(f"Invalid schema {text}: {exc}") from None
        canonical = proto.SerializeToString(deterministic=True).hex()
        return ParsedSchema(PROTOBUF, text, canonical, references, proto=proto)
    raise InvalidSchema(f"Invalid schema type {schema_type}")


def normalized(parsed: ParsedSchema) -> ParsedSchema:
    """``parsed`` in its normal form (``normalize=true``): the text stored and answered is
    the canonical one, so that registrations that differ in layout, key order or
    whitespace store one text. Avro: the parsed schema's JSON in the ``avro`` library's
    attribute order; JSON Schema: keys sorted, no spaces; Protobuf: a descriptor's
    deterministic serialisation, ``.proto`` text with its whitespace collapsed."""
    if parsed.schema_type == AVRO:
        text = json.dumps(parsed.avro.to_json(), separators=(",", ":"))
    elif parsed.schema_type == JSON:
        text = parsed.canonical
    elif file_descriptor(parsed.text) is not None:
        text = base64.b64encode(parsed.proto.SerializeToString(deterministic=True)).decode()
    else:  # .proto text: its layout collapsed
        text = " ".join(parsed.text.split())
    return ParsedSchema(
        parsed.schema_type,
        text,
        parsed.canonical,
        parsed.references,
        avro=parsed.avro,
        json_schema=parsed.json_schema,
        proto=parsed.proto,
    )


# Compatibility -------------------------------------------------------------------------

_WIRE_GROUPS = (
    {"TYPE_INT32", "TYPE_UINT32", "TYPE_INT64", "TYPE_UINT64", "TYPE_BOOL"},
    {"TYPE_SINT32", "TYPE_SINT64"},
    {"TYPE_FIXED32", "TYPE_SFIXED32"},
    {"TYPE_FIXED64", "TYPE_SFIXED64"},
    {"TYPE_STRING", "TYPE_BYTES"},
)


def _messages(proto: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def walk(prefix: str, messages: Any) -> None:
        for message in messages:
            name = f"{prefix}.{message.name}" if prefix else message.name
            found[name] = message
            walk(name, message.nested_type)

    walk(proto.package, proto.message_type)
    return found


def _proto_reads(reader: Any, writer: Any) -> list[str]:
    """Confluent's Protobuf rules between two file descriptors (symmetric ones)."""
    if reader is None or writer is None:
        return []
    problems = []
    if reader.package != writer.package:
        problems.append(f"package changed from {writer.package!r} to {reader.package!r}")
    if (reader.syntax or "proto2") != (writer.syntax or "proto2"):
        problems.append("syntax version changed")
    kind = descriptor_pb2.FieldDescriptorProto.Type.Name
    new_messages = _messages(reader)
    for name, old in _messages(writer).items():
        new = new_messages.get(name)
        if new is None:
            problems.append(f"message {name} removed")
            continue
        new_fields = {f.number: f for f in new.field}
        old_fields = {f.number: f for f in old.field}
        for number, old_field in old_fields.items():
            new_field = new_fields.get(number)
            if new_field is None:
                if old_field.label == old_field.LABEL_REQUIRED:
                    problems.append(f"{name}: required field {old_field.name} removed")
                continue
            a, b = kind(old_field.type), kind(new_field.type)
            if a != b and not any(a in g and b in g for g in _WIRE_GROUPS):
                problems.append(f"{name}: field {number} changed kind from {a} to {b}")
            elif a == b == "TYPE_MESSAGE" and old_field.type_name != new_field.type_name:
                problems.append(f"{name}: field {number} changed type to {new_field.type_name}")
        for number, new_field in new_fields.items():
            if number not in old_fields and new_field.label == new_field.LABEL_REQUIRED:
                problems.append(f"{name}: required field {new_field.name} added")
    return problems


def _avro_reads(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    result = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(
        reader.avro, writer.avro
    )
    if result.compatibility == avro.compatibility.SchemaCompatibilityType.compatible:
        return []
    messages = sorted(str(m) for m in (result.messages or ()))
    locations = sorted(str(m) for m in (result.locations or ()))
    return [f"{m} at {', '.join(locations) or '/'}" for m in messages] or ["incompatible"]


def _types(schema: Any) -> set[str] | None:
    if not isinstance(schema, dict) or "type" not in schema:
        return None
    found = schema["type"]
    return set(found) if isinstance(found, list) else {found}


def _json_reads(reader: Any, writer: Any, path: str = "#") -> list[str]:
    """Why data valid under ``writer`` might not be valid under ``reader``."""
    problems: list[str] = []
    if reader is True or reader == {}:
        return problems
    if writer is True or writer == {}:
        return [f"{path}: the old schema took anything, the new one does not"]
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return problems if reader == writer else [f"{path}: the schema changed"]
    new_types, old_types = _types(reader), _types(writer)
    if new_types is not None:
        widened = set(new_types) | ({"integer"} if "number" in new_types else set())
        if old_types is None or not old_types <= widened:
            problems.append(f"{path}: type {sorted(old_types or ['any'])} narrowed or changed to "
                            f"{sorted(new_types)}")  # fmt: skip
    if "enum" in reader:
        missing = [v for v in writer.get("enum", [None]) if v not in reader["enum"]]
        if "enum" not in writer or missing:
            problems.append(f"{path}: enum values removed: {missing}")
    newly_required = set(reader.get("required", [])) - set(writer.get("required", []))
    if newly_required:
        problems.append(f"{path}: properties newly required: {sorted(newly_required)}")
    new_props, old_props = reader.get("properties", {}), writer.get("properties", {})
    closed = reader.get("additionalProperties", True) is False
    for name, old in old_props.items():
        if name in new_props:
            problems += _json_reads(new_props[name], old, f"{path}/properties/{name}")
        elif closed:
            problems.append(f"{path}: property {name} removed from a closed content model")
    if closed and writer.get("additionalProperties", True) is not False:
        problems.append(f"{path}: additionalProperties closed")
    if isinstance(reader.get("items"), dict) and isinstance(writer.get("items"), dict):
        problems += _json_reads(reader["items"], writer["items"], f"{path}/items")
    for key in ("maxLength", "maximum", "maxItems"):
        if key in reader and reader[key] < writer.get(key, float("inf")):
            problems.append(f"{path}: {key} lowered")
    for key in ("minLength", "minimum", "minItems"):
        if key in reader and reader[key] > writer.get(key, float("-inf")):
            problems.append(f"{path}: {key} raised")
    return problems


def reads(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    if reader.schema_type != writer.schema_type:
        return [f"schema type {writer.schema_type} changed to {reader.schema_type}"]
    if reader.schema_type == AVRO:
        return _avro_reads(reader, writer)
    if reader.schema_type == JSON:
        return _json_reads(reader.json_schema, writer.json_schema)
    return _proto_reads(reader.proto, writer.proto)


def incompatibilities(level: str, new: ParsedSchema, earlier: list[ParsedSchema]) -> list[str]:
    """What makes ``new`` incompatible with ``earlier`` (oldest first) under ``level``."""
    if level == "NONE" or not earlier:
        return []
    against = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
    problems: list[str] = []
    for old in against:
        if level.startswith(("BACKWARD", "FULL")):
            problems += [f"backward: {p}" for p in reads(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            problems += [f"forward: {p}" for p in reads(old, new)]
    return problems
