"""Stream-stream joins whose inputs go back in time, record by record in one process
(``strom.ksql.join_flow`` over ``strom.ksql.operators``), in the order the records
are given, as ksqlDB's test driver feeds them: the stream time shared by both sides,
each side's window store keeping a record for the window and grace behind the latest
time it has seen, an outer join's unmatched record given at once when its window has
already closed. The expected records are those ksqlDB gives for the same statements
and inputs (its joins.json cases with out-of-order records). No broker."""

from __future__ import annotations

from typing import Any

import pytest
from test_ksql_joins import Record, planned, run

LEFT = (
    "CREATE STREAM LEFT_STREAM (id BIGINT KEY, l1 VARCHAR) "
    "WITH (kafka_topic='left_topic', value_format='JSON')"
)
RIGHT = (
    "CREATE STREAM RIGHT_STREAM (id BIGINT KEY, l2 VARCHAR) "
    "WITH (kafka_topic='right_topic', value_format='JSON')"
)
WITHIN = "WITHIN 1 minute GRACE PERIOD 1 minute ON t.id = tt.id"


def _left(key: int, value: str, ts: int) -> Record:
    return ("left_topic", key, {"L1": value}, ts)


def _right(key: int, value: str, ts: int) -> Record:
    return ("right_topic", key, {"L2": value}, ts)


# B moves the stream time far ahead; C, c, D and d go back in time, past their grace
GOING_BACK = [
    _left(0, "A", 0),
    _right(0, "a", 60000),
    _left(1, "B", 330000),
    _left(2, "C", 90000),
    _right(2, "c", 90000),
    _left(3, "D", 60000),
    _right(3, "d", 60000),
]


def _pairs(out: list[tuple[Any, Any, int]]) -> list[tuple[Any, Any, Any, int]]:
    return [(key, value["L1"], value["L2"], ts) for key, value, ts in out]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("JOIN", [(0, "A", "a", 60000)]),
        # C and D find nothing and their windows have closed: their rows at once; the
        # right records after them find them gone from the left side's store
        ("LEFT JOIN", [(0, "A", "a", 60000), (2, "C", None, 90000), (3, "D", None, 60000)]),
    ],
)
def test_records_behind_the_stream_time_join_only_what_their_stores_keep(
    kind: str, expected: list[tuple[Any, Any, Any, int]]
) -> None:
    plan = planned(
        LEFT,
        RIGHT,
        f"CREATE STREAM J AS SELECT t.id, l1, l2 FROM LEFT_STREAM t {kind} "
        f"RIGHT_STREAM tt {WITHIN}",
    )
    assert _pairs(run(plan, GOING_BACK)) == expected


def test_a_right_record_behind_the_left_sides_time_stays_in_its_own_store() -> None:
    """The right side's store has seen 90 s only: d (60 s) stays there and D, later,
    joins it, though the stream time (330 s) is past d's window and grace; d's own row
    was given at once, its window having closed."""
    records = [*GOING_BACK[:5], _right(3, "d", 60000), _left(3, "D", 90000)]
    plan = planned(
        LEFT,
        RIGHT,
        "CREATE STREAM J AS SELECT t.id, l1, l2 FROM LEFT_STREAM t RIGHT JOIN "
        f"RIGHT_STREAM tt {WITHIN}",
    )
    assert _pairs(run(plan, records)) == [
        (0, "A", "a", 60000),
        (2, None, "c", 90000),
        (3, None, "d", 60000),
        (3, "D", "d", 90000),
    ]


def test_a_full_outer_join_of_records_behind_the_stream_time() -> None:
    records = [
        _left(0, "A", 0),
        _right(0, "a", 60000),
        _right(1, "b", 330000),
        _right(2, "c", 90000),
        _left(2, "C", 90000),
        _right(3, "d", 60000),
        _left(3, "D", 60000),
    ]
    plan = planned(
        LEFT,
        RIGHT,
        "CREATE STREAM J AS SELECT ROWKEY AS ID, l1, l2 FROM LEFT_STREAM t "
        f"FULL OUTER JOIN RIGHT_STREAM tt {WITHIN}",
    )
    assert _pairs(run(plan, records)) == [
        (0, "A", "a", 60000),
        (2, None, "c", 90000),
        (2, "C", None, 90000),
        (3, None, "d", 60000),
        (3, "D", None, 60000),
    ]


def test_an_outer_joins_pending_row_waits_for_the_window_and_grace() -> None:
    """A's row (nothing joined it) is given once a record moves the stream time past
    A's window and grace (0 + 60 s + 60 s), before that record's own join; not at
    120 s, and only once."""
    records = [
        _left(0, "A", 0),
        _right(9, "x", 120000),
        _right(9, "y", 120001),
        _left(9, "X", 120001),
        _right(9, "z", 300000),
    ]
    plan = planned(
        LEFT,
        RIGHT,
        "CREATE STREAM J AS SELECT t.id, l1, l2 FROM LEFT_STREAM t LEFT JOIN "
        f"RIGHT_STREAM tt {WITHIN}",
    )
    assert _pairs(run(plan, records)) == [
        (0, "A", None, 0),
        (9, "X", "x", 120001),
        (9, "X", "y", 120001),
    ]
