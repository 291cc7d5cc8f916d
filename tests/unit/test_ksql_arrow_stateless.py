"""The batch path of a persistent query's filter and projection
(``strom.ksql.arrow_stateless``) against the record-at-a-time operators: for each plan
and batch, the output records are the same (topic, key, value bytes, timestamp); a
batch the batch path cannot vouch for (bad JSON, a field of another JSON type, a field
named in two cases, invalid UTF-8, an INTEGER out of range) is run record at a time,
with its processing log entries; a plan of another shape is not compiled. No Spark."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from strom.ksql import statements as st
from strom.ksql.arrow_stateless import compile_stateless
from strom.ksql.metastore import Metastore
from strom.ksql.parser import parse_statement
from strom.ksql.planner import QueryPlan, SinkRequest, plan_query
from strom.ksql.runtime import QuerySpec, _TaskParts, run_stateless

BASE = 1_767_225_600_000


@pytest.fixture(scope="module")
def metastore() -> Metastore:
    store = Metastore()
    for text in (
        "CREATE STREAM views (user_id STRING KEY, page STRING, region STRING, "
        "duration BIGINT, n INTEGER, score DOUBLE, ok BOOLEAN) "
        "WITH (KAFKA_TOPIC='views', VALUE_FORMAT='JSON');",
        "CREATE STREAM nokey (page STRING, n INTEGER) "
        "WITH (KAFKA_TOPIC='nokey', VALUE_FORMAT='JSON');",
        "CREATE TABLE users (id STRING PRIMARY KEY, name STRING) "
        "WITH (KAFKA_TOPIC='users', FORMAT='JSON');",
    ):
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateSource)
        store.put_source(store.source_from_statement(statement, text))
    return store


def plan(metastore: Metastore, text: str) -> QueryPlan:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
    return plan_query(statement.query, metastore, request, text)


def batch(records: list[tuple[bytes | None, bytes | None, int]]) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in records], pa.binary()),
            pa.array([r[1] for r in records], pa.binary()),
            pa.array(["views"] * n, pa.string()),
            pa.array([i % 2 for i in range(n)], pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([r[2] * 1000 for r in records], pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )


def both_ways(query: QueryPlan, records: list[tuple[bytes | None, bytes | None, int]]) -> Any:
    """(the batch path's output or None, the record-at-a-time output) as row lists."""
    spec = QuerySpec(
        f"q{id(query)}", query, {"bootstrap.servers": "x"}, None, {}, "log", False, "earliest", 500
    )
    fast = compile_stateless(query)
    assert fast is not None
    made = fast.run(batch(records))
    parts = _TaskParts(spec)
    parts.batch_stateless = None
    from strom.ksql import runtime

    runtime._PARTS[spec.query_id] = parts
    slow = [r for b in run_stateless(spec, iter([batch(records)])) for r in b.to_pylist()]
    return (None if made is None else made.to_pylist()), slow


def view(i: int, **fields: Any) -> tuple[bytes, bytes, int]:
    value = {
        "page": f"/p/{i}",
        "region": ["eu", "us", None][i % 3],
        "duration": i * 7 - 20,
        "n": i,
        "score": i / 4,
        "ok": i % 2 == 0,
    }
    value.update(fields)
    return f"u{i}".encode(), json.dumps(value).encode(), BASE + i


QUERIES = [
    "CREATE STREAM a AS SELECT user_id, page, duration * 2 AS d FROM views "
    "WHERE region = 'eu' EMIT CHANGES;",
    "CREATE STREAM b AS SELECT user_id, page + '!' AS p, n + 1 AS m, score - n AS s, ok, "
    "ROWTIME AS t, ROWPARTITION AS rp, ROWOFFSET AS ro FROM views "
    "WHERE (duration > 10 AND NOT ok) OR region IS NULL OR ok = true EMIT CHANGES;",
    "CREATE STREAM c AS SELECT * FROM views WHERE page <> '/p/3' AND score >= 1 EMIT CHANGES;",
    "CREATE STREAM d AS SELECT page, n * 2147483647 AS wrapped FROM nokey EMIT CHANGES;",
    "CREATE STREAM g AS SELECT page, user_id, n FROM views PARTITION BY page EMIT CHANGES;",
    "CREATE STREAM h AS SELECT user_id AS u, page FROM views EMIT CHANGES;",
]


@pytest.mark.parametrize("text", QUERIES)
def test_the_batch_path_writes_what_the_operators_write(metastore: Metastore, text: str) -> None:
    query = plan(metastore, text)
    records = [view(i) for i in range(12)]
    records.append((b"u99", None, BASE))  # a null value: dropped by WHERE, else passed on
    records.append((None, b'{"page": "no key", "region": "eu", "n": null}', BASE + 5))
    records.append((b"u98", b'{"page": "t\\u00e9\\"x\\n", "region": "eu"}', BASE + 6))
    fast, slow = both_ways(query, records)
    assert fast is not None
    assert fast == slow
    assert slow  # the filters keep some rows
    nulls = [r["key"] for r in slow if r["value"] is None]
    if query.where is not None:
        assert nulls == []
    else:  # keyed by the source's key, or null when the key is of the value's columns
        keyed = query.partition_by is None and query.source.key_columns
        assert nulls == [b"u99" if keyed else None]
    # fields named in another case than the columns, alike in the whole batch
    upper = [
        (key, value.replace(b'"page"', b'"PAGE"').replace(b'"region"', b'"Region"'), ts)
        for key, value, ts in records
        if value is not None
    ]
    fast, slow = both_ways(query, upper)
    assert fast is not None
    assert fast == slow


def test_an_empty_batch(metastore: Metastore) -> None:
    fast, slow = both_ways(plan(metastore, QUERIES[0]), [])
    assert fast == slow == []


@pytest.mark.parametrize(
    "bad",
    [
        b"not json",
        b'{"page": 1}',  # a number for a STRING column: ksqlDB writes its text
        b'{"n": 4294967296}',  # out of INTEGER's range: a processing log entry
        b'{"page": "a", "PAGE": "b"}',  # an exact name and a case variant
        b'{"page": "\xff"}',  # invalid UTF-8
        b'{"duration": 1.5}',  # a double for a BIGINT column
        b'{"a": 1} {"a": 2}',
    ],
)
def test_a_batch_it_cannot_vouch_for_runs_record_at_a_time(
    metastore: Metastore, bad: bytes
) -> None:
    query = plan(metastore, QUERIES[1])
    fast, slow = both_ways(query, [view(5), (b"u2", bad, BASE), view(6)])
    assert fast is None
    keys = [row["key"] for row in slow if row["topic"] == "B"]
    assert b"u5" in keys and b"u6" in keys  # the good records still flow


def test_a_bad_record_gets_its_processing_log_entry(metastore: Metastore) -> None:
    query = plan(metastore, QUERIES[0])
    fast, slow = both_ways(query, [view(0), (b"u2", b"not json", BASE)])
    assert fast is None
    assert [row["topic"] for row in slow] == ["A", "log"]


@pytest.mark.parametrize(
    "text",
    [
        "CREATE TABLE t AS SELECT id, name FROM users EMIT CHANGES;",
        "CREATE STREAM e AS SELECT user_id, UCASE(page) AS p FROM views EMIT CHANGES;",
        "CREATE STREAM f AS SELECT user_id, duration / 2 AS h FROM views EMIT CHANGES;",
        "CREATE STREAM i AS SELECT user_id, score * 2.5 AS s FROM views EMIT CHANGES;",
        "CREATE STREAM h WITH (VALUE_FORMAT='DELIMITED') AS SELECT user_id, page FROM views "
        "EMIT CHANGES;",
    ],
)
def test_other_shapes_are_run_record_at_a_time(metastore: Metastore, text: str) -> None:
    assert compile_stateless(plan(metastore, text)) is None
