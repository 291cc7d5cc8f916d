"""The classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) of one group.

Owns one group's members and its state machine, as Kafka's classic group
coordinator defines it:

- Empty: no members (offsets may still be committed by "simple" consumers).
- PreparingRebalance: waiting for every known member to rejoin. Joins are held
  (an awaitable result) until all members and pending members have rejoined,
  or the largest rebalance timeout of the members passes; dynamic members that
  did not rejoin are then removed. A rebalance that starts from Empty first
  waits ``group.initial.rebalance.delay.ms``, extended by the same delay while
  new members keep arriving, up to the rebalance timeout.
- CompletingRebalance: the generation is bumped, the protocol chosen (the one
  all members support that most members prefer), the leader got the members'
  metadata; SyncGroup calls wait until the leader's SyncGroup brings the
  assignments, which are handed to every member byte for byte.
  Members that do not send SyncGroup within the rebalance timeout (the
  leader included) are removed and the group rebalances again.
- Stable: the assignment is in place.
- Dead: the group was deleted.

Joining without a member id from JoinGroup v4 on answers MEMBER_ID_REQUIRED
with a fresh id (KIP-394); the member must rejoin with it within the session
timeout. Static members (group.instance.id, KIP-345) keep their place across
restarts: a rejoin under a known instance id replaces the old member id (the
old one is then FENCED_INSTANCE_ID) and, in a Stable group whose selected protocol
it does not change, gets the current assignment without a rebalance: from JoinGroup
v9 a rejoining leader is told to skip the assignment (KIP-814); below v9 the answer
names the old leader id, so the rejoining leader syncs as a follower.

Every JoinGroup, SyncGroup and Heartbeat restarts the member's session timer
(``session.timeout.ms``); when it fires the member is removed and the group
rebalances. Members waiting in a join or sync are kept alive.

Does not own: offsets, persistence and the registry of groups (coordinator.py).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from strom.coordinator.group_host import GroupHost
from strom.coordinator.offsets_topic import GroupRecord, MemberRecord
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class ClassicGroupHost(GroupHost, Protocol):
    """The coordinator as a classic group writes through it."""

    @property
    def max_group_size(self) -> int: ...

    @property
    def initial_rebalance_delay_ms(self) -> int: ...

    def store_group(self, group: ClassicGroup) -> None: ...


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    api_version: int
    reason: str | None = None


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


class ClassicMember:
    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "protocol_type",
        "protocols",
        "assignment",
        "join_future",
        "sync_future",
        "session_timer",
        "join_version",
    )

    def __init__(self, member_id: str, request: JoinRequest) -> None:
        self.member_id = member_id
        self.group_instance_id = request.group_instance_id
        self.assignment = b""
        self.join_future: asyncio.Future[JoinResult] | None = None
        self.sync_future: asyncio.Future[SyncResult] | None = None
        self.session_timer: asyncio.TimerHandle | None = None
        self.update(request)

    def update(self, request: JoinRequest) -> None:
        self.client_id = request.client_id
        self.client_host = request.client_host
        self.session_timeout_ms = request.session_timeout_ms
        self.rebalance_timeout_ms = request.rebalance_timeout_ms
        self.protocol_type = request.protocol_type
        self.protocols = list(request.protocols)
        self.join_version = request.api_version

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == list(protocols)


class ClassicGroup:
    """One classic group; the coordinator calls it, it calls back to persist."""

    kind = "classic"

    def __init__(self, group_id: str, coordinator: ClassicGroupHost) -> None:
        self.group_id = group_id
        self.coordinator = coordinator
        self.state = GroupState.EMPTY
        self.state_timestamp = coordinator.now_ms()
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: dict[str, asyncio.TimerHandle] = {}
        self._join_timer: asyncio.TimerHandle | None = None
        self._sync_timer: asyncio.TimerHandle | None = None
        self._awaiting_sync: set[str] = set()
        self._initial_delay = False
        self._delay_remaining_ms = 0
        self._new_member_joined = False

    # Reads -------------------------------------------------------------------

    @property
    def state_name(self) -> str:
        return self.state.value

    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None when unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None if self.members else set()
        from strom.coordinator.consumer_protocol import subscription_topics

        topics: set[str] = set()
        for member in self.members.values():
            found = subscription_topics(member.metadata_for(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics

    def member_list(self) -> list[tuple[str, str | None, bytes]]:
        return [
            (m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        ]

    def to_record(self) -> GroupRecord:
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=[
                MemberRecord(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata_for(self.protocol_name),
                    m.assignment,
                )
                for m in self.members.values()
            ],
        )

    def restore(self, record: GroupRecord) -> None:
        """Take the state a GroupMetadataValue describes (at start-up)."""
        self._cancel_timers()
        self.members.clear()
        self.static_members.clear()
        self.generation = record.generation
        self.protocol_type = record.protocol_type or None
        self.protocol_name = record.protocol
        self.leader_id = record.leader
        if record.current_state_timestamp >= 0:
            self.state_timestamp = record.current_state_timestamp
        for m in record.members:
            request = JoinRequest(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout,
                m.rebalance_timeout,
                record.protocol_type,
                [(record.protocol or "", m.subscription)],
                0,
            )
            member = ClassicMember(m.member_id, request)
            member.assignment = m.assignment
            self.members[m.member_id] = member
            if m.group_instance_id is not None:
                self.static_members[m.group_instance_id] = m.member_id
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members), None)

    def start_sessions(self) -> None:
        for member in self.members.values():
            self._touch(member)

    # JoinGroup ---------------------------------------------------------------

    def join(self, request: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        if self.state == GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, request.member_id)
        if not self._supports(request.protocol_type, request.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
        if not request.member_id:
            return self._join_new(request)
        return self._join_known(request)

    def _supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return bool(names & self._candidate_protocols())

    def _candidate_protocols(self) -> set[str]:
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        common = {name for name, _ in first.protocols}
        for member in members:
            common &= {name for name, _ in member.protocols}
        return common

    def _join_new(self, request: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        full = len(self.members) + len(self.pending_members) >= self.coordinator.max_group_size
        if full and request.group_instance_id not in self.static_members:
            return JoinResult(ErrorCode.group_max_size_reached, "")
        prefix = request.group_instance_id or request.client_id
        member_id = f"{prefix}-{uuid.uuid4()}"
        instance = request.group_instance_id
        if instance is not None:
            old_id = self.static_members.get(instance)
            if old_id is not None and old_id in self.members:
                return self._replace_static_member(old_id, member_id, request)
            return self._add_member(member_id, request)
        if request.api_version >= 4:
            self._add_pending(member_id, request.session_timeout_ms)
            return JoinResult(ErrorCode.member_id_required, member_id)
        return self._add_member(member_id, request)

    def _join_known(self, request: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        member_id = request.member_id
        instance = request.group_instance_id
        if instance is not None:
            known = self.static_members.get(instance)
            if known is not None and known != member_id:
                return JoinResult(ErrorCode.fenced_instance_id, member_id)
        pending = self.pending_members.pop(member_id, None)
        if pending is not None:
            pending.cancel()
            return self._add_member(member_id, request)
        member = self.members.get(member_id)
        if member is None:
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        if self.state == GroupState.PREPARING_REBALANCE:
            return self._rejoin(member, request, rebalance=False)
        if self.state == GroupState.COMPLETING_REBALANCE:
            if member.same_protocols(request.protocols):
                return self._current_join_result(member, skip_assignment=False)
            return self._rejoin(member, request, rebalance=True, reason="member changed protocols")
        # Stable
        if member_id == self.leader_id or not member.same_protocols(request.protocols):
            return self._rejoin(
                member,
                request,
                rebalance=True,
                reason=request.reason or "leader or changed member rejoined",
            )
        return self._current_join_result(member, skip_assignment=False)

    def _current_join_result(self, member: ClassicMember, *, skip_assignment: bool) -> JoinResult:
        self._touch(member)
        is_leader = member.member_id == self.leader_id
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            skip_assignment and is_leader,
            self.member_list() if is_leader else [],
        )

    def _new_join_future(self, member: ClassicMember) -> asyncio.Future[JoinResult]:
        old = member.join_future
        if old is not None and not old.done():
            old.set_result(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        return future

    def _add_member(self, member_id: str, request: JoinRequest) -> asyncio.Future[JoinResult]:
        member = ClassicMember(member_id, request)
        if not self.members:
            self.protocol_type = request.protocol_type
        self.members[member_id] = member
        if request.group_instance_id is not None:
            self.static_members[request.group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        future = self._new_join_future(member)
        self._new_member_joined = True
        self._touch(member)
        self._rebalance_or_complete(f"new member {member_id} joined")
        return future

    def _rejoin(
        self, member: ClassicMember, request: JoinRequest, *, rebalance: bool, reason: str = ""
    ) -> asyncio.Future[JoinResult]:
        member.update(request)
        future = self._new_join_future(member)
        self._touch(member)
        if rebalance:
            self._prepare_rebalance(reason)
        else:
            self._try_complete_join()
        return future

    def _replace_static_member(
        self, old_id: str, member_id: str, request: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        old = self.members.pop(old_id)
        if old.session_timer is not None:
            old.session_timer.cancel()
        if old.join_future is not None and not old.join_future.done():
            old.join_future.set_result(JoinResult(ErrorCode.fenced_instance_id, old_id))
        if old.sync_future is not None and not old.sync_future.done():
            old.sync_future.set_result(SyncResult(ErrorCode.fenced_instance_id))
        member = ClassicMember(member_id, request)
        member.assignment = old.assignment
        self.members[member_id] = member
        assert request.group_instance_id is not None
        self.static_members[request.group_instance_id] = member_id
        leader_before = self.leader_id
        if self.leader_id == old_id:
            self.leader_id = member_id
        log.info(
            "group %s: static member %s rejoined as %s (was %s)",
            self.group_id,
            request.group_instance_id,
            member_id,
            old_id,
        )
        if self.state == GroupState.STABLE:
            if self._select_protocol() == self.protocol_name:
                # The next generation would choose the same protocol: no rebalance.
                self.coordinator.store_group(self)
                if request.api_version >= 9:
                    return self._current_join_result(member, skip_assignment=True)
                # Below v9 there is no skip_assignment: the old leader id is named, so a
                # rejoining leader acts as a follower and syncs to get its assignment.
                self._touch(member)
                return JoinResult(
                    ErrorCode.none,
                    member_id,
                    self.generation,
                    self.protocol_type,
                    self.protocol_name,
                    leader_before or "",
                )
            future = self._new_join_future(member)
            self._touch(member)
            self._prepare_rebalance("static member rejoined with new protocols")
            return future
        future = self._new_join_future(member)
        self._touch(member)
        if self.state == GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance("static member rejoined during a rebalance")
        else:
            self._try_complete_join()
        return future

    def _add_pending(self, member_id: str, session_timeout_ms: int) -> None:
        loop = asyncio.get_running_loop()
        self.pending_members[member_id] = loop.call_later(
            session_timeout_ms / 1000, self._expire_pending, member_id
        )

    def _expire_pending(self, member_id: str) -> None:
        if self.pending_members.pop(member_id, None) is not None:
            log.info("group %s: pending member %s did not rejoin in time", self.group_id, member_id)
            self._try_complete_join()

    # Rebalancing -------------------------------------------------------------

    def _rebalance_or_complete(self, reason: str) -> None:
        if self.state == GroupState.PREPARING_REBALANCE:
            self._try_complete_join()
        else:
            self._prepare_rebalance(reason)

    def _transition(self, state: GroupState) -> None:
        self.state = state
        self.state_timestamp = self.coordinator.now_ms()

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _prepare_rebalance(self, reason: str) -> None:
        if self.state == GroupState.DEAD:
            return
        if self.state == GroupState.COMPLETING_REBALANCE:
            for member in self.members.values():
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(SyncResult(ErrorCode.rebalance_in_progress))
                member.sync_future = None
        self._stop_sync_timer()
        was_empty = self.state == GroupState.EMPTY
        if self.state != GroupState.PREPARING_REBALANCE:
            log.info(
                "group %s: preparing to rebalance (generation %d): %s",
                self.group_id,
                self.generation,
                reason,
            )
        self._transition(GroupState.PREPARING_REBALANCE)
        if self._join_timer is not None:
            self._join_timer.cancel()
        loop = asyncio.get_running_loop()
        rebalance_timeout = self._rebalance_timeout_ms()
        delay = self.coordinator.initial_rebalance_delay_ms
        if was_empty and delay > 0:
            first = min(delay, rebalance_timeout)
            self._initial_delay = True
            self._delay_remaining_ms = max(rebalance_timeout - first, 0)
            self._new_member_joined = False
            self._join_timer = loop.call_later(first / 1000, self._initial_delay_expired)
            return
        self._initial_delay = False
        self._join_timer = loop.call_later(rebalance_timeout / 1000, self._join_timeout)
        self._try_complete_join()

    def _initial_delay_expired(self) -> None:
        self._join_timer = None
        delay = self.coordinator.initial_rebalance_delay_ms
        if self._new_member_joined and self._delay_remaining_ms > 0:
            step = min(delay, self._delay_remaining_ms)
            self._delay_remaining_ms -= step
            self._new_member_joined = False
            self._join_timer = asyncio.get_running_loop().call_later(
                step / 1000, self._initial_delay_expired
            )
            return
        self._initial_delay = False
        if self._all_joined():
            self._complete_join()
        else:
            self._join_timer = asyncio.get_running_loop().call_later(
                self._delay_remaining_ms / 1000, self._join_timeout
            )

    def _join_timeout(self) -> None:
        self._join_timer = None
        if self.state == GroupState.PREPARING_REBALANCE:
            self._complete_join()

    def _all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_future is not None for m in self.members.values()
        )

    def _try_complete_join(self) -> None:
        if self.state != GroupState.PREPARING_REBALANCE or self._initial_delay:
            return
        if self._all_joined():
            self._complete_join()

    def _complete_join(self) -> None:
        if self._join_timer is not None:
            self._join_timer.cancel()
            self._join_timer = None
        self._initial_delay = False
        for member in list(self.members.values()):
            if member.join_future is None and member.group_instance_id is None:
                log.info(
                    "group %s: removing member %s, which did not rejoin in time",
                    self.group_id,
                    member.member_id,
                )
                self._remove(member)
        self.generation += 1
        if not self.members:
            self.protocol_name = None
            self.leader_id = None
            self._transition(GroupState.EMPTY)
            log.info("group %s: generation %d is empty", self.group_id, self.generation)
            self.coordinator.store_group(self)
            return
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members:
            joined = [m for m in self.members.values() if m.join_future is not None]
            self.leader_id = (joined or list(self.members.values()))[0].member_id
        self._transition(GroupState.COMPLETING_REBALANCE)
        self._awaiting_sync = set(self.members)
        self._sync_timer = asyncio.get_running_loop().call_later(
            self._rebalance_timeout_ms() / 1000, self._sync_expired, self.generation
        )
        log.info(
            "group %s: generation %d with %d member(s), protocol %s, leader %s",
            self.group_id,
            self.generation,
            len(self.members),
            self.protocol_name,
            self.leader_id,
        )
        self.coordinator.store_group(self)
        everyone = self.member_list()
        for member in self.members.values():
            future, member.join_future = member.join_future, None
            is_leader = member.member_id == self.leader_id
            result = JoinResult(
                ErrorCode.none,
                member.member_id,
                self.generation,
                self.protocol_type,
                self.protocol_name,
                self.leader_id or "",
                False,
                everyone if is_leader else [],
            )
            if future is not None and not future.done():
                future.set_result(result)
            self._touch(member)

    def _select_protocol(self) -> str | None:
        candidates = self._candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        if not votes:
            return None
        return max(votes, key=lambda name: votes[name])

    # SyncGroup, Heartbeat, LeaveGroup ----------------------------------------

    def _check_member(
        self, member_id: str, instance: str | None
    ) -> tuple[ErrorCode, ClassicMember | None]:
        if instance is not None:
            known = self.static_members.get(instance)
            if known is not None and known != member_id:
                return ErrorCode.fenced_instance_id, None
        member = self.members.get(member_id)
        if member is None or self.state in (GroupState.EMPTY, GroupState.DEAD):
            return ErrorCode.unknown_member_id, None
        return ErrorCode.none, member

    def sync(
        self,
        member_id: str,
        instance: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult | asyncio.Future[SyncResult]:
        error, member = self._check_member(member_id, instance)
        if member is None:
            return SyncResult(error)
        if generation != self.generation:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol_name is not None and protocol_name != self.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if self.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        self._touch(member)
        self._synced(member_id)
        if self.state == GroupState.STABLE:
            return SyncResult(
                ErrorCode.none, member.assignment, self.protocol_type, self.protocol_name
            )
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_future = future
        if member_id == self.leader_id:
            for mid, m in self.members.items():
                m.assignment = assignments.get(mid, b"")
            self._transition(GroupState.STABLE)
            self.coordinator.store_group(self)
            log.info("group %s: generation %d is stable", self.group_id, self.generation)
            for m in self.members.values():
                waiting, m.sync_future = m.sync_future, None
                if waiting is not None and not waiting.done():
                    waiting.set_result(
                        SyncResult(
                            ErrorCode.none, m.assignment, self.protocol_type, self.protocol_name
                        )
                    )
        return future

    def heartbeat(self, member_id: str, instance: str | None, generation: int) -> ErrorCode:
        error, member = self._check_member(member_id, instance)
        if member is None:
            return error
        if generation != self.generation:
            return ErrorCode.illegal_generation
        self._touch(member)
        if self.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, leaving: list[tuple[str, str | None]]) -> list[ErrorCode]:
        errors = []
        changed = False
        for member_id, instance in leaving:
            if not member_id:
                member_id = self.static_members.get(instance or "", "")
                if not member_id:
                    errors.append(ErrorCode.unknown_member_id)
                    continue
            elif instance is not None:
                known = self.static_members.get(instance)
                if known is not None and known != member_id:
                    errors.append(ErrorCode.fenced_instance_id)
                    continue
            pending = self.pending_members.pop(member_id, None)
            if pending is not None:
                pending.cancel()
                errors.append(ErrorCode.none)
                changed = True
                continue
            member = self.members.get(member_id)
            if member is None:
                errors.append(ErrorCode.unknown_member_id)
                continue
            log.info("group %s: member %s left", self.group_id, member_id)
            self._remove(member)
            errors.append(ErrorCode.none)
            changed = True
        if changed:
            self._after_removal("member left the group")
        return errors

    def _after_removal(self, reason: str) -> None:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(reason)
        elif self.state == GroupState.PREPARING_REBALANCE:
            self._try_complete_join()

    def _remove(self, member: ClassicMember) -> None:
        self.members.pop(member.member_id, None)
        self._awaiting_sync.discard(member.member_id)
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member.member_id:
            del self.static_members[instance]
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        for future, result in (
            (member.join_future, JoinResult(ErrorCode.unknown_member_id, member.member_id)),
            (member.sync_future, SyncResult(ErrorCode.unknown_member_id)),
        ):
            if future is not None and not future.done():
                future.set_result(result)  # type: ignore[arg-type]
        member.join_future = member.sync_future = None
        if self.leader_id == member.member_id:
            joined = [m for m in self.members.values() if m.join_future is not None]
            rest = joined or list(self.members.values())
            self.leader_id = rest[0].member_id if rest else None

    def _synced(self, member_id: str) -> None:
        self._awaiting_sync.discard(member_id)
        if not self._awaiting_sync:
            self._stop_sync_timer()

    def _stop_sync_timer(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        self._awaiting_sync.clear()

    def _sync_expired(self, generation: int) -> None:
        """Members that joined a generation but did not sync within the rebalance timeout."""
        self._sync_timer = None
        if generation != self.generation or self.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return
        laggards = [self.members[m] for m in self._awaiting_sync if m in self.members]
        self._awaiting_sync.clear()
        if not laggards:
            return
        for member in laggards:
            log.info(
                "group %s: removing member %s, which did not send SyncGroup for generation %d",
                self.group_id,
                member.member_id,
                generation,
            )
            self._remove(member)
        self._after_removal("members did not sync in time")

    # Sessions ------------------------------------------------------------------

    def _touch(self, member: ClassicMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._session_expired, member.member_id
        )

    def _session_expired(self, member_id: str) -> None:
        member = self.members.get(member_id)
        if member is None:
            return
        member.session_timer = None
        if member.join_future is not None or member.sync_future is not None:
            self._touch(member)
            return
        log.info(
            "group %s: member %s failed to heartbeat within %d ms; removing it",
            self.group_id,
            member_id,
            member.session_timeout_ms,
        )
        self._remove(member)
        self._after_removal(f"member {member_id} left (session timeout)")

    # Offsets -------------------------------------------------------------------

    def validate_commit(self, generation: int, member_id: str, instance: str | None) -> ErrorCode:
        """May this (member, generation) commit offsets now? As Kafka's classic group."""
        if self.state == GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation < 0 and self.state == GroupState.EMPTY:
            return ErrorCode.none  # a simple consumer or an admin tool
        if generation >= 0 or member_id or instance is not None:
            if instance is not None:
                known = self.static_members.get(instance)
                if known is not None and known != member_id:
                    return ErrorCode.fenced_instance_id
            if member_id not in self.members:
                return ErrorCode.unknown_member_id
            if generation != self.generation:
                return ErrorCode.illegal_generation
        elif self.state != GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if self.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # Deletion --------------------------------------------------------------------

    def _cancel_timers(self) -> None:
        if self._join_timer is not None:
            self._join_timer.cancel()
            self._join_timer = None
        self._stop_sync_timer()
        for timer in self.pending_members.values():
            timer.cancel()
        self.pending_members.clear()
        for member in self.members.values():
            if member.session_timer is not None:
                member.session_timer.cancel()
                member.session_timer = None

    def mark_dead(self, error: ErrorCode | None = None) -> None:
        """End the group here; members waiting in JoinGroup or SyncGroup are answered
        ``error`` when one is given (NOT_COORDINATOR when the group moves away)."""
        self._cancel_timers()
        if error is not None:
            for member in self.members.values():
                join, sync = member.join_future, member.sync_future
                member.join_future = member.sync_future = None
                if join is not None and not join.done():
                    join.set_result(JoinResult(error, member.member_id))
                if sync is not None and not sync.done():
                    sync.set_result(SyncResult(error))
        self._transition(GroupState.DEAD)
