"""ksql's source changes and formats without a broker: ALTER ... ADD COLUMN in the
metastore (ksqlDB's checks and messages), Protobuf schemas and rows both ways, and
PRINT's guess of the registry formats."""

from __future__ import annotations

from dataclasses import replace

import pytest

from strom.ksql import statements as st
from strom.ksql.metastore import KsqlStatementError, Metastore
from strom.ksql.parser import parse_statement


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
