"""A partition leader's replication state, sans-I/O (Kafka's ``Partition`` as leader).

Owns, for one partition this broker leads in one leader epoch:

- each follower's progress (``FollowerState``): its log end offset (the offset it last
  fetched from), the broker epoch its fetches carry (KIP-903), and when it last had
  everything the leader had, by Kafka's rule: a fetch at the leader's log end, or at
  the log end the leader had at the follower's previous fetch, counts as caught up
  (as of that fetch, or of the previous one). A follower that keeps fetching under a
  steady load is caught up although it never sees the very end;
- the ISR as committed (from the metadata, or the controller's answer to this leader's
  AlterPartition) and the change in flight (``IsrChange``). Until a change is settled
  the leader acts on the *maximal* ISR (KIP-497): the committed members plus those
  being added. The high watermark waits for all of them, so a follower is never made
  an ISR member while acknowledged records are missing from its log;
- the high watermark: the smallest log end offset among the maximal ISR and the
  followers that are caught up and may join (Kafka's maybeIncrementLeaderHW); it never
  moves back (the caller keeps the larger of the two);
- which ISR change to ask for next: a follower at or past the high watermark and the
  start of this leader epoch, caught up within ``replica.lag.time.max.ms`` (so that it
  is not removed again at the next check: a follower that reaches the high watermark
  but never keeps up does not go in and out of the ISR), eligible (registered,
  unfenced, not shutting down, and fetching with the broker epoch the metadata has for
  it) joins, one at a time; followers not caught up within ``replica.lag.time.max.ms``
  leave, together. One
  change is in flight at a time. A leader elected uncleanly first reports itself
  recovered, alone in the ISR (KIP-704);
- what became of a change: an answer makes its ISR the committed one; a refusal the
  controller guarantees was not applied (INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED)
  drops it; a refusal that a newer metadata state explains (FENCED_LEADER_EPOCH,
  INVALID_UPDATE_VERSION, NEW_LEADER_ELECTED, an unknown topic) keeps it pending until
  that state arrives; anything else (a lost connection, a timeout, NOT_CONTROLLER) is
  retried with the same request, which can apply at most once (it names the partition
  epoch it was built on);
- whether an acks=all append is done: once the high watermark passes it, success if
  the committed ISR still has ``min.insync.replicas`` members, else
  NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka's checkEnoughReplicasReachOffset).

Does not own the log, the clock, the network or the metadata: the caller passes the
leader's log end offset, the time and which brokers are eligible, and sends the
AlterPartition it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode

# (broker id, the broker epoch its fetches carry) -> may it be an ISR member now?
Eligibility = Callable[[int, int], bool]

UNKNOWN_OFFSET = -1
NO_BROKER_EPOCH = -1
NEVER_MS = -(2**62)  # a follower that has not been caught up in this leader epoch


@dataclass
class FollowerState:
    """What the leader knows of one follower."""

    log_end_offset: int = UNKNOWN_OFFSET
    broker_epoch: int = NO_BROKER_EPOCH
    last_fetch_ms: int = 0
    last_fetch_leader_log_end: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = NEVER_MS

    def caught_up(self, leader_log_end: int, now_ms: int, lag_time_max_ms: int) -> bool:
        return (
            self.log_end_offset == leader_log_end
            or now_ms - self.last_caught_up_ms <= lag_time_max_ms
        )


@dataclass(frozen=True)
class IsrChange:
    """An AlterPartition this leader asked for and has not seen settled."""

    isr: tuple[int, ...]
    # (broker id, broker epoch) for each member of ``isr``, as the request carries them
    members: tuple[tuple[int, int], ...]
    partition_epoch: int  # of the committed state it was built on
    committed_isr: tuple[int, ...]
    recovered: bool = False  # reports the end of an unclean election's recovery

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.committed_isr + tuple(r for r in self.isr if r not in self.committed_isr)

    @property
    def added(self) -> tuple[int, ...]:
        return tuple(r for r in self.isr if r not in self.committed_isr)

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(r for r in self.committed_isr if r not in self.isr)


# Refusals after which the controller guarantees the change was not and will not be made.
_NOT_APPLIED = frozenset({ErrorCode.ineligible_replica, ErrorCode.operation_not_attempted})
# Refusals explained by a newer state the metadata will bring: keep the change pending.
_AWAIT_METADATA = frozenset(
    {
        ErrorCode.fenced_leader_epoch,
        ErrorCode.invalid_update_version,
        ErrorCode.new_leader_elected,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
    }
)


@dataclass
class PartitionLeader:
    """One partition led by ``local_id`` in ``leader_epoch``; see the module docstring."""

    local_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int
    # Where this leader epoch begins in the log: a follower joins only past it.
    epoch_start_offset: int
    lag_time_max_ms: int
    recovering: bool = False  # elected uncleanly, recovery not reported yet
    pending: IsrChange | None = None
    followers: dict[int, FollowerState] = field(default_factory=dict)

    @classmethod
    def elected(
        cls,
        local_id: int,
        leader_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        partition_epoch: int,
        epoch_start_offset: int,
        now_ms: int,
        lag_time_max_ms: int,
        *,
        recovering: bool = False,
    ) -> PartitionLeader:
        """A new leader: ISR followers count as caught up now, the others as never
        (so that the high watermark does not wait for a replica that is not in sync)."""
        isr = tuple(isr)
        leader = cls(
            local_id,
            leader_epoch,
            tuple(replicas),
            isr,
            partition_epoch,
            epoch_start_offset,
            lag_time_max_ms,
            recovering,
        )
        for replica in leader.replicas:
            if replica != local_id:
                leader.followers[replica] = FollowerState(
                    last_caught_up_ms=now_ms if replica in isr else NEVER_MS
                )
        return leader

    # Inputs ------------------------------------------------------------------------

    def committed(
        self,
        replicas: Iterable[int],
        isr: Iterable[int],
        partition_epoch: int,
        *,
        recovering: bool = False,
    ) -> bool:
        """A committed state of the partition in this leader epoch (from the metadata or
        the controller's answer). An older one than known is ignored; a newer one
        settles the change in flight (it was made, or can no longer be). True if it
        was newer."""
        if partition_epoch <= self.partition_epoch:
            return False
        self.partition_epoch = partition_epoch
        self.isr = tuple(isr)
        self.recovering = recovering
        self.pending = None
        self.replicas = tuple(replicas)
        for replica in list(self.followers):
            if replica not in self.replicas:
                del self.followers[replica]
        for replica in self.replicas:
            if replica != self.local_id and replica not in self.followers:
                self.followers[replica] = FollowerState()
        return True

    def follower_fetched(
        self,
        replica: int,
        fetch_offset: int,
        broker_epoch: int,
        leader_log_end: int,
        now_ms: int,
    ) -> bool:
        """A follower fetched from ``fetch_offset``: it holds everything below it. False
        when ``replica`` is not a replica of the partition, or the fetch carries an older
        broker epoch than one seen already (sent before the follower restarted): its
        progress is not kept then."""
        follower = self.followers.get(replica)
        if follower is None or 0 <= broker_epoch < follower.broker_epoch:
            return False  # not a replica, or a late fetch of an earlier incarnation
        if fetch_offset >= leader_log_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_log_end >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.broker_epoch = broker_epoch
        follower.last_fetch_leader_log_end = max(leader_log_end, follower.last_fetch_leader_log_end)
        follower.last_fetch_ms = now_ms
        return True

    def answered(self, change: IsrChange, isr: Iterable[int], partition_epoch: int) -> None:
        """The controller made ``change``: the partition is now at ``partition_epoch``
        with ``isr``."""
        if self.pending is change:
            self.committed(self.replicas, isr, partition_epoch, recovering=False)

    def refused(self, change: IsrChange, error: ErrorCode | None) -> bool:
        """The controller refused ``change`` with ``error`` (None: no answer came, the
        connection broke or the time ran out). True when the same request should be
        sent again."""
        if self.pending is not change:
            return False
        if error in _NOT_APPLIED:
            self.pending = None
            return False
        return error not in _AWAIT_METADATA

    # Questions ---------------------------------------------------------------------

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.pending.maximal_isr if self.pending is not None else self.isr

    def high_watermark(self, leader_log_end: int, now_ms: int, eligible: Eligibility) -> int:
        """The offset below which every member of the maximal ISR, and every follower
        caught up and eligible to join it, holds the log."""
        maximal = self.maximal_isr
        high_watermark = leader_log_end
        for replica, follower in self.followers.items():
            if follower.log_end_offset >= high_watermark:
                continue
            if replica in maximal or (
                follower.caught_up(leader_log_end, now_ms, self.lag_time_max_ms)
                and eligible(replica, follower.broker_epoch)
            ):
                high_watermark = follower.log_end_offset
        return high_watermark

    def next_isr_change(
        self,
        leader_log_end: int,
        high_watermark: int,
        now_ms: int,
        eligible: Eligibility,
        local_broker_epoch: int,
    ) -> IsrChange | None:
        """The ISR change to ask the controller for now, if any; it is pending from here
        on (at most one at a time)."""
        if self.pending is not None:
            return None
        if self.recovering:
            return self._propose((self.local_id,), local_broker_epoch, recovered=True)
        for replica in self.replicas:
            if replica == self.local_id or replica in self.isr:
                continue
            follower = self.followers.get(replica)
            if (
                follower is not None
                and follower.log_end_offset >= high_watermark
                and follower.log_end_offset >= self.epoch_start_offset
                and follower.caught_up(leader_log_end, now_ms, self.lag_time_max_ms)
                and eligible(replica, follower.broker_epoch)
            ):
                return self._propose((*self.isr, replica), local_broker_epoch)
        lagging = [
            replica
            for replica in self.isr
            if replica != self.local_id
            and (
                (follower := self.followers.get(replica)) is None
                or not follower.caught_up(leader_log_end, now_ms, self.lag_time_max_ms)
            )
        ]
        if lagging:
            return self._propose(tuple(r for r in self.isr if r not in lagging), local_broker_epoch)
        return None

    def _propose(
        self, isr: tuple[int, ...], local_broker_epoch: int, *, recovered: bool = False
    ) -> IsrChange:
        members = tuple(
            (
                replica,
                local_broker_epoch
                if replica == self.local_id
                else self.followers[replica].broker_epoch
                if replica in self.followers
                else NO_BROKER_EPOCH,
            )
            for replica in isr
        )
        self.pending = IsrChange(isr, members, self.partition_epoch, self.isr, recovered)
        return self.pending

    def may_append(self, min_insync_replicas: int) -> bool:
        """Whether an acks=all append may start: the committed ISR is large enough."""
        return len(self.isr) >= min_insync_replicas

    def acks_outcome(
        self, end_offset: int, high_watermark: int, min_insync_replicas: int
    ) -> ErrorCode | None:
        """An acks=all append ending at ``end_offset``: None while the high watermark is
        below it, then NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the committed ISR
        shrank below ``min_insync_replicas`` meanwhile."""
        if high_watermark < end_offset:
            return None
        if len(self.isr) < min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none


def diverging_epoch(
    last_fetched_epoch: int,
    fetch_offset: int,
    end_offset_for_epoch: Callable[[int], tuple[int, int]],
) -> tuple[int, int] | None:
    """KIP-320, on the leader: where a fetcher's log stops agreeing with the leader's, as
    (epoch, end offset), or None when it agrees. The fetcher's last fetched epoch must
    end at or after its fetch offset here; otherwise it is told the leader's end of that
    epoch (or of the largest epoch below it; (-1, -1) when the leader has none at or
    below it: OFFSET_OUT_OF_RANGE)."""
    if last_fetched_epoch < 0:
        return None
    epoch, end = end_offset_for_epoch(last_fetched_epoch)
    if epoch == last_fetched_epoch and end >= fetch_offset:
        return None
    return epoch, end
