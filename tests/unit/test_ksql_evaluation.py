# ruff: noqa: E501  (the tables keep ksqlDB's messages whole)
"""ksqlDB's expressions evaluated over rows (strom.ksql.evaluation): types, values, null
handling, Java's integer overflow, DECIMAL rules, errors at compile time with ksqlDB's
messages and per-row errors reported and turned into null. Expected values come from
ksqlDB's documentation and its query-validation tests."""

from __future__ import annotations

import decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.ksql import expressions as ex
from strom.ksql import values as v
from strom.ksql.evaluation import Scope, compile_expression, expression_text
from strom.ksql.metastore import KsqlStatementError
from strom.ksql.parser import parse_statement

D = decimal.Decimal
POINT = ex.StructType((ex.StructField("X", v.INTEGER), ex.StructField("LABEL", v.STRING)))
COLUMNS: dict[str, ex.SqlType] = {
    "I": v.INTEGER,
    "J": v.INTEGER,
    "L": v.BIGINT,
    "F": v.DOUBLE,
    "S": v.STRING,
    "T": v.STRING,
    "B": v.BOOLEAN,
    "NB": v.BOOLEAN,
    "NI": v.INTEGER,
    "NS": v.STRING,
    "D1": ex.DecimalType(4, 2),
    "D2": ex.DecimalType(4, 2),
    "BY": v.BYTES,
    "TS": v.TIMESTAMP,
    "DT": v.DATE,
    "TM": v.TIME,
    "ARR": ex.ArrayType(v.INTEGER),
    "M": ex.MapType(v.STRING, v.DOUBLE),
    "P": POINT,
    "NP": POINT,
}
ROW: dict[str, Any] = {
    "I": 7,
    "J": -2,
    "L": 2**63 - 1,
    "F": 2.5,
    "S": "hello",
    "T": "50%_off",
    "B": True,
    "NB": None,
    "NI": None,
    "NS": None,
    "D1": D("10.10"),
    "D2": D("2.00"),
    "BY": b"\x01\xff",
    "TS": 1590451198000,  # 2020-05-25T23:59:58.000
    "DT": 18408,  # 2020-05-26
    "TM": 5660123,  # 01:34:20.123
    "ARR": [1, 2, 3],
    "M": {"x": 1.5, "y": -2.0},
    "P": {"X": 3, "LABEL": "p"},
    "NP": None,
}
SCOPE = Scope(COLUMNS)


def expression(text: str) -> ex.Expression:
    statement = parse_statement(f"SELECT {text} FROM S;")
    return statement.select[0].expression  # type: ignore[attr-defined, no-any-return]


def evaluate(text: str, row: dict[str, Any] | None = None) -> tuple[Any, ex.SqlType, list[str]]:
    errors: list[str] = []
    compiled = compile_expression(expression(text), SCOPE)
    return compiled.evaluate(ROW if row is None else row, errors.append), compiled.sql_type, errors


CASES: list[tuple[str, Any, ex.SqlType]] = [
    # literals and columns
    ("1", 1, v.INTEGER),
    ("3000000000", 3000000000, v.BIGINT),
    ("1.50", D("1.50"), ex.DecimalType(3, 2)),
    ("0.005", D("0.005"), ex.DecimalType(4, 3)),
    ("1.5E3", 1500.0, v.DOUBLE),
    ("'it''s'", "it's", v.STRING),
    ("TRUE", True, v.BOOLEAN),
    ("I", 7, v.INTEGER),
    # integer arithmetic as Java's
    ("I + 1", 8, v.INTEGER),
    ("I / 2", 3, v.INTEGER),
    ("-7 / 2", -3, v.INTEGER),
    ("-7 % 3", -1, v.INTEGER),
    ("7 % -3", 1, v.INTEGER),
    ("2147483647 + I", -2147483642, v.INTEGER),
    ("L + 1", -(2**63), v.BIGINT),
    ("I + L", -(2**63) + 6, v.BIGINT),
    ("-I", -7, v.INTEGER),
    ("I * F", 17.5, v.DOUBLE),
    ("F / 0", float("inf"), v.DOUBLE),
    ("I + NI", None, v.INTEGER),
    # DECIMAL precision and scale (ksqlDB's decimal.json)
    ("D1 + D2", D("12.10"), ex.DecimalType(5, 2)),
    ("D1 - D2", D("8.10"), ex.DecimalType(5, 2)),
    ("D1 * D2", D("20.2000"), ex.DecimalType(9, 4)),
    ("D1 / D2", D("5.0500000"), ex.DecimalType(11, 7)),
    ("D1 % D2", D("0.10"), ex.DecimalType(4, 2)),
    ("D1 + I", D("17.10"), ex.DecimalType(13, 2)),
    ("D1 + F", 12.6, v.DOUBLE),
    ("-D1", D("-10.10"), ex.DecimalType(4, 2)),
    # strings
    ("S + ' world'", "hello world", v.STRING),
    ("S + NS", None, v.STRING),
    # comparisons: null makes them false, numbers compare across types
    ("I = 7", True, v.BOOLEAN),
    ("I <> 7", False, v.BOOLEAN),
    ("I < L", True, v.BOOLEAN),
    ("D1 = 10.1", True, v.BOOLEAN),
    ("D1 > I", True, v.BOOLEAN),
    ("F >= 2.5", True, v.BOOLEAN),
    ("NI = 1", False, v.BOOLEAN),
    ("NI <> 1", False, v.BOOLEAN),
    ("S < 'world'", True, v.BOOLEAN),
    ("S = 'hello'", True, v.BOOLEAN),
    ("TS > '2020-05-25'", True, v.BOOLEAN),
    ("TS = '2020-05-25T23:59:58'", True, v.BOOLEAN),
    ("TS < '2020-05-26T01:59:58+0200'", False, v.BOOLEAN),
    ("'2020-05-25T23:59:58' IS NOT DISTINCT FROM TS", True, v.BOOLEAN),
    ("NI IS DISTINCT FROM 1", True, v.BOOLEAN),
    ("NI IS NOT DISTINCT FROM 1", False, v.BOOLEAN),
    ("DT = '2020-05-26'", True, v.BOOLEAN),
    ("DT > TS", True, v.BOOLEAN),
    ("TM > '01:34'", True, v.BOOLEAN),
    ("ARR = ARRAY[1, 2, 3]", True, v.BOOLEAN),
    ("P = STRUCT(X := 3, LABEL := 'p')", True, v.BOOLEAN),
    ("BY = BY", True, v.BOOLEAN),
    ("NI IS DISTINCT FROM NULL", False, v.BOOLEAN),
    ("I IS DISTINCT FROM NULL", True, v.BOOLEAN),
    ("I IS NOT DISTINCT FROM 7", True, v.BOOLEAN),
    ("NI IS NOT DISTINCT FROM NULL", True, v.BOOLEAN),
    # logic: three-valued over null booleans
    ("B AND NB", None, v.BOOLEAN),
    ("NOT B AND NB", False, v.BOOLEAN),
    ("B OR NB", True, v.BOOLEAN),
    ("NOT B OR NB", None, v.BOOLEAN),
    ("NOT NB", None, v.BOOLEAN),
    ("NOT (I > 5)", False, v.BOOLEAN),
    ("NI IS NULL", True, v.BOOLEAN),
    ("I IS NOT NULL", True, v.BOOLEAN),
    # BETWEEN, IN, LIKE
    ("I BETWEEN 1 AND 7", True, v.BOOLEAN),
    ("I NOT BETWEEN 1 AND 6", True, v.BOOLEAN),
    ("NI BETWEEN 1 AND 7", False, v.BOOLEAN),
    ("S BETWEEN 'a' AND 'z'", True, v.BOOLEAN),
    ("I IN (1, 7)", True, v.BOOLEAN),
    ("I IN (1, NULL)", False, v.BOOLEAN),
    ("I NOT IN (1, 2)", True, v.BOOLEAN),
    ("L IN (1, 9223372036854775807)", True, v.BOOLEAN),
    ("I IN (7.0)", True, v.BOOLEAN),
    ("NI IN (1)", False, v.BOOLEAN),
    ("S LIKE 'he%'", True, v.BOOLEAN),
    ("S LIKE 'h_llo'", True, v.BOOLEAN),
    ("S LIKE 'H%'", False, v.BOOLEAN),
    ("S NOT LIKE '%z%'", True, v.BOOLEAN),
    ("T LIKE '50!%!_off' ESCAPE '!'", True, v.BOOLEAN),
    ("S LIKE 'hel!%' ESCAPE '!'", False, v.BOOLEAN),
    ("NS LIKE '%'", None, v.BOOLEAN),
    # CASE
    ("CASE WHEN I > 5 THEN 'big' WHEN I > 2 THEN 'mid' ELSE 'small' END", "big", v.STRING),
    ("CASE WHEN I > 50 THEN 'big' END", None, v.STRING),
    ("CASE WHEN NB THEN 1 ELSE 2 END", 2, v.INTEGER),
    ("CASE I WHEN 1 THEN 'one' WHEN 7 THEN 'seven' END", "seven", v.STRING),
    ("CASE WHEN I > 5 THEN NULL ELSE 'x' END", None, v.STRING),
    # subscripts and dereference
    ("ARR[1]", 1, v.INTEGER),
    ("ARR[3]", 3, v.INTEGER),
    ("ARR[-1]", 3, v.INTEGER),
    ("ARR[-3]", 1, v.INTEGER),
    ("ARR[4]", None, v.INTEGER),
    ("ARR[0]", None, v.INTEGER),
    ("ARR[-4]", None, v.INTEGER),
    ("M['x']", 1.5, v.DOUBLE),
    ("M['nope']", None, v.DOUBLE),
    ("P->X", 3, v.INTEGER),
    ("P->LABEL", "p", v.STRING),
    ("NP->X", None, v.INTEGER),
    ("STRUCT(A := ARRAY[1, 2])->A[2]", 2, v.INTEGER),
    # constructors
    ("ARRAY[1, 2, 3]", [1, 2, 3], ex.ArrayType(v.INTEGER)),
    ("ARRAY[1, NULL]", [1, None], ex.ArrayType(v.INTEGER)),
    ("ARRAY[1, L]", [1, 2**63 - 1], ex.ArrayType(v.BIGINT)),
    ("ARRAY[1, 2.5]", [D("1.0"), D("2.5")], ex.ArrayType(ex.DecimalType(11, 1))),
    ("ARRAY[I, F]", [7.0, 2.5], ex.ArrayType(v.DOUBLE)),
    ("ARRAY[1, '2']", [1, 2], ex.ArrayType(v.INTEGER)),
    ("I IN (1, '7')", True, v.BOOLEAN),
    ("ARRAY[TRUE, 'no']", [True, False], ex.ArrayType(v.BOOLEAN)),
    ("S IN (TRUE, 10, 'hello', 10.30)", True, v.BOOLEAN),
    ("'10.30' IN (TRUE, 10, 10.30)", True, v.BOOLEAN),
    ("ARR IN (ARRAY[1, 2, 3], ARRAY[L])", True, v.BOOLEAN),
    ("ARRAY[ARR, ARRAY[L]]", [[1, 2, 3], [2**63 - 1]], ex.ArrayType(ex.ArrayType(v.BIGINT))),
    (
        "ARRAY[STRUCT(X := 1), STRUCT(Y := 'b')]",
        [{"X": 1, "Y": None}, {"X": None, "Y": "b"}],
        ex.ArrayType(
            ex.StructType((ex.StructField("X", v.INTEGER), ex.StructField("Y", v.STRING)))
        ),
    ),
    ("MAP('a' := 1, 'b' := 2)", {"a": 1, "b": 2}, ex.MapType(v.STRING, v.INTEGER)),
    (
        "STRUCT(X := 1, Y := 'y')",
        {"X": 1, "Y": "y"},
        ex.StructType((ex.StructField("X", v.INTEGER), ex.StructField("Y", v.STRING))),
    ),
]


@pytest.mark.parametrize(("text", "expected", "sql_type"), CASES, ids=[c[0] for c in CASES])
def test_expression_value_and_type(text: str, expected: Any, sql_type: ex.SqlType) -> None:
    value, actual_type, errors = evaluate(text)
    assert errors == []
    assert actual_type == sql_type
    assert value == expected
    assert type(value) is type(expected)


CAST_CASES: list[tuple[str, Any]] = [
    ("CAST(I AS STRING)", "7"),
    ("CAST(I AS BIGINT)", 7),
    ("CAST(I AS DOUBLE)", 7.0),
    ("CAST(I AS DECIMAL(5, 2))", D("7.00")),
    ("CAST(L AS INT)", -1),
    ("CAST(F AS INT)", 2),
    ("CAST(-2.7E0 AS INT)", -2),
    ("CAST(F AS STRING)", "2.5"),
    ("CAST(1.0E7 AS STRING)", "1.0E7"),
    ("CAST(1.0E-4 AS STRING)", "1.0E-4"),
    ("CAST(100.0E0 AS STRING)", "100.0"),
    ("CAST(D1 AS STRING)", "10.10"),
    ("CAST(D1 AS INT)", 10),
    ("CAST(D1 AS DOUBLE)", 10.1),
    ("CAST(1.255 AS DECIMAL(3, 2))", D("1.26")),
    ("CAST(-1.255 AS DECIMAL(3, 2))", D("-1.26")),
    ("CAST(2.5E0 AS DECIMAL(2, 0))", D("3")),
    ("CAST(' 12 ' AS INT)", 12),
    ("CAST('-9000000000' AS BIGINT)", -9000000000),
    ("CAST('1.5' AS DOUBLE)", 1.5),
    ("CAST('12.345' AS DECIMAL(4, 2))", D("12.35")),
    ("CAST('yes' AS BOOLEAN)", True),
    ("CAST('T' AS BOOLEAN)", True),
    ("CAST('no' AS BOOLEAN)", False),
    ("CAST('banana' AS BOOLEAN)", False),
    ("CAST(B AS STRING)", "true"),
    ("CAST('2020-05-26T01:34:20.123' AS TIMESTAMP)", 1590456860123),
    ("CAST('2020-05-26' AS TIMESTAMP)", 1590451200000),
    ("CAST('2020-05' AS DATE)", 18383),
    ("CAST('01:34:20.123' AS TIME)", 5660123),
    ("CAST('01:34' AS TIME)", 5640000),
    ("CAST(TS AS STRING)", "2020-05-25T23:59:58.000"),
    ("CAST(TS AS DATE)", 18407),
    ("CAST(TS AS TIME)", 86398000),
    ("CAST(DT AS TIMESTAMP)", 1590451200000),
    ("CAST(DT AS STRING)", "2020-05-26"),
    ("CAST(TM AS STRING)", "01:34:20"),
    ("CAST('AQI=' AS BYTES)", b"\x01\x02"),
    ("CAST(ARR AS STRING)", "[1, 2, 3]"),
    ("CAST(ARR AS ARRAY<STRING>)", ["1", "2", "3"]),
    ("CAST(M AS STRING)", "{x=1.5, y=-2.0}"),
    ("CAST(P AS STRING)", "Struct{X=3,LABEL=p}"),
    ("CAST(NI AS STRING)", None),
    ("CAST(NULL AS INT)", None),
]


@pytest.mark.parametrize(("text", "expected"), CAST_CASES, ids=[c[0] for c in CAST_CASES])
def test_cast(text: str, expected: Any) -> None:
    value, _, errors = evaluate(text)
    assert errors == []
    assert value == expected
    assert type(value) is type(expected)


ROW_ERRORS: list[tuple[str, str]] = [
    ("I / 0", "/ by zero"),
    ("I % 0", "/ by zero"),
    ("D1 / 0", "Division by zero"),
    ("1.0 / 3", "Rounding necessary"),
    ("CAST('x' AS INT)", 'For input string: "x"'),
    ("CAST('3000000000' AS INT)", 'For input string: "3000000000"'),
    ("CAST('nope' AS TIMESTAMP)", "Failed to parse timestamp 'nope'"),
    ("CAST('2020-13-01' AS DATE)", "Failed to parse date '2020-13-01'"),
    ("CAST(D1 AS DECIMAL(2, 1))", "Numeric field overflow"),
    ("CAST(999.99 AS DECIMAL(4, 1))", "must round to an absolute value less than 10^3"),
    ("S LIKE 'x!' ESCAPE '!'", "LIKE pattern must not end with escape character"),
]


@pytest.mark.parametrize(("text", "message"), ROW_ERRORS, ids=[c[0] for c in ROW_ERRORS])
def test_a_row_error_is_null_and_reported(text: str, message: str) -> None:
    value, _, errors = evaluate(text)
    assert value is None
    assert len(errors) == 1
    assert errors[0].startswith("Error computing expression ")
    assert message in errors[0]


def test_a_row_error_without_a_callback_is_null() -> None:
    compiled = compile_expression(expression("I / J / 0"), SCOPE)
    assert compiled.evaluate(ROW) is None
    assert compiled.evaluate({**ROW, "I": None}) is None


COMPILE_ERRORS: list[tuple[str, str]] = [
    ("I + 'x'", "Error processing expression: (I + 'x'). Unsupported arithmetic types. INTEGER STRING"),
    ("B * 2", "Error processing expression: (B * 2). Unsupported arithmetic types. BOOLEAN INTEGER"),
    ("I + NULL", "Error processing expression: (I + null). Arithmetic on types INTEGER and null are not supported."),
    ("FOO(I)", "Can't find any functions with the name 'FOO'"),
    ("I = 'x'", "Cannot compare I (INTEGER) to 'x' (STRING) with EQUAL."),
    ("B < TRUE", "Cannot compare B (BOOLEAN) to true (BOOLEAN) with LESS_THAN."),
    ("ARR > ARR", "Cannot compare ARR (ARRAY<INTEGER>) to ARR (ARRAY<INTEGER>) with GREATER_THAN."),
    ("I = NULL", "Comparison with NULL not supported: INTEGER = NULL"),
    ("CAST(B AS INT)", "Cast of BOOLEAN to INTEGER is not supported"),
    ("CAST(ARR AS MAP<STRING, INT>)", "Cast of ARRAY<INTEGER> to MAP<STRING, INTEGER> is not supported"),
    ("P->NOPE", "Could not find field 'NOPE' in 'P'."),
    ("P[1]", "Subscript expression (P[1]) do not apply to STRUCT<`X` INTEGER, `LABEL` STRING>. Use the dereference operator for STRUCTS: P->1"),
    ("ARRAY[NULL]", "Cannot construct an array with all NULL elements"),
    ("ARRAY[1, 'a']", 'invalid input syntax for type INTEGER: "a".'),
    ("ARRAY[1, TRUE]", "operator does not exist"),
    ("CASE WHEN I THEN 1 END", "WHEN operand type should be boolean.\nType for 'I' is INTEGER"),
    ("CASE WHEN B THEN 1 ELSE 'x' END", "Invalid Case expression. Type for the default clause should be the same as for 'THEN' clauses."),
    ("CASE WHEN B THEN 1 WHEN B THEN 'x' END", "Type for all 'THEN' clauses should be the same."),
    ("NULL", "Can't infer a type of null."),
    ("COUNT(I)", "Use of aggregate function COUNT requires a GROUP BY clause."),
    ("NOPE", "Column 'NOPE' cannot be resolved."),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), COMPILE_ERRORS, ids=[c[0] for c in COMPILE_ERRORS])
def test_a_type_error_is_ksqldbs_message(text: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as raised:
        compile_expression(expression(text), SCOPE)
    assert message in str(raised.value)


def test_qualified_references_and_computed_expressions_come_from_the_scope() -> None:
    scope = Scope(
        {"L_ID": v.INTEGER, "R_ID": v.INTEGER, "KSQL_AGG_0": v.BIGINT},
        qualified={("L", "ID"): "L_ID", ("R", "ID"): "R_ID"},
        expressions={expression("COUNT(*)"): "KSQL_AGG_0"},
    )
    compiled = compile_expression(expression("L.ID + R.ID + COUNT(*)"), scope)
    assert compiled.sql_type == v.BIGINT
    assert compiled.evaluate({"L_ID": 1, "R_ID": 2, "KSQL_AGG_0": 10}) == 13
    assert scope.resolve(ex.ColumnReference("ID", "L")) == "L_ID"
    assert scope.type_of("R_ID") == v.INTEGER


def test_rowtime_and_window_bounds_compare_with_a_timestamps_text() -> None:
    scope = Scope({"ROWTIME": v.BIGINT, "WINDOWSTART": v.BIGINT})
    row = {"ROWTIME": 1514764800001, "WINDOWSTART": 1581323504001}
    for text, expected in (
        ("ROWTIME > '2018-01-01T00:00:00.001'", False),
        ("ROWTIME >= '2018'", True),
        ("ROWTIME BETWEEN '2018-01-01T00:00:00.001' AND '2018-01-01T00:00:01'", True),
        ("'2020-02-10T08:31:44.001+0000' <= WINDOWSTART", True),
        ("ROWTIME > '2018-01-01T04:45:00+0445'", True),
    ):
        assert compile_expression(expression(text), scope).evaluate(row) is expected, text
    with pytest.raises(KsqlStatementError, match="Failed to parse timestamp 'soon'"):
        compile_expression(expression("ROWTIME > 'soon'"), scope)


def test_expression_text_is_ksqldbs() -> None:
    text = "CASE WHEN A > 1 THEN ARRAY[1, 2][1] ELSE -B END"
    assert (
        expression_text(expression(text)) == "(CASE WHEN (A > 1) THEN ARRAY[1, 2][1] ELSE -B END)"
    )
    assert expression_text(expression("S->F LIKE 'a%' ESCAPE '!'")) == "(S->F LIKE 'a%' ESCAPE '!')"
    assert expression_text(expression("COUNT(*)")) == "COUNT(*)"


INT_BOUNDS = st.integers(min_value=-(2**31), max_value=2**31 - 1)
LONG_BOUNDS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INT_SCOPE = Scope({"X": v.INTEGER, "Y": v.INTEGER})
LONG_SCOPE = Scope({"X": v.BIGINT, "Y": v.BIGINT})
INT_OPERATIONS = {op: compile_expression(expression(f"X {op} Y"), INT_SCOPE) for op in "+-*/%"}
LONG_OPERATIONS = {op: compile_expression(expression(f"X {op} Y"), LONG_SCOPE) for op in "+*"}


def _java_int(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


@given(INT_BOUNDS, INT_BOUNDS, st.sampled_from(sorted(INT_OPERATIONS)))
def test_integer_arithmetic_is_javas(left: int, right: int, operator: str) -> None:
    errors: list[str] = []
    value = INT_OPERATIONS[operator].evaluate({"X": left, "Y": right}, errors.append)
    if operator in "/%" and right == 0:
        assert value is None and errors
        return
    if operator == "+":
        expected = _java_int(left + right)
    elif operator == "-":
        expected = _java_int(left - right)
    elif operator == "*":
        expected = _java_int(left * right)
    else:
        quotient = abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1)
        expected = _java_int(quotient) if operator == "/" else left - right * quotient
    assert value == expected
    assert -(2**31) <= value < 2**31


@given(LONG_BOUNDS, LONG_BOUNDS)
def test_bigint_addition_and_multiplication_wrap_at_64_bits(left: int, right: int) -> None:
    row = {"X": left, "Y": right}
    assert LONG_OPERATIONS["+"].evaluate(row) == (left + right + 2**63) % 2**64 - 2**63
    assert LONG_OPERATIONS["*"].evaluate(row) == (left * right + 2**63) % 2**64 - 2**63


def test_lambda_parameters_shadow_nothing_outside_their_function() -> None:
    value, sql_type, errors = evaluate("TRANSFORM(ARR, X => X * I)")
    assert errors == []
    assert value == [7, 14, 21]
    assert sql_type == ex.ArrayType(v.INTEGER)


CLAUSE_ERRORS = [
    # a type error in a filter names the filter
    ("WHERE", "I >= 'x'", "Error in WHERE expression: Cannot compare I (INTEGER) to 'x' "
     "(STRING) with GREATER_THAN_OR_EQUAL."),
    ("HAVING", "TRUE + 1.5", "Error in HAVING expression: Error processing expression: "
     "(true + 1.5). Unsupported arithmetic types. BOOLEAN DECIMAL"),
    # values that cannot be coerced: the clause ksqlDB generates the code of
    ("SELECT", "CAST(S AS ARRAY<INT>)", "Invalid Select: Cast of STRING to ARRAY<INTEGER> is "
     "not supported."),
    ("WHERE", "B IN (TRUE, 10)", "Invalid Predicate: operator does not exist: BOOLEAN = "
     "INTEGER (10)\nHint: You might need to add explicit type casts.."),
    ("WHERE", "I IN (10, S)", "Invalid Predicate: operator does not exist: INTEGER = STRING "
     "(S)"),
    ("WHERE", "L IN ('10', '1O')", "Invalid Predicate: invalid input syntax for type BIGINT: "
     '"1O".'),
    # without a clause, the bare message
    (None, "CAST(S AS ARRAY<INT>)", "Cast of STRING to ARRAY<INTEGER> is not supported"),
]  # fmt: skip


@pytest.mark.parametrize(("clause", "text", "message"), CLAUSE_ERRORS)
def test_errors_are_worded_for_their_clause(clause: str | None, text: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as raised:
        compile_expression(expression(text), SCOPE, clause)
    assert str(raised.value).startswith(message)


def test_in_list_coerces_string_literals_to_the_operands_type() -> None:
    assert evaluate("I IN ('7', 8)")[0] is True
    assert evaluate("L IN ('1', 2)")[0] is False
    # inside constructors too: the operand's element, value and field types
    assert evaluate("ARR IN (ARRAY['1', '2', '3'])")[0] is True
    assert evaluate("ARR IN (ARRAY['1', NULL])")[0] is False
    assert evaluate("P IN (STRUCT(X := '3', LABEL := 'p'))")[0] is True
    with pytest.raises(KsqlStatementError) as raised:
        compile_expression(expression("ARR IN (ARRAY['1', 'x'])"), SCOPE, "WHERE")
    assert str(raised.value).startswith(
        'Invalid Predicate: invalid input syntax for type INTEGER: "x".'
    )
