"""Protobuf schemas that import the files Confluent's registry knows by name
(``confluent/meta.proto``, ``confluent/type/decimal.proto``, ``google/type/...``): taken
without references, as Confluent's registry takes them; an unknown import still refused."""

from __future__ import annotations

import pytest

from strom.services.schema_registry.schemas import InvalidSchema, parse

INVOICE = """
syntax = "proto3";
package billing;
import "confluent/meta.proto";
import "confluent/type/decimal.proto";
import "google/type/date.proto";
import "google/type/money.proto";

message Invoice {
  confluent.type.Decimal total = 1 [(confluent.field_meta) = {
    params: [{key: "precision", value: "9"}, {key: "scale", value: "2"}]
  }];
  google.type.Date due = 2;
  google.type.Money fee = 3;
  string number = 4;
}
"""


def test_confluent_and_google_type_imports_need_no_reference() -> None:
    parsed = parse("PROTOBUF", INVOICE)
    invoice = parsed.proto.message_type[0]
    assert invoice.name == "Invoice"
    assert [f.type_name for f in invoice.field[:3]] == [
        ".confluent.type.Decimal",
        ".google.type.Date",
        ".google.type.Money",
    ]
    assert list(parsed.proto.dependency) == [
        "confluent/meta.proto",
        "confluent/type/decimal.proto",
        "google/type/date.proto",
        "google/type/money.proto",
    ]


def test_an_import_nobody_knows_is_still_refused() -> None:
    text = INVOICE.replace('import "google/type/money.proto";', 'import "billing/fees.proto";')
    with pytest.raises(InvalidSchema, match="billing/fees.proto"):
        parse("PROTOBUF", text)
