"""The share-partitions' durable state in ``__share_group_state`` (KIP-932).

Owns the record formats, as Kafka's share coordinator writes them, and the store that
writes and reads them:

- ShareSnapshotKey (int16 record type 0) and ShareUpdateKey (type 1): group id
  (int16-length string), topic id (16 bytes), partition (int32).
- ShareSnapshotValue (int16 version 0, flexible): SnapshotEpoch int32, StateEpoch int32,
  LeaderEpoch int32, StartOffset int64, CreateTimestamp int64, WriteTimestamp int64,
  StateBatches (compact array of FirstOffset int64, LastOffset int64, DeliveryState
  int8, DeliveryCount int16, tags), tags.
- ShareUpdateValue (version 0, flexible): SnapshotEpoch, LeaderEpoch, StartOffset (-1
  when not moved), StateBatches: batches that replace those states over their offsets.

A null value is a tombstone (the group or its offsets were deleted). The topic is
compacted, created with ``share.coordinator.state.topic.*`` settings, and a key lives
in partition abs(hashCode("group:topicId:partition")) % partitions, as in Kafka.

Strom writes a whole ShareSnapshot whenever a share-partition's durable state changed
(acknowledgements, releases, archiving, the window moving; not an acquisition), through
the leader's one append path, as the group coordinator writes ``__consumer_offsets``
(a write says where it landed: the caller waits for the high watermark to pass it
before it answers for the write, as offset commits do); it reads Snapshot and Update
records back (an Update applied over the Snapshot before it). A state partition is
replayed once, when one of its keys is first needed on the node that leads it, and
kept. This store is the share coordinator's storage: the node
leading a key's state partition reads and writes it here, for itself (the share-
partition's leader is often that node) or for other nodes through the share
coordinator's RPCs (strom/broker/handlers/groups/share_coordinator.py).
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strom.coordinator.internal_log import (
    Appended,
    AppendToLeader,
    append_records,
    replay_batches,
)
from strom.coordinator.offsets_topic import partition_for
from strom.coordinator.share_partition import StateBatch
from strom.protocol.errors import ErrorCode
from strom.protocol.records import decode_records

if TYPE_CHECKING:
    from strom.cluster.node_state import NodeState
    from strom.config import BrokerConfig

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT_KEY_TYPE = 0
UPDATE_KEY_TYPE = 1
VALUE_VERSION = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BATCH = struct.Struct(">qqbh")


class ShareStateRecordError(ValueError):
    """Bytes in __share_group_state that do not follow the schema they claim."""


@dataclass(frozen=True, slots=True)
class ShareKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    @property
    def coordinator_key(self) -> str:
        """Kafka's share coordinator key: group:topicId:partition (topic id in base64)."""
        return f"{self.group_id}:{_base64_uuid(self.topic_id)}:{self.partition}"


@dataclass(slots=True)
class ShareState:
    """One share-partition's durable state: what a snapshot holds."""

    start_offset: int
    batches: list[StateBatch] = field(default_factory=list)
    snapshot_epoch: int = 0
    state_epoch: int = 0
    leader_epoch: int = 0
    create_timestamp: int = 0


def _base64_uuid(value: uuid.UUID) -> str:
    import base64

    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def state_partition_for(key: ShareKey, partitions: int) -> int:
    return partition_for(key.coordinator_key, partitions)


# Encoding ---------------------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_key(key: ShareKey, record_type: int = SNAPSHOT_KEY_TYPE) -> bytes:
    group = key.group_id.encode()
    return (
        _I16.pack(record_type)
        + _I16.pack(len(group))
        + group
        + key.topic_id.bytes
        + _I32.pack(key.partition)
    )


def _batches(batches: Iterable[StateBatch]) -> bytes:
    items = list(batches)
    out = bytearray(_uvarint(len(items) + 1))
    for b in items:
        out += _BATCH.pack(b.first_offset, b.last_offset, b.state, b.delivery_count)
        out += b"\x00"  # tags
    return bytes(out)


def encode_snapshot(state: ShareState, write_timestamp: int) -> bytes:
    return (
        _I16.pack(VALUE_VERSION)
        + _I32.pack(state.snapshot_epoch)
        + _I32.pack(state.state_epoch)
        + _I32.pack(state.leader_epoch)
        + _I64.pack(state.start_offset)
        + _I64.pack(state.create_timestamp)
        + _I64.pack(write_timestamp)
        + _batches(state.batches)
        + b"\x00"
    )


def encode_update(
    snapshot_epoch: int, leader_epoch: int, start_offset: int, batches: Iterable[StateBatch]
) -> bytes:
    return (
        _I16.pack(VALUE_VERSION)
        + _I32.pack(snapshot_epoch)
        + _I32.pack(leader_epoch)
        + _I64.pack(start_offset)
        + _batches(batches)
        + b"\x00"
    )


# Decoding ---------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.data):
            raise ShareStateRecordError("record ends early")
        (value,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return int(value)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ShareStateRecordError("record ends early")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise ShareStateRecordError("bad varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.raw(self.uvarint())

    def batches(self) -> list[StateBatch]:
        count = self.uvarint() - 1
        out = []
        for _ in range(max(count, 0)):
            first = self.take(_I64)
            last = self.take(_I64)
            state = self.take(_I8)
            delivery = self.take(_I16)
            self.skip_tags()
            out.append(StateBatch(first, last, state, delivery))
        return out


def decode_key(data: bytes) -> tuple[int, ShareKey] | None:
    """(record type, key) of a share state key; None for another record kind."""
    r = _Reader(bytes(data))
    record_type = r.take(_I16)
    if record_type not in (SNAPSHOT_KEY_TYPE, UPDATE_KEY_TYPE):
        return None
    group = r.raw(r.take(_I16)).decode()
    topic_id = uuid.UUID(bytes=r.raw(16))
    return record_type, ShareKey(group, topic_id, r.take(_I32))


def decode_snapshot(data: bytes) -> ShareState:
    r = _Reader(bytes(data))
    if r.take(_I16) != VALUE_VERSION:
        raise ShareStateRecordError("unknown ShareSnapshotValue version")
    snapshot_epoch = r.take(_I32)
    state_epoch = r.take(_I32)
    leader_epoch = r.take(_I32)
    start = r.take(_I64)
    created = r.take(_I64)
    r.take(_I64)  # write timestamp
    batches = r.batches()
    return ShareState(start, batches, snapshot_epoch, state_epoch, leader_epoch, created)


def apply_update(state: ShareState, data: bytes) -> None:
    """A ShareUpdateValue over the state before it: a new start offset if moved, its
    batches replacing the states of their offsets."""
    r = _Reader(bytes(data))
    if r.take(_I16) != VALUE_VERSION:
        raise ShareStateRecordError("unknown ShareUpdateValue version")
    r.take(_I32)  # snapshot epoch
    state.leader_epoch = r.take(_I32)
    start = r.take(_I64)
    updates = r.batches()
    if start >= 0:
        state.start_offset = start
    per_offset: dict[int, tuple[int, int]] = {}
    for b in state.batches + updates:
        for offset in range(b.first_offset, b.last_offset + 1):
            per_offset[offset] = (b.state, b.delivery_count)
    merged: list[StateBatch] = []
    for offset in sorted(o for o in per_offset if o >= state.start_offset):
        st, count = per_offset[offset]
        last = merged[-1] if merged else None
        if (
            last
            and last.last_offset == offset - 1
            and (last.state, last.delivery_count)
            == (
                st,
                count,
            )
        ):
            merged[-1] = StateBatch(last.first_offset, offset, st, count)
        else:
            merged.append(StateBatch(offset, offset, st, count))
    state.batches = merged


# The store --------------------------------------------------------------------------


class ShareStateStore:
    """Reads and writes share-partition states in ``__share_group_state``."""

    def __init__(self, controller: NodeState, config: BrokerConfig, append: AppendToLeader):
        self.controller = controller
        self.config = config
        self.append = append
        self._loaded: dict[int, dict[ShareKey, ShareState]] = {}
        self._loaded_epoch: dict[int, int] = {}  # the leader epoch each was read at
        self._warned = False

    @property
    def partitions(self) -> int:
        topic = self.controller.topic(SHARE_STATE_TOPIC)
        if topic is not None:
            return topic.partitions
        return int(self.config["share.coordinator.state.topic.num.partitions"])

    def topic_exists(self) -> bool:
        return self.controller.topic(SHARE_STATE_TOPIC) is not None

    def topic_request(self, live_brokers: int) -> tuple[int, int, dict[str, str]]:
        """Partitions, replication factor and configs to create the topic with."""
        return (
            int(self.config["share.coordinator.state.topic.num.partitions"]),
            max(
                1,
                min(
                    int(self.config["share.coordinator.state.topic.replication.factor"]),
                    live_brokers,
                ),
            ),
            {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(self.config["share.coordinator.state.topic.segment.bytes"]),
            },
        )

    def _partition_states(self, partition: int) -> dict[ShareKey, ShareState]:
        """The states a partition holds: kept once read while this node leads it; read
        afresh from the local replica each time otherwise (a follower's copy moves
        under it: describing offsets is what reads it)."""
        if not self.controller.leads(SHARE_STATE_TOPIC, partition):
            self._loaded.pop(partition, None)
            self._loaded_epoch.pop(partition, None)
            return self._replay(partition, announce=False)
        topic = self.controller.topic(SHARE_STATE_TOPIC)
        epoch = topic.leader_epoch_of(partition) if topic is not None else -1
        if self._loaded_epoch.get(partition) != epoch:
            # First use, or led elsewhere in between: what was read may be stale.
            self._loaded.pop(partition, None)
        loaded = self._loaded.get(partition)
        if loaded is not None:
            return loaded
        self._loaded_epoch[partition] = epoch
        loaded = self._loaded[partition] = self._replay(partition)
        return loaded

    def _replay(self, partition: int, *, announce: bool = True) -> dict[ShareKey, ShareState]:
        loaded: dict[ShareKey, ShareState] = {}
        count = 0
        for data, header in replay_batches(self.controller, SHARE_STATE_TOPIC, partition):
            if header.is_control:
                continue
            for record in decode_records(data, header):
                if record.key is None:
                    continue
                try:
                    decoded = decode_key(record.key)
                    if decoded is None:
                        continue
                    record_type, key = decoded
                    if record.value is None:
                        loaded.pop(key, None)
                    elif record_type == SNAPSHOT_KEY_TYPE:
                        loaded[key] = decode_snapshot(record.value)
                    elif key in loaded:
                        apply_update(loaded[key], record.value)
                    count += 1
                except (ShareStateRecordError, UnicodeDecodeError, ValueError) as exc:
                    log.warning("skipping an unreadable record of %s: %s", SHARE_STATE_TOPIC, exc)
        if count and announce:
            log.info(
                "read %d share-partition state(s) from %d record(s) of %s-%d",
                len(loaded),
                count,
                SHARE_STATE_TOPIC,
                partition,
            )
        return loaded

    def partition_of(self, key: ShareKey) -> int:
        return state_partition_for(key, self.partitions)

    def leader_of(self, key: ShareKey) -> int:
        """The node leading the key's state partition (-1: none, or no topic yet)."""
        topic = self.controller.topic(SHARE_STATE_TOPIC)
        if topic is None:
            return -1
        return topic.leader_of(state_partition_for(key, topic.partitions))

    def leads(self, key: ShareKey) -> bool:
        """Whether this node keeps the key's state (leads its state partition)."""
        return self.topic_exists() and self.controller.leads(
            SHARE_STATE_TOPIC, self.partition_of(key)
        )

    def merge(
        self,
        key: ShareKey,
        start_offset: int,
        batches: list[StateBatch],
        now_ms: int,
        *,
        leader_epoch: int = -1,
    ) -> Appended | None:
        """WriteShareGroupState's meaning: the given batches replace the states of their
        offsets, the start offset moves unless -1; written as a whole snapshot (where it
        landed, as ``write`` says)."""
        current = self.read(key)
        state = ShareState(start_offset if start_offset >= 0 else 0)
        if current is not None:
            state = ShareState(
                current.start_offset,
                list(current.batches),
                current.snapshot_epoch,
                current.state_epoch,
                current.leader_epoch,
                current.create_timestamp,
            )
        update = encode_update(state.snapshot_epoch, leader_epoch, start_offset, batches)
        apply_update(state, update)
        if leader_epoch < 0 and current is not None:
            state.leader_epoch = current.leader_epoch
        return self.write(key, state, now_ms)

    def claim(self, key: ShareKey, leader_epoch: int) -> None:
        """The share-partition's leader in ``leader_epoch`` read the state: writes from
        leaders of older epochs are fenced from now on (``fenced``), as Kafka's share
        coordinator keeps the leader epoch a ReadShareGroupState carries."""
        state = self.read(key)
        if state is not None and leader_epoch > state.leader_epoch:
            state.leader_epoch = leader_epoch

    def fenced(self, key: ShareKey, leader_epoch: int, state_epoch: int) -> ErrorCode | None:
        """Why a write of a share-partition's leader in ``leader_epoch`` holding the
        state of ``state_epoch`` must be refused: FENCED_LEADER_EPOCH when a later leader
        has claimed the state, FENCED_STATE_EPOCH when the state was initialized anew
        since (AlterShareGroupOffsets); None when it may be written (-1: not checked)."""
        state = self.read(key)
        if state is None:
            return None
        if 0 <= leader_epoch < state.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if 0 <= state_epoch < state.state_epoch:
            return ErrorCode.fenced_state_epoch
        return None

    def read(self, key: ShareKey) -> ShareState | None:
        if not self.topic_exists():
            return None
        return self._partition_states(state_partition_for(key, self.partitions)).get(key)

    def write(self, key: ShareKey, state: ShareState, now_ms: int) -> Appended | None:
        """Write the state as a snapshot: where it landed (durable once the partition's
        high watermark passes it, which the caller awaits), None when it could not be
        written (no state topic, not led here, the append refused)."""
        if not self.topic_exists():
            return None
        partition = state_partition_for(key, self.partitions)
        states = self._partition_states(partition)
        if key in states:
            state.snapshot_epoch = states[key].snapshot_epoch + 1
            state.create_timestamp = states[key].create_timestamp
        else:
            state.create_timestamp = now_ms
        return self._append(
            partition, [(encode_key(key), encode_snapshot(state, now_ms))], now_ms, key, state
        )

    def delete(self, keys: Iterable[ShareKey], now_ms: int) -> None:
        """Tombstone the states of these keys."""
        if not self.topic_exists():
            return
        by_partition: dict[int, list[ShareKey]] = {}
        for key in keys:
            by_partition.setdefault(state_partition_for(key, self.partitions), []).append(key)
        for partition, doomed in by_partition.items():
            records: list[tuple[bytes, bytes | None]] = []
            for key in doomed:
                records += [
                    (encode_key(key, SNAPSHOT_KEY_TYPE), None),
                    (encode_key(key, UPDATE_KEY_TYPE), None),
                ]
            if self._append(partition, records, now_ms, None, None):
                states = self._partition_states(partition)
                for key in doomed:
                    states.pop(key, None)

    def keys_of_group(self, group_id: str) -> list[ShareKey]:
        """Every key of a group stored in the partitions this node has a replica of."""
        if not self.topic_exists():
            return []
        found: list[ShareKey] = []
        for partition in range(self.partitions):
            if self.controller.partition_log(SHARE_STATE_TOPIC, partition) is not None:
                found += [k for k in self._partition_states(partition) if k.group_id == group_id]
        return found

    def _append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        now_ms: int,
        key: ShareKey | None,
        state: ShareState | None,
    ) -> Appended | None:
        if not self.controller.leads(SHARE_STATE_TOPIC, partition):
            if not self._warned:
                log.warning(
                    "%s-%d is not led here: a share-partition state was not written "
                    "(the writer is told so and answers an error)",
                    SHARE_STATE_TOPIC,
                    partition,
                )
                self._warned = True
            return None
        try:
            appended = append_records(self.append, SHARE_STATE_TOPIC, partition, records, now_ms)
        except OSError:
            log.exception(
                "could not write share-partition state to %s-%d", SHARE_STATE_TOPIC, partition
            )
            return None
        if key is not None and state is not None:
            self._partition_states(partition)[key] = ShareState(
                state.start_offset,
                list(state.batches),
                state.snapshot_epoch,
                state.state_epoch,
                state.leader_epoch,
                state.create_timestamp,
            )
        return appended
