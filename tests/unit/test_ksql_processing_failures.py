"""Records a query cannot get past, as ksqlDB fails its query at them: a DECIMAL SUM that
overflows, a TIMESTAMP column that does not read under ksql.timestamp.throw.on.invalid,
a row that does not serialize. The query's Spark steps run without Spark (a state per
group in a dict): what they give the sink is the records the earlier records made, then
the row that fails the micro-batch (``runtime.FAILED_TOPIC``) with ksqlDB's words. Then
the failure as the query's state keeps it (``RunningQuery.failed``,
``runtime.failure_reason``)."""

from __future__ import annotations

import decimal
import json
import time
from typing import Any

import pyarrow as pa
import pytest
from test_ksql_arrow_aggregate import _Handle, _Timers
from test_ksql_joins import planned
from test_ksql_joins_spark_steps import run_on_spark_steps

from strom.ksql import aggregate_functions, processing_log, runtime
from strom.ksql import expressions as ex
from strom.ksql.packed_output import unpack_in_order
from strom.ksql.planner import QueryPlan
from strom.ksql.queries import QueryRegistry, RunningQuery, error_type, next_backoff_ms
from strom.ksql.values import ProcessingFailure

PRICES = (
    "CREATE STREAM prices (id BIGINT KEY, price DECIMAL(4,1)) "
    "WITH (kafka_topic='prices', value_format='JSON')"
)


def source_batch(topic: str, records: list[tuple[bytes | None, Any, int]]) -> pa.RecordBatch:
    """A source's records (key, value as JSON, timestamp) as the reader gives them."""
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _, _ in records], pa.binary()),
            pa.array([json.dumps(v).encode() for _, v, _ in records], pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([ts * 1000 for *_, ts in records], pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )


def spec_of(name: str, plan: QueryPlan, throw: bool = False) -> runtime.QuerySpec:
    return runtime.QuerySpec(
        name, plan, {"bootstrap.servers": "x"}, None, {}, "log", False, "earliest", 100, throw
    )


def aggregated(spec: runtime.QuerySpec, batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    """The batch through the grouping and aggregation steps, as the sink gets it:
    (topic, key, value) in the order of the records that made them."""
    grouped = pa.Table.from_batches(list(runtime.run_grouping(spec, iter([batch]))))
    processor = runtime._aggregate_processor(spec)
    store: dict[bytes, Any] = {}
    written = []
    for key, rows in grouped.to_pandas().groupby("grp", sort=True):
        processor.init(_Handle(store, key))
        for out in processor.handleInputRows((key,), iter([rows]), _Timers(0)):
            written.append(pa.RecordBatch.from_pandas(out, preserve_index=False))
    return [
        (r["topic"], r["key"], r["value"])
        for b in unpack_in_order(iter(written))
        for r in b.to_pylist()
    ]


def test_a_decimal_sum_that_overflows_fails_after_the_records_before_it() -> None:
    plan = planned(
        PRICES, "CREATE TABLE totals AS SELECT id, SUM(price) AS total FROM prices GROUP BY id"
    )
    spec = spec_of("decimal-overflow", plan)
    batch = source_batch(
        "prices",
        [
            (b"\x00" * 7 + b"\x00", 5.4, 1),
            (b"\x00" * 7 + b"\x00", 100.1, 2),
            (b"\x00" * 7 + b"\x64", 500.9, 3),
            (b"\x00" * 7 + b"\x64", 300.8, 4),
            (b"\x00" * 7 + b"\x64", 400.8, 5),  # 1202.5: 1203 at precision 4
            (b"\x00" * 7 + b"\x00", 1.0, 6),  # after the failure: not written
        ],
    )
    rows = aggregated(spec, batch)
    failed = [i for i, r in enumerate(rows) if r[0] == runtime.FAILED_TOPIC]
    assert failed == [4]
    assert [json.loads(r[2]) for r in rows[:4]] == [
        {"TOTAL": 5.4}, {"TOTAL": 105.5}, {"TOTAL": 500.9}, {"TOTAL": 801.7}
    ]  # fmt: skip
    assert rows[4][2].decode() == (
        "Exception caught in process. topic=prices, partition=0, offset=4: Numeric field "
        "overflow: A field with precision 4 and scale 1 must round to an absolute value "
        "less than 10^3. Got 1203"
    )


def test_a_decimal_sum_rounds_to_its_precision_before_it_checks() -> None:
    """ksqlDB adds in the type's precision (HALF_UP), then refuses a total whose whole
    digits do not fit: a DECIMAL(3,1) sum of 50.9 and 50.8 is 102."""
    total = aggregate_functions._Sum(ex.DecimalType(3, 1))
    first = total.add(total.initial(), decimal.Decimal("50.9"))
    assert first == decimal.Decimal("50.9")
    with pytest.raises(ProcessingFailure, match=r"less than 10\^2\. Got 102$"):
        total.add(first, decimal.Decimal("50.8"))
    assert total.add(first, decimal.Decimal("-60.8")) == decimal.Decimal("-9.9")


EVENTS = (
    "CREATE STREAM events (k STRING KEY, id BIGINT, ts STRING) WITH (kafka_topic='events', "
    "value_format='JSON', timestamp='ts', timestamp_format='yyyy-MM-dd HH:mm:ss')"
)


@pytest.mark.parametrize("throw", [False, True])
def test_a_timestamp_that_does_not_read_fails_the_query_when_it_throws(throw: bool) -> None:
    plan = planned(EVENTS, "CREATE STREAM copied AS SELECT k, id FROM events")
    spec = spec_of(f"timestamps-{throw}", plan, throw)
    batch = source_batch(
        "events",
        [
            (b"a", {"ID": 1, "TS": "2026-01-01 00:00:00"}, 0),
            (b"b", {"ID": 2, "TS": "!!!!"}, 0),
            (b"c", {"ID": 3, "TS": "2026-01-01 00:00:01"}, 0),
        ],
    )
    rows = [
        (r["topic"], r["key"], r["value"])
        for b in runtime.run_stateless(spec, iter([batch]))
        for r in b.to_pylist()
    ]
    assert [(t, k) for t, k, _ in rows] == [
        ("COPIED", b"a"),
        ("log", None),  # logged, as ksqlDB logs it before it throws
        (runtime.FAILED_TOPIC, None) if throw else ("COPIED", b"c"),
    ]
    if throw:
        message = rows[2][2].decode()
        assert message.startswith(
            "Fatal user code error in TimestampExtractor callback for record (topic = events, "
            "partition = 0, offset = 1, timestamp = 0): Could not parse timestamp '!!!!'"
        )


def test_the_failure_reason_is_the_records_in_sparks_exception() -> None:
    text = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted\n"
        "Traceback (most recent call last):\n"
        '  File "sink.py", line 214, in _produce\n'
        "strom.spark.sink.FailedRowError: Exception caught in process. Numeric field overflow\n"
        " SQLSTATE: 38000\n"
    )
    assert runtime.failure_reason(text) == "Exception caught in process. Numeric field overflow"
    assert runtime.failure_reason("Python worker exited\nat ...") == "Python worker exited"


def test_a_querys_errors_are_kept_an_hour_while_it_is_retried_running() -> None:
    """As ksqlDB's: each failed run adds its error; the query stays RUNNING (Kafka
    Streams replaces the failed thread); the errors of the last hour are listed, as many
    as there were (ksql.query.error.max.queue.size bounds nothing in 0.29)."""
    plan = planned(PRICES, "CREATE STREAM copy AS SELECT * FROM prices")
    query = RunningQuery("CSAS_COPY_1", "CREATE STREAM copy AS SELECT * FROM prices;", plan)
    start = int(time.time() * 1000) - 25 * 60_000  # 25 minutes ago
    query.failed("the first", now_ms=start)
    for n in range(20):
        query.failed(f"failure {n}", now_ms=start + 60_000 * (n + 1))
    described = query.description_json("host")
    assert described["state"] == "RUNNING"
    assert described["ksqlHostQueryStatus"] == {"host": "RUNNING"}
    assert query.running_json()["statusCount"] == {"RUNNING": 1}
    messages = [e["errorMessage"] for e in described["queryErrors"]]
    assert messages == ["the first"] + [f"failure {n}" for n in range(20)]
    assert {e["type"] for e in described["queryErrors"]} == {"UNKNOWN"}
    # an hour after the first, it is forgotten
    kept = query.query_errors(now_ms=start + 3_600_000)
    assert [e["errorMessage"] for e in kept] == [f"failure {n}" for n in range(20)]
    refused = RunningQuery("CSAS_COPY_2", "CREATE STREAM copy AS SELECT * FROM prices;", plan)
    refused.failed("Spark refused it", retried=False)  # not retried: ERROR
    assert refused.description_json("host")["state"] == "ERROR"


def test_the_backoff_doubles_up_to_its_largest_from_twice_the_initial() -> None:
    waits, waited = [], 15_000
    for _ in range(8):
        waited = next_backoff_ms(waited, 900_000)
        waits.append(waited)
    assert waits == [30_000, 60_000, 120_000, 240_000, 480_000, 900_000, 900_000, 900_000]


def test_a_row_that_does_not_serialize_is_logged_then_fails_the_query() -> None:
    """Without a schema registry an AVRO sink's rows do not serialize: logged, then the
    failure (ksqlDB's LoggingSerializer logs and throws again)."""
    plan = planned(
        EVENTS,
        "CREATE STREAM copied WITH (value_format='AVRO') AS SELECT k, id FROM events WHERE id > 1",
    )
    spec = spec_of("serializing", plan)
    batch = source_batch(
        "events",
        [
            (b"a", {"ID": 1, "TS": "2026-01-01 00:00:00"}, 0),  # filtered out
            (b"b", {"ID": 2, "TS": "2026-01-01 00:00:01"}, 0),
        ],
    )
    rows = [
        (r["topic"], r["value"])
        for b in runtime.run_stateless(spec, iter([batch]))
        for r in b.to_pylist()
    ]
    assert [t for t, _ in rows] == ["log", runtime.FAILED_TOPIC]
    message = rows[1][1].decode()
    assert message.startswith("Exception caught in process. Unable to serialize record to COPIED")


class _FailingRuntime:
    """Spark as the registry sees it, each run of a query failing at once."""

    def __init__(self) -> None:
        self.queries: dict[str, object] = {}
        self.starts = 0

    def start(self, spec: str) -> None:
        self.starts += 1
        self.queries[spec] = object()

    def stop(self, query_id: str, delete_state: bool = False) -> None:
        self.queries.pop(query_id, None)

    def state(self, query_id: str) -> tuple[str, str | None]:
        if query_id not in self.queries:
            return "NOT_RUNNING", None
        return "ERROR", f"Exception caught in process. run {self.starts}"

    def close(self) -> None:
        return None


def test_a_failed_query_is_retried_after_its_own_backoff_and_shown_running() -> None:
    plan = planned(PRICES, "CREATE STREAM copy AS SELECT * FROM prices")
    runtime = _FailingRuntime()
    registry = QueryRegistry(lambda: runtime, "http://host:8088")
    registry.owns = lambda query_id: True
    properties = {"ksql.query.retry.backoff.initial.ms": "100"}  # the query's own
    query = RunningQuery("CSAS_COPY_1", "CREATE ...;", plan, properties=properties)
    registry.add(query)
    try:
        registry.start(query, "CSAS_COPY_1")
        deadline = time.monotonic() + 30
        while runtime.starts < 2:  # the registry retries it by itself
            assert time.monotonic() < deadline
            time.sleep(0.05)
        shown = registry.show("SHOW QUERIES EXTENDED;", True)["queryDescriptions"][0]
        assert shown["state"] == "RUNNING"
        assert shown["ksqlHostQueryStatus"] == {"http://host:8088": "RUNNING"}
        messages = [e["errorMessage"] for e in shown["queryErrors"]]
        # each run's failure once, however often its state was looked at
        assert messages[:2] == [
            "Exception caught in process. run 1",
            "Exception caught in process. run 2",
        ]
        assert len(messages) == len(set(messages))
        with registry._failures:  # the wait after the n-th failure: 100 ms doubled n times
            failures, wait = len(query.errors), registry._retries["CSAS_COPY_1"][1]
        assert wait == 100 * 2**failures
    finally:
        registry.close()


# A bad TIMESTAMP under ksql.timestamp.throw.on.invalid before a step with state: the
# records before it are written, then its processing log entry, then the row that fails
# the query; the task's records after it are not read.
TIMED_SOURCES = (
    "CREATE STREAM visits (id STRING KEY, customer STRING, item STRING, ts STRING) WITH "
    "(kafka_topic='visits', value_format='JSON', timestamp='ts', "
    "timestamp_format='yyyy-MM-dd HH:mm:ss')",
    "CREATE TABLE customers (id STRING PRIMARY KEY, name STRING) "
    "WITH (kafka_topic='customers', value_format='JSON')",
    "CREATE TABLE items (id STRING PRIMARY KEY, price INTEGER) "
    "WITH (kafka_topic='items', value_format='JSON')",
    "CREATE TABLE ratings (id STRING PRIMARY KEY, stars INTEGER, ts STRING) WITH "
    "(kafka_topic='ratings', value_format='JSON', timestamp='ts', "
    "timestamp_format='yyyy-MM-dd HH:mm:ss')",
)
JAN_1 = 1767225600000  # 2026-01-01 00:00:00 UTC
VISITS = [
    ("customers", "c1", {"NAME": "Ada"}, 1),
    ("items", "i1", {"PRICE": 10}, 2),
    ("visits", "v1", {"CUSTOMER": "c1", "ITEM": "i1", "TS": "2026-01-01 00:00:00"}, 10),
    ("visits", "v2", {"CUSTOMER": "c1", "ITEM": "i1", "TS": "!!!!"}, 11),
    ("visits", "v3", {"CUSTOMER": "c1", "ITEM": "i1", "TS": "2026-01-01 00:00:01"}, 12),
]
EXTRACTOR = "Fatal user code error in TimestampExtractor callback for record (topic = visits, "


def _failed_at_v2(written: list[tuple[Any, Any, int]]) -> list[tuple[Any, Any, int]]:
    """What the sink writes: the rows up to the one that fails the micro-batch."""
    failed = [n for n, row in enumerate(written) if row[0] == "failed"]
    assert failed, written
    kept = written[: failed[0] + 1]
    assert kept[-1][1].startswith(EXTRACTOR + "partition = 0, offset = 1, timestamp = 11)")
    assert kept[-2] == ("log", processing_log.RECORD_PROCESSING_ERROR, 0)  # logged first
    return kept[:-2]


@pytest.mark.parametrize("backwards", [False, True])
def test_a_bad_timestamp_fails_a_join_after_the_records_before_it(backwards: bool) -> None:
    plan = planned(
        *TIMED_SOURCES,
        "CREATE STREAM named AS SELECT v.customer, v.id AS visit, c.name FROM visits v "
        "JOIN customers c ON v.customer = c.id",
    )
    records = [r for r in VISITS if r[0] != "items"]  # the topics the query reads
    written = run_on_spark_steps(plan, records, backwards, throw=True)
    assert _failed_at_v2(written) == [(b"c1", {"VISIT": "v1", "NAME": "Ada"}, JAN_1)]
    assert all("v3" not in repr(row) for row in written)  # not read


@pytest.mark.parametrize("backwards", [False, True])
def test_a_bad_timestamp_fails_a_chain_of_joins_after_the_records_before_it(
    backwards: bool,
) -> None:
    plan = planned(
        *TIMED_SOURCES,
        "CREATE STREAM priced AS SELECT v.item, v.id AS visit, c.name, i.price FROM visits v "
        "JOIN customers c ON v.customer = c.id JOIN items i ON v.item = i.id",
    )
    written = run_on_spark_steps(plan, VISITS, backwards, throw=True)
    assert _failed_at_v2(written) == [(b"i1", {"VISIT": "v1", "NAME": "Ada", "PRICE": 10}, JAN_1)]


@pytest.mark.parametrize("backwards", [False, True])
def test_a_bad_timestamp_fails_an_aggregation_over_a_join_after_the_records_before_it(
    backwards: bool,
) -> None:
    plan = planned(
        *TIMED_SOURCES,
        "CREATE TABLE visited AS SELECT c.name, COUNT(*) AS visits FROM visits v "
        "JOIN customers c ON v.customer = c.id GROUP BY c.name",
    )
    records = [r for r in VISITS if r[0] != "items"]
    written = run_on_spark_steps(plan, records, backwards, throw=True)
    assert _failed_at_v2(written) == [(b"Ada", {"VISITS": 1}, JAN_1)]


@pytest.mark.parametrize("backwards", [False, True])
def test_a_bad_timestamp_fails_a_table_join_aggregation_placed_by_time(backwards: bool) -> None:
    """Rows of two tables' records are placed by their time before the aggregation: the
    failure too, after the records before it."""
    plan = planned(
        *TIMED_SOURCES,
        "CREATE TABLE rated AS SELECT c.name, SUM(r.stars) AS stars FROM ratings r "
        "JOIN customers c ON r.id = c.id GROUP BY c.name",
    )
    records = [
        ("customers", "c1", {"NAME": "Ada"}, 1),
        ("ratings", "c1", {"STARS": 4, "TS": "2026-01-01 00:00:00"}, 10),
        ("ratings", "c1", {"STARS": 5, "TS": "!!!!"}, 11),
        ("customers", "c1", {"NAME": "Ada L"}, 12),
    ]
    written = run_on_spark_steps(plan, records, backwards, throw=True)
    failed = [n for n, row in enumerate(written) if row[0] == "failed"]
    assert failed and written[failed[0]][1].startswith(
        "Fatal user code error in TimestampExtractor callback for record (topic = ratings, "
        "partition = 0, offset = 1, timestamp = 11)"
    )
    assert written[: failed[0]] == [
        (b"Ada", {"STARS": 4}, JAN_1),
        ("log", processing_log.RECORD_PROCESSING_ERROR, 0),
    ]


def test_a_bad_timestamp_fails_an_aggregation_after_the_records_before_it() -> None:
    plan = planned(EVENTS, "CREATE TABLE counted AS SELECT k, COUNT(*) AS n FROM events GROUP BY k")
    spec = spec_of("aggregate-timestamps", plan, throw=True)
    batch = source_batch(
        "events",
        [
            (b"a", {"ID": 1, "TS": "2026-01-01 00:00:00"}, 0),
            (b"b", {"ID": 2, "TS": "2026-01-01 00:00:01"}, 0),
            (b"a", {"ID": 3, "TS": "!!!!"}, 0),
            (b"a", {"ID": 4, "TS": "2026-01-01 00:00:02"}, 0),  # not read
        ],
    )
    rows = aggregated(spec, batch)
    assert [(t, k) for t, k, _ in rows] == [
        ("COUNTED", b"a"), ("COUNTED", b"b"), ("log", None), (runtime.FAILED_TOPIC, None)
    ]  # fmt: skip
    entry = json.loads(rows[2][2])
    assert entry["logger"] == "processing.aggregate-timestamps.KsqlTopic.Source"
    assert entry["message"]["type"] == processing_log.RECORD_PROCESSING_ERROR
    error = entry["message"]["recordProcessingError"]
    assert error["errorMessage"] == "Failed to extract timestamp from row"
    assert error["cause"][0].startswith("Could not parse timestamp '!!!!'")
    assert (
        rows[3][2]
        .decode()
        .startswith(
            "Fatal user code error in TimestampExtractor callback for record (topic = events, "
            "partition = 0, offset = 2, timestamp = 0): Could not parse timestamp '!!!!'"
        )
    )


def test_a_failures_type_is_ksqldbs_classifiers() -> None:
    """A function's failure and a row the sink cannot serialize are the user's (ksqlDB's
    KsqlFunctionClassifier, KsqlSerializationClassifier); others unknown."""
    assert (
        error_type(
            "Exception caught in process. topic=prices, partition=0, offset=4: Numeric field "
            "overflow: A field with precision 4 and scale 1 must round to an absolute value "
            "less than 10^3. Got 1203"
        )
        == "USER"
    )
    assert error_type("Exception caught in process. Unable to serialize record to C: x") == "USER"
    assert error_type("Fatal user code error in TimestampExtractor callback for record") == (
        "UNKNOWN"
    )
    assert error_type("Python worker failed to connect back.") == "UNKNOWN"


def test_a_negative_timestamp_skips_its_record_unlogged_even_when_it_throws() -> None:
    """Kafka Streams skips a record its extractor gives a negative time (a warning of its
    own): ksqlDB's extractor threw nothing, so nothing is logged and nothing fails."""
    plan = planned(
        "CREATE STREAM times (k STRING KEY, id BIGINT, ts BIGINT) WITH (kafka_topic='times', "
        "value_format='JSON', timestamp='ts')",
        "CREATE STREAM copied AS SELECT k, id FROM times",
    )
    spec = spec_of("negative-times", plan, throw=True)
    batch = source_batch(
        "times",
        [
            (b"a", {"ID": 1, "TS": 1000}, 0),
            (b"b", {"ID": 2, "TS": -5}, 0),
            (b"c", {"ID": 3, "TS": 2000}, 0),
        ],
    )
    rows = [
        (r["topic"], r["key"], r["timestamp"])
        for b in runtime.run_stateless(spec, iter([batch]))
        for r in b.to_pylist()
    ]
    assert rows == [("COPIED", b"a", 1000), ("COPIED", b"c", 2000)]
