"""KIP-848 consumer groups: ConsumerGroupHeartbeat with server-side assignment.

Owns one group of the next-generation protocol. Members send heartbeats
carrying their subscription (topic names or a regular expression, sent again
only when it changes) and the partitions they own; the coordinator keeps:

- the group epoch, bumped whenever membership, subscriptions or the
  partitions of subscribed topics change;
- the target assignment, computed by a server-side assignor (uniform or range,
  assignors.py) whenever the group epoch moved past the assignment epoch;
- each member's current assignment, reconciled towards its target one step per
  heartbeat as Kafka's CurrentAssignmentBuilder does: partitions to give up are
  first revoked (the member keeps its epoch until a heartbeat shows it no longer
  owns them, or it is removed after its rebalance timeout); partitions still
  owned or being revoked by another member are held back until released; then
  the member gets the target epoch.

State names as Kafka reports them: Empty, Assigning (target not computed),
Reconciling (members not yet at the target), Stable, Dead.

A member that sends no heartbeat for the group's session timeout is removed; the
group's heartbeat interval is what members are told. Both are the group's own
``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` when set on it
(GROUP config resource, kept in the cluster metadata), else the broker's
``group.consumer.session.timeout.ms`` and ``group.consumer.heartbeat.interval.ms``;
a change applies from each member's next heartbeat.
Epoch -1 leaves; -2 (a static member's temporary leave) is treated as a leave. A
member joining (epoch 0) with a ``group.instance.id`` that another member holds gets
UNRELEASED_INSTANCE_ID until that member leaves or its session expires, as Kafka
answers; one joining a group that holds ``group.consumer.max.size`` members gets
GROUP_MAX_SIZE_REACHED (a member already in it rejoins).
A heartbeat with an epoch other than the member's current (or previous one,
with a subset of its partitions) gets FENCED_MEMBER_EPOCH; a client then rejoins
with epoch 0.

The group is kept in ``__consumer_offsets`` as Kafka keeps it
(consumer_group_records.py): after each heartbeat or removal only what changed is
written — a member's metadata, the group epoch, the target assignment (per member,
then its epoch), a member's current assignment, tombstones for a member that left —
so a heartbeat that changes nothing writes nothing. On load (``restore``) the group
comes back with its epochs, members and assignments; sessions restart, and the
subscribed topics are taken as they are then, so a load alone bumps no epoch. A
group whose last member left stays stored, empty, until it is deleted.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from dataclasses import dataclass

from strom.config import GROUP_CONFIGS
from strom.coordinator import consumer_group_records as records
from strom.coordinator.assignors import ASSIGNORS, assignor_name
from strom.coordinator.group_host import RecordsHost
from strom.coordinator.offsets_topic import OFFSETS_TOPIC
from strom.coordinator.safe_regex import InvalidRegex, compile_pattern
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

TopicAssignment = dict[uuid.UUID, set[int]]


@dataclass(slots=True)
class HeartbeatRequest:
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: list[str] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: TopicAssignment | None
    client_id: str
    client_host: str


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicAssignment | None = None
    message: str | None = None


class ConsumerGroupMember:
    def __init__(self, member_id: str, request: HeartbeatRequest) -> None:
        self.member_id = member_id
        self.instance_id = request.instance_id
        self.rack_id = request.rack_id
        self.client_id = request.client_id
        self.client_host = request.client_host
        self.rebalance_timeout_ms = request.rebalance_timeout_ms
        self.subscribed_topic_names: list[str] = list(request.subscribed_topic_names or [])
        self.subscribed_topic_regex: str | None = request.subscribed_topic_regex or None
        self.server_assignor: str | None = request.server_assignor
        self.epoch = 0
        self.previous_epoch = -1
        self.assigned: TopicAssignment = {}
        self.revoking: TopicAssignment = {}
        self.unreleased = False
        self.last_sent: TopicAssignment | None = None
        self.session_timer: asyncio.TimerHandle | None = None
        self.revocation_timer: asyncio.TimerHandle | None = None
        # What __consumer_offsets holds for this member (None: nothing yet), so that
        # only what changed is written.
        self.stored_metadata: records.MemberMetadata | None = None
        self.stored_target: TopicAssignment | None = None
        self.stored_current: records.CurrentAssignment | None = None

    @classmethod
    def restored(
        cls,
        member_id: str,
        metadata: records.MemberMetadata,
        current: records.CurrentAssignment | None,
    ) -> ConsumerGroupMember:
        """A member as its records in ``__consumer_offsets`` left it."""
        member = cls(
            member_id,
            HeartbeatRequest(
                member_id=member_id,
                member_epoch=0,
                instance_id=metadata.instance_id,
                rack_id=metadata.rack_id,
                rebalance_timeout_ms=metadata.rebalance_timeout_ms,
                subscribed_topic_names=metadata.subscribed_topic_names,
                subscribed_topic_regex=metadata.subscribed_topic_regex,
                server_assignor=metadata.server_assignor,
                owned=None,
                client_id=metadata.client_id,
                client_host=metadata.client_host,
            ),
        )
        member.stored_metadata = metadata
        if current is not None:
            member.epoch = current.member_epoch
            member.previous_epoch = current.previous_member_epoch
            member.assigned = _copy(current.assigned)
            member.revoking = _copy(current.pending_revocation)
            member.unreleased = current.state == records.MEMBER_UNRELEASED_PARTITIONS
            member.stored_current = member.current_record()
        # The member was told its assignment before the move: do not send it again.
        member.last_sent = _copy(member.assigned)
        return member

    def metadata_record(self) -> records.MemberMetadata:
        return records.MemberMetadata(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=list(self.subscribed_topic_names),
            subscribed_topic_regex=self.subscribed_topic_regex,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
        )

    def current_record(self) -> records.CurrentAssignment:
        if self.revoking:
            state = records.MEMBER_UNREVOKED_PARTITIONS
        elif self.unreleased:
            state = records.MEMBER_UNRELEASED_PARTITIONS
        else:
            state = records.MEMBER_STABLE
        return records.CurrentAssignment(
            member_epoch=self.epoch,
            previous_member_epoch=self.previous_epoch,
            state=state,
            assigned=_copy(self.assigned),
            pending_revocation=_copy(self.revoking),
        )

    def stop_timers(self) -> None:
        for timer in (self.session_timer, self.revocation_timer):
            if timer is not None:
                timer.cancel()
        self.session_timer = self.revocation_timer = None


def _copy(assignment: TopicAssignment) -> TopicAssignment:
    return {topic: set(ps) for topic, ps in assignment.items() if ps}


def _owns_any(owned: TopicAssignment, wanted: TopicAssignment) -> bool:
    return any(owned.get(topic, set()) & ps for topic, ps in wanted.items())


def _subset(small: TopicAssignment, big: TopicAssignment) -> bool:
    return all(ps <= big.get(topic, set()) for topic, ps in small.items())


class ConsumerGroup:
    kind = "consumer"

    def __init__(self, group_id: str, coordinator: RecordsHost) -> None:
        self.group_id = group_id
        self.coordinator = coordinator
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.target: dict[str, TopicAssignment] = {}
        self.topic_snapshot: dict[str, tuple[uuid.UUID, int]] = {}
        self.dead = False
        self.state_timestamp = coordinator.now_ms()
        self.protocol_type = "consumer"
        # The epochs __consumer_offsets holds (None: not written yet) and the
        # tombstones of members removed since the last write.
        self.stored_epoch: int | None = None
        self.stored_assignment_epoch: int | None = None
        self._removed: list[tuple[bytes, bytes | None]] = []
        # regex -> (the topics' version it was matched at, the topics it matched)
        self._regex_matches: dict[str, tuple[int, frozenset[str]]] = {}

    # Reads -------------------------------------------------------------------------

    @property
    def state_name(self) -> str:
        if self.dead:
            return "Dead"
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(
            m.epoch != self.assignment_epoch or m.revoking or m.unreleased
            for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    @property
    def assignor_name(self) -> str:
        configured = [assignor_name(a) for a in self.coordinator.config["group.consumer.assignors"]]
        wanted = Counter(
            m.server_assignor for m in self.members.values() if m.server_assignor in configured
        )
        if wanted:
            return wanted.most_common(1)[0][0] or configured[0]
        return configured[0] if configured else "uniform"

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        return set().union(*self._subscriptions().values())

    def _resolve(self, member: ConsumerGroupMember) -> set[str]:
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            topics |= self._regex_topics(member.subscribed_topic_regex)
        return topics

    def _regex_topics(self, regex: str) -> frozenset[str]:
        """The topics ``regex`` matches (RE2, whole names), evaluated again only when the
        set of topics changed: not on every heartbeat of every member, as Kafka does."""
        metadata = self.coordinator.controller.metadata
        version = metadata.topics_version
        cached = self._regex_matches.get(regex)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            pattern = compile_pattern(regex)
        except InvalidRegex:
            matched: frozenset[str] = frozenset()
        else:
            matched = frozenset(
                name
                for name in metadata.topics
                if name != OFFSETS_TOPIC and pattern.fullmatch(name)
            )
        if len(self._regex_matches) >= 256 and regex not in self._regex_matches:
            self._regex_matches.clear()  # regexes no member uses any more
        self._regex_matches[regex] = (version, matched)
        return matched

    def _subscriptions(self) -> dict[str, set[str]]:
        return {mid: self._resolve(m) for mid, m in self.members.items()}

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        meta = self.coordinator.controller.metadata.by_id.get(topic_id)
        return meta.name if meta else None

    # Heartbeat ---------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        result = self._heartbeat(request)
        # Only the member that heartbeats can have changed its metadata or assignment.
        member = self.members.get(result.member_id or "")
        self._persist([] if member is None else [member])
        return result

    def _heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        interval = self._setting("consumer.heartbeat.interval.ms")
        epoch = request.member_epoch
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            member_id = request.member_id
            if not member_id and request.instance_id is not None:
                member_id = self.static_members.get(request.instance_id, "")
            member = self.members.get(member_id)
            if member is None:
                return HeartbeatResult(
                    ErrorCode.unknown_member_id, request.member_id, epoch, interval
                )
            log.info("group %s: member %s left", self.group_id, member_id)
            self._remove(member)
            return HeartbeatResult(ErrorCode.none, member_id, epoch, interval)
        if epoch == 0:
            holder = self._instance_holder(request)
            if holder is not None:
                log.info(
                    "group %s: member %s refused: instance id %s is held by member %s",
                    self.group_id,
                    request.member_id,
                    request.instance_id,
                    holder,
                )
                return HeartbeatResult(
                    ErrorCode.unreleased_instance_id,
                    request.member_id,
                    epoch,
                    interval,
                    message=f"Static member {request.member_id} with instance id "
                    f"{request.instance_id} cannot join the group because the instance id "
                    f"is owned by {holder} member.",
                )
            limit = int(self.coordinator.config["group.consumer.max.size"])
            if len(self.members) >= limit and request.member_id not in self.members:
                log.info(
                    "group %s: member %s refused: the group has %d members "
                    "(group.consumer.max.size)",
                    self.group_id,
                    request.member_id,
                    len(self.members),
                )
                return HeartbeatResult(
                    ErrorCode.group_max_size_reached,
                    request.member_id,
                    epoch,
                    interval,
                    message=f"The group holds {len(self.members)} members, its limit "
                    f"(group.consumer.max.size={limit})",
                )
            member = self._join(request)
        else:
            member = self.members.get(request.member_id)
            if member is None:
                return HeartbeatResult(
                    ErrorCode.unknown_member_id, request.member_id, epoch, interval
                )
            allowed = epoch == member.epoch or (
                epoch == member.previous_epoch
                and request.owned is not None
                and _subset(request.owned, member.assigned)
            )
            if not allowed:
                return HeartbeatResult(
                    ErrorCode.fenced_member_epoch,
                    request.member_id,
                    epoch,
                    interval,
                    message=f"The member epoch {epoch} is not the current {member.epoch}",
                )
            if self._update(member, request):
                self._bump("member changed its subscription")
        self._touch(member)
        self._refresh_topics()
        self._maybe_assign()
        self._reconcile(member, request.owned)
        assignment: TopicAssignment | None = None
        if (
            epoch == 0
            or member.last_sent != member.assigned
            or request.owned is not None
            and (request.owned != member.assigned)
        ):
            assignment = _copy(member.assigned)
            member.last_sent = _copy(member.assigned)
        return HeartbeatResult(ErrorCode.none, member.member_id, member.epoch, interval, assignment)

    def _instance_holder(self, request: HeartbeatRequest) -> str | None:
        """The member id that holds the joining member's instance id, if another member
        holds it: a static member's instance id is released only when it leaves (epoch
        -2 or -1) or its session expires."""
        if request.instance_id is None:
            return None
        holder = self.static_members.get(request.instance_id)
        if holder is None or holder == request.member_id or holder not in self.members:
            return None
        return holder

    def _join(self, request: HeartbeatRequest) -> ConsumerGroupMember:
        member_id = request.member_id or str(uuid.uuid4())
        old = self.members.get(member_id)
        if request.instance_id is not None:
            previous_id = self.static_members.get(request.instance_id)
            if previous_id is not None and previous_id != member_id:
                old = self.members.get(previous_id)
        member = ConsumerGroupMember(member_id, request)
        if old is not None:
            # A rejoin (after fencing, or a static member under a new id): it starts afresh.
            self._drop(old)
        self.members[member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member_id
        log.info(
            "group %s: member %s joined (%s)",
            self.group_id,
            member_id,
            member.subscribed_topic_regex or ",".join(member.subscribed_topic_names),
        )
        self._bump(f"member {member_id} joined")
        return member

    def _update(self, member: ConsumerGroupMember, request: HeartbeatRequest) -> bool:
        changed = False
        if (
            request.subscribed_topic_names is not None
            and list(request.subscribed_topic_names) != member.subscribed_topic_names
        ):
            member.subscribed_topic_names = list(request.subscribed_topic_names)
            changed = True
        if (
            request.subscribed_topic_regex is not None
            and (request.subscribed_topic_regex or None) != member.subscribed_topic_regex
        ):
            member.subscribed_topic_regex = request.subscribed_topic_regex or None
            changed = True
        if request.server_assignor is not None and request.server_assignor != (
            member.server_assignor
        ):
            member.server_assignor = request.server_assignor
            changed = True
        if request.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        return changed

    def _bump(self, reason: str) -> None:
        self.group_epoch += 1
        self.state_timestamp = self.coordinator.now_ms()
        log.debug("group %s: epoch %d: %s", self.group_id, self.group_epoch, reason)

    def _subscribed_topic_metadata(self) -> dict[str, tuple[uuid.UUID, int]]:
        metadata = self.coordinator.controller.metadata.topics
        wanted: dict[str, tuple[uuid.UUID, int]] = {}
        for topics in self._subscriptions().values():
            for name in topics:
                meta = metadata.get(name)
                if meta is not None:
                    wanted[name] = (meta.topic_id, meta.partitions)
        return wanted

    def _refresh_topics(self) -> None:
        wanted = self._subscribed_topic_metadata()
        if wanted != self.topic_snapshot:
            self.topic_snapshot = wanted
            self._bump("subscribed topics changed")

    def _maybe_assign(self) -> None:
        if self.assignment_epoch >= self.group_epoch:
            return
        subscriptions = {
            mid: {t for t in topics if t in self.topic_snapshot}
            for mid, topics in self._subscriptions().items()
        }
        by_name = {name: count for name, (_, count) in self.topic_snapshot.items()}
        current = {
            mid: {
                name: set(ps)
                for topic_id, ps in self.target.get(mid, m.assigned).items()
                if (name := self.topic_name(topic_id)) is not None
            }
            for mid, m in self.members.items()
        }
        assign = ASSIGNORS[self.assignor_name]
        computed = assign(subscriptions, by_name, current)
        self.target = {
            mid: {self.topic_snapshot[name][0]: ps for name, ps in topics.items() if ps}
            for mid, topics in computed.items()
        }
        self.assignment_epoch = self.group_epoch
        log.info(
            "group %s: target assignment for epoch %d computed by the %s assignor for %d member(s)",
            self.group_id,
            self.group_epoch,
            self.assignor_name,
            len(self.members),
        )

    def _held_by_others(self, member: ConsumerGroupMember) -> TopicAssignment:
        held: TopicAssignment = {}
        for other in self.members.values():
            if other is member:
                continue
            for source in (other.assigned, other.revoking):
                for topic, ps in source.items():
                    held.setdefault(topic, set()).update(ps)
        return held

    def _reconcile(self, member: ConsumerGroupMember, owned: TopicAssignment | None) -> None:
        if member.revoking:
            if owned is None or _owns_any(owned, member.revoking):
                return
            member.revoking = {}
            if member.revocation_timer is not None:
                member.revocation_timer.cancel()
                member.revocation_timer = None
        target = self.target.get(member.member_id, {})
        if member.epoch == self.assignment_epoch and not member.unreleased:
            return
        keep = {t: ps & target.get(t, set()) for t, ps in member.assigned.items()}
        revoke = {t: ps - target.get(t, set()) for t, ps in member.assigned.items()}
        revoke = {t: ps for t, ps in revoke.items() if ps}
        if revoke:
            member.assigned = _copy(keep)
            member.revoking = revoke
            loop = asyncio.get_running_loop()
            member.revocation_timer = loop.call_later(
                max(member.rebalance_timeout_ms, 1) / 1000,
                self._revocation_expired,
                member.member_id,
            )
            return
        held = self._held_by_others(member)
        assigned = _copy(keep)
        missing = False
        for topic, ps in target.items():
            free = ps - held.get(topic, set())
            if free != ps:
                missing = True
            if free:
                assigned.setdefault(topic, set()).update(free)
        member.assigned = assigned
        member.unreleased = missing
        if member.epoch != self.assignment_epoch:
            member.previous_epoch = member.epoch
            member.epoch = self.assignment_epoch

    # Removal -----------------------------------------------------------------------

    def _drop(self, member: ConsumerGroupMember) -> None:
        member.stop_timers()
        if (
            member.stored_metadata is not None
            or member.stored_target is not None
            or member.stored_current is not None
        ):
            self._removed += records.member_tombstones(self.group_id, member.member_id)
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        if (
            member.instance_id is not None
            and self.static_members.get(member.instance_id) == member.member_id
        ):
            del self.static_members[member.instance_id]

    def _remove(self, member: ConsumerGroupMember) -> None:
        self._drop(member)
        self._bump(f"member {member.member_id} left")
        if self.members:
            self._refresh_topics()
            self._maybe_assign()

    def _setting(self, key: str) -> int:
        """A group config (``consumer.session.timeout.ms``...): the group's own value,
        else the broker's."""
        raw = self.coordinator.controller.image.group_configs(self.group_id).get(key)
        if raw is not None:
            try:
                return int(raw)
            except ValueError:
                pass  # validated when set; the broker's value stands in for a bad one
        return int(self.coordinator.config[GROUP_CONFIGS[key].broker_name or key])

    def _touch(self, member: ConsumerGroupMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout = self._setting("consumer.session.timeout.ms")
        member.session_timer = asyncio.get_running_loop().call_later(
            timeout / 1000, self._session_expired, member.member_id
        )

    def _session_expired(self, member_id: str) -> None:
        member = self.members.get(member_id)
        if member is not None:
            log.info(
                "group %s: member %s failed to heartbeat in time; removing it",
                self.group_id,
                member_id,
            )
            self._remove(member)
            self._persist()

    def _revocation_expired(self, member_id: str) -> None:
        member = self.members.get(member_id)
        if member is not None and member.revoking:
            log.info(
                "group %s: member %s did not revoke its partitions in time; removing it",
                self.group_id,
                member_id,
            )
            self._remove(member)
            self._persist()

    def mark_dead(self) -> None:
        for member in self.members.values():
            member.stop_timers()
        self.dead = True

    # Persistence -------------------------------------------------------------------

    def changes(
        self, changed: list[ConsumerGroupMember] | None = None
    ) -> list[tuple[bytes, bytes | None]]:
        """The records that bring ``__consumer_offsets`` to this group's state, in the
        order Kafka writes them (removed members, member metadata, group epoch, target
        assignment, current assignments); marks them as stored. ``changed``: the only
        members whose metadata or current assignment may have changed (default: all)."""
        group = self.group_id
        out, self._removed = self._removed, []
        candidates = list(self.members.values()) if changed is None else changed
        for member in candidates:
            metadata = member.metadata_record()
            if metadata != member.stored_metadata:
                key = records.member_metadata_key(group, member.member_id)
                out.append((key, records.member_metadata_value(metadata)))
                member.stored_metadata = metadata
        if self.group_epoch != self.stored_epoch:
            value = records.group_metadata_value(self.group_epoch)
            out.append((records.group_metadata_key(group), value))
            self.stored_epoch = self.group_epoch
        if self.assignment_epoch != self.stored_assignment_epoch:
            for member_id, target in self.target.items():
                assigned = self.members.get(member_id)
                if assigned is not None and target != assigned.stored_target:
                    key = records.target_assignment_member_key(group, member_id)
                    out.append((key, records.target_assignment_member_value(target)))
                    assigned.stored_target = _copy(target)
            value = records.target_assignment_metadata_value(self.assignment_epoch)
            out.append((records.target_assignment_metadata_key(group), value))
            self.stored_assignment_epoch = self.assignment_epoch
        for member in candidates:
            current = member.current_record()
            if current != member.stored_current:
                key = records.current_assignment_key(group, member.member_id)
                out.append((key, records.current_assignment_value(current)))
                member.stored_current = current
        return out

    def _persist(self, changed: list[ConsumerGroupMember] | None = None) -> None:
        written = self.changes(changed)
        if written and not self.dead:
            self.coordinator.store_consumer_group(self.group_id, written)

    def tombstones(self) -> list[tuple[bytes, bytes | None]]:
        """The records that delete this group from ``__consumer_offsets``."""
        return list(records.group_tombstones(self.group_id, list(self.members)))

    def restore(
        self,
        epoch: int,
        assignment_epoch: int,
        members: list[ConsumerGroupMember],
        target: dict[str, TopicAssignment],
    ) -> None:
        """Take the state replayed from ``__consumer_offsets`` (sessions are started by
        ``start_sessions``)."""
        self.group_epoch = self.stored_epoch = epoch
        self.assignment_epoch = self.stored_assignment_epoch = assignment_epoch
        self.members = {m.member_id: m for m in members}
        self.static_members = {
            m.instance_id: m.member_id for m in members if m.instance_id is not None
        }
        self.target = {mid: _copy(t) for mid, t in target.items() if mid in self.members}
        for member_id, member in self.members.items():
            member.stored_target = (
                _copy(self.target[member_id]) if member_id in self.target else None
            )
        # The subscribed topics as they are now: a restore alone bumps no epoch.
        self.topic_snapshot = self._subscribed_topic_metadata()

    def start_sessions(self) -> None:
        """Start every member's session (and pending revocation) timer after a load."""
        loop = asyncio.get_running_loop()
        for member in self.members.values():
            self._touch(member)
            if member.revoking:
                member.revocation_timer = loop.call_later(
                    max(member.rebalance_timeout_ms, 1) / 1000,
                    self._revocation_expired,
                    member.member_id,
                )

    # Offsets -----------------------------------------------------------------------

    def validate_commit(self, epoch: int, member_id: str, instance: str | None) -> ErrorCode:
        if self.dead:
            return ErrorCode.coordinator_not_available
        if epoch < 0 and not self.members:
            return ErrorCode.none  # a simple consumer or an admin tool, on an empty group
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if epoch != member.epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none
