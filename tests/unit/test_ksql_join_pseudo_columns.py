"""A join's pseudo columns and window bounds per side, and ksqlDB's refusals of joins
once it builds their streams (partition counts, windowed keys repartitioned), record by
record in one process (``strom.ksql.join_flow`` over ``strom.ksql.operators``). The
expected records and messages are those ksqlDB gives for the same statements. No broker."""

from __future__ import annotations

from typing import Any

import pytest

from strom.ksql import statements as st
from strom.ksql.join_flow import JoinFlow
from strom.ksql.metastore import KsqlStatementError, Metastore
from strom.ksql.operators import Operators
from strom.ksql.parser import parse_statement
from strom.ksql.planner import QueryPlan, SinkRequest, plan_query
from strom.ksql.readers import Row

S1 = "CREATE STREAM S1 (ID INT KEY, V0 BIGINT) WITH (kafka_topic='left', value_format='JSON')"
S2 = "CREATE STREAM S2 (ID INT KEY, V1 BIGINT) WITH (kafka_topic='right', value_format='JSON')"
T2 = "CREATE TABLE T2 (ID INT PRIMARY KEY, V0 BIGINT) WITH (kafka_topic='right', format='JSON')"
T3 = "CREATE TABLE T3 (ID INT PRIMARY KEY, V0 BIGINT) WITH (kafka_topic='right2', format='JSON')"


def windowed(name: str, topic: str, window: str, key_format: str = "KAFKA") -> str:
    return (
        f"CREATE STREAM {name} (ID INT KEY, V INT) WITH (kafka_topic='{topic}', "
        f"key_format='{key_format}', value_format='JSON', {window})"
    )


HOPPING = "WINDOW_TYPE='Hopping', WINDOW_SIZE='5 SECONDS'"
TUMBLING = "WINDOW_TYPE='Tumbling', WINDOW_SIZE='2 SECONDS'"


def planned(*statements: str, partitions: dict[str, int] | None = None) -> QueryPlan:
    """The plan of the last statement over the sources the others create (``partitions``:
    the topics' partition counts, for the planner's check of a join's)."""
    metastore = Metastore()
    for text in statements[:-1]:
        created = parse_statement(text)
        assert isinstance(created, st.CreateSource)
        metastore.put_source(metastore.source_from_statement(created, text))
    text = statements[-1]
    statement = parse_statement(text)
    counts = None if partitions is None else partitions.get
    if isinstance(statement, st.Query):
        return plan_query(statement, metastore, None, text, counts)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
    return plan_query(statement.query, metastore, request, text, counts)


Record = tuple[str, Any, dict[str, Any], int, int]  # topic, key, value, time, partition


def run(
    plan: QueryPlan, records: list[Record], windows: list[tuple[int, int]] | None = None
) -> list[tuple[Any, Any, int, tuple[int, int] | None]]:
    """The records through the plan's join flow (each its offset in ``records`` and, for
    windowed sources, its window): (key, value, time, window) of each output."""
    flow = JoinFlow(Operators(plan))
    states: dict[tuple[int, Any], dict[Any, Any]] = {}
    stream_time = -1
    out: list[tuple[Any, Any, int, tuple[int, int] | None]] = []
    for offset, (topic, key, value, timestamp, partition) in enumerate(records):
        stream_time = max(stream_time, timestamp)
        for index, source in enumerate(plan.sources):
            if source.topic != topic:
                continue
            columns = {"ID": key, **value}
            columns.update(ROWTIME=timestamp, ROWPARTITION=partition, ROWOFFSET=offset)
            if windows is not None:
                columns["WINDOWSTART"], columns["WINDOWEND"] = windows[offset]
            for change in flow.process(index, Row(columns), states, stream_time):
                [key_value] = change.key.values()
                out.append((key_value, change.value, change.timestamp, change.window))
    return out


def test_each_side_of_a_chain_has_its_own_rowtime() -> None:
    plan = planned(
        S1,
        T2,
        T3,
        "CREATE STREAM OUTPUT AS SELECT *, S1.ROWTIME, T2.ROWTIME, T3.ROWTIME FROM S1 "
        "JOIN T2 ON S1.ID = T2.ID JOIN T3 ON S1.ID = T3.ID",
    )
    assert [p.name for p in plan.projection] == [
        "S1_ID", "S1_V0", "T2_ID", "T2_V0", "T3_ID", "T3_V0",
        "S1_ROWTIME", "T2_ROWTIME", "T3_ROWTIME",
    ]  # fmt: skip
    records: list[Record] = [
        ("right2", 0, {"V0": 3}, 10, 0),
        ("right", 0, {"V0": 2}, 11, 0),
        ("left", 0, {"V0": 1}, 12, 0),
    ]
    assert run(plan, records) == [
        (
            0,
            {"S1_V0": 1, "T2_ID": 0, "T2_V0": 2, "T3_ID": 0, "T3_V0": 3,
             "S1_ROWTIME": 12, "T2_ROWTIME": 11, "T3_ROWTIME": 10},
            12,
            None,
        )
    ]  # fmt: skip


def test_each_side_has_its_own_partition_and_offset() -> None:
    plan = planned(
        S1,
        S2,
        "CREATE STREAM OUTPUT AS SELECT S1.ID, S1.ROWPARTITION AS LP, S2.ROWPARTITION AS RP, "
        "S1.ROWOFFSET AS LO, S2.ROWOFFSET, S2.ROWTIME FROM S1 LEFT JOIN S2 WITHIN 1 SECOND "
        "ON S1.ID = S2.ID",
    )
    records: list[Record] = [
        ("left", 0, {"V0": 1}, 100, 1),  # no S2 record yet: its columns null
        ("right", 0, {"V1": 2}, 200, 0),
    ]
    assert [value for _, value, _, _ in run(plan, records)] == [
        {"LP": 1, "RP": None, "LO": 0, "S2_ROWOFFSET": None, "S2_ROWTIME": None},
        {"LP": 1, "RP": 0, "LO": 0, "S2_ROWOFFSET": 1, "S2_ROWTIME": 200},
    ]


def test_a_right_join_row_without_its_left_side_has_the_rights_time() -> None:
    plan = planned(
        S1,
        S2,
        "CREATE STREAM OUTPUT AS SELECT S2.ID, S1.ROWTIME AS LT, S2.ROWTIME AS RT FROM S1 "
        "RIGHT JOIN S2 WITHIN 1 SECOND ON S1.ID = S2.ID",
    )
    assert run(plan, [("right", 0, {"V1": 2}, 200, 0)]) == [(0, {"LT": None, "RT": 200}, 200, None)]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "CREATE STREAM O AS SELECT S1.ID, ROWTIME AS T FROM S1 JOIN T2 ON S1.ID = T2.ID",
            "Column 'ROWTIME' is ambiguous. Could be S1.ROWTIME or T2.ROWTIME.",
        ),
        (  # ambiguous before it is a reserved name, as ksqlDB's sanitizer finds it first
            "CREATE STREAM O AS SELECT S1.ID, ROWTIME FROM S1 JOIN T2 ON S1.ID = T2.ID",
            "Column 'ROWTIME' is ambiguous. Could be S1.ROWTIME or T2.ROWTIME.",
        ),
        (
            "CREATE STREAM O AS SELECT S1.ID FROM S1 JOIN T2 ON S1.ID = T2.ID "
            "JOIN T3 ON S1.ID = T3.ID WHERE ROWOFFSET > 1",
            "Column 'ROWOFFSET' is ambiguous. Could be S1.ROWOFFSET, T2.ROWOFFSET or T3.ROWOFFSET.",
        ),
        (
            "CREATE STREAM O AS SELECT S1.ID, S1.ROWTIME AS ROWTIME FROM S1 "
            "JOIN T2 ON S1.ID = T2.ID",
            "Reserved column name in select: `ROWTIME`. Please remove or alias the column.",
        ),
    ],
)
def test_pseudo_columns_in_joins_ksqldb_refuses(query: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        planned(S1, T2, T3, query)
    assert message in str(refused.value)


def test_windowed_sides_join_records_of_the_same_window() -> None:
    plan = planned(
        windowed("W1", "left", HOPPING, "JSON_SR"),
        windowed("W2", "right", TUMBLING, "JSON_SR"),
        "CREATE STREAM OUTPUT AS SELECT *, W1.ROWTIME, W2.ROWTIME FROM W1 "
        "JOIN W2 WITHIN 1 MINUTE ON W1.ID = W2.ID",
    )
    assert [p.name for p in plan.projection] == [
        "W1_ID", "W1_WINDOWSTART", "W1_WINDOWEND", "W1_V",
        "W2_ID", "W2_WINDOWSTART", "W2_WINDOWEND", "W2_V", "W1_ROWTIME", "W2_ROWTIME",
    ]  # fmt: skip
    records: list[Record] = [
        ("left", 1, {"V": 1}, 0, 0),
        ("left", 1, {"V": 2}, 1000, 0),
        ("right", 1, {"V": 4}, 0, 0),
        ("right", 1, {"V": 5}, 2000, 0),
        ("left", 1, {"V": 3}, 2000, 0),
    ]
    windows = [(0, 5000), (1000, 6000), (0, 2000), (2000, 4000), (2000, 7000)]
    assert run(plan, records, windows) == [
        (
            1,
            {"W1_WINDOWSTART": 0, "W1_WINDOWEND": 5000, "W1_V": 1, "W2_ID": 1,
             "W2_WINDOWSTART": 0, "W2_WINDOWEND": 2000, "W2_V": 4, "W1_ROWTIME": 0,
             "W2_ROWTIME": 0},
            0,
            (0, 5000),  # the left's window
        ),
        (
            1,
            {"W1_WINDOWSTART": 2000, "W1_WINDOWEND": 7000, "W1_V": 3, "W2_ID": 1,
             "W2_WINDOWSTART": 2000, "W2_WINDOWEND": 4000, "W2_V": 5, "W1_ROWTIME": 2000,
             "W2_ROWTIME": 2000},
            2000,
            (2000, 7000),
        ),
    ]  # fmt: skip


REPARTITION = (
    "Implicit repartitioning of windowed sources is not supported. See "
    "https://github.com/confluentinc/ksql/issues/4385."
)


@pytest.mark.parametrize(
    ("statements", "message"),
    [
        (  # a time window's key in another window, rewritten in the left's
            [windowed("W1", "left", HOPPING), windowed("W2", "right", TUMBLING),
             "CREATE STREAM O AS SELECT *, W1.ROWTIME, W2.ROWTIME FROM W1 "
             "JOIN W2 WITHIN 1 MINUTE ON W1.ID = W2.ID"],
            REPARTITION,
        ),
        (  # joined on a value column: repartitioned, whatever its format
            [windowed("W1", "left", HOPPING, "JSON_SR"),
             windowed("W2", "right", TUMBLING, "JSON_SR"),
             "CREATE STREAM O AS SELECT *, W1.ROWTIME, W2.ROWTIME FROM W1 "
             "JOIN W2 WITHIN 1 MINUTE ON W1.ID = W2.V"],
            REPARTITION,
        ),
        (  # the projection's refusal comes first: ksqlDB's planner's, before its streams
            [windowed("W1", "left", HOPPING), windowed("W2", "right", TUMBLING),
             "CREATE STREAM O AS SELECT W1.V FROM W1 JOIN W2 WITHIN 1 MINUTE ON W1.ID = W2.ID"],
            "Key missing from projection (ie, SELECT).",
        ),
    ],
)  # fmt: skip
def test_windowed_joins_ksqldb_refuses(statements: list[str], message: str) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        planned(*statements)
    assert message in str(refused.value)


def test_the_same_windows_in_the_same_key_format_are_joined() -> None:
    plan = planned(
        windowed("W1", "left", TUMBLING),
        windowed("W2", "right", TUMBLING),
        "CREATE STREAM O AS SELECT W1.ID, W2.V FROM W1 JOIN W2 WITHIN 1 MINUTE ON W1.ID = W2.ID",
    )
    assert plan.join is not None and not plan.join.windowed_rekey


def test_a_chain_whose_partition_counts_differ_is_refused_at_the_last_join_first() -> None:
    query = "CREATE STREAM O AS SELECT * FROM S1 JOIN T2 ON S1.ID = T2.ID JOIN T3 ON S1.ID = T3.ID"
    with pytest.raises(KsqlStatementError) as refused:
        planned(S1, T2, T3, query, partitions={"left": 2, "right": 1, "right2": 2})
    # the last join's left side counts its right-most source's (T2's) and is named by its
    # left-most's (S1)
    assert str(refused.value) == (
        "Can't join `S1` with `T3` since the number of partitions don't match. `S1` "
        "partitions = 1; `T3` partitions = 2. Please repartition either one so that the "
        "number of partitions match."
    )
    with pytest.raises(KsqlStatementError) as refused:
        planned(S1, T2, T3, query, partitions={"left": 2, "right": 1, "right2": 1})
    assert "Can't join `S1` with `T2` since" in str(refused.value)
    planned(S1, T2, T3, query, partitions={"left": 3, "right": 3, "right2": 3})


def test_partition_counts_come_before_a_windowed_repartition() -> None:
    statements = [
        windowed("W1", "left", HOPPING),
        windowed("W2", "right", TUMBLING),
        "CREATE STREAM O AS SELECT * FROM W1 JOIN W2 WITHIN 1 MINUTE ON W1.ID = W2.ID",
    ]
    with pytest.raises(KsqlStatementError) as refused:
        planned(*statements, partitions={"left": 1, "right": 2})
    assert "since the number of partitions don't match" in str(refused.value)


def test_a_foreign_key_join_takes_any_partition_counts() -> None:
    left = (
        "CREATE TABLE L (L_ID BIGINT PRIMARY KEY, FK BIGINT) "
        "WITH (kafka_topic='left', value_format='JSON')"
    )
    right = (
        "CREATE TABLE R (R_ID BIGINT PRIMARY KEY, F1 STRING) "
        "WITH (kafka_topic='right', value_format='JSON')"
    )
    plan = planned(
        left,
        right,
        "CREATE TABLE O AS SELECT L_ID, F1 FROM L JOIN R ON FK = R_ID",
        partitions={"left": 1, "right": 2},
    )
    assert plan.join is not None and plan.join.foreign_key
