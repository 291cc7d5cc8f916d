"""INSERT VALUES' refusals that come before any row is written (``strom.ksql.inserts``),
in ksqlDB's words: a column list and values of different lengths, a source's column
named in a value, and the pseudo columns ROWPARTITION and ROWOFFSET; and the values as
written: any expression evaluated, a struct's fields the column lacks dropped. No
broker."""

from __future__ import annotations

import pytest

from strom.ksql import expressions as ex
from strom.ksql import formats
from strom.ksql import statements as st
from strom.ksql.inserts import check_value_count, statement_values
from strom.ksql.metastore import DataSource, KsqlStatementError, Metastore
from strom.ksql.parser import parse_statement


def _insert(text: str) -> st.InsertValues:
    statement = parse_statement(text)
    assert isinstance(statement, st.InsertValues)
    return statement


def _source() -> DataSource:
    store = Metastore()
    create = "CREATE STREAM input (k STRING KEY, id INT) WITH (kafka_topic='t', format='JSON')"
    statement = parse_statement(create)
    assert isinstance(statement, st.CreateSource)
    store.put_source(store.source_from_statement(statement, create))
    found = store.source("INPUT")
    assert found is not None
    return found


def test_a_column_list_and_values_of_other_lengths_fail_to_prepare() -> None:
    with pytest.raises(KsqlStatementError) as refused:
        check_value_count(_insert("INSERT INTO test (K, ID) VALUES (5);"))
    assert str(refused.value) == (
        "Failed to prepare statement: Expected number columns and values to match: 2, 1"
    )
    check_value_count(_insert("INSERT INTO test (K, ID) VALUES ('a', 5);"))
    check_value_count(_insert("INSERT INTO test VALUES ('a');"))  # checked against the source


@pytest.mark.parametrize("column", ["ROWPARTITION", "ROWOFFSET"])
def test_pseudo_columns_other_than_rowtime_are_not_insertable(column: str) -> None:
    source = _source()
    text = f"INSERT INTO input (K, ID, {column}) VALUES ('a', 1, 2);"
    with pytest.raises(KsqlStatementError) as refused:
        statement_values(source, _insert(text))
    assert str(refused.value) == f"Inserting into column `{column}` is not allowed."
    values = statement_values(source, _insert("INSERT INTO input (K, ROWTIME) VALUES ('a', 1);"))
    assert sorted(values) == ["K", "ROWTIME"]


def test_a_value_naming_a_sources_column_fails_to_prepare() -> None:
    with pytest.raises(KsqlStatementError) as refused:
        check_value_count(_insert("INSERT INTO test (K, ID) VALUES (FOO.bar, '10');"))
    assert str(refused.value) == (
        "Failed to prepare statement: 'FOO' is not a valid stream/table name or alias."
    )


def test_values_are_evaluated_and_coerced_to_the_columns_types() -> None:
    values = _insert(
        "INSERT INTO t (A, D, S) VALUES (ARRAY[1, 1 + 1, 3], 2 * 1.5, "
        "STRUCT(X := 'x', EXTRA := 'dropped'));"
    ).values
    array = ex.ArrayType(ex.PrimitiveType("BIGINT"))
    assert formats.coerce(values[0], array, "A") == [1, 2, 3]
    assert formats.coerce(values[1], ex.PrimitiveType("DOUBLE"), "D") == 3.0
    struct = ex.StructType((ex.StructField("X", ex.PrimitiveType("STRING")),))
    assert formats.coerce(values[2], struct, "S") == {"X": "x"}
