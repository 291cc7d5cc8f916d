# ruff: noqa: E501  (the tables keep ksqlDB's examples and messages whole)
"""ksqlDB's scalar and aggregate functions evaluated in Python
(strom.ksql.scalar_functions, strom.ksql.aggregate_functions): the examples of ksqlDB's
function reference and query-validation tests with their results, null behaviour,
result types and the refusals of arguments that do not fit."""

from __future__ import annotations

import decimal
import math
import pickle
from typing import Any

import pytest

from strom.ksql import expressions as ex
from strom.ksql import values as v
from strom.ksql.aggregate_functions import (
    AGGREGATE_NAMES,
    aggregate_function,
    split_aggregate_call,
)
from strom.ksql.evaluation import Scope, compile_expression
from strom.ksql.functions import FUNCTIONS
from strom.ksql.metastore import KsqlStatementError
from strom.ksql.parser import parse_statement
from strom.ksql.scalar_functions import scalar_function, scalar_function_names

D = decimal.Decimal
SCOPE = Scope(
    {
        "S": v.STRING,
        "NS": v.STRING,
        "I": v.INTEGER,
        "NI": v.INTEGER,
        "F": v.DOUBLE,
        "NF": v.DOUBLE,
        "DEC": ex.DecimalType(7, 2),
        "TS": v.TIMESTAMP,
        "DT": v.DATE,
        "TM": v.TIME,
        "ARR": ex.ArrayType(v.INTEGER),
        "NARR": ex.ArrayType(v.INTEGER),
        "M": ex.MapType(v.STRING, v.INTEGER),
        "BY": v.BYTES,
    }
)
ROW: dict[str, Any] = {
    "S": "My Test $123",
    "NS": None,
    "I": 5,
    "NI": None,
    "F": -1.5,
    "NF": None,
    "DEC": D("12345.67"),
    "TS": 1590451198000,  # 2020-05-25T23:59:58.000Z
    "DT": 18408,  # 2020-05-26
    "TM": 5660123,  # 01:34:20.123
    "ARR": [3, None, 1, 2],
    "NARR": None,
    "M": {"apple": 10, "banana": 20},
    "BY": b"\x00\x00\x00\x01\x2a\x05\xf2\x00",
}


def evaluate(text: str) -> tuple[Any, ex.SqlType, list[str]]:
    statement = parse_statement(f"SELECT {text} FROM S;")
    compiled = compile_expression(statement.select[0].expression, SCOPE)  # type: ignore[attr-defined]
    errors: list[str] = []
    return compiled.evaluate(ROW, errors.append), compiled.sql_type, errors


STRING_CASES: list[tuple[str, Any]] = [
    ("LPAD('Foo', 7, 'Bar')", "BarBFoo"),
    ("LPAD('Foo', 2, 'Bar')", "Fo"),
    ("LPAD('', 2, 'Bar')", "Ba"),
    ("LPAD('123', 5, '0')", "00123"),
    ("LPAD('Foo', 7, '')", None),
    ("LPAD(NS, 7, 'x')", None),
    ("RPAD('Foo', 7, 'Bar')", "FooBarB"),
    ("RPAD('Foo', 2, 'Bar')", "Fo"),
    ("RPAD('', 2, 'Bar')", "Ba"),
    ("MASK(S)", "Xx-Xxxx--nnn"),
    ("MASK(S, '*', NULL, '1', NULL)", "*y *est $111"),
    ("MASK_KEEP_LEFT(S, 4)", "My Txxx--nnn"),
    ("MASK_KEEP_RIGHT(S, 4)", "Xx-Xxxx-$123"),
    ("MASK_LEFT(S, 4)", "Xx-Xest $123"),
    ("MASK_RIGHT(S, 4)", "My Test -nnn"),
    ("MASK(NS)", None),
    ("SUBSTRING('stream', 1, 4)", "stre"),
    ("SUBSTRING('stream', 3)", "ream"),
    ("SUBSTRING('stream', -3)", "eam"),
    ("SUBSTRING('stream', -3, 2)", "ea"),
    ("SUBSTRING('stream', 0, 2)", "st"),
    ("SUBSTRING('stream', 10)", ""),
    ("SUBSTRING(NS, 1)", None),
    ("REGEXP_EXTRACT('(.*) (.*)', 'hello there', 2)", "there"),
    ("REGEXP_EXTRACT('.*', 'hello')", "hello"),
    ("REGEXP_EXTRACT('(a)', 'hello', 2)", None),
    ("REGEXP_EXTRACT_ALL('(\\w+) (\\w+)', 'hello there nice day', 2)", ["there", "day"]),
    ("REGEXP_REPLACE('foobar', '(foo)(bar)', '$2$1')", "barfoo"),
    ("REGEXP_REPLACE('a.b.c', '\\.', '/')", "a/b/c"),
    ("REGEXP_SPLIT_TO_ARRAY('a.b.c.d', '\\.')", ["a", "b", "c", "d"]),
    ("REGEXP_SPLIT_TO_ARRAY('zzz1yyy22xx', '\\d+')", ["zzz", "yyy", "xx"]),
    ("SPLIT('a,b,,c', ',')", ["a", "b", "", "c"]),
    ("SPLIT('a.b', '.')", ["a", "b"]),
    ("SPLIT('abc', '')", ["a", "b", "c"]),
    ("SPLIT(NS, ',')", None),
    ("SPLIT_TO_MAP('apple:=green/cherry:=red', '/', ':=')", {"apple": "green", "cherry": "red"}),
    ("SPLIT_TO_MAP('a=1;;b;c=3', ';', '=')", {"a": "1", "c": "3"}),
    ("SPLIT_TO_MAP('a=1', '=', '=')", None),
    ("CONCAT('a', NULL, 'b', 'c')", "abc"),
    ("CONCAT_WS(', ', 'a', NULL, 'b')", "a, b"),
    ("CONCAT_WS(NULL, 'a', 'b')", None),
    ("UCASE('ab')", "AB"),
    ("LCASE('AB')", "ab"),
    ("TRIM('  a b \t')", "a b"),
    ("INITCAP('the   quick bROWN fox')", "The   Quick Brown Fox"),
    ("LEN('hello')", 5),
    ("LEN(NS)", None),
    ("INSTR('CORPORATE FLOOR', 'OR')", 2),
    ("INSTR('CORPORATE FLOOR', 'OR', 3)", 5),
    ("INSTR('CORPORATE FLOOR', 'OR', 3, 2)", 14),
    ("INSTR('CORPORATE FLOOR', 'OR', -3)", 5),
    ("INSTR('CORPORATE FLOOR', 'OR', -3, 2)", 2),
    ("INSTR('CORPORATE FLOOR', 'MISSING')", 0),
    ("INSTR(NS, 'x')", 0),
    ("REPLACE('Hello World', 'World', 'ksqlDB')", "Hello ksqlDB"),
    ("REPLACE(NS, 'a', 'b')", None),
    ("CHR(75)", "K"),
    ("CHR('\\u004b')", "K"),
    ("CHR(22909)", "好"),
    ("CHR('\\u597d')", "好"),
    ("CHR('\\ud820\\udeb8')", "\U000182b8"),  # a surrogate pair: one character
    ("CHR('\\ud820')", "?"),  # a lone surrogate, as Java writes it in UTF-8
    ("CHR(-1)", None),
    ("ELT(2, 'a', 'b', 'c')", "b"),
    ("ELT(4, 'a', 'b', 'c')", None),
    ("FIELD('b', 'a', 'b', 'c')", 2),
    ("FIELD('z', 'a', 'b')", 0),
    ("ENCODE('4578616d706C6521', 'hex', 'ascii')", "Example!"),
    ("ENCODE('X''4578616d706C6521''', 'hex', 'utf8')", "Example!"),
    ("ENCODE('0x578616d706C6521', 'hex', 'ascii')", "\x05xample!"),
    ("ENCODE('Example!', 'ascii', 'hex')", "4578616d706c6521"),
    ("ENCODE('ce95cebbcebbceacceb4ceb1', 'hex', 'utf8')", "Ελλάδα"),
    ("ENCODE('Ελλάδα', 'ascii', 'base64')", "Pz8/Pz8/"),
    ("ENCODE('zpXOu867zqzOtM6x', 'base64', 'hex')", "ce95cebbcebbceacceb4ceb1"),
    ("TO_BYTES('SGVsbG8=', 'base64')", b"Hello"),
    ("FROM_BYTES(TO_BYTES('Hello', 'utf8'), 'hex')", "48656C6C6F"),
    ("FROM_BYTES(TO_BYTES('48656C6C6F', 'hex'), 'utf8')", "Hello"),
    ("INT_FROM_BYTES(SUBSTRING(BY, 1, 4))", 1),
    ("INT_FROM_BYTES(TO_BYTES('AQAAAA==', 'base64'), 'LITTLE_ENDIAN')", 1),
    ("BIGINT_FROM_BYTES(BY, 'BIG_ENDIAN')", 5000000000),
    ("DOUBLE_FROM_BYTES(TO_BYTES('QICm/ZvJ9YI=', 'base64'))", 532.8738323),
    ("MD5('hello')", "5d41402abc4b2a76b9719d911017c592"),
    (
        "UUID(TO_BYTES('AAECAwQFBgcICQoLDA0ODw==', 'base64'))",
        "00010203-0405-0607-0809-0a0b0c0d0e0f",
    ),
    ("URL_DECODE_PARAM('%3Ffoo+%24bar')", "?foo $bar"),
    ("URL_ENCODE_PARAM('?foo $bar')", "%3Ffoo+%24bar"),
    ("URL_EXTRACT_FRAGMENT('http://www.test.com/?query#fragment')", "fragment"),
    ("URL_EXTRACT_FRAGMENT('http://www.nofragment.com')", None),
    ("URL_EXTRACT_HOST('http://test@confluent.io:8080')", "confluent.io"),
    ("URL_EXTRACT_PARAMETER('http://www.test.com/?one=a&two=b&three', 'two')", "b"),
    ("URL_EXTRACT_PARAMETER('http://test.com?a%20b=c%20d', 'a b')", "c d"),
    ("URL_EXTRACT_PATH('http://test@confluent.io:8080/nested/path?query&jobs')", "/nested/path"),
    ("URL_EXTRACT_PATH('http://www.test.com?query#fragment')", ""),
    ("URL_EXTRACT_PORT('http://test@confluent.io:8080/nested/path?query&jobs')", 8080),
    ("URL_EXTRACT_PORT('http://test@confluent.io')", None),
    ("URL_EXTRACT_PROTOCOL('https://test@confluent.io:8080/nested/path')", "https"),
    ("URL_EXTRACT_PROTOCOL('www.confluent.io')", None),
    ("URL_EXTRACT_QUERY('http://www.test.com/path?q1&q2')", "q1&q2"),
    ("URL_EXTRACT_QUERY('http://test@confluent.io:8080/path')", None),
]

MATH_CASES: list[tuple[str, Any]] = [
    ("ABS(-3)", 3),
    ("ABS(F)", 1.5),
    ("ABS(-DEC)", D("12345.67")),
    ("CEIL(F)", -1.0),
    ("CEIL(DEC)", D("12346.00")),
    ("FLOOR(F)", -2.0),
    ("FLOOR(I)", 5),
    ("ROUND(1.5E0)", 2),
    ("ROUND(-1.5E0)", -1),
    ("ROUND(-1.9E0)", -2),
    ("ROUND(I)", 5),
    ("ROUND(1.2345E0, 2)", 1.23),
    ("ROUND(-1.2355E0, 3)", -1.235),
    ("ROUND(DEC)", D("12346")),
    ("ROUND(DEC, 1)", D("12345.70")),
    ("ROUND(DEC, -2)", D("12300.00")),
    ("TRUNC(DEC, -3)", D("12000.00")),
    ("TRUNC(DEC)", D("12345")),
    ("TRUNC(-1.9E0)", -1),
    ("TRUNC(1.2399E0, 2)", 1.23),
    ("SQRT(16)", 4.0),
    ("SQRT(-1)", math.nan),
    ("CBRT(27.0E0)", 3.0),
    ("EXP(0)", 1.0),
    ("LN(1)", 0.0),
    ("LN(0)", -math.inf),
    ("LOG(100)", math.log(100)),
    ("LOG(2, 8)", 3.0),
    ("LOG(1, 8)", math.nan),
    ("LOG(2, 0)", -math.inf),
    ("POWER(2, 10)", 1024.0),
    ("POWER(10, 400)", math.inf),
    ("SIGN(F)", -1),
    ("SIGN(0)", 0),
    ("SIGN(I)", 1),
    ("DEGREES(PI())", 180.0),
    ("RADIANS(180)", math.pi),
    ("ACOS(2)", math.nan),
    ("ATAN2(1, 1)", math.pi / 4),
    ("COT(0.0E0)", math.inf),
    ("GREATEST(1, 5, 3)", 5),
    ("GREATEST(1, 2.5E0, NULL)", 2.5),
    ("GREATEST('apple', 'banana')", "banana"),
    ("LEAST(4, NI, 2)", 2),
    ("LEAST(NI, NI)", None),
    ("GREATEST(DT, FROM_DAYS(5), NULL, '2021-01-01')", 18628),
    ("LEAST(TS, '2020-01-01T00:00:00')", 1577836800000),
    ("GEO_DISTANCE(37.4439, -122.1663, 51.5257, -0.1122)", 8634.659796579544),
    ("GEO_DISTANCE(51.5257, -0.1122, -33.9323, 18.4197, 'KM')", 9673.40421197142),
    ("GEO_DISTANCE(39.18660374, -76.73262144, 39.18660374, -76.73222145)", 0.03447366811448324),
    ("GENERATE_SERIES(1, 5)", [1, 2, 3, 4, 5]),
    ("GENERATE_SERIES(5, 1)", [5, 4, 3, 2, 1]),
    ("GENERATE_SERIES(0, 9, 3)", [0, 3, 6, 9]),
    ("GENERATE_SERIES(0, 10, 3)", [0, 3, 6, 9]),
    ("GENERATE_SERIES(-4, -8, -2)", [-4, -6, -8]),
]

COLLECTION_CASES: list[tuple[str, Any]] = [
    ("ARRAY_CONCAT(ARRAY[1, 2, 3, 1, 2], ARRAY[4, 1])", [1, 2, 3, 1, 2, 4, 1]),
    (
        "ARRAY_CONCAT(ARRAY['apple', 'apple', NULL, 'cherry'], ARRAY['cherry'])",
        ["apple", "apple", None, "cherry", "cherry"],
    ),
    ("ARRAY_CONCAT(NARR, ARRAY[1])", [1]),
    ("ARRAY_CONCAT(NARR, NARR)", None),
    ("ARRAY_DISTINCT(ARRAY[1, 1, 2, 3, 1, 2])", [1, 2, 3]),
    ("ARRAY_DISTINCT(ARRAY['apple', 'apple', NULL, 'cherry'])", ["apple", None, "cherry"]),
    ("ARRAY_EXCEPT(ARRAY[1, 2, 3, 1, 2], ARRAY[2, 3])", [1]),
    ("ARRAY_EXCEPT(ARRAY['apple', 'apple', NULL, 'cherry'], ARRAY['cherry'])", ["apple", None]),
    ("ARRAY_INTERSECT(ARRAY[1, 2, 3, 1, 2], ARRAY[2, 1])", [1, 2]),
    ("ARRAY_INTERSECT(ARRAY['apple', 'apple', NULL, 'cherry'], ARRAY['apple'])", ["apple"]),
    ("ARRAY_UNION(ARRAY[1, 2, 3, 1, 2], ARRAY[4, 1])", [1, 2, 3, 4]),
    (
        "ARRAY_UNION(ARRAY['apple', 'apple', NULL, 'cherry'], ARRAY['cherry'])",
        ["apple", None, "cherry"],
    ),
    ("ARRAY_MAX(ARRAY[-1, 2, NULL, 0])", 2),
    ("ARRAY_MAX(ARRAY[false, NULL, true])", True),
    ("ARRAY_MAX(ARRAY['Foo', 'Bar', NULL, 'baz'])", "baz"),
    ("ARRAY_MIN(ARRAY[-1, 2, NULL, 0])", -1),
    ("ARRAY_MIN(ARRAY['Foo', 'Bar', NULL, 'baz'])", "Bar"),
    ("ARRAY_MIN(ARRAY[CAST(NULL AS INT)])", None),
    ("ARRAY_REMOVE(ARRAY[1, 2, 3, 2, 1], 2)", [1, 3, 1]),
    ("ARRAY_REMOVE(ARRAY[false, NULL, true, true], false)", [None, True, True]),
    ("ARRAY_REMOVE(ARRAY['Foo', 'Bar', NULL, 'baz'], NULL)", ["Foo", "Bar", "baz"]),
    ("ARRAY_SORT(ARR)", [1, 2, 3, None]),
    ("ARRAY_SORT(ARR, 'DESC')", [3, 2, 1, None]),
    ("ARRAY_SORT(ARRAY['b', 'a', 'C'])", ["C", "a", "b"]),
    ("ARRAY_SORT(ARR, 'sideways')", None),
    ("ARRAY_LENGTH(ARR)", 4),
    ("ARRAY_LENGTH(NARR)", None),
    ("ARRAY_CONTAINS(ARR, 2)", True),
    ("ARRAY_CONTAINS(ARR, 7)", False),
    ("ARRAY_CONTAINS(NARR, 7)", False),
    ("ARRAY_JOIN(ARRAY[1, 2, 3])", "1,2,3"),
    ("ARRAY_JOIN(ARRAY[true, NULL], '|')", "true|null"),
    ("ARRAY_JOIN(ARRAY[1.5E0, 2.0E0], ' ')", "1.5 2.0"),
    ("SLICE(ARRAY[1, 2, 3, 4], 2, 3)", [2, 3]),
    ("SLICE(ARRAY[1, 2, 3, 4], 1, 4)", [1, 2, 3, 4]),
    ("SLICE(ARRAY[1, 2, 3, 4], 0, 2)", None),
    ("MAP_KEYS(MAP('apple' := 10, 'banana' := 20))", ["apple", "banana"]),
    ("MAP_VALUES(MAP('apple' := 10, 'banana' := 20))", [10, 20]),
    (
        "MAP_UNION(MAP('apple' := 10, 'banana' := 20), MAP('cherry' := 99))",
        {"apple": 10, "banana": 20, "cherry": 99},
    ),
    (
        "MAP_UNION(MAP('apple' := 10, 'banana' := 20), MAP('apple' := 50))",
        {"apple": 50, "banana": 20},
    ),
    ("AS_MAP(ARRAY['a', 'b'], ARRAY[1, 2])", {"a": 1, "b": 2}),
    ("ENTRIES(MAP('b' := 2, 'a' := 1), true)", [{"K": "a", "V": 1}, {"K": "b", "V": 2}]),
    ("ENTRIES(MAP('b' := 2, 'a' := 1), false)", [{"K": "b", "V": 2}, {"K": "a", "V": 1}]),
    ("M['apple']", 10),
    # lambdas (ksqlDB's transform-*.json, filter.json, reduce-*.json)
    ("TRANSFORM(ARR, x => COALESCE(x, 0) + 5)", [8, 5, 6, 7]),
    ("TRANSFORM(M, (k, v) => UCASE(k), (k, v) => v * 2)", {"APPLE": 20, "BANANA": 40}),
    ("FILTER(ARRAY[1, 2, 3, 4], x => x % 2 = 0)", [2, 4]),
    ("FILTER(M, (k, v) => v > 15)", {"banana": 20}),
    ("REDUCE(ARRAY[1, 2, 3], 0, (s, x) => s + x)", 6),
    ("REDUCE(M, 0, (s, k, v) => s + v)", 30),
    ("REDUCE(NARR, 5, (s, x) => s + x)", 5),
    ("TRANSFORM(ARRAY[ARRAY[1, 2], ARRAY[3]], a => REDUCE(a, 0, (s, x) => s + x))", [3, 3]),
    # nulls
    ("COALESCE(NULL, NI, 3)", 3),
    ("COALESCE(NI, NI)", None),
    ("IFNULL(NS, 'x')", "x"),
    ("IFNULL(S, 'x')", "My Test $123"),
    ("NULLIF(I, 5)", None),
    ("NULLIF(I, 6)", 5),
    ("AS_VALUE(I)", 5),
]

JSON_CASES: list[tuple[str, Any]] = [
    (
        'EXTRACTJSONFIELD(\'{"log": {"cloud": "gcp836Csd", "app": "ksProcessor", "instance": 4}}\', \'$.log.cloud\')',
        "gcp836Csd",
    ),
    ("EXTRACTJSONFIELD('{\"log\": {\"instance\": 4}}', '$.log.instance')", "4"),
    ("EXTRACTJSONFIELD('{\"a\": [1, {\"b\": [true]}]}', '$.a[1].b')", "[true]"),
    ("EXTRACTJSONFIELD('{\"a\": [1, {\"b\": [true]}]}', '$[''a''][0]')", "1"),
    ("EXTRACTJSONFIELD('{\"a\": 1}', '$.missing')", None),
    ("EXTRACTJSONFIELD('not json', '$.a')", None),
    ("IS_JSON_STRING('[1, 2, 3]')", True),
    ("IS_JSON_STRING('{}')", True),
    ("IS_JSON_STRING('1')", True),
    ("IS_JSON_STRING('\"abc\"')", True),
    ("IS_JSON_STRING('null')", True),
    ("IS_JSON_STRING('')", False),
    ("IS_JSON_STRING('abc')", False),
    ("IS_JSON_STRING(NS)", False),
    ("JSON_ARRAY_LENGTH('[1, 2, 3]')", 3),
    ("JSON_ARRAY_LENGTH('[1, [1, [2]], 3]')", 3),
    ("JSON_ARRAY_LENGTH('[]')", 0),
    ("JSON_ARRAY_LENGTH('{}')", None),
    ("JSON_ARRAY_LENGTH('123')", None),
    ("JSON_ARRAY_LENGTH('abc')", None),
    ("JSON_ARRAY_CONTAINS('[1, 2, 3]', 3)", True),
    ("JSON_ARRAY_CONTAINS('[1, 2, 3]', 4)", False),
    ("JSON_ARRAY_CONTAINS('[\"a\", 1]', 'a')", True),
    ("JSON_ARRAY_CONTAINS('{}', 1)", False),
    ("JSON_CONCAT('{\"a\": 1}', '{\"b\": 2}')", '{"a":1,"b":2}'),
    ('JSON_CONCAT(\'{"a": {"5": 6}}\', \'{"a": {"3": 4}}\')', '{"a":{"3":4}}'),
    ("JSON_CONCAT('{}', '{}')", "{}"),
    ("JSON_CONCAT('[1, 2]', '[3, 4]')", "[1,2,3,4]"),
    ("JSON_CONCAT('[1, [2]]', '[[[3]], [[[4]]]]')", "[1,[2],[[3]],[[[4]]]]"),
    ("JSON_CONCAT('null', 'null')", "[null,null]"),
    ("JSON_CONCAT('[1, 2]', '{\"a\": 1}')", '[1,2,{"a":1}]'),
    ("JSON_CONCAT('1', '2')", "[1,2]"),
    ("JSON_CONCAT('abc', '[1]')", None),
    ("JSON_CONCAT(NS, '[1]')", None),
    ('JSON_KEYS(\'{"a": "abc", "b": { "c": "a" }, "d": 1}\')', ["a", "b", "d"]),
    ("JSON_KEYS('{}')", []),
    ("JSON_KEYS('[]')", None),
    ("JSON_KEYS('')", None),
    (
        'JSON_RECORDS(\'{"a": "abc", "b": { "c": "a" }, "d": 1}\')',
        {"a": "abc", "b": '{"c":"a"}', "d": "1"},
    ),
    ("JSON_RECORDS('{}')", {}),
    ('JSON_RECORDS(\'{"White": "Seven", "n": 1.50}\')', {"White": "Seven", "n": "1.50"}),
    ("EXTRACTJSONFIELD('{\"name\": \"cdd\"}}', '$.name')", "cdd"),
    ("JSON_RECORDS('[]')", None),
    ('JSON_ITEMS(\'[{"type": "A"}, {"type": "B"}]\')', ['{"type":"A"}', '{"type":"B"}']),
    ("JSON_ITEMS('[1, 2, 3]')", ["1", "2", "3"]),
    ("JSON_ITEMS('abc')", None),
    ("TO_JSON_STRING(1)", "1"),
    ("TO_JSON_STRING(15.3)", "15.3"),
    ("TO_JSON_STRING('abc')", '"abc"'),
    ("TO_JSON_STRING(true)", "true"),
    ("TO_JSON_STRING(PARSE_DATE('2021-10-11', 'yyyy-MM-dd'))", '"2021-10-11"'),
    ("TO_JSON_STRING(PARSE_TIME('13:25', 'HH:mm'))", '"13:25"'),
    (
        "TO_JSON_STRING(PARSE_TIMESTAMP('2021-06-30 12:18:39.446', 'yyyy-MM-dd HH:mm:ss.SSS'))",
        '"2021-06-30T12:18:39.446"',
    ),
    ("TO_JSON_STRING(NI)", "null"),
    ("TO_JSON_STRING(ARRAY[1, 2, 3])", "[1,2,3]"),
    ("TO_JSON_STRING(STRUCT(id := 1, name := 'A'))", '{"ID":1,"NAME":"A"}'),
    ("TO_JSON_STRING(MAP('c' := 2, 'd' := 4))", '{"c":2,"d":4}'),
    (
        "TO_JSON_STRING(ARRAY[STRUCT(json_key := 1, json_value := MAP('c' := 2, 'd' := 3))])",
        '[{"JSON_KEY":1,"JSON_VALUE":{"c":2,"d":3}}]',
    ),
    ("TO_JSON_STRING(TO_BYTES('IQ==', 'base64'))", '"IQ=="'),
]

DATE_CASES: list[tuple[str, Any]] = [
    ("UNIX_TIMESTAMP(TS)", 1590451198000),
    ("UNIX_DATE(DT)", 18408),
    ("FROM_UNIXTIME(1590451198000)", 1590451198000),
    ("FROM_DAYS(18408)", 18408),
    ("FORMAT_TIMESTAMP(TS, 'yyyy-MM-dd HH:mm:ss.SSS')", "2020-05-25 23:59:58.000"),
    (
        "FORMAT_TIMESTAMP(TS, 'yyyy-MM-dd''T''HH:mm:ssXXX', 'America/Los_Angeles')",
        "2020-05-25T16:59:58-07:00",
    ),
    ("FORMAT_TIMESTAMP(TS, 'dd MMM yyyy, EEE h:mm a', '+05:30')", "26 May 2020, Tue 5:29 AM"),
    ("PARSE_TIMESTAMP('2020-05-25 23:59:58', 'yyyy-MM-dd HH:mm:ss')", 1590451198000),
    ("PARSE_TIMESTAMP('2020-05-25T16:59:58-0700', 'yyyy-MM-dd''T''HH:mm:ssZ')", 1590451198000),
    (
        "PARSE_TIMESTAMP('2020-05-25 16:59:58', 'yyyy-MM-dd HH:mm:ss', 'America/Los_Angeles')",
        1590451198000,
    ),
    ("PARSE_TIMESTAMP('26/May/2020', 'dd/MMM/yyyy')", 1590451200000),
    # a zone's short name in the text is its region, daylight time included: -07:00 in May
    ("PARSE_TIMESTAMP('2020-05-25 16:59:58 PST', 'yyyy-MM-dd HH:mm:ss zzz')", 1590451198000),
    ("PARSE_TIMESTAMP('2020-01-25 15:59:58 PST', 'yyyy-MM-dd HH:mm:ss zzz')", 1579996798000),
    ("TIMESTAMPTOSTRING(1590451198000, 'yyyy-MM-dd HH:mm')", "2020-05-25 23:59"),
    ("TIMESTAMPTOSTRING(1590451198000, 'yyyy-MM-dd HH:mm', 'Europe/London')", "2020-05-26 00:59"),
    ("STRINGTOTIMESTAMP('2020-05-26', 'yyyy-MM-dd')", 1590451200000),
    ("STRINGTOTIMESTAMP('2020-05-26 02:00', 'yyyy-MM-dd HH:mm', 'Europe/Paris')", 1590451200000),
    ("FORMAT_DATE(DT, 'EEEE d MMMM yyyy')", "Tuesday 26 May 2020"),
    ("FORMAT_DATE(DT, 'yy-D')", "20-147"),
    ("PARSE_DATE('26/05/2020', 'dd/MM/yyyy')", 18408),
    ("PARSE_DATE('2020-05-26-01-01', 'yyyy-MM-dd')", 18408),
    ("DATETOSTRING(18408, 'yyyy.MM.dd')", "2020.05.26"),
    ("STRINGTODATE('2020.05.26', 'yyyy.MM.dd')", 18408),
    ("FORMAT_TIME(TM, 'HH:mm:ss.SSS')", "01:34:20.123"),
    ("FORMAT_TIME(TM, 'h:mm a')", "1:34 AM"),
    ("PARSE_TIME('01:34 PM', 'hh:mm a')", 48840000),
    ("PARSE_TIME('13:25', 'HH:mm')", 48300000),
    ("CONVERT_TZ(TS, 'UTC', 'America/Los_Angeles')", 1590451198000 - 7 * 3600000),
    ("CONVERT_TZ(TS, 'Asia/Kolkata', 'UTC')", 1590451198000 - 19800000),
    ("TIMESTAMPADD(SECONDS, 5, TS)", 1590451203000),
    ("TIMESTAMPADD(MILLISECONDS, -5, TS)", 1590451197995),
    ("TIMESTAMPSUB(DAYS, 1, TS)", 1590451198000 - 86400000),
    ("DATEADD(DAYS, -5, DT)", 18403),
    ("DATESUB(DAYS, 8, DT)", 18400),
    ("DATEADD(HOURS, 47, DT)", 18409),
    ("TIMEADD(HOURS, 23, TM)", 5660123 + 23 * 3600000 - 86400000),
    ("TIMESUB(MINUTES, 35, TM)", 5660123 - 35 * 60000 + 0),
    ("TIMESTAMPADD(SECONDS, NI, TS)", None),
]

# Shapes ksqlDB accepts that were refused or answered otherwise here: a time unit word as
# the first argument, a null unit for GEO_DISTANCE (kilometres), DECIMAL beyond Python's
# default 28 digits, a lambda's single parameter in parentheses.
CONFORMANCE_CASES: list[tuple[str, Any]] = [
    ("DATEADD(DAYS, 10, DT)", 18418),
    ("DATESUB(DAYS, 8, DT)", 18400),
    ("TIMEADD(SECONDS, 2, TM)", 5662123),
    ("TIMESTAMPSUB(MILLISECONDS, 5, TS)", 1590451197995),
    ("GEO_DISTANCE(0.0, 0.0, 0.0, 1.0, NS)", 111.19492664455873),
    ("GEO_DISTANCE(0.0, 0.0, 0.0, 1.0, 'miles')", 69.09758918358688),
    ("GEO_DISTANCE(0.0, NF, 0.0, 1.0)", None),
    ("ROUND(CAST('98765432123456789.5' AS DECIMAL(33, 16)))", D("98765432123456790")),
    (
        "TRUNC(CAST('98765432123456789.75' AS DECIMAL(33, 16)), 1)",
        D("98765432123456789.7000000000000000"),
    ),
    ("TRANSFORM(ARR, (x) => COALESCE(x, 1) * 2)", [6, 2, 2, 4]),
    ("REDUCE(M, 1, (s, k, x) => s + x)", 31),
]

ALL_CASES = (
    STRING_CASES + MATH_CASES + COLLECTION_CASES + JSON_CASES + DATE_CASES + CONFORMANCE_CASES
)


@pytest.mark.parametrize(("text", "expected"), ALL_CASES, ids=[c[0][:60] for c in ALL_CASES])
def test_function_value(text: str, expected: Any) -> None:
    value, _, errors = evaluate(text)
    assert errors == []
    if isinstance(expected, float) and math.isnan(expected):
        assert isinstance(value, float) and math.isnan(value)
    elif isinstance(expected, float) and not math.isinf(expected):
        assert value == pytest.approx(expected, rel=1e-6)
    else:
        assert value == expected
        assert type(value) is type(expected)


TYPE_CASES: list[tuple[str, ex.SqlType]] = [
    ("ABS(I)", v.INTEGER),
    ("ABS(DEC)", ex.DecimalType(7, 2)),
    ("ROUND(F)", v.BIGINT),
    ("ROUND(F, 2)", v.DOUBLE),
    ("ROUND(DEC)", ex.DecimalType(5, 0)),
    ("ROUND(DEC, 1)", ex.DecimalType(7, 2)),
    ("CEIL(I)", v.INTEGER),
    ("SQRT(I)", v.DOUBLE),
    ("SIGN(F)", v.INTEGER),
    ("GREATEST(I, 2.5E0)", v.DOUBLE),
    ("GREATEST(CAST(I AS BIGINT), 3000000000)", v.BIGINT),
    ("GENERATE_SERIES(CAST(1 AS BIGINT), 3)", ex.ArrayType(v.BIGINT)),
    ("COALESCE(NI, 1)", v.INTEGER),
    ("ARRAY_MAX(ARR)", v.INTEGER),
    ("MAP_VALUES(M)", ex.ArrayType(v.INTEGER)),
    (
        "ENTRIES(M, true)",
        ex.ArrayType(
            ex.StructType((ex.StructField("K", v.STRING), ex.StructField("V", v.INTEGER)))
        ),
    ),
    ("TRANSFORM(ARR, x => CAST(x AS STRING))", ex.ArrayType(v.STRING)),
    ("TRANSFORM(M, (k, v) => v, (k, v) => k)", ex.MapType(v.INTEGER, v.STRING)),
    ("REDUCE(ARR, 0.0E0, (s, x) => s + x)", v.DOUBLE),
    ("FROM_UNIXTIME(I)", v.TIMESTAMP),
    ("PARSE_DATE(S, 'yyyy')", v.DATE),
    ("LEN(BY)", v.INTEGER),
    ("SUBSTRING(BY, 1)", v.BYTES),
    ("CONCAT(BY, BY)", v.BYTES),
    ("UUID()", v.STRING),
]


@pytest.mark.parametrize(("text", "sql_type"), TYPE_CASES, ids=[c[0] for c in TYPE_CASES])
def test_function_result_type(text: str, sql_type: ex.SqlType) -> None:
    assert evaluate(text)[1] == sql_type


REFUSALS: list[tuple[str, str]] = [
    (
        "LEN(I)",
        "Function 'len' does not accept parameters (INTEGER).\nValid alternatives are:\nLEN(STRING)\nLEN(BYTES)",
    ),
    ("SUBSTRING(S, 'x')", "Function 'substring' does not accept parameters (STRING, STRING)."),
    ("ARRAY_LENGTH(S)", "Function 'ARRAY_LENGTH' does not accept parameters (STRING)."),
    ("TRANSFORM(ARR, (a, b) => a)", "Function 'transform' does not accept parameters"),
    ("FILTER(ARR, x => x + 1)", "Function 'filter' does not accept parameters"),
    # the name as ksqlDB's implementation declares it
    ("DATEADD(DT, 5, DT)", "Function 'dateadd' does not accept parameters (DATE, INTEGER, DATE)."),
    ("ROUND(S)", "Function 'Round' does not accept parameters (STRING)."),
    # GREATEST and LEAST: a call fitting several of their signatures is ambiguous
    (
        "GREATEST(I, 3000000000)",
        "Function 'greatest' cannot be resolved due to ambiguous method parameters"
        " (INTEGER, BIGINT).",
    ),
    (
        "LEAST(NULL, NULL)",
        "Function 'least' cannot be resolved due to ambiguous method parameters (null, null).",
    ),
    ("GREATEST()", "Function 'greatest' does not accept parameters ()."),
    ("MAP(NULL := 1)", "Cannot construct a map with all NULL keys"),
    (
        "STRUCT(a := S, a := I)",
        "Duplicate field names found in STRUCT: '`A` STRING' and '`A` INTEGER'",
    ),
    ("9223372036854775808", "Invalid numeric literal: 9223372036854775808"),
    ("NOPE(1)", "Can't find any functions with the name 'NOPE'"),
    ("SUM(I)", "Use of aggregate function SUM requires a GROUP BY clause."),
]


@pytest.mark.parametrize(("text", "message"), REFUSALS, ids=[c[0] for c in REFUSALS])
def test_arguments_that_do_not_fit_are_refused(text: str, message: str) -> None:
    with pytest.raises(KsqlStatementError) as raised:
        evaluate(text)
    assert message in str(raised.value)


ROW_ERRORS: list[tuple[str, str]] = [
    ("GENERATE_SERIES(1, 5, 0)", "GENERATE_SERIES step cannot be zero"),
    ("GENERATE_SERIES(1, 5, -1)", "GENERATE_SERIES step has wrong sign"),
    ("INT_FROM_BYTES(BY)", "Number of bytes must be equal to 4, but found 8"),
    ("MASK(S, 'ab', NULL, NULL, NULL)", "Invalid mask character"),
    ("MASK_LEFT(S, -1)", "requires a non-negative number of characters"),
    ("PARSE_TIMESTAMP('2020-05-25', 'dd/MM/yyyy')", "Failed to parse timestamp '2020-05-25'"),
    ("FORMAT_TIMESTAMP(TS, 'yyyy bb')", "Unknown pattern letter: b"),
    ("CONVERT_TZ(TS, 'UTC', 'Mars/Olympus')", "Invalid time zone"),
    ("REGEXP_EXTRACT('(', S)", "Invalid regular expression pattern: ("),
    (
        "ENCODE(S, 'rot13', 'hex')",
        "Supported input and output encodings are: hex, utf8, ascii and base64",
    ),
    ("CONCAT_WS(',')", "Function Concat_WS expects at least two input arguments."),
    ("ENCODE('x''578616d706C6521''', 'hex', 'ascii')", "as hex"),
    ("TRANSFORM(M, (k, v) => 'same', (k, v) => v)", "Duplicate key same"),
    # arithmetic in a lambda fails on a null, as ksqlDB's compiled lambda does: the call is null
    ("TRANSFORM(ARR, x => x + 5)", "a null operand in a lambda"),
    ("REDUCE(ARR, 0, (s, x) => s + x)", "a null operand in a lambda"),
]


@pytest.mark.parametrize(("text", "message"), ROW_ERRORS, ids=[c[0] for c in ROW_ERRORS])
def test_a_function_failure_is_null_for_the_row_and_reported(text: str, message: str) -> None:
    value, _, errors = evaluate(text)
    assert value is None
    assert len(errors) == 1 and message in errors[0]


NESTED_ERRORS: list[tuple[str, Any]] = [
    ("ARRAY[44, STRINGTODATE(S, 'yyyyMMdd')]", [44, None]),
    ("MAP('boo' := STRINGTODATE(S, 'yyyyMMdd'), 'shoe' := 3)", {"boo": None, "shoe": 3}),
    ("STRUCT(F1 := 'moo', F2 := STRINGTODATE(S, 'yyyyMMdd'))", {"F1": "moo", "F2": None}),
    ("IFNULL(CAST(PARSE_DATE(S, 'yyyy-MM-dd') AS STRING), '1900-01-01')", "1900-01-01"),
    ("COALESCE(PARSE_DATE(S, 'yyyy-MM-dd'), FROM_DAYS(7))", 7),
]


@pytest.mark.parametrize(("text", "expected"), NESTED_ERRORS, ids=[c[0] for c in NESTED_ERRORS])
def test_a_failing_part_is_null_alone_as_ksqldbs_nested_error_handling(
    text: str, expected: Any
) -> None:
    value, _, errors = evaluate(text)
    assert value == expected
    assert len(errors) == 1 and "Failed to parse" in errors[0]


def test_every_catalogued_scalar_function_evaluates() -> None:
    catalogued = {f.name for f in FUNCTIONS if f.kind == "SCALAR"}
    assert catalogued == set(scalar_function_names())
    for name in catalogued:
        assert scalar_function(name.lower()) is not None


def test_every_catalogued_aggregate_evaluates() -> None:
    catalogued = {f.name for f in FUNCTIONS if f.kind == "AGGREGATE"}
    assert catalogued == AGGREGATE_NAMES
    for name in catalogued:
        types: list[ex.SqlType | None] = (
            [v.DOUBLE, v.DOUBLE] if name == "CORRELATION" else [v.DOUBLE]
        )
        literals = [2] if name.startswith("TOPK") else []
        if name == "HISTOGRAM":
            types = [v.STRING]
        if name == "SUM_LIST":
            types = [ex.ArrayType(v.DOUBLE)]
        assert aggregate_function(name, types, literals) is not None


def test_the_interface_calls_with_plain_values() -> None:
    concat = scalar_function("concat")
    assert concat is not None
    assert concat.result_type([v.STRING, v.STRING]) == v.STRING
    assert concat.call("a", None, "b") == "ab"
    to_json = scalar_function("TO_JSON_STRING")
    assert to_json is not None and to_json.call([1, "x"]) == '[1,"x"]'
    transform = scalar_function("TRANSFORM")
    assert transform is not None and transform.call([1, 2], lambda x: x * 10) == [10, 20]


# ---- aggregates -----------------------------------------------------------------------


def run(
    name: str, types: list[ex.SqlType | None], literals: list[Any], rows: list[tuple[Any, ...]]
) -> Any:
    function = aggregate_function(name, types, literals)
    assert function is not None
    accumulator = function.initial()
    for values in rows:
        accumulator = function.add(accumulator, *values)
        pickle.loads(pickle.dumps(accumulator))  # accumulators live in Spark's state store
    return function.result(accumulator)


AGGREGATES: list[
    tuple[str, list[ex.SqlType | None], list[Any], list[tuple[Any, ...]], Any, ex.SqlType]
] = [
    ("COUNT", [], [], [(), (), ()], 3, v.BIGINT),
    ("COUNT", [v.INTEGER], [], [(1,), (None,), (3,)], 2, v.BIGINT),
    ("COUNT_DISTINCT", [v.STRING], [], [("a",), ("b",), ("a",), (None,)], 2, v.BIGINT),
    ("SUM", [v.INTEGER], [], [(1,), (None,), (2,)], 3, v.INTEGER),
    ("SUM", [v.INTEGER], [], [(2**31 - 1,), (1,)], -(2**31), v.INTEGER),
    ("SUM", [v.DOUBLE], [], [(1.5,), (2.25,)], 3.75, v.DOUBLE),
    (
        "SUM",
        [ex.DecimalType(4, 2)],
        [],
        [(D("10.10"),), (D("2.00"),)],
        D("12.10"),
        ex.DecimalType(4, 2),
    ),
    ("AVG", [v.INTEGER], [], [(1,), (2,), (None,)], 1.5, v.DOUBLE),
    ("AVG", [v.BIGINT], [], [], 0.0, v.DOUBLE),
    ("MIN", [v.STRING], [], [("b",), (None,), ("a",)], "a", v.STRING),
    ("MAX", [v.INTEGER], [], [(1,), (None,), (7,), (3,)], 7, v.INTEGER),
    ("MAX", [v.INTEGER], [], [(None,)], None, v.INTEGER),
    ("COLLECT_LIST", [v.INTEGER], [], [(1,), (None,), (1,)], [1, None, 1], ex.ArrayType(v.INTEGER)),
    ("COLLECT_SET", [v.INTEGER], [], [(1,), (2,), (1,)], [1, 2], ex.ArrayType(v.INTEGER)),
    ("ATTR", [v.INTEGER], [], [(4,), (4,)], 4, v.INTEGER),
    ("ATTR", [v.INTEGER], [], [(4,), (5,)], None, v.INTEGER),
    ("ATTR", [v.INTEGER], [], [(4,), (None,)], None, v.INTEGER),  # null is a value too
    ("EARLIEST_BY_OFFSET", [v.STRING], [], [(None,), ("a",), ("b",)], "a", v.STRING),
    ("EARLIEST_BY_OFFSET", [v.STRING], [False], [(None,), ("a",)], None, v.STRING),
    (
        "EARLIEST_BY_OFFSET",
        [v.STRING],
        [2],
        [("a",), (None,), ("b",), ("c",)],
        ["a", "b"],
        ex.ArrayType(v.STRING),
    ),
    (
        "EARLIEST_BY_OFFSET",
        [v.STRING],
        [2, False],
        [("a",), (None,), ("b",)],
        ["a", None],
        ex.ArrayType(v.STRING),
    ),
    ("LATEST_BY_OFFSET", [v.STRING], [], [("a",), ("b",), (None,)], "b", v.STRING),
    ("LATEST_BY_OFFSET", [v.STRING], [False], [("a",), (None,)], None, v.STRING),
    (
        "LATEST_BY_OFFSET",
        [v.INTEGER],
        [2],
        [(1,), (2,), (None,), (3,)],
        [2, 3],
        ex.ArrayType(v.INTEGER),
    ),
    ("TOPK", [v.INTEGER], [2], [(3,), (9,), (None,), (9,), (1,)], [9, 9], ex.ArrayType(v.INTEGER)),
    ("TOPKDISTINCT", [v.INTEGER], [2], [(3,), (9,), (9,), (1,)], [9, 3], ex.ArrayType(v.INTEGER)),
    (
        "HISTOGRAM",
        [v.STRING],
        [],
        [("a",), ("b",), ("a",), (None,)],
        {"a": 2, "b": 1},
        ex.MapType(v.STRING, v.BIGINT),
    ),
    (
        "STDDEV_SAMPLE",
        [v.DOUBLE],
        [],
        [(2.0,), (4.0,), (4.0,), (4.0,), (5.0,), (5.0,), (7.0,), (9.0,)],
        2.138089935299395,
        v.DOUBLE,
    ),
    ("STDDEV_SAMP", [v.INTEGER], [], [(0,), (10,)], 50.0, v.DOUBLE),  # ksqlDB's: the variance
    ("STDDEV_SAMP", [v.INTEGER], [], [(1,)], 0.0, v.DOUBLE),
    (
        "CORRELATION",
        [v.DOUBLE, v.DOUBLE],
        [],
        [(1.0, 2.0), (2.0, 4.0), (3.0, 6.5)],
        0.9979487157886733,
        v.DOUBLE,
    ),  # statistics.correlation
]


@pytest.mark.parametrize(
    ("name", "types", "literals", "rows", "expected", "result_type"),
    AGGREGATES,
    ids=[f"{a[0]}{a[2]}-{i}" for i, a in enumerate(AGGREGATES)],
)
def test_aggregate(
    name: str,
    types: list[ex.SqlType | None],
    literals: list[Any],
    rows: list[tuple[Any, ...]],
    expected: Any,
    result_type: ex.SqlType,
) -> None:
    function = aggregate_function(name, types, literals)
    assert function is not None and function.result_type == result_type
    result = run(name, types, literals, rows)
    if isinstance(expected, float):
        assert result == pytest.approx(expected)
    else:
        assert result == expected


UNDOABLE: list[tuple[str, list[ex.SqlType | None], list[tuple[Any, ...]], tuple[Any, ...], Any]] = [
    ("COUNT", [v.INTEGER], [(1,), (2,)], (2,), 1),
    ("SUM", [v.BIGINT], [(5,), (7,)], (5,), 7),
    ("AVG", [v.DOUBLE], [(1.0,), (3.0,), (8.0,)], (8.0,), 2.0),
    ("COLLECT_LIST", [v.STRING], [("a",), ("b",), ("a",)], ("a",), ["a", "b"]),
    ("HISTOGRAM", [v.STRING], [("a",), ("b",)], ("b",), {"a": 1}),
    ("STDDEV_SAMPLE", [v.DOUBLE], [(1.0,), (2.0,), (3.0,), (100.0,)], (100.0,), 1.0),
    # ATTR: the one value again once the other is undone
    ("ATTR", [v.STRING], [("x",), ("y",), ("x",)], ("y",), "x"),
    ("ATTR", [ex.ArrayType(v.INTEGER)], [([1],), ([2],)], ([1],), [2]),
]


@pytest.mark.parametrize(
    ("name", "types", "rows", "removed", "expected"), UNDOABLE, ids=[u[0] for u in UNDOABLE]
)
def test_aggregates_over_tables_undo_a_row(
    name: str,
    types: list[ex.SqlType | None],
    rows: list[tuple[Any, ...]],
    removed: tuple[Any, ...],
    expected: Any,
) -> None:
    function = aggregate_function(name, types, [])
    assert function is not None and function.can_undo
    accumulator = function.initial()
    for values in rows:
        accumulator = function.add(accumulator, *values)
    assert function.result(function.undo(accumulator, *removed)) == pytest.approx(expected)


def test_aggregates_that_cannot_undo_say_so() -> None:
    for name, literals in (
        ("MIN", []),
        ("MAX", []),
        ("LATEST_BY_OFFSET", []),
        ("TOPK", [3]),
        ("COLLECT_SET", []),
    ):
        function = aggregate_function(name, [v.INTEGER], literals)
        assert function is not None and not function.can_undo


def test_collect_limit_keeps_the_first_elements() -> None:
    """ksqlDB's ksql.functions.collect_list.limit / collect_set.limit: the first ones kept,
    in adds and in merges (of sessions)."""
    collect_list = aggregate_function("COLLECT_LIST", [v.INTEGER], [], collect_limit=2)
    collect_set = aggregate_function("COLLECT_SET", [v.INTEGER], [], collect_limit=2)
    unlimited = aggregate_function("COLLECT_LIST", [v.INTEGER], [])
    assert collect_list is not None and collect_set is not None and unlimited is not None

    def collected(function: Any, values: list[Any]) -> Any:
        accumulator = function.initial()
        for value in values:
            accumulator = function.add(accumulator, value)
        return accumulator

    assert collect_list.result(collected(collect_list, [1, 1, 2, 3])) == [1, 1]
    assert collect_set.result(collected(collect_set, [1, 1, 2, 3])) == [1, 2]
    assert unlimited.result(collected(unlimited, [1, 1, 2, 3])) == [1, 1, 2, 3]
    assert collect_list.merge([5], [6, 7]) == [5, 6]
    assert collect_list.merge([5, 6], [7]) == [5, 6]
    assert collect_set.merge([5], [5, 6, 7]) == [5, 6]
    # undoing a value the limit kept out leaves the list as it is
    assert collect_list.undo([1, 1], 3) == [1, 1]
    none_kept = aggregate_function("COLLECT_LIST", [v.INTEGER], [], collect_limit=0)
    assert none_kept is not None and collected(none_kept, [1, 2]) == []


def test_session_merge_joins_two_accumulators() -> None:
    count = aggregate_function("COUNT", [], [])
    latest = aggregate_function("LATEST_BY_OFFSET", [v.STRING], [])
    earliest = aggregate_function("EARLIEST_BY_OFFSET", [v.STRING], [])
    topk = aggregate_function("TOPK", [v.INTEGER], [2])
    assert count is not None and latest is not None and earliest is not None and topk is not None
    assert count.merge(2, 3) == 5
    first, second = latest.add(latest.initial(), "a"), latest.add(latest.initial(), "b")
    assert latest.result(latest.merge(first, second)) == "b"
    assert (
        earliest.result(earliest.merge(earliest.add(earliest.initial(), "a"), earliest.initial()))
        == "a"
    )
    assert topk.merge([9, 1], [5]) == [9, 5]


def test_aggregate_refusals_and_literal_arguments() -> None:
    assert aggregate_function("UCASE", [v.STRING], []) is None
    with pytest.raises(
        KsqlStatementError, match="Function 'SUM' does not accept parameters \\(STRING\\)."
    ):
        aggregate_function("SUM", [v.STRING], [])
    with pytest.raises(KsqlStatementError, match="latestN must be 1 or greater"):
        aggregate_function("LATEST_BY_OFFSET", [v.STRING], [0])
    statement = parse_statement("SELECT TOPK(X, 3), COUNT(*) FROM S GROUP BY Y;")
    topk, count = (item.expression for item in statement.select)  # type: ignore[attr-defined]
    assert split_aggregate_call(topk).literals == (3,)
    assert split_aggregate_call(count).columns == ()
    not_literal = parse_statement("SELECT TOPK(X, Y) FROM S GROUP BY Z;")
    with pytest.raises(KsqlStatementError, match="must be a literal constant"):
        split_aggregate_call(not_literal.select[0].expression)  # type: ignore[attr-defined]
