"""The ksql planner (``strom.ksql.planner``): a query and the metastore give the output
schema ksqlDB gives (key columns, names, types, the result's kind, the sink's topic,
partitions, formats and window), and ksqlDB's refusals. No broker."""

from __future__ import annotations

import decimal
from typing import Any

import pytest

from strom.ksql import statements as st
from strom.ksql import values as v
from strom.ksql.evaluation import Scope, compile_expression
from strom.ksql.metastore import KsqlStatementError, Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.planner import (
    QueryPlan,
    SinkRequest,
    collect_limits_from_properties,
    new_query_planner,
    plan_query,
    wrapping_from_properties,
)


@pytest.fixture
def metastore() -> Metastore:
    store = Metastore()
    for text in (
        "CREATE STREAM clicks (user_id STRING KEY, page STRING, ms BIGINT, "
        "info STRUCT<region STRING>) WITH (kafka_topic='clicks', value_format='JSON')",
        "CREATE TABLE users (id STRING PRIMARY KEY, name STRING, region STRING) "
        "WITH (kafka_topic='users', format='JSON')",
        "CREATE STREAM raw (line STRING) WITH (kafka_topic='raw', value_format='KAFKA', "
        "key_format='NONE')",
        "CREATE STREAM clicks_too (user_id STRING KEY, page BIGINT) "
        "WITH (kafka_topic='clicks_too', value_format='JSON')",
    ):
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateSource)
        store.put_source(store.source_from_statement(statement, text))
    return store


def plan(metastore: Metastore, text: str, partitions: int = 3) -> QueryPlan:
    statement = parse_statement(text)
    if isinstance(statement, st.Query):
        return plan_query(statement, metastore)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, partitions)
    return plan_query(statement.query, metastore, request, text)


def columns(result: QueryPlan) -> list[tuple[str, str, str]]:
    return [(p.name, str(p.type), p.namespace) for p in result.projection]


def refusal(metastore: Metastore, text: str) -> str:
    with pytest.raises(KsqlStatementError) as refused:
        plan(metastore, text)
    return str(refused.value)


def test_csas_keeps_the_key_names_unnamed_expressions_and_defaults_the_sink(
    metastore: Metastore,
) -> None:
    result = plan(
        metastore,
        "CREATE STREAM out AS SELECT page, user_id, UCASE(page), ms + 1, info->region "
        "FROM clicks WHERE ms > 0",
    )
    assert result.kind == "STREAM"
    assert columns(result) == [
        ("USER_ID", "STRING", "KEY"),
        ("PAGE", "STRING", "VALUE"),
        ("KSQL_COL_0", "STRING", "VALUE"),
        ("KSQL_COL_1", "BIGINT", "VALUE"),
        ("REGION", "STRING", "VALUE"),
    ]
    sink = result.sink
    assert sink is not None
    assert (sink.name, sink.topic, sink.kind) == ("OUT", "OUT", "STREAM")
    assert (sink.key_format, sink.value_format) == ("KAFKA", "JSON")
    assert sink.properties["PARTITIONS"] == 3 and sink.window_type is None


def test_with_properties_override_topic_partitions_and_formats(metastore: Metastore) -> None:
    result = plan(
        metastore,
        "CREATE STREAM out WITH (kafka_topic='elsewhere', partitions=6, value_format='DELIMITED') "
        "AS SELECT user_id, page FROM clicks",
    )
    sink = result.sink
    assert sink is not None
    assert (sink.topic, sink.properties["PARTITIONS"], sink.value_format) == (
        "elsewhere", 6, "DELIMITED"
    )  # fmt: skip


def test_the_output_topic_prefix_names_a_new_sinks_topic_without_kafka_topic(
    metastore: Metastore,
) -> None:
    """ksql.output.topic.name.prefix, as ksqlDB's Analyzer applies it: before the sink's
    name when the statement names no topic; KAFKA_TOPIC and INSERT INTO's sink as they are."""

    def topic(text: str, existing: str | None = None) -> str:
        statement = parse_statement(text)
        if isinstance(statement, st.CreateAsSelect):
            request = SinkRequest(
                statement.name, statement.kind, statement.properties, None, 1, text, "thing-"
            )
        else:
            assert isinstance(statement, st.InsertInto) and existing is not None
            target = metastore.source(existing)
            request = SinkRequest(existing, None, {}, target, 1, text, "thing-")
        sink = plan_query(statement.query, metastore, request, text).sink
        assert sink is not None
        return sink.topic

    assert topic("CREATE STREAM out AS SELECT * FROM clicks") == "thing-OUT"
    assert topic("CREATE STREAM `Out` AS SELECT * FROM clicks") == "thing-Out"
    assert topic("CREATE TABLE n AS SELECT page, COUNT(*) AS c FROM clicks GROUP BY page") == (
        "thing-N"
    )
    assert topic("CREATE STREAM o WITH (kafka_topic='foo') AS SELECT * FROM clicks") == "foo"
    assert topic("INSERT INTO clicks_too SELECT * FROM clicks_too", "CLICKS_TOO") == "clicks_too"


def test_group_by_makes_a_table_keyed_by_the_grouping_with_a_window(
    metastore: Metastore,
) -> None:
    result = plan(
        metastore,
        "CREATE TABLE counts AS SELECT user_id, COUNT(*) AS n, MAX(ms), WINDOWSTART AS ws "
        "FROM clicks WINDOW HOPPING (SIZE 1 MINUTE, ADVANCE BY 30 SECONDS, GRACE PERIOD 5 "
        "SECONDS) GROUP BY user_id HAVING COUNT(*) > 1 EMIT FINAL",
    )
    assert result.kind == "TABLE" and result.emit_final
    assert columns(result) == [
        ("USER_ID", "STRING", "KEY"),
        ("N", "BIGINT", "VALUE"),
        ("KSQL_COL_0", "BIGINT", "VALUE"),
        ("WS", "BIGINT", "VALUE"),
    ]
    aggregation = result.aggregation
    assert aggregation is not None and aggregation.window is not None
    assert [c.name for c in aggregation.calls] == ["COUNT", "MAX"]  # COUNT(*) once
    assert (aggregation.window.size_ms, aggregation.window.advance_ms) == (60_000, 30_000)
    assert aggregation.window.grace_ms == 5_000
    sink = result.sink
    assert sink is not None
    assert (sink.window_type, sink.window_size_ms) == ("HOPPING", 60_000)


def test_a_key_its_format_cannot_hold_is_refused_not_switched(metastore: Metastore) -> None:
    # ksqlDB keeps the source's KAFKA key format and refuses two key columns in it
    assert refusal(
        metastore,
        "CREATE TABLE pairs AS SELECT user_id, page, COUNT(*) FROM clicks GROUP BY user_id, page",
    ) == (
        "Key format does not support schema.\nformat: KAFKA\nschema: Persistence{columns="
        "[`USER_ID` STRING KEY, `PAGE` STRING KEY], features=[]}\nreason: The 'KAFKA' format "
        "only supports a single field. Got: [`USER_ID` STRING KEY, `PAGE` STRING KEY]"
    )
    result = plan(
        metastore,
        "CREATE TABLE pairs WITH (key_format='JSON') AS SELECT user_id, page, COUNT(*) "
        "FROM clicks GROUP BY user_id, page",
    )
    assert [p.name for p in result.key_columns] == ["USER_ID", "PAGE"]
    assert result.sink is not None and result.sink.key_format == "JSON"
    # a source without a key gives a new key ksqlDB's default key format, KAFKA
    rekeyed = plan(
        metastore,
        "CREATE STREAM by_line AS SELECT line, UCASE(line) AS u FROM raw PARTITION BY line;",
    )
    assert rekeyed.sink is not None and rekeyed.sink.key_format == "KAFKA"
    assert refusal(metastore, "CREATE STREAM arrays AS SELECT ARRAY[line] AS a FROM raw;").endswith(
        "reason: The 'KAFKA' format does not support type 'ARRAY'"
    )


def test_partition_by_rekeys_a_stream(metastore: Metastore) -> None:
    result = plan(
        metastore, "CREATE STREAM by_page AS SELECT page, user_id, ms FROM clicks PARTITION BY page"
    )
    assert columns(result)[:2] == [("PAGE", "STRING", "KEY"), ("USER_ID", "STRING", "VALUE")]
    unkeyed = plan(metastore, "CREATE STREAM nokey AS SELECT page FROM clicks PARTITION BY NULL")
    assert unkeyed.key_columns == ()


def test_a_table_source_gives_a_table(metastore: Metastore) -> None:
    result = plan(metastore, "CREATE TABLE eu AS SELECT * FROM users WHERE region = 'eu'")
    assert result.kind == "TABLE"
    assert columns(result) == [
        ("ID", "STRING", "KEY"), ("NAME", "STRING", "VALUE"), ("REGION", "STRING", "VALUE")
    ]  # fmt: skip


def test_transient_queries_select_what_they_like(metastore: Metastore) -> None:
    result = plan(metastore, "SELECT page, COUNT(*) FROM clicks GROUP BY page EMIT CHANGES LIMIT 5")
    assert columns(result) == [("PAGE", "STRING", "VALUE"), ("KSQL_COL_0", "BIGINT", "VALUE")]
    assert result.sink is None and result.limit == 5
    assert [p.name for p in plan(metastore, "SELECT page FROM clicks EMIT CHANGES").projection] == [
        "PAGE"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "CREATE STREAM s AS SELECT page FROM clicks",
            "Key missing from projection (ie, SELECT). \nThe query used to build `S` must "
            "include the key column USER_ID in its projection (eg, SELECT USER_ID...).",
        ),
        (
            "CREATE TABLE t AS SELECT COUNT(*) FROM clicks GROUP BY page",
            "Key missing from projection (ie, SELECT). \nThe query used to build `T` must "
            "include the grouping expression PAGE in its projection (eg, SELECT PAGE...).",
        ),
        (
            "CREATE STREAM s AS SELECT user_id, COUNT(*) FROM clicks GROUP BY user_id",
            "Invalid result type. Your SELECT query produces a TABLE. Please use CREATE TABLE "
            "AS SELECT statement instead.",
        ),
        (
            "CREATE TABLE t AS SELECT user_id, page FROM clicks",
            "Invalid result type. Your SELECT query produces a STREAM. Please use CREATE "
            "STREAM AS SELECT statement instead.",
        ),
        (
            "CREATE TABLE t AS SELECT user_id, page, COUNT(*) FROM clicks GROUP BY user_id",
            "Non-aggregate SELECT expression(s) not part of GROUP BY: PAGE\nEither add the "
            "column(s) to the GROUP BY or remove them from the SELECT.",
        ),
        (
            "CREATE TABLE t AS SELECT user_id FROM clicks GROUP BY user_id",
            "GROUP BY requires aggregate functions in either the SELECT or HAVING clause.",
        ),
        (
            "SELECT COUNT(*) FROM clicks EMIT CHANGES",
            "Use of aggregate functions requires a GROUP BY clause.",
        ),
        (
            "CREATE STREAM s WITH (nonsense=1) AS SELECT user_id FROM clicks",
            "Invalid config variable(s) in the WITH clause: NONSENSE",
        ),
        (
            "CREATE TABLE t AS SELECT ms, COUNT(*) FROM clicks GROUP BY ms + SUM(ms)",
            "GROUP BY does not support aggregate functions: SUM is an aggregate function.",
        ),
        (
            "CREATE STREAM s WITH (value_format='KAFKA') AS SELECT user_id, page, ms FROM clicks",
            "Value format does not support schema.\nformat: KAFKA\nschema: Persistence{"
            "columns=[`PAGE` STRING, `MS` BIGINT], features=[]}\nreason: The 'KAFKA' format "
            "only supports a single field. Got: [`PAGE` STRING, `MS` BIGINT]",
        ),
        (
            "CREATE TABLE t AS SELECT MAP('k' := page) AS tags, COUNT(*) AS n FROM clicks "
            "GROUP BY MAP('k' := page)",
            "Map keys, including types that contain maps, are not supported as they may lead "
            "to unexpected behavior due to inconsistent serialization. Key column name: `TAGS`. "
            "Column type: MAP<STRING, STRING>. See https://github.com/confluentinc/ksql/issues/"
            "6621 for more.",
        ),
        (
            "CREATE STREAM s AS SELECT user_id FROM clicks",
            "The projection contains no value columns.",
        ),
        (
            "CREATE TABLE t AS SELECT user_id, SUM(ms) AS s FROM clicks GROUP BY user_id "
            "HAVING SUM(ms) > 'x'",
            "Error in HAVING expression: Cannot compare SUM(MS) (BIGINT) to 'x' (STRING) with "
            "GREATER_THAN.\nStatement: (SUM(MS) > 'x')",
        ),
        (
            "CREATE STREAM s WITH (wrap_single_value=false) AS SELECT * FROM clicks",
            "'WRAP_SINGLE_VALUE' is only valid for single-field value schemas",
        ),
        (
            "SELECT page FROM clicks WHERE ms > 'late' EMIT CHANGES",
            "Error in WHERE expression: Cannot compare MS (BIGINT) to 'late' (STRING) with "
            "GREATER_THAN.\nStatement: (MS > 'late')",
        ),
    ],
)
def test_refusals_have_ksqldb_messages(metastore: Metastore, text: str, message: Any) -> None:
    assert refusal(metastore, text) == message


def test_the_planned_query_pickles(metastore: Metastore) -> None:
    import pickle

    result = plan(
        metastore,
        "CREATE TABLE counts AS SELECT user_id, COUNT(*) AS n FROM clicks "
        "WINDOW SESSION (30 SECONDS) GROUP BY user_id",
    )
    assert pickle.loads(pickle.dumps(result)) == result


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "CREATE STREAM e AS SELECT c.page, u.name FROM clicks c JOIN users u "
            "ON c.user_id = u.id",
            "Key missing from projection (ie, SELECT). \nThe query used to build `E` must "
            "include the join expressions C.USER_ID or U.ID in its projection (eg, SELECT "
            "C.USER_ID...).",
        ),
        (
            "SELECT * FROM clicks c JOIN users u ON c.page = u.name EMIT CHANGES",
            "Invalid join condition: stream-table joins require to join on the table's primary "
            "key. Got C.PAGE = U.NAME.",
        ),
        (
            "SELECT * FROM clicks c FULL OUTER JOIN users u ON c.user_id = u.id EMIT CHANGES",
            "Invalid join type: full-outer join not supported for stream-table join. Got "
            "CLICKS [FULL] OUTER JOIN USERS.",
        ),
        (
            "SELECT * FROM clicks a JOIN clicks_too b ON a.user_id = b.user_id EMIT CHANGES",
            "Stream-Stream joins must have a WITHIN clause specified. None was provided. To "
            "learn about how to specify a WITHIN clause with a stream-stream join, please "
            "visit: https://docs.confluent.io/current/ksql/docs/syntax-reference.html"
            "#create-stream-as-select",
        ),
        (
            "SELECT * FROM clicks a JOIN clicks_too b WITHIN 1 MINUTE ON a.user_id = b.page "
            "EMIT CHANGES",
            "Invalid join condition: types don't match. Got A.USER_ID{STRING} = B.PAGE{BIGINT}.",
        ),
        (
            "SELECT * FROM clicks c JOIN users u ON c.user_id = u.id AND c.page = u.name "
            "EMIT CHANGES",
            "Invalid join condition: joins on multiple conditions are not yet supported. Got "
            "((C.USER_ID = U.ID) AND (C.PAGE = U.NAME)).",
        ),
        (
            "SELECT * FROM users u LEFT JOIN clicks c ON u.id = c.user_id EMIT CHANGES",
            "Invalid join order: table-stream joins are not supported; only stream-table "
            "joins. Got USERS LEFT [OUTER] JOIN CLICKS.",
        ),
        (
            "SELECT * FROM clicks c JOIN users u ON c.nope = u.id EMIT CHANGES",
            "Line: 1, Col: 40: JOIN ON column 'C.NOPE' cannot be resolved.",
        ),
    ],
)
def test_join_refusals(metastore: Metastore, text: str, message: str) -> None:
    assert refusal(metastore, text) == message


def test_a_stream_table_join_is_keyed_by_its_condition(metastore: Metastore) -> None:
    result = plan(
        metastore,
        "CREATE STREAM enriched AS SELECT u.id, c.page, u.name AS who FROM clicks c "
        "JOIN users u ON c.user_id = u.id",
    )
    assert result.kind == "STREAM" and result.join is not None
    assert columns(result) == [
        ("ID", "STRING", "KEY"), ("PAGE", "STRING", "VALUE"), ("WHO", "STRING", "VALUE")
    ]  # fmt: skip
    assert [s.name for s in result.sources] == ["CLICKS", "USERS"]


def test_insert_into_needs_the_target_stream_schema(metastore: Metastore) -> None:
    statement = parse_statement(
        "CREATE STREAM copy (user_id STRING KEY, page STRING) "
        "WITH (kafka_topic='copy', value_format='JSON')"
    )
    assert isinstance(statement, st.CreateSource)
    metastore.put_source(metastore.source_from_statement(statement, ""))
    target = metastore.source("COPY")

    def insert(text: str) -> QueryPlan:
        parsed = parse_statement(text)
        assert isinstance(parsed, st.InsertInto)
        return plan_query(parsed.query, metastore, SinkRequest("COPY", None, {}, target, 1))

    assert insert("INSERT INTO copy SELECT user_id, page FROM clicks").sink == target
    with pytest.raises(KsqlStatementError) as refused:
        insert("INSERT INTO copy SELECT user_id, ms FROM clicks")
    assert str(refused.value) == (
        "Incompatible schema between results and sink.\n"
        "Result schema is `USER_ID` STRING KEY, `MS` BIGINT\n"
        "Sink schema is `USER_ID` STRING KEY, `PAGE` STRING"
    )


def test_insert_into_fits_number_literals_and_decimals_to_a_decimal_target(
    metastore: Metastore,
) -> None:
    """ksqlDB's implicit casts into an INSERT INTO target's DECIMAL columns: a number
    literal or a DECIMAL whose digits the column holds takes its type; one that does not
    fit, or another type, is still refused."""
    statement = parse_statement(
        "CREATE STREAM money (c1 DECIMAL(5,2), c2 DECIMAL(5,2), c3 DECIMAL(5,2)) "
        "WITH (kafka_topic='money', value_format='JSON')"
    )
    assert isinstance(statement, st.CreateSource)
    metastore.put_source(metastore.source_from_statement(statement, ""))
    target = metastore.source("MONEY")
    keyless = parse_statement(
        "CREATE STREAM nums (ms BIGINT) WITH (kafka_topic='n', format='JSON')"
    )
    assert isinstance(keyless, st.CreateSource)
    metastore.put_source(metastore.source_from_statement(keyless, ""))

    def insert(text: str) -> QueryPlan:
        parsed = parse_statement(text)
        assert isinstance(parsed, st.InsertInto)
        return plan_query(parsed.query, metastore, SinkRequest("MONEY", None, {}, target, 1))

    result = insert(
        "INSERT INTO money SELECT 1 AS c1, 2.0 AS c2, CAST(ms AS DECIMAL(3, 1)) AS c3 FROM nums"
    )
    assert columns(result) == [(f"C{i}", "DECIMAL(5, 2)", "VALUE") for i in (1, 2, 3)]
    scope = Scope({"MS": v.BIGINT})
    row = {"MS": 12}
    values = [
        compile_expression(p.expression, scope).evaluate(row, print) for p in result.projection
    ]
    assert values == [decimal.Decimal("1.00"), decimal.Decimal("2.00"), decimal.Decimal("12.00")]
    for refused_text in (
        "INSERT INTO money SELECT 1234 AS c1, 2.0 AS c2, 3 AS c3 FROM nums",  # 4 digits left
        "INSERT INTO money SELECT 1 AS c1, 2.125 AS c2, 3 AS c3 FROM nums",  # scale 3
        "INSERT INTO money SELECT 1 AS c1, 2.0 AS c2, ms AS c3 FROM nums",  # a BIGINT column
    ):
        with pytest.raises(KsqlStatementError, match="Incompatible schema between results"):
            insert(refused_text)


def test_select_star_under_partition_by_is_the_repartitioned_schema() -> None:
    """ksqlDB's SELECT * under PARTITION BY: the new key first (a column's name, a struct
    field's, else KSQL_COL_0), then the value columns left, then the old key columns;
    a DELIMITED value is written in that order."""
    from strom.ksql.operators import Operators
    from strom.ksql.readers import RecordWriter, Row

    store = Metastore()
    for text in (
        "CREATE STREAM p (id INT KEY, name STRING, age INT, address STRUCT<town STRING>) "
        "WITH (kafka_topic='p', value_format='JSON')",
        "CREATE STREAM d (k STRING KEY, id BIGINT, name STRING, value BIGINT) "
        "WITH (kafka_topic='d', value_format='DELIMITED')",
    ):
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateSource)
        store.put_source(store.source_from_statement(statement, text))
    by_name = plan(store, "CREATE STREAM o1 AS SELECT * FROM p PARTITION BY name")
    assert [(c[0], c[2]) for c in columns(by_name)] == [
        ("NAME", "KEY"), ("AGE", "VALUE"), ("ADDRESS", "VALUE"), ("ID", "VALUE")
    ]  # fmt: skip
    by_town = plan(store, "CREATE STREAM o2 AS SELECT * FROM p PARTITION BY address->town")
    assert [c[0] for c in columns(by_town)] == ["TOWN", "NAME", "AGE", "ADDRESS", "ID"]
    by_expression = plan(store, "CREATE STREAM o3 AS SELECT * FROM p PARTITION BY ABS(id)")
    assert columns(by_expression)[0] == ("KSQL_COL_0", "INTEGER", "KEY")
    row = Row({"ID": -10, "NAME": "bob", "AGE": 22, "ADDRESS": None, "ROWTIME": 5})
    [change] = Operators(by_expression).stateless(row)
    assert change.key == {"KSQL_COL_0": 10}
    assert change.value == {"NAME": "bob", "AGE": 22, "ADDRESS": None, "ID": -10}
    delimited = plan(store, "CREATE STREAM o4 AS SELECT * FROM d PARTITION BY name")
    assert delimited.sink is not None
    [change] = Operators(delimited).stateless(
        Row({"K": "1", "ID": 0, "NAME": "zero", "VALUE": 50, "ROWTIME": 5})
    )
    writer = RecordWriter(delimited.sink)
    assert writer.key(change.key, None) == b"zero"
    assert writer.value(change.value) == b"0,50,1"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "CREATE STREAM o AS SELECT user_id, user_id AS again, page FROM clicks",
            "The projection contains a key column (`USER_ID`) more than once, aliased as: "
            "AGAIN and USER_ID.",
        ),
        (
            "CREATE STREAM o AS SELECT page, page AS page2, ms FROM clicks PARTITION BY page",
            "The projection contains a key column (`PAGE`) more than once, aliased as: "
            "PAGE and PAGE2.",
        ),
        (
            "CREATE TABLE o AS SELECT page, page AS p2, COUNT(*) FROM clicks GROUP BY page",
            "The projection contains a key column more than once: `PAGE` and `P2`.",
        ),
        (
            "CREATE STREAM o AS SELECT c.user_id, c.user_id AS k2, u.name FROM clicks c "
            "JOIN users u ON c.user_id = u.id",  # the key: the join's column, as it names it
            "The projection contains a key column (`C_USER_ID`) more than once, aliased as: "
            "K2 and USER_ID.",
        ),
    ],
)  # fmt: skip
def test_a_key_selected_twice_is_refused_as_ksqldb_refuses_it(
    metastore: Metastore, query: str, message: str
) -> None:
    assert refusal(metastore, query) == message
    transient = query.split(" AS ", 1)[1].replace("SELECT", "SELECT", 1) + " EMIT CHANGES"
    assert plan(metastore, transient).sink is None  # a push query may select it twice


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "CREATE STREAM m (k ARRAY<MAP<STRING, INT>> KEY, v INT) "
            "WITH (kafka_topic='m', format='JSON')",
            "Map keys, including types that contain maps, are not supported as they may lead "
            "to unexpected behavior due to inconsistent serialization. Key column name: `K`. "
            "Column type: ARRAY<MAP<STRING, INTEGER>>. See https://github.com/confluentinc/"
            "ksql/issues/6621 for more.",
        ),
        (
            "CREATE STREAM a (k ARRAY<INT> KEY, v INT) WITH (kafka_topic='a', value_format='JSON')",
            "Key format does not support schema.\nformat: KAFKA\nschema: Persistence{columns="
            "[`K` ARRAY<INTEGER> KEY], features=[]}\nreason: The 'KAFKA' format does not "
            "support type 'ARRAY'",
        ),
        (
            "CREATE STREAM j (v MAP<INT, DOUBLE>) WITH (kafka_topic='j', value_format='JSON')",
            "JSON only supports MAP types with STRING keys",
        ),
        (
            "CREATE STREAM w (k STRING KEY, a INT, b INT) WITH (kafka_topic='w', "
            "value_format='JSON', wrap_single_value=true)",
            "'WRAP_SINGLE_VALUE' is only valid for single-field value schemas",
        ),
        (
            "CREATE STREAM n (k INT KEY, v INT) WITH (kafka_topic='n', key_format='NONE', "
            "value_format='JSON')",
            "The 'NONE' format can only be used when no columns are defined. Got: "
            "[`K` INTEGER KEY]",
        ),
    ],
)
def test_create_refusals(text: str, message: str) -> None:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateSource)
    with pytest.raises(KsqlStatementError) as refused:
        Metastore().source_from_statement(statement, text)
    assert str(refused.value) == message


def _add(metastore: Metastore, text: str) -> None:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateSource)
    metastore.put_source(metastore.source_from_statement(statement, text))


def test_a_sink_taking_the_sources_delimited_formats_takes_their_delimiters(
    metastore: Metastore,
) -> None:
    _add(
        metastore,
        "CREATE STREAM piped (k1 STRING KEY, k2 STRING KEY, v INT, w INT) WITH "
        "(kafka_topic='piped', format='DELIMITED', key_delimiter=';', value_delimiter='|')",
    )
    same = plan(metastore, "CREATE STREAM same_formats AS SELECT * FROM piped;").sink
    assert same is not None and (same.key_delimiter, same.value_delimiter) == (";", "|")
    # a format the statement names again starts from its defaults
    named = plan(
        metastore,
        "CREATE STREAM renamed WITH (key_format='JSON', value_format='DELIMITED') AS "
        "SELECT * FROM piped;",
    ).sink
    assert named is not None and (named.key_delimiter, named.value_delimiter) == (None, None)


def test_aggregation_refusals_ksqldb_makes_before_the_querys_shape(
    metastore: Metastore,
) -> None:
    _add(
        metastore,
        "CREATE STREAM lines (id STRING KEY, n INT) WITH (kafka_topic='lines', "
        "value_format='DELIMITED')",
    )
    # DELIMITED holds an aggregate's running state only when it is one primitive value
    assert plan(metastore, "CREATE TABLE sums AS SELECT id, SUM(n) FROM lines GROUP BY id;")
    assert refusal(
        metastore, "CREATE TABLE avgs AS SELECT id, AVG(n) AS a FROM lines GROUP BY id;"
    ).startswith(
        "One of the functions used in the statement has an intermediate type that the value"
        " format can not handle."
    )
    # an unknown function is named before a grouping without aggregates is refused
    assert refusal(
        metastore, "CREATE TABLE t AS SELECT id, NO_SUCH(n) FROM lines GROUP BY id;"
    ) == ("Can't find any functions with the name 'NO_SUCH'")
    # values in the KAFKA format are neither grouped nor joined
    grouped = refusal(metastore, "SELECT line, COUNT(*) FROM raw GROUP BY line EMIT CHANGES;")
    assert grouped.startswith(
        "Source(s) RAW are using the 'KAFKA' value format. This format does not yet support"
        " GROUP BY.\nThe KAFKA format is primarily intended for use as a key format."
    )


def test_system_column_names_in_a_select_and_as_aliases(metastore: Metastore) -> None:
    # a transient query may select them as they are; a persistent one must alias them
    assert plan(metastore, "SELECT page, ROWTIME FROM clicks EMIT CHANGES;")
    assert refusal(metastore, "CREATE STREAM t AS SELECT user_id, ROWTIME FROM clicks;") == (
        "Reserved column name in select: `ROWTIME`. Please remove or alias the column."
    )
    assert plan(metastore, "CREATE STREAM t AS SELECT user_id, ROWTIME AS at FROM clicks;")
    assert refusal(
        metastore, "CREATE STREAM t AS SELECT user_id, page AS rowpartition FROM clicks;"
    ) == ("`ROWPARTITION` is a reserved column name. You cannot use it as an alias for a column.")


def test_system_column_names_and_header_types_in_create(metastore: Metastore) -> None:
    for text, message in (
        (
            "CREATE STREAM s (k STRING KEY, windowstart BIGINT) "
            "WITH (kafka_topic='s', value_format='JSON')",
            "'WINDOWSTART' is a reserved column name. You cannot use it as a name for a column.",
        ),
        (
            "CREATE STREAM s (k STRING KEY, h BYTES HEADERS) "
            "WITH (kafka_topic='s', value_format='JSON')",
            "Invalid type for HEADERS column: expected ARRAY<STRUCT<`KEY` STRING, `VALUE` BYTES>>,"
            " got BYTES",
        ),
        (
            "CREATE STREAM s (k STRING KEY, h INT HEADER('key')) "
            "WITH (kafka_topic='s', value_format='JSON')",
            "Invalid type for HEADER('key') column: expected BYTES, got INTEGER",
        ),
    ):
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateSource)
        with pytest.raises(KsqlStatementError) as refused:
            metastore.source_from_statement(statement, text)
        assert str(refused.value) == message


def test_names_of_unaliased_items_skip_what_the_source_columns_use(metastore: Metastore) -> None:
    _add(
        metastore,
        "CREATE STREAM gen (ksql_col_1 INT KEY, itemid INT, item STRUCT<itemid INT, name STRING>,"
        " ksql_col_0 INT) WITH (kafka_topic='gen', value_format='JSON')",
    )
    result = plan(
        metastore,
        "CREATE STREAM named AS SELECT ksql_col_1, ABS(itemid), item->itemid, item->name,"
        " ABS(ksql_col_0), item->name FROM gen;",
    )
    assert [p.name for p in result.projection] == [
        "KSQL_COL_1", "KSQL_COL_2", "ITEMID_1", "NAME", "KSQL_COL_3", "NAME_1",
    ]  # fmt: skip


def test_group_by_keys_in_grouping_order_and_literal_groupings(metastore: Metastore) -> None:
    result = plan(
        metastore,
        "CREATE TABLE pairs WITH (key_format='JSON') AS SELECT page, user_id, COUNT(*) AS n "
        "FROM clicks GROUP BY user_id, page;",
    )
    assert columns(result) == [
        ("USER_ID", "STRING", "KEY"), ("PAGE", "STRING", "KEY"), ("N", "BIGINT", "VALUE"),
    ]  # fmt: skip
    # a literal groups every row into one group, as in ksqlDB
    constant = plan(metastore, "CREATE TABLE total AS SELECT 1, COUNT(*) FROM clicks GROUP BY 1;")
    assert columns(constant) == [
        ("KSQL_COL_0", "INTEGER", "KEY"),
        ("KSQL_COL_1", "BIGINT", "VALUE"),
    ]


def test_insert_into_refuses_targets_with_headers_or_read_only(metastore: Metastore) -> None:
    _add(
        metastore,
        "CREATE STREAM with_headers (user_id STRING KEY, page STRING, h BYTES HEADER('h')) "
        "WITH (kafka_topic='wh', value_format='JSON')",
    )
    _add(
        metastore,
        "CREATE SOURCE STREAM read_only (user_id STRING KEY, page STRING) "
        "WITH (kafka_topic='ro', value_format='JSON')",
    )
    for target, message in (
        ("WITH_HEADERS", "Cannot insert into WITH_HEADERS because it has header columns"),
        ("READ_ONLY", "Cannot insert into read-only stream: READ_ONLY"),
    ):
        parsed = parse_statement(f"INSERT INTO {target} SELECT user_id, page FROM clicks")
        assert isinstance(parsed, st.InsertInto)
        request = SinkRequest(target, None, {}, metastore.source(target), 1)
        with pytest.raises(KsqlStatementError) as refused:
            plan_query(parsed.query, metastore, request)
        assert str(refused.value) == message


def test_struct_all_selects_each_field_named_by_it(metastore: Metastore) -> None:
    _add(
        metastore,
        "CREATE STREAM nested (k STRUCT<a INT, b INT> KEY, v STRUCT<x STRUCT<`f 1` INT, g "
        "STRING>>) WITH (kafka_topic='nested', format='JSON')",
    )
    result = plan(metastore, "CREATE STREAM flat AS SELECT k, k->*, v->x->* FROM nested;")
    assert columns(result) == [
        ("K", "STRUCT<`A` INTEGER, `B` INTEGER>", "KEY"),
        ("A", "INTEGER", "VALUE"),
        ("B", "INTEGER", "VALUE"),
        ("f 1", "INTEGER", "VALUE"),
        ("G", "STRING", "VALUE"),
    ]
    assert refusal(metastore, "SELECT k->a->* FROM nested EMIT CHANGES;").startswith(
        "Expected STRUCT type, got: INTEGER"
    )


def test_wrap_single_values_setting_applies_to_a_new_single_value_sink(
    metastore: Metastore,
) -> None:
    def wrapped(text: str, setting: str) -> bool | None:
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateAsSelect)
        result = wrapping_from_properties(
            plan(metastore, text), statement, {"ksql.persistence.wrap.single.values": setting}
        )
        assert result.sink is not None
        return result.sink.wrap_single_value

    assert wrapped("CREATE STREAM one AS SELECT user_id, page FROM clicks;", "false") is False
    assert wrapped("CREATE STREAM one AS SELECT user_id, page FROM clicks;", "true") is True
    # two value columns, or WRAP_SINGLE_VALUE in the statement: the setting does not apply
    assert wrapped("CREATE STREAM two AS SELECT user_id, page, ms FROM clicks;", "false") is None
    assert (
        wrapped(
            "CREATE STREAM one WITH (wrap_single_value=true) AS SELECT user_id, page FROM clicks;",
            "false",
        )
        is True
    )


def test_collect_limits_from_properties_reach_the_collect_calls(metastore: Metastore) -> None:
    text = (
        "CREATE TABLE t AS SELECT user_id, COLLECT_LIST(page) AS l, COLLECT_SET(page) AS s, "
        "COUNT(*) AS n FROM clicks GROUP BY user_id;"
    )

    def limits(properties: dict[str, Any]) -> list[tuple[str, int | None]]:
        result = collect_limits_from_properties(plan(metastore, text), properties)
        assert result.aggregation is not None
        return [(c.name, c.collect_limit) for c in result.aggregation.calls]

    assert limits({}) == [("COLLECT_LIST", None), ("COLLECT_SET", None), ("COUNT", None)]
    assert limits(
        {"ksql.functions.collect_list.limit": 1, "ksql.functions.collect_set.limit": "3"}
    ) == [("COLLECT_LIST", 1), ("COLLECT_SET", 3), ("COUNT", None)]
    # a negative limit is none, as in ksqlDB
    assert limits({"ksql.functions.collect_set.limit": -1})[1] == ("COLLECT_SET", None)


def test_aggregates_without_grouping_and_loose_having_columns(metastore: Metastore) -> None:
    assert refusal(metastore, "CREATE TABLE t AS SELECT page, COUNT(*) FROM clicks;") == (
        "Non-aggregate SELECT expression(s) not part of GROUP BY: PAGE\n"
        "Either add the column(s) to the GROUP BY or remove them from the SELECT."
    )
    assert refusal(metastore, "CREATE TABLE t AS SELECT COUNT(*), MAX(ms) FROM clicks;") == (
        "CREATE TABLE AS SELECT statement does not support aggregate function "
        "[COUNT(ROWTIME), MAX(MS)] without a GROUP BY clause."
    )
    assert refusal(
        metastore,
        "CREATE TABLE t AS SELECT user_id, COUNT(*) FROM clicks GROUP BY user_id "
        "HAVING LEN(page) < 2 AND ms > 1 AND LEN(page) > 0;",
    ) == (
        "Non-aggregate HAVING expression not part of GROUP BY: PAGE, MS\n"
        "Consider switching the HAVING clause to a WHERE clause before the GROUP BY."
    )


def test_keys_missing_from_the_projection_listed_as_ksqldb_lists_them(
    metastore: Metastore,
) -> None:
    _add(
        metastore,
        "CREATE STREAM two_keys (k1 STRING KEY, k2 STRING KEY, v INT) "
        "WITH (kafka_topic='two', format='JSON')",
    )
    # every key column, though one is selected
    assert refusal(metastore, "CREATE STREAM o AS SELECT k1, v FROM two_keys;").endswith(
        "must include the key columns K1 and K2 in its projection (eg, SELECT K1, K2...)."
    )
    # partitioning expressions qualified by the source, as ksqlDB shows them
    assert refusal(
        metastore, "CREATE STREAM o AS SELECT v FROM two_keys t PARTITION BY ABS(v), k1;"
    ).endswith(
        "must include the partitioning expressions ABS(T.V) and T.K1 in its projection "
        "(eg, SELECT ABS(T.V), T.K1...)."
    )


def test_errors_over_a_join_name_columns_as_the_joined_row_has_them(
    metastore: Metastore,
) -> None:
    _add(
        metastore,
        "CREATE STREAM other (user_id STRING KEY, page INT) "
        "WITH (kafka_topic='other', value_format='JSON')",
    )
    assert refusal(
        metastore,
        "CREATE STREAM j AS SELECT c.user_id, c.page FROM clicks c JOIN other o "
        "WITHIN 1 SECOND ON c.user_id = o.user_id WHERE c.page > o.page;",
    ) == ("Error in WHERE expression: Cannot compare C_PAGE (STRING) to O_PAGE (INTEGER) with "
          "GREATER_THAN.\nStatement: (C_PAGE > O_PAGE)")  # fmt: skip


def test_a_sink_asking_for_no_key_format_must_have_no_key(metastore: Metastore) -> None:
    assert refusal(
        metastore,
        "CREATE STREAM o WITH (key_format='NONE') AS SELECT * FROM clicks PARTITION BY page;",
    ) == (
        "The 'NONE' format can only be used when no columns are defined. Got: [`PAGE` STRING KEY]"
    )


def test_partition_by_refusals_in_ksqldbs_words(metastore: Metastore) -> None:
    assert refusal(
        metastore, "CREATE STREAM o AS SELECT * FROM clicks PARTITION BY NULL, page;"
    ) == ("Cannot PARTITION BY multiple columns including NULL")
    assert refusal(
        metastore,
        "CREATE STREAM o WITH (key_format='DELIMITED') AS SELECT * FROM clicks PARTITION BY NULL;",
    ) == ("Key format specified for stream without key columns.")
    assert refusal(
        metastore, "CREATE STREAM o AS SELECT page AS p FROM clicks PARTITION BY p;"
    ).endswith(
        "PARTITION BY column 'P' cannot be resolved. 'P' must be a column in the source schema "
        "since PARTITION BY is applied on the input."
    )


def test_a_grouping_expression_named_twice_is_refused(metastore: Metastore) -> None:
    assert refusal(
        metastore,
        "CREATE TABLE t AS SELECT page, COUNT(*) FROM clicks GROUP BY page, clicks.page;",
    ) == ("Duplicate GROUP BY expression: CLICKS.PAGE")


def test_window_bounds_only_in_a_windowed_aggregations_select(metastore: Metastore) -> None:
    window = "FROM clicks WINDOW TUMBLING (SIZE 1 SECOND)"
    for tail in (
        f"SELECT user_id, MIN(WINDOWSTART) AS m {window} GROUP BY user_id",
        f"SELECT user_id, COUNT(*) AS n {window} GROUP BY user_id, WINDOWSTART",
        f"SELECT user_id, COUNT(*) AS n {window} GROUP BY user_id HAVING WINDOWSTART > 1",
    ):
        assert refusal(metastore, f"CREATE TABLE t AS {tail};").startswith(
            "Window bounds column WINDOWSTART can only be used in the SELECT clause of "
            "windowed aggregations and can not be passed to aggregate functions."
        )
    assert plan(
        metastore,
        f"CREATE TABLE t AS SELECT user_id, WINDOWEND AS e, COUNT(*) AS n {window} "
        "GROUP BY user_id;",
    )


def test_an_aggregates_literal_parameter_given_a_column_is_refused(metastore: Metastore) -> None:
    assert refusal(
        metastore,
        "CREATE TABLE t AS SELECT user_id, EARLIEST_BY_OFFSET(ms, ms) FROM clicks "
        "GROUP BY user_id;",
    ) == (
        "Parameter 2 passed to function EARLIEST_BY_OFFSET must be a literal constant, but was "
        "expression: 'MS'"
    )


def test_a_qualified_window_bound_in_a_windowed_aggregation(metastore: Metastore) -> None:
    result = plan(
        metastore,
        "CREATE TABLE t AS SELECT user_id, clicks.WINDOWSTART / 2 AS half, COUNT(*) AS n "
        "FROM clicks WINDOW TUMBLING (SIZE 30 SECONDS) GROUP BY user_id;",
    )
    assert columns(result)[1] == ("HALF", "BIGINT", "VALUE")


# ---- ksqlDB's experimental new planner (ksql.new.query.planner.enabled) ------------------


def new_planned(metastore: Metastore, text: str) -> QueryPlan:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(
        statement.name, statement.kind, statement.properties, None, 1, new_planner=True
    )
    return plan_query(statement.query, metastore, request, text)


def test_the_new_planner_keys_a_stream_by_the_key_columns_it_selects(
    metastore: Metastore,
) -> None:
    keyless = new_planned(metastore, "CREATE STREAM o AS SELECT page FROM clicks")
    assert columns(keyless) == [("PAGE", "STRING", "VALUE")]
    assert keyless.sink is not None and keyless.sink.key_columns == ()
    # an alias is not used: each column keeps its name
    aliased = new_planned(
        metastore, "CREATE STREAM o AS SELECT page AS p, user_id AS u FROM clicks"
    )
    assert columns(aliased) == [("USER_ID", "STRING", "KEY"), ("PAGE", "STRING", "VALUE")]
    # the planner ksqlDB runs by default refuses the same query
    assert "must include the key column USER_ID in its projection" in refusal(
        metastore, "CREATE STREAM o AS SELECT page FROM clicks"
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "SELECT page FROM clicks WHERE ms > 0",
            "New query planner does not support WHERE. Set ksql.new.query.planner.enabled=false.",
        ),
        (
            "SELECT page FROM clicks PARTITION BY page",
            "New query planner does not support PARTITION BY. Set "
            "ksql.new.query.planner.enabled=false.",
        ),
        (
            "SELECT c.page, u.name FROM clicks c JOIN users u ON c.user_id = u.id",
            "New query planner does not support joins. Set ksql.new.query.planner.enabled=false.",
        ),
        ("SELECT id, name FROM users", "Input TABLES are not supported by the new planner"),
        (
            "SELECT UCASE(page) AS up FROM clicks",
            "New query planner only support column references, no expressions or aliases.",
        ),
        ("SELECT page, ROWTIME AS t FROM clicks", "SELECT column 'ROWTIME' cannot be resolved."),
    ],
)
def test_the_new_planner_refuses_what_it_does_not_support(
    metastore: Metastore, query: str, message: str
) -> None:
    with pytest.raises(KsqlStatementError) as refused:
        new_planned(metastore, f"CREATE STREAM o AS {query}")
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("properties", "enabled"),
    [
        ({}, False),
        ({"ksql.new.query.planner.enabled": "true"}, True),
        ({"ksql.new.query.planner.enabled": True}, True),
        ({"ksql.new.query.planner.enabled": "false"}, False),
    ],
)
def test_the_new_planner_is_asked_for_by_its_property(
    properties: dict[str, Any], enabled: bool
) -> None:
    assert new_query_planner(properties) is enabled


def test_a_keyed_sink_over_keyless_sources_takes_a_joined_sides_or_the_default_key_format(
    metastore: Metastore,
) -> None:
    """Over a source without a key (NONE) a keyed sink takes the first join side's key
    format that has one, else ksql.persistence.default.format.key, as ksqlDB's JoinNode
    and its repartitions do (joins.json's 'stream-stream value-to-value - keyless')."""
    for text in (
        "CREATE STREAM s1 (id INT, foo INT) WITH (kafka_topic='s1', key_format='NONE', "
        "value_format='JSON')",
        "CREATE STREAM s2 (id INT, val STRING) WITH (kafka_topic='s2', key_format='NONE', "
        "value_format='JSON')",
        "CREATE STREAM s3 (id INT KEY, val STRING) WITH (kafka_topic='s3', key_format='JSON', "
        "value_format='JSON')",
    ):
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateSource)
        metastore.put_source(metastore.source_from_statement(statement, text))

    def key_format(text: str, default: str) -> str:
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateAsSelect)
        request = SinkRequest(
            statement.name, statement.kind, {}, None, 1, text, default_key_format=default
        )
        sink = plan_query(statement.query, metastore, request, text).sink
        assert sink is not None
        return sink.key_format

    keyless = (
        "CREATE STREAM out AS SELECT s1.id, s2.val FROM s1 LEFT JOIN s2 WITHIN 10 SECONDS "
        "ON s1.id = s2.id;"
    )
    assert key_format(keyless, "DELIMITED") == "DELIMITED"
    assert key_format(keyless, "KAFKA") == "KAFKA"
    half = (
        "CREATE STREAM out2 AS SELECT s1.id, s3.val FROM s1 LEFT JOIN s3 WITHIN 10 SECONDS "
        "ON s1.id = s3.id;"
    )
    assert key_format(half, "DELIMITED") == "JSON"
    grouped = "CREATE TABLE counts AS SELECT foo, COUNT(*) FROM s1 GROUP BY foo;"
    assert key_format(grouped, "DELIMITED") == "DELIMITED"


def test_at_a_tie_of_timestamps_a_join_takes_its_sides_in_ksqldbs_order(
    metastore: Metastore,
) -> None:
    """A table's change comes before the stream record it serves; of two tables, and of
    two streams, the left side's record comes first."""
    from strom.ksql.join_flow import tie_order

    def order(text: str) -> tuple[int, int]:
        planned = plan(metastore, text)
        return tie_order(planned, 0, "left"), tie_order(planned, 0, "right")

    stream_table = "SELECT * FROM clicks c JOIN users u ON c.user_id = u.id EMIT CHANGES;"
    assert order(stream_table) == (1, 0)
    stream_stream = (
        "SELECT * FROM clicks c JOIN clicks_too t WITHIN 1 MINUTE ON c.user_id = t.user_id "
        "EMIT CHANGES;"
    )
    assert order(stream_stream) == (0, 1)
