"""The clauses a pull query may not have, refused in ksqlDB's PullQueryValidator's words
and order before the query is planned (``strom.ksql.engine.pull_clause_refusal``), and a
LIMIT when the settings disable it (``pull_limit_refusal``)."""

from __future__ import annotations

import pytest

from strom.ksql import statements as st
from strom.ksql.engine import pull_clause_refusal, pull_limit_refusal
from strom.ksql.metastore import Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.planner import plan_query


def _refusal(text: str) -> str | None:
    query = parse_statement(text)
    assert isinstance(query, st.Query)
    return pull_clause_refusal(query)


@pytest.mark.parametrize(
    ("text", "clause"),
    [
        ("SELECT * FROM a JOIN b ON a.id = b.id WHERE a.id = 1;", "JOIN"),
        ("SELECT * FROM a WINDOW TUMBLING (SIZE 1 SECOND) WHERE id = 1;", "WINDOW"),
        ("SELECT id FROM a WHERE id = 1 GROUP BY id;", "GROUP BY"),
        ("SELECT id, COUNT(*) FROM a GROUP BY id HAVING COUNT(*) > 1;", "GROUP BY"),
        ("SELECT * FROM a JOIN b ON a.id = b.id GROUP BY a.id;", "JOIN"),
    ],
)
def test_a_pull_query_clause_is_refused(text: str, clause: str) -> None:
    assert _refusal(text) == f"Pull queries don't support {clause} clauses."


def test_a_pull_query_without_them_passes() -> None:
    assert _refusal("SELECT * FROM a WHERE id = 1 LIMIT 2;") is None


def test_a_limit_is_refused_when_pull_limits_are_disabled() -> None:
    store = Metastore()
    create = "CREATE STREAM s (k STRING KEY, id INT) WITH (kafka_topic='s', format='JSON')"
    statement = parse_statement(create)
    assert isinstance(statement, st.CreateSource)
    store.put_source(store.source_from_statement(statement, create))
    query = parse_statement("SELECT * FROM s LIMIT 2;")
    assert isinstance(query, st.Query)
    plan = plan_query(query, store)
    off = {"ksql.query.pull.limit.clause.enabled": "false"}
    refused = pull_limit_refusal(plan, off)
    assert refused is not None
    assert refused.startswith(
        "LIMIT clause in pull queries is currently disabled. You can enable them by setting "
        "ksql.query.pull.limit.clause.enabled=true. See https://cnfl.io/queries"
    )
    assert pull_limit_refusal(plan, {}) is None
