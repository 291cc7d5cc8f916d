"""A pull query by key looks its rows up in the materialized table's index
(``Materialized.current(where)``) instead of scanning every row: for each WHERE the
answer is the scan's, row for row and in the same order, across inserts, updates and
tombstones, on a plain and on a windowed table. No broker (the consumer is never
polled)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator

import pytest

from strom.ksql import statements as st
from strom.ksql.metastore import DataSource, Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.planner import plan_query
from strom.ksql.push_queries import Materialized, pull_rows
from strom.ksql.readers import SourceRecord


def source(store: Metastore, text: str) -> DataSource:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateSource)
    created = store.source_from_statement(statement, text)
    store.put_source(created)
    return created


@pytest.fixture(scope="module")
def store() -> Metastore:
    metastore = Metastore()
    source(
        metastore,
        "CREATE TABLE users (id STRING PRIMARY KEY, name STRING, n INTEGER) "
        "WITH (KAFKA_TOPIC='users', KEY_FORMAT='KAFKA', VALUE_FORMAT='JSON');",
    )
    source(
        metastore,
        "CREATE TABLE counts (id STRING PRIMARY KEY, c BIGINT) WITH (KAFKA_TOPIC='counts', "
        "KEY_FORMAT='KAFKA', VALUE_FORMAT='JSON', WINDOW_TYPE='TUMBLING', WINDOW_SIZE='1 MINUTE');",
    )
    return metastore


@pytest.fixture(scope="module")
def materialize(store: Metastore) -> Iterator[Callable[[str], Materialized]]:
    """Materialized tables whose consumer never connects (nothing is polled)."""
    made: list[Materialized] = []

    def make(name: str) -> Materialized:
        found = store.source(name)
        assert found is not None
        table = Materialized(found, {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, None)
        made.append(table)
        return table

    yield make
    for table in made:
        table.close()


def record(key: bytes, value: dict[str, object] | None, offset: int) -> SourceRecord:
    data = None if value is None else json.dumps(value).encode()
    return SourceRecord("t", 0, offset, 1000 + offset, key, data)


WHERES = [
    "",
    "WHERE id = 'a'",
    "WHERE 'b' = id",
    "WHERE id = 'a' AND n > 1",
    "WHERE n > 1 AND id = 'c'",
    "WHERE id = 'gone'",
    "WHERE id = 'a' OR id = 'b'",
    "WHERE id = 'nobody'",
    "WHERE id > 'a'",
]


@pytest.fixture(scope="module")
def users(materialize: Callable[[str], Materialized]) -> Materialized:
    table = materialize("USERS")
    changes = [
        (b"a", {"name": "ann", "n": 1}),
        (b"b", {"name": "bob", "n": 2}),
        (b"gone", {"name": "x", "n": 3}),
        (b"c", {"name": "cy", "n": 4}),
        (b"a", {"name": "ann2", "n": 5}),  # an update
        (b"gone", None),  # a tombstone
        (b"b", None),
        (b"b", {"name": "bob2", "n": 6}),  # back
    ]
    for offset, (key, value) in enumerate(changes):
        table._apply(record(key, value, offset))
    return table


@pytest.mark.parametrize("where", WHERES)
def test_a_lookup_by_key_answers_what_the_scan_answers(
    store: Metastore, users: Materialized, where: str
) -> None:
    table = users
    statement = parse_statement(f"SELECT * FROM users {where};")
    assert isinstance(statement, st.Query)
    plan = plan_query(statement, store)
    looked_up = pull_rows(plan, table.current(plan.where))
    assert looked_up == pull_rows(plan, table.current())
    if where == "WHERE id = 'a'":
        assert [row[1] for row in looked_up] == ["ann2"]
        assert len(table.current(plan.where)) == 1  # not a scan
    if where == "":  # in the order of the record keys' bytes, as ksqlDB's store scans
        assert [row[0] for row in looked_up] == ["a", "b", "c"]


def test_a_windowed_table_keeps_every_window_of_a_key(
    store: Metastore, materialize: Callable[[str], Materialized]
) -> None:
    table = materialize("COUNTS")
    for offset, (key, start, count) in enumerate(
        [(b"a", 0, 1), (b"a", 60_000, 1), (b"b", 0, 1), (b"a", 0, 2)]
    ):
        table._apply(record(key + struct.pack(">q", start), {"c": count}, offset))
    for where in ("WHERE id = 'a'", "WHERE id = 'a' AND WINDOWSTART >= 60000", ""):
        statement = parse_statement(f"SELECT * FROM counts {where};")
        assert isinstance(statement, st.Query)
        plan = plan_query(statement, store)
        assert pull_rows(plan, table.current(plan.where)) == pull_rows(plan, table.current())
    statement = parse_statement("SELECT * FROM counts WHERE id = 'a';")
    assert isinstance(statement, st.Query)
    plan = plan_query(statement, store)
    assert [(r[1], r[3]) for r in pull_rows(plan, table.current(plan.where))] == [
        (0, 2),
        (60_000, 1),
    ]


@pytest.mark.parametrize(
    ("key_type", "key", "where"),
    [
        ("ARRAY<STRING>", ["1", "0"], "ARRAY['1', '0']"),
        ("STRUCT<F1 STRING, F2 STRING>", {"F1": "1", "F2": "0"}, "STRUCT(F1 := '1', F2 := '0')"),
    ],
)
def test_a_table_keyed_by_an_array_or_a_struct_is_materialized_and_looked_up(
    key_type: str, key: object, where: str
) -> None:
    store = Metastore()
    table = source(
        store,
        f"CREATE TABLE agg (id {key_type} PRIMARY KEY, c BIGINT) "
        "WITH (KAFKA_TOPIC='agg', FORMAT='JSON');",
    )
    other = ["2", "0"] if isinstance(key, list) else {"F1": "2", "F2": "0"}
    materialized = Materialized(table, {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, None)
    try:
        for offset, (k, c) in enumerate([(key, 1), (other, 5), (key, 2)]):
            materialized._apply(record(json.dumps(k).encode(), {"C": c}, offset))
        query = parse_statement(f"SELECT id, c FROM agg WHERE id = {where};")
        assert isinstance(query, st.Query)
        plan = plan_query(query, store)
        assert pull_rows(plan, materialized.current(plan.where)) == [[key, 2]]
        assert len(materialized.current()) == 2
    finally:
        materialized.close()


def test_a_limit_takes_the_first_rows_in_key_order(
    store: Metastore, materialize: Callable[[str], Materialized]
) -> None:
    table = materialize("USERS")
    for offset, key in enumerate([b"these", b"after", b"which", b"could"]):
        table._apply(record(key, {"name": key.decode(), "n": offset}, offset))
    statement = parse_statement("SELECT id FROM users LIMIT 2;")
    assert isinstance(statement, st.Query)
    plan = plan_query(statement, store)
    assert pull_rows(plan, table.current(plan.where)) == [["after"], ["could"]]
