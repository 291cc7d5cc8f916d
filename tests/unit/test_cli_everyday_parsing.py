"""The pure parts of the everyday tools: --time values, partition rules, the offset JSON
file of delete-records and Java properties files."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import OffsetSpec

from strom.cli.delete_records import OffsetFileError, parse_offset_json
from strom.cli.get_offsets import parse_rules, parse_time
from strom.cli.properties_file import PropertiesError, parse_properties_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-1", OffsetSpec.latest()),
        ("latest", OffsetSpec.latest()),
        ("-2", OffsetSpec.earliest()),
        ("Earliest", OffsetSpec.earliest()),
        ("-3", OffsetSpec.max_timestamp()),
        ("max-timestamp", OffsetSpec.max_timestamp()),
    ],
)
def test_named_times(text: str, expected: OffsetSpec) -> None:
    assert type(parse_time(text)) is type(expected)


def test_a_timestamp_and_bad_times() -> None:
    spec = parse_time("1700000000000")
    assert type(spec) is type(OffsetSpec.for_timestamp(1)) and spec._value == 1700000000000
    for bad in ("soon", "-7", "1.5", ""):
        with pytest.raises(ValueError):
            parse_time(bad)


def test_partition_rules_match_whole_topic_names_and_ranges() -> None:
    (single,) = parse_rules("orders:2")
    assert single.allows("orders", 2) and not single.allows("orders", 1)
    assert not single.allows("orders-eu", 2)  # the whole name must match
    (upward,) = parse_rules("ord.*:1-")
    assert upward.allows("orders-eu", 1) and upward.allows("orders", 9)
    assert not upward.allows("orders", 0)
    (below,) = parse_rules(":-2")
    assert below.allows("any", 1) and not below.allows("any", 2)
    (span,) = parse_rules("t:1-3")
    assert [p for p in range(5) if span.allows("t", p)] == [1, 2]
    assert len(parse_rules("a,b:0")) == 2
    for bad in ("t:x", "t:1-2-3", "(:0", ""):
        with pytest.raises(ValueError):
            parse_rules(bad)


def test_offset_json_in_kafkas_format() -> None:
    text = '{"partitions": [{"topic": "a", "partition": 1, "offset": 5},'
    text += ' {"topic": "b", "partition": 0, "offset": -1}], "version": 1}'
    assert parse_offset_json(text) == [("a", 1, 5), ("b", 0, -1)]
    assert parse_offset_json('{"partitions": []}') == []  # version defaults to 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("not json", "not valid JSON"),
        ("[]", "JSON object"),
        ('{"partitions": [], "version": 2}', "unsupported version"),
        ('{"version": 1}', "missing partitions"),
        ('{"partitions": [{"partition": 0, "offset": 1}]}', "no topic"),
        ('{"partitions": [{"topic": "a", "offset": 1}]}', "no valid partition"),
        ('{"partitions": [{"topic": "a", "partition": 0, "offset": -2}]}', "no valid offset"),
        ('{"partitions": [{"topic": "a", "partition": 0, "offset": "1"}]}', "no valid offset"),
        (
            '{"partitions": [{"topic": "a", "partition": 0, "offset": 1},'
            ' {"topic": "a", "partition": 0, "offset": 2}]}',
            "duplicate topic partitions: a-0",
        ),
    ],
)
def test_offset_json_mistakes(text: str, reason: str) -> None:
    with pytest.raises(OffsetFileError, match=reason):
        parse_offset_json(text)


def test_java_properties() -> None:
    text = (
        "# a comment\n! another\n\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : PLAIN\n"
        "client.id strom\n"
        "sasl.password = p\\=w\\\\d\n"
        "ssl.ca.location = /a/\\\n     b.pem\n"
        "empty=\n"
    )
    assert parse_properties_text(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "client.id": "strom",
        "sasl.password": "p=w\\d",
        "ssl.ca.location": "/a/b.pem",
        "empty": "",
    }


def test_a_properties_line_without_a_value_names_file_and_line() -> None:
    with pytest.raises(PropertiesError, match=r"^client.properties line 3: expected key=value"):
        parse_properties_text("a=1\n# c\njustakey\n", "client.properties")
    with pytest.raises(PropertiesError, match="no key"):
        parse_properties_text("=1\n")
