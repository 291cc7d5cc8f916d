"""ksqlDB's statements parsed into typed values: every statement kind, expressions and
types, WITH properties, names as ksqlDB resolves them, comments, several statements per
request, ${variables} with DEFINE/UNDEFINE, and syntax errors naming line and column."""

from __future__ import annotations

import decimal

import pytest

from strom.ksql import expressions as ex
from strom.ksql import statements as st
from strom.ksql.parser import (
    KsqlSyntaxError,
    parse_statement,
    parse_statements,
    split_statements,
)


def test_create_stream_columns_types_and_properties() -> None:
    statement = parse_statement(
        "CREATE STREAM pageviews (id BIGINT KEY, `Url` VARCHAR, tags ARRAY<STRING>, "
        "attrs MAP<STRING, INT>, addr STRUCT<street STRING, `zip` INT>, price DECIMAL(10, 2), "
        "hs ARRAY<BYTES> HEADERS, h BYTES HEADER('trace')) "
        "WITH (kafka_topic='pv', value_format='JSON', partitions=3, replicas=1, "
        "timestamp='ts', wrap_single_value=false)"
    )
    assert isinstance(statement, st.CreateSource)
    assert (statement.kind, statement.name, statement.is_source) == ("STREAM", "PAGEVIEWS", False)
    columns = {e.name: (e.type, e.constraint) for e in statement.elements}
    assert columns["ID"] == (ex.PrimitiveType("BIGINT"), "KEY")
    assert columns["Url"] == (ex.PrimitiveType("STRING"), None)
    assert columns["TAGS"][0] == ex.ArrayType(ex.PrimitiveType("STRING"))
    assert columns["ATTRS"][0] == ex.MapType(
        ex.PrimitiveType("STRING"), ex.PrimitiveType("INTEGER")
    )
    assert str(columns["ADDR"][0]) == "STRUCT<`STREET` STRING, `zip` INTEGER>"
    assert columns["PRICE"][0] == ex.DecimalType(10, 2)
    assert columns["HS"][1] == "HEADERS" and columns["H"][1] == "HEADER('trace')"
    assert statement.properties == {
        "KAFKA_TOPIC": "pv",
        "VALUE_FORMAT": "JSON",
        "PARTITIONS": 3,
        "REPLICAS": 1,
        "TIMESTAMP": "ts",
        "WRAP_SINGLE_VALUE": False,
    }


def test_create_source_table_or_replace_if_not_exists() -> None:
    statement = parse_statement(
        "create or replace source table if not exists users (id string primary key, n int) "
        "with (kafka_topic='u', format='json')"
    )
    assert isinstance(statement, st.CreateSource)
    assert statement.kind == "TABLE" and statement.is_source
    assert statement.or_replace and statement.if_not_exists
    assert statement.elements[0].is_key and statement.elements[0].constraint == "PRIMARY KEY"


def test_create_as_select_and_insert_into_select() -> None:
    ctas = parse_statement(
        "CREATE TABLE counts WITH (kafka_topic='c') AS SELECT page, COUNT(*) AS n FROM pv "
        "WINDOW HOPPING (SIZE 1 MINUTE, ADVANCE BY 10 SECONDS, RETENTION 2 DAYS, "
        "GRACE PERIOD 5 SECONDS) WHERE page <> 'x' GROUP BY page HAVING COUNT(*) > 1 EMIT FINAL"
    )
    assert isinstance(ctas, st.CreateAsSelect) and ctas.properties == {"KAFKA_TOPIC": "c"}
    query = ctas.query
    assert query.window == st.WindowExpression(
        "HOPPING",
        st.Duration(1, "MINUTE"),
        st.Duration(10, "SECONDS"),
        st.Duration(2, "DAYS"),
        st.Duration(5, "SECONDS"),
    )
    assert query.window.size.milliseconds == 60_000 and query.window.retention
    assert query.window.retention.milliseconds == 2 * 86_400_000
    assert query.group_by == (ex.ColumnReference("PAGE"),)
    assert query.having == ex.Comparison(
        ">", ex.FunctionCall("COUNT", (), star=True), ex.Literal(1)
    )
    assert query.emit == "FINAL" and not query.is_pull
    insert = parse_statement("INSERT INTO out SELECT * FROM pv PARTITION BY id EMIT CHANGES")
    assert isinstance(insert, st.InsertInto) and insert.target == "OUT"
    assert insert.query.partition_by == (ex.ColumnReference("ID"),)
    with pytest.raises(KsqlSyntaxError):
        parse_statement("CREATE SOURCE STREAM s AS SELECT * FROM t EMIT CHANGES")


def test_queries_joins_windows_and_pull() -> None:
    query = parse_statement(
        "SELECT o.id, c.name FROM orders o INNER JOIN customers AS c ON o.cid = c.id "
        "LEFT OUTER JOIN items i WITHIN (1 HOUR, 2 MINUTES) GRACE PERIOD 1 SECOND "
        "ON o.item = i.id FULL JOIN x ON x.k = o.k EMIT CHANGES LIMIT 10"
    )
    assert isinstance(query, st.Query) and query.limit == 10
    assert query.source.left == st.AliasedSource("ORDERS", "O")
    kinds = [join.kind for join in query.source.joins]
    assert kinds == ["INNER", "LEFT", "FULL"]
    within = query.source.joins[1].within
    assert within == st.Within(
        st.Duration(1, "HOUR"), st.Duration(2, "MINUTES"), st.Duration(1, "SECOND")
    )
    pull = parse_statement("SELECT * FROM users WHERE id = 'a'")
    assert isinstance(pull, st.Query) and pull.is_pull and pull.select == (st.AllColumns(),)
    session = parse_statement(
        "SELECT user, COUNT(*) FROM tx WINDOW SESSION (30 SECONDS) GROUP BY user EMIT CHANGES"
    )
    assert isinstance(session, st.Query) and session.window
    assert session.window.kind == "SESSION" and session.window.size.milliseconds == 30_000


def test_expressions() -> None:
    query = parse_statement(
        "SELECT a->b->c, arr[1], m['k'], -x, 1 + 2 * 3, 'a' || 'b', -1.50, 2.5E3, "
        "CAST(p AS DECIMAL(4, 1)), CASE WHEN a > 1 THEN 'big' ELSE 'small' END, "
        "CASE s WHEN 1 THEN 'one' END, ARRAY[1, 2], MAP('k' := 1), STRUCT(f := 'v'), "
        "TRANSFORM(arr, x => x * 2), REDUCE(arr, 0, (s, x) => s + x), NULL, TRUE "
        "FROM t WHERE a IS NOT NULL AND b NOT LIKE 'x%' AND c BETWEEN 1 AND 2 "
        "AND d NOT IN (1, 2) OR NOT e != 3"
    )
    assert isinstance(query, st.Query)
    items = [item.expression for item in query.select if isinstance(item, st.SelectExpression)]
    assert items[0] == ex.Dereference(ex.Dereference(ex.ColumnReference("A"), "B"), "C")
    assert items[1] == ex.Subscript(ex.ColumnReference("ARR"), ex.Literal(1))
    assert items[3] == ex.Negate(ex.ColumnReference("X"))
    assert items[4] == ex.Arithmetic(
        "+", ex.Literal(1), ex.Arithmetic("*", ex.Literal(2), ex.Literal(3))
    )
    assert items[5] == ex.Arithmetic("||", ex.Literal("a"), ex.Literal("b"))
    assert items[6] == ex.Literal(decimal.Decimal("-1.50"))
    assert items[7] == ex.Literal(2500.0)
    assert items[8] == ex.Cast(ex.ColumnReference("P"), ex.DecimalType(4, 1))
    assert isinstance(items[9], ex.Case) and items[9].operand is None
    assert items[9].default == ex.Literal("small")
    assert isinstance(items[10], ex.Case) and items[10].operand == ex.ColumnReference("S")
    assert items[12] == ex.MapConstructor(((ex.Literal("k"), ex.Literal(1)),))
    assert items[13] == ex.StructConstructor((("F", ex.Literal("v")),))
    assert items[14] == ex.FunctionCall(
        "TRANSFORM",
        (
            ex.ColumnReference("ARR"),
            ex.Lambda(("X",), ex.Arithmetic("*", ex.ColumnReference("X"), ex.Literal(2))),
        ),
    )
    reduce_lambda = items[15]
    assert isinstance(reduce_lambda, ex.FunctionCall)
    assert isinstance(reduce_lambda.arguments[2], ex.Lambda)
    assert reduce_lambda.arguments[2].parameters == ("S", "X")
    assert items[16:] == [ex.Literal(None), ex.Literal(True)]
    where = query.where
    assert isinstance(where, ex.Logical) and where.operator == "OR"
    assert where.right == ex.Not(ex.Comparison("<>", ex.ColumnReference("E"), ex.Literal(3)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SHOW STREAMS", st.Show("STREAMS")),
        ("list tables extended", st.Show("TABLES", extended=True)),
        ("SHOW TOPICS EXTENDED", st.Show("TOPICS", extended=True)),
        ("SHOW ALL TOPICS", st.Show("TOPICS", all_topics=True)),
        ("SHOW QUERIES", st.Show("QUERIES")),
        ("SHOW PROPERTIES", st.Show("PROPERTIES")),
        ("SHOW FUNCTIONS", st.Show("FUNCTIONS")),
        ("SHOW TYPES", st.Show("TYPES")),
        ("SHOW VARIABLES", st.Show("VARIABLES")),
        ("DESCRIBE pv", st.DescribeSource("PV")),
        ("DESCRIBE `pv` EXTENDED", st.DescribeSource("pv", extended=True)),
        ("DESCRIBE STREAMS", st.DescribeSources("STREAM")),
        ("DESCRIBE TABLES EXTENDED", st.DescribeSources("TABLE", extended=True)),
        ("DESCRIBE FUNCTION substring", st.DescribeFunction("SUBSTRING")),
        ("DROP STREAM pv", st.DropSource("STREAM", "PV")),
        ("DROP TABLE IF EXISTS t DELETE TOPIC", st.DropSource("TABLE", "T", True, True)),
        ("CREATE TYPE addr AS STRUCT<n INT>", st.CreateType(
            "ADDR", ex.StructType((ex.StructField("N", ex.PrimitiveType("INTEGER")),)))),
        ("DROP TYPE IF EXISTS addr", st.DropType("ADDR", True)),
        ("TERMINATE CSAS_OUT_3", st.Terminate("CSAS_OUT_3")),
        ("TERMINATE ALL", st.Terminate(None)),
        ("EXPLAIN CTAS_X_1", st.Explain(query_id="CTAS_X_1")),
        ("PRINT 'Pv' FROM BEGINNING INTERVAL 2 LIMIT 5", st.PrintTopic("Pv", True, 2, 5)),
        ("PRINT pv", st.PrintTopic("pv")),
        ("SET 'auto.offset.reset'='earliest'", st.SetProperty("auto.offset.reset", "earliest")),
        ("UNSET 'auto.offset.reset'", st.UnsetProperty("auto.offset.reset")),
        ("DEFINE topic = 'it''s'", st.DefineVariable("topic", "it's")),
        ("UNDEFINE topic", st.UndefineVariable("topic")),
        ("RUN SCRIPT '/tmp/x.sql'", st.RunScript("/tmp/x.sql")),
        ("INSERT INTO pv (id, url) VALUES (1, 'a')", st.InsertValues(
            "PV", ("ID", "URL"), (ex.Literal(1), ex.Literal("a")))),
        ("INSERT INTO pv VALUES ()", st.InsertValues("PV", (), ())),
        ("INSERT INTO pv VALUES (1, 'a')", st.InsertValues(
            "PV", (), (ex.Literal(1), ex.Literal("a")))),
        ("ALTER STREAM pv ADD COLUMN c INT", st.AlterSource(
            "STREAM", "PV", (st.TableElement("C", ex.PrimitiveType("INTEGER")),))),
    ],
)  # fmt: skip
def test_statement_kinds(text: str, expected: st.Statement) -> None:
    assert parse_statement(text) == expected


def test_explain_a_statement() -> None:
    explained = parse_statement("EXPLAIN SELECT * FROM pv EMIT CHANGES")
    assert isinstance(explained, st.Explain) and isinstance(explained.statement, st.Query)


def test_split_keeps_semicolons_in_strings_names_and_comments() -> None:
    text = (
        "-- a comment; still a comment\n"
        "CREATE STREAM a (x STRING) WITH (kafka_topic='t;1', value_format='JSON');\n"
        "/* block; comment */ SHOW `odd;name`;\n"
        "SELECT 'it''s;' FROM a EMIT CHANGES;\n  -- trailing comment only\n"
    )
    pieces = split_statements(text)
    assert len(pieces) == 3
    assert pieces[0].endswith("value_format='JSON')")
    assert pieces[2] == "SELECT 'it''s;' FROM a EMIT CHANGES"


def test_variables_defined_and_undefined_in_order() -> None:
    variables: dict[str, str] = {"fmt": "JSON"}
    parsed = list(
        parse_statements(
            "DEFINE topic = 'orders';"
            "CREATE STREAM s (id INT) WITH (kafka_topic='${topic}', value_format='${FMT}');"
            "UNDEFINE topic; SHOW VARIABLES;",
            variables,
        )
    )
    created = parsed[1].statement
    assert isinstance(created, st.CreateSource)
    assert created.properties == {"KAFKA_TOPIC": "orders", "VALUE_FORMAT": "JSON"}
    assert "kafka_topic='orders'" in parsed[1].text
    assert variables == {"fmt": "JSON"}


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("SELEC * FROM x", "line 1:1:"),
        ("SHOW STREAMS\nEXTRA", "line 2:1:"),
        ("CREATE STREAM s (id INT WITH (kafka_topic='t')", "line 1:25:"),
        ("SELECT * FROM x WINDOW TUMBLING (SIZE 1 FORTNIGHT)", "line 1:41:"),
        ("CREATE STREAM s (id INT)", "line 1:1:"),
        ("SELECT 'open FROM x", "line 1:8:"),
    ],
)
def test_syntax_errors_name_line_and_column(text: str, position: str) -> None:
    with pytest.raises(KsqlSyntaxError) as info:
        parse_statement(text)
    assert str(info.value).startswith(position + " Syntax Error"), str(info.value)


def test_names_ksqldb_reads_that_look_like_numbers_or_keywords() -> None:
    query = parse_statement(
        "SELECT ROUND(v, -1) AS 1R, 12, REDUCE(map, 0, (s, k, x) => s + x) AS total,"
        " MAP('a' := 1) AS m, map_keys(map) FROM input;"
    )
    assert isinstance(query, st.Query)
    first, twelve, total, built, keys = query.select
    assert isinstance(first, st.SelectExpression) and first.alias == "1R"
    assert isinstance(twelve, st.SelectExpression) and twelve.expression == ex.Literal(12)
    assert isinstance(total, st.SelectExpression)
    reduce_call = total.expression
    assert isinstance(reduce_call, ex.FunctionCall)
    assert isinstance(reduce_call.arguments[0], ex.ColumnReference)
    assert reduce_call.arguments[0].name == "MAP"
    assert isinstance(built, st.SelectExpression)
    assert isinstance(built.expression, ex.MapConstructor)
    assert isinstance(keys, st.SelectExpression)
    assert isinstance(keys.expression, ex.FunctionCall) and keys.expression.name == "MAP_KEYS"
    create = parse_statement("CREATE STREAM s (map MAP<STRING, INT>) WITH (kafka_topic='t');")
    assert isinstance(create, st.CreateSource)
    assert create.elements[0].name == "MAP"
    assert create.elements[0].type == ex.MapType(
        ex.PrimitiveType("STRING"), ex.PrimitiveType("INTEGER")
    )


def test_a_lambda_with_one_parenthesised_parameter_and_unit_words() -> None:
    query = parse_statement(
        "SELECT TRANSFORM(xs, (x) => x + 1), DATEADD(DAYS, 1, d), DATEADD(day, 1, d) FROM s;"
    )
    assert isinstance(query, st.Query)
    transform, add_days, add_day = (item.expression for item in query.select)  # type: ignore[union-attr]
    assert isinstance(transform, ex.FunctionCall)
    assert isinstance(transform.arguments[1], ex.Lambda)
    assert transform.arguments[1].parameters == ("X",)
    # DAYS is the unit itself; DAY is a name in ksqlDB's grammar (a column reference)
    assert isinstance(add_days, ex.FunctionCall) and add_days.arguments[0] == ex.Literal("DAYS")
    assert isinstance(add_day, ex.FunctionCall)
    assert isinstance(add_day.arguments[0], ex.ColumnReference)
    with pytest.raises(KsqlSyntaxError, match="extraneous input '=>'"):
        parse_statement("SELECT TRANSFORM(xs, (x + 1) => x) FROM s;")


def test_a_double_literal_out_of_range_is_refused_by_the_parser() -> None:
    with pytest.raises(KsqlSyntaxError) as info:
        parse_statement("SELECT 1.7976931348623159E308 FROM s;")
    assert "Number overflows DOUBLE: 1.7976931348623159E308" in str(info.value)


def test_struct_all_in_a_select_list() -> None:
    query = parse_statement("SELECT k, v->*, s.w->x->* FROM s;")
    assert isinstance(query, st.Query)
    assert query.select[1] == st.StructAll(ex.ColumnReference("V", line=1, column=11))
    last = query.select[2]
    assert isinstance(last, st.StructAll) and isinstance(last.expression, ex.Dereference)


def test_null_is_no_type() -> None:
    with pytest.raises(KsqlSyntaxError, match="Syntax error at or near 'NULL'"):
        parse_statement("CREATE STREAM s (a NULL) WITH (kafka_topic='t', value_format='JSON');")
    with pytest.raises(KsqlSyntaxError, match="Syntax error at or near 'NULL'"):
        parse_statement("SELECT CAST(x AS MAP<STRING, NULL>) FROM s;")


def test_assert_topic_and_schema_parse() -> None:
    assert parse_statement(
        'ASSERT NOT EXISTS TOPIC "Odd" WITH (partitions=3) TIMEOUT 2 SECONDS'
    ) == st.AssertTopic("Odd", {"PARTITIONS": 3}, st.Duration(2, "SECONDS"), exists=False)
    assert parse_statement("assert topic keepsCase") == st.AssertTopic("keepsCase")
    assert parse_statement("ASSERT SCHEMA SUBJECT 'x-value' ID 4") == st.AssertSchema("x-value", 4)
    assert parse_statement("ASSERT NOT EXISTS SCHEMA ID 'a' TIMEOUT 1 MINUTE") == st.AssertSchema(
        None, "a", st.Duration(1, "MINUTE"), exists=False
    )
    # ksqlDB's test-only ASSERT VALUES is no statement of its server
    with pytest.raises(KsqlSyntaxError) as info:
        parse_statement("ASSERT VALUES foo (id INT) VALUES (123)")
    assert str(info.value) == (
        "line 1:8: Syntax Error\nSyntax error at or near 'VALUES' at line 1:8"
    )


def test_group_by_a_parenthesised_list() -> None:
    """GROUP BY (a, b) groups by a and b, as ksqlDB's grammar has it; a list of names
    in parentheses after another item is its 'missing ')''."""
    statement = parse_statement("SELECT f1, COUNT(*) FROM t GROUP BY (f3, f2, f1) EMIT CHANGES")
    assert isinstance(statement, st.Query)
    assert [e.name for e in statement.group_by] == ["F3", "F2", "F1"]  # type: ignore[attr-defined]
    statement = parse_statement("SELECT COUNT(*) FROM t GROUP BY (f3 + 1, f2) EMIT CHANGES")
    assert isinstance(statement, st.Query) and len(statement.group_by) == 2
    with pytest.raises(KsqlSyntaxError) as info:
        parse_statement("SELECT COUNT(*) FROM t GROUP BY f3, (f2, f1) EMIT CHANGES")
    assert "missing ')' at ','" in str(info.value)
