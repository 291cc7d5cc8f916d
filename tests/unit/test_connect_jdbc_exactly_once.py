"""The JDBC sink's exactly.once.delivery without Spark, a broker or a server: its writer on
a SQLite file fed the Arrow batches a micro-batch hands it, in insert mode with no key (a
record written twice would be two rows): a batch replayed whole or in part writes each
record once, the next offsets are stored per topic-partition and connector in
__strom_connect_offsets, read back as the task's stored offsets, and another writer having
moved an offset meanwhile is an error. Also the MariaDB dialect's parts that need no
server (a key string's column type, the URL Spark's JDBC reader is given)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

from strom.connect.api import ConnectException
from strom.connect.connectors.jdbc_dialects import parse_url
from strom.connect.connectors.jdbc_sink import (
    JdbcSinkTask,
    OffsetsTable,
    PartitionWriter,
    SinkSettings,
)
from strom.connect.converters import JsonConverter, StringConverter
from strom.connect.data import Schema

SCHEMA = {"type": "struct", "name": "event", "optional": False, "fields": [
    {"field": "id", "type": "int64", "optional": False},
]}  # fmt: skip


def batch(partition: int, offsets: range) -> pa.RecordBatch:
    values = [json.dumps({"schema": SCHEMA, "payload": {"id": partition * 1000 + o}}).encode()
              for o in offsets]  # fmt: skip
    return pa.RecordBatch.from_pydict({
        "key": [None] * len(values), "value": values, "topic": ["events"] * len(values),
        "partition": [partition] * len(values), "offset": list(offsets),
    })  # fmt: skip


def props(path: Path) -> dict[str, str]:
    return {"name": "once", "connection.url": f"jdbc:sqlite:{path}", "insert.mode": "insert",
            "auto.create": "true", "exactly.once.delivery": "true", "topics": "events"}  # fmt: skip


def writer(path: Path) -> PartitionWriter:
    key_converter = StringConverter()
    key_converter.configure({}, is_key=True)
    value_converter = JsonConverter()
    value_converter.configure({"schemas.enable": "true"}, is_key=False)
    return PartitionWriter(SinkSettings.of(props(path)), key_converter, value_converter)


def ids(path: Path) -> list[int]:
    with sqlite3.connect(path) as connection:
        return [row[0] for row in connection.execute("SELECT id FROM events ORDER BY id")]


def test_replayed_batches_are_written_once(tmp_path: Path) -> None:
    path = tmp_path / "sink.db"
    list(writer(path)([batch(0, range(0, 10))]))
    list(writer(path)([batch(1, range(0, 5))]))
    list(writer(path)([batch(0, range(0, 10))]))  # replayed whole
    list(writer(path)([batch(0, range(5, 15))]))  # replayed in part, then new records
    assert ids(path) == [*range(0, 15), *range(1000, 1005)]
    with sqlite3.connect(path) as connection:
        stored = connection.execute(
            'SELECT connector, topic, "partition", "offset" FROM __strom_connect_offsets '
            'ORDER BY "partition"'
        ).fetchall()
    assert stored == [("once", "events", 0, 15), ("once", "events", 1, 5)]
    task = JdbcSinkTask()
    task.start(props(path))
    assert task.stored_offsets(["events"]) == {"events": {"0": 15, "1": 5}}
    assert task.stored_offsets(["other"]) == {}


def test_an_offset_moved_by_another_writer_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "sink.db"
    list(writer(path)([batch(0, range(0, 3))]))
    offsets = OffsetsTable(SinkSettings.of(props(path)))
    connection = sqlite3.connect(path)
    try:
        offsets.store(connection, "events", 0, 3, 10)  # as another writer would
        connection.commit()
        with pytest.raises(ConnectException, match="moved while this task wrote"):
            offsets.store(connection, "events", 0, 3, 20)
    finally:
        connection.close()


def test_mariadb_dialect_parts() -> None:
    database = parse_url("jdbc:mariadb://db:3307/shop", "root", "secret")
    assert (database.kind, database.host, database.port, database.name) == (
        "mysql", "db", 3307, "shop"
    )  # fmt: skip
    assert database.spark_options()["url"] == "jdbc:mysql://db:3307/shop?permitMysqlScheme"
    assert database.column_type(Schema("string"), key=True) == "VARCHAR(256)"
    assert database.column_type(Schema("string")) == "TEXT"
    assert database.quote("partition") == "`partition`"
    assert parse_url("jdbc:mysql://db/shop").spark_options()["url"] == "jdbc:mysql://db/shop"
