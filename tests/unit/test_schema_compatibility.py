"""Schema compatibility without a registry: a table of changes per schema type, each
checked under BACKWARD (the new schema reads old data) and FORWARD (old reads new), as
Confluent's rules decide them; the transitive levels; and schemas that do not parse."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from strom.services.schema_registry.schemas import (
    InvalidSchema,
    incompatibilities,
    parse,
)

F = descriptor_pb2.FieldDescriptorProto


def avro(*fields: dict[str, Any], name: str = "R") -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


def enum(*symbols: str) -> str:
    return avro({"name": "e", "type": {"type": "enum", "name": "E", "symbols": list(symbols)}})


def proto(*fields: tuple[str, int, int], message: str = "Order", package: str = "shop") -> str:
    file = descriptor_pb2.FileDescriptorProto(name="t.proto", package=package, syntax="proto3")
    entry = file.message_type.add(name=message)
    for name, number, kind in fields:
        entry.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
    return base64.b64encode(file.SerializeToString()).decode()


A = {"name": "a", "type": "int"}
CASES = [
    # (type, old, new, backward compatible, forward compatible)
    ("AVRO", avro(A), avro(A, {"name": "b", "type": "string", "default": ""}), True, True),
    ("AVRO", avro(A), avro(A, {"name": "b", "type": "string"}), False, True),
    ("AVRO", avro(A, {"name": "b", "type": "string"}), avro(A), True, False),
    ("AVRO", avro(A), avro({"name": "a", "type": "long"}), True, False),
    ("AVRO", avro(A), avro({"name": "a", "type": "string"}), False, False),
    ("AVRO", enum("X", "Y"), enum("X", "Y", "Z"), True, False),
    ("JSON", json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}),
     json.dumps({"type": "object", "properties": {"a": {"type": "integer"}},
                 "required": ["a"]}), False, True),
    ("JSON", json.dumps({"type": "integer"}), json.dumps({"type": "number"}), True, False),
    ("JSON", json.dumps({"type": "string"}), json.dumps({"type": "integer"}), False, False),
    ("JSON", json.dumps({"enum": ["x", "y"]}), json.dumps({"enum": ["x"]}), False, True),
    ("JSON", json.dumps({"type": "object", "properties": {"a": {}, "b": {}},
                         "additionalProperties": False}),
     json.dumps({"type": "object", "properties": {"a": {}}, "additionalProperties": False}),
     False, True),
    ("PROTOBUF", proto(("id", 1, F.TYPE_STRING)),
     proto(("id", 1, F.TYPE_STRING), ("qty", 2, F.TYPE_INT32)), True, True),
    ("PROTOBUF", proto(("qty", 1, F.TYPE_INT32)), proto(("qty", 1, F.TYPE_INT64)), True, True),
    ("PROTOBUF", proto(("id", 1, F.TYPE_STRING)), proto(("id", 1, F.TYPE_INT32)), False, False),
    # Renumbered: the two fields swap numbers, so each number changes kind.
    ("PROTOBUF", proto(("id", 1, F.TYPE_STRING), ("qty", 2, F.TYPE_INT32)),
     proto(("id", 2, F.TYPE_STRING), ("qty", 1, F.TYPE_INT32)), False, False),
    ("PROTOBUF", proto(("id", 1, F.TYPE_STRING)), proto(("name", 1, F.TYPE_STRING)), True, True),
    ("PROTOBUF", proto(("id", 1, F.TYPE_STRING)), proto(("id", 1, F.TYPE_STRING),
                                                          message="Renamed"), False, False),
    ("PROTOBUF", proto(("id", 1, F.TYPE_STRING)), proto(("id", 1, F.TYPE_STRING),
                                                          package="other"), False, False),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "old", "new", "backward", "forward"), CASES)
def test_compatibility_table(kind: str, old: str, new: str, backward: bool, forward: bool) -> None:
    before, after = parse(kind, old), parse(kind, new)
    assert (not incompatibilities("BACKWARD", after, [before])) is backward
    assert (not incompatibilities("FORWARD", after, [before])) is forward
    assert (not incompatibilities("FULL", after, [before])) is (backward and forward)
    assert not incompatibilities("NONE", after, [before])


def test_transitive_levels_look_at_every_version() -> None:
    v1 = parse("AVRO", avro(A))
    v2 = parse("AVRO", avro(A, {"name": "b", "type": "string", "default": ""}))
    v3 = parse("AVRO", avro(A, {"name": "b", "type": "string"}))  # b without a default
    assert not incompatibilities("BACKWARD", v3, [v1, v2])  # reads v2's data: b is there
    assert incompatibilities("BACKWARD_TRANSITIVE", v3, [v1, v2])  # v1's data lacks b


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("AVRO", "{not json"),
        ("AVRO", json.dumps({"type": "record", "name": "R", "fields": [{"name": "a"}]})),
        ("JSON", "[1, 2"),
        ("JSON", json.dumps({"type": 5})),
        ("PROTOBUF", "just words"),
        ("PROTOBUF", 'syntax = "proto3"; message Order { string id = 1; int32 id = 2; }'),
        ("PROTOBUF", 'syntax = "proto3"; import "missing.proto"; message A { B b = 1; }'),
        ("XML", "<a/>"),
    ],
)
def test_schemas_that_do_not_parse(kind: str, text: str) -> None:
    with pytest.raises(InvalidSchema):
        parse(kind, text)


ORDER_PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  string id = 1;
  int32 qty = 2;
  google.protobuf.Timestamp at = 3;
}
"""


def test_proto_text_is_compiled_and_checked_as_a_descriptor() -> None:
    text = parse("PROTOBUF", ORDER_PROTO)
    assert [f.name for f in text.proto.message_type[0].field] == ["id", "qty", "at"]
    # The same file laid out differently is the same schema.
    assert parse("PROTOBUF", " ".join(ORDER_PROTO.split())).canonical == text.canonical
    widened = parse("PROTOBUF", ORDER_PROTO.replace("int32 qty", "int64 qty"))
    assert not incompatibilities("FULL", widened, [text])
    renumbered = parse(
        "PROTOBUF", ORDER_PROTO.replace("id = 1", "id = 9").replace("qty = 2", "qty = 1")
    )
    assert incompatibilities("BACKWARD", renumbered, [text])
    retyped = parse("PROTOBUF", ORDER_PROTO.replace("string id", "int32 id"))
    assert incompatibilities("BACKWARD", retyped, [text])


def test_proto_text_imports_its_references() -> None:
    customer = 'syntax = "proto3"; package shop; message Customer { string name = 1; }'
    order = (
        'syntax = "proto3"; package shop; import "customer.proto";'
        " message Order { Customer customer = 1; }"
    )
    parsed = parse("PROTOBUF", order, resolved={"customer.proto": customer})
    assert parsed.proto.dependency == ["customer.proto"]
    # A reference registered as a descriptor (as confluent-kafka registers) serves too.
    as_descriptor = parse("PROTOBUF", customer).proto
    encoded = base64.b64encode(as_descriptor.SerializeToString()).decode()
    assert parse("PROTOBUF", order, resolved={"customer.proto": encoded}).canonical == (
        parsed.canonical
    )
    with pytest.raises(InvalidSchema, match="customer.proto"):
        parse("PROTOBUF", order)
