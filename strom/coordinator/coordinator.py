"""The group coordinator of this node: every group, every committed offset.

Owns the registry of groups (classic ones in classic.py, KIP-848 consumer
groups in consumer_group.py), the committed offsets, and their persistence in
the internal compacted topic ``__consumer_offsets`` in Kafka's own record
formats (offsets_topic.py). The topic is created on first use with
``offsets.topic.num.partitions`` partitions and cleanup.policy=compact; a group
lives in partition abs(hashCode(group)) % partitions, as in Kafka. Records are
appended as batches through the partition logs, so consumers of the topic see
them like any other records.

A node coordinates the groups of the ``__consumer_offsets`` partitions it leads.
When it becomes a partition's leader (at start-up too) the partition is replayed
(``load_partition``): the last record per key wins and a tombstone deletes, which
rebuilds classic groups (members, generation, assignments; their sessions restart),
KIP-848 groups (from their records in consumer_group_records.py: group epoch,
members, target and current assignments; sessions restart too), share groups (from
theirs in share_group_records.py, alike) and offsets. When the
leadership moves away the partition's groups are dropped (``unload_partition``;
waiting members are answered NOT_COORDINATOR). An empty group that changes protocol
leaves tombstones for its old kind's records. On a replicated offsets partition an
append does not move the high watermark: the followers' progress does, and
``appended_at`` tells the OffsetCommit handler what to wait for before it answers, as
Kafka's coordinator waits for its acks=all write.

Offsets of an empty group expire ``offsets.retention.minutes`` after the group
became empty (after their commit for groups that never had a protocol); a
check runs every ``offsets.retention.check.interval.ms`` and writes tombstones.
An empty group with no offsets left is then deleted. Deleting a topic
tombstones every group's offsets of it (DeleteTopics calls ``forget_topic``).

Offsets committed inside a transaction (TxnOffsetCommit, KIP-98/447) are written as a
transactional batch of the producer and held apart, per producer id, until the
transaction's marker reaches the group's offsets partition (``complete_transaction``):
a commit makes them the group's offsets, an abort drops them. A replay does the same
with the markers it meets; offsets still pending make OffsetFetch with require_stable
answer UNSTABLE_OFFSET_COMMIT for their partitions.

Talks to storage through the cluster controller, never to sockets: the wire
handlers (strom.broker.handlers.groups.classic_groups, offsets, consumer_groups) call it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.coordinator import consumer_group_records, share_group_records
from strom.coordinator.classic import ClassicGroup, GroupState
from strom.coordinator.consumer_group import ConsumerGroup, ConsumerGroupMember
from strom.coordinator.consumer_group_records import ConsumerGroupKey
from strom.coordinator.internal_log import (
    CONTROL_COMMIT,
    AppendToLeader,
    append_records,
    replay_batches,
)
from strom.coordinator.offsets_topic import (
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupKey,
    OffsetKey,
    OffsetsRecordError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key,
    group_value,
    offset_key,
    offset_value,
    partition_for,
)
from strom.coordinator.share_group import ShareGroup
from strom.coordinator.share_group_records import ShareGroupKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records import control_type, decode_records
from strom.storage.errors import StorageError
from strom.storage.producer_state import InvalidProducerEpochError

if TYPE_CHECKING:
    from strom.cluster.node_state import NodeState
    from strom.config import BrokerConfig

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# A key of __consumer_offsets: a classic group's, an offset's, a KIP-848 or a share group's.
RecordKey = GroupKey | OffsetKey | ConsumerGroupKey | ShareGroupKey


@dataclass(frozen=True)
class NewOffsetsTopic:
    partitions: int
    replication_factor: int
    configs: dict[str, str]


@dataclass(slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    # OffsetCommit v2-4's retention time: the offset expires this long after the commit
    # (once its group is empty) instead of offsets.retention.minutes; -1 for the default.
    retention_ms: int = -1
    # OffsetCommit v1's commit timestamp per partition; -1: the time of the commit.
    commit_timestamp_ms: int = -1


class GroupCoordinator:
    def __init__(
        self,
        controller: NodeState,
        config: BrokerConfig,
        append: AppendToLeader,
    ) -> None:
        self.controller = controller
        self.config = config
        self.append = append  # the leader's one append path (the broker's)
        self.groups: dict[str, ClassicGroup | ConsumerGroup | ShareGroup] = {}
        # Share groups' hooks into the share-partitions of this node (the share fetch
        # side sets them): a member gone, a group deleted.
        self.share_member_gone: Callable[[str, str], None] | None = None
        self.share_group_deleted: Callable[[str], None] | None = None
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._expiry_task: asyncio.Task[None] | None = None
        # producer id -> group -> offsets committed in its open transaction
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self.loaded: set[int] = set()  # offsets partitions whose groups are held here
        # (partition, end offset, leader epoch) of the last append, for a caller that
        # waits for it to be replicated.
        self.appended_at: tuple[int, int, int] | None = None

    # Settings -------------------------------------------------------------------

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    @property
    def initial_rebalance_delay_ms(self) -> int:
        return int(self.config["group.initial.rebalance.delay.ms"])

    @property
    def max_group_size(self) -> int:
        return int(self.config["group.max.size"])

    @property
    def retention_ms(self) -> int:
        return int(self.config["offsets.retention.minutes"]) * 60_000

    def session_timeout_allowed(self, session_timeout_ms: int) -> bool:
        return (
            int(self.config["group.min.session.timeout.ms"])
            <= session_timeout_ms
            <= int(self.config["group.max.session.timeout.ms"])
        )

    @property
    def offsets_partitions(self) -> int:
        topic = self.controller.topic(OFFSETS_TOPIC)
        if topic is not None:
            return topic.partitions
        return int(self.config["offsets.topic.num.partitions"])

    def is_coordinator_for(self, group_id: str) -> bool:
        """Whether this node leads the group's ``__consumer_offsets`` partition (any
        node may answer while the topic does not exist yet)."""
        topic = self.controller.topic(OFFSETS_TOPIC)
        if topic is None:
            return True
        return topic.leader_of(partition_for(group_id, topic.partitions)) == self.controller.node_id

    # Lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Load the offsets partitions this node leads and start the timers (inside
        the event loop)."""
        topic = self.controller.topic(OFFSETS_TOPIC)
        if topic is not None:
            for partition in range(topic.partitions):
                if topic.leader_of(partition) == self.controller.node_id:
                    self.load_partition(partition)
        interval = max(int(self.config["offsets.retention.check.interval.ms"]), 1) / 1000
        self._expiry_task = asyncio.get_running_loop().create_task(self._expire_loop(interval))

    def stop(self) -> None:
        if self._expiry_task is not None:
            self._expiry_task.cancel()
        for group in self.groups.values():
            group.mark_dead()

    def load_partition(self, partition: int) -> None:
        """This node now leads ``__consumer_offsets``-``partition``: replay its groups."""
        if partition in self.loaded:
            return
        started = time.monotonic()
        self.loaded.add(partition)
        before = set(self.groups)
        records = self._replay([partition])
        for group_id, group in self.groups.items():
            if group_id not in before:
                group.start_sessions()
        if records:
            log.info(
                "loaded %d group(s) from %d record(s) of %s-%d in %.2fs",
                len(set(self.groups) - before),
                records,
                OFFSETS_TOPIC,
                partition,
                time.monotonic() - started,
            )

    def unload_partition(self, partition: int) -> None:
        """Another node leads ``__consumer_offsets``-``partition`` now: drop its groups."""
        if partition not in self.loaded:
            return
        self.loaded.discard(partition)
        count = self.offsets_partitions
        moved = [g for g in self.groups if partition_for(g, count) == partition]
        moved += [
            g for g in self.offsets if g not in self.groups and partition_for(g, count) == partition
        ]
        for group_id in moved:
            group = self.groups.pop(group_id, None)
            if group is not None:
                if isinstance(group, ClassicGroup):
                    group.mark_dead(ErrorCode.not_coordinator)
                else:
                    group.mark_dead()
            self.offsets.pop(group_id, None)
        for producer_id, groups in list(self.pending_txn.items()):
            for group_id in [g for g in groups if partition_for(g, count) == partition]:
                del groups[group_id]
            if not groups:
                del self.pending_txn[producer_id]
        if moved:
            log.info(
                "%s-%d led elsewhere now: %d group(s) unloaded",
                OFFSETS_TOPIC,
                partition,
                len(moved),
            )

    async def _expire_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.expire_offsets()
            except Exception:
                log.exception("offset expiration failed")

    # The offsets topic ------------------------------------------------------------

    def offsets_topic_request(self, live_brokers: int) -> NewOffsetsTopic:
        """What to create ``__consumer_offsets`` with (FindCoordinator asks the controller
        for it, as Kafka does, when it does not exist yet)."""
        return NewOffsetsTopic(
            partitions=int(self.config["offsets.topic.num.partitions"]),
            replication_factor=max(
                1, min(int(self.config["offsets.topic.replication.factor"]), live_brokers)
            ),
            configs={
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(self.config["offsets.topic.segment.bytes"]),
            },
        )

    def _append(
        self,
        group_id: str,
        records: list[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> None:
        if not records:
            return
        partition = partition_for(group_id, self.offsets_partitions)
        appended = append_records(
            self.append, OFFSETS_TOPIC, partition, records, self.now_ms(), producer=producer
        )
        self.appended_at = (appended.partition, appended.end_offset, appended.leader_epoch)

    def store_group(self, group: ClassicGroup) -> None:
        """Write a classic group's GroupMetadataValue (called on every transition)."""
        try:
            self._append(
                group.group_id, [(group_key(group.group_id), group_value(group.to_record()))]
            )
        except OSError:
            log.exception("could not store the metadata of group %s", group.group_id)

    def store_consumer_group(
        self, group_id: str, records: list[tuple[bytes, bytes | None]]
    ) -> None:
        """Write a KIP-848 group's changed records (consumer_group_records.py)."""
        try:
            self._append(group_id, records)
        except OSError:
            log.exception("could not store the state of group %s", group_id)

    def _replay(self, partitions: Iterable[int]) -> int:
        topic = self.controller.topic(OFFSETS_TOPIC)
        if topic is None:
            return 0
        count = 0
        records: dict[RecordKey, bytes | None] = {}
        for partition in partitions:
            # Offsets of open transactions wait for their marker, per producer id.
            open_txns: dict[int, dict[RecordKey, bytes | None]] = {}
            for data, header in replay_batches(self.controller, OFFSETS_TOPIC, partition):
                if header.is_control:
                    held = open_txns.pop(header.producer_id, None)
                    if held and control_type(data, header) == CONTROL_COMMIT:
                        records.update(held)
                    continue
                target = (
                    open_txns.setdefault(header.producer_id, {})
                    if header.is_transactional
                    else records
                )
                for record in decode_records(data, header):
                    if record.key is None:
                        continue
                    key: RecordKey | None
                    try:
                        key = (
                            decode_key(record.key)
                            or consumer_group_records.decode_key(record.key)
                            or share_group_records.decode_key(record.key)
                        )
                    except OffsetsRecordError:
                        key = None
                    if key is None:
                        continue
                    target[key] = record.value
                    count += 1
            for producer_id, held in open_txns.items():
                for key, value in held.items():
                    if isinstance(key, OffsetKey) and value is not None:
                        try:
                            offset = decode_offset_value(value)
                        except OffsetsRecordError:
                            continue
                        groups = self.pending_txn.setdefault(producer_id, {})
                        groups.setdefault(key.group, {})[(key.topic, key.partition)] = offset
        consumer_groups: dict[str, dict[ConsumerGroupKey, bytes]] = {}
        share_groups: dict[str, dict[ShareGroupKey, bytes]] = {}
        for key, value in records.items():
            if isinstance(key, ConsumerGroupKey):
                if value is not None:
                    consumer_groups.setdefault(key.group, {})[key] = value
                continue
            if isinstance(key, ShareGroupKey):
                if value is not None:
                    share_groups.setdefault(key.group, {})[key] = value
                continue
            try:
                self._apply(key, value)
            except OffsetsRecordError as exc:
                log.warning("skipping an unreadable record of %s: %s", OFFSETS_TOPIC, exc)
        for group_id, group_records in consumer_groups.items():
            try:
                self._restore_consumer_group(group_id, group_records)
            except OffsetsRecordError as exc:
                log.warning("skipping unreadable records of group %s: %s", group_id, exc)
        for group_id, found in share_groups.items():
            if ShareGroupKey(share_group_records.GROUP_METADATA, group_id) not in found:
                continue  # deleted: the rest are leftovers
            if group_id in self.groups:
                log.warning("group %s has records of two kinds: share records ignored", group_id)
                continue
            share = ShareGroup(group_id, self, self.share_member_gone)
            try:
                share.restore(found)
            except OffsetsRecordError as exc:
                log.warning("skipping unreadable records of share group %s: %s", group_id, exc)
                continue
            self.groups[group_id] = share
        return count

    def _restore_consumer_group(self, group_id: str, found: dict[ConsumerGroupKey, bytes]) -> None:
        """Rebuild a KIP-848 group from the live values of its keys; without a
        ConsumerGroupMetadata value (deleted) the rest is ignored."""
        cgr = consumer_group_records
        epoch_value = found.get(ConsumerGroupKey(cgr.GROUP_METADATA, group_id))
        if epoch_value is None:
            return
        existing = self.groups.get(group_id)
        if isinstance(existing, ClassicGroup) and not existing.is_empty():
            log.warning("group %s has classic members and KIP-848 records: kept classic", group_id)
            return
        assignment_value = found.get(ConsumerGroupKey(cgr.TARGET_ASSIGNMENT_METADATA, group_id))
        members: list[ConsumerGroupMember] = []
        target: dict[str, consumer_group_records.TopicPartitions] = {}
        for key, value in found.items():
            if key.member_id is None:
                continue
            if key.record_type == cgr.MEMBER_METADATA:
                current = found.get(
                    ConsumerGroupKey(cgr.CURRENT_MEMBER_ASSIGNMENT, group_id, key.member_id)
                )
                members.append(
                    ConsumerGroupMember.restored(
                        key.member_id,
                        cgr.decode_member_metadata_value(value),
                        None if current is None else cgr.decode_current_assignment_value(current),
                    )
                )
            elif key.record_type == cgr.TARGET_ASSIGNMENT_MEMBER:
                target[key.member_id] = cgr.decode_target_assignment_member_value(value)
        group = ConsumerGroup(group_id, self)
        group.restore(
            cgr.decode_epoch_value(epoch_value),
            0 if assignment_value is None else cgr.decode_epoch_value(assignment_value),
            members,
            target,
        )
        self.groups[group_id] = group

    def _apply(self, key: GroupKey | OffsetKey, value: bytes | None) -> None:
        if isinstance(key, OffsetKey):
            offsets = self.offsets.setdefault(key.group, {})
            if value is None:
                offsets.pop((key.topic, key.partition), None)
                if not offsets:
                    del self.offsets[key.group]
            else:
                offsets[(key.topic, key.partition)] = decode_offset_value(value)
                if key.group not in self.groups:
                    self.groups[key.group] = ClassicGroup(key.group, self)
            return
        if value is None:
            self.groups.pop(key.group, None)
            return
        group = self.groups.get(key.group)
        if not isinstance(group, ClassicGroup):
            group = ClassicGroup(key.group, self)
            self.groups[key.group] = group
        group.restore(decode_group_value(value))

    # Groups -------------------------------------------------------------------------

    def classic_group(self, group_id: str, *, create: bool) -> ClassicGroup | None:
        """The classic group of this id; ``create`` also turns an empty KIP-848 group."""
        group = self.groups.get(group_id)
        if isinstance(group, ClassicGroup):
            return group
        if not create or isinstance(group, ShareGroup):
            return None
        if group is not None and not group.is_empty():
            return None
        if group is not None:
            group.mark_dead()
            self._write_conversion(group_id, group.tombstones())
        created = ClassicGroup(group_id, self)
        self.groups[group_id] = created
        return created

    def consumer_group(self, group_id: str, *, create: bool) -> ConsumerGroup | None:
        """The KIP-848 group of this id; ``create`` also turns an empty classic group."""
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if not create or isinstance(group, ShareGroup):
            return None
        if group is not None and not group.is_empty():
            return None
        if group is not None:
            group.mark_dead()
            self._write_conversion(group_id, [(group_key(group_id), None)])
        created = ConsumerGroup(group_id, self)
        self.groups[group_id] = created
        return created

    def share_group(self, group_id: str, *, create: bool) -> ShareGroup | None:
        """The share group of this id (None when the id is another kind's group)."""
        group = self.groups.get(group_id)
        if isinstance(group, ShareGroup):
            return group
        if not create or group is not None:
            return None
        created = ShareGroup(group_id, self, self.share_member_gone)
        self.groups[group_id] = created
        return created

    def _write_conversion(
        self, group_id: str, tombstones: list[tuple[bytes, bytes | None]]
    ) -> None:
        """An empty group changes protocol: the records of its old kind go."""
        try:
            self._append(group_id, tombstones)
        except OSError:
            log.exception("could not remove the old records of group %s", group_id)

    def group_exists(self, group_id: str) -> bool:
        return group_id in self.groups

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if not group.is_empty():
            return ErrorCode.non_empty_group
        offsets = self.offsets.get(group_id, {})
        records: list[tuple[bytes, bytes | None]] = [
            (offset_key(group_id, t, p), None) for t, p in offsets
        ]
        if isinstance(group, ConsumerGroup):
            records += group.tombstones()
        elif isinstance(group, ShareGroup):
            records += group.tombstones()
            if self.share_group_deleted is not None:
                self.share_group_deleted(group_id)
        else:
            records.append((group_key(group_id), None))
        try:
            self._append(group_id, records)
        except OSError:
            log.exception("could not delete group %s", group_id)
            return ErrorCode.coordinator_not_available
        self.offsets.pop(group_id, None)
        group.mark_dead()
        del self.groups[group_id]
        log.info("deleted group %s", group_id)
        return ErrorCode.none

    def list_groups(self) -> Iterable[ClassicGroup | ConsumerGroup | ShareGroup]:
        return list(self.groups.values())

    # Offsets -------------------------------------------------------------------------

    def validate_commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance: str | None,
        api_version: int = 9,
    ) -> ErrorCode:
        """Whether this member may commit for the group now (the group-level check). A
        group that does not exist is created by a commit with generation (or member
        epoch) -1, whatever member id comes with it (a simple consumer, an admin tool, or
        a new-protocol consumer that made up its id), as Kafka does; with a generation it
        is GROUP_ID_NOT_FOUND from v9 on and ILLEGAL_GENERATION before."""
        group = self.groups.get(group_id)
        if group is None:
            if generation < 0:
                return ErrorCode.none  # the commit creates a simple (classic, empty) group
            if api_version >= 9:
                return ErrorCode.group_id_not_found
            return ErrorCode.illegal_generation
        return group.validate_commit(generation, member_id, instance)

    def commit_offsets(self, group_id: str, offsets: list[OffsetToCommit]) -> list[ErrorCode]:
        """Store offsets (already validated for the group); an error per entry."""
        max_metadata = int(self.config["offset.metadata.max.bytes"])
        now = self.now_ms()
        errors: list[ErrorCode] = []
        records: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[TopicPartition, CommittedOffset]] = []
        for entry in offsets:
            topic = self.controller.topic(entry.topic)
            metadata = entry.metadata or ""
            if topic is None or not 0 <= entry.partition < topic.partitions:
                errors.append(ErrorCode.unknown_topic_or_partition)
            elif len(metadata.encode()) > max_metadata:
                errors.append(ErrorCode.offset_metadata_too_large)
            else:
                expire = now + entry.retention_ms if entry.retention_ms >= 0 else -1
                committed_at = now if entry.commit_timestamp_ms == -1 else entry.commit_timestamp_ms
                value = CommittedOffset(
                    entry.offset, entry.leader_epoch, metadata, committed_at, expire
                )
                records.append(
                    (offset_key(group_id, entry.topic, entry.partition), offset_value(value))
                )
                accepted.append(((entry.topic, entry.partition), value))
                errors.append(ErrorCode.none)
        if records:
            try:
                self._append(group_id, records)
            except OSError:
                log.exception("could not store offsets of group %s", group_id)
                return [ErrorCode.coordinator_not_available for _ in offsets]
            if group_id not in self.groups:
                self.groups[group_id] = ClassicGroup(group_id, self)
            stored = self.offsets.setdefault(group_id, {})
            for key, value in accepted:
                stored[key] = value
        return errors

    async def commit_txn_offsets(
        self,
        group_id: str,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        instance: str | None,
        offsets: list[OffsetToCommit],
        *,
        wait_replicated: Callable[[TopicPartition, int, int, float], Awaitable[bool]],
    ) -> list[ErrorCode]:
        """TxnOffsetCommit: store offsets as part of the producer's transaction; they
        become the group's offsets when its commit marker arrives."""
        if not group_id:
            return [ErrorCode.invalid_group_id for _ in offsets]
        if not self.is_coordinator_for(group_id):
            return [ErrorCode.not_coordinator for _ in offsets]
        if generation >= 0 or member_id or instance is not None:
            group = self.groups.get(group_id)
            error = (
                ErrorCode.illegal_generation
                if group is None
                else group.validate_commit(generation, member_id, instance)
            )
            if error != ErrorCode.none:
                return [error for _ in offsets]
        max_metadata = int(self.config["offset.metadata.max.bytes"])
        now = self.now_ms()
        errors: list[ErrorCode] = []
        records: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[TopicPartition, CommittedOffset]] = []
        for entry in offsets:
            topic = self.controller.topic(entry.topic)
            metadata = entry.metadata or ""
            if topic is None or not 0 <= entry.partition < topic.partitions:
                errors.append(ErrorCode.unknown_topic_or_partition)
            elif len(metadata.encode()) > max_metadata:
                errors.append(ErrorCode.offset_metadata_too_large)
            else:
                value = CommittedOffset(entry.offset, entry.leader_epoch, metadata, now)
                records.append(
                    (offset_key(group_id, entry.topic, entry.partition), offset_value(value))
                )
                accepted.append(((entry.topic, entry.partition), value))
                errors.append(ErrorCode.none)
        if not records:
            return errors
        self.appended_at = None
        try:
            self._append(group_id, records, producer=(producer_id, producer_epoch))
        except InvalidProducerEpochError:
            return [ErrorCode.producer_fenced if e == ErrorCode.none else e for e in errors]
        except (OSError, StorageError):
            log.exception("could not store transactional offsets of group %s", group_id)
            return [ErrorCode.coordinator_not_available for _ in offsets]
        pending = self.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
        for key, value in accepted:
            pending[key] = value
        waiting = self.appended_at
        if waiting is not None:
            topic = self.controller.topic(OFFSETS_TOPIC)
            state = topic.states.get(waiting[0]) if topic is not None else None
            if state is not None and len(state.replicas) > 1:
                timeout_s = int(self.config["offsets.commit.timeout.ms"]) / 1000
                if not await wait_replicated(
                    (OFFSETS_TOPIC, waiting[0]), waiting[1], waiting[2], timeout_s
                ):
                    return [
                        ErrorCode.coordinator_not_available if e == ErrorCode.none else e
                        for e in errors
                    ]
        return errors

    def complete_transaction(self, producer_id: int, commit: bool, offsets_partition: int) -> None:
        """A transaction marker was written to ``__consumer_offsets``-``offsets_partition``:
        the producer's pending offsets of the groups there take effect or are dropped."""
        groups = self.pending_txn.get(producer_id)
        if not groups:
            return
        count = self.offsets_partitions
        for group_id in [g for g in groups if partition_for(g, count) == offsets_partition]:
            held = groups.pop(group_id)
            if not commit:
                continue
            if group_id not in self.groups:
                self.groups[group_id] = ClassicGroup(group_id, self)
            self.offsets.setdefault(group_id, {}).update(held)
        if not groups:
            del self.pending_txn[producer_id]

    def has_pending_txn_offset(self, group_id: str, topic_partition: TopicPartition) -> bool:
        """Whether an open transaction has committed an offset of this partition."""
        return any(
            topic_partition in groups.get(group_id, ()) for groups in self.pending_txn.values()
        )

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return self.offsets.get(group_id, {})

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> None:
        stored = self.offsets.get(group_id, {})
        doomed = [tp for tp in partitions if tp in stored]
        if not doomed:
            return
        self._append(group_id, [(offset_key(group_id, t, p), None) for t, p in doomed])
        for tp in doomed:
            del stored[tp]
        if not stored:
            self.offsets.pop(group_id, None)

    def forget_topic(self, topic: str) -> None:
        """Tombstone every group's offsets of a deleted topic, as Kafka does."""
        for group_id in list(self.offsets):
            doomed = [tp for tp in self.offsets[group_id] if tp[0] == topic]
            if doomed:
                try:
                    self.delete_offsets(group_id, doomed)
                except OSError:
                    log.exception("could not delete offsets of %s for group %s", topic, group_id)

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Tombstone the expired offsets of empty groups; returns how many went."""
        now = self.now_ms() if now_ms is None else now_ms
        retention = self.retention_ms
        expired_total = 0
        for group_id in list(set(self.offsets) | set(self.groups)):
            group = self.groups.get(group_id)
            if isinstance(group, ShareGroup) or (group is not None and not group.is_empty()):
                continue  # a share group has no offsets to expire; its state stays
            stored = self.offsets.get(group_id, {})
            uses_protocol = isinstance(group, ClassicGroup) and group.protocol_type
            expired = []
            for tp, value in stored.items():
                if value.expire_timestamp >= 0:
                    deadline = value.expire_timestamp
                else:
                    base = (
                        group.state_timestamp
                        if uses_protocol and group
                        else (value.commit_timestamp)
                    )
                    deadline = base + retention
                if deadline <= now:
                    expired.append(tp)
            if expired:
                try:
                    self.delete_offsets(group_id, expired)
                except OSError:
                    log.exception("could not expire offsets of group %s", group_id)
                    continue
                expired_total += len(expired)
                log.info("expired %d offset(s) of group %s", len(expired), group_id)
            if (
                group is not None
                and group_id not in self.offsets
                and (not isinstance(group, ClassicGroup) or group.state == GroupState.EMPTY)
            ):
                self.delete_group(group_id)
        return expired_total
