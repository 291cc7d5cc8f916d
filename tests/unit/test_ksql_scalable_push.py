"""Which push queries ksqlDB runs as scalable push queries (their ids then start
``SCALABLE_PUSH_QUERY_``): ``strom.ksql.engine.scalable_push``. No broker."""

from __future__ import annotations

import pytest

from strom.ksql import statements as st
from strom.ksql.engine import scalable_push
from strom.ksql.metastore import Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.planner import QueryPlan, plan_query
from strom.ksql.push_queries import PushQuery
from strom.ksql.readers import SourceRecord

ON = {"ksql.query.push.v2.enabled": "true"}


def _plan(text: str) -> QueryPlan:
    store = Metastore()
    create = "CREATE STREAM s (k STRING KEY, id INT) WITH (kafka_topic='s', format='JSON')"
    statement = parse_statement(create)
    assert isinstance(statement, st.CreateSource)
    store.put_source(store.source_from_statement(statement, create))
    query = parse_statement(text)
    assert isinstance(query, st.Query)
    return plan_query(query, store)


def test_a_simple_push_query_from_latest_on_a_written_source_is_scalable() -> None:
    plan = _plan("SELECT k, id FROM s WHERE id > 1 EMIT CHANGES LIMIT 2;")
    assert scalable_push(plan, ON, "latest", 1)


@pytest.mark.parametrize(
    ("text", "settings", "reset", "writers"),
    [
        ("SELECT * FROM s EMIT CHANGES;", {}, "latest", 1),  # v2 not enabled
        ("SELECT * FROM s EMIT CHANGES;", ON, "earliest", 1),
        ("SELECT * FROM s EMIT CHANGES;", ON, "latest", 0),  # a source no query writes
        ("SELECT k, COUNT(*) FROM s GROUP BY k EMIT CHANGES;", ON, "latest", 1),
        ("SELECT ROWOFFSET FROM s EMIT CHANGES;", ON, "latest", 1),
        ("SELECT * FROM s PARTITION BY id EMIT CHANGES;", ON, "latest", 1),
    ],
)
def test_other_push_queries_are_not(
    text: str, settings: dict[str, str], reset: str, writers: int
) -> None:
    assert not scalable_push(_plan(text), settings, reset, writers)


def test_a_scalable_push_query_skips_a_null_key_as_ksqldbs_registry_does() -> None:
    """A record with no key on a source with key columns is no row of a scalable push
    query (ksqlDB's own case notes the difference from a conventional one's)."""
    plan = _plan("SELECT * FROM s EMIT CHANGES;")
    records = [
        SourceRecord("s", 0, 0, 1, None, b'{"ID": 110}'),
        SourceRecord("s", 0, 1, 2, b"11", b'{"ID": 111}'),
    ]

    def rows(query: PushQuery) -> list[list[object]]:
        out = []
        for record in records:
            for change in query.process(record):
                assert change.value is not None
                out.append([change.value[n] for n in query.names])
        return out

    scalable = PushQuery("SCALABLE_PUSH_QUERY_1", plan, {}, None, "latest", None, "log")
    assert rows(scalable) == [["11", 111]]
    conventional = PushQuery("transient_S_1", plan, {}, None, "latest", None, "log")
    assert rows(conventional) == [[None, 110], ["11", 111]]
