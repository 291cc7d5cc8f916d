"""The KRaft consensus core, sans-I/O: messages and ticks in; log writes, messages and
commits out.

Owns Raft as Kafka's KRaft runs it (KIP-595, with KIP-996 pre-vote and check-quorum) for
one node of a static voter set, or an observer of it: the election state (epoch, vote,
leader) and its transitions (Unattached, Prospective, Candidate, Leader, Follower,
Resigned), pull replication (followers and observers Fetch from the leader, which checks
their log against its own, KIP-320 diverging epochs, and holds a fetch with nothing new
for up to its max wait), the high watermark (what a majority of voters have, once it is
in the leader's epoch), snapshots (a follower far behind copies the leader's snapshot with
FetchSnapshot), and the leader's graceful hand-over (EndQuorumEpoch).

Elections differ from Kafka's in timing only, never in who may win: a voter that gave up
on its leader when its fetch timeout ran out (no EndQuorumEpoch) presumes it down and does
not wait for its vote. Two followers of a dead leader in a quorum of three fetch in step
(the leader answers their held fetches together), time out in the same tick, grant each
other's pre-vote and split the vote of the next epoch; Kafka lets each wait out its
election timeout (1 to 2 s) for the dead leader's answer, here the election is lost at
once and they retry after Kafka's election backoff. The backoff draws any millisecond of
Kafka's binary exponential window (Kafka: whole multiples of 100 ms).

It has no sockets, clock, threads or randomness of its own: the caller gives the time in
every call and a ``random.Random`` at construction, so a run is reproducible.

The driver's contract (etcd-raft's ``Ready`` loop):

1. Call ``tick(now_ms)`` every few milliseconds, ``receive(message, now_ms)`` for each
   message that arrives, and ``propose`` / ``resign`` / ``take_snapshot`` as needed.
   A tick before ``next_timer_ms()`` does nothing (no role change, nothing handed
   out), so a driver may sleep until then, as long as it asks again after each call.
2. After any call, take ``ready()`` and, in this order:

   a. persist durably (fsync) ``quorum_state``, then ``snapshot`` (a whole snapshot the
      follower received: the log before it is gone; drop the log and restart it at the
      snapshot's end), then ``truncate_to`` (drop every record at or above it), then
      ``append``, then ``delete_before`` (files wholly below it may go);
   b. only then send ``messages`` (requests and responses; a response carries the token
      of its request);
   c. then apply ``committed_snapshot`` (the state machine replaces its state with it)
      and then the ``committed`` batches, in order.

   Everything a Ready gives out is durable before the next call into the node, so the
   core counts its own appends as durable. A crash between ``ready()`` and the persist
   loses that Ready whole (nothing of it was sent either); a new ``RaftNode`` built from
   what was persisted carries on.
3. The network side matching a response to its request fills in the fields Kafka's wire
   does not carry: ``VoteResponse.pre_vote`` and ``FetchResponse.fetch_offset`` /
   ``last_fetched_epoch`` (copied from the request). The core sets them itself on the
   responses it builds, so a simulator passing messages through needs nothing.

Does not own: bytes on the wire, files, time, what records mean, or when to snapshot
(the state machine decides and calls ``take_snapshot``).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar, Unpack, cast

from strom.raft.log import RaftLog, cut_batches
from strom.raft.messages import (
    Batch,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    QuorumState,
    RaftError,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)

CHECK_QUORUM_FACTOR = 1.5  # Kafka: a leader resigns after 1.5 x fetch timeout without a quorum
ELECTION_BACKOFF_BASE_MS = 100  # Kafka's RETRY_BACKOFF_BASE_MS: unit of the election backoff
OBSERVER_FORGET_MS = 300_000  # DescribeQuorum lists observers seen within this long


@dataclass(frozen=True)
class RaftConfig:
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    fetch_max_wait_ms: int = 500  # how long a leader holds a fetch with nothing new
    retry_backoff_ms: int = 100  # controller.quorum.retry.backoff.ms
    fetch_max_bytes: int = 8 * 1024 * 1024  # record bytes per fetch response (>= 1 batch)
    fetch_snapshot_max_bytes: int = 1024 * 1024  # bytes per FetchSnapshot chunk


class Role(enum.Enum):
    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


@dataclass(frozen=True)
class Ready:
    """What the driver must do after a call: see the module docstring for the order."""

    quorum_state: QuorumState | None = None
    snapshot: Snapshot | None = None
    truncate_to: int | None = None
    append: tuple[Batch, ...] = ()
    delete_before: int | None = None
    messages: tuple[Message, ...] = ()
    committed_snapshot: Snapshot | None = None
    committed: tuple[Batch, ...] = ()
    # The node's view after the call (for the driver's own bookkeeping).
    role: Role = Role.UNATTACHED
    epoch: int = 0
    leader_id: int = -1
    high_watermark: int = 0

    @property
    def persist_needed(self) -> bool:
        return (
            self.quorum_state is not None
            or self.snapshot is not None
            or self.truncate_to is not None
            or bool(self.append)
            or self.delete_before is not None
        )


@dataclass(frozen=True)
class ReplicaInfo:
    replica_id: int
    log_end_offset: int  # -1 unknown
    last_fetch_timestamp: int  # ms, -1 unknown
    last_caught_up_timestamp: int  # ms, -1 unknown


@dataclass(frozen=True)
class QuorumInfo:
    """What DescribeQuorum reports (complete on the leader only)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaInfo, ...]
    observers: tuple[ReplicaInfo, ...]


def default_leader_change_record(leader_id: int, epoch: int, voters: frozenset[int]) -> bytes:
    """The records of the leader's epoch-start control batch, unless the driver gives its
    own (the broker writes Kafka's LeaderChangeMessage)."""
    return f"leader={leader_id} epoch={epoch} voters={','.join(map(str, sorted(voters)))}".encode()


@dataclass(slots=True)
class _Replica:
    """The leader's view of one fetcher."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    caught_up_ms: int = -1
    leader_end_at_last_fetch: int = -1
    sent_hw: int = -1
    held: FetchRequest | None = None
    held_until: int = 0


@dataclass(slots=True)
class _Outbox:
    quorum_state: QuorumState | None = None
    snapshot: Snapshot | None = None
    truncate_to: int | None = None
    append: list[Batch] = field(default_factory=list)
    delete_before: int | None = None
    messages: list[Message] = field(default_factory=list)
    committed_snapshot: Snapshot | None = None
    committed: list[Batch] = field(default_factory=list)


NEVER = -(1 << 62)
NO_TIMER = 1 << 62  # next_timer_ms(): no timer runs
NO_STATE = QuorumState()


class RaftNode:
    """One node of the quorum (a voter, or an observer when not in ``voters``)."""

    def __init__(
        self,
        node_id: int,
        voters: frozenset[int],
        config: RaftConfig,
        rng: random.Random,
        now_ms: int,
        *,
        quorum_state: QuorumState = NO_STATE,
        snapshot: Snapshot | None = None,
        batches: Sequence[Batch] = (),
        applied_offset: int | None = None,
        leader_change_record: Callable[[int, int, frozenset[int]], bytes] = (
            default_leader_change_record
        ),
    ) -> None:
        """Start (or restart) from what was persisted. ``applied_offset``: how far the
        state machine has already applied (it must be durable); None means nothing, so
        the first Ready re-delivers the snapshot and the committed batches after it."""
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.config = config
        self.rng = rng
        self.now = now_ms
        self.is_voter = node_id in self.voters
        self._majority = len(self.voters) // 2 + 1
        self._others = tuple(sorted(self.voters - {node_id}))
        self._leader_change_record = leader_change_record
        self._out = _Outbox()

        self.log = RaftLog(snapshot, batches)
        self.epoch = quorum_state.epoch
        self.voted_for = quorum_state.voted_for
        self._leader = quorum_state.leader_id
        self.role = Role.UNATTACHED
        self.high_watermark = self.log.start_offset
        if applied_offset is None or applied_offset < self.log.start_offset:
            if snapshot is not None:
                self._out.committed_snapshot = snapshot
            self._applied = self.log.start_offset
        else:
            self._applied = min(applied_offset, self.log.end_offset)
            self.high_watermark = self._applied

        # timers and per-role state
        self._deadline = 0  # the role's timer: election / fetch liveness / backoff
        self._last_leader_contact = NEVER
        self._handed_over = False  # the leader followed sent EndQuorumEpoch
        self._fetch_inflight: tuple[int, int, int] | None = None  # (dst, offset, epoch)
        self._fetch_sent_ms = NEVER
        self._fetch_next_ms = 0
        self._validated = 0  # offset the current leader confirmed our log up to
        self._snap_id: SnapshotId | None = None
        self._snap_buf = bytearray()
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        self._vote_sent: dict[int, int] = {}
        self._replicas: dict[int, _Replica] = {}
        self._epoch_start_offset = 0
        self._leader_since = 0
        self._begin_pending: dict[int, int] = {}  # voter -> last BeginQuorumEpoch sent
        self._end_pending: dict[int, int] = {}  # voter -> last EndQuorumEpoch sent
        self._successors: tuple[int, ...] = ()
        self._retries = 0  # candidacies since this node last knew a leader (Kafka's)
        # The leader this voter gave up on when its fetch timeout ran out (not handed
        # over): presumed down, so not counted on to grant a vote, until it is heard from.
        self._lost_leader = -1

        if self.is_voter and self._leader == node_id:
            self._become_resigned(successors=None)
        elif self._leader >= 0 and self._leader != node_id:
            self._become_follower(self.epoch, self._leader)
        else:
            self._become_unattached(self.epoch, self.voted_for)
            if not self.is_voter:
                self._fetch_next_ms = now_ms
        if self.voters == {node_id}:
            self._become_prospective()
        self._deliver()

    # Queries ---------------------------------------------------------------------

    @property
    def leader_id(self) -> int:
        if self.role == Role.LEADER:
            return self.node_id
        if self.role == Role.FOLLOWER:
            return self._leader
        return -1

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.start_offset

    @property
    def last_epoch(self) -> int:
        return self.log.last_epoch

    @property
    def applied_offset(self) -> int:
        """The end of what has been handed out as committed."""
        return self._applied

    @property
    def leader_ready(self) -> bool:
        """Leader, and its epoch's start (the LeaderChange control batch) is committed."""
        return self.role == Role.LEADER and self.high_watermark > self._epoch_start_offset

    @property
    def quorum_state(self) -> QuorumState:
        return QuorumState(self.epoch, self.voted_for, self._leader)

    def describe(self) -> QuorumInfo:
        now = self.now
        voters = []
        observers = []
        for voter in sorted(self.voters):
            if voter == self.node_id:
                voters.append(ReplicaInfo(voter, self.log.end_offset, now, now))
            else:
                voters.append(self._replica_info(voter))
        if self.role == Role.LEADER:
            for replica_id in sorted(self._replicas):
                replica = self._replicas[replica_id]
                if replica_id in self.voters or replica.last_fetch_ms < now - OBSERVER_FORGET_MS:
                    continue
                observers.append(self._replica_info(replica_id))
        return QuorumInfo(
            self.leader_id, self.epoch, self.high_watermark, tuple(voters), tuple(observers)
        )

    def _replica_info(self, replica_id: int) -> ReplicaInfo:
        replica = self._replicas.get(replica_id) if self.role == Role.LEADER else None
        if replica is None:
            return ReplicaInfo(replica_id, -1, -1, -1)
        return ReplicaInfo(
            replica_id, replica.end_offset, replica.last_fetch_ms, replica.caught_up_ms
        )

    # Driver calls ------------------------------------------------------------------

    def ready(self) -> Ready:
        out = self._out
        self._out = _Outbox()
        return Ready(
            quorum_state=out.quorum_state,
            snapshot=out.snapshot,
            truncate_to=out.truncate_to,
            append=tuple(out.append),
            delete_before=out.delete_before,
            messages=tuple(out.messages),
            committed_snapshot=out.committed_snapshot,
            committed=tuple(out.committed),
            role=self.role,
            epoch=self.epoch,
            leader_id=self.leader_id,
            high_watermark=self.high_watermark,
        )

    @property
    def has_ready(self) -> bool:
        """Whether ``ready()`` would hand out anything to persist, send or apply."""
        out = self._out
        return bool(
            out.messages
            or out.append
            or out.committed
            or out.quorum_state is not None
            or out.snapshot is not None
            or out.truncate_to is not None
            or out.delete_before is not None
            or out.committed_snapshot is not None
        )

    def next_timer_ms(self) -> int:
        """The earliest time at which ``tick`` may do anything: a tick before it changes no
        role and hands nothing out. Calls other than ``tick`` may move it earlier."""
        timeout = self.config.request_timeout_ms
        role = self.role
        due = NO_TIMER
        if role == Role.LEADER:
            for replica in self._replicas.values():
                if replica.held is not None:
                    due = min(due, replica.held_until)
            for sent in self._begin_pending.values():
                due = min(due, sent + timeout)
            if len(self.voters) > 1:
                # Check-quorum: from the end of the first window on, the leader resigns
                # once fewer than a majority (itself included) fetched within the window:
                # when enough of the voters still counted have aged out.
                window = int(self.config.fetch_timeout_ms * CHECK_QUORUM_FACTOR)
                ageing = sorted(
                    self._replicas[v].last_fetch_ms + window
                    for v in self._others
                    if self._replicas[v].last_fetch_ms + window > self.now
                )
                spare = len(ageing) - (self._majority - 1)  # counted beyond a majority
                resigns_at = self.now if spare < 0 else ageing[spare]
                due = min(due, max(self._leader_since + window, resigns_at))
            return due
        if role in (Role.FOLLOWER, Role.UNATTACHED):
            if role == Role.FOLLOWER or self.is_voter:
                due = self._deadline
            if role == Role.FOLLOWER or not self.is_voter:
                if self._fetch_inflight is not None:
                    due = min(due, self._fetch_sent_ms + timeout)
                else:
                    due = min(due, self._fetch_next_ms)
            return due
        if role in (Role.PROSPECTIVE, Role.CANDIDATE):
            due = self._deadline
            for voter in self._others:
                if voter not in self._granted and voter not in self._rejected:
                    due = min(due, self._vote_sent.get(voter, NEVER) + timeout)
            return due
        # Resigned
        due = self._deadline
        for sent in self._end_pending.values():
            due = min(due, sent + timeout)
        return due

    def propose(self, records: Sequence[bytes], now_ms: int) -> int | None:
        """Append ``records`` as one batch in the leader's epoch; its base offset, or None
        when this node is not the leader."""
        self.now = now_ms
        if self.role != Role.LEADER:
            return None
        if not records:
            raise ValueError("a proposal needs at least one record")
        base = self.log.end_offset
        self._append(Batch(base, self.epoch, tuple(records)))
        self._leader_log_grew()
        return base

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown of a leader: stop leading and ask the others (most caught up
        first) to elect a successor with EndQuorumEpoch."""
        self.now = now_ms
        if self.role == Role.LEADER:
            self._become_resigned(successors=self._successor_order())

    def take_snapshot(self, snapshot: Snapshot) -> None:
        """The state machine snapshotted a committed prefix: keep it (to serve
        FetchSnapshot) and start the log at its end."""
        sid = snapshot.snapshot_id
        if sid.end_offset > self.high_watermark:
            raise ValueError(
                f"snapshot at {sid.end_offset} is past the high watermark {self.high_watermark}"
            )
        if sid.end_offset <= self.log.start_offset:
            return
        known = self.log.epoch_at(sid.end_offset)
        if known is not None and known != sid.epoch:
            raise ValueError(f"snapshot epoch {sid.epoch} is not the log's {known} there")
        self.log.advance_start(snapshot)
        if self._out.delete_before is None or self._out.delete_before < sid.end_offset:
            self._out.delete_before = sid.end_offset
        if self.role == Role.LEADER:
            for replica_id, replica in self._replicas.items():
                if replica.held is not None and replica.held.fetch_offset < sid.end_offset:
                    self._answer_held(replica_id, replica)

    def tick(self, now_ms: int) -> None:
        self.now = now = now_ms
        role = self.role
        if role == Role.LEADER:
            self._tick_leader(now)
        elif role == Role.FOLLOWER:
            if now >= self._deadline:
                if self.is_voter:
                    if not self._handed_over:
                        self._lost_leader = self._leader
                    self._become_prospective()
                else:
                    self._become_unattached(self.epoch, self.voted_for)
                    self._fetch_next_ms = now
                    self._maybe_fetch()
            else:
                self._maybe_fetch()
        elif role == Role.UNATTACHED:
            if self.is_voter:
                if now >= self._deadline:
                    self._become_prospective()
            else:
                self._maybe_fetch()
        elif role in (Role.PROSPECTIVE, Role.CANDIDATE):
            if now >= self._deadline:
                self._election_lost()
            else:
                self._retry_votes()
        elif role == Role.RESIGNED:
            self._retry_end_quorum()
            if now >= self._deadline:
                self._become_prospective()

    def receive(self, message: Message, now_ms: int) -> None:
        self.now = now_ms
        if message.src == self._lost_leader:
            self._lost_leader = -1
        handler = _HANDLERS.get(type(message))
        if handler is not None:
            handler(self, message)

    # State transitions ---------------------------------------------------------------

    def _persist_state(self, epoch: int, voted_for: int, leader: int) -> None:
        if (epoch, voted_for, leader) != (self.epoch, self.voted_for, self._leader):
            self.epoch, self.voted_for, self._leader = epoch, voted_for, leader
            self._out.quorum_state = QuorumState(epoch, voted_for, leader)

    def _leave_role(self) -> None:
        if self.role == Role.LEADER:
            for replica in self._replicas.values():
                if replica.held is not None:
                    request = replica.held
                    replica.held = None
                    self._reply_fetch_error(request, RaftError.NOT_LEADER_OR_FOLLOWER, -1)
            self._replicas = {}
            self._begin_pending = {}
        self._end_pending = {}
        self._granted = set()
        self._rejected = set()
        self._vote_sent = {}
        self._fetch_inflight = None
        self._snap_id = None
        self._snap_buf = bytearray()

    def _election_timeout(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self.rng.randrange(max(1, timeout))

    def _backoff(self) -> int:
        """Kafka's binary exponential election backoff: up to 100 ms after the first lost
        election, 300 after the second, 700 after the third..., never more than
        election.backoff.max.ms. Kafka draws whole multiples of 100 ms in that window; any
        millisecond of it is drawn here, so two voters that lost together rarely retry
        together."""
        doubled = 2 << min(20, max(1, self._retries) - 1)
        window = min(self.config.election_backoff_max_ms, ELECTION_BACKOFF_BASE_MS * (doubled - 1))
        return self.rng.randint(0, max(0, window))

    def _become_unattached(self, epoch: int, voted_for: int = -1, delay: int | None = None) -> None:
        self._leave_role()
        keep_leader = self._leader if epoch == self.epoch else -1
        self._persist_state(epoch, voted_for, keep_leader)
        self.role = Role.UNATTACHED
        self._deadline = self.now + (self._election_timeout() if delay is None else delay)

    def _become_follower(self, epoch: int, leader: int) -> None:
        same = self.role == Role.FOLLOWER and self._leader == leader and self.epoch == epoch
        if not same:
            self._leave_role()
            voted = self.voted_for if epoch == self.epoch else -1
            self._persist_state(epoch, voted, leader)
            self.role = Role.FOLLOWER
            self._validated = 0
            self._last_leader_contact = NEVER
            self._handed_over = False
            self._fetch_next_ms = self.now
            self._retries = 0
        self._lost_leader = -1
        self._deadline = self.now + self.config.fetch_timeout_ms
        self._maybe_fetch()

    def _become_prospective(self) -> None:
        self._leave_role()
        self.role = Role.PROSPECTIVE
        self._deadline = self.now + self._election_timeout()
        self._granted = {self.node_id}
        for voter in self._others:
            self._send_vote_request(voter, pre_vote=True)
        self._tally()

    def _become_candidate(self) -> None:
        self._leave_role()
        self._persist_state(self.epoch + 1, self.node_id, -1)
        self.role = Role.CANDIDATE
        self._retries += 1
        self._deadline = self.now + self._election_timeout()
        self._granted = {self.node_id}
        for voter in self._others:
            self._send_vote_request(voter, pre_vote=False)
        self._tally()

    def _become_leader(self) -> None:
        self._leave_role()
        self._persist_state(self.epoch, self.voted_for, self.node_id)
        self.role = Role.LEADER
        self._retries = 0
        self._lost_leader = -1
        self._leader_since = self.now
        self._epoch_start_offset = self.log.end_offset
        self._replicas = {voter: _Replica() for voter in self._others}
        record = self._leader_change_record(self.node_id, self.epoch, self.voters)
        self._append(Batch(self.log.end_offset, self.epoch, (record,), control=True))
        self._begin_pending = {}
        for voter in self._others:
            self._send_begin_quorum(voter)
        self._leader_log_grew()

    def _become_resigned(self, successors: tuple[int, ...] | None) -> None:
        self._leave_role()
        self._persist_state(self.epoch, self.voted_for, self.node_id)
        self.role = Role.RESIGNED
        self._deadline = self.now + self._election_timeout()
        if successors is not None:
            self._successors = successors
            for voter in self._others:
                self._send_end_quorum(voter)

    def _election_lost(self) -> None:
        """A pre-vote or vote round failed (rejected by a majority, or timed out)."""
        if self.role == Role.PROSPECTIVE and self._leader >= 0 and self._leader != self.node_id:
            self._become_follower(self.epoch, self._leader)
        else:
            self._become_unattached(self.epoch, self.voted_for, delay=self._backoff())

    def _observe(self, epoch: int, leader: int) -> bool:
        """Step to a higher ``epoch`` (as follower of ``leader`` when known), or learn the
        leader of the current one. True when the message's epoch is stale."""
        if epoch > self.epoch:
            if leader >= 0 and leader != self.node_id:
                self._become_follower(epoch, leader)
            else:
                self._become_unattached(epoch)
            return False
        if epoch < self.epoch:
            return True
        if (
            leader >= 0
            and leader != self.node_id
            and self.role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)
        ):
            self._become_follower(epoch, leader)
        return False

    # Votes ---------------------------------------------------------------------------

    def _send_vote_request(self, voter: int, pre_vote: bool) -> None:
        self._vote_sent[voter] = self.now
        epoch = self.epoch + 1 if pre_vote else self.epoch
        self._send(
            VoteRequest(
                self.node_id, voter, epoch, self.log.last_epoch, self.log.end_offset, pre_vote
            )
        )

    def _retry_votes(self) -> None:
        pre_vote = self.role == Role.PROSPECTIVE
        for voter in self._others:
            if voter in self._granted or voter in self._rejected:
                continue
            if self.now - self._vote_sent.get(voter, NEVER) >= self.config.request_timeout_ms:
                self._send_vote_request(voter, pre_vote)

    def _tally(self) -> None:
        """Win with a majority of grants; lose, and back off at once as Kafka does, when
        the rejections leave no majority within reach. The leader this voter lost (its
        fetches went unanswered for a whole fetch timeout) is not counted on to grant until
        it answers: else two followers that timed out on the same dead leader together, and
        split their votes, would both wait out the election timeout for its answer."""
        if len(self._granted) >= self._majority:
            if self.role == Role.PROSPECTIVE:
                self._become_candidate()
            elif self.role == Role.CANDIDATE:
                self._become_leader()
            return
        out = len(self._rejected)
        lost = self._lost_leader
        if lost in self.voters and lost not in self._granted and lost not in self._rejected:
            out += 1
        if out > len(self.voters) - self._majority:
            self._election_lost()

    def _log_up_to_date(self, request: VoteRequest) -> bool:
        return (request.last_offset_epoch, request.last_offset) >= (
            self.log.last_epoch,
            self.log.end_offset,
        )

    def _has_live_leader(self) -> bool:
        if self.role == Role.LEADER:
            return True
        return (
            self.role == Role.FOLLOWER
            and self.now - self._last_leader_contact < self.config.fetch_timeout_ms
        )

    def _on_vote_request(self, request: VoteRequest) -> None:
        def answer(granted: bool, error: RaftError = RaftError.NONE) -> None:
            self._send(
                VoteResponse(
                    self.node_id,
                    request.src,
                    error,
                    self.epoch,
                    self.leader_id,
                    granted,
                    request.token,
                    request.pre_vote,
                )
            )

        if request.epoch < self.epoch:
            answer(False, RaftError.FENCED_LEADER_EPOCH)
            return
        if request.src not in self.voters or not self.is_voter:
            if request.epoch > self.epoch and not request.pre_vote:
                self._become_unattached(request.epoch)
            answer(False, RaftError.INCONSISTENT_VOTER_SET if not self.is_voter else RaftError.NONE)
            return
        if request.pre_vote:
            # Granted only to a prospective behind no epoch of ours (it asks for one past
            # it): so a granted pre-vote always names an epoch below the one its candidate
            # takes, and can never pass for a vote, even if the flag were lost on the way.
            answer(
                request.epoch > self.epoch
                and self._log_up_to_date(request)
                and not self._has_live_leader()
            )
            return
        if request.epoch > self.epoch:
            self._become_unattached(request.epoch)
        grant = (
            self.role in (Role.UNATTACHED, Role.PROSPECTIVE)
            and self._leader < 0
            and self.voted_for in (-1, request.src)
            and self._log_up_to_date(request)
        )
        if grant:
            self._become_unattached(self.epoch, request.src)
        answer(grant)

    def _on_vote_response(self, response: VoteResponse) -> None:
        if response.epoch > self.epoch:
            self._observe(response.epoch, response.leader_id)
            return
        if self.role == Role.PROSPECTIVE:  # a stale real vote counted here does no harm
            if response.granted:
                self._granted.add(response.src)
            else:
                self._rejected.add(response.src)
                if response.epoch == self.epoch and response.leader_id >= 0:
                    if response.leader_id != self.node_id:
                        self._become_follower(self.epoch, response.leader_id)
                        return
            self._tally()
        elif self.role == Role.CANDIDATE and not response.pre_vote:
            if response.epoch != self.epoch:
                return
            if response.leader_id >= 0 and response.leader_id != self.node_id:
                self._become_follower(self.epoch, response.leader_id)
                return
            (self._granted if response.granted else self._rejected).add(response.src)
            self._tally()

    # BeginQuorumEpoch / EndQuorumEpoch ---------------------------------------------------

    def _send_begin_quorum(self, voter: int) -> None:
        self._begin_pending[voter] = self.now
        self._send(BeginQuorumEpochRequest(self.node_id, voter, self.epoch))

    def _send_end_quorum(self, voter: int) -> None:
        self._end_pending[voter] = self.now
        self._send(EndQuorumEpochRequest(self.node_id, voter, self.epoch, self._successors))

    def _retry_end_quorum(self) -> None:
        for voter, sent in list(self._end_pending.items()):
            if self.now - sent >= self.config.request_timeout_ms:
                self._send_end_quorum(voter)

    def _on_begin_quorum(self, request: BeginQuorumEpochRequest) -> None:
        def answer(error: RaftError) -> None:
            self._send(
                BeginQuorumEpochResponse(
                    self.node_id, request.src, error, self.epoch, self.leader_id, request.token
                )
            )

        if request.epoch < self.epoch:
            answer(RaftError.FENCED_LEADER_EPOCH)
            return
        if request.epoch == self.epoch and self.role in (Role.LEADER, Role.RESIGNED):
            answer(RaftError.INCONSISTENT_VOTER_SET)  # two leaders in one epoch: never
            return
        self._become_follower(request.epoch, request.src)
        self._last_leader_contact = self.now
        answer(RaftError.NONE)

    def _on_begin_quorum_response(self, response: BeginQuorumEpochResponse) -> None:
        if self._observe(response.epoch, response.leader_id):
            return
        if self.role == Role.LEADER and response.epoch == self.epoch:
            if response.error == RaftError.NONE:
                self._begin_pending.pop(response.src, None)
                self._heard_from(response.src)

    def _on_end_quorum(self, request: EndQuorumEpochRequest) -> None:
        def answer(error: RaftError) -> None:
            self._send(
                EndQuorumEpochResponse(
                    self.node_id, request.src, error, self.epoch, self.leader_id, request.token
                )
            )

        if request.epoch < self.epoch:
            answer(RaftError.FENCED_LEADER_EPOCH)
            return
        if request.epoch > self.epoch:
            self._become_follower(request.epoch, request.src)
        if self.role == Role.FOLLOWER and self._leader == request.src:
            self._last_leader_contact = NEVER
            self._handed_over = True
            if self.node_id in request.preferred_successors:
                position = request.preferred_successors.index(self.node_id)
                delay = 0
                if position > 0:
                    delay = min(
                        self.config.election_backoff_max_ms,
                        self.config.retry_backoff_ms * (1 << min(position - 1, 20)),
                    )
            else:
                delay = self._election_timeout()
            self._deadline = min(self._deadline, self.now + delay)
        answer(RaftError.NONE)

    def _on_end_quorum_response(self, response: EndQuorumEpochResponse) -> None:
        if self._observe(response.epoch, response.leader_id):
            return
        if response.epoch == self.epoch:
            self._end_pending.pop(response.src, None)

    # Leader: fetches ---------------------------------------------------------------------

    def _tick_leader(self, now: int) -> None:
        for replica_id, replica in self._replicas.items():
            if replica.held is not None and now >= replica.held_until:
                self._answer_held(replica_id, replica)
        for voter, sent in list(self._begin_pending.items()):
            if now - sent >= self.config.request_timeout_ms:
                self._send_begin_quorum(voter)
        if len(self.voters) > 1:
            window = int(self.config.fetch_timeout_ms * CHECK_QUORUM_FACTOR)
            if now - self._leader_since >= window:
                alive = 1 + sum(
                    1 for v in self._others if self._replicas[v].last_fetch_ms > now - window
                )
                if alive < self._majority:
                    self._become_resigned(successors=self._successor_order())

    def _successor_order(self) -> tuple[int, ...]:
        def key(voter: int) -> tuple[int, int, int]:
            replica = self._replicas.get(voter) or _Replica()
            return (-replica.end_offset, -replica.caught_up_ms, voter)

        return tuple(sorted(self._others, key=key))

    def _heard_from(self, replica_id: int) -> None:
        replica = self._replicas.get(replica_id)
        if replica is not None:
            replica.last_fetch_ms = max(replica.last_fetch_ms, self.now)

    def _reply_fetch_error(
        self, request: FetchRequest, error: RaftError, leader_id: int | None = None
    ) -> None:
        self._send(
            FetchResponse(
                self.node_id,
                request.src,
                error,
                self.epoch,
                self.leader_id if leader_id is None else leader_id,
                self.high_watermark,
                self.log.start_offset,
                token=request.token,
                fetch_offset=request.fetch_offset,
                last_fetched_epoch=request.last_fetched_epoch,
            )
        )

    def _leader_error(self, request_epoch: int) -> RaftError | None:
        if request_epoch < self.epoch:
            return RaftError.FENCED_LEADER_EPOCH
        if request_epoch > self.epoch:
            return RaftError.UNKNOWN_LEADER_EPOCH
        if self.role != Role.LEADER:
            return RaftError.NOT_LEADER_OR_FOLLOWER
        return None

    def _on_fetch(self, request: FetchRequest) -> None:
        error = self._leader_error(request.epoch)
        if error is not None:
            self._reply_fetch_error(request, error)
            return
        replica = self._replicas.get(request.src)
        if replica is None:
            replica = self._replicas[request.src] = _Replica()
        if replica.held is not None:
            self._answer_held(request.src, replica)
        offset = request.fetch_offset
        valid = self._check_fetch_position(offset, request.last_fetched_epoch) is None
        if valid:
            end = self.log.end_offset
            if offset >= end:
                replica.caught_up_ms = self.now
            elif offset >= replica.leader_end_at_last_fetch >= 0:
                replica.caught_up_ms = max(replica.caught_up_ms, replica.last_fetch_ms)
            replica.leader_end_at_last_fetch = end
            replica.end_offset = offset
        replica.last_fetch_ms = self.now
        self._begin_pending.pop(request.src, None)
        hw_moved = False
        if valid and request.src in self.voters:
            hw_moved = self._update_high_watermark()
        if (
            not valid
            or offset < self.log.end_offset
            or hw_moved
            or replica.sent_hw != self.high_watermark
            or request.max_wait_ms <= 0
        ):
            self._answer_fetch(request, replica)
        else:
            replica.held = request
            replica.held_until = self.now + min(request.max_wait_ms, self.config.fetch_max_wait_ms)

    def _check_fetch_position(self, offset: int, last_epoch: int) -> FetchResponse | None:
        """None when the fetcher's log matches ours up to ``offset``; else the answer that
        sets it right (a snapshot to fetch, or where it diverges)."""
        log = self.log
        if offset < log.start_offset:
            return self._fetch_answer(snapshot_id=log.snapshot_id)
        if offset == 0:
            return None
        epoch, end = log.end_offset_for_epoch(last_epoch)
        if epoch < 0 and log.start_offset > 0:
            return self._fetch_answer(snapshot_id=log.snapshot_id)
        if epoch != last_epoch or end < offset:
            return self._fetch_answer(diverging_epoch=epoch, diverging_end_offset=end)
        return None

    def _fetch_answer(self, **fields: Unpack[_FetchAnswer]) -> FetchResponse:
        return FetchResponse(
            self.node_id,
            -1,
            RaftError.NONE,
            self.epoch,
            self.node_id,
            self.high_watermark,
            self.log.start_offset,
            **fields,
        )

    def _answer_held(self, replica_id: int, replica: _Replica) -> None:
        request = replica.held
        replica.held = None
        if request is not None:
            self._answer_fetch(request, replica)

    def _answer_fetch(self, request: FetchRequest, replica: _Replica) -> None:
        answer = self._check_fetch_position(request.fetch_offset, request.last_fetched_epoch)
        if answer is None:
            limit = min(request.max_bytes, self.config.fetch_max_bytes)
            batches = self.log.read(request.fetch_offset, limit)
            answer = self._fetch_answer(batches=batches)
        replica.sent_hw = self.high_watermark
        self._send(
            FetchResponse(
                answer.src,
                request.src,
                answer.error,
                answer.epoch,
                answer.leader_id,
                answer.high_watermark,
                answer.log_start_offset,
                answer.batches,
                answer.diverging_epoch,
                answer.diverging_end_offset,
                answer.snapshot_id,
                request.token,
                request.fetch_offset,
                request.last_fetched_epoch,
            )
        )

    def _update_high_watermark(self) -> bool:
        ends = sorted(
            [self.log.end_offset] + [self._replicas[v].end_offset for v in self._others],
            reverse=True,
        )
        candidate = ends[self._majority - 1]
        if candidate > self.high_watermark and candidate > self._epoch_start_offset:
            self.high_watermark = candidate
            self._deliver()
            for replica_id, replica in self._replicas.items():
                if replica.held is not None:
                    self._answer_held(replica_id, replica)
            return True
        return False

    def _leader_log_grew(self) -> None:
        for replica_id, replica in self._replicas.items():
            if replica.held is not None:
                self._answer_held(replica_id, replica)
        self._update_high_watermark()

    def _on_fetch_snapshot(self, request: FetchSnapshotRequest) -> None:
        def answer(error: RaftError, size: int = 0, data: bytes = b"") -> None:
            self._send(
                FetchSnapshotResponse(
                    self.node_id,
                    request.src,
                    error,
                    self.epoch,
                    self.leader_id,
                    request.snapshot_id,
                    size,
                    request.position,
                    data,
                    request.token,
                )
            )

        error = self._leader_error(request.epoch)
        if error is not None:
            answer(error)
            return
        self._heard_from(request.src)
        snapshot = self.log.snapshot
        if snapshot is None or snapshot.snapshot_id != request.snapshot_id:
            answer(RaftError.SNAPSHOT_NOT_FOUND)
            return
        size = len(snapshot.data)
        if request.position < 0 or request.position > size:
            answer(RaftError.POSITION_OUT_OF_RANGE, size)
            return
        limit = max(1, min(request.max_bytes, self.config.fetch_snapshot_max_bytes))
        answer(RaftError.NONE, size, snapshot.data[request.position : request.position + limit])

    # Follower: fetching ------------------------------------------------------------------

    def _fetch_target(self) -> int:
        if self.role == Role.FOLLOWER:
            return self._leader
        return self.rng.choice(self._others) if self._others else -1

    def _maybe_fetch(self) -> None:
        if self.role != Role.FOLLOWER and (self.is_voter or self.role != Role.UNATTACHED):
            return
        if self._fetch_inflight is not None:
            if self.now - self._fetch_sent_ms < self.config.request_timeout_ms:
                return
        elif self.now < self._fetch_next_ms:
            return
        target = self._fetch_target()
        if target < 0:
            return
        self._fetch_sent_ms = self.now
        if self._snap_id is not None:
            self._fetch_inflight = (target, -1, -1)
            self._send(
                FetchSnapshotRequest(
                    self.node_id,
                    target,
                    self.epoch,
                    self._snap_id,
                    len(self._snap_buf),
                    self.config.fetch_snapshot_max_bytes,
                )
            )
            return
        offset, epoch = self.log.end_offset, self.log.last_epoch
        self._fetch_inflight = (target, offset, epoch)
        self._send(
            FetchRequest(
                self.node_id,
                target,
                self.epoch,
                offset,
                epoch,
                self.config.fetch_max_wait_ms,
                self.config.fetch_max_bytes,
            )
        )

    def _fetch_failed(self) -> None:
        self._fetch_inflight = None
        self._fetch_next_ms = self.now + self.config.retry_backoff_ms

    def _fetch_done(self) -> None:
        self._fetch_inflight = None
        self._fetch_next_ms = self.now
        self._maybe_fetch()

    def _on_fetch_response(self, response: FetchResponse) -> None:
        if response.epoch > self.epoch:
            self._observe(response.epoch, response.leader_id)
            return
        inflight = self._fetch_inflight
        if response.error != RaftError.NONE:
            if response.epoch == self.epoch:
                before = (self.role, self._leader)
                self._observe(response.epoch, response.leader_id)
                if (self.role, self._leader) != before:
                    return
            if self._fetch_inflight is not None and self._fetch_inflight[0] == response.src:
                self._fetch_failed()
            return
        if response.epoch < self.epoch or inflight is None or inflight[0] != response.src:
            return
        if self.role != Role.FOLLOWER or self._leader != response.src:
            # An observer looking for the leader found it.
            self._observe(response.epoch, response.src)
            return
        if response.fetch_offset >= 0:
            if (response.fetch_offset, response.last_fetched_epoch) != (
                self.log.end_offset,
                self.log.last_epoch,
            ):
                return  # an answer about a log we no longer have
        elif inflight[1:] != (self.log.end_offset, self.log.last_epoch):
            return
        self._last_leader_contact = self.now
        self._deadline = self.now + self.config.fetch_timeout_ms
        if response.snapshot_id is not None:
            # Our log is not in the leader's above its log start. When what we already
            # know committed reaches that start, only our tail above it is wrong.
            floor = max(self.high_watermark, self._validated)
            if response.snapshot_id.end_offset <= floor:
                if floor < self.log.end_offset:
                    self._truncate(floor)
            else:
                self._snap_id = response.snapshot_id
                self._snap_buf = bytearray()
        elif response.diverging_epoch >= 0 or response.diverging_end_offset >= 0:
            self._truncate_diverging(response.diverging_epoch, response.diverging_end_offset)
        else:
            for batch in response.batches:
                if batch.base_offset == self.log.end_offset and batch.epoch >= self.log.last_epoch:
                    self._append(batch)
            self._validated = self.log.end_offset
            hw = min(response.high_watermark, self.log.end_offset)
            if hw > self.high_watermark:
                self.high_watermark = hw
                self._deliver()
        self._fetch_done()

    def _truncate_diverging(self, epoch: int, end_offset: int) -> None:
        """KIP-320: keep what matches the leader's log, up to the end of the largest
        epoch both have; nothing of a later epoch survives. Never below what this leader
        already confirmed (a stale answer cannot undo that)."""
        _, own_end = self.log.end_offset_for_epoch(epoch)
        offset = max(min(end_offset, own_end), self._validated)
        if offset < self.log.end_offset:
            self._truncate(offset)

    def _truncate(self, offset: int) -> None:
        if offset < self.high_watermark:
            raise RuntimeError(
                f"node {self.node_id}: truncation to {offset} below the high watermark "
                f"{self.high_watermark}"
            )
        self.log.truncate_to(offset)
        out = self._out
        out.truncate_to = offset if out.truncate_to is None else min(out.truncate_to, offset)
        out.append = cut_batches(out.append, offset)

    def _on_fetch_snapshot_response(self, response: FetchSnapshotResponse) -> None:
        if response.epoch > self.epoch:
            self._observe(response.epoch, response.leader_id)
            return
        inflight = self._fetch_inflight
        if (
            response.epoch < self.epoch
            or inflight is None
            or inflight[0] != response.src
            or self._snap_id is None
            or self.role != Role.FOLLOWER
        ):
            return
        if response.error != RaftError.NONE:
            self._snap_id = None
            self._snap_buf = bytearray()
            self._fetch_failed()
            return
        if response.snapshot_id != self._snap_id or response.position != len(self._snap_buf):
            return
        self._last_leader_contact = self.now
        self._deadline = self.now + self.config.fetch_timeout_ms
        self._snap_buf += response.data
        if len(self._snap_buf) >= response.size:
            self._install(Snapshot(self._snap_id, bytes(self._snap_buf[: response.size])))
        self._fetch_done()

    def _install(self, snapshot: Snapshot) -> None:
        self._snap_id = None
        self._snap_buf = bytearray()
        end = snapshot.snapshot_id.end_offset
        if end <= max(self._applied, self.high_watermark):
            return
        self.log.install_snapshot(snapshot)
        out = self._out
        out.snapshot = snapshot
        out.truncate_to = None
        out.append = []
        out.committed_snapshot = snapshot
        out.committed = []
        self._applied = end
        self._validated = end
        self.high_watermark = max(self.high_watermark, end)

    # Log and commits ---------------------------------------------------------------------

    def _append(self, batch: Batch) -> None:
        self.log.append(batch)
        self._out.append.append(batch)

    def _deliver(self) -> None:
        """Hand out the batches the high watermark has passed."""
        if self.high_watermark > self._applied:
            batches = self.log.batches_between(self._applied, self.high_watermark)
            self._out.committed.extend(batches)
            if batches:
                self._applied = batches[-1].end_offset

    # Outgoing ------------------------------------------------------------------------------

    def _send(self, message: Message) -> None:
        self._out.messages.append(message)


class _FetchAnswer(TypedDict, total=False):
    """What a leader's Fetch answers carry beside its state (FetchResponse's fields)."""

    batches: tuple[Batch, ...]
    diverging_epoch: int
    diverging_end_offset: int
    snapshot_id: SnapshotId | None


_Handler = Callable[["RaftNode", Message], None]
_M = TypeVar("_M", bound=Message)


def _handler(kind: type[_M], handler: Callable[[RaftNode, _M], None]) -> tuple[type, _Handler]:
    """One entry of the dispatch table: ``receive`` looks a handler up by the message's
    own type, so a handler of ``kind`` is only ever given a ``kind``."""
    return kind, cast(_Handler, handler)


_HANDLERS: dict[type, _Handler] = dict(
    [
        _handler(VoteRequest, RaftNode._on_vote_request),
        _handler(VoteResponse, RaftNode._on_vote_response),
        _handler(BeginQuorumEpochRequest, RaftNode._on_begin_quorum),
        _handler(BeginQuorumEpochResponse, RaftNode._on_begin_quorum_response),
        _handler(EndQuorumEpochRequest, RaftNode._on_end_quorum),
        _handler(EndQuorumEpochResponse, RaftNode._on_end_quorum_response),
        _handler(FetchRequest, RaftNode._on_fetch),
        _handler(FetchResponse, RaftNode._on_fetch_response),
        _handler(FetchSnapshotRequest, RaftNode._on_fetch_snapshot),
        _handler(FetchSnapshotResponse, RaftNode._on_fetch_snapshot_response),
    ]
)
