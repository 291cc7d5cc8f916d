"""Kafka's share group records in ``__consumer_offsets`` (KIP-932).

Owns the bytes of the records Kafka's group coordinator writes for share groups, as
its group-coordinator JSON schemas define them. A key is an int16 version (the record
type) followed by non-flexible strings; a value is an int16 version 0 followed by a
flexible body (compact strings and arrays, tagged fields at the end of each struct,
skipped on read):

- 10 ShareGroupMemberMetadata: key group, member; value rack id, client id and host,
  subscribed topic names.
- 11 ShareGroupMetadata: key group; value the group epoch.
- 12 ShareGroupTargetAssignmentMetadata: key group; value the assignment epoch.
- 13 ShareGroupTargetAssignmentMember: key group, member; value topic id ->
  partitions.
- 14 ShareGroupCurrentMemberAssignment: key group, member; value member epoch,
  previous member epoch, state, assigned partitions.
- 9 ShareGroupPartitionMetadata and 15 ShareGroupStatePartitionMetadata: key group;
  recognised so that they are skipped (Strom writes neither).

A null value is a tombstone for its key. Knows nothing of groups' behaviour:
share_group.py decides what to write and restores from what was read, coordinator.py
replays the topic.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from strom.coordinator.offsets_topic import OffsetsRecordError, RecordReader

PARTITION_METADATA = 9
MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_ASSIGNMENT_METADATA = 12
TARGET_ASSIGNMENT_MEMBER = 13
CURRENT_MEMBER_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15

_GROUP_KEYS = (
    PARTITION_METADATA,
    GROUP_METADATA,
    TARGET_ASSIGNMENT_METADATA,
    STATE_PARTITION_METADATA,
)
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT)
VALUE_VERSION = 0
MEMBER_STABLE = 0  # Kafka's MemberState: a share group member is always stable

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

TopicPartitions = dict[uuid.UUID, set[int]]


@dataclass(frozen=True, slots=True)
class ShareGroupKey:
    """The key of a share group record: its type, the group, and the member for 10, 13
    and 14."""

    record_type: int
    group: str
    member_id: str | None = None


@dataclass(slots=True)
class MemberMetadata:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    assigned: TopicPartitions = field(default_factory=dict)
    state: int = MEMBER_STABLE


# Writing --------------------------------------------------------------------


class _Writer:
    """A flexible value: its version, then fields appended in order."""

    def __init__(self) -> None:
        self.out = bytearray(_I16.pack(VALUE_VERSION))

    def uvarint(self, v: int) -> _Writer:
        while v >= 0x80:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)
        return self

    def i8(self, v: int) -> _Writer:
        self.out += struct.pack(">b", v)
        return self

    def i32(self, v: int) -> _Writer:
        self.out += _I32.pack(v)
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.uvarint(0)
        data = v.encode()
        self.uvarint(len(data) + 1)
        self.out += data
        return self

    def topic_partitions(self, value: TopicPartitions) -> _Writer:
        entries = sorted((str(t), t, ps) for t, ps in value.items() if ps)
        self.uvarint(len(entries) + 1)
        for _, topic_id, partitions in entries:
            self.out += topic_id.bytes
            self.uvarint(len(partitions) + 1)
            for p in sorted(partitions):
                self.i32(p)
            self.uvarint(0)  # no tagged fields
        return self

    def done(self) -> bytes:
        self.uvarint(0)  # no tagged fields
        return bytes(self.out)


def key_bytes(key: ShareGroupKey) -> bytes:
    out = bytearray(_I16.pack(key.record_type))
    names = (key.group,) if key.member_id is None else (key.group, key.member_id)
    for text in names:
        data = text.encode()
        out += _I16.pack(len(data)) + data
    return bytes(out)


def epoch_value(epoch: int) -> bytes:
    """A ShareGroupMetadataValue or ShareGroupTargetAssignmentMetadataValue."""
    return _Writer().i32(epoch).done()


def member_metadata_value(value: MemberMetadata) -> bytes:
    w = _Writer().string(value.rack_id).string(value.client_id).string(value.client_host)
    w.uvarint(len(value.subscribed_topic_names) + 1)
    for name in value.subscribed_topic_names:
        w.string(name)
    return w.done()


def target_assignment_member_value(partitions: TopicPartitions) -> bytes:
    return _Writer().topic_partitions(partitions).done()


def current_assignment_value(value: CurrentAssignment) -> bytes:
    w = _Writer().i32(value.member_epoch).i32(value.previous_member_epoch).i8(value.state)
    return w.topic_partitions(value.assigned).done()


# Reading --------------------------------------------------------------------


class _Reader(RecordReader):
    def topic_partitions(self) -> TopicPartitions:
        result: TopicPartitions = {}
        for _ in range(self.array_length()):
            topic_id = uuid.UUID(bytes=bytes(self.take(16)))
            partitions = {self.i32() for _ in range(self.array_length())}
            self.skip_tags()
            if partitions:
                result.setdefault(topic_id, set()).update(partitions)
        return result


def decode_key(data: bytes) -> ShareGroupKey | None:
    """The key of a share group record, or None for a key of another kind."""
    r = RecordReader(data)  # keys have classic (int16-length) strings
    record_type = r.i16()
    if record_type in _GROUP_KEYS:
        return ShareGroupKey(record_type, r.string() or "")
    if record_type in _MEMBER_KEYS:
        return ShareGroupKey(record_type, r.string() or "", r.string() or "")
    return None


def _value_reader(data: bytes) -> _Reader:
    r = _Reader(data, flexible=True)
    version = r.i16()
    if version != VALUE_VERSION:
        raise OffsetsRecordError(f"unknown share group value version {version}")
    return r


def decode_epoch_value(data: bytes) -> int:
    return _value_reader(data).i32()


def decode_member_metadata_value(data: bytes) -> MemberMetadata:
    r = _value_reader(data)
    rack_id = r.string()
    client_id = r.string() or ""
    client_host = r.string() or ""
    names = [r.string() or "" for _ in range(r.array_length())]
    r.skip_tags()
    return MemberMetadata(rack_id, client_id, client_host, names)


def decode_target_assignment_member_value(data: bytes) -> TopicPartitions:
    r = _value_reader(data)
    partitions = r.topic_partitions()
    r.skip_tags()
    return partitions


def decode_current_assignment_value(data: bytes) -> CurrentAssignment:
    r = _value_reader(data)
    member_epoch = r.i32()
    previous_epoch = r.i32()
    state = r.i8()
    assigned = r.topic_partitions()
    r.skip_tags()
    return CurrentAssignment(member_epoch, previous_epoch, assigned, state)
