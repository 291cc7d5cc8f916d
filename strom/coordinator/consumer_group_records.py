"""Kafka's KIP-848 consumer group records in ``__consumer_offsets``.

Owns the bytes of the records Kafka's group coordinator writes for groups of the
next-generation protocol, as its group-coordinator JSON schemas define them. A key is
an int16 version (the record type) followed by non-flexible strings; a value is an
int16 version 0 followed by a flexible body (compact strings and arrays, tagged
fields at the end of each struct):

- 3 ConsumerGroupMetadata: key group; value the group epoch (tagged MetadataHash and
  CreationTimeMs are skipped on read, not written).
- 4 ConsumerGroupPartitionMetadata: key group; recognised so it can be skipped (Strom
  writes only its tombstone when a group is deleted).
- 5 ConsumerGroupMemberMetadata: key group, member; value instance id, rack id,
  client id and host, subscribed topic names and regex, rebalance timeout, server
  assignor (the tagged ClassicMemberMetadata is skipped).
- 6 ConsumerGroupTargetAssignmentMetadata: key group; value the assignment epoch.
- 7 ConsumerGroupTargetAssignmentMember: key group, member; value topic id ->
  partitions.
- 8 ConsumerGroupCurrentMemberAssignment: key group, member; value member epoch,
  previous member epoch, state (MemberState), assigned partitions, partitions pending
  revocation.

A null value is a tombstone for its key. Knows nothing of groups' behaviour:
consumer_group.py decides what to write, coordinator.py replays.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from strom.coordinator.offsets_topic import OffsetsRecordError, RecordReader

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8

_GROUP_KEYS = (GROUP_METADATA, PARTITION_METADATA, TARGET_ASSIGNMENT_METADATA)
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT)
VALUE_VERSION = 0

# Kafka's MemberState values in ConsumerGroupCurrentMemberAssignmentValue.
MEMBER_STABLE = 0
MEMBER_UNREVOKED_PARTITIONS = 1
MEMBER_UNRELEASED_PARTITIONS = 2

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

TopicPartitions = dict[uuid.UUID, set[int]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of a KIP-848 record: its type, the group, and the member for 5, 7, 8."""

    record_type: int
    group: str
    member_id: str | None = None


@dataclass(slots=True)
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None


@dataclass(slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)


# Writing --------------------------------------------------------------------


class _FlexibleWriter:
    def __init__(self) -> None:
        self.out = bytearray(_I16.pack(VALUE_VERSION))

    def uvarint(self, v: int) -> _FlexibleWriter:
        while v >= 0x80:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)
        return self

    def i8(self, v: int) -> _FlexibleWriter:
        self.out += struct.pack(">b", v)
        return self

    def i32(self, v: int) -> _FlexibleWriter:
        self.out += _I32.pack(v)
        return self

    def string(self, v: str | None) -> _FlexibleWriter:
        if v is None:
            return self.uvarint(0)
        data = v.encode()
        self.uvarint(len(data) + 1)
        self.out += data
        return self

    def no_tags(self) -> _FlexibleWriter:
        return self.uvarint(0)

    def topic_partitions(self, value: TopicPartitions) -> _FlexibleWriter:
        entries = sorted((str(t), t, ps) for t, ps in value.items() if ps)
        self.uvarint(len(entries) + 1)
        for _, topic_id, partitions in entries:
            self.out += topic_id.bytes
            self.uvarint(len(partitions) + 1)
            for p in sorted(partitions):
                self.i32(p)
            self.no_tags()
        return self

    def done(self) -> bytes:
        self.no_tags()
        return bytes(self.out)


def _key(record_type: int, group: str, member_id: str | None = None) -> bytes:
    out = bytearray(_I16.pack(record_type))
    for text in (group,) if member_id is None else (group, member_id):
        data = text.encode()
        out += _I16.pack(len(data)) + data
    return bytes(out)


def group_metadata_key(group: str) -> bytes:
    return _key(GROUP_METADATA, group)


def partition_metadata_key(group: str) -> bytes:
    return _key(PARTITION_METADATA, group)


def member_metadata_key(group: str, member_id: str) -> bytes:
    return _key(MEMBER_METADATA, group, member_id)


def target_assignment_metadata_key(group: str) -> bytes:
    return _key(TARGET_ASSIGNMENT_METADATA, group)


def target_assignment_member_key(group: str, member_id: str) -> bytes:
    return _key(TARGET_ASSIGNMENT_MEMBER, group, member_id)


def current_assignment_key(group: str, member_id: str) -> bytes:
    return _key(CURRENT_MEMBER_ASSIGNMENT, group, member_id)


def group_metadata_value(epoch: int) -> bytes:
    return _FlexibleWriter().i32(epoch).done()


def target_assignment_metadata_value(assignment_epoch: int) -> bytes:
    return _FlexibleWriter().i32(assignment_epoch).done()


def member_metadata_value(value: MemberMetadata) -> bytes:
    w = _FlexibleWriter().string(value.instance_id).string(value.rack_id)
    w.string(value.client_id).string(value.client_host)
    w.uvarint(len(value.subscribed_topic_names) + 1)
    for name in value.subscribed_topic_names:
        w.string(name)
    w.string(value.subscribed_topic_regex).i32(value.rebalance_timeout_ms)
    return w.string(value.server_assignor).done()


def target_assignment_member_value(partitions: TopicPartitions) -> bytes:
    return _FlexibleWriter().topic_partitions(partitions).done()


def current_assignment_value(value: CurrentAssignment) -> bytes:
    w = _FlexibleWriter().i32(value.member_epoch).i32(value.previous_member_epoch)
    w.i8(value.state).topic_partitions(value.assigned)
    return w.topic_partitions(value.pending_revocation).done()


def group_tombstones(group: str, member_ids: list[str]) -> list[tuple[bytes, None]]:
    """Every key a deleted group may have left, in the order Kafka writes them: each
    member's current and target assignment and metadata, then the group's own."""
    records: list[tuple[bytes, None]] = []
    for member_id in member_ids:
        records += member_tombstones(group, member_id)
    records += [
        (target_assignment_metadata_key(group), None),
        (partition_metadata_key(group), None),
        (group_metadata_key(group), None),
    ]
    return records


def member_tombstones(group: str, member_id: str) -> list[tuple[bytes, None]]:
    """A member left: its current assignment, target assignment and metadata go."""
    return [
        (current_assignment_key(group, member_id), None),
        (target_assignment_member_key(group, member_id), None),
        (member_metadata_key(group, member_id), None),
    ]


# Reading --------------------------------------------------------------------


class _Reader(RecordReader):
    """A flexible value of a KIP-848 record, with its topic-partition arrays."""

    def topic_partitions(self) -> TopicPartitions:
        result: TopicPartitions = {}
        for _ in range(self.array_length()):
            topic_id = uuid.UUID(bytes=bytes(self.take(16)))
            partitions = {self.i32() for _ in range(self.array_length())}
            self.skip_tags()
            if partitions:
                result.setdefault(topic_id, set()).update(partitions)
        return result


def decode_key(data: bytes) -> ConsumerGroupKey | None:
    """The key of a KIP-848 record, or None for a key of another kind."""
    r = RecordReader(data)  # keys have classic (int16-length) strings
    record_type = r.i16()
    if record_type in _GROUP_KEYS:
        return ConsumerGroupKey(record_type, r.string() or "")
    if record_type in _MEMBER_KEYS:
        return ConsumerGroupKey(record_type, r.string() or "", r.string() or "")
    return None


def _value_reader(data: bytes) -> _Reader:
    r = _Reader(data, flexible=True)
    version = r.i16()
    if version != VALUE_VERSION:
        raise OffsetsRecordError(f"unknown consumer group value version {version}")
    return r


def decode_epoch_value(data: bytes) -> int:
    """The epoch in a ConsumerGroupMetadataValue or ConsumerGroupTargetAssignmentMetadataValue."""
    return _value_reader(data).i32()


def decode_member_metadata_value(data: bytes) -> MemberMetadata:
    r = _value_reader(data)
    instance_id = r.string()
    rack_id = r.string()
    client_id = r.string() or ""
    client_host = r.string() or ""
    names = [r.string() or "" for _ in range(r.array_length())]
    regex = r.string()
    rebalance_timeout_ms = r.i32()
    server_assignor = r.string()
    r.skip_tags()
    return MemberMetadata(
        instance_id,
        rack_id,
        client_id,
        client_host,
        names,
        regex,
        rebalance_timeout_ms,
        server_assignor,
    )


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
    pending = r.topic_partitions()
    r.skip_tags()
    return CurrentAssignment(member_epoch, previous_epoch, state, assigned, pending)
