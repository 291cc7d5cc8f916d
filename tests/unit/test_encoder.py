"""strom.protocol.encoder writes exactly the bytes kio's own writer writes.

Every request and response type of every version kio knows is filled with sample
values three ways (plain, with every nullable field None, with tagged fields set)
and encoded by both writers.
"""

from __future__ import annotations

import datetime
import io
import uuid
from dataclasses import MISSING, fields

import pytest
from kio.index import load_entity_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.constants import EntityType

from strom.protocol.encoder import message_writer, uvarint
from strom.protocol.framing import _FrameChunks

PLAIN, NULLS, TAGS = "plain", "nulls", "tags"

_SAMPLES = {
    "int8": -3,
    "int16": 300,
    "int32": -70000,
    "int64": 1 << 40,
    "uint8": 200,
    "uint16": 60000,
    "uint32": 1 << 31,
    "uint64": 1 << 63,
    "float64": 2.5,
    "string": "strøm",
    "bytes": b"\x00\x01bytes",
    "records": b"r" * 20000,  # large enough to be sent by reference
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "bool": True,
    "error_code": ErrorCode.not_coordinator,
    "timedelta_i32": datetime.timedelta(milliseconds=1500),
    "timedelta_i64": datetime.timedelta(milliseconds=1 << 33),
    "datetime_i64": datetime.datetime(2026, 11, 21, 12, 0, tzinfo=datetime.UTC),
}


def sample(entity_type: type, variant: str) -> object:
    values = {}
    for field in fields(entity_type):
        tagged = get_field_tag(field) is not None
        if tagged and variant != TAGS:
            if field.default is MISSING and field.default_factory is MISSING:
                values[field.name] = get_tagged_field_default(field)
            continue  # at its default: no tagged field is written
        if variant == NULLS and is_optional(field) and not tagged:
            values[field.name] = None
            continue
        kind = classify_field(field)
        match kind:
            case PrimitiveField():
                values[field.name] = _SAMPLES[get_schema_field_type(field)]
            case PrimitiveTupleField():
                values[field.name] = (_SAMPLES[get_schema_field_type(field)],) * 2
            case EntityField(nested):
                values[field.name] = sample(nested, variant)
            case EntityTupleField(nested):
                values[field.name] = (sample(nested, variant), sample(nested, PLAIN))
    return entity_type(**values)


def all_payload_types() -> list[type]:
    found = []
    for name, versions in schema_name_map.items():
        for version, kinds in versions.items():
            for kind in (EntityType.request, EntityType.response, EntityType.data):
                if kind in kinds:
                    found.append(load_entity_schema(name, version, kind))
    return found


@pytest.mark.parametrize("variant", [PLAIN, NULLS, TAGS])
def test_every_kio_type_encodes_as_kio_does(variant: str) -> None:
    checked = 0
    for entity_type in all_payload_types():
        value = sample(entity_type, variant)
        expected = io.BytesIO()
        entity_writer(entity_type)(expected, value)
        out = _FrameChunks()
        message_writer(entity_type)(out, value)
        got = b"".join(bytes(chunk) for chunk in out.chunks)[4:]
        assert got == expected.getvalue(), entity_type.__module__
        checked += 1
    assert checked > 500


def test_large_values_are_sent_by_reference() -> None:
    records = b"r" * 50000
    out = _FrameChunks()
    out.write(b"head")
    out.write(records)
    out.write(b"tail")
    assert any(chunk is records for chunk in out.chunks)
    assert out.size == 4 + len(records) + 4


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 1 << 31])
def test_uvarint_round_numbers(n: int) -> None:
    expected = io.BytesIO()
    from kio.serial.writers import write_unsigned_varint

    write_unsigned_varint(expected, n)
    assert uvarint(n) == expected.getvalue()
