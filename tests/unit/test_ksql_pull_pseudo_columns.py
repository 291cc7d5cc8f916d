"""A pull query reading ROWPARTITION or ROWOFFSET is refused in ksqlDB's words
(``strom.ksql.engine.pull_pseudo_column_refusal``); ROWTIME is allowed. No broker."""

from __future__ import annotations

from strom.ksql import statements as st
from strom.ksql.engine import pull_pseudo_column_refusal
from strom.ksql.metastore import Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.planner import plan_query


def _refusal(text: str) -> str | None:
    store = Metastore()
    create = (
        "CREATE TABLE users (id STRING PRIMARY KEY, n INT) WITH (kafka_topic='u', format='JSON')"
    )
    statement = parse_statement(create)
    assert isinstance(statement, st.CreateSource)
    store.put_source(store.source_from_statement(statement, create))
    query = parse_statement(text)
    assert isinstance(query, st.Query)
    return pull_pseudo_column_refusal(plan_query(query, store))


def test_pseudo_columns_in_the_select_clause_are_refused() -> None:
    assert _refusal("SELECT id, ROWPARTITION, ROWOFFSET + 1 FROM users;") == (
        "Pull queries don't support the following columns in SELECT clauses: "
        "`ROWPARTITION`, `ROWOFFSET`\n"
    )


def test_pseudo_columns_in_the_where_clause_are_refused() -> None:
    assert _refusal("SELECT id FROM users WHERE ROWOFFSET > 1;") == (
        "Pull queries don't support the following columns in WHERE clauses: `ROWOFFSET`\n"
    )


def test_rowtime_and_plain_columns_are_allowed() -> None:
    assert _refusal("SELECT id, ROWTIME FROM users WHERE ROWTIME > 1 AND n = 2;") is None
