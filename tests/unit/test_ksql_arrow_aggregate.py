"""The batch path of an aggregation (``strom.ksql.arrow_aggregate``: COUNT, SUM, AVG,
MIN, MAX) against the record-at-a-time one: the grouping step keys the same rows of each
group and partition in the same order (dropping the same: WHERE, null groups), packed,
and the aggregation step, over several micro-batches of a group with late records,
windows closing, a task's several batches, a batch run record at a time beside a
packed one, wrapping sums, NaN, signed zeros and nulls, writes the same records (its
packed output unpacked as before the sink) and leaves the same state. The aggregation
step runs in ``runtime``'s processor with a state handle kept in a dict (what Spark's
state store does for it). No Spark."""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from strom.ksql import packed_output, runtime
from strom.ksql import statements as st
from strom.ksql.arrow_aggregate import PACKED, compile_aggregation, compile_grouping
from strom.ksql.metastore import Metastore
from strom.ksql.packed_output import unpack_in_order
from strom.ksql.parser import parse_statement
from strom.ksql.planner import QueryPlan, SinkRequest, plan_query
from strom.ksql.runtime import QuerySpec, _TaskParts

BASE = 1_767_225_600_000
MINUTE = 60_000


@pytest.fixture(scope="module")
def metastore() -> Metastore:
    store = Metastore()
    text = (
        "CREATE STREAM views (user_id STRING KEY, page STRING, region STRING, n INTEGER, "
        "d DOUBLE, big BIGINT) "
        "WITH (KAFKA_TOPIC='views', VALUE_FORMAT='JSON');"
    )
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateSource)
    store.put_source(store.source_from_statement(statement, text))
    return store


def plan(metastore: Metastore, text: str) -> QueryPlan:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
    return plan_query(statement.query, metastore, request, text)


QUERIES = [
    "CREATE TABLE a AS SELECT user_id, COUNT(*) AS views FROM views "
    "WINDOW TUMBLING (SIZE 1 MINUTE, GRACE PERIOD 2 MINUTES) GROUP BY user_id EMIT CHANGES;",
    "CREATE TABLE b AS SELECT page, COUNT(*) AS c, COUNT(*) * 2 AS twice, "
    "WINDOWSTART AS ws, WINDOWEND AS we FROM views WINDOW TUMBLING (SIZE 1 MINUTE) "
    "WHERE region = 'eu' GROUP BY page EMIT CHANGES;",
    "CREATE TABLE c AS SELECT region, COUNT(*) AS c FROM views GROUP BY region EMIT CHANGES;",
    "CREATE TABLE h AS SELECT user_id, SUM(n) AS s, AVG(n) AS a, MIN(n) AS lo, MAX(n * 3) AS hi, "
    "COUNT(page) AS pages, SUM(d) AS sd, AVG(d) AS ad, MIN(d) AS dlo, MAX(d) AS dhi, "
    "SUM(big) AS sb, MIN(big) AS bl FROM views WINDOW TUMBLING (SIZE 2 MINUTES) "
    "GROUP BY user_id EMIT CHANGES;",
    "CREATE TABLE i AS SELECT region, SUM(n) AS s, MAX(d) AS m, COUNT(*) AS c FROM views "
    "WHERE n > 3 GROUP BY region EMIT CHANGES;",
]


def batch(
    records: list[tuple[bytes | None, bytes | None, int]], first: int, partition: int = 0
) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in records], pa.binary()),
            pa.array([r[1] for r in records], pa.binary()),
            pa.array(["views"] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(range(first, first + n), pa.int64()),
            pa.array([r[2] * 1000 for r in records], pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )


class _State:
    def __init__(self, store: dict[str, Any], key: bytes) -> None:
        self.store, self.key = store, key

    def exists(self) -> bool:
        return self.key in self.store

    def get(self) -> tuple[bytes] | None:
        return (self.store[self.key],) if self.key in self.store else None

    def update(self, value: tuple[bytes]) -> None:
        self.store[self.key] = value[0]

    def clear(self) -> None:
        self.store.pop(self.key, None)


class _Handle:
    def __init__(self, store: dict[str, Any], key: bytes) -> None:
        self.state = _State(store, key)

    def getValueState(self, name: str, schema: Any) -> _State:
        return self.state

    def registerTimer(self, due: int) -> None:
        return None

    def deleteTimer(self, due: int) -> None:
        return None


class _Timers:
    def __init__(self, watermark: int) -> None:
        self.watermark = watermark

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark


def run(
    query: QueryPlan, micro_batches: list[list[pa.RecordBatch]], fast: bool, name: str
) -> tuple[dict[Any, list[int]], list[Any], dict[bytes, Any], int]:
    """The micro-batches (each a task's Arrow batches) through both steps: (each group's
    and partition's row times in offset order, output rows, state, packed rows)."""
    spec = QuerySpec(name, query, {"bootstrap.servers": "x"}, None, {}, "log", False, "x", 500)
    parts = _TaskParts(spec)
    if not fast:
        parts.batch_grouping = parts.batch_aggregation = None
    runtime._PARTS[name] = parts
    layout = parts.batch_aggregation.layout if parts.batch_aggregation is not None else None
    processor = runtime._aggregate_processor(spec, packed=fast)
    store: dict[bytes, Any] = {}
    grouped_rows: dict[Any, list[tuple[float, int]]] = {}
    packs = 0
    outputs: list[Any] = []
    watermark = 0  # Spark's in the first micro-batch
    for micro_batch in micro_batches:
        grouped = pa.Table.from_batches(list(runtime.run_grouping(spec, iter(micro_batch))))
        for r in grouped.to_pylist():
            ms = int(r["ts"].timestamp() * 1000)
            if r["seq"] == PACKED:  # a group's rows of one partition, packed
                assert layout is not None
                times = np.frombuffer(r["payload"], layout)["t"].tolist()
                assert fast and ms == max(times)  # the watermark the rows would give
                rows = [(r["off"] + i / len(times), t) for i, t in enumerate(times)]
                packs += 1
            else:
                rows = [(r["off"], ms)]
            grouped_rows.setdefault((r["grp"], r["part"]), []).extend(rows)
        frame = grouped.to_pandas()
        written = []  # the groups' rows, then in the order of their records (one task's)
        for key, rows in frame.groupby("grp", sort=True):
            processor.init(_Handle(store, key))
            for out in processor.handleInputRows((key,), iter([rows]), _Timers(watermark)):
                frame = pa.RecordBatch.from_pandas(out, preserve_index=False)
                assert ("packed" in frame.schema.names) == fast
                written.append(frame)
        outputs += [r for batch in unpack_in_order(iter(written)) for r in batch.to_pylist()]
        times = pa.concat_arrays([b.column("timestamp") for b in micro_batch])
        # Spark's watermark: the latest time (the event time is shifted by the delay)
        watermark = max(watermark, max(times.cast(pa.int64()).to_pylist()) // 1000)
    state = {k: pickle.loads(v) for k, v in store.items()}
    in_order = {k: [t for _, t in sorted(rows)] for k, rows in grouped_rows.items()}
    return in_order, outputs, state, packs


def in_window_order(state: dict[bytes, Any]) -> dict[bytes, Any]:
    return {k: {**s, "windows": dict(sorted(s["windows"].items()))} for k, s in state.items()}


def views(start: int, count: int, at: int) -> list[tuple[bytes | None, bytes | None, int]]:
    regions = ["eu", "us", None]
    records: list[tuple[bytes | None, bytes | None, int]] = []
    for i in range(start, start + count):
        value: dict[str, Any] = {
            "page": f"/p/{i % 4}" if i % 7 else None,
            "region": regions[i % 3],
            "n": i,
            "d": [i / 3, None, -i * 1.5, float("nan"), 0.0, -0.0, 1e300][i % 7],
            "big": None if i % 5 == 0 else (2**62 + i) * (-1) ** i,
        }
        if i == 61:  # near INTEGER's end: a SUM of INTEGER wraps as Java's int
            value["n"] = 2**31 - 2
        records.append((f"u{i % 5}".encode(), json.dumps(value).encode(), at + i * 7_000))
    return records


@pytest.mark.parametrize("text", QUERIES)
def test_the_batch_path_writes_what_the_operators_write(
    metastore: Metastore, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packed_output, "PACKED_RECORDS", 7)  # a group's updates in rows of 7
    query = plan(metastore, text)
    assert compile_grouping(query) is not None and compile_aggregation(query) is not None
    late = [(b"u1", b'{"page": "/p/1", "region": "eu"}', BASE - 10 * MINUTE)]
    micro_batches = [
        [batch(views(0, 40, BASE), 0)],
        [batch(views(40, 30, BASE) + late + [(b"u2", None, BASE + 300_000)], 40)],
        [batch(views(100, 25, BASE + 20 * MINUTE), 80)],  # windows of the start close
        # a task's several batches (packed together) of two partitions, out of order
        [
            batch(views(125, 9, BASE + 19 * MINUTE), 105),
            batch(views(134, 7, BASE), 0, 1),
            batch(views(141, 11, BASE + 21 * MINUTE), 114),
        ],  # fmt: skip
        # a batch run record at a time (a record that does not read) and a packed one
        [
            batch(views(152, 6, BASE + 22 * MINUTE) + [(b"u1", b"x", BASE + 22 * MINUTE)], 130),
            batch(views(158, 8, BASE + 22 * MINUTE), 20, 1),
        ],
    ]
    fast = run(query, micro_batches, True, f"fast-{text[13]}")
    slow = run(query, micro_batches, False, f"slow-{text[13]}")
    assert fast[0] == slow[0]  # the same rows of each group and partition, in order
    assert fast[3] and not slow[3]  # Arrow's rows packed, a row a record else
    assert fast[3] < sum(len(times) for times in fast[0].values()) / 2
    logged = [o for o in slow[1] if o["topic"] == "log"]  # its query id and time differ
    assert len(logged) == 1 and len([o for o in fast[1] if o["topic"] == "log"]) == 1
    assert [o for o in fast[1] if o["topic"] != "log"] == [
        o for o in slow[1] if o["topic"] != "log"
    ]
    # the same state (a NaN is not equal to itself; windows in any order)
    assert repr(in_window_order(fast[2])) == repr(in_window_order(slow[2]))
    assert len(slow[1]) > 20


def test_a_batch_it_cannot_vouch_for_is_grouped_record_at_a_time(metastore: Metastore) -> None:
    query = plan(metastore, QUERIES[0])
    grouping = compile_grouping(query)
    assert grouping is not None
    good = batch(views(0, 3, BASE), 0)
    assert grouping.run(good) is not None
    bad = batch(views(0, 3, BASE) + [(b"u9", b"not json", BASE)], 0)
    assert grouping.run(bad) is None
    grouped, outputs, _, packs = run(query, [[bad]], True, "bad")
    assert packs == 0
    assert sum(len(times) for times in grouped.values()) == 4  # three rows and a log entry
    assert [o["topic"] for o in outputs].count("log") == 1
    assert [o["topic"] for o in outputs].count("A") == 3


@pytest.mark.parametrize(
    "text",
    [
        "CREATE TABLE d AS SELECT user_id, COLLECT_LIST(n) AS s FROM views GROUP BY user_id "
        "EMIT CHANGES;",
        "CREATE TABLE e AS SELECT user_id, COUNT(*) AS c FROM views GROUP BY user_id "
        "HAVING COUNT(*) > 1 EMIT CHANGES;",
        "CREATE TABLE f AS SELECT user_id, COUNT(*) AS c FROM views "
        "WINDOW HOPPING (SIZE 2 MINUTES, ADVANCE BY 1 MINUTE) GROUP BY user_id EMIT CHANGES;",
        "CREATE TABLE g AS SELECT user_id, COUNT(*) AS c FROM views "
        "WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY user_id EMIT FINAL;",
    ],
)
def test_other_aggregations_run_record_at_a_time(metastore: Metastore, text: str) -> None:
    query = plan(metastore, text)
    assert compile_grouping(query) is None and compile_aggregation(query) is None


def test_pandas_frames_hold_what_spark_gives() -> None:
    frame = pd.DataFrame({"ts": pd.to_datetime([BASE + 5], unit="ms", utc=True)})
    assert runtime._row_times(frame).tolist() == [BASE + 5]


@pytest.mark.parametrize("fast", [True, False])
def test_updates_are_written_in_the_order_of_their_records(
    metastore: Metastore, fast: bool
) -> None:
    """Every update in the order of the records that made them, per source partition
    (the groups' outputs of a micro-batch gathered and sorted by offset), as ksqlDB
    writes them with ``cache.max.bytes.buffering=0``."""
    query = plan(metastore, QUERIES[0])
    value = b'{"page": "/p", "region": "eu"}'
    users = [b"u1", b"u2", b"u3", b"u1", b"u3", b"u2", b"u1"]
    records = [(u, value, BASE + i * 1000) for i, u in enumerate(users)]
    _, outputs, _, _ = run(
        query, [[batch(records[:5], 0)], [batch(records[5:], 5)]], fast, f"order-{fast}"
    )
    written = [(o["key"][:2], json.loads(o["value"])["VIEWS"]) for o in outputs]
    assert written == [
        (b"u1", 1), (b"u2", 1), (b"u3", 1), (b"u1", 2), (b"u3", 2), (b"u2", 2), (b"u1", 3)
    ]  # fmt: skip


@pytest.mark.parametrize("fast", [True, False])
def test_a_late_record_is_dropped_by_its_partitions_stream_time(
    metastore: Metastore, fast: bool
) -> None:
    """ksqlDB's stream time is the source partition's: a record whose window ended a
    grace before the latest record of its partition (any group's) is dropped, though
    its own group saw nothing later; another partition's older record is not."""
    query = plan(metastore, QUERIES[0])  # TUMBLING 1 minute, GRACE PERIOD 2 minutes
    value = b'{"page": "/p", "region": "eu"}'
    first = [(b"u1", value, BASE), (b"u2", value, BASE + 10 * MINUTE)]
    late = [(b"u1", value, BASE + 30_000)]  # its window closed at BASE + 3 minutes
    other = [(b"u3", value, BASE + 40_000)]  # partition 1's stream time is its own
    _, outputs, state, _ = run(
        query,
        [[batch(first + late, 0), batch(other, 0, 1)]],
        fast,
        f"partition-time-{fast}",
    )
    counts = [(o["key"][:2], json.loads(o["value"])["VIEWS"]) for o in outputs]
    assert sorted(counts) == [(b"u1", 1), (b"u2", 1), (b"u3", 1)]
    windows = {pickle.loads(k)[0]: sorted(s["windows"]) for k, s in state.items()}
    assert windows == {"u2": [BASE + 10 * MINUTE], "u3": [BASE]}


def test_emit_final_writes_a_window_after_the_record_that_closed_it(
    metastore: Metastore,
) -> None:
    """EMIT FINAL (record at a time): a window is written right after the record whose
    stream time passed its end and grace (its own group's), not after the group's last
    record of the micro-batch; one that an earlier micro-batch's stream time closed,
    before the records of the next."""
    query = plan(
        metastore,
        "CREATE TABLE fin AS SELECT user_id, COUNT(*) AS views FROM views WINDOW TUMBLING "
        "(SIZE 2 SECONDS, GRACE PERIOD 0 SECONDS) GROUP BY user_id EMIT FINAL;",
    )
    value = b'{"page": "/p", "region": "eu"}'
    first = [(u, value, BASE + t * 1000) for u, t in
             [(b"a", 0), (b"b", 0), (b"a", 2), (b"b", 2), (b"a", 4)]]  # fmt: skip
    later = [(b"b", value, BASE + 6000)]
    _, outputs, _, _ = run(query, [[batch(first, 0)], [batch(later, 5)]], False, "final")
    written = [(o["key"][:1], int.from_bytes(o["key"][1:], "big") - BASE) for o in outputs]
    assert written == [
        (b"a", 0),  # at a's record of 2 s
        (b"b", 0),  # at b's record of 2 s (b's first window closed by a's record)
        (b"a", 2000),  # at a's record of 4 s
        (b"b", 2000),  # closed by the first micro-batch's stream time (4 s)
    ]
    assert [json.loads(o["value"])["VIEWS"] for o in outputs] == [1, 1, 1, 1]
    # placed before the records of the group's source partition (offset -1), so that
    # the task writing that partition's records writes it first
    parts = runtime._PARTS["final"]
    closed = parts.operators.close_windows({BASE: {"end": BASE + 2000, "acc": [1], "ts": BASE}},
                                           ("b",), BASE + 2000)  # fmt: skip
    [placed] = runtime._closed_first(parts, closed, 3)
    assert placed[4:] == (3, -1, BASE)


def test_emit_final_leaves_unwritten_a_window_another_groups_record_expired(
    metastore: Metastore,
) -> None:
    """ksqlDB's suppress.json 'should suppress multiple keys': k1's record of 5 moves
    the stream time from 2 to 5, closing both keys' windows [0, 2) when the window store
    holds none starting before 4 - 3 (its retention, size and grace): neither is
    written, though k2's closes at k2's own later record."""
    query = plan(
        metastore,
        "CREATE TABLE fin2 AS SELECT user_id, COUNT(*) AS views FROM views WINDOW TUMBLING "
        "(SIZE 2 MILLISECONDS, GRACE PERIOD 1 MILLISECONDS) GROUP BY user_id EMIT FINAL;",
    )
    value = b'{"page": "/p", "region": "eu"}'
    records = [(u, value, BASE + t) for u, t in
               [(b"k1", 0), (b"k2", 1), (b"k1", 2), (b"k1", 1), (b"k2", 0), (b"k1", 5),
                (b"k1", 0), (b"k2", 2)]]  # fmt: skip
    _, outputs, _, _ = run(query, [[batch(records, 0)]], False, "final-keys")
    assert [(o["key"], json.loads(o["value"])["VIEWS"], o["timestamp"]) for o in outputs] == [
        (b"k1" + (BASE + 2).to_bytes(8, "big"), 1, BASE + 2)
    ]


def test_source_partitions_spread_over_the_shuffle_as_spark_hashes_them() -> None:
    """Spark's hash of an INT (read from Spark 4's ``hash``), and the bucket values that
    put source partition p in shuffle partition p modulo their number."""
    assert [runtime._spark_int_hash(p) for p in (-1, 0, 1, 2)] == [
        -1604776387, 933211791, -559580957, 1765031574
    ]  # fmt: skip
    for buckets in (1, 2, 3, 5):
        for partition in range(-1, 12):
            value = runtime._bucket_value(partition, buckets)
            assert runtime._spark_int_hash(value) % buckets == partition % buckets
