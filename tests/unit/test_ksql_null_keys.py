"""A record with no key (``strom.ksql.readers``, ``strom.ksql.operators`` and a query's
task in ``strom.ksql.runtime``), as ksqlDB's query-validation cases (multi-col-keys.json,
table.json) expect: a stream's row has its key columns null and a projection that passes
the key on writes no key (not an object of nulls), while a PARTITION BY builds its own
key; a table's record without a key is dropped quietly, as Kafka Streams' table source
drops it. No broker."""

from __future__ import annotations

from typing import Any

import pytest

from strom.ksql import statements as st
from strom.ksql.metastore import Metastore
from strom.ksql.operators import Operators
from strom.ksql.parser import parse_statement
from strom.ksql.planner import SinkRequest, plan_query
from strom.ksql.readers import RecordError, RecordReader, RecordWriter, Row, SourceRecord


@pytest.fixture(scope="module")
def metastore() -> Metastore:
    store = Metastore()
    for text in (
        "CREATE STREAM ms (k INT KEY, k2 INT KEY, v INT) WITH (kafka_topic='ms', format='JSON');",
        "CREATE TABLE mt (k INT PRIMARY KEY, k2 INT PRIMARY KEY, v INT) "
        "WITH (kafka_topic='mt', format='JSON');",
        "CREATE TABLE st (k STRING PRIMARY KEY, id BIGINT) "
        "WITH (kafka_topic='st', value_format='DELIMITED');",
        "CREATE STREAM ds (k1 STRING KEY, k2 STRING KEY, v INT) "
        "WITH (kafka_topic='ds', format='DELIMITED');",
    ):
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateSource)
        store.put_source(store.source_from_statement(statement, text))
    return store


def read(metastore: Metastore, name: str, key: bytes | None, value: bytes | None) -> Row:
    found = metastore.source(name)
    assert found is not None
    return RecordReader(found).read(SourceRecord(name.lower(), 0, 3, 5, key, value))


def operators(metastore: Metastore, text: str) -> Operators:
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
    return Operators(plan_query(statement.query, metastore, request, text))


def test_a_stream_record_without_key_reads_as_null_key_columns(metastore: Metastore) -> None:
    for key in (None, b"null"):  # no bytes, or JSON's null for the key's object
        row = read(metastore, "MS", key, b'{"V": 0}')
        assert row.keyless and (row.columns["K"], row.columns["K2"], row.columns["V"]) == (
            None,
            None,
            0,
        )
    nulls = read(metastore, "MS", b'{"K": null, "K2": null}', b'{"V": 0}')
    assert not nulls.keyless and (nulls.columns["K"], nulls.columns["K2"]) == (None, None)
    assert read(metastore, "DS", None, b"0").keyless
    assert not read(metastore, "DS", b",", b"0").keyless


def test_a_projection_passes_a_null_key_on_as_no_key(metastore: Metastore) -> None:
    keyless = read(metastore, "MS", None, b'{"V": 0}')
    keyed = read(metastore, "MS", b'{"K": null, "K2": 2}', b'{"V": 0}')
    for text in (
        "CREATE STREAM o1 AS SELECT * FROM ms;",
        "CREATE STREAM o2 AS SELECT k, k2, v * 2 AS w FROM ms WHERE v = 0;",
    ):
        query = operators(metastore, text)
        [change] = query.stateless(keyless)
        assert change.keyless and change.key == {"K": None, "K2": None}
        [change] = query.stateless(keyed)
        assert not change.keyless and change.key == {"K": None, "K2": 2}
    # a null value with no key: a null row, still without a key
    [change] = operators(metastore, "CREATE STREAM o3 AS SELECT * FROM ms;").stateless(
        read(metastore, "MS", None, None)
    )
    assert change.keyless and change.value is None
    # PARTITION BY builds its key from the columns: an object of nulls, as ksqlDB's
    partitioned = operators(metastore, "CREATE STREAM o4 AS SELECT * FROM ms PARTITION BY k2, k;")
    [change] = partitioned.stateless(keyless)
    assert not change.keyless
    sink = partitioned.plan.sink
    assert sink is not None
    assert RecordWriter(sink).key(change.key, None) == b'{"K2":null,"K":null}'


def test_a_table_record_without_key_is_dropped_quietly(metastore: Metastore) -> None:
    for name, key, value in (
        ("MT", None, b'{"V": 0}'),
        ("MT", b"null", b'{"V": 0}'),
        ("MT", None, None),  # a tombstone without a key too
        ("ST", None, b"0"),  # one key column: the same
    ):
        with pytest.raises(RecordError) as caught:
            read(metastore, name, key, value)
        assert caught.value.quiet and caught.value.target == "key"
    row = read(metastore, "MT", b'{"K": null, "K2": 2}', b'{"V": 0}')
    assert (row.columns["K"], row.columns["K2"], row.keyless) == (None, 2, False)
    assert read(metastore, "ST", b"1", b"0").columns["K"] == "1"
    with pytest.raises(RecordError) as bad:  # a key that does not read is logged, as before
        read(metastore, "MT", b"[", b'{"V": 0}')
    assert not bad.value.quiet


def _run(metastore: Metastore, text: str, records: list[tuple[bytes | None, bytes | None]]) -> Any:
    """The records through a persistent query's task, record at a time (Spark's
    ``run_stateless`` without Spark): its output rows (topic, key, value)."""
    import pyarrow as pa

    from strom.ksql import runtime

    statement = parse_statement(text)
    assert isinstance(statement, st.CreateAsSelect)
    request = SinkRequest(statement.name, statement.kind, statement.properties, None, 1)
    query = plan_query(statement.query, metastore, request, text)
    spec = runtime.QuerySpec(
        f"q{id(query)}", query, {"bootstrap.servers": "x"}, None, {}, "log", False, "earliest", 1
    )
    n = len(records)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in records], pa.binary()),
            pa.array([r[1] for r in records], pa.binary()),
            pa.array([query.source.topic] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([5000] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )
    out = [r for b in runtime.run_stateless(spec, iter([batch])) for r in b.to_pylist()]
    return [(r["topic"], r["key"], r["value"]) for r in out]


def test_a_querys_task_writes_no_key_and_skips_a_keyless_table_record(
    metastore: Metastore,
) -> None:
    written = _run(
        metastore,
        "CREATE STREAM r1 AS SELECT * FROM ms;",
        [(b'{"K": 1, "K2": 2}', b'{"V": 0}'), (None, b'{"V": 1}'), (b"[", b'{"V": 2}')],
    )
    assert written[:2] == [("R1", b'{"K":1,"K2":2}', b'{"V":0}'), ("R1", None, b'{"V":1}')]
    assert [topic for topic, _, _ in written[2:]] == ["log"]  # a bad key is logged
    written = _run(
        metastore,
        "CREATE TABLE r2 AS SELECT * FROM mt;",
        [(None, b'{"V": 0}'), (b'{"K": null, "K2": 2}', b'{"V": 1}'), (None, None)],
    )
    assert written == [("R2", b'{"K":null,"K2":2}', b'{"V":1}')]  # nothing logged
