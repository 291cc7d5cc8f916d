"""The values of push and pull query rows as the REST API writes them (ksqlDB's
shapes): temporal columns as text at every depth, DECIMAL a number, BYTES base64."""

from __future__ import annotations

import decimal

from strom.ksql import expressions as ex
from strom.ksql.server import _RowWriter, rest_json_value
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
