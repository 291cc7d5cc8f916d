"""The close reason of ksqlDB's websocket query endpoint: a message of more than 123
bytes (a close frame's limit) cut as ksqlDB cuts it, multi-byte characters counted."""

from __future__ import annotations

from strom.ksql.server import ws_close_reason


def test_a_short_message_is_the_reason_as_it_is() -> None:
    assert ws_close_reason("done") == "done"
    exact = "x" * 123
    assert ws_close_reason(exact) == exact


def test_a_long_message_is_cut_to_120_bytes_and_an_ellipsis() -> None:
    assert ws_close_reason("y" * 124) == "y" * 120 + "..."
    # two bytes a character: 120 characters are 240 bytes, cut two at a time to 60
    reason = ws_close_reason("é" * 100)
    assert reason == "é" * 60 + "..."
    assert len(reason.encode()) == 123
    # one byte and two: cut two characters at a time while over 120 bytes
    reason = ws_close_reason("aé" * 80)
    assert len(reason.encode()) <= 123 and reason.endswith("...")
    assert reason == "aé" * 40 + "..."
