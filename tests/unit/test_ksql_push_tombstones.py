"""A table's tombstones in the server's push queries
(``strom.ksql.push_queries.PushQuery.process``) and their rows on ``/query`` and
``/query-stream`` (``strom.ksql.server._RowWriter``), as ksqlDB's ``TombstoneFactory``
and writers make them. No broker."""

from __future__ import annotations

import json

from test_ksql_joins import planned

from strom.ksql.push_queries import PushQuery, TombstoneRow
from strom.ksql.readers import SourceRecord
from strom.ksql.server import _RowWriter

USERS = (
    "CREATE TABLE users (id STRING PRIMARY KEY, name STRING, age INT) "
    "WITH (kafka_topic='users', value_format='JSON', partitions=1)"
)


def _record(offset: int, key: bytes | None, value: dict[str, object] | None) -> SourceRecord:
    data = None if value is None else json.dumps(value).encode()
    return SourceRecord("users", 0, offset, offset, key, data)


def _rows(query: PushQuery, records: list[SourceRecord]) -> list[tuple[bool, list[object]]]:
    out = []
    for record in records:
        for change in query.process(record):
            if change.value is not None:
                out.append((False, [change.value.get(n) for n in query.names]))
            elif type(change).__name__ == "_Deleted":
                out.append((True, list(TombstoneRow(change.key[n] for n in query.names))))
    return out


def test_a_tables_tombstone_is_a_row_of_its_key_with_null_values() -> None:
    records = [
        _record(0, b"a", {"NAME": "Ann", "AGE": 30}),
        _record(1, b"a", None),  # a delete
        _record(2, None, None),  # no key: no row
        _record(3, b"b", {"NAME": "Bob"}),
    ]
    star = PushQuery(
        "p", planned(USERS, "SELECT * FROM users EMIT CHANGES"), {}, None, "earliest", None, "l"
    )
    assert _rows(star, records) == [
        (False, ["a", "Ann", 30]),
        (True, ["a", None, None]),
        (False, ["b", "Bob", None]),
    ]
    # the key not in the projection (or renamed): all null; WHERE does not stop a delete
    plan = planned(USERS, "SELECT age, id AS who FROM users WHERE age > 40 EMIT CHANGES")
    picked = PushQuery("p", plan, {}, None, "earliest", None, "l")
    assert _rows(picked, records) == [(True, [None, None])]


def test_a_tombstone_row_is_marked_on_query_and_dropped_on_query_stream() -> None:
    plan = planned(USERS, "SELECT * FROM users EMIT CHANGES")
    names = [p.name for p in plan.projection]
    types = [p.type for p in plan.projection]
    old = _RowWriter("/query", "application/json", "q", names, types)
    assert json.loads(old.row(TombstoneRow(["a", None, None])).rstrip(b",\n")) == {
        "row": {"columns": ["a", None, None], "tombstone": True}
    }
    assert json.loads(old.row(["a", "Ann", 30]).rstrip(b",\n")) == {
        "row": {"columns": ["a", "Ann", 30]}
    }
    for accept in ("application/json", "application/vnd.ksqlapi.delimited.v1"):
        stream = _RowWriter("/query-stream", accept, "q", names, types)
        assert stream.row(TombstoneRow(["a", None, None])) == b""
