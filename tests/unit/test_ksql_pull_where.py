"""A pull query's WHERE clause with table scans disabled (``strom.ksql.pull_where``):
key lookups and single-key string range scans pass, anything else is refused in
ksqlDB's words. No broker."""

from __future__ import annotations

import pytest

from strom.ksql import statements as st
from strom.ksql.metastore import KsqlStatementError, Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.planner import plan_query
from strom.ksql.pull_where import TABLE_SCAN_REQUIRED, check_key_values, check_without_table_scan

TABLES = (
    "CREATE TABLE t (id STRING PRIMARY KEY, n INT) WITH (kafka_topic='t', format='JSON')",
    "CREATE TABLE i (id INT PRIMARY KEY, n INT) WITH (kafka_topic='i', format='JSON')",
    "CREATE TABLE m (a STRING PRIMARY KEY, b INT PRIMARY KEY, n INT) "
    "WITH (kafka_topic='m', format='JSON')",
    "CREATE TABLE w (id STRING PRIMARY KEY, n INT) WITH (kafka_topic='w', format='JSON', "
    "window_type='TUMBLING', window_size='1 SECOND')",
)


def _check(text: str, range_scans: bool = True) -> None:
    store = Metastore()
    for create in TABLES:
        statement = parse_statement(create)
        assert isinstance(statement, st.CreateSource)
        store.put_source(store.source_from_statement(statement, create))
    query = parse_statement(text)
    assert isinstance(query, st.Query)
    plan = plan_query(query, store)
    check_without_table_scan(plan.where, plan.source, range_scans)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * FROM t WHERE id = 'a';",
        "SELECT * FROM t WHERE id = 'a' AND n > 1;",
        "SELECT * FROM t WHERE id IN ('a', 'b');",
        "SELECT * FROM t WHERE id = 'a' OR id = 'b';",
        "SELECT * FROM t WHERE id > 'a';",
        "SELECT * FROM m WHERE a = 'x' AND b = 1;",
        "SELECT * FROM w WHERE id = 'a' AND WINDOWSTART > 1;",
    ],
)
def test_lookups_and_range_scans_pass(text: str) -> None:
    _check(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT * FROM t;", TABLE_SCAN_REQUIRED),
        ("SELECT * FROM t WHERE n = 100;", "missing key column for disjunct: (N = 100)"),
        ("SELECT * FROM t WHERE id != 'a';", "'[`ID` STRING KEY]' must currently be '='. "),
        ("SELECT * FROM t WHERE id > 'a' AND id < 'z';", "on the key column cannot be combined"),
        ("SELECT * FROM i WHERE id = n;", "must be between a key column and a resolvable"),
        ("SELECT * FROM t WHERE 1 = 1;", "A comparison must directly reference a key column"),
        ("SELECT * FROM m WHERE a = 'x';", "every key in the WHERE clause. Specified: [`A`]"),
        ("SELECT * FROM i WHERE id > 1;", TABLE_SCAN_REQUIRED),
        ("SELECT * FROM t WHERE id > 'a' OR id < 'b';", TABLE_SCAN_REQUIRED),
        ("SELECT * FROM w WHERE id > 'a';", TABLE_SCAN_REQUIRED),
        ("SELECT * FROM t WHERE 'a' LIKE id;", "Like condition must be between strings"),
    ],
)  # fmt: skip
def test_what_needs_a_table_scan_is_refused(text: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        _check(text)
    assert message in str(refused.value)


def test_a_range_scan_needs_range_scans() -> None:
    with pytest.raises(KsqlStatementError, match="Query requires table scan"):
        _check("SELECT * FROM t WHERE id > 'a';", range_scans=False)


def _check_keys(text: str) -> None:
    store = Metastore()
    for create in TABLES:
        statement = parse_statement(create)
        assert isinstance(statement, st.CreateSource)
        store.put_source(store.source_from_statement(statement, create))
    query = parse_statement(text)
    assert isinstance(query, st.Query)
    plan = plan_query(query, store)
    check_key_values(plan.where, plan.source)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT * FROM i WHERE id IN ('10', 11);", "'10' can not be converted to the type of "
         "the key column: ID INTEGER KEY"),
        ("SELECT * FROM i WHERE id IN (10, null);", "Primary key columns can not be NULL: "
         "(ID = null)"),
    ],
)  # fmt: skip
def test_a_lookups_key_values_must_be_of_the_keys_type(text: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        _check_keys(text)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * FROM i WHERE id IN (10, 11);",
        "SELECT * FROM i WHERE id = 10 OR n = 1;",  # a table scan: nothing resolved
        "SELECT * FROM t WHERE id > 'a';",
    ],
)
def test_other_where_clauses_pass(text: str) -> None:
    _check_keys(text)
