"""Kafka's record formats in the internal topic ``__transaction_state``, and the states.

Owns the bytes of the one record kind the transaction coordinator writes, as Kafka's
transaction-coordinator JSON schemas define them, so that Kafka's tools reading the
topic understand Strom's records:

- TransactionLogKey: int16 key version 0, transactional id (int16-length string).
- TransactionLogValue: version 0 (classic encoding) is written; version 1 (flexible,
  with the tagged fields PreviousProducerId, NextProducerId, ClientTransactionVersion)
  is read too. Fields: producer id, producer epoch, transaction timeout, status (int8,
  Kafka's TransactionState ids), the partitions (topic -> partition ids; null or empty
  when none), last update and start timestamps.

A null value is a tombstone: the transactional id expired. Also owns the transaction
states with Kafka's ids and which partition of the topic holds a transactional id
(abs(hashCode) % partitions, as for groups). Knows nothing of logs or sockets.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from strom.coordinator.offsets_topic import partition_for

TRANSACTION_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class TxnState(IntEnum):
    """Kafka's TransactionState, with the ids it writes to the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        """The name Kafka's DescribeTransactions / ListTransactions use."""
        return _LABELS[self]


_LABELS = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATE_BY_LABEL = {label: state for state, label in _LABELS.items()}


class TransactionLogError(ValueError):
    """Bytes in __transaction_state that do not follow the schema they claim."""


@dataclass(slots=True)
class TxnRecord:
    """One TransactionLogValue."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: dict[str, set[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def transaction_partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's abs(transactionalId.hashCode) % transaction.state.log.num.partitions."""
    return partition_for(transactional_id, partitions)


def txn_key(transactional_id: str) -> bytes:
    data = transactional_id.encode()
    return _I16.pack(KEY_VERSION) + _I16.pack(len(data)) + data


def txn_value(record: TxnRecord) -> bytes:
    out = bytearray()
    out += _I16.pack(VALUE_VERSION)
    out += _I64.pack(record.producer_id)
    out += _I16.pack(record.producer_epoch)
    out += _I32.pack(record.timeout_ms)
    out += _I8.pack(int(record.state))
    if record.partitions:
        out += _I32.pack(len(record.partitions))
        for topic in sorted(record.partitions):
            name = topic.encode()
            out += _I16.pack(len(name)) + name
            ids = sorted(record.partitions[topic])
            out += _I32.pack(len(ids))
            for p in ids:
                out += _I32.pack(p)
    else:
        out += _I32.pack(-1)
    out += _I64.pack(record.last_update_ms)
    out += _I64.pack(record.start_ms)
    return bytes(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise TransactionLogError("record ends early")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: struct.Struct) -> int:
        return int(fmt.unpack(self.take(fmt.size))[0])

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise TransactionLogError("varint too long")

    def string(self, flexible: bool) -> str:
        n = self.uvarint() - 1 if flexible else self.unpack(_I16)
        if n < 0:
            raise TransactionLogError("null string where one is required")
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as exc:
            raise TransactionLogError(f"string not UTF-8: {exc}") from None

    def array_length(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.unpack(_I32)

    def tags(self) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            found[tag] = self.take(self.uvarint())
        return found


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version this does not know."""
    reader = _Reader(data)
    if reader.unpack(_I16) != KEY_VERSION:
        return None
    return reader.string(flexible=False)


def decode_value(data: bytes) -> TxnRecord:
    reader = _Reader(data)
    version = reader.unpack(_I16)
    if version not in (0, 1):
        raise TransactionLogError(f"unknown TransactionLogValue version {version}")
    flexible = version >= 1
    producer_id = reader.unpack(_I64)
    epoch = reader.unpack(_I16)
    timeout_ms = reader.unpack(_I32)
    status = reader.unpack(_I8)
    try:
        state = TxnState(status)
    except ValueError:
        raise TransactionLogError(f"unknown transaction status {status}") from None
    partitions: dict[str, set[int]] = {}
    count = reader.array_length(flexible)
    for _ in range(max(count, 0)):
        topic = reader.string(flexible)
        ids = {reader.unpack(_I32) for _ in range(max(reader.array_length(flexible), 0))}
        if flexible:
            reader.tags()
        partitions.setdefault(topic, set()).update(ids)
    last_update = reader.unpack(_I64)
    start = reader.unpack(_I64)
    record = TxnRecord(producer_id, epoch, timeout_ms, state, partitions, last_update, start)
    if flexible:
        tags = reader.tags()
        if 0 in tags and len(tags[0]) == 8:
            record.previous_producer_id = _I64.unpack(tags[0])[0]
        if 1 in tags and len(tags[1]) == 8:
            record.next_producer_id = _I64.unpack(tags[1])[0]
        if 2 in tags and len(tags[2]) == 2:
            record.client_transaction_version = _I16.unpack(tags[2])[0]
    return record
