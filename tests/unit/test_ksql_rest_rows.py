"""The values of push and pull query rows as the REST API writes them (ksqlDB's
shapes): temporal columns as text at every depth, DECIMAL a number, BYTES base64; the
``/query`` header's schema and end (a pull query's on a table: KEY columns marked, no
final message)."""

from __future__ import annotations

import decimal
import json

from strom.ksql import expressions as ex
from strom.ksql import statements as st
from strom.ksql.metastore import Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.planner import QueryPlan, plan_query
from strom.ksql.server import _RowWriter, pull_final_message, pull_key_columns, rest_json_value
from strom.ksql.values import BIGINT, DATE, TIME, TIMESTAMP

READING = ex.StructType((ex.StructField("AT", TIMESTAMP), ex.StructField("COUNT", BIGINT)))


def test_temporal_columns_are_text_as_ksqldb_writes_them() -> None:
    # 2024-02-29T10:20:30.045Z, a leap day
    assert rest_json_value(1709202030045, TIMESTAMP) == "2024-02-29T10:20:30.045"
    assert rest_json_value(0, TIMESTAMP) == "1970-01-01T00:00:00.000"
    assert rest_json_value(19782, DATE) == "2024-02-29"
    assert rest_json_value(37230045, TIME) == "10:20:30"  # the milliseconds dropped
    assert rest_json_value(36000000, TIME) == "10:00"  # Java's LocalTime drops :00
    assert rest_json_value(1709202030045, BIGINT) == 1709202030045
    assert rest_json_value(None, TIMESTAMP) is None


def test_nested_temporal_values_decimals_and_bytes() -> None:
    days = ex.ArrayType(DATE)
    assert rest_json_value([0, None, 1], days) == ["1970-01-01", None, "1970-01-02"]
    stamps = ex.MapType(ex.PrimitiveType("STRING"), TIMESTAMP)
    assert rest_json_value({"a": 1000}, stamps) == {"a": "1970-01-01T00:00:01.000"}
    assert rest_json_value({"AT": 60000, "COUNT": 3}, READING) == {
        "AT": "1970-01-01T00:01:00.000",
        "COUNT": 3,
    }
    assert rest_json_value(decimal.Decimal("12.50"), ex.DecimalType(4, 2)) == 12.5
    assert rest_json_value(b"\x00\xff", ex.PrimitiveType("BYTES")) == "AP8="


def test_row_writer_lines_carry_the_text_and_the_type_names() -> None:
    writer = _RowWriter("/query-stream", "", "q1", ["ID", "AT"], [BIGINT, TIMESTAMP])
    assert b'"columnTypes": ["BIGINT", "TIMESTAMP"]' in writer.header()
    assert writer.row([7, 86400000]) == b'[7, "1970-01-02T00:00:00.000"]\n'
    old = _RowWriter("/query", "", "q1", ["ID", "AT"], [BIGINT, TIMESTAMP])
    assert old.row([7, 0]) == b'{"row": {"columns": [7, "1970-01-01T00:00:00.000"]}},\n'


def _plan(text: str) -> tuple[QueryPlan, bool]:
    store = Metastore()
    for create in (
        "CREATE TABLE users (id STRING PRIMARY KEY, name STRING) "
        "WITH (kafka_topic='users', format='JSON')",
        "CREATE TABLE counts (id STRING PRIMARY KEY, n BIGINT) "
        "WITH (kafka_topic='counts', format='JSON', window_type='TUMBLING', "
        "window_size='1 SECOND')",
        "CREATE STREAM clicks (id STRING KEY, page STRING) "
        "WITH (kafka_topic='clicks', format='JSON')",
    ):
        statement = parse_statement(create)
        assert isinstance(statement, st.CreateSource)
        store.put_source(store.source_from_statement(statement, create))
    query = parse_statement(text)
    assert isinstance(query, st.Query)
    return plan_query(query, store), query.is_pull


def _schema(text: str) -> str:
    plan, is_pull = _plan(text)
    writer = _RowWriter(
        "/query", "", "q1", [p.name for p in plan.projection], [p.type for p in plan.projection],
        pull_key_columns(plan, is_pull),
    )  # fmt: skip
    return json.loads(writer.header(closing=True) + writer.close())[0]["header"]["schema"]


def test_a_pull_query_on_a_table_marks_its_key_columns_in_the_header_by_alias() -> None:
    assert _schema("SELECT * FROM users;") == "`ID` STRING KEY, `NAME` STRING"
    assert _schema("SELECT name, id FROM users;") == "`NAME` STRING, `ID` STRING KEY"
    assert _schema("SELECT id AS other FROM users;") == "`OTHER` STRING"
    assert _schema("SELECT id, windowstart, n FROM counts;") == (
        "`ID` STRING KEY, `WINDOWSTART` BIGINT KEY, `N` BIGINT"
    )


def test_push_and_stream_queries_mark_no_key_column() -> None:
    assert _schema("SELECT * FROM users EMIT CHANGES;") == "`ID` STRING, `NAME` STRING"
    assert _schema("SELECT * FROM clicks;") == "`ID` STRING, `PAGE` STRING"


def test_a_closing_row_ends_the_query_answer_without_a_final_message() -> None:
    writer = _RowWriter("/query", "", "q1", ["ID"], [BIGINT], frozenset({"ID"}))
    body = writer.header() + writer.row([1]) + writer.row([2], closing=True) + writer.close()
    assert json.loads(body)[1:] == [{"row": {"columns": [1]}}, {"row": {"columns": [2]}}]
    empty = json.loads(writer.header(closing=True) + writer.close())
    assert empty == [{"header": {"queryId": "q1", "schema": "`ID` BIGINT KEY"}}]


def test_a_stream_pull_query_cut_by_its_limit_ends_with_limit_reached() -> None:
    plan, _ = _plan("SELECT * FROM clicks LIMIT 2;")
    assert pull_final_message(plan, 2) == "Limit Reached"
    assert pull_final_message(plan, 1) is None  # fewer rows: "Query Completed"
    assert pull_final_message(_plan("SELECT * FROM clicks;")[0], 5) is None
