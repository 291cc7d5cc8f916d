"""CREATE OR REPLACE's checks (``strom.ksql.upgrades``: which changes of a source and of
a persistent query are accepted, ksqlDB's messages for the rest) and the table
functions EXPLODE and CUBE_EXPLODE planned and run record at a time; the query slots
and settings of the servers that share a service id. No broker."""

from __future__ import annotations

from typing import Any

import pytest

from strom.ksql import statements as st
from strom.ksql.metastore import DataSource, KsqlStatementError, Metastore
from strom.ksql.operators import Operators
from strom.ksql.parser import parse_statement
from strom.ksql.planner import QueryPlan, SinkRequest, plan_query
from strom.ksql.readers import Row
from strom.ksql.upgrades import check_query_upgrade, check_source_upgrade

SOURCE = (
    "CREATE STREAM readings (id STRING KEY, a ARRAY<INTEGER>, b ARRAY<STRING>, n INTEGER) "
    "WITH (kafka_topic='readings', value_format='JSON')"
)


def declared(metastore: Metastore, text: str) -> DataSource:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateSource)
    return metastore.source_from_statement(statement, text)


@pytest.fixture
def metastore() -> Metastore:
    store = Metastore()
    store.put_source(declared(store, SOURCE))
    return store


def planned(metastore: Metastore, text: str) -> QueryPlan:
    statement = parse_statement(text)
    if isinstance(statement, st.CreateAsSelect):
        request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1, text)
        return plan_query(statement.query, metastore, request, text)
    assert isinstance(statement, st.Query)
    return plan_query(statement, metastore, None, text)


def rows(plan: QueryPlan, columns: dict[str, Any]) -> list[dict[str, Any]]:
    changes = Operators(plan).stateless(Row({"ROWTIME": 7, **columns}))
    assert all(change.timestamp == 7 for change in changes)
    return [{**change.key, **(change.value or {})} for change in changes]


def test_a_source_takes_new_columns_at_the_end_only(metastore: Metastore) -> None:
    old = metastore.sources["READINGS"]
    wider = declared(metastore, SOURCE.replace("n INTEGER)", "n INTEGER, unit STRING)"))
    check_source_upgrade(old, wider)  # accepted
    narrower = declared(metastore, SOURCE.replace(", n INTEGER", ""))
    with pytest.raises(KsqlStatementError) as refused:
        check_source_upgrade(old, narrower)
    assert str(refused.value) == (
        "Cannot upgrade data source: DataSource '`READINGS`' has schema = `ID` STRING KEY, "
        "`A` ARRAY<INTEGER>, `B` ARRAY<STRING>, `N` INTEGER which is not upgradeable to "
        "`ID` STRING KEY, `A` ARRAY<INTEGER>, `B` ARRAY<STRING>. (The following columns are "
        "changed, missing or reordered: [`N` INTEGER])"
    )
    rekeyed = declared(metastore, SOURCE.replace("id STRING KEY", "id BIGINT KEY"))
    moved = declared(metastore, SOURCE.replace("'readings'", "'other'"))
    with pytest.raises(KsqlStatementError) as refused:
        check_source_upgrade(old, rekeyed)
    assert "(Key columns must be identical. The following key columns are changed, missing " \
        "or reordered: [`ID` STRING KEY])" in str(refused.value)  # fmt: skip
    with pytest.raises(KsqlStatementError) as refused:
        check_source_upgrade(old, moved)
    assert str(refused.value) == (
        "Cannot upgrade data source: DataSource '`READINGS`' has topic = readings which is "
        "not upgradeable to other"
    )


def test_a_query_takes_a_new_filter_and_projection_but_not_new_steps(
    metastore: Metastore,
) -> None:
    old = planned(metastore, "CREATE STREAM big AS SELECT id, n FROM readings WHERE n > 1;")
    new = planned(
        metastore, "CREATE STREAM big AS SELECT id, n, n * 2 AS twice FROM readings WHERE n > 5;"
    )
    check_query_upgrade(old, new)  # passive steps only: accepted
    check_source_upgrade(old.sink, new.sink)  # type: ignore[arg-type]
    rekeyed = planned(metastore, "CREATE STREAM big AS SELECT n, id FROM readings PARTITION BY n;")
    with pytest.raises(KsqlStatementError) as refused:
        check_query_upgrade(old, rekeyed)
    assert str(refused.value) == (
        "Query is not upgradeable. Cannot add a class "
        "io.confluent.ksql.execution.plan.StreamSelectKey step that is not in the original "
        "query plan."
    )
    counted = planned(
        metastore,
        "CREATE TABLE per_id AS SELECT id, COUNT(*) AS c FROM readings "
        "WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY id;",
    )
    with pytest.raises(KsqlStatementError) as refused:
        check_query_upgrade(counted, counted)
    assert str(refused.value) == "Upgrades not yet supported for StreamWindowedAggregate"
    summed = planned(
        metastore, "CREATE TABLE t AS SELECT id, SUM(n) AS s FROM readings GROUP BY id;"
    )
    counting = planned(
        metastore, "CREATE TABLE t AS SELECT id, COUNT(*) AS s FROM readings GROUP BY id;"
    )
    check_query_upgrade(summed, summed)
    with pytest.raises(KsqlStatementError) as refused:
        check_query_upgrade(summed, counting)
    assert str(refused.value).startswith(
        "Query is not upgradeable. Plan step of type StreamAggregate must have matching "
        "aggregate functions."
    )


def test_explode_gives_a_row_per_element_and_zips_several(metastore: Metastore) -> None:
    plan = planned(
        metastore,
        "SELECT id, EXPLODE(a) AS x, EXPLODE(b), n FROM readings WHERE n > 0 EMIT CHANGES;",
    )
    assert [(p.name, str(p.type)) for p in plan.projection] == [
        ("ID", "STRING"), ("X", "INTEGER"), ("KSQL_COL_0", "STRING"), ("N", "INTEGER")
    ]  # fmt: skip
    assert rows(plan, {"ID": "k", "A": [1, 2, 3], "B": ["p", "q"], "N": 1}) == [
        {"ID": "k", "X": 1, "KSQL_COL_0": "p", "N": 1},
        {"ID": "k", "X": 2, "KSQL_COL_0": "q", "N": 1},
        {"ID": "k", "X": 3, "KSQL_COL_0": None, "N": 1},
    ]
    assert rows(plan, {"ID": "k", "A": None, "B": [], "N": 1}) == []  # null and empty: none
    assert rows(plan, {"ID": "k", "A": [1], "B": ["p"], "N": 0}) == []  # WHERE first
    persistent = planned(
        metastore, "CREATE STREAM flat AS SELECT id, EXPLODE(a) + 1 AS x FROM readings;"
    )
    assert persistent.key_columns[0].name == "ID"
    assert rows(persistent, {"ID": "k", "A": [1, 2]}) == [{"ID": "k", "X": 2}, {"ID": "k", "X": 3}]


def test_cube_explode_gives_every_combination_once(metastore: Metastore) -> None:
    plan = planned(metastore, "SELECT CUBE_EXPLODE(b) AS c FROM readings EMIT CHANGES;")
    assert str(plan.projection[0].type) == "ARRAY<STRING>"
    assert [r["C"] for r in rows(plan, {"B": ["x", "y"]})] == [
        [None, None], [None, "y"], ["x", None], ["x", "y"]
    ]  # fmt: skip
    assert [r["C"] for r in rows(plan, {"B": ["x", None]})] == [[None, None], ["x", None]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT EXPLODE(EXPLODE(a)) FROM readings EMIT CHANGES;",
         "Table functions cannot be nested: EXPLODE(EXPLODE())"),
        ("SELECT id, EXPLODE(id) FROM readings EMIT CHANGES;",
         "Function 'explode' does not accept parameters (STRING).\nValid alternatives are:\n"
         "explode(ARRAY<DECIMAL> input)\nexplode(ARRAY<T> list)\n"
         "For detailed information on a function run: DESCRIBE FUNCTION <Function-Name>;"),
        ("SELECT id, EXPLODE(a), COUNT(*) FROM readings GROUP BY id EMIT CHANGES;",
         "Table functions cannot be used with aggregations."),
    ],
)  # fmt: skip
def test_table_function_refusals(metastore: Metastore, text: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        planned(metastore, text)
    assert str(refused.value) == message


def test_table_functions_refused_over_a_table(metastore: Metastore) -> None:
    metastore.put_source(
        declared(
            metastore,
            "CREATE TABLE t (id STRING PRIMARY KEY, a ARRAY<INTEGER>) "
            "WITH (kafka_topic='t', value_format='JSON')",
        )
    )
    with pytest.raises(KsqlStatementError) as refused:
        planned(metastore, "SELECT id, EXPLODE(a) FROM t EMIT CHANGES;")
    assert str(refused.value) == "Table source is not supported with table functions"


def test_query_slots_and_the_settings_of_servers_sharing_a_service_id() -> None:
    from strom.config import ConfigError
    from strom.ksql.config import server_config
    from strom.ksql.ownership import QUERY_SLOTS, slot_of

    # every server computes the same slot for a query id (not Python's salted hash)
    assert slot_of("CSAS_BIG_ORDERS_7") == 7  # CRC-32 % 12
    assert {slot_of(f"CSAS_S_{n}") for n in range(200)} == set(range(QUERY_SLOTS))
    config = server_config(
        {"ksql.streams.session.timeout.ms": "6000", "ksql.query.retry.backoff.initial.ms": "2000"}
    )
    assert (config.session_timeout_ms, config.query_retry_backoff_initial_ms) == (6000, 2000)
    assert config.query_retry_backoff_max_ms == 900_000
    with pytest.raises(ConfigError) as refused:
        server_config({"ksql.streams.session.timeout.ms": "soon"})
    assert str(refused.value) == (
        "Invalid value 'soon' for configuration ksql.streams.session.timeout.ms"
    )
