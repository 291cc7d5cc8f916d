"""The PostgreSQL connector's incremental snapshot state without a database: signals read
from a signal table row, the queue of tables and its progress kept in the offsets and
read back (a restarted task goes on after the last row stored), a stop taking tables off."""

from __future__ import annotations

from strom.connect.connectors.postgres_cdc_incremental import (
    COLLECTIONS,
    MAXIMUM_KEY,
    PRIMARY_KEY,
    IncrementalSnapshot,
    Signal,
)

COLUMNS = ["id", "type", "data"]


def test_a_signal_row_is_read_by_column_name() -> None:
    signal = Signal.of(
        ["type", "data", "id"],
        ["execute-snapshot", '{"data-collections": ["public.a", "public.b"]}', "s1"],
    )
    assert signal == Signal(
        "s1", "execute-snapshot", {"data-collections": ["public.a", "public.b"]}
    )
    assert signal is not None and signal.collections() == ["public.a", "public.b"]
    assert Signal.of(COLUMNS, ["s2", "stop-snapshot", None]) == Signal("s2", "stop-snapshot", {})
    assert Signal.of(COLUMNS, ["s3", "execute-snapshot", "{not json"]) is None
    assert Signal.of(COLUMNS, [None, "execute-snapshot", "{}"]) is None


def test_progress_goes_through_the_offsets_and_back() -> None:
    state = IncrementalSnapshot()
    assert state.offset_fields() == {}
    assert state.add(["public.a", "public.b"]) == ["public.a", "public.b"]
    assert state.add(["public.b", "public.c"]) == ["public.c"]
    state.last_key, state.maximum_key = ("10", "x"), ("45", "z")
    fields = state.offset_fields()
    assert set(fields) == {COLLECTIONS, PRIMARY_KEY, MAXIMUM_KEY}
    again = IncrementalSnapshot.from_offset({"lsn": 1, **fields})
    assert again == state
    assert IncrementalSnapshot.from_offset({"lsn": 1}) == IncrementalSnapshot()
    assert IncrementalSnapshot.from_offset({COLLECTIONS: "[broken"}) == IncrementalSnapshot()


def test_stop_takes_tables_off_and_forgets_the_progress_of_the_first() -> None:
    state = IncrementalSnapshot(["public.a", "public.b", "public.c"], ("3",), ("9",))
    state.remove(["public.b"])
    assert state.tables == ["public.a", "public.c"] and state.last_key == ("3",)
    state.remove(["public.a"])
    assert state.tables == ["public.c"] and state.last_key is None and state.maximum_key is None
    state.remove(None)
    assert not state.active and state.offset_fields() == {}


def test_a_finished_table_hands_over_to_the_next() -> None:
    state = IncrementalSnapshot(["public.a", "public.b"], ("9",), ("9",))
    state.table_finished()
    assert state.tables == ["public.b"] and state.last_key is None and state.maximum_key is None
