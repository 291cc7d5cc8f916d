"""ksqlDB's rows as Protobuf messages, both ways, with no protoc: the descriptor of a
row's columns, a row written into its message, a message read back as plain values, and
the columns a registered Protobuf schema declares.

Owns the mapping of SQL types to proto3 fields as ksqlDB's PROTOBUF format writes them
(Confluent's Connect conversion): BOOLEAN ``bool``, INTEGER ``int32``, BIGINT
``int64``, DOUBLE ``double``, STRING ``string``, BYTES ``bytes``, ARRAY ``repeated``,
MAP a map field, STRUCT a nested message ``ConnectDefault<n>``, DECIMAL
``confluent.type.Decimal`` (its precision and scale in the field's
``(confluent.field_meta).params``), DATE ``google.type.Date``, TIME
``google.type.TimeOfDay``, TIMESTAMP ``google.protobuf.Timestamp``; a null is the field
left unset (proto3 has no null). Read back, an unset scalar is proto3's default (0,
"", false), an unset message or proto3 ``optional`` field null. A registered message
is filled too (its fields matched to columns case aside, an enum by its name, Google's
wrappers by their value).
The other way (``columns_of``), as ksqlDB infers columns: field names upper-cased;
``int32``/``sint32``/``sfixed32`` INTEGER, the other integers BIGINT (unsigned ones do
not fit an INTEGER), ``float`` DOUBLE, an enum STRING, Google's wrappers their value's
type, the well-known messages above their SQL types, any other message a STRUCT; a
oneof (not proto3's ``optional``) one STRUCT column ``<ONEOF>_<index>`` of its fields,
before the message's other fields, null unless one is set, and holding the one set
(Confluent's union). PROTOBUF_NOSR rows are the same messages alone.

Row values are in the query engine's forms: DECIMAL a ``decimal.Decimal``, DATE days
since the epoch, TIME milliseconds of the day, TIMESTAMP epoch milliseconds, BYTES
bytes (base64 text once read, as the JSON readers take them).

Does not own the registry, its wire format or its client (``strom.ksql.registry_formats``).
"""

from __future__ import annotations

import base64
import decimal
import functools
from typing import Any

from strom.ksql import expressions as ex

ROW_FILE = "ksql_row.proto"
DECIMAL_MESSAGE = "confluent.type.Decimal"
DATE_MESSAGE = "google.type.Date"
TIME_MESSAGE = "google.type.TimeOfDay"
TIMESTAMP_MESSAGE = "google.protobuf.Timestamp"
_SCALARS = {
    "BOOLEAN": "TYPE_BOOL",
    "INTEGER": "TYPE_INT32",
    "BIGINT": "TYPE_INT64",
    "DOUBLE": "TYPE_DOUBLE",
    "STRING": "TYPE_STRING",
    "BYTES": "TYPE_BYTES",
}
_WELL_KNOWN = {  # SQL type -> (message, its file)
    "DATE": (DATE_MESSAGE, "google/type/date.proto"),
    "TIME": (TIME_MESSAGE, "google/type/timeofday.proto"),
    "TIMESTAMP": (TIMESTAMP_MESSAGE, "google/protobuf/timestamp.proto"),
}
_INTEGER_KINDS = ("TYPE_INT32", "TYPE_SINT32", "TYPE_SFIXED32")
_BIGINT_KINDS = (
    "TYPE_INT64", "TYPE_SINT64", "TYPE_SFIXED64", "TYPE_UINT32", "TYPE_UINT64",
    "TYPE_FIXED32", "TYPE_FIXED64",
)  # fmt: skip
_WRAPPERS = {
    "google.protobuf.BoolValue": "BOOLEAN",
    "google.protobuf.Int32Value": "INTEGER",
    "google.protobuf.Int64Value": "BIGINT",
    "google.protobuf.UInt32Value": "BIGINT",
    "google.protobuf.UInt64Value": "BIGINT",
    "google.protobuf.FloatValue": "DOUBLE",
    "google.protobuf.DoubleValue": "DOUBLE",
    "google.protobuf.StringValue": "STRING",
    "google.protobuf.BytesValue": "BYTES",
}


class ProtobufRowError(ValueError):
    """A type PROTOBUF cannot hold, or a schema whose columns cannot be read; one line."""


def known_files() -> list[Any]:
    """The serialized FileDescriptorProtos of the imports a row's file may have (and
    theirs), in an order a pool can add them in."""
    from confluent_kafka.schema_registry.confluent import meta_pb2
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2
    from google.protobuf import descriptor_pb2, timestamp_pb2, wrappers_pb2
    from google.type import date_pb2, timeofday_pb2  # type: ignore[import-untyped]

    return [
        descriptor_pb2.DESCRIPTOR.serialized_pb,
        meta_pb2.DESCRIPTOR.serialized_pb,
        decimal_pb2.DESCRIPTOR.serialized_pb,
        date_pb2.DESCRIPTOR.serialized_pb,
        timeofday_pb2.DESCRIPTOR.serialized_pb,
        timestamp_pb2.DESCRIPTOR.serialized_pb,
        wrappers_pb2.DESCRIPTOR.serialized_pb,
    ]


def pool_with(files: list[Any]) -> Any:
    """A new descriptor pool holding the known imports, then ``files``
    (FileDescriptorProtos, each after those it imports); names already there skipped."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    for serialized in known_files():
        proto = descriptor_pb2.FileDescriptorProto.FromString(serialized)
        pool.Add(proto)
        added.add(proto.name)
    for proto in files:
        if proto.name not in added:
            pool.Add(proto)
            added.add(proto.name)
    return pool


NULLABLE_REPRESENTATIONS = ("OPTIONAL", "WRAPPER")
_WRAPPER_OF = {  # SQL type -> Google's wrapper of it (WRAPPER)
    "BOOLEAN": "google.protobuf.BoolValue",
    "INTEGER": "google.protobuf.Int32Value",
    "BIGINT": "google.protobuf.Int64Value",
    "DOUBLE": "google.protobuf.DoubleValue",
    "STRING": "google.protobuf.StringValue",
    "BYTES": "google.protobuf.BytesValue",
}


def nullable_representation(properties: dict[str, Any], field: str) -> str | None:
    """``KEY_`` / ``VALUE_PROTOBUF_NULLABLE_REPRESENTATION`` of a source's WITH
    properties (``field`` "key" or "value"), upper-cased: OPTIONAL, WRAPPER or None."""
    given = properties.get(f"{field.upper()}_PROTOBUF_NULLABLE_REPRESENTATION")
    return None if given is None else str(given).upper()


class RowMessages:
    """The message types of one row's columns, declared into a FileDescriptorProto
    (``file``): ``ConnectDefault1`` the row, nested STRUCTs ``ConnectDefault2``...

    ``nullable`` (``*_PROTOBUF_NULLABLE_REPRESENTATION``) is how a scalar field keeps a
    null apart from proto3's default: OPTIONAL a proto3 ``optional`` field, WRAPPER
    Google's wrapper message of its type (``google.protobuf.Int32Value``...); None a
    plain scalar, its null written as the default."""

    def __init__(self, columns: list[tuple[str, ex.SqlType]], nullable: str | None = None) -> None:
        from google.protobuf import descriptor_pb2

        if nullable is not None and nullable not in NULLABLE_REPRESENTATIONS:
            raise ProtobufRowError(f"unknown PROTOBUF nullable representation {nullable}")
        self.file = descriptor_pb2.FileDescriptorProto(name=ROW_FILE, syntax="proto3")
        self._descriptor = descriptor_pb2
        self._nullable = nullable
        self._count = 0
        self._class: Any = None
        self._declare(columns, None)

    def _import(self, name: str) -> None:
        if name not in self.file.dependency:
            self.file.dependency.append(name)

    def _declare(self, columns: list[tuple[str, ex.SqlType]], into: Any) -> str:
        self._count += 1
        name = f"ConnectDefault{self._count}"
        message = (
            self.file.message_type.add(name=name)
            if into is None
            else into.nested_type.add(name=name)
        )
        for number, (column, sql_type) in enumerate(columns, start=1):
            self._field(message, column, sql_type, number)
            if self._nullable is not None:
                self._nullable_field(message, message.field[-1], str(sql_type))
        return name

    def _nullable_field(self, message: Any, field: Any, sql_type: str) -> None:
        """A scalar column's field made to hold a null (OPTIONAL or WRAPPER)."""
        fd = self._descriptor.FieldDescriptorProto
        if field.label == fd.LABEL_REPEATED or field.type == fd.TYPE_MESSAGE:
            return  # a message has presence; a repeated field none to keep
        if self._nullable == "WRAPPER":
            self._import("google/protobuf/wrappers.proto")
            field.type = fd.TYPE_MESSAGE
            field.type_name = "." + _WRAPPER_OF[sql_type]
            return
        field.proto3_optional = True  # in a synthetic oneof of its own, as protoc does
        field.oneof_index = len(message.oneof_decl)
        message.oneof_decl.add(name=f"_{field.name}")

    def _field(self, message: Any, column: str, sql_type: ex.SqlType, number: int) -> None:
        fd = self._descriptor.FieldDescriptorProto
        field = message.field.add(name=column, number=number, label=fd.LABEL_OPTIONAL)
        if isinstance(sql_type, ex.ArrayType):
            field.label = fd.LABEL_REPEATED
            sql_type = sql_type.element
            if isinstance(sql_type, ex.ArrayType | ex.MapType):
                raise ProtobufRowError("PROTOBUF does not hold an ARRAY of ARRAY or MAP")
        if isinstance(sql_type, ex.MapType):
            if str(sql_type.key) != "STRING":
                raise ProtobufRowError("PROTOBUF format only supports MAP types with STRING keys")
            entry = message.nested_type.add(name=f"{column}Entry")
            entry.options.map_entry = True
            self._field(entry, "key", sql_type.key, 1)
            self._field(entry, "value", sql_type.value, 2)
            field.label = fd.LABEL_REPEATED
            field.type = fd.TYPE_MESSAGE
            field.type_name = entry.name
            return
        if isinstance(sql_type, ex.StructType):
            field.type = fd.TYPE_MESSAGE
            field.type_name = self._declare([(f.name, f.type) for f in sql_type.fields], message)
            return
        if isinstance(sql_type, ex.DecimalType):
            self._import("confluent/meta.proto")
            self._import("confluent/type/decimal.proto")
            field.type = fd.TYPE_MESSAGE
            field.type_name = "." + DECIMAL_MESSAGE
            params = field.options.Extensions[_field_meta()].params
            params["precision"] = str(sql_type.precision)
            params["scale"] = str(sql_type.scale)
            return
        known = _WELL_KNOWN.get(str(sql_type))
        if known is not None:
            self._import(known[1])
            field.type = fd.TYPE_MESSAGE
            field.type_name = "." + known[0]
            return
        kind = _SCALARS.get(str(sql_type))
        if kind is None:
            raise ProtobufRowError(f"PROTOBUF does not hold {sql_type} columns")
        field.type = getattr(fd, kind)

    def schema_text(self) -> str:
        """The file as the registry keeps it: the base64 FileDescriptorProto of the row's
        class, the text confluent-kafka's serializer registers for it."""
        serialized = self.message_class().DESCRIPTOR.file.serialized_pb
        return base64.standard_b64encode(serialized).decode("ascii")

    def message_class(self) -> Any:
        from google.protobuf import message_factory

        if self._class is None:
            pool = pool_with([self.file])
            self._class = message_factory.GetMessageClass(
                pool.FindMessageTypeByName(self.file.message_type[0].name)
            )
        return self._class


# ---- writing ----------------------------------------------------------------------------


def _decimal_bytes(unscaled: int) -> bytes:
    """A big-endian two's complement of the fewest bytes (Java's BigInteger.toByteArray)."""
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(length, "big", signed=True)


def civil_date(days: int) -> tuple[int, int, int]:
    """The proleptic Gregorian (year, month, day) ``days`` after 1970-01-01, as Java's
    ``LocalDate.ofEpochDay`` gives it: any int32 of days (ksqlDB's DATE), a year 0 and
    negative years too, where Python's date stops at the years 1 and 9999."""
    shifted = days + 719_468  # days since 0000-03-01, the start of a 400-year era
    era = shifted // 146_097
    day_of_era = shifted - era * 146_097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_from_march = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * month_from_march + 2) // 5 + 1
    month = month_from_march + 3 if month_from_march < 10 else month_from_march - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def epoch_days(year: int, month: int, day: int) -> int:
    """The days from 1970-01-01 to the proleptic Gregorian ``year``-``month``-``day``
    (``civil_date``'s inverse, Java's ``LocalDate.toEpochDay``), any year."""
    year -= 1 if month <= 2 else 0
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


def _set_well_known(target: Any, full_name: str, value: Any) -> bool:
    """Writes ``value`` into a well-known message; whether ``full_name`` is one."""
    if full_name == DECIMAL_MESSAGE:
        number = decimal.Decimal(value)
        sign, digits, exponent = number.as_tuple()
        assert isinstance(exponent, int), "a finite DECIMAL"
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        target.value = _decimal_bytes(unscaled)
        target.precision = len(digits)
        target.scale = -exponent
    elif full_name == DATE_MESSAGE:
        target.year, target.month, target.day = civil_date(int(value))
    elif full_name == TIME_MESSAGE:
        ms = int(value)
        target.hours, rest = divmod(ms, 3_600_000)
        target.minutes, rest = divmod(rest, 60_000)
        target.seconds, millis = divmod(rest, 1000)
        target.nanos = millis * 1_000_000
    elif full_name == TIMESTAMP_MESSAGE:
        seconds, millis = divmod(int(value), 1000)
        target.seconds, target.nanos = seconds, millis * 1_000_000
    elif full_name in _WRAPPERS:
        target.value = value
    else:
        return False
    return True


def _set_message(target: Any, value: Any) -> None:
    target.SetInParent()
    if not _set_well_known(target, target.DESCRIPTOR.full_name, value):
        fill(target, value)


@functools.lru_cache(maxsize=1024)
def _optional_names(descriptor: Any) -> frozenset[str]:
    """A message's proto3 ``optional`` fields (once a descriptor: rows read many)."""
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.DescriptorProto()
    descriptor.CopyToProto(proto)
    return frozenset(f.name for f in proto.field if f.proto3_optional)


def _real_oneofs(descriptor: Any) -> list[Any]:
    """A message's oneofs as written in its schema: proto3's ``optional`` fields, each in
    a oneof of its own that protoc makes up, left out."""
    optional = _optional_names(descriptor)
    return [
        oneof
        for oneof in descriptor.oneofs
        if not (len(oneof.fields) == 1 and oneof.fields[0].name in optional)
    ]


def union_name(oneof: Any) -> str:
    """The column (or struct field) a oneof is read as: its name and its index."""
    return f"{oneof.name}_{oneof.index}".upper()


def _union_named(descriptor: Any, name: str) -> Any:
    return next((o for o in _real_oneofs(descriptor) if union_name(o) == name.upper()), None)


def _field_named(descriptor: Any, name: str) -> Any:
    """The field ``name`` (a column's, upper-cased) names: exactly, else ignoring case."""
    found = descriptor.fields_by_name.get(name)
    if found is None:
        found = next((f for f in descriptor.fields if f.name.upper() == name.upper()), None)
    if found is None:
        raise ProtobufRowError(f"message {descriptor.full_name} has no field {name}")
    return found


def _scalar(field: Any, value: Any) -> Any:
    """A value as ``field`` takes it: an enum's name as its number."""
    if field.enum_type is not None and isinstance(value, str):
        found = field.enum_type.values_by_name.get(value)
        if found is None:
            raise ProtobufRowError(f"{value} is not a value of enum {field.enum_type.full_name}")
        return found.number
    return value


def fill(message: Any, row: dict[str, Any]) -> Any:
    """``message`` with the non-null values of ``row`` (column name to value) set; a
    column fills the field of its name, its case aside (a registered message's)."""
    for column, value in row.items():
        if value is None:
            continue  # proto3: unset
        union = _union_named(message.DESCRIPTOR, column)
        if union is not None and isinstance(value, dict):
            chosen = {k: v for k, v in value.items() if v is not None}
            if len(chosen) > 1:
                raise ProtobufRowError(f"more than one field of oneof {union.name} is set")
            fill(message, chosen)
            continue
        field = _field_named(message.DESCRIPTOR, column)
        name = field.name
        target = field.message_type
        container = getattr(message, name)
        if target is not None and target.GetOptions().map_entry:
            value_field = target.fields_by_name["value"]
            for key, item in value.items():
                if item is None:
                    continue
                if value_field.message_type is not None:
                    _set_message(container[key], item)
                else:
                    container[key] = _scalar(value_field, item)
        elif field.is_repeated:
            for item in value:
                if item is None:
                    continue
                if target is not None:
                    _set_message(container.add(), item)
                else:
                    container.append(_scalar(field, item))
        elif target is not None:
            _set_message(container, value)
        else:
            setattr(message, name, _scalar(field, value))
    return message


# ---- reading ----------------------------------------------------------------------------


def _plain_message(message: Any) -> Any:
    full_name = message.DESCRIPTOR.full_name
    if full_name == DECIMAL_MESSAGE:
        unscaled = int.from_bytes(message.value, "big", signed=True) if message.value else 0
        return decimal.Decimal(unscaled).scaleb(-message.scale)
    if full_name == DATE_MESSAGE:
        if not (message.year or message.month or message.day):  # the message left unset
            return None
        return epoch_days(message.year, message.month, message.day)
    if full_name == TIME_MESSAGE:
        return (
            (message.hours * 60 + message.minutes) * 60 + message.seconds
        ) * 1000 + message.nanos // 1_000_000
    if full_name == TIMESTAMP_MESSAGE:
        return message.seconds * 1000 + message.nanos // 1_000_000
    if full_name in _WRAPPERS:
        return _plain_scalar(message.DESCRIPTOR.fields_by_name["value"], message.value)
    return plain(message)


def _plain_scalar(field: Any, value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if field.enum_type is not None:
        found = field.enum_type.values_by_number.get(value)
        return found.name if found is not None else str(value)
    return value


def plain(message: Any) -> dict[str, Any]:
    """A message's fields by name as plain values (the JSON readers' input): an unset
    message null, an unset scalar proto3's default (``bytes``: null)."""
    values: dict[str, Any] = {}
    in_unions: set[str] = set()
    for oneof in _real_oneofs(message.DESCRIPTOR):
        names = [f.name for f in oneof.fields]
        in_unions.update(names)
        chosen = message.WhichOneof(oneof.name)
        if chosen is None:
            values[union_name(oneof)] = None
            continue
        members = plain_fields(message, oneof.fields)
        values[union_name(oneof)] = {n: members[n] if n == chosen else None for n in names}
    rest = [f for f in message.DESCRIPTOR.fields if f.name not in in_unions]
    values.update(plain_fields(message, rest))
    return values


def plain_fields(message: Any, fields: list[Any]) -> dict[str, Any]:
    """``fields`` of ``message`` by name as plain values."""
    values: dict[str, Any] = {}
    optional = _optional_names(message.DESCRIPTOR)
    for field in fields:
        if field.name in optional and not message.HasField(field.name):
            values[field.name] = None  # proto3 ``optional`` unset: null, not the default
            continue
        value = getattr(message, field.name)
        target = field.message_type
        if target is not None and target.GetOptions().map_entry:
            value_field = target.fields_by_name["value"]
            values[field.name] = {
                key: _plain_message(item)
                if value_field.message_type is not None
                else _plain_scalar(value_field, item)
                for key, item in value.items()
            }
        elif field.is_repeated:
            values[field.name] = [
                _plain_message(item) if target is not None else _plain_scalar(field, item)
                for item in value
            ]
        elif target is not None:
            values[field.name] = _plain_message(value) if message.HasField(field.name) else None
        elif field.type == field.TYPE_BYTES and not value and not field.has_presence:
            values[field.name] = None  # proto3 ``bytes`` unset (or empty): null, as ksqlDB reads it
        else:
            values[field.name] = _plain_scalar(field, value)
    return values


# ---- PROTOBUF_NOSR: the message alone, its schema the columns' --------------------------


@functools.lru_cache(maxsize=256)
def _columns_class(columns: tuple[tuple[str, ex.SqlType], ...], nullable: str | None = None) -> Any:
    return RowMessages(list(columns), nullable).message_class()


def bare_bytes(
    columns: tuple[tuple[str, ex.SqlType], ...],
    row: dict[str, Any],
    nullable: str | None = None,
) -> bytes:
    """``row`` as PROTOBUF_NOSR writes it: the message of ``columns`` (``nullable`` as
    ``RowMessages`` takes it), no registry header."""
    message_class = _columns_class(columns, nullable)
    values = {name: row.get(name) for name, _ in columns}
    return bytes(fill(message_class(), values).SerializeToString())


def read_bare(
    columns: tuple[tuple[str, ex.SqlType], ...], data: bytes, nullable: str | None = None
) -> dict[str, Any]:
    """A PROTOBUF_NOSR record's fields (``plain``), read as the message of ``columns``."""
    return plain(_columns_class(columns, nullable).FromString(data))


# ---- columns of a schema ----------------------------------------------------------------


def _field_type(field: Any, upper: bool = True) -> ex.SqlType:
    target = field.message_type
    if target is not None and target.GetOptions().map_entry:
        return ex.MapType(
            _single_type(target.fields_by_name["key"], upper),
            _field_type(target.fields_by_name["value"], upper),
        )
    single = _single_type(field, upper)
    return ex.ArrayType(single) if field.is_repeated else single


def _single_type(field: Any, upper: bool = True) -> ex.SqlType:
    from google.protobuf import descriptor_pb2

    target = field.message_type
    if target is None:
        kind = descriptor_pb2.FieldDescriptorProto.Type.Name(field.type)
        if kind in _INTEGER_KINDS:
            return ex.PrimitiveType("INTEGER")
        if kind in _BIGINT_KINDS:
            return ex.PrimitiveType("BIGINT")
        named = {
            "TYPE_BOOL": "BOOLEAN", "TYPE_FLOAT": "DOUBLE", "TYPE_DOUBLE": "DOUBLE",
            "TYPE_STRING": "STRING", "TYPE_ENUM": "STRING", "TYPE_BYTES": "BYTES",
        }.get(kind)  # fmt: skip
        if named is None:
            raise ProtobufRowError(f"field {field.name} of type {kind} is not supported")
        return ex.PrimitiveType(named)
    full_name = target.full_name
    if full_name == DECIMAL_MESSAGE:
        params = _field_params(field)
        return ex.DecimalType(int(params.get("precision", 64)), int(params.get("scale", 0)))
    for sql, (message, _) in _WELL_KNOWN.items():
        if full_name == message:
            return ex.PrimitiveType(sql)
    if full_name in _WRAPPERS:
        return ex.PrimitiveType(_WRAPPERS[full_name])
    return ex.StructType(
        tuple(ex.StructField(name, sql_type) for name, sql_type in columns_of(target, upper))
    )


def _field_meta() -> Any:
    """Confluent's ``(confluent.field_meta)`` field option."""
    from confluent_kafka.schema_registry.confluent import meta_pb2

    return meta_pb2.DESCRIPTOR.extensions_by_name["field_meta"]


def _field_params(field: Any) -> dict[str, str]:
    options = field.GetOptions()
    if not options.HasExtension(_field_meta()):
        return {}
    return dict(options.Extensions[_field_meta()].params)


def columns_of(descriptor: Any, upper: bool = True) -> list[tuple[str, ex.SqlType]]:
    """The columns a message type declares, as ksqlDB infers them: a oneof's union
    first, then the other fields; names upper-cased, unless not ``upper`` (the schema
    KEY_SCHEMA_ID / VALUE_SCHEMA_ID names: its own names, nested ones too)."""

    def named(name: str) -> str:
        return name.upper() if upper else name

    columns: list[tuple[str, ex.SqlType]] = []
    in_unions: set[str] = set()
    for oneof in _real_oneofs(descriptor):
        members = tuple(ex.StructField(named(f.name), _field_type(f, upper)) for f in oneof.fields)
        columns.append((union_name(oneof), ex.StructType(members)))
        in_unions.update(f.name for f in oneof.fields)
    columns += [
        (named(field.name), _field_type(field, upper))
        for field in descriptor.fields
        if field.name not in in_unions
    ]
    return columns
