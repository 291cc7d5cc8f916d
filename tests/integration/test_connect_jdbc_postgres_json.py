"""The JDBC sink's PostgreSQL path in which the database reads JsonConverter payloads itself:
the sink's writer fed the Arrow batches a micro-batch hands it (no Spark, no broker),
against a real PostgreSQL. An upsert keeps each key's last record of the batch, in offset
order, and skips null values; text with JSON escapes, COPY's special characters and
non-ASCII letters, floats, booleans and nulls arrive as they were sent, whether Arrow's JSON
reader or (for payloads it does not take) PostgreSQL reads the payloads; insert with
exactly.once.delivery writes a replayed batch once; a batch whose records carry two
schemas, a key its converter refuses and a missing key field are handled as record by
record decoding handles them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from postgres_process import PostgresProcess

from strom.connect.api import ConnectException
from strom.connect.connectors.jdbc_sink import PartitionWriter, SinkSettings
from strom.connect.converters import JsonConverter, StringConverter

FIELDS = [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "name", "type": "string", "optional": True},
    {"field": "price", "type": "float64", "optional": True},
    {"field": "active", "type": "boolean", "optional": True},
]
SCHEMA = {"type": "struct", "name": "item", "optional": False, "fields": FIELDS}
WIDER = {**SCHEMA, "fields": [*FIELDS, {"field": "note", "type": "string", "optional": True}]}


def envelope(payload: dict[str, Any] | None, schema: dict[str, Any] = SCHEMA) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":"),
                      ensure_ascii=False).encode()  # fmt: skip


def batch(values: list[bytes | None], first_offset: int = 0, keys: list[bytes | None] | None = None,
          topic: str = "items", partition: int = 0) -> pa.RecordBatch:  # fmt: skip
    count = len(values)
    return pa.RecordBatch.from_pydict({
        "key": pa.array(keys or [None] * count, pa.binary()),
        "value": pa.array(values, pa.binary()), "topic": [topic] * count,
        "partition": pa.array([partition] * count, pa.int32()),
        "offset": pa.array(range(first_offset, first_offset + count), pa.int64()),
    })  # fmt: skip


def writer(postgres: PostgresProcess, table: str, **extra: str) -> PartitionWriter:
    props = {"name": f"sink-{table}", "connection.url": postgres.jdbc_url,
             "connection.user": "postgres", "table.name.format": table,
             "insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id",
             "auto.create": "true", **extra}  # fmt: skip
    keys, values = StringConverter(), JsonConverter()
    keys.configure({}, is_key=True)
    values.configure({"schemas.enable": "true"}, is_key=False)
    return PartitionWriter(SinkSettings.of(props), keys, values)


def write(sink: PartitionWriter, *batches: pa.RecordBatch) -> None:
    list(sink(iter(batches)))


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresProcess]:
    """A PostgreSQL of this module's own: the Connect stack's (``jdbc_postgres``) is
    stopped once its modules are done, which may be before this one runs."""
    process = PostgresProcess().start()
    yield process
    process.stop()


TRICKY = 'tab\tnewline\nback\\slash "quoted" \u00e9t\u00e9 \u2603'


def test_upsert_keeps_each_keys_last_record(postgres: PostgresProcess) -> None:
    sink = writer(postgres, "json_upsert")
    first = batch([
        envelope({"id": 1, "name": "first", "price": 1.5, "active": True}),
        envelope({"id": 2, "name": TRICKY, "price": None, "active": False}),
        envelope({"id": 1, "name": "second", "price": 0.1, "active": None}),
        None,  # a tombstone: delete.enabled is off, nothing written
        envelope(None),  # a null payload: the same
        envelope({"id": 3, "name": None, "price": -2e-7, "active": True}),
        envelope({"id": 1, "name": "third", "price": 1e300, "active": False}),
    ])  # fmt: skip
    assert sink.payloads_of([first]) is not None  # the database reads these payloads
    write(sink, first)
    rows = postgres.query("SELECT id, name, price, active FROM json_upsert ORDER BY id")
    assert rows == [(1, "third", 1e300, False), (2, TRICKY, None, False),
                    (3, None, -2e-7, True)]  # fmt: skip
    write(sink, batch([envelope({"id": 2, "name": "again", "price": 2.0, "active": True})], 7))
    assert postgres.query("SELECT name, price FROM json_upsert WHERE id = 2") == [("again", 2.0)]
    assert postgres.query("SELECT count(*) FROM json_upsert") == [(3,)]
    # payloads Arrow's JSON reader does not take (a number written as a string, a payload
    # over two lines): PostgreSQL reads them, with the same outcome
    odd = [envelope({"id": 4, "name": "four", "price": "2.5", "active": None}),
           envelope({"id": 3, "name": "three", "price": 3.0, "active": True}),
           envelope({"id": 4, "name": "four again", "price": "4.5", "active": None})]  # fmt: skip
    split = envelope({"id": 5, "name": "five", "price": 5.0, "active": False}).replace(
        b',"name"', b',\n"name"'
    )
    write(sink, batch(odd, 8), batch([split], 11))
    rows = postgres.query("SELECT id, name, price FROM json_upsert WHERE id >= 3 ORDER BY id")
    assert rows == [(3, "three", 3.0), (4, "four again", 4.5), (5, "five", 5.0)]


def test_insert_exactly_once_writes_a_replayed_batch_once(postgres: PostgresProcess) -> None:
    sink = writer(postgres, "json_once", **{"insert.mode": "insert", "pk.mode": "none",
                                            "exactly.once.delivery": "true"})  # fmt: skip
    values = [envelope({"id": i, "name": f"n{i}", "price": i / 2, "active": i % 2 == 0})
              for i in range(6)]  # fmt: skip
    write(sink, batch(values[:4]))
    write(sink, batch(values[:4]), batch(values[4:], 4))  # replayed, then two more
    write(sink, batch(values[2:], 2))
    ids = [row[0] for row in postgres.query("SELECT id FROM json_once ORDER BY id")]
    assert ids == list(range(6))
    stored = postgres.query(
        'SELECT "offset" FROM __strom_connect_offsets WHERE connector = %s', "sink-json_once"
    )
    assert stored == [(6,)]


def test_two_schemas_in_a_batch_are_decoded_record_by_record(postgres: PostgresProcess) -> None:
    sink = writer(postgres, "json_evolve", **{"auto.evolve": "true"})
    mixed = batch([envelope({"id": 1, "name": "a", "price": 1.0, "active": True}),
                   envelope({"id": 1, "name": "b", "price": 2.0, "active": True,
                             "note": "wider"}, WIDER)])  # fmt: skip
    assert sink.payloads_of([mixed]) is None
    write(sink, mixed)
    assert postgres.query("SELECT id, name, note FROM json_evolve") == [(1, "b", "wider")]
    # the wider schema alone goes to the database's reading, into the evolved table
    wider = batch([envelope({"id": 2, "name": "c", "price": 3.0, "active": False,
                             "note": TRICKY}, WIDER)], 2)  # fmt: skip
    assert sink.payloads_of([wider]) is not None
    write(sink, wider)
    assert postgres.query("SELECT note FROM json_evolve WHERE id = 2") == [(TRICKY,)]


def test_bad_keys_and_missing_key_fields_name_the_record(postgres: PostgresProcess) -> None:
    sink = writer(postgres, "json_bad")
    good = envelope({"id": 1, "name": "a", "price": 1.0, "active": True})
    with pytest.raises(ConnectException, match=r"items-0 at offset 11: Failed to deserialize"):
        write(sink, batch([good, good], 10, keys=[b"fine", b"\xff\xfe"]))
    keyless = writer(postgres, "json_bad", **{"pk.fields": "code"})
    with pytest.raises(ConnectException, match="PK field code is not in the record value"):
        write(keyless, batch([good]))
    assert postgres.query("SELECT to_regclass('json_bad')") == [(None,)]


def test_each_topic_of_a_batch_goes_to_its_table(postgres: PostgresProcess) -> None:
    """One Spark partition's records of two topics (``${topic}`` in the table name) each
    land in their own table, and a payload with a carriage return between its tokens is
    read all the same (by PostgreSQL, as Arrow's reader takes one document a line)."""
    sink = writer(postgres, "multi_${topic}")
    first = [envelope({"id": 1, "name": "a1", "price": 1.0, "active": True}),
             envelope({"id": 2, "name": "a2", "price": 2.0, "active": None})]  # fmt: skip
    other = [envelope({"id": 1, "name": "b1", "price": None, "active": False})]
    both = (batch(first, topic="ta"), batch(other, topic="tb"))
    assert sink.payloads_of(list(both)) is not None
    write(sink, *both)
    assert postgres.query("SELECT id, name FROM multi_ta ORDER BY id") == [(1, "a1"), (2, "a2")]
    assert postgres.query("SELECT id, name, active FROM multi_tb") == [(1, "b1", False)]
    returned = envelope({"id": 2, "name": "a2 again", "price": 2.5, "active": True}).replace(
        b',"name"', b',\r"name"'
    )
    write(sink, batch([returned], 2, topic="ta"))
    assert postgres.query("SELECT name, price FROM multi_ta WHERE id = 2") == [("a2 again", 2.5)]
    assert postgres.query("SELECT count(*) FROM multi_tb") == [(1,)]
