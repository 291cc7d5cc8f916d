"""ksql's source changes and formats without a broker: ALTER ... ADD COLUMN in the
metastore (ksqlDB's checks and messages), Protobuf schemas and rows both ways, and
PRINT's guess of the registry formats."""

from __future__ import annotations

import decimal
import io
import json
import struct
from dataclasses import replace

import pytest
from google.protobuf import message_factory

from strom.ksql import expressions as ex
from strom.ksql import (
    formats,
    print_topic,
    protobuf_rows,
    readers,
    registry_formats,
    schema_ids,
)
from strom.ksql import statements as st
from strom.ksql.metastore import Column, KsqlStatementError, Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.values import java_hash_map_order


def _metastore(*texts: str) -> Metastore:
    metastore = Metastore()
    for text in texts:
        statement = parse_statement(text)
        if isinstance(statement, st.CreateType):
            metastore.register_type(statement)
            continue
        assert isinstance(statement, st.CreateSource)
        metastore.put_source(metastore.source_from_statement(statement, text))
    return metastore


def _alter(metastore: Metastore, text: str) -> None:
    statement = parse_statement(text)
    assert isinstance(statement, st.AlterSource)
    metastore.put_source(metastore.altered(statement, text))


def test_alter_adds_value_columns_after_the_others() -> None:
    metastore = _metastore(
        "CREATE TYPE addr AS STRUCT<city STRING>",
        "CREATE STREAM a (id INT KEY, col1 INT) WITH (kafka_topic='a', value_format='JSON')",
    )
    _alter(metastore, "ALTER STREAM a ADD COLUMN col2 INT, ADD home addr")
    altered = metastore.source("A")
    assert altered is not None
    assert [(c.name, str(c.type), c.namespace) for c in altered.columns] == [
        ("ID", "INTEGER", "KEY"),
        ("COL1", "INTEGER", "VALUE"),
        ("COL2", "INTEGER", "VALUE"),
        ("HOME", "STRUCT<`CITY` STRING>", "VALUE"),
    ]
    assert altered.statement.startswith("ALTER STREAM a")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ALTER STREAM nope ADD COLUMN c INT", "Source NOPE does not exist."),
        (
            "ALTER STREAM a ADD COLUMN col1 INT",
            "Cannot add column `COL1` to schema. A column with the same name already exists.",
        ),
        (
            "ALTER STREAM a ADD COLUMN c INT, ADD COLUMN c STRING",
            "Cannot add column `C` to schema. A column with the same name already exists.",
        ),
        (
            "ALTER STREAM a ADD COLUMN id STRING",
            "Cannot add column `ID` to schema. A column with the same name already exists.",
        ),
        ("ALTER TABLE a ADD COLUMN c INT", "Incompatible data source type is STREAM, but "
         "statement was ALTER TABLE"),
        ("ALTER TABLE src ADD COLUMN c INT", "Cannot alter table 'SRC': ALTER operations are "
         "not supported on source tables."),
        ("ALTER STREAM sink ADD COLUMN c INT", "ALTER command is not supported for "
         "CREATE ... AS statements."),
    ],
)  # fmt: skip
def test_alter_refusals_have_ksqldbs_messages(text: str, message: str) -> None:
    metastore = _metastore(
        "CREATE STREAM a (id INT KEY, col1 INT) WITH (kafka_topic='a', value_format='JSON')",
        "CREATE SOURCE TABLE src (id INT PRIMARY KEY, v INT) "
        "WITH (kafka_topic='s', value_format='JSON')",
        "CREATE STREAM sink (id INT KEY, v INT) WITH (kafka_topic='k', value_format='JSON')",
    )
    sink = metastore.source("SINK")
    assert sink is not None
    metastore.put_source(replace(sink, query_sink=True))
    with pytest.raises(KsqlStatementError) as info:
        _alter(metastore, text)
    assert str(info.value) == message


_ROW_COLUMNS = [
    ("N", ex.PrimitiveType("BIGINT")),
    ("PRICE", ex.DecimalType(5, 2)),
    ("DAY", ex.PrimitiveType("DATE")),
    ("AT", ex.PrimitiveType("TIME")),
    ("TS", ex.PrimitiveType("TIMESTAMP")),
    ("PRICES", ex.ArrayType(ex.DecimalType(4, 1))),
    ("SEEN", ex.MapType(ex.PrimitiveType("STRING"), ex.PrimitiveType("TIMESTAMP"))),
    ("INNER", ex.StructType((ex.StructField("D", ex.PrimitiveType("DATE")),))),
]


def test_protobuf_rows_with_decimal_and_time_types_both_ways() -> None:
    """DECIMAL, DATE, TIME and TIMESTAMP as Confluent's well-known messages, in and out
    of arrays, maps and structs; an unset message reads as null, an unset number as 0."""
    messages = protobuf_rows.RowMessages(_ROW_COLUMNS)
    message_class = messages.message_class()
    row = {
        "N": 5,
        "PRICE": decimal.Decimal("-12.50"),
        "DAY": 19_000,  # 2022-01-08
        "AT": 3_723_004,  # 01:02:03.004
        "TS": -1_500,
        "PRICES": [decimal.Decimal("1.5")],
        "SEEN": {"k": 1_700_000_000_123},
        "INNER": {"D": 1},
    }
    data = protobuf_rows.fill(message_class(), row).SerializeToString()
    decoded = message_class.FromString(data)
    assert (decoded.DAY.year, decoded.DAY.month, decoded.DAY.day) == (2022, 1, 8)
    assert (decoded.AT.hours, decoded.AT.minutes, decoded.AT.seconds) == (1, 2, 3)
    assert (decoded.TS.seconds, decoded.TS.nanos) == (-2, 500_000_000)
    assert (decoded.PRICE.value, decoded.PRICE.precision, decoded.PRICE.scale) == (
        (-1250).to_bytes(2, "big", signed=True), 4, 2,
    )  # fmt: skip
    assert protobuf_rows.plain(decoded) == row
    assert protobuf_rows.plain(message_class()) == {
        "N": 0, "PRICE": None, "DAY": None, "AT": None, "TS": None, "PRICES": [], "SEEN": {},
        "INNER": None,
    }  # fmt: skip
    # The schema keeps each DECIMAL's precision and scale: read back as the same columns.
    assert protobuf_rows.columns_of(message_class.DESCRIPTOR) == _ROW_COLUMNS
    imports = set(messages.file.dependency)
    assert imports == {
        "confluent/meta.proto", "confluent/type/decimal.proto", "google/type/date.proto",
        "google/type/timeofday.proto", "google/protobuf/timestamp.proto",
    }  # fmt: skip


def test_protobuf_dates_outside_pythons_years_both_ways() -> None:
    """A DATE is any int32 of days, as ksqlDB holds it: written as google.type.Date's
    proleptic Gregorian year, month and day (Java's LocalDate: a year 0, negative
    years, years past 9999) and read back as the same days, where Python's date holds
    only the years 1 to 9999."""
    message_class = protobuf_rows.RowMessages(_ROW_COLUMNS[2:3]).message_class()
    for days, civil in (
        (-2_147_483_647, (-5_877_641, 6, 24)),
        (2_147_483_647, (5_881_580, 7, 11)),
        (-719_528, (0, 1, 1)),
        (-719_529, (-1, 12, 31)),
        (-719_162, (1, 1, 1)),
        (2_932_897, (10_000, 1, 1)),
        (-1, (1969, 12, 31)),
        (11_016, (2000, 2, 29)),
    ):
        data = protobuf_rows.fill(message_class(), {"DAY": days}).SerializeToString()
        decoded = message_class.FromString(data)
        assert (decoded.DAY.year, decoded.DAY.month, decoded.DAY.day) == civil
        assert protobuf_rows.plain(decoded) == {"DAY": days}


def test_protobuf_columns_inferred_from_proto_text() -> None:
    """A schema registered as .proto text (compiled by protoc) gives ksqlDB's columns:
    names upper-cased, unsigned and 64-bit integers BIGINT, float DOUBLE, an enum STRING,
    wrappers their value, the well-known messages their SQL types."""
    text = """
        syntax = "proto3";
        import "google/protobuf/timestamp.proto";
        import "google/protobuf/wrappers.proto";
        import "google/type/date.proto";
        message Reading {
          enum Kind { A = 0; B = 1; }
          message Place { string city = 1; }
          float c1 = 1; uint32 c2 = 2; sint32 c3 = 3; sfixed64 c4 = 4; Kind kind = 5;
          google.protobuf.Int32Value maybe = 6; google.protobuf.Timestamp at = 7;
          google.type.Date day = 8; repeated Place places = 9; map<string, bytes> blobs = 10;
        }
        message Other { int32 x = 1; }
    """
    message = registry_formats.protobuf_message(registry_formats.protobuf_files(text), [0])
    assert [(n, str(t)) for n, t in protobuf_rows.columns_of(message)] == [
        ("C1", "DOUBLE"), ("C2", "BIGINT"), ("C3", "INTEGER"), ("C4", "BIGINT"),
        ("KIND", "STRING"), ("MAYBE", "INTEGER"), ("AT", "TIMESTAMP"), ("DAY", "DATE"),
        ("PLACES", "ARRAY<STRUCT<`CITY` STRING>>"), ("BLOBS", "MAP<STRING, BYTES>"),
    ]  # fmt: skip


def test_schema_id_columns_keep_the_schemas_field_names() -> None:
    """The columns of a schema KEY_SCHEMA_ID / VALUE_SCHEMA_ID names keep its own field
    names, nested ones too, in PROTOBUF and JSON_SR as in AVRO (ksqlDB's
    ORIGINAL_FIELD_NAME policy); a subject's latest schema's are upper-cased."""
    text = """
        syntax = "proto3";
        message Event { int64 timestamp = 1; }
        message Logistics { Event event = 1; string Code = 2; }
    """
    files = registry_formats.protobuf_files(text)
    message = registry_formats.protobuf_message(files, [1])
    assert [(n, str(t)) for n, t in protobuf_rows.columns_of(message, upper=False)] == [
        ("event", "STRUCT<`timestamp` BIGINT>"), ("Code", "STRING"),
    ]  # fmt: skip
    assert [n for n, _ in protobuf_rows.columns_of(message)] == ["EVENT", "CODE"]
    schema = {"type": "object", "properties": {"c1": {"type": "object", "properties": {
        "inner": {"type": "integer"}}}}}  # fmt: skip
    kept = registry_formats.json_schema_columns(schema, "VALUE", upper=False)
    assert [(c.name, str(c.type)) for c in kept] == [("c1", "STRUCT<`inner` BIGINT>")]
    upper = registry_formats.json_schema_columns(schema, "VALUE")
    assert [(c.name, str(c.type)) for c in upper] == [("C1", "STRUCT<`INNER` BIGINT>")]


def test_protobuf_unset_bytes_read_as_null() -> None:
    """A proto3 ``bytes`` field left unset (proto3 writes an empty one so too) reads as
    null, as ksqlDB reads it; one set reads as its base64 text, an unset string as ""."""
    text = 'syntax = "proto3"; message M { int32 expected = 1; bytes c2 = 2; string s = 3; }'
    descriptor = registry_formats.protobuf_message(registry_formats.protobuf_files(text), [0])
    message_class = message_factory.GetMessageClass(descriptor)
    read = message_class.FromString(message_class(expected=1).SerializeToString())
    assert protobuf_rows.plain(read) == {"expected": 1, "c2": None, "s": ""}
    read = message_class.FromString(message_class(c2=b"hi").SerializeToString())
    assert protobuf_rows.plain(read) == {"expected": 0, "c2": "aGk=", "s": ""}


def test_protobuf_decimal_options_without_the_meta_import() -> None:
    """A decimal's (confluent.field_meta) option used with decimal.proto imported alone
    (as ksqlDB's cases register it, and Confluent's registry takes it) compiles."""
    text = (
        "syntax = \"proto3\"; import 'confluent/type/decimal.proto'; message M { int32 c1 = 1; "
        'confluent.type.Decimal c2 = 2 [(confluent.field_meta) = { params: [{ value: "4", '
        'key: "precision" }, { value: "2", key: "scale" }]}];}'
    )
    message = registry_formats.protobuf_message(registry_formats.protobuf_files(text), [0])
    assert [(n, str(t)) for n, t in protobuf_rows.columns_of(message)] == [
        ("C1", "INTEGER"), ("C2", "DECIMAL(4, 2)"),
    ]  # fmt: skip


def test_protobuf_refuses_what_it_cannot_hold() -> None:
    with pytest.raises(protobuf_rows.ProtobufRowError) as info:
        protobuf_rows.RowMessages(
            [("M", ex.MapType(ex.PrimitiveType("INTEGER"), ex.DecimalType(2, 1)))]
        )
    assert str(info.value) == "PROTOBUF format only supports MAP types with STRING keys"


def test_protobuf_values_are_always_wrapped() -> None:
    statement = parse_statement(
        "CREATE STREAM s (k STRING KEY, foo INT) "
        "WITH (WRAP_SINGLE_VALUE=false, kafka_topic='t', value_format='PROTOBUF')"
    )
    assert isinstance(statement, st.CreateSource)
    with pytest.raises(KsqlStatementError) as info:
        Metastore().source_from_statement(statement, "")
    assert (
        str(info.value) == "Format 'PROTOBUF' does not support 'WRAP_SINGLE_VALUE' set to 'false'."
    )


def test_print_guesses_windowed_keys_and_drops_formats_a_record_refutes() -> None:
    """PRINT's guess as ksqlDB's: a key may be windowed (the key, then the window's start;
    a session's end and start), each windowed form before the plain one; each record
    removes what it does not decode as, and is shown in the first format left."""
    window_start, window_end = 1_000, 61_000  # \x03\xe8 and \xee\x48: not UTF-8
    keys = print_topic.FormatGuess(is_key=True)
    assert keys.show(b"user-1" + struct.pack(">q", window_start)) == "[user-1@1000/-]"
    assert keys.line("Key format: ") == (
        "Key format: HOPPING(KAFKA_STRING) or TUMBLING(KAFKA_STRING)"
    )
    keys = print_topic.FormatGuess(is_key=True)
    session = b"user-1" + struct.pack(">qq", window_end, window_start)
    assert keys.show(session) == "[user-1@1000/61000]"
    assert keys.line("Key format: ") == "Key format: SESSION(KAFKA_STRING)"
    keys = print_topic.FormatGuess(is_key=True)
    # As ksqlDB: a string key of 9 bytes or more reads as a windowed one, until a record
    # that cannot be one comes (a shorter key, a negative start).
    [start] = struct.unpack(">q", b"lain key")
    assert keys.show(b"a plain key") == f"[a p@{start}/-]"
    assert keys.show(b"k") == "k"
    assert keys.line("Key format: ") == "Key format: KAFKA_STRING"
    keys = print_topic.FormatGuess(is_key=True)
    keys.show(b"ab" + struct.pack(">q", -5))  # a negative start is no window
    assert keys.line("Key format: ").startswith("Key format:  does not match any")  # as ksqlDB
    values = print_topic.FormatGuess()
    assert values.show(struct.pack(">i", 42)) == "42"
    assert values.possible == ["KAFKA_INT", "KAFKA_STRING"]
    assert values.show(b"\xff\xfe") == "\\xff\\xfe"  # nothing left: the raw bytes
    assert values.line("Value format: ").startswith("Value format:  does not match any")


def test_protobuf_nosr_rows_are_the_message_alone() -> None:
    """PROTOBUF_NOSR: the columns' message with no registry header, written by INSERT
    VALUES' serializer and read back by the record reader."""
    metastore = _metastore(
        "CREATE STREAM bare (id STRING KEY, n BIGINT, price DECIMAL(4, 2), day DATE) "
        "WITH (kafka_topic='bare', value_format='PROTOBUF_NOSR')"
    )
    source = metastore.source("BARE")
    assert source is not None
    row = {"ID": "k", "N": 7, "PRICE": decimal.Decimal("1.25"), "DAY": None}
    data = formats.value_bytes(source, row)
    assert data is not None and data[0] != 0  # no magic byte: field 1 (N) first
    message_class = protobuf_rows.RowMessages(
        [(c.name, c.type) for c in source.value_columns]
    ).message_class()
    assert message_class.FromString(data).N == 7
    reader = readers.RecordReader(source)
    read = reader.read(readers.SourceRecord("bare", 0, 0, 5, b"k", data)).columns
    assert (read["ID"], read["N"], read["PRICE"], read["DAY"]) == (
        "k", 7, decimal.Decimal("1.25"), None,
    )  # fmt: skip
    with pytest.raises(readers.RecordError):
        reader.read(readers.SourceRecord("bare", 0, 1, 5, b"k", b"\xff\xff"))


@pytest.mark.parametrize(
    ("representation", "written"),
    [
        (None, {"I": 0, "S": "", "B": False}),  # proto3: a null is the default
        ("OPTIONAL", {"I": 0, "S": None, "B": None}),
        ("wrapper", {"I": 0, "S": None, "B": None}),
    ],
)
def test_protobuf_nullable_representation_keeps_nulls_apart_from_defaults(
    representation: str | None, written: dict[str, object]
) -> None:
    """VALUE_PROTOBUF_NULLABLE_REPRESENTATION: OPTIONAL declares proto3 ``optional``
    fields, WRAPPER Google's wrappers; either way a null reads back as null, a 0 as 0."""
    setting = f", value_protobuf_nullable_representation='{representation}'"
    metastore = _metastore(
        "CREATE STREAM bare (id STRING KEY, i INT, s STRING, b BOOLEAN, m MAP<STRING, INT>) "
        f"WITH (kafka_topic='bare', value_format='PROTOBUF_NOSR'"
        f"{setting if representation else ''})"
    )
    source = metastore.source("BARE")
    assert source is not None
    data = formats.value_bytes(source, {"I": 0, "S": None, "B": None, "M": {"a": 0}})
    assert data is not None
    read = readers.RecordReader(source).read(readers.SourceRecord("bare", 0, 0, 5, b"k", data))
    assert {k: read.columns[k] for k in written} == written
    assert read.columns["M"] == {"a": 0}  # a map's entries are left as they are
    nullable = protobuf_rows.nullable_representation(source.properties, "value")
    columns = [(c.name, c.type) for c in source.value_columns]
    fields = protobuf_rows.RowMessages(columns, nullable).file.message_type[0].field
    kinds = {f.name: (f.proto3_optional, f.type_name) for f in fields}
    if nullable == "OPTIONAL":
        assert kinds["I"] == (True, "") and kinds["S"] == (True, "")
    elif nullable == "WRAPPER":
        assert kinds["I"] == (False, ".google.protobuf.Int32Value")
        assert kinds["B"] == (False, ".google.protobuf.BoolValue")
    else:
        assert kinds["I"] == (False, "")
    assert not kinds["M"][0] and kinds["M"][1] == "MEntry"


def test_protobuf_nullable_representation_takes_optional_or_wrapper() -> None:
    with pytest.raises(KsqlStatementError) as info:
        _metastore(
            "CREATE STREAM s (k STRING KEY, i INT) WITH (kafka_topic='t', "
            "value_format='PROTOBUF', key_protobuf_nullable_representation='NULLS')"
        )
    assert str(info.value) == (
        "Invalid value NULLS for configuration KEY_PROTOBUF_NULLABLE_REPRESENTATION: "
        "String must be one of: OPTIONAL, WRAPPER"
    )


def test_protobuf_inference_names_its_message_when_the_schema_has_several() -> None:
    files = registry_formats.protobuf_files(
        'syntax = "proto3"; package p; message One { int32 a = 1; } message Two { string b = 1; }'
    )
    with pytest.raises(KsqlStatementError) as info:
        registry_formats._named_message(files, None, "t", "t-value", False)
    assert str(info.value) == (
        "Value schema has multiple schema definitions. \n\n- p.One\n- p.Two\n\n"
        "Please specify a schema full name in the WITH clause using VALUE_SCHEMA_FULL_NAME"
    )
    two = registry_formats._named_message(files, "p.Two", "t", "t-value", False)
    assert protobuf_rows.columns_of(two) == [("B", ex.PrimitiveType("STRING"))]
    with pytest.raises(KsqlStatementError) as info:
        registry_formats._named_message(files, "p.Three", "t", "t-key", True)
    assert str(info.value).startswith(
        "Schema for message keys on topic 't' does not exist in the Schema Registry."
    )


def test_rows_written_with_a_given_schemas_names() -> None:
    """A source created with VALUE_SCHEMA_ID writes its rows with that schema: the
    columns (upper-cased, as inferred) matched to the schema's own names at every level."""
    from fastavro import parse_schema, schemaless_reader

    avro = {
        "type": "record", "name": "Order", "fields": [
            {"name": "id", "type": "long"},
            {"name": "lines", "type": {"type": "array", "items": {
                "type": "record", "name": "Line", "fields": [
                    {"name": "sku", "type": ["null", "string"], "default": None}]}}},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }  # fmt: skip
    row = {"ID": 7, "LINES": [{"SKU": "a"}, {"SKU": None}], "NOTE": None}
    data = schema_ids.encode_avro(json.dumps(avro), 42, row)
    assert data[:5] == b"\x00" + struct.pack(">I", 42)
    decoded = schemaless_reader(io.BytesIO(data[5:]), parse_schema(avro), None)
    assert decoded == {"id": 7, "lines": [{"sku": "a"}, {"sku": None}], "note": None}
    as_json = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "tags": {
                "type": "array",
                "items": {"type": "object", "properties": {"k": {"type": "string"}}},
            },
        },
    }
    data = schema_ids.encode_json(json.dumps(as_json), 9, {"ID": 1, "TAGS": [{"K": "x"}]})
    assert data[5:] == b'{"id":1,"tags":[{"k":"x"}]}'
    files = registry_formats.protobuf_files(
        'syntax = "proto3"; message A { int32 x = 1; } '
        "message B { message Inner { string city = 1; } Inner inner = 1; int64 n = 2; }"
    )
    inner = registry_formats.protobuf_message(files, [1]).nested_types[0]
    assert schema_ids._message_indexes(inner) == [1, 0]
    message_class = message_factory.GetMessageClass(registry_formats.protobuf_message(files, [1]))
    data = schema_ids.encode_protobuf(message_class, 5, {"INNER": {"CITY": "Oslo"}, "N": 3})
    assert data[5:7] == b"\x02\x02"  # one index, 1 (zigzag varints)
    decoded = message_class.FromString(data[7:])
    assert (decoded.inner.city, decoded.n) == ("Oslo", 3)


def test_avro_records_take_the_schema_full_name() -> None:
    columns = (
        Column("N", ex.PrimitiveType("INTEGER")),
        Column("AT", ex.StructType((ex.StructField("CITY", ex.PrimitiveType("STRING")),))),
    )
    named = json.loads(registry_formats._schema_text("AVRO", columns, False, "com.acme.Order"))
    assert (named["namespace"], named["name"]) == ("com.acme", "Order")
    assert named["fields"][1]["type"][1]["name"] == "Order_AT"  # in com.acme
    default = json.loads(registry_formats._schema_text("AVRO", columns, False))
    assert (default["namespace"], default["name"]) == (
        "io.confluent.ksql.avro_schemas", "KsqlDataSourceSchema",
    )  # fmt: skip
    plain = json.loads(registry_formats._schema_text("AVRO", columns, False, "Order"))
    assert "namespace" not in plain and plain["name"] == "Order"


def test_avro_refuses_field_names_avro_does_not_take() -> None:
    for name, message in (
        ("1Bad", "Illegal initial character: 1Bad"),
        ("a-b", "Illegal character in: a-b"),
    ):
        columns = (Column(name, ex.PrimitiveType("DOUBLE")),)
        with pytest.raises(KsqlStatementError) as info:
            registry_formats._schema_text("AVRO", columns, False)
        assert str(info.value) == f"Schema is not compatible with Avro: {message}"
    nested = ex.StructType((ex.StructField("2x", ex.PrimitiveType("STRING")),))
    with pytest.raises(KsqlStatementError, match="Illegal initial character: 2x"):
        registry_formats._schema_text("AVRO", (Column("S", nested),), False)
    fine = (Column("_ok1", ex.PrimitiveType("STRING")),)
    assert (
        json.loads(registry_formats._schema_text("AVRO", fine, False))["fields"][0]["name"]
        == "_ok1"
    )


def test_avro_with_a_schema_id_writes_a_null_as_the_fields_default() -> None:
    from fastavro import parse_schema, schemaless_reader

    schema = {
        "type": "record", "name": "T", "fields": [
            {"name": "n", "type": "int", "default": 0}, {"name": "s", "type": ["null", "string"]},
        ],
    }  # fmt: skip
    data = schema_ids.encode_avro(json.dumps(schema), 7, {"N": None, "S": None})
    assert data[:5] == b"\0\0\0\0\x07"
    read = schemaless_reader(io.BytesIO(data[5:]), parse_schema(schema), None)
    assert read == {"n": 0, "s": None}


def test_a_query_sink_matches_the_schema_its_id_names() -> None:
    registered = [Column("A", ex.PrimitiveType("STRING")), Column("B", ex.PrimitiveType("BIGINT"))]
    schema_ids.check_query_columns(registered[:1], registered, False)  # a prefix is fine
    with pytest.raises(KsqlStatementError) as info:
        schema_ids.check_query_columns([registered[1], registered[0]], registered, True)
    assert str(info.value) == (
        "The following key columns are changed, missing or reordered: [`B` BIGINT, `A` "
        "STRING]. Schema from schema registry is [`A` STRING, `B` BIGINT]"
    )


def test_print_writes_a_batch_again_when_its_first_format_is_ruled_out() -> None:
    keys, values = print_topic.FormatGuess(is_key=True), print_topic.FormatGuess()
    batch = [(0, None, b"abcd", 0), (1, None, b"abc", 1)]  # 4 bytes: an INTEGER, until...
    lines = print_topic.format_batch(keys, values, batch)
    assert lines == [
        "rowtime: 1970/01/01 00:00:00.000 Z, key: <null>, value: abcd, partition: 0",
        "rowtime: 1970/01/01 00:00:00.001 Z, key: <null>, value: abc, partition: 1",
    ]
    assert values.possible == ["KAFKA_STRING"]


def test_protobuf_oneof_is_one_struct_column_as_confluents_union() -> None:
    """A oneof is read as ksqlDB reads it through Confluent's conversion: one STRUCT
    column ``<NAME>_<index>`` of its fields, ahead of the other fields, holding the field
    that is set (null when none is); proto3's ``optional`` stays a plain column. Rows
    written into the message set the union's one field."""
    text = """
        syntax = "proto3";
        message Payment {
          string id = 1;
          oneof method { string card = 2; int64 account = 3; }
          optional int32 tries = 4;
          oneof note { string memo = 5; }
        }
    """
    message = registry_formats.protobuf_message(registry_formats.protobuf_files(text), [0])
    assert [(n, str(t)) for n, t in protobuf_rows.columns_of(message)] == [
        ("METHOD_0", "STRUCT<`CARD` STRING, `ACCOUNT` BIGINT>"),
        ("NOTE_1", "STRUCT<`MEMO` STRING>"),
        ("ID", "STRING"),
        ("TRIES", "INTEGER"),
    ]
    payment = message_factory.GetMessageClass(message)
    written = protobuf_rows.fill(
        payment(), {"ID": "p1", "METHOD_0": {"CARD": None, "ACCOUNT": 42}, "NOTE_1": None}
    )
    assert written.WhichOneof("method") == "account" and written.WhichOneof("note") is None
    read = protobuf_rows.plain(payment.FromString(written.SerializeToString()))
    assert read == {
        "METHOD_0": {"card": None, "account": 42},
        "NOTE_1": None,
        "id": "p1",
        "tries": None,  # proto3 optional, unset
    }
    with pytest.raises(protobuf_rows.ProtobufRowError, match="more than one field"):
        protobuf_rows.fill(payment(), {"METHOD_0": {"CARD": "x", "ACCOUNT": 1}})


def test_delimited_fields_are_quoted_as_ksqldbs_csv_printer_quotes_them() -> None:
    line = formats.delimited_line(
        [" padded ", "plain words", "\ttabbed", None, "", "a,b", 'say "hi"', "#tag", -1.5],
        ",",
    )
    assert line == '" padded ",plain words,"\ttabbed",,,"a,b","say ""hi""","#tag",-1.5'
    assert formats.delimited_line(["", "x"], ",") == '"",x'  # empty first field
    assert formats.delimited_line([None, "x"], "|") == "|x"  # a null is never quoted
    assert formats.delimited_line([1e-05, 2.0], ",") == "1.0E-5,2.0"  # Java's doubles
    # the line's first field is quoted unless it starts with an ASCII letter or digit
    assert formats.delimited_line([-10, -10], ",") == '"-10",-10'
    assert formats.delimited_line(["x.y", ".y"], ",") == "x.y,.y"


def test_json_doubles_that_are_not_finite_have_javas_names() -> None:
    values = {"A": float("nan"), "B": float("inf"), "C": float("-inf"), "D": 0.5}
    assert json.loads(formats._json_text(values)) == {
        "A": "NaN",
        "B": "Infinity",
        "C": "-Infinity",
        "D": 0.5,
    }


def test_json_writes_a_null_map_key_as_null_and_doubles_with_javas_two_digits() -> None:
    assert formats._json_text({"M": {None: 1, "a": 2}}) == '{"M":{"null":1,"a":2}}'
    # Java writes at least two digits, the two closest to the exact value
    assert formats.delimited_line([5e-324, -5e-324, 1e23, 2e-323], ",") == (
        "4.9E-324,-4.9E-324,1.0E23,2.0E-323"
    )


def test_a_stream_may_declare_key_columns_alone() -> None:
    source = _metastore(
        "CREATE STREAM KEYS_ONLY (ID BIGINT KEY) WITH (kafka_topic='k', value_format='JSON');"
    ).source("KEYS_ONLY")
    assert source is not None and source.value_columns == ()
    # no columns at all: ksqlDB's message for a format that cannot infer them
    with pytest.raises(KsqlStatementError, match="No columns supplied."):
        _metastore("CREATE STREAM NONE_AT_ALL WITH (kafka_topic='k', value_format='DELIMITED');")
    with pytest.raises(KsqlStatementError, match="Windowed sources require a key column."):
        _metastore(
            "CREATE STREAM W (V INT) WITH (kafka_topic='w', value_format='JSON', "
            "window_type='SESSION');"
        )


@pytest.mark.parametrize(
    ("with_clause", "message"),
    [
        ("value_format='DELIMITED', value_delimiter='<~>'",
         "Failed to prepare statement: Configuration VALUE_DELIMITER is invalid: Invalid "
         "delimiter value: '<~>'. Delimiter must be a single character or TAB,SPACE"),
        ("value_format='DELIMITED', value_delimiter=' '",
         "Failed to prepare statement: Configuration VALUE_DELIMITER is invalid: Delimiter "
         "cannot be empty, if you meant to have a tab or space for delimiter, please use the "
         "special values 'TAB' or 'SPACE'"),
        ("value_format='JSON', value_delimiter='|'",
         "JSON does not support the following configs: [delimiter]"),
        ("value_format='JSON', value_avro_schema_full_name='x.Y'",
         "JSON does not support the following configs: [fullSchemaName]"),
        ("value_format='DELIMITED', wrap_single_value=true",
         "Format 'DELIMITED' does not support 'WRAP_SINGLE_VALUE' set to 'true'."),
        ("value_format='JSON', window_type='HOPPING', window_size='30 bobs'",
         "Configuration WINDOW_SIZE is invalid: Invalid duration: '30 bobs'. Unknown time "
         "unit: 'BOBS'\nSupported time units are: NANOSECONDS, MICROSECONDS, MILLISECONDS, "
         "SECONDS, MINUTES, HOURS, DAYS"),
        ("value_format='JSON', window_type='TUMBLING', window_size='30seconds'",
         "Configuration WINDOW_SIZE is invalid: Invalid duration: '30seconds'. Expected 2 "
         "tokens, got: 1"),
        ("value_format='JSON', window_type='SESSION', window_size='30 SECONDS'",
         "'WINDOW_SIZE' should not be set for SESSION windows."),
        ("value_format='NONE'",
         "The 'NONE' format can only be used when no columns are defined. Got: [`V` INTEGER]"),
    ],
)  # fmt: skip
def test_format_settings_refused_as_ksqldb_refuses_them(with_clause: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        _metastore(f"CREATE STREAM s (k STRING KEY, v INT) WITH (kafka_topic='s', {with_clause});")
    assert str(refused.value).startswith(message)


def test_window_sizes_in_javas_units() -> None:
    source = _metastore(
        "CREATE TABLE w (k STRING PRIMARY KEY, v INT) WITH (kafka_topic='w', "
        "value_format='JSON', window_type='HOPPING', window_size='2 minute');"
    ).source("W")
    assert source is not None and source.window_size_ms == 120_000


def test_decimals_wider_than_pythons_default_context_are_read() -> None:
    metastore = _metastore(
        "CREATE STREAM WIDE (D DECIMAL(33, 16)) WITH (kafka_topic='w', value_format='JSON');"
    )
    reader = readers.SideReader(
        metastore.source("WIDE"), "value", metastore.source("WIDE").value_columns, None
    )
    row = reader.read(b'{"D": 12345678987654321.125}')
    assert row == {"D": decimal.Decimal("12345678987654321.1250000000000000")}


def test_decimal_keys_keep_their_scale_as_values_do() -> None:
    """ksqlDB reads a DECIMAL at its column's scale (DecimalUtil.ensureFit: setScale) and
    writes it as it is, keys as values: JSON through Kafka's JsonConverter (NUMERIC, an
    exact JsonNodeFactory), DELIMITED as BigDecimal's plain text (query-validation cases
    as_value.json and delimited.json: 12.30, 12.3650, "12.0" as 12.0000)."""
    for fmt, scale, given, written in (
        ("JSON", 2, b"12.3", b"12.30"),
        ("JSON", 2, b"12.30", b"12.30"),
        ("JSON", 4, b"12.365", b"12.3650"),
        ("DELIMITED", 4, b"12.3650", b"12.3650"),
        ("DELIMITED", 4, b'"12.0"', b"12.0000"),
    ):
        unwrapped = ", wrap_single_value=false" if fmt == "JSON" else ""
        source = _metastore(
            f"CREATE STREAM D (K DECIMAL(6, {scale}) KEY, V DECIMAL(6, {scale})) "
            f"WITH (kafka_topic='d', format='{fmt}'{unwrapped});"
        ).source("D")
        assert source is not None
        row = (
            readers.RecordReader(source)
            .read(readers.SourceRecord("d", 0, 0, 0, given, given))
            .columns
        )
        assert str(row["K"]) == str(row["V"]) == written.decode()  # read at the scale
        assert formats.key_bytes(source, row) == written
        assert formats.value_bytes(source, row) == written


def test_a_json_map_is_read_in_the_order_ksqldbs_hash_map_iterates() -> None:
    metastore = _metastore(
        "CREATE STREAM M (K STRING KEY, V MAP<STRING, DOUBLE>) "
        "WITH (kafka_topic='m', value_format='JSON');"
    )
    source = metastore.source("M")
    assert source is not None
    reader = readers.SideReader(source, "value", source.value_columns, None)
    row = reader.read(b'{"V": {"yes, thanks": 3.5, "nope": 7.3, "sure, yeah": 2.1}}')
    assert row is not None and list(row["V"]) == ["yes, thanks", "sure, yeah", "nope"]
    row = reader.read(b'{"V": {"123": 1, "12": 2, "1234": 3, "a": 4}}')  # grown to 8 buckets
    assert row is not None and list(row["V"]) == ["12", "a", "123", "1234"]
    keys = ["foo", "bar", "baz", "qux", "quux", "corge"]
    assert list(java_hash_map_order(dict.fromkeys(keys, 1))) == [
        "bar", "baz", "quux", "corge", "qux", "foo",
    ]  # fmt: skip


def test_avro_dates_and_times_read_as_the_numbers_ksqldb_holds() -> None:
    """DATE is any int32 of days (before year 1 too), TIME ms of the day, TIMESTAMP epoch
    ms: read as those numbers, where fastavro's logical types would give Python dates,
    which stop at years 1 and 9999; a DECIMAL keeps its logical type."""
    import fastavro

    columns = (
        Column("D", ex.PrimitiveType("DATE")),
        Column("T", ex.PrimitiveType("TIME")),
        Column("TS", ex.PrimitiveType("TIMESTAMP")),
        Column("DEC", ex.DecimalType(4, 2)),
    )
    schema = json.loads(registry_formats._schema_text("AVRO", columns, False))
    row = {"D": -(2**31) + 1, "T": 86_399_999, "TS": 2**62, "DEC": decimal.Decimal("12.34")}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), row)
    with pytest.raises(ValueError):  # Python's date has no year before 1
        fastavro.schemaless_reader(io.BytesIO(out.getvalue()), fastavro.parse_schema(schema))
    plain = fastavro.parse_schema(registry_formats.plain_temporal(schema))
    assert fastavro.schemaless_reader(io.BytesIO(out.getvalue()), plain, None) == row
