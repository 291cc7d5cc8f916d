"""The conformance harness writes a JSON_SR input as ksqlDB's test driver writes it
(``bench/ksql_conformance_formats.py``'s ``json_sr_value`` and ``json_text``): the
case's JSON fitted to the subject's JSON schema, as the driver turns it into Connect
data of the schema's type and the JSON Schema converter writes that."""

from __future__ import annotations

import decimal
import json
import sys
from pathlib import Path

# appended, not put first: bench/ksql.py must not hide the PyPI package ``ksql`` from
# the tests that import it in the same process
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from ksql_conformance_formats import (  # noqa: E402
    java_double_text,
    json_sr_value,
    json_text,
)


def _optional(schema: dict) -> dict:
    return {"oneOf": [{"type": "null"}, schema]}


def test_an_objects_fields_are_the_schemas_and_take_its_names() -> None:
    schema = {
        "type": "object",
        "properties": {
            "Foo": _optional({"type": "integer"}),
            "INNER": _optional({"type": "object", "properties": {"X": {"type": "string"}}}),
        },
    }
    value = {"foo": 1, "extra": "dropped", "inner": {"x": "a", "y": 2}}
    assert json_sr_value(schema, value) == {"Foo": 1, "INNER": {"X": "a"}}
    assert json_sr_value(schema, None) is None


def test_scalars_take_the_schemas_type_as_javas_value_of_does() -> None:
    assert json_sr_value({"type": "integer"}, "12") == 12
    assert json_sr_value({"type": "integer"}, "twelve") == "twelve"  # the driver's error
    assert json_sr_value({"type": "number"}, "1.5") == 1.5
    assert json_sr_value({"type": "string"}, 7) == "7"
    assert json_sr_value({"type": "string"}, True) == "true"
    assert json_sr_value({"type": "string"}, 1.0e10) == "1.0E10"
    assert json_sr_value({"type": "boolean"}, "TRUE") is True
    assert json_sr_value({"type": "boolean"}, "yes") is False
    assert json_sr_value({"type": "array", "items": {"type": "string"}}, [1, 2]) == ["1", "2"]
    values = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert json_sr_value(values, {"a": "1"}) == {"a": 1}
    assert [java_double_text(x) for x in (1.0, 0.5, 1e-4, 12345678.0)] == [
        "1.0", "0.5", "1.0E-4", "1.2345678E7",
    ]  # fmt: skip


def test_a_connect_decimal_keeps_its_scale_in_the_json_text() -> None:
    schema = {
        "type": "number",
        "connect.type": "bytes",
        "connect.name": "org.apache.kafka.connect.data.Decimal",
        "connect.parameters": {"scale": "2"},
    }
    fitted = json_sr_value({"type": "object", "properties": {"D": schema}}, {"d": 1.5})
    assert fitted == {"D": decimal.Decimal("1.50")}
    assert json_text(fitted) == '{"D": 1.50}'
    assert json.loads(json_text([fitted, "x"])) == [{"D": 1.5}, "x"]
