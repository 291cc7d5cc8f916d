"""PostgreSQL's streaming replication messages and the ``pgoutput`` logical decoding
messages (protocol version 1), decoded from bytes and encoded where the client sends them.
No I/O: the bytes come from and go to ``postgres_cdc_stream``.

Inside COPY BOTH the server sends ``XLogData`` (``w``: the WAL position the message
starts at, the server's WAL end, its clock, then one pgoutput message) and primary
keepalives (``k``: WAL end, clock, whether a reply is wanted); the client sends standby
status updates (``r``: the positions written, flushed and applied, its clock, whether it
wants a reply). Clocks are microseconds since 2000-01-01 UTC.

pgoutput v1 messages decoded: Begin (``B``: the commit's LSN, commit time, xid), Commit
(``C``: flags, commit LSN, end LSN, commit time), Origin (``O``), Relation (``R``: oid,
namespace, name, replica identity, columns with flags, type oid and type modifier), Type
(``Y``), Insert (``I``), Update (``U``, with the old key ``K`` or old row ``O`` when the
replica identity sends one), Delete (``D``, ``K`` or ``O``), Truncate (``T``) and logical
messages (``M``). A tuple's column is null, an unchanged TOASTed value (its value not
sent), text or binary bytes. Anything else is a ``ProtocolError``.

Does not own what the values mean (``postgres_cdc_schema``) or the connection.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

POSTGRES_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
# microseconds from 1970-01-01 to 2000-01-01
POSTGRES_EPOCH_MICROS = int(
    (POSTGRES_EPOCH - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)
)

NULL = "n"
UNCHANGED_TOAST = "u"
TEXT = "t"
BINARY = "b"

_INT8 = struct.Struct("!b")
_UINT8 = struct.Struct("!B")
_INT16 = struct.Struct("!h")
_INT32 = struct.Struct("!i")
_UINT32 = struct.Struct("!I")
_UINT64 = struct.Struct("!Q")
_INT64 = struct.Struct("!q")
_BEGIN = struct.Struct("!QqI")
_COMMIT = struct.Struct("!bQQq")
_XLOG_HEADER = struct.Struct("!QQq")
_KEEPALIVE = struct.Struct("!QqB")
_STATUS = struct.Struct("!cQQQqB")


class ProtocolError(ValueError):
    """Bytes that are not a message of the protocol, or cut short."""


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL writes it: ``16/B374D848``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """``16/B374D848`` as a number; ProtocolError when it is not one."""
    high, slash, low = text.strip().partition("/")
    try:
        if not slash:
            raise ValueError(text)
        return (int(high, 16) << 32) | int(low, 16)
    except ValueError:
        raise ProtocolError(f"not an LSN: {text!r}") from None


def epoch_micros(postgres_micros: int) -> int:
    """A PostgreSQL clock value (microseconds since 2000-01-01) as microseconds since 1970."""
    return postgres_micros + POSTGRES_EPOCH_MICROS


def postgres_micros(epoch_us: int) -> int:
    return epoch_us - POSTGRES_EPOCH_MICROS


class _Reader:
    """Big-endian fields read in order from one message's bytes."""

    def __init__(self, data: bytes | memoryview, start: int = 0) -> None:
        self.data = data if isinstance(data, bytes) else bytes(data)
        self.at = start

    def _take(self, layout: struct.Struct) -> int:
        end = self.at + layout.size
        if end > len(self.data):
            raise ProtocolError(f"message cut short at byte {self.at} of {len(self.data)}")
        (value,) = layout.unpack_from(self.data, self.at)
        self.at = end
        return int(value)

    def int8(self) -> int:
        return self._take(_INT8)

    def uint8(self) -> int:
        return self._take(_UINT8)

    def int16(self) -> int:
        return self._take(_INT16)

    def int32(self) -> int:
        return self._take(_INT32)

    def uint32(self) -> int:
        return self._take(_UINT32)

    def uint64(self) -> int:
        return self._take(_UINT64)

    def int64(self) -> int:
        return self._take(_INT64)

    def byte(self) -> str:
        return chr(self.uint8())

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise ProtocolError(f"string not ended at byte {self.at}")
        text = self.data[self.at : end].decode("utf-8")
        self.at = end + 1
        return text

    def raw(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise ProtocolError(f"value of {size} bytes cut short at byte {self.at}")
        value = self.data[self.at : self.at + size]
        self.at += size
        return value

    def done(self) -> bool:
        return self.at >= len(self.data)


# --- the replication protocol's frames -------------------------------------------------


@dataclass(slots=True)
class XLogData:
    wal_start: int
    wal_end: int
    server_clock: int  # microseconds since 2000-01-01
    payload: bytes


@dataclass(slots=True)
class Keepalive:
    wal_end: int
    server_clock: int
    reply_requested: bool


def decode_copy_message(data: bytes | memoryview) -> XLogData | Keepalive:
    """One CopyData message the server sends in COPY BOTH."""
    raw = bytes(data)
    if not raw:
        raise ProtocolError("empty replication message")
    kind = raw[:1]
    if kind == b"w":
        if len(raw) < 1 + _XLOG_HEADER.size:
            raise ProtocolError("XLogData cut short")
        start, end, clock = _XLOG_HEADER.unpack_from(raw, 1)
        return XLogData(start, end, clock, raw[1 + _XLOG_HEADER.size :])
    if kind == b"k":
        if len(raw) < 1 + _KEEPALIVE.size:
            raise ProtocolError("keepalive cut short")
        end, clock, reply = _KEEPALIVE.unpack_from(raw, 1)
        return Keepalive(end, clock, bool(reply))
    raise ProtocolError(f"unknown replication message {kind!r}")


def encode_standby_status(
    written: int, flushed: int, applied: int, clock: int, reply_requested: bool = False
) -> bytes:
    """A standby status update (``r``); ``clock`` in microseconds since 2000-01-01."""
    return _STATUS.pack(b"r", written, flushed, applied, clock, 1 if reply_requested else 0)


def encode_xlog_data(wal_start: int, wal_end: int, clock: int, payload: bytes) -> bytes:
    """An XLogData frame, as the server sends it (for tests and tools)."""
    return b"w" + _XLOG_HEADER.pack(wal_start, wal_end, clock) + payload


def encode_keepalive(wal_end: int, clock: int, reply_requested: bool) -> bytes:
    return b"k" + _KEEPALIVE.pack(wal_end, clock, 1 if reply_requested else 0)


# --- pgoutput's messages ----------------------------------------------------------------
# The messages of every change (XLogData, Begin, Commit, Insert, Update, Delete) are plain
# slotted dataclasses, not frozen ones: made three or more times a change, a frozen one's
# construction costs three times as much.


@dataclass(slots=True)
class Begin:
    final_lsn: int  # the LSN of the transaction's commit record
    commit_time: int  # microseconds since 2000-01-01
    xid: int


@dataclass(slots=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_time: int


@dataclass(frozen=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(frozen=True)
class RelationColumn:
    name: str
    type_oid: int
    type_modifier: int
    part_of_key: bool


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str  # "" for pg_catalog, as the server sends it
    name: str
    replica_identity: str  # d (default), n (nothing), f (full), i (index)
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True)
class TypeMessage:
    oid: int
    namespace: str
    name: str


class Column(NamedTuple):
    """One column of a tuple: its kind (``NULL``, ``UNCHANGED_TOAST``, ``TEXT``,
    ``BINARY``) and, for text and binary, its bytes."""

    kind: str
    data: bytes | None = None


_NULL_COLUMN = Column(NULL)
_UNCHANGED_COLUMN = Column(UNCHANGED_TOAST)


Tuple = tuple[Column, ...]


@dataclass(slots=True)
class Insert:
    relation_oid: int
    new: Tuple


@dataclass(slots=True)
class Update:
    relation_oid: int
    new: Tuple
    old: Tuple | None = None  # the old row (``O``, replica identity full)
    old_key: Tuple | None = None  # the old key (``K``: the key changed)


@dataclass(slots=True)
class Delete:
    relation_oid: int
    old: Tuple | None = None
    old_key: Tuple | None = None


@dataclass(frozen=True)
class Truncate:
    relation_oids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = (
    Begin
    | Commit
    | Origin
    | Relation
    | TypeMessage
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
)


def _tuple(reader: _Reader) -> Tuple:
    data, at = reader.data, reader.at
    (count,) = _INT16.unpack_from(data, at)
    at += 2
    columns: list[Column] = []
    for _ in range(count):
        kind = data[at : at + 1]
        at += 1
        if kind == b"t" or kind == b"b":
            (size,) = _INT32.unpack_from(data, at)
            at += 4
            end = at + size
            if size < 0 or end > len(data):
                raise ProtocolError(f"value of {size} bytes cut short at byte {at}")
            columns.append(Column(TEXT if kind == b"t" else BINARY, data[at:end]))
            at = end
        elif kind == b"n":
            columns.append(_NULL_COLUMN)
        elif kind == b"u":
            columns.append(_UNCHANGED_COLUMN)
        else:
            raise ProtocolError(f"unknown tuple column kind {kind!r} at byte {at - 1}")
    reader.at = at
    return tuple(columns)


def decode_message(payload: bytes | memoryview) -> Message:
    """One pgoutput message (the payload of an XLogData)."""
    data = payload if isinstance(payload, bytes) else bytes(payload)
    if not data:
        raise ProtocolError("empty pgoutput message")
    kind = chr(data[0])
    # the messages of every transaction, read without a reader
    if kind == "B" and len(data) == 1 + _BEGIN.size:
        return Begin(*_BEGIN.unpack_from(data, 1))
    if kind == "C" and len(data) == 1 + _COMMIT.size:
        return Commit(*_COMMIT.unpack_from(data, 1))
    try:
        return _decode(kind, _Reader(data, 1))
    except struct.error:
        raise ProtocolError(f"a {kind!r} message cut short") from None


def _decode(kind: str, reader: _Reader) -> Message:
    message: Message
    if kind == "B":
        message = Begin(reader.uint64(), reader.int64(), reader.uint32())
    elif kind == "C":
        message = Commit(reader.int8(), reader.uint64(), reader.uint64(), reader.int64())
    elif kind == "O":
        message = Origin(reader.uint64(), reader.string())
    elif kind == "R":
        oid, namespace, name, identity = (
            reader.uint32(),
            reader.string(),
            reader.string(),
            reader.byte(),
        )
        columns = []
        for _ in range(reader.int16()):
            flags = reader.int8()
            column_name = reader.string()
            columns.append(
                RelationColumn(column_name, reader.uint32(), reader.int32(), bool(flags & 1))
            )
        message = Relation(oid, namespace, name, identity, tuple(columns))
    elif kind == "Y":
        message = TypeMessage(reader.uint32(), reader.string(), reader.string())
    elif kind == "I":
        oid = reader.uint32()
        if reader.byte() != "N":
            raise ProtocolError("Insert without its new tuple")
        message = Insert(oid, _tuple(reader))
    elif kind == "U":
        oid = reader.uint32()
        old: Tuple | None = None
        old_key: Tuple | None = None
        marker = reader.byte()
        if marker == "K":
            old_key = _tuple(reader)
            marker = reader.byte()
        elif marker == "O":
            old = _tuple(reader)
            marker = reader.byte()
        if marker != "N":
            raise ProtocolError("Update without its new tuple")
        message = Update(oid, _tuple(reader), old, old_key)
    elif kind == "D":
        oid = reader.uint32()
        marker = reader.byte()
        if marker == "K":
            message = Delete(oid, old_key=_tuple(reader))
        elif marker == "O":
            message = Delete(oid, old=_tuple(reader))
        else:
            raise ProtocolError(f"Delete with unknown tuple marker {marker!r}")
    elif kind == "T":
        count = reader.int32()
        options = reader.int8()
        oids = tuple(reader.uint32() for _ in range(count))
        message = Truncate(oids, bool(options & 1), bool(options & 2))
    elif kind == "M":
        transactional = bool(reader.int8())
        lsn = reader.uint64()
        prefix = reader.string()
        message = LogicalMessage(transactional, lsn, prefix, reader.raw(reader.int32()))
    else:
        raise ProtocolError(f"unknown pgoutput message {kind!r}")
    if not reader.done():
        raise ProtocolError(f"{len(reader.data) - reader.at} bytes left after a {kind!r} message")
    return message
