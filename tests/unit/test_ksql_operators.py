"""The ksql operators (``strom.ksql.operators``) record at a time, and the record readers
and writers (``strom.ksql.readers``): filters and projections, tables as changelogs,
aggregations per window with every update (EMIT CHANGES) or one result per closed
window (EMIT FINAL), grace periods, sessions merging, a table aggregated with undo,
expression errors reported; records of each format read into rows and written back.
No broker."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from strom.ksql import statements as st
from strom.ksql.metastore import DataSource, Metastore
from strom.ksql.operators import Change, Operators, TableRegrouping
from strom.ksql.parser import parse_statement
from strom.ksql.planner import QueryPlan, SinkRequest, plan_query
from strom.ksql.readers import RecordError, RecordReader, RecordWriter, Row, SourceRecord

SECOND = 1000


def source(metastore: Metastore, text: str) -> DataSource:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateSource)
    created = metastore.source_from_statement(statement, text)
    metastore.put_source(created)
    return created


@pytest.fixture
def metastore() -> Metastore:
    store = Metastore()
    source(
        store,
        "CREATE STREAM clicks (user_id STRING KEY, page STRING, ms BIGINT) "
        "WITH (kafka_topic='clicks', value_format='JSON')",
    )
    source(
        store,
        "CREATE TABLE users (id STRING PRIMARY KEY, name STRING, region STRING) "
        "WITH (kafka_topic='users', format='JSON')",
    )
    return store


def plan(metastore: Metastore, text: str) -> QueryPlan:
    statement = parse_statement(text)
    if isinstance(statement, st.Query):
        return plan_query(statement, metastore)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
    return plan_query(statement.query, metastore, request, text)


def click(user: str | None, page: str | None, ts: int, ms: int = 0, offset: int = 0) -> Row:
    return Row(
        {
            "USER_ID": user,
            "PAGE": page,
            "MS": ms,
            "ROWTIME": ts,
            "ROWPARTITION": 0,
            "ROWOFFSET": offset,
        }
    )


def user(key: str, name: str | None, region: str | None, ts: int = 0) -> Row:
    columns = {"ID": key, "NAME": name, "REGION": region, "ROWTIME": ts}
    return Row({**columns, "ROWPARTITION": 0, "ROWOFFSET": 0}, tombstone=name is None)


def aggregate_all(operators: Operators, rows: list[Row]) -> list[Change]:
    """Rows through an aggregation, the stream time the largest timestamp so far (one
    Kafka Streams task's, as ksqlDB's test driver runs them): after each row, the
    windows it closed, by their starts, then groups."""
    states: dict[Any, dict[Any, Any]] = {}
    stream_time = -1
    out: list[Change] = []
    for row in rows:
        before, stream_time = stream_time, max(stream_time, row.timestamp)
        grouped = operators.group(row)
        if grouped is not None:
            state = states.setdefault(grouped[0], {})
            out += operators.aggregate(state, grouped[0], grouped[1], stream_time)
        closed = []
        for group, state in sorted(states.items()):
            closed += operators.close_windows(state, group, stream_time, before)
        out += sorted(closed, key=lambda c: c.window or (0, 0))
    return out


def summary(changes: list[Change], value: str) -> list[tuple[Any, ...]]:
    return [
        (
            *change.key.values(),
            change.window,
            None if change.value is None else change.value[value],
        )
        for change in changes
    ]


def test_filter_and_projection_on_a_stream(metastore: Metastore) -> None:
    operators = Operators(
        plan(
            metastore,
            "CREATE STREAM out AS SELECT user_id, UCASE(page) AS page, ms * 2 AS twice FROM "
            "clicks WHERE ms > 1",
        )
    )
    assert operators.stateless(click("u1", "/a", 5, ms=1)) == []
    [change] = operators.stateless(click("u1", "/b", 6, ms=3))
    assert change == Change({"USER_ID": "u1"}, {"PAGE": "/B", "TWICE": 6}, 6, None)


def test_a_table_stays_a_changelog(metastore: Metastore) -> None:
    operators = Operators(
        plan(metastore, "CREATE TABLE eu AS SELECT * FROM users WHERE region = 'eu'")
    )
    [kept] = operators.stateless(user("a", "Ada", "eu", 1))
    assert kept.key == {"ID": "a"} and kept.value == {"NAME": "Ada", "REGION": "eu"}
    [moved] = operators.stateless(user("a", "Ada", "us", 2))  # no longer passes: deleted
    [deleted] = operators.stateless(user("a", None, None, 3))  # a tombstone stays one
    assert (moved.key, moved.value) == ({"ID": "a"}, None)
    assert (deleted.key, deleted.value) == ({"ID": "a"}, None)


def test_tumbling_counts_give_every_update(metastore: Metastore) -> None:
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE counts AS SELECT user_id, COUNT(*) AS n FROM clicks "
            "WINDOW TUMBLING (SIZE 10 SECONDS, GRACE PERIOD 5 SECONDS) GROUP BY user_id",
        )
    )
    changes = aggregate_all(
        operators,
        [
            click("u1", "/", 1 * SECOND),
            click("u1", "/", 2 * SECOND),
            click("u2", "/", 3 * SECOND),
            click("u1", "/", 12 * SECOND),
            click("u1", "/", 9 * SECOND),  # late, within the grace
            click("u1", "/", 30 * SECOND),
            click("u1", "/", 8 * SECOND),  # past the grace: dropped
            click(None, "/", 31 * SECOND),  # a null key: dropped
        ],
    )
    window = (0, 10 * SECOND)
    assert summary(changes, "N") == [
        ("u1", window, 1),
        ("u1", window, 2),
        ("u2", window, 1),
        ("u1", (10 * SECOND, 20 * SECOND), 1),
        ("u1", window, 3),
        ("u1", (30 * SECOND, 40 * SECOND), 1),
    ]
    assert changes[1].timestamp == 2 * SECOND


def test_a_closed_session_takes_no_later_record(metastore: Metastore) -> None:
    """A session closed by the stream time (its end, gap and grace behind it) is gone
    from ksqlDB's session store: a record within its gap starts a session of its own,
    even before the host has taken the closed one out of the state."""
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE sessions AS SELECT user_id, COUNT(*) AS n FROM clicks "
            "WINDOW SESSION (10 SECONDS, GRACE PERIOD 2 SECONDS) GROUP BY user_id",
        )
    )
    state: dict[Any, Any] = {}
    group = ("u1",)
    operators.aggregate(state, group, click("u1", "/", 33 * SECOND).columns, 33 * SECOND)
    changes = operators.aggregate(
        state, group, click("u1", "/", 35 * SECOND).columns, 46 * SECOND
    )  # [33, 33] closed at 46 (33 + 10 + 2 < 46); 35 is not late (35 + 12 >= 46)
    assert summary(changes, "N") == [("u1", (35 * SECOND, 35 * SECOND), 1)]


def test_emit_final_gives_one_row_per_window_once_closed(metastore: Metastore) -> None:
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE counts AS SELECT user_id, COUNT(*) AS n FROM clicks "
            "WINDOW TUMBLING (SIZE 10 SECONDS, GRACE PERIOD 0 SECONDS) GROUP BY user_id "
            "EMIT FINAL",
        )
    )
    changes = aggregate_all(
        operators,
        [
            click("u1", "/", 1 * SECOND),
            click("u1", "/", 2 * SECOND),
            click("u1", "/", 11 * SECOND),  # closes [0, 10)
            click("u1", "/", 12 * SECOND),
        ],
    )
    assert summary(changes, "N") == [("u1", (0, 10 * SECOND), 2)]


FINAL_CASES = {  # ksqlDB's suppress.json: the windows, the records' keys and times, output
    "no grace": (  # EMIT FINAL's default grace is none
        "TUMBLING (SIZE 2 MILLISECONDS)",
        [("k1", 0), ("k1", 1), ("k1", 2)],
        [("k1", (0, 2), 2, 1)],
    ),
    "grace zero": (
        "TUMBLING (SIZE 2 MILLISECONDS, GRACE PERIOD 0 MILLISECONDS)",
        [("k1", 0), ("k1", 1), ("k1", 2)],
        [("k1", (0, 2), 2, 1)],
    ),
    # [0, 2) closes at 5, when the store holds no window starting before 4 - 3 (its
    # retention: size and grace); [2, 4) is written
    "tumbling": (
        "TUMBLING (SIZE 2 MILLISECONDS, GRACE PERIOD 1 MILLISECONDS)",
        [("k1", 0), ("k1", 1), ("k1", 2), ("k1", 1), ("k1", 0), ("k1", 5)],
        [("k1", (2, 4), 1, 2)],
    ),
    "large jump": (
        "TUMBLING (SIZE 2 MILLISECONDS, GRACE PERIOD 2 MILLISECONDS)",
        [("k1", t) for t in (0, 1, 2, 0, 3, 0, 10, 0, 30)],
        [],
    ),
    "hopping": (
        "HOPPING (SIZE 5 MILLISECONDS, ADVANCE BY 2 MILLISECONDS, GRACE PERIOD 1 MILLISECONDS)",
        [("k1", t) for t in (0, 1, 2, 1, 6, 5, 10)],
        [("k1", (0, 5), 4, 2), ("k1", (4, 9), 2, 6)],
    ),
    "multiple keys": (
        "TUMBLING (SIZE 2 MILLISECONDS, GRACE PERIOD 1 MILLISECONDS)",
        [("k1", 0), ("k2", 1), ("k1", 2), ("k1", 1), ("k2", 0), ("k1", 5), ("k1", 0), ("k2", 2)],
        [("k1", (2, 4), 1, 2)],
    ),  # fmt: skip
    # a session closes once its end, the gap and the grace are before the stream time
    "session": (
        "SESSION (5 MILLISECONDS, GRACE PERIOD 6 MILLISECONDS)",
        [("k1", t) for t in (0, 4, 8, 12, 14, 30, 29, 17, 42)],
        [("k1", (0, 14), 5, 14), ("k1", (29, 30), 2, 30)],
    ),
}


@pytest.mark.parametrize("case", sorted(FINAL_CASES))
def test_emit_final_writes_what_ksqldb_writes(metastore: Metastore, case: str) -> None:
    """ksqlDB's EMIT FINAL cases: a window is written after the record whose stream time
    passes its end and grace, unless Kafka Streams' window store let it go (its start
    more than the retention before the stream time's own window's)."""
    window, records, expected = FINAL_CASES[case]
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE final_counts AS SELECT user_id, COUNT(*) AS n FROM clicks "
            f"WINDOW {window} GROUP BY user_id EMIT FINAL",
        )
    )
    changes = aggregate_all(operators, [click(k, "/", t) for k, t in records])
    written = [(*s, c.timestamp) for s, c in zip(summary(changes, "N"), changes, strict=True)]
    assert written == expected


def test_a_window_without_grace_period_has_a_day_less_its_size(metastore: Metastore) -> None:
    """ksqlDB's default grace of an aggregation's window: 24 hours less its size."""
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE counts AS SELECT user_id, COUNT(*) AS n FROM clicks "
            "WINDOW TUMBLING (SIZE 1 HOUR) GROUP BY user_id",
        )
    )
    hour = 3_600_000
    changes = aggregate_all(
        operators,
        [
            click("u1", "/", 24 * hour),
            click("u2", "/", 30 * 60_000),  # [0, 1 h) closed at 24 h (1 h + 23 h)
            click("u3", "/", hour + 1),  # [1 h, 2 h) open until 25 h
        ],
    )
    assert summary(changes, "N") == [
        ("u1", (24 * hour, 25 * hour), 1),
        ("u3", (hour, 2 * hour), 1),
    ]


def test_hopping_windows_each_count(metastore: Metastore) -> None:
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE counts AS SELECT user_id, COUNT(*) AS n FROM clicks "
            "WINDOW HOPPING (SIZE 10 SECONDS, ADVANCE BY 5 SECONDS) GROUP BY user_id",
        )
    )
    changes = aggregate_all(operators, [click("u1", "/", 7 * SECOND)])
    assert summary(changes, "N") == [
        ("u1", (0, 10 * SECOND), 1),
        ("u1", (5 * SECOND, 15 * SECOND), 1),
    ]


def test_sessions_merge_and_the_merged_ones_are_deleted(metastore: Metastore) -> None:
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE sessions AS SELECT user_id, COUNT(*) AS n FROM clicks "
            "WINDOW SESSION (10 SECONDS) GROUP BY user_id",
        )
    )
    changes = aggregate_all(
        operators,
        [
            click("u1", "/", 1 * SECOND),
            click("u1", "/", 15 * SECOND),  # 14 s later: a session of its own
            click("u1", "/", 8 * SECOND),  # within 10 s of both: bridges them
        ],
    )
    assert summary(changes, "N") == [
        ("u1", (1 * SECOND, 1 * SECOND), 1),
        ("u1", (15 * SECOND, 15 * SECOND), 1),
        ("u1", (1 * SECOND, 1 * SECOND), None),
        ("u1", (15 * SECOND, 15 * SECOND), None),
        ("u1", (1 * SECOND, 15 * SECOND), 3),
    ]


def test_having_deletes_a_row_that_passed_once_it_fails(metastore: Metastore) -> None:
    """As ksqlDB filters a table's old and new rows: a tombstone only when the group's
    last row passed (not for a first update that fails, nor twice)."""
    operators = Operators(
        plan(
            metastore,
            "SELECT page, COUNT(*) AS n FROM clicks GROUP BY page HAVING COUNT(*) = 2 EMIT CHANGES",
        )
    )
    changes = aggregate_all(operators, [click("u", "/a", i) for i in range(4)])
    assert [c.value for c in changes] == [{"PAGE": "/a", "N": 2}, None]
    assert [c.timestamp for c in changes] == [1, 2]


def test_a_merged_session_that_failed_having_leaves_no_tombstone(metastore: Metastore) -> None:
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE sessions AS SELECT user_id, COUNT(*) AS n FROM clicks "
            "WINDOW SESSION (10 SECONDS) GROUP BY user_id HAVING COUNT(*) = 2",
        )
    )
    changes = aggregate_all(
        operators, [click("u1", "/", 1 * SECOND), click("u1", "/", 5 * SECOND),
                    click("u1", "/", 9 * SECOND)]
    )  # fmt: skip
    assert summary(changes, "N") == [
        ("u1", (1 * SECOND, 5 * SECOND), 2),  # [1, 1] failed: merged without a tombstone
        ("u1", (1 * SECOND, 5 * SECOND), None),  # [1, 5] passed: its tombstone
    ]


def test_a_late_session_record_is_kept_while_the_session_it_joins_is_open(
    metastore: Metastore,
) -> None:
    """ksqlDB drops a session record only when the session it merges into ends, plus the
    gap and the grace, before the stream time: not by its own timestamp."""
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE sessions AS SELECT user_id, COUNT(*) AS n FROM clicks "
            "WINDOW SESSION (10 SECONDS, GRACE PERIOD 2 SECONDS) GROUP BY user_id",
        )
    )
    changes = aggregate_all(
        operators,
        [
            click("u1", "/", 20 * SECOND),
            click("u2", "/", 22 * SECOND),  # the stream time 22 s
            click("u1", "/", 11 * SECOND),  # 11 s behind: joins [20, 20] (closes after 32)
            click("u1", "/", 0),  # beyond the gap of [11, 20]: alone, 0 + 12 < 22, dropped
            click("u2", "/", 33 * SECOND),  # 20 + 10 + 2 < 33: u1's session closes
            click("u1", "/", 18 * SECOND),  # within the gap of [11, 20], which closed
        ],
    )
    assert summary(changes, "N") == [
        ("u1", (20 * SECOND, 20 * SECOND), 1),
        ("u2", (22 * SECOND, 22 * SECOND), 1),
        ("u1", (20 * SECOND, 20 * SECOND), None),
        ("u1", (11 * SECOND, 20 * SECOND), 2),
        ("u2", (33 * SECOND, 33 * SECOND), 1),
    ]


def test_a_table_is_aggregated_with_undo(metastore: Metastore) -> None:
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE per_region AS SELECT region, COUNT(*) AS n FROM users GROUP BY region",
        )
    )
    regrouping = TableRegrouping(operators)
    kept: dict[Any, Any] = {}
    states: dict[Any, dict[Any, Any]] = {}
    out: list[tuple[Any, Any]] = []
    for row in (
        user("a", "Ada", "eu"),
        user("b", "Bob", "eu"),
        user("b", "Bobby", "eu"),  # stays in eu: one row, no row between undo and add
        user("a", "Ada", "us"),  # moves: eu loses one, us gains one
        user("b", None, None),  # deleted
    ):
        key = regrouping.source_key(row)
        steps, keep = regrouping.changes(kept.get(key), row)
        kept[key] = keep
        for group, columns, sign in steps:
            state = states.setdefault(group, {})
            for change in operators.aggregate(state, group, columns, 0, sign):
                out.append((change.key["REGION"], change.value["N"] if change.value else None))
    assert out == [("eu", 1), ("eu", 2), ("eu", 2), ("eu", 1), ("us", 1), ("eu", 0)]


def test_an_expression_error_is_null_and_reported(metastore: Metastore) -> None:
    errors: list[str] = []
    operators = Operators(
        plan(metastore, "SELECT user_id, ms / 0 AS bad FROM clicks EMIT CHANGES"), errors.append
    )
    [change] = operators.stateless(click("u1", "/", 1, ms=4))
    assert change.value == {"USER_ID": "u1", "BAD": None}
    assert errors and "ms" in errors[0].lower()


# ---- readers and writers ------------------------------------------------------------------


def record(key: bytes | None, value: bytes | None, ts: int = 7) -> SourceRecord:
    return SourceRecord("t", 2, 40, ts, key, value)


def test_json_values_are_matched_case_insensitively_with_pseudo_columns(
    metastore: Metastore,
) -> None:
    clicks = metastore.source("CLICKS")
    assert clicks is not None
    row = RecordReader(clicks).read(record(b"u1", b'{"page": "/a", "Ms": "12"}'))
    assert row.columns == {
        "USER_ID": "u1",
        "PAGE": "/a",
        "MS": 12,
        "ROWPARTITION": 2,
        "ROWOFFSET": 40,
        "ROWTIME": 7,
    }
    with pytest.raises(RecordError) as failed:
        RecordReader(clicks).read(record(b"u1", b"not json"))
    assert failed.value.target == "value" and "Invalid JSON" in failed.value.message
    with pytest.raises(RecordError):
        RecordReader(clicks).read(record(b"u1", b'{"MS": "twelve"}'))


def test_kafka_and_delimited_formats_and_the_timestamp_column() -> None:
    store = Metastore()
    events = source(
        store,
        "CREATE STREAM events (id BIGINT KEY, name STRING, amount DECIMAL(4, 2), at BIGINT) "
        "WITH (kafka_topic='e', value_format='DELIMITED', timestamp='at')",
    )
    row = RecordReader(events).read(record(struct.pack(">q", 9), b'"a, b",12.5,99'))
    assert row.columns["ID"] == 9 and row.columns["NAME"] == "a, b"
    assert str(row.columns["AMOUNT"]) == "12.50" and row.timestamp == 99
    written = RecordWriter(events)
    assert written.key({"ID": 9}, None) == struct.pack(">q", 9)
    assert written.value(row.columns) == b'"a, b",12.50,99'
    with pytest.raises(RecordError) as failed:
        RecordReader(events).read(record(b"\x00\x01", b"x,1,2"))
    assert failed.value.target == "key"


def test_windowed_keys_carry_their_window() -> None:
    store = Metastore()
    counts = source(
        store,
        "CREATE TABLE counts (page STRING PRIMARY KEY, n BIGINT) WITH (kafka_topic='c', "
        "format='JSON', window_type='TUMBLING', window_size='1 MINUTE')",
    )
    writer = RecordWriter(counts)
    key = writer.key({"PAGE": "/a"}, (60_000, 120_000))
    assert key == b'"/a"' + struct.pack(">q", 60_000)
    row = RecordReader(counts).read(record(key, json.dumps({"N": 3}).encode()))
    assert (row.columns["WINDOWSTART"], row.columns["WINDOWEND"]) == (60_000, 120_000)
    assert row.columns["PAGE"] == "/a" and row.columns["N"] == 3
    tombstone = RecordReader(counts).read(record(key, None))
    assert tombstone.tombstone and tombstone.columns["PAGE"] == "/a"


def test_a_windowed_records_null_key_is_a_null_key_and_window() -> None:
    """A windowed stream's record without key bytes reads as ksqlDB reads it (Kafka
    Streams' windowed key deserializers give a null key): its key columns, WINDOWSTART
    and WINDOWEND null, the row kept and passed on with a null key; a windowed table
    skips it, as Kafka Streams' table source skips a null key."""
    store = Metastore()
    for window in ("TUMBLING', window_size='1 MINUTE", "SESSION"):
        views = source(
            store,
            f"CREATE STREAM views_{window[:7]} (page STRING KEY, n BIGINT) WITH "
            f"(kafka_topic='v', format='JSON', window_type='{window}')",
        )
        row = RecordReader(views).read(record(None, b'{"N": 3}'))
        assert row.keyless and not row.tombstone
        assert row.columns["PAGE"] is None and row.columns["N"] == 3
        assert (row.columns["WINDOWSTART"], row.columns["WINDOWEND"]) == (None, None)
        errors: list[Any] = []
        operators = Operators(
            plan(
                store,
                f"CREATE STREAM out_{window[:7]} AS SELECT page, n, windowstart AS ws "
                f"FROM views_{window[:7]} EMIT CHANGES;",
            ),
            errors.append,
        )
        [change] = operators.stateless(row)
        assert (change.key, change.value, change.window) == (
            {"PAGE": None}, {"N": 3, "WS": None}, None,
        )  # fmt: skip
        assert errors == []
    counts = source(
        store,
        "CREATE TABLE counts (page STRING PRIMARY KEY, n BIGINT) WITH (kafka_topic='c', "
        "format='JSON', window_type='TUMBLING', window_size='1 MINUTE')",
    )
    with pytest.raises(RecordError) as failed:
        RecordReader(counts).read(record(None, b'{"N": 3}'))
    assert failed.value.target == "key"


def test_a_stream_table_join_looks_up_the_table_row(metastore: Metastore) -> None:
    inner = Operators(
        plan(
            metastore,
            "CREATE STREAM enriched AS SELECT c.user_id, c.page, u.name FROM clicks c "
            "JOIN users u ON c.user_id = u.id",
        )
    )
    ada = user("u1", "Ada", "eu")
    clicked = click("u1", "/a", 5)
    assert (inner.stream_key(clicked), inner.table_key(ada)) == ("u1", "u1")
    assert inner.joined(clicked, ada) == [
        Change({"USER_ID": "u1"}, {"PAGE": "/a", "NAME": "Ada"}, 5, None)
    ]
    assert inner.joined(clicked, None) == []  # INNER: no table row, no output
    left = Operators(
        plan(metastore, "SELECT * FROM clicks c LEFT JOIN users u ON u.id = c.user_id EMIT CHANGES")
    )
    [change] = left.joined(clicked, None)
    assert change.value is not None
    assert change.value["C_PAGE"] == "/a" and change.value["U_NAME"] is None
    assert list(change.value) == [
        "C_USER_ID", "C_PAGE", "C_MS", "U_ID", "U_NAME", "U_REGION"
    ]  # fmt: skip


def run_join(operators: Operators, steps: list[tuple[str, Row]]) -> list[Change]:
    states: dict[Any, dict[str, Any]] = {}
    out: list[Change] = []
    stream_time = -1
    for side, row in steps:
        stream_time = max(stream_time, row.timestamp)
        key = operators.key_of(side, row)
        out += operators.join_step(states.setdefault(key, {}), side, row, stream_time)
    return out


def test_a_table_table_join_follows_both_sides(metastore: Metastore) -> None:
    source(
        metastore,
        "CREATE TABLE accounts (uid STRING PRIMARY KEY, balance BIGINT) "
        "WITH (kafka_topic='accounts', format='JSON')",
    )
    operators = Operators(
        plan(
            metastore,
            "CREATE TABLE both_sides AS SELECT u.id, u.name, a.balance FROM users u "
            "LEFT JOIN accounts a ON u.id = a.uid",
        )
    )
    account = Row({"UID": "a", "BALANCE": 5, "ROWTIME": 2, "ROWPARTITION": 0, "ROWOFFSET": 0})
    changes = run_join(
        operators,
        [
            ("right", account),  # LEFT join: no left row yet, nothing
            ("left", user("a", "Ada", "eu", 3)),
            ("left", user("a", "Ada B", "eu", 4)),
            ("left", user("a", None, None, 5)),  # deleted: the joined row is deleted
        ],
    )
    assert [(c.key, c.value) for c in changes] == [
        ({"ID": "a"}, {"NAME": "Ada", "BALANCE": 5}),
        ({"ID": "a"}, {"NAME": "Ada B", "BALANCE": 5}),
        ({"ID": "a"}, None),
    ]


def test_a_stream_stream_join_meets_records_within_the_window(metastore: Metastore) -> None:
    source(
        metastore,
        "CREATE STREAM orders (oid STRING KEY, user_id STRING) "
        "WITH (kafka_topic='orders', value_format='JSON')",
    )
    operators = Operators(
        plan(
            metastore,
            "SELECT o.oid, c.page FROM orders o LEFT JOIN clicks c WITHIN (0 SECONDS, "
            "10 SECONDS) GRACE PERIOD 0 SECONDS ON o.user_id = c.user_id EMIT CHANGES",
        )
    )

    def order(oid: str, ts: int) -> Row:
        columns = {"OID": oid, "USER_ID": "u1", "ROWTIME": ts}
        return Row({**columns, "ROWPARTITION": 0, "ROWOFFSET": 0})

    changes = run_join(
        operators,
        [
            ("left", order("o1", 1 * SECOND)),
            ("right", click("u1", "/pay", 5 * SECOND)),  # within o1's 10 s
            ("left", order("o2", 20 * SECOND)),
            ("right", click("u1", "/late", 19 * SECOND)),  # before o2: outside (0, 10)
            ("right", click("u1", "/x", 40 * SECOND)),  # o2's window closed: o2 unmatched
        ],
    )
    assert [c.value for c in changes] == [
        {"OID": "o1", "PAGE": "/pay"},
        {"OID": "o2", "PAGE": None},
    ]


def test_json_sr_and_protobuf_values_in_the_registry_wire_format() -> None:
    from strom.ksql.protobuf_rows import RowMessages, fill

    store = Metastore()
    header = b"\x00" + struct.pack(">I", 7)
    as_json = source(
        store,
        "CREATE STREAM js (id STRING KEY, n BIGINT, tags ARRAY<STRING>) "
        "WITH (kafka_topic='js', key_format='KAFKA', value_format='JSON_SR')",
    )
    row = RecordReader(as_json).read(record(b"k", header + b'{"N": 3, "TAGS": ["a"]}'))
    assert (row.columns["N"], row.columns["TAGS"]) == (3, ["a"])
    with pytest.raises(RecordError):
        RecordReader(as_json).read(record(b"k", b'{"N": 3}'))  # no magic byte
    as_proto = source(
        store,
        "CREATE STREAM pb (id STRING KEY, n BIGINT, name STRING, ok BOOLEAN) "
        "WITH (kafka_topic='pb', key_format='KAFKA', value_format='PROTOBUF')",
    )
    messages = RowMessages([(c.name, c.type) for c in as_proto.value_columns])
    message = fill(messages.message_class()(), {"N": 12, "NAME": "x", "OK": None})
    data = header + b"\x00" + message.SerializeToString()  # message index 0
    row = RecordReader(as_proto).read(record(b"k", data))
    assert (row.columns["N"], row.columns["NAME"], row.columns["OK"]) == (12, "x", False)


def test_a_json_value_of_another_type_is_refused_in_ksqldbs_words() -> None:
    from strom.ksql import readers
    from strom.ksql import values as v

    assert readers.from_json("5", v.INTEGER) == 5
    for value, sql_type, message in [
        ("x", v.INTEGER, "sourceType: TextNode, requiredType: INTEGER, path: $.A"),
        (2**31, v.INTEGER, "sourceType: LongNode, requiredType: INTEGER, path: $.A"),
        (True, v.BIGINT, "sourceType: BooleanNode, requiredType: BIGINT, path: $.A"),
        (3, v.BOOLEAN, "sourceType: IntNode, requiredType: BOOLEAN, path: $.A"),
    ]:
        with pytest.raises(readers._Mismatch, match=message.replace("$", r"\$")):
            readers.from_json(value, sql_type, "$.A")
