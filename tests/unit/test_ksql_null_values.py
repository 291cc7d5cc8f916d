"""A stream record whose value is null, record at a time (``strom.ksql.readers`` and
``strom.ksql.operators``): read as a null row (no bytes in any format; JSON's ``null``
for columns in an object), passed on as a null value by a projection without WHERE,
keyed by what the source's key alone gives (a PARTITION BY of value columns or ROWTIME:
a null key), dropped by WHERE, table functions, GROUP BY and joins; a table's stays a
tombstone. No broker."""

from __future__ import annotations

from typing import Any

import pytest

from strom.ksql import statements as st
from strom.ksql.metastore import DataSource, Metastore
from strom.ksql.operators import Change, Operators
from strom.ksql.parser import parse_statement
from strom.ksql.planner import SinkRequest, plan_query
from strom.ksql.readers import RecordReader, Row, SourceRecord


@pytest.fixture(scope="module")
def metastore() -> Metastore:
    store = Metastore()
    for text in (
        "CREATE STREAM s (k BIGINT KEY, name STRING, v BIGINT, tags ARRAY<STRING>) "
        "WITH (kafka_topic='s', value_format='JSON');",
        "CREATE STREAM d (k BIGINT KEY, id BIGINT, name STRING) "
        "WITH (kafka_topic='d', value_format='DELIMITED');",
        "CREATE STREAM one (k BIGINT KEY, v BIGINT) "
        "WITH (kafka_topic='one', value_format='KAFKA');",
        "CREATE STREAM bare (v BIGINT) "
        "WITH (kafka_topic='bare', value_format='JSON', wrap_single_value=false);",
        "CREATE TABLE t (k BIGINT PRIMARY KEY, label STRING) "
        "WITH (kafka_topic='t', key_format='KAFKA', value_format='JSON');",
    ):
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateSource)
        store.put_source(store.source_from_statement(statement, text))
    return store


def source(metastore: Metastore, name: str) -> DataSource:
    found = metastore.source(name)
    assert found is not None
    return found


def operators(metastore: Metastore, text: str) -> Operators:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
    return Operators(plan_query(statement.query, metastore, request, text))


def read(metastore: Metastore, name: str, key: int, value: bytes | None, ts: int = 5) -> Row:
    record = SourceRecord(name.lower(), 0, 3, ts, key.to_bytes(8, "big", signed=True), value)
    return RecordReader(source(metastore, name)).read(record)


def out(changes: list[Change]) -> list[tuple[Any, Any, int]]:
    return [(c.key, c.value, c.timestamp) for c in changes]


def test_a_null_value_reads_as_a_null_row_in_every_format(metastore: Metastore) -> None:
    for name in ("S", "D", "ONE"):
        row = read(metastore, name, 7, None)
        assert row.tombstone and row.columns["K"] == 7 and row.columns["ROWTIME"] == 5
    assert read(metastore, "S", 7, b"null").tombstone  # JSON's null for an object
    assert not read(metastore, "S", 7, b"{}").tombstone  # an object: columns null
    lone = read(metastore, "BARE", 7, b"null")  # a single value unwrapped: a null column
    assert not lone.tombstone and lone.columns["V"] is None
    assert read(metastore, "T", 7, None).tombstone  # a table's delete, as before


def test_a_projection_passes_the_null_value_on_and_where_drops_it(metastore: Metastore) -> None:
    null_row = read(metastore, "S", 7, None)
    clone = operators(metastore, "CREATE STREAM c1 AS SELECT * FROM s;")
    assert out(clone.stateless(null_row)) == [({"K": 7}, None, 5)]
    renamed = operators(metastore, "CREATE STREAM c2 AS SELECT k AS id, UCASE(name) AS n FROM s;")
    assert out(renamed.stateless(null_row)) == [({"ID": 7}, None, 5)]
    filtered = operators(metastore, "CREATE STREAM c3 AS SELECT * FROM s WHERE name IS NULL;")
    assert filtered.stateless(null_row) == []
    kept = read(metastore, "S", 8, b'{"name": null}')
    assert out(filtered.stateless(kept)) == [({"K": 8}, {"NAME": None, "V": None, "TAGS": None}, 5)]
    exploded = operators(metastore, "CREATE STREAM c4 AS SELECT k, EXPLODE(tags) AS tag FROM s;")
    assert exploded.stateless(null_row) == []


@pytest.mark.parametrize(
    ("partition_by", "key"),
    [
        ("name", {"NAME": None}),  # a value column: null
        ("(name IS NULL)", {"KSQL_COL_0": None}),  # not true: the row is not there
        ("k + 2", {"KSQL_COL_0": 9}),  # the key alone: evaluated on the key
        ("ABS(k)", {"KSQL_COL_0": 7}),
        ("k", {"K": 7}),
    ],
)
def test_partition_by_keys_a_null_value_by_the_source_key_alone(
    metastore: Metastore, partition_by: str, key: dict[str, Any]
) -> None:
    query = operators(  # JSON keys: KAFKA holds no BOOLEAN key (ksqlDB refuses it)
        metastore,
        f"CREATE STREAM p WITH (key_format='JSON') AS SELECT * FROM s PARTITION BY {partition_by};",
    )
    assert out(query.stateless(read(metastore, "S", 7, None))) == [(key, None, 5)]


def test_several_partition_by_columns_and_rowtime(metastore: Metastore) -> None:
    query = operators(  # JSON keys: KAFKA holds one key column (ksqlDB refuses two)
        metastore,
        "CREATE STREAM p2 WITH (key_format='JSON') AS SELECT * FROM s PARTITION BY k, ROWTIME;",
    )
    [change] = query.stateless(read(metastore, "S", 7, None))
    assert (list(change.key.values()), change.value) == ([7, None], None)


def test_group_by_and_joins_drop_a_null_value(metastore: Metastore) -> None:
    null_row = read(metastore, "S", 7, None)
    counted = operators(
        metastore, "CREATE TABLE n AS SELECT k, COUNT(*) AS c FROM s GROUP BY k EMIT CHANGES;"
    )
    assert counted.group(null_row) is None
    assert counted.group(read(metastore, "S", 7, b"{}")) is not None
    enriched = operators(
        metastore, "CREATE STREAM e AS SELECT s.k, name, label FROM s LEFT JOIN t ON s.k = t.k;"
    )
    assert enriched.join_step({}, "left", null_row, 5) == []
    assert enriched.join_step({}, "left", read(metastore, "S", 7, b"{}"), 5) != []
    paired = operators(
        metastore,
        "CREATE STREAM j AS SELECT ROWKEY, a.name, b.id FROM s a FULL OUTER JOIN d b "
        "WITHIN 1 SECOND GRACE PERIOD 0 SECONDS ON a.k = b.k;",
    )
    state: dict[str, Any] = {}
    assert paired.join_step(state, "left", null_row, 5) == []
    assert paired.join_step(state, "right", read(metastore, "D", 7, None), 5) == []
    assert state == {}  # nothing kept to join or to close later


def test_a_null_value_under_a_sinks_timestamp_column_takes_the_stream_time(
    metastore: Metastore,
) -> None:
    """ksqlDB's sink stamps a record with no value to take its TIMESTAMP column from with
    the task's stream time (its source partition's, this record's included): on Spark,
    the record path's over the task's records of the micro-batch."""
    import pyarrow as pa

    from strom.ksql import runtime

    text = "CREATE STREAM stamped WITH (timestamp='v') AS SELECT k, name, v FROM s;"
    ops = operators(metastore, text)
    [change] = ops.stateless(read(metastore, "S", 2, None, ts=10), stream_time=50)
    assert (change.value, change.timestamp) == (None, 50)
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
    plan = plan_query(statement.query, metastore, request, text)
    spec = runtime.QuerySpec("stamped", plan, {"bootstrap.servers": "x"}, None, {}, "log",
                             False, "x", 500)  # fmt: skip
    records = [  # (partition, key, value, timestamp)
        (0, 1, b'{"NAME": "a", "V": 100}', 50),
        (1, 3, b'{"NAME": "b", "V": 7}', 70),
        (0, 2, None, 10),  # partition 0's stream time: 50
        (1, 4, None, 20),  # partition 1's: 70
    ]
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([k.to_bytes(8, "big") for _, k, _, _ in records], pa.binary()),
            pa.array([v for _, _, v, _ in records], pa.binary()),
            pa.array(["s"] * len(records), pa.string()),
            pa.array([p for p, _, _, _ in records], pa.int32()),
            pa.array(range(len(records)), pa.int64()),
            pa.array([t * 1000 for *_, t in records], pa.timestamp("us", tz="UTC")),
            pa.array([0] * len(records), pa.int32()),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )
    written = pa.Table.from_batches(list(runtime.run_stateless(spec, iter([batch]))))
    assert written.column("timestamp").to_pylist() == [100, 7, 50, 70]
