"""TIMESTAMP text as ksqlDB reads it (``strom.ksql.values.parse_timestamp``): partial
texts completed, and hour 24 the end of the day (the next day's midnight). No broker."""

from __future__ import annotations

import pytest

from strom.ksql.values import EvaluationError, parse_timestamp

DAY_MS = 86_400_000
FEB_24_2020 = 1_582_502_400_000


def test_partial_texts_are_completed() -> None:
    assert parse_timestamp("2020-02-24") == FEB_24_2020
    assert parse_timestamp("2020-02-24T01") == FEB_24_2020 + 3_600_000
    assert parse_timestamp("2020-02-24T01:30+0100") == FEB_24_2020 + 1_800_000


def test_hour_24_is_the_next_days_midnight() -> None:
    assert parse_timestamp("2020-02-24T24") == FEB_24_2020 + DAY_MS
    assert parse_timestamp("2020-02-29T24:00") == parse_timestamp("2020-03-01")


def test_hour_24_with_minutes_is_refused() -> None:
    with pytest.raises(EvaluationError, match="Failed to parse timestamp '2020-02-24T24:01'"):
        parse_timestamp("2020-02-24T24:01")
