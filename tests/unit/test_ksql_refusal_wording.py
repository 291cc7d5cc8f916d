"""ksqlDB's words for refusals found by its query-validation cases
(``bench/ksql_conformance.py``): the "Did you mean" hint after an unknown source, a
column name given twice (with its type), aggregations a table cannot take, persistent
queries over windowed tables and a TIMESTAMP column of the wrong type. No broker."""

from __future__ import annotations

import pytest

from strom.ksql import expressions as ex
from strom.ksql import statements as st
from strom.ksql.inserts import insertable
from strom.ksql.metastore import KsqlStatementError, Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.planner import SinkRequest, plan_query


def store(*texts: str) -> Metastore:
    metastore = Metastore()
    for text in texts:
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateSource)
        metastore.put_source(metastore.source_from_statement(statement, text))
    return metastore


def refusal(metastore: Metastore, text: str) -> str:
    statement = parse_statement(text)
    with pytest.raises(KsqlStatementError) as refused:
        if isinstance(statement, st.Query):
            plan_query(statement, metastore)
        else:
            assert isinstance(statement, st.CreateAsSelect)
            request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
            plan_query(statement.query, metastore, request, text)
    return str(refused.value)


UPPER = "CREATE STREAM INPUT (K INT KEY, V INT) WITH (kafka_topic='a', value_format='JSON');"
LOWER = "CREATE STREAM `input` (K INT KEY, V INT) WITH (kafka_topic='b', value_format='JSON');"
TABLE = "CREATE TABLE `Input` (K INT PRIMARY KEY, V INT) WITH (kafka_topic='c', format='JSON');"


def test_an_unknown_source_names_the_ones_differing_only_in_case() -> None:
    with pytest.raises(KsqlStatementError) as refused:
        insertable(store(UPPER), "input")
    assert str(refused.value) == (
        "Cannot insert values into an unknown stream/table: `input`\n"
        "Did you mean INPUT? Hint: try removing double quotes from the source name."
    )
    with pytest.raises(KsqlStatementError) as refused:
        insertable(store(LOWER), "INPUT")
    assert str(refused.value).endswith(
        '\nDid you mean "input"? Hint: wrap the source name in double quotes to make it '
        "case-sensitive."
    )
    three = store(UPPER, LOWER, TABLE)
    assert three.alternatives("INPUt") == (
        '\nDid you mean "INPUT" (STREAM), "Input" (TABLE), or "input" (STREAM)? Hint: wrap '
        "the source name in double quotes to make it case-sensitive."
    )
    assert three.alternatives("INPUt", "TABLE") == (
        '\nDid you mean "Input"? Hint: wrap the source name in double quotes to make it '
        "case-sensitive."
    )
    assert store(UPPER).alternatives("OTHER") == ""
    assert refusal(store(LOWER), "SELECT * FROM INPUT EMIT CHANGES;").endswith(
        'INPUT does not exist.\nDid you mean "input"? Hint: wrap the source name in double '
        "quotes to make it case-sensitive."
    )


def test_a_name_given_twice_is_refused_with_the_value_columns_type() -> None:
    metastore = store(
        "CREATE STREAM TEST (ID INT KEY, data STRING) WITH (kafka_topic='t', value_format='JSON');"
    )
    assert refusal(
        metastore,
        "CREATE TABLE OUTPUT AS SELECT DATA AS COUNT, COUNT(*) AS COUNT FROM TEST GROUP BY DATA;",
    ) == ("Duplicate value columns found in schema: `COUNT` BIGINT")
    assert refusal(
        metastore, "CREATE STREAM O AS SELECT ID, DATA AS X, LEN(DATA) AS X FROM TEST;"
    ) == ("Duplicate value columns found in schema: `X` INTEGER")


def test_aggregations_over_a_table_take_only_functions_that_can_undo() -> None:
    metastore = store(
        "CREATE TABLE INPUT (ID BIGINT PRIMARY KEY, F0 INT, F1 BIGINT) "
        "WITH (kafka_topic='t', value_format='JSON');"
    )
    assert refusal(
        metastore,
        "CREATE TABLE OUTPUT AS SELECT ID, LATEST_BY_OFFSET(F0), MIN(F1), MAX(F1) FROM INPUT "
        "GROUP BY ID;",
    ) == (
        "The aggregation functions LATEST_BY_OFFSET, MIN and MAX cannot be applied to a table "
        "source, only to a stream source."
    )
    assert refusal(
        metastore, "CREATE TABLE O2 AS SELECT ID, COUNT(*), MAX(F1) FROM INPUT GROUP BY ID;"
    ) == (
        "The aggregation function MAX cannot be applied to a table source, only to a stream source."
    )
    statement = parse_statement(
        "CREATE TABLE O3 AS SELECT ID, COUNT(*), SUM(F1), AVG(F0), COLLECT_LIST(F0) FROM INPUT "
        "GROUP BY ID;"
    )
    assert isinstance(statement, st.CreateAsSelect)
    plan_query(statement.query, metastore, SinkRequest("O3", "TABLE", {}, None, 1))


def test_no_persistent_query_over_a_windowed_table() -> None:
    metastore = store(
        "CREATE TABLE INPUT (K STRING PRIMARY KEY, X INT) WITH (kafka_topic='t', "
        "value_format='JSON', WINDOW_TYPE='Session');"
    )
    assert refusal(metastore, "CREATE TABLE OUTPUT AS SELECT * FROM INPUT;") == (
        "KSQL does not support persistent queries on windowed tables."
    )
    statement = parse_statement("SELECT * FROM INPUT EMIT CHANGES;")
    assert isinstance(statement, st.Query)
    plan_query(statement, metastore)  # a push query may read one


def test_a_sinks_timestamp_column_must_be_a_time() -> None:
    metastore = store(
        "CREATE STREAM TEST (K STRING KEY, ID BIGINT, EVENT_TS INT, S STRING) "
        "WITH (kafka_topic='t', value_format='JSON');"
    )
    assert refusal(
        metastore,
        "CREATE STREAM TS WITH (timestamp='event_ts') AS SELECT K, ID, EVENT_TS FROM TEST;",
    ) == (
        "Timestamp column, `EVENT_TS`, should be LONG(INT64), TIMESTAMP, or a String with a "
        "timestamp_format specified."
    )
    assert refusal(
        metastore, "CREATE STREAM TS WITH (timestamp='s') AS SELECT K, S FROM TEST;"
    ) == (
        "A String timestamp field has been specified without also specifying the timestamp_format"
    )
    assert refusal(
        metastore,
        "CREATE STREAM TS WITH (timestamp='id', timestamp_format='yyyy') AS SELECT K, ID "
        "FROM TEST;",
    ) == (
        "'TIMESTAMP_FORMAT' set in the WITH clause can only be used when the timestamp column is "
        "of type STRING."
    )


WINDOWED = (
    "CREATE STREAM S1 (K INT KEY, ID INT, V BIGINT) WITH (kafka_topic='l', value_format='JSON', "
    "WINDOW_TYPE='SESSION');",
    "CREATE STREAM S2 (K INT KEY, ID INT, V BIGINT) WITH (kafka_topic='r', value_format='JSON');",
    "CREATE STREAM S3 (K INT KEY, ID INT, V BIGINT) WITH (kafka_topic='t', value_format='JSON', "
    "WINDOW_TYPE='TUMBLING', WINDOW_SIZE='2 SECONDS');",
    "CREATE STREAM S4 (K INT KEY, ID INT, V BIGINT) WITH (kafka_topic='s', value_format='JSON', "
    "WINDOW_TYPE='SESSION');",
)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "SELECT * FROM S1 JOIN S2 WITHIN 1 MINUTE ON S1.K = S2.K",
            "Can not join windowed source to non-windowed source.\n`S1` is SESSION windowed\n"
            "`S2` is not windowed",
        ),
        (  # the sides as the condition writes them
            "SELECT * FROM S1 JOIN S2 WITHIN 1 MINUTE ON S2.K = S1.K",
            "Can not join windowed source to non-windowed source.\n`S2` is not windowed\n"
            "`S1` is SESSION windowed",
        ),
        (
            "SELECT * FROM S1 JOIN S3 WITHIN 1 MINUTE ON S1.K = S3.K",
            "Incompatible windowed sources.\nLeft source: SESSION\nRight source: TUMBLING\n"
            "Session windowed sources can only be joined to other session windowed sources, and "
            "may still not result in expected behaviour as session bounds must be an exact match "
            "for the join to work\nHopping and tumbling windowed sources can only be joined to "
            "other hopping and tumbling windowed sources",
        ),
        (
            "SELECT * FROM S1 JOIN S4 WITHIN 1 MINUTE ON S1.ID = S4.ID",
            "Implicit repartitioning of windowed sources is not supported. See "
            "https://github.com/confluentinc/ksql/issues/4385.",
        ),
        (  # the condition is checked before the missing WITHIN
            "SELECT * FROM S2 JOIN S4 T ON T.ID = 0",
            "Invalid comparison expression '0' in join '(T.ID = 0)'. Each side of the join "
            "comparision must contain references from exactly one source.",
        ),
    ],
)
def test_join_refusals_of_windows_and_conditions_come_first(query: str, message: str) -> None:
    assert refusal(store(*WINDOWED), query + " EMIT CHANGES;") == message


def test_a_window_bound_selected_outside_a_window_is_a_reserved_name_first() -> None:
    metastore = store(
        "CREATE STREAM INPUT (K STRING KEY, F0 INT) WITH (kafka_topic='i', value_format='JSON');"
    )
    assert refusal(
        metastore,
        "CREATE TABLE OUTPUT AS SELECT K, WINDOWSTART, COUNT(*) AS COUNT FROM INPUT "
        "GROUP BY WINDOWSTART;",
    ) == ("Reserved column name in select: `WINDOWSTART`. Please remove or alias the column.")
    assert refusal(metastore, "SELECT NOPE FROM INPUT EMIT CHANGES;") == (
        "Line: 1, Col: 8: SELECT column 'NOPE' cannot be resolved."
    )


def test_a_stream_table_join_on_part_of_a_multi_column_key_is_not_on_the_key() -> None:
    metastore = store(
        "CREATE STREAM S (K STRING KEY, ID VARCHAR) WITH (kafka_topic='s', format='JSON');",
        "CREATE TABLE T2 (K STRING PRIMARY KEY, K2 STRING PRIMARY KEY, NAME STRING) "
        "WITH (kafka_topic='t', format='JSON');",
    )
    assert refusal(
        metastore, "CREATE STREAM OUTPUT AS SELECT S.K, NAME FROM S JOIN T2 T ON S.K = T.K;"
    ) == (
        "Invalid join condition: stream-table joins require to join on the table's primary key. "
        "Got S.K = T.K."
    )


def test_a_double_literal_overflowing_is_shown_with_its_sign() -> None:
    from strom.ksql.parser import KsqlSyntaxError

    for literal in ("1.7976931348623159E308", "-1.7976931348623160E308"):
        with pytest.raises(KsqlSyntaxError) as refused:
            parse_statement(f"SELECT K, {literal} FROM INPUT EMIT CHANGES;")
        assert str(refused.value).endswith(f"Number overflows DOUBLE: {literal}")
    statement = parse_statement("SELECT -1.5E308 FROM INPUT EMIT CHANGES;")
    assert isinstance(statement, st.Query)


def test_a_stream_joined_on_a_map_is_refused_naming_its_repartition_key() -> None:
    metastore = store(
        "CREATE STREAM L (ID STRING KEY, L0 MAP<STRING, INT>, L1 INT) "
        "WITH (kafka_topic='l', format='JSON');",
        "CREATE STREAM R (ID STRING KEY, R0 MAP<STRING, INT>, R1 INT) "
        "WITH (kafka_topic='r', format='JSON');",
    )
    assert refusal(
        metastore,
        "CREATE STREAM OUTPUT AS SELECT L.L0, L.ID, L1, R1 FROM L JOIN R WITHIN 11 SECONDS "
        "ON L.L0 = R.R0;",
    ) == (
        "Map keys, including types that contain maps, are not supported as they may lead to "
        "unexpected behavior due to inconsistent serialization. Key column name: `L_L0`. Column "
        "type: MAP<STRING, INTEGER>. See https://github.com/confluentinc/ksql/issues/6621 for "
        "more."
    )


def test_a_missing_timestamp_column_is_refused_before_a_missing_key() -> None:
    metastore = store(
        "CREATE STREAM TEST (K STRING KEY, ID BIGINT, EVENT_TS BIGINT) "
        "WITH (kafka_topic='t', value_format='JSON');"
    )
    assert refusal(
        metastore,
        "CREATE STREAM TS WITH (timestamp='invalid_ts') AS SELECT id, event_ts FROM test;",
    ) == ("The TIMESTAMP column set in the WITH clause does not exist in the schema: 'INVALID_TS'")


def test_partition_by_nothing_is_refused() -> None:
    metastore = store(
        "CREATE STREAM INPUT (ID INT KEY, NAME STRING) WITH (kafka_topic='i', format='JSON');"
    )
    assert refusal(
        metastore, "CREATE STREAM OUTPUT AS SELECT ID, NAME FROM INPUT PARTITION BY ();"
    ) == ("PARTITION BY requires at least one expression")


def test_group_by_and_partition_by_take_value_expressions_only() -> None:
    from strom.ksql.parser import KsqlSyntaxError

    for clause in ("GROUP BY DATA AND ID", "PARTITION BY DATA AND ID", "GROUP BY ID = 1"):
        with pytest.raises(KsqlSyntaxError) as refused:
            parse_statement(f"CREATE TABLE OUTPUT AS SELECT ID, COUNT(*) FROM TEST {clause};")
        assert "Syntax Error" in str(refused.value)
    statement = parse_statement(
        "CREATE TABLE OUTPUT AS SELECT ID + 1, COUNT(*) FROM TEST GROUP BY ID + 1, "
        "CASE WHEN ID > 1 THEN 'a' ELSE 'b' END;"
    )
    assert isinstance(statement, st.CreateAsSelect)
    assert statement.query.group_by is not None and len(statement.query.group_by) == 2


def test_null_as_a_type_is_a_syntax_error_at_it() -> None:
    from strom.ksql.parser import KsqlSyntaxError

    with pytest.raises(KsqlSyntaxError) as refused:
        parse_statement("CREATE STREAM OUTPUT AS SELECT K, CAST(ID AS NULL) FROM INPUT;")
    assert str(refused.value) == (
        "line 1:46: Syntax Error\nSyntax error at or near 'NULL' at line 1:46"
    )


def test_partition_by_one_sides_key_of_a_join_keeps_the_other_sides_as_a_value() -> None:
    metastore = store(
        "CREATE STREAM L (K STRING KEY, A STRING) WITH (kafka_topic='l', value_format='JSON');",
        "CREATE STREAM R (K STRING KEY, C STRING) WITH (kafka_topic='r', value_format='JSON');",
    )
    text = (
        "CREATE STREAM OUTPUT AS SELECT L.K AS LK, R.K FROM L JOIN R WITHIN 10 SECONDS "
        "ON L.K = R.K PARTITION BY L.K;"
    )
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    plan = plan_query(
        statement.query, metastore, SinkRequest("OUTPUT", "STREAM", {}, None, 1), text
    )
    assert plan.sink is not None
    assert [(c.name, c.namespace) for c in plan.sink.columns] == [("LK", "KEY"), ("R_K", "VALUE")]


def test_sum_list_sums_the_elements_of_every_list() -> None:
    from strom.ksql.aggregate_functions import aggregate_function

    metastore = store(
        "CREATE STREAM INPUT (ID STRING KEY, V ARRAY<INTEGER>) "
        "WITH (kafka_topic='t', value_format='JSON');"
    )
    text = "CREATE TABLE OUTPUT AS SELECT ID, SUM_LIST(V) AS S FROM INPUT GROUP BY ID;"
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    plan = plan_query(statement.query, metastore, SinkRequest("OUTPUT", "TABLE", {}, None, 1), text)
    assert plan.sink is not None
    assert [(c.name, str(c.type)) for c in plan.sink.columns] == [
        ("ID", "STRING"),
        ("S", "INTEGER"),
    ]
    function = aggregate_function("SUM_LIST", [ex.ArrayType(ex.PrimitiveType("INTEGER"))], [])
    assert function is not None and function.can_undo
    total = function.initial()
    for values in ([1, 1], [2, 2], None, [100, 100, None], [2**31 - 1]):
        total = function.add(total, values)
    assert total == 206 + 2**31 - 1 - 2**32  # an INTEGER's sum wraps, as Java's does
    assert function.undo(function.add(0, [1, 2]), [1, 2]) == 0
    doubles = aggregate_function("SUM_LIST", [ex.ArrayType(ex.PrimitiveType("DOUBLE"))], [])
    assert doubles is not None and doubles.add(doubles.initial(), [1.5, None, 2.0]) == 3.5
    with pytest.raises(KsqlStatementError):
        aggregate_function("SUM_LIST", [ex.ArrayType(ex.PrimitiveType("STRING"))], [])


def test_a_sources_string_timestamp_reads_as_stringtotimestamp_reads_it() -> None:
    from strom.ksql.readers import RecordError, RecordReader, SourceRecord

    metastore = store(
        "CREATE STREAM TEST (K STRING KEY, TS VARCHAR) WITH (kafka_topic='t', "
        "value_format='JSON', timestamp='ts', timestamp_format='yyyy-MM-dd''T''HH:mm:ss.SX');"
    )
    source = metastore.source("TEST")
    assert source is not None
    reader = RecordReader(source)
    row = reader.read(SourceRecord("t", 0, 0, 10, b"k", b'{"TS": "2019-08-27T13:31:09.2+0000"}'))
    assert row.timestamp == 1566912669200  # one digit of a second's fraction: 200 ms
    with pytest.raises(RecordError):
        reader.read(SourceRecord("t", 0, 1, 10, b"k", b'{"TS": "not a timestamp"}'))


def test_an_unknown_qualifier_is_named_before_an_ambiguous_column() -> None:
    metastore = store(
        "CREATE TABLE LT (ID BIGINT PRIMARY KEY, F1 BIGINT) WITH (kafka_topic='l', format='JSON');",
        "CREATE TABLE RT (ID BIGINT PRIMARY KEY, F2 BIGINT) WITH (kafka_topic='r', format='JSON');",
    )
    assert refusal(
        metastore, "CREATE TABLE OUTPUT AS SELECT F1, F2 FROM LT JOIN RT ON ID = UNKNOWN.ID;"
    ) == ("Failed to prepare statement: 'UNKNOWN' is not a valid stream/table name or alias.")


def test_topk_with_other_columns_keeps_structs_of_the_records() -> None:
    from strom.ksql.aggregate_functions import aggregate_function

    metastore = store(
        "CREATE STREAM TEST (ID BIGINT KEY, NAME VARCHAR, VALUE INTEGER) "
        "WITH (kafka_topic='t', value_format='JSON');"
    )
    text = "CREATE TABLE S2 AS SELECT ID, TOPK(VALUE, NAME, 3) AS TOPK FROM TEST GROUP BY ID;"
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    plan = plan_query(statement.query, metastore, SinkRequest("S2", "TABLE", {}, None, 1), text)
    assert plan.sink is not None
    assert str(plan.sink.columns[1].type) == "ARRAY<STRUCT<`sort_col` INTEGER, `col0` STRING>>"
    integer, string = ex.PrimitiveType("INTEGER"), ex.PrimitiveType("STRING")
    function = aggregate_function("TOPK", [integer, string], [2])
    assert function is not None
    top = function.initial()
    for value, name in ((0, "zero"), (100, "one"), (None, "skipped"), (100, "later"), (5, "x")):
        top = function.add(top, value, name)
    assert top == [{"sort_col": 100, "col0": "one"}, {"sort_col": 100, "col0": "later"}]


def test_type_parameters_parse_and_a_short_expectation_is_named_alone() -> None:
    from strom.ksql.parser import KsqlSyntaxError

    statement = parse_statement(
        "CREATE STREAM INPUT (K VARCHAR(STRING) KEY, V VARCHAR(STRING), N INT) "
        "WITH (kafka_topic='input', value_format='JSON');"
    )
    assert isinstance(statement, st.CreateSource)
    assert [str(e.type) for e in statement.elements] == ["STRING", "STRING", "INTEGER"]
    with pytest.raises(KsqlSyntaxError) as refused:
        parse_statement(
            "CREATE STREAM INPUT (K INT (KEY)) WITH (kafka_topic='i', value_format='JSON');"
        )
    assert str(refused.value) == "line 1:29: Syntax Error\nExpecting {'STRING', INTEGER_VALUE}"


def test_a_window_may_be_named() -> None:
    statement = parse_statement(
        "CREATE TABLE OUTPUT AS SELECT ID, COUNT(*) AS N FROM INPUT "
        "WINDOW nWINDOW SESSION (1 SECONDS) GROUP BY ID;"
    )
    assert isinstance(statement, st.CreateAsSelect)
    assert statement.query.window is not None and statement.query.window.kind == "SESSION"


def test_a_window_bound_in_a_windowed_aggregations_where_is_an_unknown_column() -> None:
    metastore = store(
        "CREATE STREAM TEST (ROWKEY INT KEY, IGNORED INT) WITH (kafka_topic='t', "
        "value_format='JSON');"
    )
    assert refusal(
        metastore,
        "CREATE TABLE S2 AS SELECT ROWKEY, COUNT(1) AS COUNT FROM TEST WINDOW TUMBLING "
        "(SIZE 1 SECOND) WHERE MIN(windowEnd) < 15000 GROUP BY ROWKEY;",
    ) == (
        "Error in WHERE expression: Unknown column WINDOWEND.\nStatement: (MIN(WINDOWEND) < 15000)"
    )
    assert refusal(  # an aggregate over columns the row has: refused as an aggregate
        metastore,
        "CREATE TABLE S3 AS SELECT ROWKEY, COUNT(1) AS COUNT FROM TEST WINDOW TUMBLING "
        "(SIZE 1 SECOND) WHERE MIN(IGNORED) < 15000 GROUP BY ROWKEY;",
    ) == (
        "Error in WHERE expression: Use of aggregate function MIN requires a GROUP BY clause."
        "\nStatement: (MIN(IGNORED) < 15000)"
    )


def test_a_sinks_timestamp_column_stamps_its_records_and_an_invalid_one_drops_them() -> None:
    from strom.ksql.operators import Operators
    from strom.ksql.readers import RecordError, RecordReader, SourceRecord

    metastore = store(
        "CREATE STREAM TEST (K STRING KEY, ID BIGINT, TS VARCHAR) "
        "WITH (kafka_topic='t', value_format='JSON');"
    )
    texts = {
        "number": "CREATE STREAM TS WITH (timestamp='sink_ts') AS SELECT K, ID AS SINK_TS, ID "
        "FROM TEST;",
        "text": "CREATE STREAM TS2 WITH (timestamp='ts', "
        "timestamp_format='yyyy-MM-dd''T''HH:mm:ssX') AS SELECT K, ID, TS FROM TEST;",
    }
    operators = {}
    for name, text in texts.items():
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateAsSelect)
        request = SinkRequest(statement.name, "STREAM", statement.properties, None, 1)
        operators[name] = Operators(plan_query(statement.query, metastore, request, text))
    source = metastore.source("TEST")
    assert source is not None
    reader = RecordReader(source)

    def times(name: str, value: bytes) -> list[int]:
        row = reader.read(SourceRecord("t", 0, 0, 10, b"k", value))
        return [c.timestamp for c in operators[name].stateless(row)]

    assert times("number", b'{"ID": 3}') == [3]
    assert times("number", b'{"ID": -2}') == []  # no time before the epoch
    assert times("text", b'{"ID": 1, "TS": "2018-05-11T21:58:33Z"}') == [1526075913000]
    assert times("text", b'{"ID": 2, "TS": "not a timestamp"}') == []
    bigint = store(
        "CREATE STREAM S (K STRING KEY, TS BIGINT) WITH (kafka_topic='s', value_format='JSON', "
        "timestamp='ts');"
    ).source("S")
    assert bigint is not None
    with pytest.raises(RecordError):  # a source's negative time: the record is skipped
        RecordReader(bigint).read(SourceRecord("s", 0, 0, 10, b"k", b'{"TS": -1}'))
