"""The clauses a pull query may not have, refused in ksqlDB's PullQueryValidator's words
and order before the query is planned (``strom.ksql.engine.pull_clause_refusal``)."""

from __future__ import annotations

import pytest

from strom.ksql import statements as st
from strom.ksql.engine import pull_clause_refusal
from strom.ksql.parser import parse_statement


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
