"""Kafka's record formats in the internal topic ``__consumer_offsets``.

Owns the bytes of the four record kinds the classic coordinator writes, as
Kafka's group-coordinator JSON schemas define them, so that tools that read the
topic (Kafka's offsets formatter, Burrow) understand Strom's records:

- OffsetCommitKey: int16 key version 1 (0 is read too), group, topic, partition.
- OffsetCommitValue: written as version 3 (offset, leaderEpoch, metadata,
  commitTimestamp); versions 0-4 are read.
- GroupMetadataKey: int16 key version 2, group.
- GroupMetadataValue: written as version 3 (protocolType, generation, protocol,
  leader, currentStateTimestamp, members with groupInstanceId, clientId,
  clientHost, rebalanceTimeout, sessionTimeout, subscription, assignment);
  versions 0-4 are read.

A record with a null value is a tombstone for its key. Keys of other versions
decode to None here: KIP-848 records are consumer_group_records.py's, and share-group
records Kafka may have written are skipped. Also owns which partition of the topic
holds a group, computed as Kafka does from Java's String.hashCode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import lru_cache

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class OffsetsRecordError(ValueError):
    """Bytes in __consumer_offsets that do not follow the schema they claim."""


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, 32-bit wrap-around."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@lru_cache(maxsize=65536)
def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % offsets.topic.num.partitions."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberRecord] = field(default_factory=list)


# Writing --------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, v: int) -> _Writer:
        self.out += _I16.pack(v)
        return self

    def i32(self, v: int) -> _Writer:
        self.out += _I32.pack(v)
        return self

    def i64(self, v: int) -> _Writer:
        self.out += _I64.pack(v)
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.i16(-1)
        data = v.encode()
        self.i16(len(data))
        self.out += data
        return self

    def blob(self, v: bytes | None) -> _Writer:
        if v is None:
            return self.i32(-1)
        self.i32(len(v))
        self.out += v
        return self


@lru_cache(maxsize=65536)
def offset_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer().i16(OFFSET_COMMIT_KEY_VERSION).string(group).string(topic).i32(partition)
    return bytes(w.out)


def group_key(group: str) -> bytes:
    return bytes(_Writer().i16(GROUP_METADATA_KEY_VERSION).string(group).out)


def offset_value(value: CommittedOffset) -> bytes:
    if value.expire_timestamp >= 0:
        # Version 1, the only one with an expire timestamp (and no leader epoch), as
        # Kafka writes an offset committed with a retention time.
        w = _Writer().i16(1).i64(value.offset).string(value.metadata)
        w.i64(value.commit_timestamp).i64(value.expire_timestamp)
        return bytes(w.out)
    w = _Writer().i16(OFFSET_COMMIT_VALUE_VERSION).i64(value.offset).i32(value.leader_epoch)
    w.string(value.metadata).i64(value.commit_timestamp)
    return bytes(w.out)


def group_value(value: GroupRecord) -> bytes:
    w = _Writer().i16(GROUP_METADATA_VALUE_VERSION).string(value.protocol_type)
    w.i32(value.generation).string(value.protocol).string(value.leader)
    w.i64(value.current_state_timestamp).i32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
        w.string(m.client_host).i32(m.rebalance_timeout).i32(m.session_timeout)
        w.blob(m.subscription).blob(m.assignment)
    return bytes(w.out)


# Reading --------------------------------------------------------------------


class RecordReader:
    """Reads the fields of a record key or value of ``__consumer_offsets``: fixed-width
    integers, and strings, bytes and arrays with classic or (``flexible``) compact lengths.
    Running out of bytes is an OffsetsRecordError."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise OffsetsRecordError("record ends early")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i8(self) -> int:
        return int(_I8.unpack(self.take(1))[0])

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self.take(8))[0])

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.i32() if wide else self.i16()

    def string(self) -> str | None:
        n = self._length(False)
        return None if n < 0 else self.take(n).decode()

    def blob(self) -> bytes | None:
        n = self._length(True)
        return None if n < 0 else self.take(n)

    def array_length(self) -> int:
        return self._length(True)

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    r = RecordReader(data)
    version = r.i16()
    if version in (0, OFFSET_COMMIT_KEY_VERSION):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupKey(r.string() or "")
    return None


def decode_offset_value(data: bytes) -> CommittedOffset:
    version = RecordReader(data).i16()
    if not 0 <= version <= 4:
        raise OffsetsRecordError(f"unknown offset commit value version {version}")
    r = RecordReader(data, flexible=version >= 4)
    r.pos = 2
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    commit_timestamp = r.i64()
    expire_timestamp = r.i64() if version == 1 else -1
    return CommittedOffset(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_value(data: bytes) -> GroupRecord:
    version = RecordReader(data).i16()
    if not 0 <= version <= 4:
        raise OffsetsRecordError(f"unknown group metadata value version {version}")
    r = RecordReader(data, flexible=version >= 4)
    r.pos = 2
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(max(r.array_length(), 0)):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        subscription = r.blob() or b""
        assignment = r.blob() or b""
        r.skip_tags()
        members.append(
            MemberRecord(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    return GroupRecord(protocol_type, generation, protocol, leader, timestamp, members)
