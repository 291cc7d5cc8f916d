"""Share groups (KIP-932) in the group coordinator: membership and assignment.

Owns one share group: its members (member id chosen by the client, epoch, subscribed
topic names, rack, client id and host), the group epoch (bumped when membership,
subscriptions or the subscribed topics' partitions change), and the target assignment
computed by the share group assignor whenever the group epoch moved past the
assignment epoch. A share group needs no revocation: records, not partitions, are what
members hold, so a member takes its new assignment (and the assignment epoch as its
member epoch) at its next heartbeat.

The assignor (``share_assign``), as Kafka's SimpleAssignor for share groups spreads
partitions: per topic, over the members subscribed to it (sorted by member id); with at
least as many partitions as members each partition goes to one member, round robin;
with fewer, every member gets one partition and a partition goes to several members.

A member that sends no heartbeat for the group's ``share.session.timeout.ms``
(else the broker's ``group.share.session.timeout.ms``) is removed; members are told
``share.heartbeat.interval.ms`` (else ``group.share.heartbeat.interval.ms``). At most
``group.share.max.size`` members (GROUP_MAX_SIZE_REACHED past it).

Kept in ``__consumer_offsets`` as Kafka keeps it (share_group_records.py): the group
epoch, each member's metadata, the target assignment and each member's current
assignment are written when they change (a member's, or everything after a group or
assignment epoch change), and a member that left is tombstoned; the coordinator that
loads the partition next (after a restart or a move) restores the group from them, so
members go on heartbeating with their epochs (their session timers start afresh). The
share partitions' delivery state is durable apart (share_state.py). Not owned here:
the wire (strom/broker/handlers/groups/share_groups.py), the records' delivery state
(share_partition.py).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from strom.config import GROUP_CONFIGS
from strom.coordinator import share_group_records as sgr
from strom.coordinator.group_host import RecordsHost
from strom.coordinator.offsets_topic import OFFSETS_TOPIC
from strom.coordinator.share_group_records import ShareGroupKey
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


LEAVE_EPOCH = -1
TopicAssignment = dict[uuid.UUID, set[int]]


def share_assign(
    subscriptions: Mapping[str, set[str]], topics: Mapping[str, int]
) -> dict[str, dict[str, set[int]]]:
    """{member: {topic: partitions}} for members subscribed to topics of the given
    partition counts (the share group assignor)."""
    result: dict[str, dict[str, set[int]]] = {m: {} for m in subscriptions}
    for topic in sorted(topics):
        count = topics[topic]
        members = sorted(m for m, subs in subscriptions.items() if topic in subs)
        if not members or count <= 0:
            continue
        if count >= len(members):
            for p in range(count):
                result[members[p % len(members)]].setdefault(topic, set()).add(p)
        else:
            for i, member in enumerate(members):
                result[member].setdefault(topic, set()).add(i % count)
    return result


@dataclass(slots=True)
class ShareHeartbeat:
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: list[str] | None
    client_id: str
    client_host: str


@dataclass(slots=True)
class ShareHeartbeatResult:
    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicAssignment | None = None
    message: str | None = None


@dataclass(slots=True)
class ShareGroupMember:
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    epoch: int = 0
    previous_epoch: int = 0
    assigned: TopicAssignment = field(default_factory=dict)
    last_sent: TopicAssignment | None = None
    session_timer: asyncio.TimerHandle | None = None

    def stop_timers(self) -> None:
        if self.session_timer is not None:
            self.session_timer.cancel()
            self.session_timer = None


class ShareGroup:
    kind = "share"
    protocol_type = "share"
    assignor_name = "simple"

    def __init__(
        self,
        group_id: str,
        coordinator: RecordsHost,
        on_member_gone: Callable[[str, str], None] | None = None,
    ) -> None:
        self.group_id = group_id
        self.coordinator = coordinator
        self.members: dict[str, ShareGroupMember] = {}
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.target: dict[str, TopicAssignment] = {}
        self.topic_snapshot: dict[str, tuple[uuid.UUID, int]] = {}
        self.dead = False
        self.state_timestamp = coordinator.now_ms()
        # Called with (group id, member id) when a member leaves or is removed, so that
        # what it holds is released at once rather than when its locks expire.
        self.on_member_gone = on_member_gone
        # What was last written to __consumer_offsets, per key, and at which epochs.
        self._written: dict[ShareGroupKey, bytes] = {}
        self._written_epochs = (0, 0)

    # Reads -------------------------------------------------------------------------

    @property
    def state_name(self) -> str:
        if self.dead:
            return "Dead"
        return "Stable" if self.members else "Empty"

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        meta = self.coordinator.controller.metadata.by_id.get(topic_id)
        return meta.name if meta else None

    def setting(self, key: str) -> int:
        """A share group config (``share.session.timeout.ms``...): the group's own value,
        else the broker's."""
        raw = self.coordinator.controller.image.group_configs(self.group_id).get(key)
        if raw is not None:
            try:
                return int(raw)
            except ValueError:
                pass  # validated when set; the broker's value stands in for a bad one
        broker_name = GROUP_CONFIGS[key].broker_name or key
        return int(self.coordinator.config[broker_name])

    def validate_commit(self, epoch: int, member_id: str, instance: str | None) -> ErrorCode:
        """Offsets are not committed to a share group."""
        return ErrorCode.group_id_not_found

    def tombstones(self) -> list[tuple[bytes, bytes | None]]:
        """Every record the group has in __consumer_offsets, as tombstones (the members'
        first, as Kafka orders them)."""
        keys = sorted(self._written, key=lambda k: (k.member_id is None, k.record_type))
        return [(sgr.key_bytes(k), None) for k in keys]

    # __consumer_offsets ------------------------------------------------------------

    def _records(self, members: list[ShareGroupMember] | None) -> dict[ShareGroupKey, bytes]:
        """The group's records: its own and those of ``members`` (None: every member)."""
        gid = self.group_id
        out = {
            ShareGroupKey(sgr.GROUP_METADATA, gid): sgr.epoch_value(self.group_epoch),
            ShareGroupKey(sgr.TARGET_ASSIGNMENT_METADATA, gid): sgr.epoch_value(
                self.assignment_epoch
            ),
        }
        for member in self.members.values() if members is None else members:
            mid = member.member_id
            out[ShareGroupKey(sgr.MEMBER_METADATA, gid, mid)] = sgr.member_metadata_value(
                sgr.MemberMetadata(
                    member.rack_id,
                    member.client_id,
                    member.client_host,
                    list(member.subscribed_topic_names),
                )
            )
            out[ShareGroupKey(sgr.TARGET_ASSIGNMENT_MEMBER, gid, mid)] = (
                sgr.target_assignment_member_value(self.target.get(mid, {}))
            )
            out[ShareGroupKey(sgr.CURRENT_MEMBER_ASSIGNMENT, gid, mid)] = (
                sgr.current_assignment_value(
                    sgr.CurrentAssignment(member.epoch, member.previous_epoch, member.assigned)
                )
            )
        return out

    def _persist(self, member: ShareGroupMember | None = None) -> None:
        """Write what changed since the last write: every record after a group or
        assignment epoch change or without ``member``, else ``member``'s (and the
        group's own); members gone are tombstoned. Nothing while ``__consumer_offsets``
        does not exist (a client that did not ask FindCoordinator first): the first
        write after it does is a whole one."""
        if self.coordinator.controller.topic(OFFSETS_TOPIC) is None:
            self._written_epochs = (-1, -1)
            return
        full = member is None or self._written_epochs != (self.group_epoch, self.assignment_epoch)
        desired = self._records(None if full or member is None else [member])
        changes: list[tuple[bytes, bytes | None]] = [
            (sgr.key_bytes(k), v) for k, v in desired.items() if self._written.get(k) != v
        ]
        if full:
            gone = sorted(
                (k for k in self._written if k not in desired),
                key=lambda k: (k.member_id or "", -k.record_type),
            )
            changes += [(sgr.key_bytes(k), None) for k in gone]
            for key in gone:
                del self._written[key]
        self._written.update(desired)
        self._written_epochs = (self.group_epoch, self.assignment_epoch)
        if changes:
            self.coordinator.store_consumer_group(self.group_id, changes)

    def restore(self, found: Mapping[ShareGroupKey, bytes]) -> None:
        """Take the group's state from its live records (a coordinator loading the
        partition): epochs, members with their epochs and assignments, the target."""
        gid = self.group_id
        group_epoch = found.get(ShareGroupKey(sgr.GROUP_METADATA, gid))
        assignment_epoch = found.get(ShareGroupKey(sgr.TARGET_ASSIGNMENT_METADATA, gid))
        self.group_epoch = 0 if group_epoch is None else sgr.decode_epoch_value(group_epoch)
        self.assignment_epoch = (
            0 if assignment_epoch is None else sgr.decode_epoch_value(assignment_epoch)
        )
        for key, value in found.items():
            if key.member_id is None:
                continue
            if key.record_type == sgr.TARGET_ASSIGNMENT_MEMBER:
                self.target[key.member_id] = sgr.decode_target_assignment_member_value(value)
            elif key.record_type == sgr.MEMBER_METADATA:
                metadata = sgr.decode_member_metadata_value(value)
                member = ShareGroupMember(
                    key.member_id,
                    metadata.rack_id,
                    metadata.client_id,
                    metadata.client_host,
                    metadata.subscribed_topic_names,
                )
                current = found.get(
                    ShareGroupKey(sgr.CURRENT_MEMBER_ASSIGNMENT, gid, key.member_id)
                )
                if current is not None:
                    assignment = sgr.decode_current_assignment_value(current)
                    member.epoch = assignment.member_epoch
                    member.previous_epoch = assignment.previous_member_epoch
                    member.assigned = assignment.assigned
                self.members[key.member_id] = member
        self.target = {m: t for m, t in self.target.items() if m in self.members}
        self.topic_snapshot = self._subscribed_topic_metadata()
        self._written = dict(found)  # what is not rebuilt goes at the next full write
        self._written_epochs = (self.group_epoch, self.assignment_epoch)

    # Heartbeat ---------------------------------------------------------------------

    def heartbeat(self, request: ShareHeartbeat) -> ShareHeartbeatResult:
        interval = self.setting("share.heartbeat.interval.ms")
        epoch = request.member_epoch
        if epoch == LEAVE_EPOCH:
            member = self.members.get(request.member_id)
            if member is None:
                return ShareHeartbeatResult(
                    ErrorCode.unknown_member_id, request.member_id, epoch, interval
                )
            log.info("share group %s: member %s left", self.group_id, member.member_id)
            self._remove(member)
            self._persist()
            return ShareHeartbeatResult(ErrorCode.none, member.member_id, epoch, interval)
        member = self.members.get(request.member_id)
        if epoch == 0:
            limit = int(self.coordinator.config["group.share.max.size"])
            if member is None and len(self.members) >= limit:
                return ShareHeartbeatResult(
                    ErrorCode.group_max_size_reached,
                    request.member_id,
                    epoch,
                    interval,
                    message=f"The share group has reached its maximum size of {limit} members"
                    " (group.share.max.size)",
                )
            if member is None:
                member = ShareGroupMember(
                    request.member_id,
                    request.rack_id,
                    request.client_id,
                    request.client_host,
                    list(request.subscribed_topic_names or []),
                )
                self.members[member.member_id] = member
                log.info(
                    "share group %s: member %s joined (%s)",
                    self.group_id,
                    member.member_id,
                    ",".join(member.subscribed_topic_names),
                )
                self._bump()
            else:
                member.last_sent = None  # a rejoin is told its assignment again
        elif member is None:
            return ShareHeartbeatResult(
                ErrorCode.unknown_member_id,
                request.member_id,
                epoch,
                interval,
                message=f"Member {request.member_id} is not a member of share group "
                f"{self.group_id}",
            )
        elif epoch != member.epoch:
            return ShareHeartbeatResult(
                ErrorCode.fenced_member_epoch,
                request.member_id,
                epoch,
                interval,
                message=f"The share group member has a smaller member epoch ({epoch}) than "
                f"the one known by the group coordinator ({member.epoch}). The member must "
                "abandon all its partitions and rejoin.",
            )
        if (
            request.subscribed_topic_names is not None
            and list(request.subscribed_topic_names) != member.subscribed_topic_names
        ):
            member.subscribed_topic_names = list(request.subscribed_topic_names)
            self._bump()
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        self._touch(member)
        self._refresh_topics()
        self._maybe_assign()
        member.assigned = {t: set(ps) for t, ps in self.target.get(member.member_id, {}).items()}
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        assignment = None
        if member.last_sent != member.assigned:
            assignment = {t: set(ps) for t, ps in member.assigned.items()}
            member.last_sent = assignment
        self._persist(member)
        return ShareHeartbeatResult(
            ErrorCode.none, member.member_id, member.epoch, interval, assignment
        )

    def _bump(self) -> None:
        self.group_epoch += 1
        self.state_timestamp = self.coordinator.now_ms()

    def _subscribed_topic_metadata(self) -> dict[str, tuple[uuid.UUID, int]]:
        metadata = self.coordinator.controller.metadata.topics
        wanted: dict[str, tuple[uuid.UUID, int]] = {}
        for name in self.subscribed_topics():
            meta = metadata.get(name)
            if meta is not None:
                wanted[name] = (meta.topic_id, meta.partitions)
        return wanted

    def _refresh_topics(self) -> None:
        wanted = self._subscribed_topic_metadata()
        if wanted != self.topic_snapshot:
            self.topic_snapshot = wanted
            self._bump()

    def _maybe_assign(self) -> None:
        if self.assignment_epoch >= self.group_epoch:
            return
        subscriptions = {
            mid: {t for t in m.subscribed_topic_names if t in self.topic_snapshot}
            for mid, m in self.members.items()
        }
        counts = {name: count for name, (_, count) in self.topic_snapshot.items()}
        computed = share_assign(subscriptions, counts)
        self.target = {
            mid: {self.topic_snapshot[name][0]: ps for name, ps in topics.items() if ps}
            for mid, topics in computed.items()
        }
        self.assignment_epoch = self.group_epoch
        log.info(
            "share group %s: assignment for epoch %d over %d member(s)",
            self.group_id,
            self.group_epoch,
            len(self.members),
        )

    # Removal -----------------------------------------------------------------------

    def _remove(self, member: ShareGroupMember) -> None:
        member.stop_timers()
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        self._bump()
        if self.members:
            self._refresh_topics()
            self._maybe_assign()
        if self.on_member_gone is not None:
            self.on_member_gone(self.group_id, member.member_id)

    def _touch(self, member: ShareGroupMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout = self.setting("share.session.timeout.ms")
        member.session_timer = asyncio.get_running_loop().call_later(
            timeout / 1000, self._session_expired, member.member_id
        )

    def _session_expired(self, member_id: str) -> None:
        member = self.members.get(member_id)
        if member is not None:
            log.info(
                "share group %s: member %s failed to heartbeat in time; removing it",
                self.group_id,
                member_id,
            )
            self._remove(member)
            self._persist()

    def mark_dead(self, error: ErrorCode | None = None) -> None:
        for member in self.members.values():
            member.stop_timers()
        self.dead = True

    def start_sessions(self) -> None:
        for member in self.members.values():
            self._touch(member)
