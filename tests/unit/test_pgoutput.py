"""The pgoutput decoder and the replication protocol's frames on bytes built here from the
protocol's description (PostgreSQL's "Streaming Replication Protocol" and "Logical
Replication Message Formats" chapters), not with the decoder's own encoders; and the parts
of the change capture that need no server: Debezium's values of PostgreSQL's text, the
resume rule over stored offsets, and the include/exclude lists."""

from __future__ import annotations

import base64
import json
import struct
from decimal import Decimal

import pytest

from strom.connect.connectors.postgres_cdc import ResumePoint, TableFilter, snapshot_completed
from strom.connect.connectors.postgres_cdc_decoder import (
    Begin,
    Column,
    Commit,
    Delete,
    Insert,
    Keepalive,
    LogicalMessage,
    Origin,
    ProtocolError,
    Relation,
    RelationColumn,
    Truncate,
    TypeMessage,
    Update,
    XLogData,
    decode_copy_message,
    decode_message,
    encode_standby_status,
    epoch_micros,
    lsn_text,
    parse_lsn,
)
from strom.connect.connectors.postgres_cdc_schema import (
    UNCHANGED,
    ColumnInfo,
    EventSource,
    TableInfo,
    TableSchema,
    ValueSettings,
)
from strom.connect.converters import JsonConverter


def cstring(text: str) -> bytes:
    return text.encode() + b"\0"


def tuple_data(*columns: bytes | None | str) -> bytes:
    """TupleData: Int16 count, then per column 'n', 'u', or 't' Int32 length and bytes."""
    out = struct.pack("!h", len(columns))
    for column in columns:
        if column is None:
            out += b"n"
        elif column == "u":
            out += b"u"
        else:
            assert isinstance(column, bytes)
            out += b"t" + struct.pack("!i", len(column)) + column
    return out


def test_xlog_data_and_keepalive_frames() -> None:
    payload = b"B" + struct.pack("!QqI", 0x16B374D848, 1_000_000, 733)
    frame = b"w" + struct.pack("!QQq", 0x1505598, 0x1505740, 785_000_000_000_000) + payload
    decoded = decode_copy_message(frame)
    assert decoded == XLogData(0x1505598, 0x1505740, 785_000_000_000_000, payload)
    assert decode_copy_message(b"k" + struct.pack("!QqB", 0x1505740, 12, 1)) == Keepalive(
        0x1505740, 12, True
    )
    with pytest.raises(ProtocolError):
        decode_copy_message(b"k" + struct.pack("!Qq", 1, 2))  # no reply flag
    with pytest.raises(ProtocolError):
        decode_copy_message(b"x")


def test_standby_status_update_layout() -> None:
    message = encode_standby_status(0x10, 0x20, 0x30, 99, reply_requested=True)
    # Byte1('r'), Int64 written, Int64 flushed, Int64 applied, Int64 clock, Byte1 reply
    assert message == b"r" + struct.pack("!QQQqB", 0x10, 0x20, 0x30, 99, 1)


def test_lsns_and_clocks() -> None:
    assert lsn_text(0x16B374D848) == "16/B374D848"
    assert parse_lsn("16/B374D848") == 0x16B374D848
    assert parse_lsn("0/0") == 0
    with pytest.raises(ProtocolError):
        parse_lsn("16B374D848")
    assert epoch_micros(0) == 946_684_800_000_000  # 2000-01-01 in microseconds since 1970


def test_begin_commit_origin_type() -> None:
    assert decode_message(b"B" + struct.pack("!QqI", 0x1505710, 5, 4294967295)) == Begin(
        0x1505710, 5, 4294967295
    )
    commit = b"C" + struct.pack("!bQQq", 0, 0x1505710, 0x1505740, 5)
    assert decode_message(commit) == Commit(0, 0x1505710, 0x1505740, 5)
    origin = b"O" + struct.pack("!Q", 0x99) + cstring("node_a")
    assert decode_message(origin) == Origin(0x99, "node_a")
    type_message = b"Y" + struct.pack("!I", 16400) + cstring("public") + cstring("mood")
    assert decode_message(type_message) == TypeMessage(16400, "public", "mood")


def test_relation() -> None:
    message = (
        b"R" + struct.pack("!I", 16384) + cstring("public") + cstring("t") + b"d"
        + struct.pack("!h", 2)
        + struct.pack("!b", 1) + cstring("id") + struct.pack("!Ii", 23, -1)
        + struct.pack("!b", 0) + cstring("price") + struct.pack("!Ii", 1700, (10 << 16) + 2 + 4)
    )  # fmt: skip
    assert decode_message(message) == Relation(
        16384,
        "public",
        "t",
        "d",
        (RelationColumn("id", 23, -1, True), RelationColumn("price", 1700, (10 << 16) + 6, False)),
    )


def test_insert_update_delete_truncate() -> None:
    insert = b"I" + struct.pack("!I", 16384) + b"N" + tuple_data(b"1", None, "u")
    assert decode_message(insert) == Insert(16384, (Column("t", b"1"), Column("n"), Column("u")))
    plain_update = b"U" + struct.pack("!I", 7) + b"N" + tuple_data(b"2")
    assert decode_message(plain_update) == Update(7, (Column("t", b"2"),))
    key_update = b"U" + struct.pack("!I", 7) + b"K" + tuple_data(b"1") + b"N" + tuple_data(b"2")
    assert decode_message(key_update) == Update(
        7, (Column("t", b"2"),), old_key=(Column("t", b"1"),)
    )
    full_update = b"U" + struct.pack("!I", 7) + b"O" + tuple_data(b"1", b"x") + b"N"
    full_update += tuple_data(b"1", b"y")
    decoded = decode_message(full_update)
    assert isinstance(decoded, Update) and decoded.old == (Column("t", b"1"), Column("t", b"x"))
    assert decode_message(b"D" + struct.pack("!I", 7) + b"K" + tuple_data(b"1")) == Delete(
        7, old_key=(Column("t", b"1"),)
    )
    assert decode_message(b"D" + struct.pack("!I", 7) + b"O" + tuple_data(b"1", None)) == Delete(
        7, old=(Column("t", b"1"), Column("n"))
    )
    truncate = b"T" + struct.pack("!ib", 2, 1 | 2) + struct.pack("!II", 7, 8)
    assert decode_message(truncate) == Truncate((7, 8), cascade=True, restart_identity=True)
    logical = b"M" + struct.pack("!bQ", 1, 0x42) + cstring("app") + struct.pack("!i", 2) + b"hi"
    assert decode_message(logical) == LogicalMessage(True, 0x42, "app", b"hi")


@pytest.mark.parametrize(
    "message",
    [
        b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!h", 1) + b"t" + struct.pack("!i", 9),
        b"I" + struct.pack("!I", 1) + b"X",
        b"R" + struct.pack("!I", 1) + b"public",
        b"B" + struct.pack("!QqI", 1, 2, 3) + b"extra",
        b"Z",
        b"",
    ],
)
def test_malformed_messages_are_protocol_errors(message: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_message(message)


def schema_of(columns: list[ColumnInfo], **settings: str) -> TableSchema:
    table = TableInfo("public", "t", tuple(columns), ("id",))
    return TableSchema.of(table, "shop", ValueSettings(**settings))


def test_values_as_debezium_writes_them() -> None:
    numeric_10_2 = (10 << 16) + 2 + 4
    schema = schema_of([
        ColumnInfo("id", 23, -1, False), ColumnInfo("price", 1700, numeric_10_2),
        ColumnInfo("free", 1700), ColumnInfo("seen", 1184), ColumnInfo("at", 1114, 3),
        ColumnInfo("born", 1082), ColumnInfo("alarm", 1083), ColumnInfo("ok", 16),
        ColumnInfo("photo", 17), ColumnInfo("note", 25, -1, False),
    ])  # fmt: skip
    row = schema.row(["7", "12.50", "-3.140", "2026-01-02 05:04:05.5+02", "2026-01-02 03:04:05.123",
                      "1970-01-11", "01:00:00.25", "t", "\\x0aff", UNCHANGED])  # fmt: skip
    assert row.values["price"] == Decimal("12.50")
    free = row.values["free"].values
    assert free["scale"] == 3 and int.from_bytes(free["value"], "big", signed=True) == -3140
    assert row.values["seen"] == "2026-01-02T03:04:05.5Z"
    assert row.values["at"] == 1767323045123
    assert (row.values["born"], row.values["alarm"]) == (10, 3_600_250_000)
    assert (row.values["ok"], row.values["photo"]) == (True, b"\n\xff")
    assert row.values["note"] == "__debezium_unavailable_value"
    assert schema.key(row) is not None and schema.key(row).values == {"id": 7}  # type: ignore[union-attr]
    # a required column a change does not carry is its type's zero
    assert (
        schema.row(["8", None, None, None, None, None, None, None, None, None]).values["note"] == ""
    )
    converter = JsonConverter()
    converter.configure({}, False)
    envelope = schema.envelope(
        "c", None, row, EventSource(1_000_000, "false", 42, 99, 90), "db", "shop", 5_000_000
    )
    written = converter.from_connect_data("shop.public.t", schema.envelope_schema, envelope)
    assert written is not None
    document = json.loads(written)
    assert document["payload"]["after"]["price"] == base64.b64encode(b"\x04\xe2").decode()
    assert document["payload"]["source"] == {
        "version": document["payload"]["source"]["version"], "connector": "postgresql",
        "name": "shop", "ts_ms": 1000, "snapshot": "false", "db": "db",
        "sequence": '["90","99"]', "ts_us": 1_000_000, "ts_ns": 1_000_000_000,
        "schema": "public", "table": "t", "txId": 42, "lsn": 99, "xmin": None,
    }  # fmt: skip
    assert document["payload"]["op"] == "c" and document["payload"]["ts_ms"] == 5000


def test_decimal_and_binary_modes() -> None:
    columns = [ColumnInfo("id", 23, -1, False), ColumnInfo("n", 1700), ColumnInfo("b", 17)]
    as_double = schema_of(columns, decimal_mode="double", binary_mode="base64")
    row = as_double.row(["1", "2.5", "\\x0102"])
    assert row.values["n"] == 2.5 and row.values["b"] == "AQI="
    as_string = schema_of(columns, decimal_mode="string", binary_mode="hex")
    assert as_string.row(["1", "2.50", "\\x0102"]).values == {"id": 1, "n": "2.50", "b": "0102"}


def test_resume_point_skips_what_is_stored() -> None:
    stored = ResumePoint.of({"lsn_commit": 500, "lsn": 420, "lsn_events_processed": 2})
    assert stored is not None
    assert stored.covers(400, 390, 1)  # an earlier transaction
    assert stored.covers(500, 410, 1) and stored.covers(500, 420, 2)
    assert not stored.covers(500, 420, 3)  # the third change at that LSN is not stored
    assert not stored.covers(500, 430, 1) and not stored.covers(600, 100, 1)
    assert ResumePoint.of({"lsn": 5, "snapshot": "INITIAL"}) is None
    assert snapshot_completed({"last_snapshot_record": True, "lsn": 5})
    assert not snapshot_completed({"last_snapshot_record": False, "lsn": 5})
    assert snapshot_completed({"lsn_commit": 1, "lsn": 1}) and not snapshot_completed(None)


def test_include_and_exclude_lists_match_whole_names() -> None:
    included = TableFilter({"table.include.list": ["public\\.cust.*", "inventory.orders"]})
    assert included.captures("public", "customers") and included.captures("inventory", "ORDERS")
    assert not included.captures("public", "orders") and not included.captures("xpublic", "cust")
    excluded = TableFilter({"table.exclude.list": ["public.audit"], "schema.exclude.list": ["tmp"]})
    assert excluded.captures("public", "orders")
    assert not excluded.captures("public", "audit") and not excluded.captures("tmp", "x")


def test_arrays_enums_intervals_and_money() -> None:
    schema = schema_of([
        ColumnInfo("id", 23, -1, False), ColumnInfo("words", 1009), ColumnInfo("grid", 1007),
        ColumnInfo("mood", 16500, -1, True, ("sad", "happy")), ColumnInfo("took", 1186),
        ColumnInfo("paid", 790), ColumnInfo("blobs", 1001),
    ])  # fmt: skip
    row = schema.row(["1", '{"a,b","say \\"hi\\"",NULL,"NULL",plain}', "{{1,2},{3,NULL}}",
                      "happy", "P1Y-2DT3H4M5.5S", "-$1,234.50", '{"\\\\x0a"}'])  # fmt: skip
    assert row.values["words"] == ["a,b", 'say "hi"', None, "NULL", "plain"]
    assert row.values["grid"] == [1, 2, 3, None]  # flattened
    assert row.values["mood"] == "happy"
    assert schema.value_schema.field("mood").schema.parameters == {"allowed": "sad,happy"}  # type: ignore[union-attr]
    # Debezium's MicroDuration: a year is 12 months of 365.25 / 12 days
    assert row.values["took"] == int((365.25 - 2) * 86400e6 + (3 * 3600 + 4 * 60 + 5.5) * 1e6)
    assert row.values["paid"] == Decimal("-1234.50")
    assert row.values["blobs"] == [b"\n"]
    as_text = schema_of([ColumnInfo("id", 23, -1, False), ColumnInfo("took", 1186)],
                        interval_mode="string")  # fmt: skip
    assert as_text.row(["1", "P1D"]).values["took"] == "P1D"
