"""The tools' output forms: tab-separated lines, JSON objects, the default by stdout."""

from __future__ import annotations

import argparse
import json

import pytest

from strom.cli import output
from strom.cli.output import Listing


def listing() -> Listing:
    out = Listing(
        "GROUP",
        "PARTITION",
        "CURRENT-OFFSET",
        "CONSUMER-ID",
        numeric=["PARTITION", "CURRENT-OFFSET"],
    )
    out.add_row("g1", 0, 5, "c\tone")
    out.add_row("g1", 1, "-", "-")
    return out


def test_plain_lines_are_a_header_and_tab_separated_rows_without_stray_tabs() -> None:
    assert output.plain_lines(listing()) == [
        "GROUP\tPARTITION\tCURRENT-OFFSET\tCONSUMER-ID",
        "g1\t0\t5\tc one",
        "g1\t1\t-\t-",
    ]


def test_json_records_use_snake_case_keys_numbers_and_nulls() -> None:
    assert output.records(listing(), {"TopicId": "abc"}) == [
        {
            "topic_id": "abc",
            "group": "g1",
            "partition": 0,
            "current_offset": 5,
            "consumer_id": "c\tone",
        },
        {
            "topic_id": "abc",
            "group": "g1",
            "partition": 1,
            "current_offset": None,
            "consumer_id": "-",
        },
    ]


@pytest.mark.parametrize(
    ("column", "key"),
    [
        ("NodeId", "node_id"),
        ("#MEMBERS", "members"),
        ("COORDINATOR (ID)", "coordinator_id"),
        ("Duration(min)", "duration_min"),
        ("LastFetchTimestamp", "last_fetch_timestamp"),
    ],
)
def test_json_keys(column: str, key: str) -> None:
    assert output.json_key(column) == key


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError):
        Listing("A", "B").add_row("only one")


def test_default_form_follows_stdout_and_json_is_printed_once_at_flush(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = argparse.Namespace(output=None)
    assert output.form_of(args) == output.PLAIN  # captured stdout is not a terminal
    output.show(args, listing())
    assert (
        capsys.readouterr().out.splitlines()[0] == "GROUP\tPARTITION\tCURRENT-OFFSET\tCONSUMER-ID"
    )

    args = argparse.Namespace(output="json")
    output.show(args, listing())
    output.note(args, "not in JSON")
    output.show(args, listing())
    assert capsys.readouterr().out == ""
    output.flush(args)
    assert len(json.loads(capsys.readouterr().out)) == 4
