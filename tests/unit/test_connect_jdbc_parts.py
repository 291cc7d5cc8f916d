"""The JDBC connectors' parts that need no Spark, broker or server: JDBC URLs, the sink's
writer on a SQLite file (auto.create, upsert of each key's last record, tombstones
deleting, a replayed batch leaving the table as once, a schemaless value refused as
Confluent refuses it) fed the Arrow batches a micro-batch hands it, and the connectors'
validation naming the key."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from strom.connect.api import ConnectException
from strom.connect.connectors.jdbc_dialects import JdbcUrlError, parse_url
from strom.connect.connectors.jdbc_sink import JdbcSinkConnector, PartitionWriter, SinkSettings
from strom.connect.connectors.jdbc_source import JdbcSourceConnector
from strom.connect.converters import JsonConverter, StringConverter

SCHEMA = {
    "type": "struct",
    "name": "account",
    "optional": False,
    "fields": [
        {"field": "id", "type": "string", "optional": False},
        {"field": "amount", "type": "int64", "optional": True},
        {"field": "opened", "type": "int64", "optional": True,
         "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
    ],
}  # fmt: skip


def envelope(key: str, amount: int) -> bytes:
    payload = {"id": key, "amount": amount, "opened": 1767323045000}
    return json.dumps({"schema": SCHEMA, "payload": payload}, separators=(",", ":")).encode()


def batch(records: list[tuple[str, bytes | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "key": [k.encode() for k, _ in records],
            "value": [v for _, v in records],
            "topic": ["accounts"] * len(records),
            "partition": [0] * len(records),
            "offset": list(range(len(records))),
        }
    )


def writer(path: Path, **extra: str) -> PartitionWriter:
    settings = SinkSettings.of(
        {
            "connection.url": f"jdbc:sqlite:{path}",
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "pk.fields": "id",
            "auto.create": "true",
            "delete.enabled": "true",
            **extra,
        }
    )
    key_converter = StringConverter()
    key_converter.configure({}, is_key=True)
    value_converter = JsonConverter()
    value_converter.configure({"schemas.enable": "true"}, is_key=False)
    return PartitionWriter(settings, key_converter, value_converter)


def table(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as connection:
        return connection.execute("SELECT id, amount FROM accounts ORDER BY id").fetchall()


def test_sqlite_upsert_delete_and_replay(tmp_path: Path) -> None:
    path = tmp_path / "sink.db"
    records: list[tuple[str, bytes | None]] = [(f"k{i}", envelope(f"k{i}", i)) for i in range(5)]
    records += [("k1", envelope("k1", 100)), ("k3", None), ("k4", envelope("k4", 40)), ("k4", None)]
    list(writer(path)([batch(records)]))
    expected = [("k0", 0), ("k1", 100), ("k2", 2)]
    assert table(path) == expected
    list(writer(path)([batch(records)]))  # the same micro-batch again
    assert table(path) == expected


def test_schemaless_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConnectException, match="requires records with a non-null Struct value"):
        list(writer(tmp_path / "x.db")([batch([("k", b'{"schema":null,"payload":{"id":1}}')])]))


def test_jdbc_urls() -> None:
    database = parse_url("jdbc:postgresql://db.example:5433/shop?user=u&password=p")
    assert (database.host, database.port, database.name, database.user) == (
        "db.example", 5433, "shop", "u",
    )  # fmt: skip
    assert parse_url("jdbc:mariadb://h/d").port == 3306
    assert parse_url("jdbc:sqlite:/tmp/x.db").name == "/tmp/x.db"
    with pytest.raises(JdbcUrlError, match="no dialect"):
        parse_url("jdbc:oracle:thin:@h:1521:x")


def errors(connector: Any, props: dict[str, str]) -> dict[str, list[str]]:
    return {k: v.errors for k, v in connector.validate(props).items() if v.errors}


def test_validation_names_the_key() -> None:
    sink = {"connection.url": "jdbc:postgresql://h/d", "topics": "t"}
    assert set(errors(JdbcSinkConnector(), {**sink, "delete.enabled": "true"})) == {
        "delete.enabled"
    }
    assert set(errors(JdbcSinkConnector(), {**sink, "insert.mode": "upsert"})) == {"pk.mode"}
    assert errors(JdbcSinkConnector(), {**sink, "connection.url": "jdbc:mysql://h/d"}) == {}
    assert set(errors(JdbcSinkConnector(), {**sink, "connection.url": "jdbc:db2://h/d"})) == {
        "connection.url"
    }
    source = {"connection.url": "jdbc:sqlite:/tmp/x.db", "topic.prefix": "p"}
    assert set(errors(JdbcSourceConnector(), {**source, "mode": "incrementing"})) == {
        "incrementing.column.name"
    }
    assert set(errors(JdbcSourceConnector(), source)) == {"mode"}
