"""Joins beyond two sources on equal keys, record by record in one process
(``strom.ksql.join_flow`` over ``strom.ksql.operators``): n-way chains, foreign-key
table-table joins, GROUP BY over a join, and the planner's schemas and refusals for
them. The expected records are those ksqlDB gives for the same statements and inputs.
No broker."""

from __future__ import annotations

from typing import Any

import pytest

from strom.ksql import statements as st
from strom.ksql.join_flow import JoinFlow, stages
from strom.ksql.metastore import KsqlStatementError, Metastore
from strom.ksql.operators import Operators
from strom.ksql.parser import parse_statement
from strom.ksql.planner import QueryPlan, SinkRequest, plan_query
from strom.ksql.readers import Row

S1 = "CREATE STREAM S1 (ID INT KEY, K INT, V0 INT) WITH (kafka_topic='left', value_format='JSON')"
T1 = "CREATE TABLE T1 (ID INT PRIMARY KEY, V0 BIGINT) WITH (kafka_topic='left', format='JSON')"
T2 = "CREATE TABLE T2 (ID INT PRIMARY KEY, V0 INT) WITH (kafka_topic='right', format='JSON')"
T3 = "CREATE TABLE T3 (ID INT PRIMARY KEY, V0 INT) WITH (kafka_topic='right2', format='JSON')"
LEFT_TABLE = (
    "CREATE TABLE left_table (l_id BIGINT PRIMARY KEY, name VARCHAR, foreign_key BIGINT) "
    "WITH (kafka_topic='left_topic', value_format='JSON')"
)
RIGHT_TABLE = (
    "CREATE TABLE right_table (r_id BIGINT PRIMARY KEY, f1 VARCHAR, f2 BIGINT) "
    "WITH (kafka_topic='right_topic', value_format='JSON')"
)


def planned(*statements: str) -> QueryPlan:
    """The plan of the last statement (a CREATE ... AS SELECT or a query) over the
    sources the others create."""
    metastore = Metastore()
    for text in statements[:-1]:
        created = parse_statement(text)
        assert isinstance(created, st.CreateSource)
        metastore.put_source(metastore.source_from_statement(created, text))
    text = statements[-1]
    statement = parse_statement(text)
    if isinstance(statement, st.Query):
        return plan_query(statement, metastore)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
    return plan_query(statement.query, metastore, request, text)


Record = tuple[str, Any, dict[str, Any] | None, int]  # topic, key, value (None: deleted), ts


def run(plan: QueryPlan, records: list[Record]) -> list[tuple[Any, Any, int]]:
    """The records through the plan's join flow: (key, value, timestamp) of each output,
    a single key column's value unwrapped."""
    flow = JoinFlow(Operators(plan))
    states: dict[tuple[int, Any], dict[Any, Any]] = {}
    stream_time = -1
    out: list[tuple[Any, Any, int]] = []
    for offset, (topic, key, value, timestamp) in enumerate(records):
        stream_time = max(stream_time, timestamp)
        for index, source in enumerate(plan.sources):
            if source.topic != topic:
                continue
            key_names = [c.name for c in source.key_columns]
            key_columns = key if len(key_names) > 1 else {key_names[0]: key}  # several: a dict
            columns = {**key_columns, **(value or {})}
            columns.update(ROWTIME=timestamp, ROWPARTITION=0, ROWOFFSET=offset)
            row = Row(columns, tombstone=value is None)
            for change in flow.process(index, row, states, stream_time):
                keys = list(change.key.values())
                out.append((keys[0] if len(keys) == 1 else keys, change.value, change.timestamp))
    return out


# ---- n-way joins ------------------------------------------------------------------------


def test_a_stream_joined_to_two_tables_on_different_keys() -> None:
    plan = planned(
        S1,
        T2,
        T3,
        "CREATE STREAM OUTPUT AS SELECT S1.K, s1.V0, t2.V0, t3.V0 FROM S1 "
        "JOIN T2 ON S1.V0 = T2.ID JOIN T3 ON S1.K = T3.ID",
    )
    assert [(p.name, p.namespace) for p in plan.projection] == [
        ("K", "KEY"), ("S1_V0", "VALUE"), ("T2_V0", "VALUE"), ("T3_V0", "VALUE")
    ]  # fmt: skip
    assert [s.kind for s in stages(plan)] == ["join", "join"]
    records: list[Record] = [
        ("right2", 2, {"V0": 3}, 10),
        ("right", 1, {"V0": 2}, 11),
        ("left", 0, {"K": 2, "V0": 1}, 12),
        ("left", 0, {"K": 5, "V0": 1}, 13),  # no T3 row for 5: INNER drops it
    ]
    assert run(plan, records) == [(2, {"S1_V0": 1, "T2_V0": 2, "T3_V0": 3}, 12)]


def test_a_stream_left_joined_to_two_tables() -> None:
    plan = planned(
        S1,
        T2,
        T3,
        "CREATE STREAM OUTPUT AS SELECT T3.ID, s1.V0, t2.V0, t3.V0 FROM S1 "
        "LEFT JOIN T2 ON S1.ID = T2.ID LEFT JOIN T3 ON S1.ID = T3.ID",
    )
    records: list[Record] = [
        ("left", 0, {"V0": 1}, 0),
        ("right", 0, {"V0": 2}, 1),
        ("left", 0, {"V0": 3}, 2),
        ("right2", 0, {"V0": 4}, 3),
        ("left", 0, {"V0": 5}, 4),
    ]
    assert run(plan, records) == [
        (0, {"S1_V0": 1, "T2_V0": None, "T3_V0": None}, 0),
        (0, {"S1_V0": 3, "T2_V0": 2, "T3_V0": None}, 2),
        (0, {"S1_V0": 5, "T2_V0": 2, "T3_V0": 4}, 4),
    ]


def test_three_tables_joined_on_their_primary_keys() -> None:
    plan = planned(
        T1,
        T2.replace("V0 INT", "V0 BIGINT"),
        T3.replace("V0 INT", "V0 BIGINT"),
        "CREATE TABLE OUTPUT AS SELECT T1.ID, T1.V0, T2.V0, T3.V0 FROM T1 "
        "JOIN T2 ON T1.ID = T2.ID JOIN T3 ON T1.ID = T3.ID",
    )
    assert plan.kind == "TABLE"
    records: list[Record] = [
        ("left", 0, {"V0": 1}, 0),
        ("right", 0, {"V0": 2}, 1),
        ("right2", 0, {"V0": 3}, 2),
        ("left", 0, {"V0": 4}, 1000),
        ("right", 0, None, 1001),  # T2's row deleted: the inner result goes
        ("right", 0, {"V0": 6}, 1002),
    ]
    assert run(plan, records) == [
        (0, {"T1_V0": 1, "T2_V0": 2, "T3_V0": 3}, 2),
        (0, {"T1_V0": 4, "T2_V0": 2, "T3_V0": 3}, 1000),
        (0, None, 1001),
        (0, {"T1_V0": 4, "T2_V0": 6, "T3_V0": 3}, 1002),
    ]


def test_a_stream_stream_join_then_a_table() -> None:
    plan = planned(
        "CREATE STREAM S1 (ID INT KEY, V0 BIGINT) WITH (kafka_topic='left', value_format='JSON')",
        "CREATE STREAM S2 (ID INT KEY, V0 BIGINT) WITH (kafka_topic='right', value_format='JSON')",
        T3.replace("V0 INT", "V0 BIGINT"),
        "CREATE STREAM OUTPUT AS SELECT S2.ID, s1.V0, s2.V0, t3.V0 FROM S1 "
        "JOIN S2 WITHIN 10 SECONDS ON S1.ID = S2.ID JOIN T3 ON S1.ID = T3.ID",
    )
    records: list[Record] = [
        ("right2", 0, {"V0": 3}, 0),
        ("left", 0, {"V0": 1}, 1000),
        ("right", 0, {"V0": 2}, 2000),
        ("right", 0, {"V0": 4}, 20000),  # outside the window of the left record
    ]
    assert run(plan, records) == [(0, {"S1_V0": 1, "S2_V0": 2, "T3_V0": 3}, 2000)]


def test_two_sources_over_one_topic_join_each_record_on_both_sides() -> None:
    plan = planned(
        "CREATE STREAM moves (id STRING KEY, peer STRING) "
        "WITH (kafka_topic='moves', value_format='JSON')",
        "CREATE STREAM moves_again (id STRING KEY, peer STRING) "
        "WITH (kafka_topic='moves', value_format='JSON')",
        "CREATE STREAM paired AS SELECT b.id, a.id AS mover, b.peer FROM moves a "
        "JOIN moves_again b WITHIN 1 SECOND ON a.peer = b.id",
    )
    records: list[Record] = [("moves", "x", {"PEER": "y"}, 0), ("moves", "y", {"PEER": "z"}, 1)]
    assert run(plan, records) == [("y", {"MOVER": "x", "B_PEER": "z"}, 1)]


# ---- foreign-key joins ------------------------------------------------------------------


def test_a_foreign_key_inner_join() -> None:
    plan = planned(
        LEFT_TABLE,
        RIGHT_TABLE,
        "CREATE TABLE output AS SELECT l_id, r_id, name, f1 FROM left_table "
        "JOIN right_table ON foreign_key = r_id",
    )
    assert [s.kind for s in stages(plan)] == ["fk-route", "fk-join", "order"]
    assert [(p.name, p.namespace) for p in plan.projection][0] == ("L_ID", "KEY")
    records: list[Record] = [
        ("right_topic", 0, {"F1": "blah", "F2": 4}, 0),
        ("left_topic", 1, {"NAME": "zero", "FOREIGN_KEY": 0}, 10000),
        ("left_topic", 0, {"NAME": "foo", "FOREIGN_KEY": 100}, 13000),
        ("right_topic", 0, {"F1": "a", "F2": 10}, 15000),
        ("left_topic", 10, {"NAME": "bar", "FOREIGN_KEY": 0}, 16000),
        ("right_topic", 0, None, 17000),
        ("left_topic", 1, None, 18000),
    ]
    outputs = run(plan, records)
    assert outputs[:3] == [
        (1, {"R_ID": 0, "NAME": "zero", "F1": "blah"}, 10000),
        (1, {"R_ID": 0, "NAME": "zero", "F1": "a"}, 15000),
        (10, {"R_ID": 0, "NAME": "bar", "F1": "a"}, 16000),
    ]
    # the right row deleted: both results go (in either order), then the left's delete
    assert sorted(outputs[3:5]) == [(1, None, 17000), (10, None, 17000)]
    assert outputs[5:] == [(1, None, 18000)]


def test_a_foreign_key_left_join_follows_a_changed_foreign_key() -> None:
    plan = planned(
        LEFT_TABLE,
        RIGHT_TABLE,
        "CREATE TABLE output AS SELECT l_id, r_id, name, f1 FROM left_table "
        "LEFT JOIN right_table ON foreign_key = r_id",
    )
    records: list[Record] = [
        ("left_topic", 1, {"NAME": "zero", "FOREIGN_KEY": 0}, 0),
        ("right_topic", 0, {"F1": "blah", "F2": 4}, 10000),
        ("left_topic", 1, {"NAME": "zero", "FOREIGN_KEY": 0}, 11000),
        ("left_topic", 0, {"NAME": "foo", "FOREIGN_KEY": 100}, 13000),
        ("right_topic", 0, {"F1": "a", "F2": 10}, 15000),
        ("left_topic", 1, {"NAME": "zero", "FOREIGN_KEY": 100}, 16000),  # moved away
        ("right_topic", 0, {"F1": "b", "F2": 11}, 17000),  # zero no longer follows 0
        ("right_topic", 100, {"F1": "c", "F2": 12}, 18000),  # both follow 100 now
        ("left_topic", 1, None, 19000),
    ]
    outputs = run(plan, records)
    assert outputs[:6] == [
        (1, {"R_ID": None, "NAME": "zero", "F1": None}, 0),
        (1, {"R_ID": 0, "NAME": "zero", "F1": "blah"}, 10000),
        (1, {"R_ID": 0, "NAME": "zero", "F1": "blah"}, 11000),
        (0, {"R_ID": None, "NAME": "foo", "F1": None}, 13000),
        (1, {"R_ID": 0, "NAME": "zero", "F1": "a"}, 15000),
        (1, {"R_ID": None, "NAME": "zero", "F1": None}, 16000),
    ]
    assert sorted(outputs[6:8], key=lambda o: o[0]) == [
        (0, {"R_ID": 100, "NAME": "foo", "F1": "c"}, 18000),
        (1, {"R_ID": 100, "NAME": "zero", "F1": "c"}, 18000),
    ]
    assert outputs[8:] == [(1, None, 19000)]


ACCOUNTS = (
    "CREATE TABLE accounts (acct BIGINT PRIMARY KEY, plan_id BIGINT) "
    "WITH (kafka_topic='accounts', format='JSON')"
)
PLANS = (
    "CREATE TABLE plans (plan_id BIGINT PRIMARY KEY, fee BIGINT, label STRING) "
    "WITH (kafka_topic='plans', format='JSON')"
)
LIMITS = (
    "CREATE TABLE limits (acct BIGINT PRIMARY KEY, cap BIGINT) "
    "WITH (kafka_topic='limits', format='JSON')"
)


@pytest.mark.parametrize("key", ["a.acct", "l.acct"])  # named A_ACCT, L_ACCT: two have ACCT
def test_a_foreign_key_join_then_a_join_on_the_left_tables_key(key: str) -> None:
    plan = planned(
        ACCOUNTS, PLANS, LIMITS,
        f"CREATE TABLE billed AS SELECT {key}, p.plan_id AS plan, fee, cap FROM accounts a "
        "JOIN plans p ON a.plan_id = p.plan_id LEFT JOIN limits l ON a.acct = l.acct",
    )  # fmt: skip
    assert [s.kind for s in stages(plan)] == ["fk-route", "fk-join", "join"]
    assert plan.key_columns[0].name == key.upper().replace(".", "_")
    records: list[Record] = [
        ("plans", 7, {"FEE": 30, "LABEL": "basic"}, 100),
        ("accounts", 5, {"PLAN_ID": 7}, 2000),
        ("limits", 5, {"CAP": 900}, 2500),
        ("plans", 9, {"FEE": 80, "LABEL": "pro"}, 3000),
        ("accounts", 5, {"PLAN_ID": 9}, 4000),  # the account moves to another plan
        ("plans", 9, {"FEE": 85, "LABEL": "pro"}, 4500),  # its new plan changes
        ("limits", 5, None, 5000),  # LEFT: the cap goes null
        ("accounts", 5, None, 6000),
    ]
    assert run(plan, records) == [  # as ksqlDB gives them
        (5, {"PLAN": 7, "FEE": 30, "CAP": None}, 2000),
        (5, {"PLAN": 7, "FEE": 30, "CAP": 900}, 2500),
        (5, {"PLAN": 9, "FEE": 80, "CAP": 900}, 4000),
        (5, {"PLAN": 9, "FEE": 85, "CAP": 900}, 4500),
        (5, {"PLAN": 9, "FEE": 85, "CAP": None}, 5000),
        (5, None, 6000),
    ]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "SELECT a.acct, fee FROM accounts a JOIN limits l ON a.acct = l.acct "
            "JOIN plans p ON a.plan_id = p.plan_id",
            "Invalid join condition: foreign-key table-table joins are not supported as part "
            "of n-way joins. Got A.PLAN_ID = P.PLAN_ID.",
        ),
        (  # after a foreign-key join the result is keyed by the left table's key
            "SELECT a.acct, fee FROM accounts a JOIN plans p ON a.plan_id = p.plan_id "
            "JOIN limits l ON a.plan_id = l.acct",
            "Invalid join condition: foreign-key table-table joins are not supported as part "
            "of n-way joins. Got A.PLAN_ID = L.ACCT.",
        ),
        (  # the condition named as written, the right source's side first
            "SELECT a.acct, fee FROM accounts a JOIN plans p ON a.plan_id = p.plan_id "
            "JOIN limits l ON l.acct = a.plan_id",
            "Invalid join condition: foreign-key table-table joins are not supported as part "
            "of n-way joins. Got L.ACCT = A.PLAN_ID.",
        ),
        (
            "SELECT fee, cap FROM accounts a JOIN plans p ON a.plan_id = p.plan_id "
            "JOIN limits l ON a.acct = l.acct",
            "The query used to build `O` must include the join expressions A.ACCT or L.ACCT "
            "in its projection (eg, SELECT A.ACCT...).",
        ),
    ],
)  # fmt: skip
def test_foreign_key_joins_in_a_chain_ksqldb_refuses(query: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        planned(ACCOUNTS, PLANS, LIMITS, f"CREATE TABLE O AS {query}")
    assert message in str(refused.value)


# ---- the synthetic join key (ROWKEY) ------------------------------------------------------


def test_a_full_outer_join_is_keyed_by_a_synthetic_rowkey() -> None:
    plan = planned(
        T1, T2, "CREATE TABLE O AS SELECT ROWKEY, t1.V0, t2.V0 FROM T1 FULL OUTER JOIN T2 "
        "ON T1.ID = T2.ID",
    )  # fmt: skip
    assert [(p.name, p.namespace, str(p.type)) for p in plan.projection] == [
        ("ROWKEY", "KEY", "INTEGER"), ("T1_V0", "VALUE", "BIGINT"), ("T2_V0", "VALUE", "INTEGER")
    ]  # fmt: skip
    records: list[Record] = [
        ("right", 4, {"V0": 40}, 1),  # no left row: the key is the right's
        ("left", 4, {"V0": 7}, 2),
        ("left", 5, {"V0": 8}, 3),
        ("right", 4, None, 4),
        ("left", 4, None, 5),
    ]
    assert run(plan, records) == [
        (4, {"T1_V0": None, "T2_V0": 40}, 1),
        (4, {"T1_V0": 7, "T2_V0": 40}, 2),
        (5, {"T1_V0": 8, "T2_V0": None}, 3),
        (4, {"T1_V0": 7, "T2_V0": None}, 4),
        (4, None, 5),
    ]


def test_a_synthetic_key_is_named_past_the_sources_rowkey_columns() -> None:
    left = "CREATE TABLE A (ROWKEY INT PRIMARY KEY, ROWKEY_2 INT) WITH (kafka_topic='a', "
    right = "CREATE TABLE B (K INT PRIMARY KEY, ROWKEY_3 INT) WITH (kafka_topic='b', "
    left, right = left + "format='JSON')", right + "format='JSON')"
    plan = planned(
        left, right, "CREATE TABLE O AS SELECT ROWKEY_1 AS ID, A.ROWKEY, ROWKEY_3 FROM A "
        "FULL JOIN B ON A.ROWKEY = B.K",
    )  # fmt: skip
    assert [(p.name, p.namespace) for p in plan.projection] == [
        ("ID", "KEY"), ("ROWKEY", "VALUE"), ("ROWKEY_3", "VALUE")
    ]  # fmt: skip
    assert run(plan, [("b", 9, {"ROWKEY_3": 1}, 1)]) == [(9, {"ROWKEY": None, "ROWKEY_3": 1}, 1)]


def test_select_star_starts_with_the_synthetic_key() -> None:
    streams = [
        f"CREATE STREAM {n} (K INT KEY, V INT) WITH (kafka_topic='{n.lower()}', format='JSON')"
        for n in ("L", "R")
    ]
    transient = planned(
        *streams, "SELECT * FROM L JOIN R WITHIN 1 MINUTE ON ABS(L.K) = ABS(R.K) EMIT CHANGES"
    )
    assert [p.name for p in transient.projection] == ["ROWKEY", "L_K", "L_V", "R_K", "R_V"]
    records: list[Record] = [("l", -3, {"V": 1}, 10), ("r", 3, {"V": 2}, 20)]
    assert run(transient, records) == [  # the join's key: ABS(k)
        ([], {"ROWKEY": 3, "L_K": -3, "L_V": 1, "R_K": 3, "R_V": 2}, 20)
    ]
    persistent = planned(
        *streams, "CREATE STREAM O AS SELECT * FROM L FULL JOIN R WITHIN 1 MINUTE ON L.K = R.K"
    )
    assert [(p.name, p.namespace) for p in persistent.key_columns] == [("ROWKEY", "KEY")]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "CREATE TABLE O AS SELECT t1.V0, t2.V0 FROM T1 FULL JOIN T2 ON T1.ID = T2.ID",
            "Key missing from projection (ie, SELECT). See https://cnfl.io/2LV7ouS.\n"
            "The query used to build `O` must include the join expression ROWKEY in its "
            "projection (eg, SELECT ROWKEY...).\nROWKEY was added as a synthetic key column "
            "because the join criteria did not match any source column. This expression must "
            "be included in the projection and may be aliased.",
        ),
        (  # an inner join on keys has none (its place given, as ksqlDB gives it)
            "CREATE TABLE O AS SELECT ROWKEY, t2.V0 FROM T1 JOIN T2 ON T1.ID = T2.ID",
            "Line: 1, Col: 26: Column 'ROWKEY' cannot be resolved.",
        ),
        (  # a full join's is ROWKEY here: ROWKEY_1 is no column
            "CREATE TABLE O AS SELECT ROWKEY, ROWKEY_1 AS K, t2.V0 FROM T1 FULL JOIN T2 "
            "ON T1.ID = T2.ID",
            "Line: 1, Col: 34: Column 'ROWKEY_1' cannot be resolved.",
        ),
        (  # nor has a query aggregating a join
            "CREATE TABLE O AS SELECT ROWKEY, COUNT(*) FROM T1 FULL JOIN T2 ON T1.ID = T2.ID "
            "GROUP BY T1.V0",
            "SELECT column 'ROWKEY' cannot be resolved.",
        ),
    ],
)  # fmt: skip
def test_synthetic_keys_ksqldb_refuses(query: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        planned(T1, T2, query)
    assert message in str(refused.value)


def test_outer_stream_joins_without_grace_give_unmatched_rows_at_once() -> None:
    """Without GRACE PERIOD ksqlDB joins streams with Kafka Streams' old join windows: a
    record that meets nothing gives its null-padded row as it comes, a later match its
    joined row too (with GRACE PERIOD the padded row waits for the window to close)."""
    streams = [
        f"CREATE STREAM {n} (ID INT KEY, V BIGINT) WITH (kafka_topic='{n.lower()}', "
        "value_format='JSON')"
        for n in ("P", "Q", "R")
    ]
    plan = planned(
        *streams, "CREATE STREAM O AS SELECT ROWKEY AS K, p.V, q.V, r.V FROM P "
        "FULL JOIN Q WITHIN 2 SECONDS ON P.ID = Q.ID FULL JOIN R WITHIN 4 SECONDS "
        "ON P.ID = R.ID",
    )  # fmt: skip
    records: list[Record] = [
        ("p", 7, {"V": 1}, 1000),
        ("q", 7, {"V": 2}, 1500),
        ("r", 8, {"V": 3}, 2000),  # nothing with key 8 on the left: its row at once
        # p's record is 8 s away: Q's row alone, whose P.ID is null: the next join (on
        # P.ID) drops it, a null key joining nothing
        ("q", 7, {"V": 4}, 9000),
        ("p", 7, {"V": 5}, 9500),  # meets the last q
    ]
    assert run(plan, records) == [
        (7, {"P_V": 1, "Q_V": None, "R_V": None}, 1000),
        (7, {"P_V": 1, "Q_V": 2, "R_V": None}, 1500),
        (8, {"P_V": None, "Q_V": None, "R_V": 3}, 2000),
        (7, {"P_V": 5, "Q_V": 4, "R_V": None}, 9500),
    ]


# ---- GROUP BY over a join ---------------------------------------------------------------


def test_group_by_over_a_stream_table_join() -> None:
    plan = planned(
        S1,
        T2,
        "CREATE TABLE per_value AS SELECT T2.V0, COUNT(*) AS N, SUM(S1.V0) AS TOTAL "
        "FROM S1 JOIN T2 ON S1.ID = T2.ID GROUP BY T2.V0",
    )
    assert plan.kind == "TABLE" and [s.kind for s in stages(plan)] == ["join", "aggregate"]
    records: list[Record] = [
        ("right", 1, {"V0": 7}, 0),
        ("right", 2, {"V0": 7}, 1),
        ("left", 1, {"V0": 10}, 2),
        ("left", 2, {"V0": 5}, 3),
        ("left", 3, {"V0": 1}, 4),  # no T2 row: not joined, not counted
    ]
    assert run(plan, records) == [
        (7, {"N": 1, "TOTAL": 10}, 2),
        (7, {"N": 2, "TOTAL": 15}, 3),
    ]


def test_group_by_over_a_table_table_join_undoes_changed_rows() -> None:
    plan = planned(
        T1,
        T2.replace("V0 INT", "V0 BIGINT"),
        "CREATE TABLE per_region AS SELECT T2.V0 AS REGION, COUNT(*) AS N "
        "FROM T1 JOIN T2 ON T1.ID = T2.ID GROUP BY T2.V0",
    )
    assert [s.kind for s in stages(plan)] == ["join", "regroup", "aggregate"]
    records: list[Record] = [
        ("left", 1, {"V0": 0}, 0),
        ("right", 1, {"V0": 9}, 1),
        ("left", 2, {"V0": 0}, 2),
        ("right", 2, {"V0": 9}, 3),
        ("right", 1, {"V0": 8}, 4),  # key 1 moves from region 9 to 8
        ("left", 2, None, 5),  # key 2's joined row goes: region 9 counts none
    ]
    assert run(plan, records) == [
        (9, {"N": 1}, 1),
        (9, {"N": 2}, 3),
        (9, {"N": 1}, 4),
        (8, {"N": 1}, 4),
        (9, {"N": 0}, 5),
    ]


# ---- the planner ------------------------------------------------------------------------


def test_n_way_and_foreign_key_schemas_are_ksqldbs() -> None:
    star = planned(
        S1, T2, T3, "CREATE STREAM OUTPUT AS SELECT * FROM S1 JOIN T2 ON S1.ID = T2.ID "
        "JOIN T3 ON S1.ID = T3.ID",
    )  # fmt: skip
    assert [(p.name, p.namespace) for p in star.projection] == [
        ("S1_ID", "KEY"), ("S1_K", "VALUE"), ("S1_V0", "VALUE"), ("T2_ID", "VALUE"),
        ("T2_V0", "VALUE"), ("T3_ID", "VALUE"), ("T3_V0", "VALUE"),
    ]  # fmt: skip
    keyed_by_the_middle = planned(
        S1, T2, T3, "CREATE STREAM OUTPUT AS SELECT T2.ID, s1.V0 FROM S1 "
        "JOIN T2 ON S1.ID = T2.ID JOIN T3 ON T3.ID = S1.ID",
    )  # fmt: skip
    assert keyed_by_the_middle.key_columns[0].name == "T2_ID"
    both = planned(
        LEFT_TABLE,
        RIGHT_TABLE,
        "CREATE TABLE output AS SELECT lt.*, rt.*, lt.name AS name_alias FROM left_table AS lt "
        "LEFT JOIN right_table AS rt ON foreign_key = r_id",
    )
    assert [p.name for p in both.projection] == [
        "LT_L_ID", "LT_NAME", "LT_FOREIGN_KEY", "RT_R_ID", "RT_F1", "RT_F2", "NAME_ALIAS"
    ]  # fmt: skip
    assert [p.name for p in both.key_columns] == ["LT_L_ID"]


@pytest.mark.parametrize(
    ("statements", "message"),
    [
        (
            [S1, T2, T3, "CREATE STREAM O AS SELECT s1.V0, t2.V0, t3.V0 FROM S1 "
             "JOIN T2 ON S1.ID = T2.ID JOIN T3 ON S1.ID = T3.ID"],
            "must include the join expressions S1.ID, T2.ID or T3.ID in its projection",
        ),
        (
            [S1, T2, T3, "CREATE STREAM O AS SELECT s1.V0 FROM S1 "
             "JOIN T2 ON S1.ID = T2.ID JOIN T3 ON S1.ID + 1 = T3.ID"],
            "must include the join expression T3.ID in its projection",
        ),
        (
            [S1, "CREATE STREAM O AS SELECT * FROM S1 a JOIN S1 b WITHIN 1 HOUR ON a.id = b.id"],
            "Can not join 'S1' to 'S1': self joins are not yet supported.",
        ),
        (
            [S1, T2, "CREATE STREAM O AS SELECT * FROM S1 JOIN T2 ON S1.ID = T2.ID "
             "JOIN T2 ON S1.V0 = T2.V0"],
            "N-way joins do not support multiple occurrences of the same source. Source: 'T2'",
        ),
        (
            [S1, T2, T3, "CREATE STREAM O AS SELECT * FROM S1 JOIN T2 ON S1.ID = T2.ID "
             "JOIN T3 ON S1.ID = T2.ID"],
            "A join criteria is expected to reference the source (`T3`) in the FROM clause, "
            "instead the right source references `T2` and the left source references `S1`",
        ),
        (
            [S1, T2, T3, "CREATE STREAM O AS SELECT * FROM T2 JOIN T3 ON T2.ID = T3.ID "
             "JOIN S1 ON T2.ID = S1.ID"],
            "Invalid join order: table-stream joins are not supported; only stream-table "
            "joins. Got T2 [INNER] JOIN S1.",
        ),
        (
            [LEFT_TABLE, RIGHT_TABLE, "CREATE TABLE O AS SELECT l_id, f1 FROM left_table "
             "RIGHT JOIN right_table ON foreign_key = r_id"],
            "RIGHT OUTER JOIN on a foreign key is not supported",
        ),
        (
            [LEFT_TABLE, RIGHT_TABLE, "CREATE TABLE O AS SELECT f1, foreign_key FROM left_table "
             "JOIN right_table ON foreign_key = r_id"],
            "Primary key column missing in projection. For foreign-key table-table joins, the "
            "projection must include all primary key columns from the left input table "
            "(`LEFT_TABLE`). Missing column: `L_ID`.",
        ),
        (
            [T1, T2, "SELECT * FROM T1 JOIN T2 ON T2.V0 = T1.ID EMIT CHANGES"],
            "Invalid join condition: table-table joins require to join on the primary key of "
            "the right input table. Got T2.V0 = T1.ID.",
        ),
        (
            [LEFT_TABLE, RIGHT_TABLE, "CREATE TABLE O AS SELECT l_id, l_id AS again, f1 FROM "
             "left_table JOIN right_table ON foreign_key = r_id"],
            "The projection contains a key column (`LEFT_TABLE_L_ID`) more than once, aliased "
            "as: L_ID and AGAIN.",
        ),
    ],
)  # fmt: skip
def test_joins_ksqldb_refuses(statements: list[str], message: str) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        planned(*statements)
    assert message in str(refused.value)


# ---- the join's key column, chosen from the projection -----------------------------------

S2 = "CREATE STREAM S2 (ID INT KEY, K INT, V0 INT) WITH (kafka_topic='right', value_format='JSON')"
T4 = "CREATE TABLE T4 (ID INT PRIMARY KEY, V0 INT) WITH (kafka_topic='right3', format='JSON')"


def schema(plan: QueryPlan) -> list[str]:
    """The plan's columns as ksqlDB's schema lists them: the key first."""
    return [f"{p.name}{' KEY' if p.namespace == 'KEY' else ''}" for p in plan.projection]


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        # the left source's column keys the result wherever the SELECT names it
        ("b.*, a.V0, a.ID", ["A_ID KEY", "B_ID", "B_K", "B_V0", "A_V0"]),
        ("b.*, a.*", ["A_ID KEY", "B_ID", "B_K", "B_V0", "A_K", "A_V0"]),
        ("*", ["A_ID KEY", "A_K", "A_V0", "B_ID", "B_K", "B_V0"]),
        # the right's when only it is named, under its alias if it has one
        ("b.ID, a.V0", ["B_ID KEY", "A_V0"]),
        ("b.*, a.V0", ["B_ID KEY", "B_K", "B_V0", "A_V0"]),
        ("b.ID AS k, a.V0", ["K KEY", "A_V0"]),
        ("a.ID AS k, b.ID AS other", ["K KEY", "OTHER"]),
    ],
)
def test_a_joins_key_is_the_first_condition_column_the_select_names(
    select: str, expected: list[str]
) -> None:
    plan = planned(
        S1, S2, f"CREATE STREAM O AS SELECT {select} FROM S1 a JOIN S2 b WITHIN 10 SECONDS "
        "ON b.ID = a.ID",
    )  # fmt: skip
    assert schema(plan) == expected


def test_an_expression_equal_to_the_join_key_is_a_value() -> None:
    plan = planned(
        S1, S2, "CREATE STREAM O AS SELECT b.ID + 1 AS next, a.ID FROM S1 a JOIN S2 b "
        "WITHIN 10 SECONDS ON a.ID = b.ID + 1",
    )  # fmt: skip
    assert schema(plan) == ["A_ID KEY", "NEXT"]


def test_an_n_way_joins_key_columns_are_those_equal_to_the_last_joins_key() -> None:
    # the second join's key (S1.K) equals neither side of the third's: the first join's
    # columns are not the result's key, though the third joins on one of them
    chain = "FROM S1 JOIN T2 ON S1.ID = T2.ID JOIN T3 ON S1.K = T3.ID JOIN T4 ON S1.ID = T4.ID"
    plan = planned(S1, T2, T3, T4, f"CREATE STREAM O AS SELECT T4.ID, S1.ID AS I {chain}")
    assert schema(plan) == ["I KEY", "T4_ID"]
    with pytest.raises(KsqlStatementError) as refused:
        planned(S1, T2, T3, T4, f"CREATE STREAM O AS SELECT T2.ID, S1.V0 {chain}")
    assert "must include the join expressions S1.ID or T4.ID in its projection" in str(
        refused.value
    )


def test_a_joins_key_column_selected_twice_is_refused_under_its_joined_name() -> None:
    with pytest.raises(KsqlStatementError) as refused:
        planned(
            S1, S2, "CREATE STREAM O AS SELECT a.ID AS X, b.V0, a.ID AS W FROM S1 a JOIN S2 b "
            "WITHIN 10 SECONDS ON a.ID = b.ID",
        )  # fmt: skip
    assert "The projection contains a key column (`A_ID`) more than once, aliased as: W and X." in (
        str(refused.value)
    )


# ---- a filter after a table-table join ----------------------------------------------------


def test_a_filter_after_a_table_table_join_tombstones_only_rows_it_passed_before() -> None:
    plan = planned(
        T1,
        T2,
        "CREATE TABLE OUTPUT AS SELECT T1.ID, T1.V0 A, T2.V0 B FROM T1 "
        "JOIN T2 ON T1.ID = T2.ID WHERE T1.V0 > 10 AND T2.V0 > 5",
    )
    records: list[Record] = [
        ("left", 1, {"V0": 1}, 0),  # no right row: no result
        ("right", 1, {"V0": 2}, 10),  # a result the filter drops, never passed: nothing
        ("left", 1, {"V0": 50}, 20),  # still dropped (B): nothing
        ("right", 1, {"V0": 7}, 30),  # passes
        ("left", 1, {"V0": 3}, 40),  # passed before, fails now: a tombstone
        ("left", 1, {"V0": 4}, 50),  # failed before and now: nothing
        ("right", 1, None, 60),  # the result goes, its last row failed: nothing
        ("left", 2, {"V0": 20}, 70),
        ("right", 2, {"V0": 9}, 80),  # passes
        ("right", 2, None, 90),  # the result goes, its last row passed: a tombstone
    ]
    assert run(plan, records) == [
        (1, {"A": 50, "B": 7}, 30),
        (1, None, 40),
        (2, {"A": 20, "B": 9}, 80),
        (2, None, 90),
    ]


def test_a_filter_after_a_left_table_join_sees_the_old_row_with_the_right_side_null() -> None:
    plan = planned(
        T1,
        T2,
        "CREATE TABLE OUTPUT AS SELECT T1.ID, T1.V0 A, T2.V0 B FROM T1 "
        "LEFT JOIN T2 ON T1.ID = T2.ID WHERE T2.V0 IS NULL",
    )
    records: list[Record] = [
        ("left", 1, {"V0": 1}, 0),  # passes: no right row
        ("right", 1, {"V0": 2}, 10),  # fails now, passed before: a tombstone
        ("right", 1, {"V0": 3}, 20),  # failed before and now: nothing
        ("right", 1, None, 30),  # passes again
    ]
    assert run(plan, records) == [
        (1, {"A": 1, "B": None}, 0),
        (1, None, 10),
        (1, {"A": 1, "B": None}, 30),
    ]


def test_a_join_on_one_of_the_left_tables_key_columns_is_on_a_foreign_key() -> None:
    """A left table keyed by two columns, joined on one of them: a foreign-key join whose
    result keeps the left's whole key (ksqlDB's fk-join.json cases)."""
    plan = planned(
        "CREATE TABLE left_table (l_id BIGINT PRIMARY KEY, l_fk BIGINT PRIMARY KEY, "
        "name VARCHAR) WITH (kafka_topic='left_topic', format='JSON')",
        RIGHT_TABLE,
        "CREATE TABLE output AS SELECT l_id, l_fk, r_id, name, f1 FROM left_table "
        "JOIN right_table ON l_fk = r_id",
    )
    assert plan.join is not None and plan.join.foreign_key
    assert [s.kind for s in stages(plan)] == ["fk-route", "fk-join", "order"]
    assert [p.name for p in plan.projection if p.namespace == "KEY"] == ["L_ID", "L_FK"]
    outputs = run(
        plan,
        [
            ("right_topic", 0, {"F1": "blah", "F2": 4}, 0),
            ("left_topic", {"L_ID": 1, "L_FK": 0}, {"NAME": "zero"}, 10000),
            ("right_topic", 0, None, 17000),
        ],
    )
    assert outputs == [
        ([1, 0], {"R_ID": 0, "NAME": "zero", "F1": "blah"}, 10000),
        ([1, 0], None, 17000),
    ]
