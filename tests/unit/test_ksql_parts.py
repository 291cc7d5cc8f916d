"""The ksql server's pure parts: its config (the sample file, bad values as one line),
the metastore's checks of CREATE statements with ksqlDB's messages, rows written in the
KAFKA, JSON and DELIMITED formats, and the function catalogue."""

from __future__ import annotations

import dataclasses
import decimal
import json
import struct
from pathlib import Path

import pytest

from strom.cli.properties_file import read_properties_file
from strom.config import ConfigError
from strom.ksql import expressions as ex
from strom.ksql import formats, formatter, registry_formats
from strom.ksql import statements as st
from strom.ksql.analysis import Analysis, analyze
from strom.ksql.config import server_config
from strom.ksql.functions import FUNCTIONS, find_function, function_names_json
from strom.ksql.metastore import DataSource, KsqlStatementError, Metastore
from strom.ksql.parser import parse_statement

CONFIG = Path(__file__).resolve().parents[2] / "config"


def test_sample_config_loads() -> None:
    config = server_config(read_properties_file(str(CONFIG / "ksql-server.properties")))
    assert config.listener == "http://127.0.0.1:8088"
    assert config.service_id == "default_"
    assert config.command_topic == "_confluent-ksql-default__command_topic"
    assert config.properties["ksql.streams.auto.offset.reset"] == "earliest"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "ftp://x:1"}, "listeners: 'ftp://x:1' is not"),
        ({"ksql.service.id": "a b"}, "ksql.service.id"),
        ({"ksql.internal.topic.replicas": "zero"}, "ksql.internal.topic.replicas"),
        ({"ksql.persistence.default.format.value": "XML"}, "not one of"),
        ({"security.protocol": "TLS"}, "security.protocol"),
    ],
)
def test_bad_config_values_are_one_line(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        server_config(props)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_client_settings_translated_and_overridden() -> None:
    config = server_config(
        {
            "bootstrap.servers": "a:1",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "ksql.streams.sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="u" password="p";',
            "ssl.truststore.location": "/ignored/without/ssl.pem",
        }
    )
    assert config.client["sasl.mechanism"] == "SCRAM-SHA-256"
    assert (config.client["sasl.username"], config.client["sasl.password"]) == ("u", "p")
    assert "ssl.ca.location" not in config.client
    assert config.client_config()["bootstrap.servers"] == "a:1"


def source_of(text: str, metastore: Metastore | None = None) -> DataSource:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateSource)
    return (metastore or Metastore()).source_from_statement(statement, text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CREATE STREAM s (a INT) WITH (value_format='JSON')",
         'Missing required property "KAFKA_TOPIC" which has no default value.'),
        ("CREATE STREAM s (a INT) WITH (kafka_topic='t')",
         "Statement is missing the 'VALUE_FORMAT' property from the WITH clause."),
        ("CREATE STREAM s (a INT) WITH (kafka_topic='t', format='JSON', value_format='JSON')",
         "Cannot supply both 'VALUE_FORMAT' and 'FORMAT' properties"),
        ("CREATE STREAM s (a INT) WITH (kafka_topic='t', value_format='XML')",
         "Unknown format: XML"),
        ("CREATE STREAM s (a INT) WITH (kafka_topic='t', value_format='JSON', foo=1)",
         "Invalid config variable(s) in the WITH clause: FOO"),
        ("CREATE TABLE t (a INT) WITH (kafka_topic='t', value_format='JSON')",
         "Tables require a PRIMARY KEY. Please define the PRIMARY KEY."),
        ("CREATE TABLE t (k INT KEY, a INT) WITH (kafka_topic='t', value_format='JSON')",
         "Column `K` is a 'KEY' column: please use 'PRIMARY KEY' for tables."),
        ("CREATE STREAM s (k INT PRIMARY KEY, a INT) WITH (kafka_topic='t', value_format='JSON')",
         "Column `K` is a 'PRIMARY KEY' column: please use 'KEY' for streams."),
        ("CREATE STREAM s WITH (kafka_topic='t', value_format='JSON')",
         "No columns supplied."),
        ("CREATE STREAM s (a INT, b INT) WITH (kafka_topic='t', value_format='KAFKA')",
         "Value format does not support schema.\nformat: KAFKA\nschema: Persistence{columns="
         "[`A` INTEGER, `B` INTEGER], features=[]}\nreason: The 'KAFKA' format only supports "
         "a single field."),
        ("CREATE STREAM s (a INT, a STRING) WITH (kafka_topic='t', value_format='JSON')",
         "Duplicate column names"),
        ("CREATE STREAM s (a INT) WITH (kafka_topic='t', value_format='JSON', timestamp='b')",
         "The TIMESTAMP column set in the WITH clause does not exist in the schema: 'B'"),
        ("CREATE STREAM s (a STRING) WITH (kafka_topic='t', value_format='JSON', timestamp='a')",
         "Timestamp column, `A`, should be LONG(INT64), TIMESTAMP, or a String with a "
         "timestamp_format specified."),
        ("CREATE STREAM s (a addr) WITH (kafka_topic='t', value_format='JSON')",
         "Unknown type: ADDR"),
    ],
)  # fmt: skip
def test_create_checks_with_ksqldb_messages(text: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as info:
        source_of(text)
    assert str(info.value).startswith(message), str(info.value)


def test_sources_and_types_in_the_metastore() -> None:
    metastore = Metastore()
    created = parse_statement("CREATE TYPE addr AS STRUCT<street STRING, zip INT>")
    assert isinstance(created, st.CreateType) and metastore.register_type(created) is None
    with pytest.raises(KsqlStatementError, match="Cannot register custom type 'ADDR' since"):
        metastore.register_type(created)
    source = source_of(
        "CREATE TABLE users (id STRING PRIMARY KEY, home addr, ts BIGINT) "
        "WITH (kafka_topic='users', format='JSON', timestamp='ts', "
        "window_type='TUMBLING', window_size='5 SECONDS')",
        metastore,
    )
    assert [c.name for c in source.key_columns] == ["ID"]
    assert source.column("HOME") is not None
    assert str(source.column("HOME").type) == "STRUCT<`STREET` STRING, `ZIP` INTEGER>"  # type: ignore[union-attr]
    assert (source.key_format, source.value_format, source.timestamp_column) == (
        "JSON",
        "JSON",
        "TS",
    )
    assert (source.window_type, source.window_size_ms) == ("TUMBLING", 5000)
    metastore.put_source(source)
    with pytest.raises(KsqlStatementError, match="Cannot add table 'USERS': A table with"):
        metastore.check_can_add(source, or_replace=False)
    fresh_source = dataclasses.replace(source, name="FRESH", is_source=True)
    with pytest.raises(
        KsqlStatementError,
        match="Cannot add table 'FRESH': CREATE OR REPLACE is not supported on source tables.",
    ):
        metastore.check_can_add(fresh_source, or_replace=True)
    drop_stream = st.DropSource("STREAM", "USERS")
    with pytest.raises(
        KsqlStatementError,
        match="Incompatible data source type is table, but statement was DROP STREAM",
    ):
        metastore.droppable(drop_stream)
    with pytest.raises(KsqlStatementError, match="Stream NONE does not exist."):
        metastore.droppable(st.DropSource("STREAM", "NONE"))
    assert metastore.droppable(st.DropSource("STREAM", "NONE", if_exists=True)) is None
    assert metastore.droppable(st.DropSource("TABLE", "USERS")) is source


def row_of(source: DataSource, values: dict[str, ex.Expression]) -> dict[str, object]:
    return {
        name: formats.coerce(value, source.column(name).type, name)  # type: ignore[union-attr]
        for name, value in values.items()
    }


def test_rows_in_kafka_json_and_delimited() -> None:
    source = source_of(
        "CREATE STREAM s (id BIGINT KEY, name STRING, price DECIMAL(4, 2), day DATE, "
        "at TIMESTAMP, tags ARRAY<STRING>, attrs MAP<STRING, INT>, raw BYTES) "
        "WITH (kafka_topic='s', value_format='JSON')"
    )
    row = row_of(
        source,
        {
            "ID": ex.Literal(7),
            "NAME": ex.Literal("a"),
            "PRICE": ex.Literal(decimal.Decimal("1.5")),
            "DAY": ex.Literal("1970-01-11"),
            "AT": ex.Literal("1970-01-01T00:00:01.5"),
            "TAGS": ex.ArrayConstructor((ex.Literal("x"), ex.Literal(None))),
            "ATTRS": ex.MapConstructor(((ex.Literal("k"), ex.Literal(1)),)),
            "RAW": ex.Literal("hi"),
        },
    )
    assert formats.key_bytes(source, row) == struct.pack(">q", 7)
    value = formats.value_bytes(source, row)
    assert value is not None and b'"PRICE":1.50' in value
    assert json.loads(value) == {
        "NAME": "a", "PRICE": 1.5, "DAY": 10, "AT": 1500, "TAGS": ["x", None],
        "ATTRS": {"k": 1}, "RAW": "aGk=",
    }  # fmt: skip
    delimited = source_of(
        "CREATE STREAM d (k STRING KEY, a STRING, b INT, c DOUBLE) "
        "WITH (kafka_topic='d', key_format='JSON', value_format='DELIMITED')"
    )
    row = row_of(
        delimited,
        {"K": ex.Literal("key"), "A": ex.Literal("x,y"), "B": ex.Literal(None), "C": ex.Literal(2)},
    )
    assert formats.key_bytes(delimited, row) == b'"key"'
    assert formats.value_bytes(delimited, row) == b'"x,y",,2.0'
    single = source_of(
        "CREATE STREAM w (v INT) WITH (kafka_topic='w', value_format='JSON', "
        "wrap_single_value=false)"
    )
    assert formats.value_bytes(single, {"V": 3}) == b"3"
    assert formats.key_bytes(single, {"V": 3}) is None


@pytest.mark.parametrize(
    ("value", "sql_type", "message"),
    [
        (ex.Literal("x"), ex.PrimitiveType("INTEGER"), "Expected type INTEGER for field `C`"),
        (ex.Literal(2**40), ex.PrimitiveType("INTEGER"), "Expected type INTEGER"),
        (ex.Literal(decimal.Decimal("123.4")), ex.DecimalType(3, 1), "Cannot fit decimal"),
        (ex.Literal("soon"), ex.PrimitiveType("TIMESTAMP"), "Expected type TIMESTAMP"),
        # any expression is evaluated: an unknown function is refused as in a query
        (ex.FunctionCall("NOW", ()), ex.PrimitiveType("BIGINT"), "Can't find any functions"),
    ],
)
def test_values_that_do_not_fit(value: ex.Expression, sql_type: ex.SqlType, message: str) -> None:
    with pytest.raises(KsqlStatementError, match=message):
        formats.coerce(value, sql_type, "C")


def test_function_catalogue() -> None:
    names = [f["name"] for f in function_names_json("SHOW FUNCTIONS;")["functions"]]
    assert names == sorted(names) and len(names) == len(FUNCTIONS)
    assert {"COUNT", "LATEST_BY_OFFSET", "TRANSFORM", "EXPLODE", "SUBSTRING"} <= set(names)
    concat = find_function("concat")
    assert concat is not None
    described = concat.description_json("DESCRIBE FUNCTION concat;")
    assert described["@type"] == "describe_function" and described["type"] == "SCALAR"
    assert described["functions"][0]["arguments"][0]["isVariadic"] is True
    assert find_function("nothing") is None


def test_create_statements_written_as_ksqldb_formats_them() -> None:
    statement = parse_statement(
        "create or replace stream if not exists `Mixed` (`select` int key, "
        "s struct<`in` string, b array<map<string, decimal(4, 2)>>>, h bytes header('k')) "
        "with (kafka_topic='t', value_format='json', wrap_single_value=false)"
    )
    assert isinstance(statement, st.CreateSource)
    text = formatter.create_source(statement, {**statement.properties, "PARTITIONS": 2})
    assert text == (
        "CREATE OR REPLACE STREAM IF NOT EXISTS `Mixed` (`select` INTEGER KEY, "
        "S STRUCT<`in` STRING, B ARRAY<MAP<STRING, DECIMAL(4, 2)>>>, H BYTES HEADER('k')) "
        "WITH (KAFKA_TOPIC='t', PARTITIONS=2, VALUE_FORMAT='json', WRAP_SINGLE_VALUE=false);"
    )
    reparsed = parse_statement(text)
    assert isinstance(reparsed, st.CreateSource) and reparsed.elements == statement.elements
    assert reparsed.properties == {**statement.properties, "PARTITIONS": 2}


def test_registry_schemas_read_back_as_the_columns_written() -> None:
    source = source_of(
        "CREATE STREAM s (id STRING KEY, n INT, p DECIMAL(5, 2), tags ARRAY<STRING>, "
        "m MAP<STRING, BIGINT>, at STRUCT<city STRING, zip INT>, d DATE, t TIME, ts TIMESTAMP, "
        "b BYTES, ok BOOLEAN, x DOUBLE) WITH (kafka_topic='s', value_format='AVRO')"
    )
    written = registry_formats.avro_record(list(source.value_columns))
    assert (written["name"], written["namespace"]) == (
        "KsqlDataSourceSchema", "io.confluent.ksql.avro_schemas",
    )  # fmt: skip
    assert written["fields"][1] == {
        "name": "P",
        "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}],
        "default": None,
    }
    read = registry_formats.avro_columns(json.loads(json.dumps(written)), "VALUE")
    assert read == list(source.value_columns)
    assert registry_formats.avro_columns("string", "KEY")[0].name == "ROWKEY"
    as_json = registry_formats.json_object(list(source.value_columns))
    read = registry_formats.json_schema_columns(as_json, "VALUE")
    assert [(c.name, str(c.type)) for c in read][:4] == [
        ("N", "BIGINT"), ("P", "DOUBLE"), ("TAGS", "ARRAY<STRING>"), ("M", "MAP<STRING, BIGINT>"),
    ]  # fmt: skip
    # WRAP_SINGLE_VALUE=false: a record (an object) is one column of its struct
    [alone] = registry_formats.avro_columns(
        {"type": "record", "name": "r", "fields": [{"name": "F0", "type": ["null", "int"]}]},
        "VALUE",
        wrapped=False,
    )
    assert (alone.name, str(alone.type)) == ("ROWVAL", "STRUCT<`F0` INTEGER>")
    [alone] = registry_formats.json_schema_columns(
        {"type": "object", "properties": {"F0": {"type": "integer"}}}, "VALUE", wrapped=False
    )
    assert (alone.name, str(alone.type)) == ("ROWVAL", "STRUCT<`F0` BIGINT>")


def analyzed(text: str, metastore: Metastore) -> Analysis:
    statement = parse_statement(text)
    assert isinstance(statement, st.Query)
    return analyze(statement, metastore)


def test_queries_resolved_against_the_metastore() -> None:
    metastore = Metastore()
    for text in (
        "CREATE STREAM orders (id INT KEY, cid STRING, items ARRAY<INT>, at STRUCT<city STRING>) "
        "WITH (kafka_topic='o', value_format='JSON')",
        "CREATE TABLE customers (id STRING PRIMARY KEY, name STRING) "
        "WITH (kafka_topic='c', value_format='JSON')",
    ):
        metastore.put_source(source_of(text, metastore))
    windowed_join = (
        "SELECT o.id, c.name, at->city, TRANSFORM(items, x => x + o.id), o.ROWTIME{} "
        "FROM orders o JOIN customers c ON o.cid = c.id "
        "WINDOW TUMBLING (SIZE 1 MINUTE) WHERE c.ROWPARTITION = 0 GROUP BY o.id EMIT CHANGES"
    )
    analysis = analyzed(windowed_join.format(""), metastore)
    assert set(analysis.sources) == {"ORDERS", "O", "CUSTOMERS", "C"} and analysis.windowed
    # ksqlDB resolves no window bound in a join's windowed aggregation (issue 5931)
    with pytest.raises(KsqlStatementError) as info:
        analyzed(windowed_join.format(", WINDOWSTART"), metastore)
    assert str(info.value) == "Line: 1, Col: 76: SELECT column 'WINDOWSTART' cannot be resolved."
    with pytest.raises(KsqlStatementError) as info:
        analyzed("SELECT * FROM nowhere EMIT CHANGES", metastore)
    assert str(info.value) == "Exception while preparing statement: NOWHERE does not exist."
    with pytest.raises(KsqlStatementError) as info:
        analyzed("SELECT id FROM orders\nWHERE  nope > 1 EMIT CHANGES", metastore)
    assert str(info.value) == "Line: 2, Col: 8: WHERE column 'NOPE' cannot be resolved."
    # a name both joined sources have, an unknown qualifier: as ksqlDB words them
    with pytest.raises(KsqlStatementError) as info:
        analyzed("SELECT id FROM orders o JOIN customers c ON o.cid = c.id", metastore)
    assert str(info.value) == (
        "Exception while preparing statement: Line: 1, Col: 8: Column 'ID' is ambiguous."
        " Could be C.ID or O.ID."
    )
    # every joined source has the pseudo columns (ksqlDB lists the choices sorted)
    with pytest.raises(KsqlStatementError) as info:
        analyzed("SELECT o.id, ROWTIME FROM orders o JOIN customers c ON o.cid = c.id", metastore)
    assert str(info.value) == (
        "Exception while preparing statement: Line: 1, Col: 14: Column 'ROWTIME' is "
        "ambiguous. Could be C.ROWTIME or O.ROWTIME."
    )
    with pytest.raises(KsqlStatementError) as info:
        analyzed("SELECT o.id FROM orders o JOIN customers c ON x.cid = c.id", metastore)
    assert str(info.value) == (
        "Failed to prepare statement: 'X' is not a valid stream/table name or alias."
    )
    with pytest.raises(KsqlStatementError, match="SELECT column 'C.CID' cannot be resolved"):
        analyzed("SELECT c.cid FROM orders o JOIN customers c ON o.cid = c.id", metastore)
    with pytest.raises(KsqlStatementError, match="SELECT column 'WINDOWEND' cannot be"):
        analyzed("SELECT WINDOWEND FROM orders EMIT CHANGES", metastore)
