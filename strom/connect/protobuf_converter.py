"""Confluent's ``io.confluent.connect.protobuf.ProtobufConverter``: Connect data to and from
Protobuf in Confluent's wire format (a zero byte, the schema id in four bytes, the message
indexes, the message), the schema kept in a schema registry (Strom's or Confluent's).

Writing: the Connect schema becomes a proto3 file as Confluent's ProtobufData makes it: a
struct is a message named by the schema's name (its namespace the package), or
``ConnectDefault1``, ``ConnectDefault2``... for unnamed structs and maps in the order they
are met; fields numbered from 1 in order (or by the ``io.confluent.connect.protobuf.Tag``
parameter); INT8/INT16/INT32 ``int32`` (INT8 and INT16 marked ``connect.type`` in
``confluent.field_meta``), INT64 ``int64``, FLOAT32/64 ``float``/``double``, BOOLEAN
``bool``, STRING ``string`` (an ``enum`` when its parameters say so), BYTES ``bytes``, an
array a ``repeated`` field, a map a repeated ``<Name>Entry`` message of ``key`` and
``value``, a nested struct a nested message (``<Name>Message`` when it has its field's
name); Decimal is ``confluent.type.Decimal`` (its precision and scale in the field's
meta), Date ``google.type.Date``, Time ``google.type.TimeOfDay``, Timestamp
``google.protobuf.Timestamp``. A schema that is not a struct is written as a
``google.protobuf`` wrapper (``Int32Value``, ``StringValue``...). A null field is left
unset, as proto3 has no null. The file is registered as a base64 ``FileDescriptorProto``
(what confluent-kafka's serialiser registers) under ``<topic>-value`` / ``<topic>-key``
when ``auto.register.schemas`` (true), else the subject's latest version is written with.

Reading: the schema the id names (a base64 descriptor, or ``.proto`` text compiled by
``protoc`` with its references) and the message indexes give the message; it reads as
Confluent's defaults do: a message is a struct named by the message's simple name, every
field optional with its number as ``io.confluent.connect.protobuf.Tag``, a proto3 scalar
left unset its default (0, "", false), a message field left unset null, repeated fields
arrays, map fields (or ``...Entry`` messages of key and value) maps, enums strings with
their symbols as parameters, a ``oneof`` a struct named
``io.confluent.connect.protobuf.Union.<name>`` in field ``<name>_<index>``, the
well-known types above as Connect's logical types, a top-level wrapper as its primitive,
uint32/fixed32 and the 64-bit kinds INT64 (marked ``io.confluent.connect.protobuf.Type``).

Settings as the AvroConverter's (``registry_converter``). Confluent's further options
(``optional.for.nullables``, ``wrapper.for.nullables``, ``enhanced.protobuf.schema.support``,
``scrub.invalid.names``, ``int.for.enums``) are not served. Does not own the registry.
"""

from __future__ import annotations

import base64
import datetime
import threading
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry.confluent import meta_pb2
from confluent_kafka.schema_registry.confluent.type import decimal_pb2
from confluent_kafka.schema_registry.confluent.type.decimal_utils import to_proto_decimal
from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.message import DecodeError, Message
from google.type import date_pb2, timeofday_pb2  # type: ignore[import-untyped]

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
    MAP,
    STRING,
    STRUCT,
    TIME,
    TIMESTAMP,
    DataException,
    Field,
    Schema,
    Struct,
)
from strom.connect.registry_converter import HEADER, WRITER_CACHE_SIZE, RegistryConverter
from strom.services.protobuf_schemas import (
    ProtoSchemaError,
    compile_proto,
    decode_indexes,
    encode_indexes,
    file_descriptor,
)

NAMESPACE = "io.confluent.connect.protobuf"
DEFAULT_NAME = "ConnectDefault"
TAG = NAMESPACE + ".Tag"
TYPE = NAMESPACE + ".Type"
ENUM = NAMESPACE + ".Enum"
UNION_PREFIX = NAMESPACE + ".Union."
CONNECT_TYPE = "connect.type"
PRECISION = "connect.decimal.precision"
ENTRY = "Entry"
DECIMAL_TYPE = "confluent.type.Decimal"
DATE_TYPE = "google.type.Date"
TIME_TYPE = "google.type.TimeOfDay"
TIMESTAMP_TYPE = "google.protobuf.Timestamp"
_LOGICAL_MESSAGES = {
    DECIMAL: (DECIMAL_TYPE, decimal_pb2),
    DATE: (DATE_TYPE, date_pb2),
    TIME: (TIME_TYPE, timeofday_pb2),
    TIMESTAMP: (TIMESTAMP_TYPE, timestamp_pb2),
}
_MESSAGE_LOGICAL = {full: logical for logical, (full, _) in _LOGICAL_MESSAGES.items()}
# Every file a written or read schema may import without a reference, dependencies first.
_KNOWN_FILES = (
    descriptor_pb2,
    any_pb2,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
    date_pb2,
    timeofday_pb2,
    meta_pb2,
    decimal_pb2,
)
KNOWN_FILE_NAMES = frozenset(module.DESCRIPTOR.name for module in _KNOWN_FILES)
# The known files protoc's own include path lacks, for compiling ``.proto`` text.
_KNOWN_IMPORTS = {
    module.DESCRIPTOR.name: base64.b64encode(module.DESCRIPTOR.serialized_pb).decode()
    for module in (date_pb2, timeofday_pb2, meta_pb2, decimal_pb2)
}
_FD = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    INT8: _FD.TYPE_INT32,
    INT16: _FD.TYPE_INT32,
    INT32: _FD.TYPE_INT32,
    INT64: _FD.TYPE_INT64,
    FLOAT32: _FD.TYPE_FLOAT,
    FLOAT64: _FD.TYPE_DOUBLE,
    BOOLEAN: _FD.TYPE_BOOL,
    STRING: _FD.TYPE_STRING,
    BYTES: _FD.TYPE_BYTES,
}
_NAMED_KINDS = {
    "int32": _FD.TYPE_INT32,
    "sint32": _FD.TYPE_SINT32,
    "sfixed32": _FD.TYPE_SFIXED32,
    "int64": _FD.TYPE_INT64,
    "uint32": _FD.TYPE_UINT32,
    "fixed32": _FD.TYPE_FIXED32,
    "uint64": _FD.TYPE_UINT64,
    "sint64": _FD.TYPE_SINT64,
    "fixed64": _FD.TYPE_FIXED64,
    "sfixed64": _FD.TYPE_SFIXED64,
}
_KIND_NAMES = {kind: name for name, kind in _NAMED_KINDS.items()}
_INT32_KINDS = (_FD.TYPE_INT32, _FD.TYPE_SINT32, _FD.TYPE_SFIXED32)
_INT64_KINDS = (
    _FD.TYPE_INT64,
    _FD.TYPE_UINT32,
    _FD.TYPE_FIXED32,
    _FD.TYPE_UINT64,
    _FD.TYPE_SINT64,
    _FD.TYPE_FIXED64,
    _FD.TYPE_SFIXED64,
)
_CONNECT_OF_KIND = {
    _FD.TYPE_FLOAT: FLOAT32,
    _FD.TYPE_DOUBLE: FLOAT64,
    _FD.TYPE_BOOL: BOOLEAN,
    _FD.TYPE_STRING: STRING,
    _FD.TYPE_BYTES: BYTES,
}
_WRAPPERS = {
    INT8: "Int32Value",
    INT16: "Int32Value",
    INT32: "Int32Value",
    INT64: "Int64Value",
    FLOAT32: "FloatValue",
    FLOAT64: "DoubleValue",
    BOOLEAN: "BoolValue",
    STRING: "StringValue",
    BYTES: "BytesValue",
}
_UNWRAPPED = {
    "google.protobuf.DoubleValue": FLOAT64,
    "google.protobuf.FloatValue": FLOAT32,
    "google.protobuf.Int64Value": INT64,
    "google.protobuf.UInt64Value": INT64,
    "google.protobuf.Int32Value": INT32,
    "google.protobuf.UInt32Value": INT64,
    "google.protobuf.BoolValue": BOOLEAN,
    "google.protobuf.StringValue": STRING,
    "google.protobuf.BytesValue": BYTES,
}
_EPOCH = datetime.date(1970, 1, 1)
_FIELD_META: Any = meta_pb2.field_meta  # type: ignore[attr-defined]
_MS_PER_DAY = 86_400_000


def known_pool() -> descriptor_pool.DescriptorPool:
    """A pool holding the well-known files a schema may import without a reference."""
    pool = descriptor_pool.DescriptorPool()
    for module in _KNOWN_FILES:
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    return pool


def _split(full_name: str) -> tuple[str, str]:
    namespace, _, name = full_name.rpartition(".")
    return namespace, name


# Connect schemas to a proto file ----------------------------------------------------------


class _FileBuilder:
    """One Connect schema as a proto3 FileDescriptorProto, named as ProtobufData names."""

    def __init__(self) -> None:
        self.unnamed = 0
        self.file = descriptor_pb2.FileDescriptorProto(name="connect.proto", syntax="proto3")

    def name_or_default(self, name: str | None) -> str:
        if name:
            return name
        self.unnamed += 1
        return f"{DEFAULT_NAME}{self.unnamed}"

    def unqualified(self, name: str | None) -> str:
        return _split(self.name_or_default(name))[1]

    def depend(self, file_name: str) -> None:
        if file_name not in self.file.dependency:
            self.file.dependency.append(file_name)

    def root(self, schema: Schema) -> str:
        """Declare the root message; its full name."""
        namespace, name = _split(self.name_or_default(schema.name))
        if namespace:
            self.file.package = namespace
        message = self.file.message_type.add(name=name)
        full = f"{namespace}.{name}" if namespace else name
        self.message(message, full, schema)
        return full

    def message(self, message: Any, full: str, schema: Schema) -> None:
        number = 1
        for field in schema.fields:
            tag = (field.schema.parameters or {}).get(TAG)
            if tag is None:
                tag, number = str(number), number + 1
            if _is_union(field.schema):
                self.union(message, full, field)
                continue
            self.field(message, full, field.schema, field.name, int(tag))

    def union(self, message: Any, full: str, field: Field) -> None:
        oneof_index = len(message.oneof_decl)
        name = field.schema.name or ""
        union_name = name[len(UNION_PREFIX) :] if name.startswith(UNION_PREFIX) else field.name
        message.oneof_decl.add(name=union_name)
        used = {f.number for f in message.field}
        for member in field.schema.fields:
            tag = (member.schema.parameters or {}).get(TAG)
            number = int(tag) if tag else max(used | {0}) + 1
            used.add(number)
            made = self.field(message, full, member.schema, member.name, number)
            made.oneof_index = oneof_index

    def field(self, message: Any, full: str, schema: Schema, name: str, number: int) -> Any:
        repeated = schema.type in (ARRAY, MAP)
        element = schema.value_schema if schema.type == ARRAY else schema
        assert element is not None
        params: dict[str, str] = {}
        kind, type_name = self.data_type(message, full, element, name, params)
        made = message.field.add(
            name=name,
            number=number,
            label=_FD.LABEL_REPEATED if repeated else _FD.LABEL_OPTIONAL,
            type=kind,
        )
        if type_name:
            made.type_name = type_name
        if params:
            self.depend(meta_pb2.DESCRIPTOR.name)
            made.options.Extensions[_FIELD_META].params.update(params)
        return made

    def data_type(
        self, message: Any, full: str, schema: Schema, field_name: str, params: dict[str, str]
    ) -> tuple[int, str]:
        parameters = schema.parameters or {}
        if schema.name in _LOGICAL_MESSAGES:
            type_full, module = _LOGICAL_MESSAGES[schema.name]
            self.depend(module.DESCRIPTOR.name)
            if schema.name == DECIMAL:
                if PRECISION in parameters:
                    params["precision"] = parameters[PRECISION]
                if "scale" in parameters:
                    params["scale"] = parameters["scale"]
            return _FD.TYPE_MESSAGE, "." + type_full
        if schema.type == ARRAY:
            raise DataException("Array cannot be nested")
        if schema.type in (INT8, INT16):
            params[CONNECT_TYPE] = schema.type
        if schema.type == STRING and ENUM in parameters:
            enum_name = self.unqualified(schema.name)
            if all(e.name != enum_name for e in message.enum_type):
                enum = message.enum_type.add(name=enum_name)
                prefix = ENUM + "."
                for key, value in parameters.items():
                    if key.startswith(prefix):
                        enum.value.add(name=key[len(prefix) :], number=int(value))
            return _FD.TYPE_ENUM, f".{full}.{enum_name}"
        if schema.type in (INT32, INT64) and TYPE in parameters:
            kind = _NAMED_KINDS.get(parameters[TYPE])
            if kind is None:
                raise DataException(f"Unknown Protobuf type {parameters[TYPE]}")
            return kind, ""
        if schema.type in _SCALARS:
            return _SCALARS[schema.type], ""
        if schema.type == MAP:
            entry_name = self.unqualified(schema.name) + ENTRY
            entry = message.nested_type.add(name=entry_name)
            entry_full = f"{full}.{entry_name}"
            assert schema.key_schema is not None and schema.value_schema is not None
            self.field(entry, entry_full, schema.key_schema, "key", 1)
            self.field(entry, entry_full, schema.value_schema, "value", 2)
            return _FD.TYPE_MESSAGE, "." + entry_full
        if schema.type == STRUCT:
            name = self.unqualified(schema.name)
            if name == field_name:
                name += "Message"
            if all(n.name != name for n in message.nested_type):
                nested = message.nested_type.add(name=name)
                self.message(nested, f"{full}.{name}", schema)
            return _FD.TYPE_MESSAGE, f".{full}.{name}"
        raise DataException(f"Unknown schema type: {schema.type}")


def _is_union(schema: Schema) -> bool:
    return schema.type == STRUCT and (schema.name or "").startswith(UNION_PREFIX)


def proto_file(schema: Schema) -> tuple[Any, str]:
    """The FileDescriptorProto of a Connect schema and its root message's full name (a
    ``google.protobuf`` wrapper's for a schema that is not a struct)."""
    if schema.type == STRUCT:
        builder = _FileBuilder()
        root = builder.root(schema)
        return builder.file, root
    if schema.type in _WRAPPERS:
        wrappers = descriptor_pb2.FileDescriptorProto.FromString(
            wrappers_pb2.DESCRIPTOR.serialized_pb
        )
        return wrappers, f"google.protobuf.{_WRAPPERS[schema.type]}"
    raise DataException(f"Unsupported root schema of type {schema.type.upper()}")


# Proto descriptors to Connect schemas -----------------------------------------------------


def _optional_fields(descriptor: Any) -> set[str]:
    """The names of a message's proto3 ``optional`` fields."""
    proto = descriptor_pb2.DescriptorProto()
    descriptor.CopyToProto(proto)
    return {f.name for f in proto.field if f.proto3_optional}


def _real_oneofs(descriptor: Any) -> list[Any]:
    optional = _optional_fields(descriptor)
    return [
        o for o in descriptor.oneofs if not (len(o.fields) == 1 and o.fields[0].name in optional)
    ]


def _is_map_entry(field: Any) -> bool:
    if field.message_type is None or not field.is_repeated:
        return False
    entry = field.message_type
    if entry.GetOptions().map_entry:
        return True
    names = [f.name for f in entry.fields]
    return (
        entry.name.endswith(ENTRY)
        and names == ["key", "value"]
        and not any(f.is_repeated for f in entry.fields)
    )


def connect_schema(descriptor: Any) -> Schema:
    """The Connect schema of a message read at the top of a record."""
    if descriptor.full_name in _UNWRAPPED:
        return Schema(_UNWRAPPED[descriptor.full_name])
    return _struct_schema(descriptor, (), optional=False)


def _struct_schema(descriptor: Any, seen: tuple[str, ...], optional: bool) -> Schema:
    if descriptor.full_name in seen:
        raise DataException(f"Recursive Protobuf message {descriptor.full_name} is not served")
    seen = (*seen, descriptor.full_name)
    fields: list[tuple[str, Schema]] = []
    oneofs = _real_oneofs(descriptor)
    for oneof in oneofs:
        members = tuple(
            Field(f.name, index, _field_schema(f, seen)) for index, f in enumerate(oneof.fields)
        )
        union = Schema(STRUCT, True, name=UNION_PREFIX + oneof.name, fields=members)
        fields.append((f"{oneof.name}_{oneof.index}", union))
    in_oneofs = {f.name for o in oneofs for f in o.fields}
    fields += [
        (f.name, _field_schema(f, seen)) for f in descriptor.fields if f.name not in in_oneofs
    ]
    return Schema(
        STRUCT,
        optional,
        name=descriptor.name,
        fields=tuple(Field(name, index, schema) for index, (name, schema) in enumerate(fields)),
    )


def _meta_params(field: Any) -> dict[str, str]:
    options = field.GetOptions()
    if not options.HasExtension(_FIELD_META):
        return {}
    return dict(options.Extensions[_FIELD_META].params)


def _field_schema(field: Any, seen: tuple[str, ...]) -> Schema:
    tag = {TAG: str(field.number)}
    if _is_map_entry(field):
        entry = field.message_type
        key, value = (_field_schema(f, seen) for f in entry.fields)
        name = entry.name[: -len(ENTRY)] if entry.name.endswith(ENTRY) else entry.name
        return Schema(MAP, True, name=name, parameters=tag, key_schema=key, value_schema=value)
    element = _element_schema(field, seen)
    if field.is_repeated:
        return Schema(ARRAY, True, parameters=tag, value_schema=element)
    return Schema(
        element.type,
        True,
        name=element.name,
        version=element.version,
        parameters={**(element.parameters or {}), **tag},
        fields=element.fields,
    )


def _element_schema(field: Any, seen: tuple[str, ...]) -> Schema:
    kind = field.type
    if kind in _INT32_KINDS:
        connect_type = _meta_params(field).get(CONNECT_TYPE)
        if connect_type in (INT8, INT16):
            return Schema(connect_type, True)
        params = {TYPE: _KIND_NAMES[kind]} if kind != _FD.TYPE_INT32 else None
        return Schema(INT32, True, parameters=params)
    if kind in _INT64_KINDS:
        params = {TYPE: _KIND_NAMES[kind]} if kind != _FD.TYPE_INT64 else None
        return Schema(INT64, True, parameters=params)
    if kind in _CONNECT_OF_KIND:
        return Schema(_CONNECT_OF_KIND[kind], True)
    if kind == _FD.TYPE_ENUM:
        enum = field.enum_type
        params = {ENUM: enum.name} | {f"{ENUM}.{v.name}": str(v.number) for v in enum.values}
        return Schema(STRING, True, name=enum.name, parameters=params)
    if kind == _FD.TYPE_MESSAGE:
        full = field.message_type.full_name
        logical = _MESSAGE_LOGICAL.get(full)
        if logical == DECIMAL:
            meta = _meta_params(field)
            params = {"scale": meta.get("scale", "0")}
            if "precision" in meta:
                params[PRECISION] = meta["precision"]
            return Schema(BYTES, True, name=DECIMAL, version=1, parameters=params)
        if logical is not None:
            return Schema(INT64 if logical == TIMESTAMP else INT32, True, name=logical, version=1)
        return _struct_schema(field.message_type, seen, optional=True)
    raise DataException(f"Unknown Connect schema type: {kind}")


# Values -----------------------------------------------------------------------------------


def _fill(message: Message, schema: Schema, value: Any) -> None:
    """Set the fields of ``message`` from a Connect struct value."""
    if not isinstance(value, Struct | dict):
        raise DataException(f"Invalid type for STRUCT: {type(value).__name__}")
    values = value.values if isinstance(value, Struct) else value
    by_name = message.DESCRIPTOR.fields_by_name
    for field in schema.fields:
        item = values.get(field.name)
        if item is None:
            item = field.schema.default
        if item is None:
            continue
        if _is_union(field.schema):
            members = item.values if isinstance(item, Struct) else item
            chosen = next((m for m in field.schema.fields if members.get(m.name) is not None), None)
            if chosen is None:
                raise DataException("Cannot find non-null field")
            target, field_schema, item = (
                by_name.get(chosen.name),
                chosen.schema,
                members[chosen.name],
            )
            name = chosen.name
        else:
            target, field_schema, name = by_name.get(field.name), field.schema, field.name
        if target is None:
            raise DataException(f"Cannot find field with name {name}")
        _set(message, target, field_schema, item)


def _set(message: Message, field: Any, schema: Schema, value: Any) -> None:
    name = field.name
    if _is_map_entry(field):
        if not isinstance(value, dict):
            raise DataException(f"Invalid type for MAP: {type(value).__name__}")
        assert schema.key_schema is not None and schema.value_schema is not None
        key_field, value_field = field.message_type.fields
        container = getattr(message, name)
        if field.message_type.GetOptions().map_entry:
            for key, item in value.items():
                key = _scalar(key_field, schema.key_schema, key)
                if value_field.message_type is not None:
                    _message(container[key], value_field, schema.value_schema, item)
                elif item is not None:
                    container[key] = _scalar(value_field, schema.value_schema, item)
            return
        for key, item in value.items():
            entry = container.add()
            if key is not None:
                _set(entry, key_field, schema.key_schema, key)
            if item is not None:
                _set(entry, value_field, schema.value_schema, item)
        return
    if field.is_repeated:
        if not isinstance(value, list | tuple):
            raise DataException(f"Invalid type for ARRAY: {type(value).__name__}")
        element = schema.value_schema if schema.type == ARRAY else schema
        assert element is not None
        container = getattr(message, name)
        for item in value:
            if item is None:
                raise DataException(f"Protobuf arrays hold no null: field {name}")
            if field.message_type is not None:
                _message(container.add(), field, element, item)
            else:
                container.append(_scalar(field, element, item))
        return
    if field.message_type is not None:
        _message(getattr(message, name), field, schema, value)
        return
    try:
        setattr(message, name, _scalar(field, schema, value))
    except (TypeError, ValueError) as exc:
        raise DataException(
            f"Invalid value for {schema.type.upper()} field {name}: {exc}"
        ) from None


def _message(target: Message, field: Any, schema: Schema, value: Any) -> None:
    """Fill the message field ``target`` (a struct, a logical type or a wrapper)."""
    target.SetInParent()
    full = field.message_type.full_name
    if full == DECIMAL_TYPE:
        decimal = to_proto_decimal(value if isinstance(value, Decimal) else Decimal(str(value)))
        target.value, target.precision, target.scale = (  # type: ignore[attr-defined]
            decimal.value,
            decimal.precision,
            decimal.scale,
        )
    elif full == DATE_TYPE:
        day = _EPOCH + datetime.timedelta(days=_int(value, DATE))
        target.year, target.month, target.day = day.year, day.month, day.day  # type: ignore[attr-defined]
    elif full == TIME_TYPE:
        millis = _int(value, TIME)
        if not 0 <= millis <= _MS_PER_DAY:
            raise DataException(
                "Time values must use number of millis greater than 0 and less than 86400000"
            )
        seconds, ms = divmod(millis, 1000)
        target.hours, target.minutes = divmod(seconds // 60, 60)  # type: ignore[attr-defined]
        target.seconds, target.nanos = seconds % 60, ms * 1_000_000  # type: ignore[attr-defined]
    elif full == TIMESTAMP_TYPE:
        seconds, ms = divmod(_int(value, TIMESTAMP), 1000)
        target.seconds, target.nanos = seconds, ms * 1_000_000  # type: ignore[attr-defined]
    elif full in _UNWRAPPED and schema.type != STRUCT:
        _set(target, target.DESCRIPTOR.fields_by_name["value"], schema, value)
    else:
        _fill(target, schema, value)


def _int(value: Any, what: str) -> int:
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return int(aware.timestamp() * 1000)
    if isinstance(value, datetime.date) and what == DATE:
        return (value - _EPOCH).days
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataException(f"Invalid type for {what}: {type(value).__name__}")
    return value


def _scalar(field: Any, schema: Schema, value: Any) -> Any:
    kind = field.type
    if kind == _FD.TYPE_ENUM:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        found = field.enum_type.values_by_name.get(str(value))
        if found is None:
            raise DataException(f"{value} is not a symbol of enum {field.enum_type.name}")
        return found.number
    if kind in _INT32_KINDS or kind in _INT64_KINDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DataException(f"Invalid type for {schema.type.upper()}: {type(value).__name__}")
        return value
    if kind in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            raise DataException(f"Invalid type for {schema.type.upper()}: {type(value).__name__}")
        return float(value)
    if kind == _FD.TYPE_BOOL:
        if not isinstance(value, bool):
            raise DataException(f"Invalid type for BOOLEAN: {type(value).__name__}")
        return value
    if kind == _FD.TYPE_STRING:
        if not isinstance(value, str):
            raise DataException(f"Invalid type for STRING: {type(value).__name__}")
        return value
    if kind == _FD.TYPE_BYTES:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise DataException(f"Invalid type for BYTES: {type(value).__name__}")
        return bytes(value)
    raise DataException(f"Unknown Protobuf field type {kind}")


def connect_value(schema: Schema, message: Message) -> Any:
    """The Connect value of a message read at the top of a record."""
    if schema.type != STRUCT:
        return message.value  # type: ignore[attr-defined]
    return _struct_value(schema, message)


def _struct_value(schema: Schema, message: Message) -> Struct:
    descriptor = message.DESCRIPTOR
    optional = _optional_fields(descriptor)
    values: dict[str, Any] = {}
    by_name = descriptor.fields_by_name
    for field in schema.fields:
        if _is_union(field.schema):
            oneof = field.schema.name[len(UNION_PREFIX) :]  # type: ignore[index]
            chosen = message.WhichOneof(oneof)
            if chosen is not None:
                member = field.schema.field(chosen)
                assert member is not None
                values[field.name] = Struct(
                    field.schema,
                    {chosen: _value(by_name[chosen], member.schema, getattr(message, chosen))},
                )
            continue
        target = by_name[field.name]
        scalar_or_repeated = target.message_type is None or target.is_repeated
        if (scalar_or_repeated and target.name not in optional) or message.HasField(field.name):
            values[field.name] = _value(target, field.schema, getattr(message, field.name))
    return Struct(schema, values)


def _value(field: Any, schema: Schema, raw: Any) -> Any:
    if _is_map_entry(field):
        assert schema.key_schema is not None and schema.value_schema is not None
        key_field, value_field = field.message_type.fields
        entries: Iterable[tuple[Any, Any]]
        if field.message_type.GetOptions().map_entry:
            entries = raw.items()
        else:
            entries = ((entry.key, entry.value) for entry in raw)
        return {
            _element(key_field, schema.key_schema, k): _element(value_field, schema.value_schema, v)
            for k, v in entries
        }
    if field.is_repeated:
        assert schema.value_schema is not None
        return [_element(field, schema.value_schema, item) for item in raw]
    return _element(field, schema, raw)


def _element(field: Any, schema: Schema, raw: Any) -> Any:
    if field.type == _FD.TYPE_ENUM:
        found = field.enum_type.values_by_number.get(raw)
        return found.name if found is not None else str(raw)
    if field.message_type is None:
        return bytes(raw) if field.type == _FD.TYPE_BYTES else raw
    full = field.message_type.full_name
    if full == DECIMAL_TYPE:
        unscaled = int.from_bytes(raw.value, "big", signed=True) if raw.value else 0
        return Decimal(unscaled).scaleb(-raw.scale)
    if full == DATE_TYPE:
        if raw.year == 0:
            return 0
        return (datetime.date(raw.year, raw.month, raw.day) - _EPOCH).days
    if full == TIME_TYPE:
        return ((raw.hours * 60 + raw.minutes) * 60 + raw.seconds) * 1000 + raw.nanos // 1_000_000
    if full == TIMESTAMP_TYPE:
        return raw.seconds * 1000 + raw.nanos // 1_000_000
    return _struct_value(schema, raw)


# The converter ----------------------------------------------------------------------------


class ProtobufConverter(RegistryConverter):
    CONFIG_DEF = RegistryConverter.CONFIG_DEF.merged(cd.ConfigDef([]))
    FORMAT = "Protobuf"

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        super().configure(configs, is_key)
        # (topic, id(schema)) -> (schema, framing, message class)
        self.writers: dict[tuple[str, int], tuple[Schema, bytes, Any]] = {}
        # (schema id, indexes) -> (message class, Connect schema)
        self.readers: dict[tuple[int, tuple[int, ...]], tuple[Any, Schema]] = {}
        self.files_lock = threading.Lock()

    def _writer(self, topic: str, schema: Schema) -> tuple[bytes, Any]:
        known = self.writers.get((topic, id(schema)))
        if known is not None and known[0] is schema:
            return known[1], known[2]
        latest = self.schema_id(topic)
        if latest is not None:
            pool, main = self._pool(self.registry.schema(latest))
            indexes, full = _message_named(main, schema.name)
            message_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
            schema_id = latest
        else:
            proto, full = proto_file(schema)
            pool = known_pool()
            if proto.name not in KNOWN_FILE_NAMES:
                pool.Add(proto)
            text = base64.b64encode(proto.SerializeToString()).decode()
            schema_id = self.registry.register_typed(self.subject(topic), text, "PROTOBUF", [])
            message_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
            indexes = _indexes_of(proto, full)
        framing = HEADER.pack(0, schema_id) + encode_indexes(indexes)
        with self.cache_lock:
            if len(self.writers) >= WRITER_CACHE_SIZE:
                self.writers.clear()
            self.writers[(topic, id(schema))] = (schema, framing, message_class)
        return framing, message_class

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        if schema is None:
            raise DataException(
                "ProtobufConverter needs a schema: schemaless data cannot be written"
            )
        framing, message_class = self._writer(topic, schema)
        message = message_class()
        if schema.type == STRUCT:
            _fill(message, schema, value)
        else:
            if schema.name == DECIMAL:
                raise DataException("A Decimal is written by Protobuf inside a struct only")
            _set(message, message.DESCRIPTOR.fields_by_name["value"], schema, value)
        serialized: bytes = message.SerializeToString()
        return framing + serialized

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        schema_id = self.header(topic, data)
        try:
            indexes, position = decode_indexes(data, HEADER.size)
        except ProtoSchemaError as exc:
            raise DataException(
                f"Failed to deserialize data for topic {topic} to Protobuf: {exc}"
            ) from None
        message_class, schema = self._reader(schema_id, tuple(indexes))
        try:
            message = message_class.FromString(data[position:])
        except DecodeError as exc:
            raise DataException(
                f"Failed to deserialize data for topic {topic} to Protobuf: {exc}"
            ) from None
        return schema, connect_value(schema, message)

    def _reader(self, schema_id: int, indexes: tuple[int, ...]) -> tuple[Any, Schema]:
        known = self.readers.get((schema_id, indexes))
        if known is not None:
            return known
        pool, main = self._pool(self.registry.schema(schema_id))
        full = _message_at(main, list(indexes))
        descriptor = pool.FindMessageTypeByName(full)
        made = (message_factory.GetMessageClass(descriptor), connect_schema(descriptor))
        with self.cache_lock:
            self.readers[(schema_id, indexes)] = made
        return made

    def _pool(self, schema: RegistrySchema) -> tuple[Any, Any]:
        """A pool with the schema's file (and its references), and that file."""
        pool = known_pool()
        main = self._add(pool, schema, set())
        return pool, main

    def _add(self, pool: Any, schema: RegistrySchema, added: set[str], name: str = "") -> Any:
        imports: dict[str, str] = {}
        for reference in schema.references or []:
            imported = reference.name or ""
            if not imported or imported in KNOWN_FILE_NAMES or imported in added:
                continue
            referred = self.registry.reference(reference)
            self._add(pool, referred, added, imported)
            imports[imported] = referred.schema_str or ""
        text = schema.schema_str or ""
        proto = file_descriptor(text)
        if proto is None:
            try:
                files = compile_proto(text, {**_KNOWN_IMPORTS, **imports}).file
            except ProtoSchemaError as exc:
                raise DataException(f"Invalid Protobuf schema: {exc}") from None
            for dependency in files[:-1]:
                if dependency.name not in KNOWN_FILE_NAMES and dependency.name not in added:
                    added.add(dependency.name)
                    pool.Add(dependency)
            proto = files[-1]
        if name:
            proto.name = name
        if proto.name in KNOWN_FILE_NAMES:
            return proto  # a well-known file (a wrapper at the top): the pool has it
        if proto.name in added:
            proto.name = f"strom-read-{len(added)}.proto"
        added.add(proto.name)
        try:
            pool.Add(proto)
        except (TypeError, ValueError) as exc:
            raise DataException(f"Invalid Protobuf schema: {exc}") from None
        return proto


def _message_at(file: Any, indexes: list[int]) -> str:
    """The full name of the message at Confluent's indexes in a file."""
    try:
        message = file.message_type[indexes[0]]
        path = [message.name]
        for index in indexes[1:]:
            message = message.nested_type[index]
            path.append(message.name)
    except IndexError:
        raise DataException(f"No Protobuf message at indexes {indexes}") from None
    return ".".join(([file.package] if file.package else []) + path)


def _indexes_of(file: Any, full: str) -> list[int]:
    """Confluent's indexes of a top-level message of a file."""
    simple = full.rsplit(".", 1)[-1]
    for index, message in enumerate(file.message_type):
        if message.name == simple:
            return [index]
    raise DataException(f"No Protobuf message {full}")


def _message_named(file: Any, name: str | None) -> tuple[list[int], str]:
    """The top-level message of a subject's latest file to write a schema with: the one
    of the schema's name, else the first."""
    wanted = (name or "").rsplit(".", 1)[-1]
    index = next((i for i, m in enumerate(file.message_type) if m.name == wanted), 0)
    if not file.message_type:
        raise DataException("The subject's latest Protobuf schema has no message")
    return [index], _message_at(file, [index])
