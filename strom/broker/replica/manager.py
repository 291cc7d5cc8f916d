"""Replication of partition data between brokers: the network side of the replica
manager, and the leader's one append path.

Owns, for every partition replica this broker hosts, what Kafka's ReplicaManager does,
carrying out the decisions of ``strom.replication`` (the sans-I/O rules):

- Roles follow the committed metadata: when a partition's leader or leader epoch
  changes, this broker becomes its leader (a ``PartitionLeader``) or a follower
  (``metadata_changed``); the log of a partition it no longer replicates (reassigned
  away) is deleted.
- As a follower it fetches from the leader (``ReplicaFetcher``: one per leader broker
  and fetcher thread, ``num.replica.fetchers``, every partition it follows from that
  leader in one Fetch with its replica id and broker epoch, ``replica.fetch.max.bytes``,
  ``replica.fetch.min.bytes``, ``replica.fetch.wait.max.ms``), appends what comes back
  as it is, truncates where the leader says its log diverged (``replication.follower``),
  and takes the leader's high watermark (capped by its own log end).
- As a leader it tells the partition's ``PartitionLeader`` of each follower fetch (the
  offset and broker epoch), sets the high watermark it computes (acks=all waits are
  woken through the purgatory), and sends the AlterPartition it asks for until the
  change is settled (``_alter_isr``), checking every ``ISR_CHECK_S`` for followers
  that fell behind.
- The one append path of a leader (``append_as_leader``, ``append_marker_as_leader``,
  ``append_for_coordinator``): Produce, transaction markers and the coordinators'
  records are appended here, refused (AppendRefused) when this broker does not lead or
  an acks=all append finds the ISR below ``min.insync.replicas``; then fetchers wake,
  the high watermark moves, metrics count. ``acknowledged`` / ``wait_acknowledged``
  answer an acks=all append: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
  NOT_LEADER_OR_FOLLOWER, or still waiting.
- Throttles (reassignment): the replication of replicas listed in a topic's
  ``leader.replication.throttled.replicas`` (this broker as their leader) and
  ``follower.replication.throttled.replicas`` (as their follower) is held to the
  broker's ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``
  bytes per second: past the rate, the leader sends such partitions no data and the
  follower leaves them out of its fetches until the quota has room again.

Does not own the rules (``strom.replication``), the log (``strom.storage.partition_log``),
the wire format of Fetch (``fetch.py`` serves it), or the metadata
(``strom.cluster.node_state``).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32, i32Timedelta, i64

from strom.broker.common import stop_task
from strom.broker.network.peer_client import PeerConnection, PeerError
from strom.broker.node import LocalNode
from strom.cluster.image import NO_LEADER
from strom.cluster.partition_change import LEADER_RECOVERING
from strom.config import LONG_MAX, TOPIC_CONFIGS, ConfigError, throttled
from strom.coordinator.internal_log import Appended, AppendRefused
from strom.coordinator.offsets_topic import OFFSETS_TOPIC
from strom.coordinator.transaction_log import TRANSACTION_TOPIC
from strom.protocol.errors import ErrorCode
from strom.protocol.records import CorruptBatchError, validate_batches
from strom.replication import follower
from strom.replication.leader import IsrChange, PartitionLeader

if TYPE_CHECKING:
    from strom.cluster.image import PartitionState
    from strom.protocol.records import BatchHeader
    from strom.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

PartitionKey = tuple[str, int]
ISR_CHECK_S = 0.25
FETCH_BACKOFF_S = 0.2
ALTER_ISR_TIMEOUT_S = 5.0


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(frozen=True)
class LeaderAppend:
    """Where a leader's append landed: acknowledged once the high watermark passes
    ``end_offset`` while this broker still leads in ``leader_epoch`` (``acknowledged``)."""

    topic: str
    partition: int
    base_offset: int
    end_offset: int
    leader_epoch: int
    partition_log: PartitionLog
    replicated: bool  # followers move the high watermark


class ReplicationQuota:
    """A bytes-per-second budget for throttled replication: a token bucket holding at
    most one second of the rate, which the config can change at any time."""

    def __init__(self, config: Any, key: str) -> None:
        self.config = config
        self.key = key
        self._tokens = 0.0
        self._at = time.monotonic()

    def exceeded(self) -> bool:
        rate = int(self.config[self.key])
        if rate >= LONG_MAX:
            return False
        now = time.monotonic()
        self._tokens = min(float(rate), self._tokens + (now - self._at) * rate)
        self._at = now
        return self._tokens <= 0

    def record(self, size: int) -> None:
        if int(self.config[self.key]) < LONG_MAX:
            self._tokens -= size


def _throttled(view: Any, key: str, partition: int, broker_id: int) -> bool:
    raw = view.configs.get(key) if view is not None else None
    if not raw:
        return False
    try:
        return throttled(TOPIC_CONFIGS[key].parse(raw), partition, broker_id)
    except ConfigError:
        return False


class ReplicaHolder(LocalNode, Protocol):
    """A node as the parts that write through its leaders see it: who it is and its
    replica manager (the share-partitions' state, transaction markers)."""

    @property
    def replicas(self) -> ReplicaManager: ...


class ReplicaManager:
    def __init__(self, broker: LocalNode) -> None:
        self.broker = broker
        self.state = broker.state
        self.node_id = broker.node_id
        config = broker.config
        self.lag_time_max_ms = int(config["replica.lag.time.max.ms"])
        self.fetchers_per_leader = max(1, int(config["num.replica.fetchers"]))
        self.roles: dict[PartitionKey, tuple[int, int]] = {}  # (leader, leader epoch)
        self.leading: dict[PartitionKey, PartitionLeader] = {}
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}  # (leader, fetcher #)
        self.leader_quota = ReplicationQuota(config, "leader.replication.throttled.rate")
        self.follower_quota = ReplicationQuota(config, "follower.replication.throttled.rate")
        self._isr_task: asyncio.Task[None] | None = None
        self._isr_changes: set[asyncio.Task[None]] = set()  # AlterPartitions in flight
        self._strays_checked = False

    def start(self) -> None:
        self._isr_task = asyncio.get_running_loop().create_task(self._check_isr_forever())
        self.metadata_changed()

    async def stop(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
        for task in list(self._isr_changes):
            task.cancel()
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()

    # Roles ------------------------------------------------------------------------

    def metadata_changed(self) -> None:
        """Bring roles in step with the committed metadata (after every change)."""
        if not self.state.hosts_logs:
            return
        seen: set[PartitionKey] = set()
        for name, topic in self.state.topics.items():
            for index, partition in topic.states.items():
                if self.node_id not in partition.replicas:
                    continue
                key = (name, index)
                seen.add(key)
                role = (partition.leader, partition.leader_epoch)
                if self.roles.get(key) == role:
                    leader = self.leading.get(key)
                    if leader is not None and leader.committed(
                        partition.replicas,
                        partition.isr,
                        partition.partition_epoch,
                        recovering=partition.leader_recovery_state == LEADER_RECOVERING,
                    ):
                        self.maybe_advance_high_watermark(key)
                        self.maybe_change_isr(key)
                    continue
                self.roles[key] = role
                if partition.leader == self.node_id:
                    self._become_leader(key, partition)
                else:
                    self._become_follower(key, partition)
        gone = set(self.roles) - seen
        for key in gone:
            self.roles.pop(key, None)
            self.leading.pop(key, None)
            self._stop_following(key)
            self.broker.purgatory.notify(*key)
            self._coordinators_lose(key)
        if gone or not self._strays_checked:
            self._strays_checked = True
            self._delete_strays()

    def _delete_strays(self) -> None:
        """Delete the logs of partitions this broker is no longer a replica of (moved
        away by a reassignment, perhaps while it was down). Only once the metadata has
        caught up (roles are kept from then on): a replay that passes an old state must
        not take a log that a later record gives back."""
        logs = self.state.logs
        for partition_log in logs.all_logs():
            view = self.state.topics.get(partition_log.topic)
            state = view.states.get(partition_log.partition) if view is not None else None
            if state is not None and self.node_id not in state.replicas:
                logs.delete_partition(partition_log.topic, partition_log.partition)

    def _become_leader(self, key: PartitionKey, partition: PartitionState) -> None:
        self._stop_following(key)
        self.broker.purgatory.notify(*key)  # waits of an earlier epoch end now
        partition_log = self.state.partition_log(*key)
        if partition_log is not None:
            partition_log.assign_epoch(partition.leader_epoch)
        self.leading[key] = PartitionLeader.elected(
            self.node_id,
            partition.leader_epoch,
            partition.replicas,
            partition.isr,
            partition.partition_epoch,
            partition_log.log_end_offset if partition_log is not None else 0,
            _now_ms(),
            self.lag_time_max_ms,
            recovering=partition.leader_recovery_state == LEADER_RECOVERING,
        )
        log.info(
            "leader of %s-%d at epoch %d (ISR %s)",
            key[0],
            key[1],
            partition.leader_epoch,
            list(partition.isr),
        )
        self.maybe_advance_high_watermark(key)
        if key[0] == OFFSETS_TOPIC:
            self.broker.coordinator.load_partition(key[1])
        elif key[0] == TRANSACTION_TOPIC:
            self.broker.transactions.load_partition(key[1])
        if partition.leader_recovery_state == LEADER_RECOVERING:
            end = partition_log.log_end_offset if partition_log is not None else -1
            log.warning(
                "%s-%d: elected leader from outside the ISR (unclean election): records the "
                "old ISR had beyond offset %d are lost",
                key[0],
                key[1],
                end,
            )
        self.maybe_change_isr(key)  # an unclean election's leader reports its recovery

    def _coordinators_lose(self, key: PartitionKey) -> None:
        """This broker no longer leads ``key``: a coordinator whose state lives there
        hands its groups or transactional ids over."""
        if key[0] == OFFSETS_TOPIC:
            self.broker.coordinator.unload_partition(key[1])
        elif key[0] == TRANSACTION_TOPIC:
            self.broker.transactions.unload_partition(key[1])

    def _become_follower(self, key: PartitionKey, partition: PartitionState) -> None:
        self.leading.pop(key, None)
        self._stop_following(key)
        self.broker.purgatory.notify(*key)  # acks=all waits here learn they lost it
        self._coordinators_lose(key)
        if partition.leader == NO_LEADER:
            return
        slot = hash(key) % self.fetchers_per_leader
        fetcher = self.fetchers.get((partition.leader, slot))
        if fetcher is None:
            fetcher = ReplicaFetcher(self, partition.leader)
            self.fetchers[(partition.leader, slot)] = fetcher
            fetcher.start()
        fetcher.follow(key)
        log.info(
            "following %s-%d from broker %d at epoch %d",
            key[0],
            key[1],
            partition.leader,
            partition.leader_epoch,
        )

    def _stop_following(self, key: PartitionKey) -> None:
        for fetcher in self.fetchers.values():
            fetcher.unfollow(key)

    # The leader's side -------------------------------------------------------------

    def leader_throttled(self, topic: str, partition: int) -> bool:
        """Whether serving followers of ``topic``-``partition`` is throttled here now."""
        view = self.state.topics.get(topic)
        return (
            _throttled(view, "leader.replication.throttled.replicas", partition, self.node_id)
            and self.leader_quota.exceeded()
        )

    def leader_sent(self, topic: str, partition: int, size: int) -> None:
        """A follower was sent ``size`` bytes of ``topic``-``partition``."""
        view = self.state.topics.get(topic)
        if _throttled(view, "leader.replication.throttled.replicas", partition, self.node_id):
            self.leader_quota.record(size)

    def is_replicated(self, topic: str, partition: int) -> bool:
        view = self.state.topics.get(topic)
        state = view.states.get(partition) if view is not None else None
        return state is not None and len(state.replicas) > 1

    def min_insync_replicas(self, topic: str) -> int:
        """``min.insync.replicas`` of ``topic`` (its own setting, else the broker's)."""
        view = self.state.topics.get(topic)
        value = view.configs.get("min.insync.replicas") if view is not None else None
        return int(value) if value is not None else int(self.broker.config["min.insync.replicas"])

    def _eligible(self, broker_id: int, fetched_epoch: int) -> bool:
        """Whether ``broker_id`` may be an ISR member (Kafka's isReplicaIsrEligible):
        registered, unfenced, not shutting down, and fetching with the broker epoch its
        registration has (KIP-903: a broker that restarted must be known again first)."""
        registration = self.state.image.brokers.get(broker_id)
        if registration is None or not registration.active:
            return False
        return fetched_epoch < 0 or fetched_epoch == registration.epoch

    def follower_fetched(
        self,
        topic: str,
        partition: int,
        replica_id: int,
        fetch_offset: int,
        broker_epoch: int = -1,
    ) -> None:
        """A follower asked for ``fetch_offset``: it holds everything below it."""
        key = (topic, partition)
        leader = self.leading.get(key)
        partition_log = self.state.partition_log(topic, partition)
        if leader is None or partition_log is None:
            return
        now = _now_ms()
        if leader.follower_fetched(
            replica_id, fetch_offset, broker_epoch, partition_log.log_end_offset, now
        ):
            self.maybe_advance_high_watermark(key, now)
            self.maybe_change_isr(key, now)

    # The one append path of a leader -------------------------------------------------

    def _leader_log(
        self, topic: str, partition: int, required_acks: int
    ) -> tuple[PartitionLog, int, bool]:
        """(log, leader epoch, replicated) of a partition this broker leads, or
        AppendRefused: not here, not led here, or acks=all with fewer ISR members than
        ``min.insync.replicas`` (Kafka's check before an append)."""
        view = self.state.topics.get(topic)
        state = view.states.get(partition) if view is not None else None
        partition_log = self.state.partition_log(topic, partition)
        if view is None or state is None:
            raise AppendRefused(ErrorCode.unknown_topic_or_partition)
        if partition_log is None or state.leader != self.node_id:
            raise AppendRefused(ErrorCode.not_leader_or_follower)
        replicated = len(state.replicas) > 1
        if replicated:
            leader = self.leader_of((topic, partition), state.leader_epoch)
            if leader is None:  # roles not in step with the metadata yet
                raise AppendRefused(ErrorCode.not_leader_or_follower)
            if required_acks == -1 and not leader.may_append(self.min_insync_replicas(topic)):
                raise AppendRefused(ErrorCode.not_enough_replicas)
        return partition_log, state.leader_epoch, replicated

    def append_as_leader(
        self,
        topic: str,
        partition: int,
        buf: bytearray | memoryview,
        headers: list[BatchHeader],
        *,
        required_acks: int = -1,
        log_append_time_ms: int | None = None,
        defer_flush: bool = False,
    ) -> LeaderAppend:
        """Append validated batches as this partition's leader: every leader append
        (Produce, the coordinators' records) comes here, as Kafka's
        ReplicaManager.appendRecords. Refused (AppendRefused) when this broker does not
        lead the partition or, for ``required_acks`` -1, its ISR is below
        ``min.insync.replicas``; the log's own refusals (producer epochs, sequences,
        transactions) are raised as the log raises them. After the append: fetchers
        waiting for data wake up, the high watermark moves (alone in the ISR: at once),
        metrics count the batches. A retried batch already in the log (the log answers
        with the offset its first copy got) ends where that copy ends: it is
        acknowledged once the high watermark has passed that copy, as Kafka answers,
        whatever the log holds after it."""
        partition_log, epoch, replicated = self._leader_log(topic, partition, required_acks)
        end_before = partition_log.log_end_offset
        base_offset = partition_log.append(
            buf,
            headers,
            leader_epoch=epoch,
            log_append_time_ms=log_append_time_ms,
            defer_flush=defer_flush,
            advance_high_watermark=not replicated,
        )
        end_offset = partition_log.log_end_offset
        if base_offset < end_before:  # a retry: the same records as its first copy
            count = sum(h.last_offset_delta + 1 for h in headers)
            end_offset = min(end_offset, base_offset + count)
        self._after_append(topic, partition, replicated, headers)
        return LeaderAppend(
            topic, partition, base_offset, end_offset, epoch, partition_log, replicated
        )

    def append_for_coordinator(
        self, topic: str, partition: int, buf: bytearray, headers: list[BatchHeader]
    ) -> Appended:
        """The coordinators' records (offsets, groups, transaction states): acks=all
        appends (``append_as_leader``), as Kafka's coordinators write."""
        appended = self.append_as_leader(topic, partition, buf, headers, required_acks=-1)
        return Appended(partition, appended.end_offset, appended.leader_epoch, appended.replicated)

    def append_marker_as_leader(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> LeaderAppend:
        """A transaction marker, appended as ``append_as_leader`` appends (acks=all)."""
        partition_log, epoch, replicated = self._leader_log(topic, partition, -1)
        offset = partition_log.append_marker(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            leader_epoch=epoch,
            advance_high_watermark=not replicated,
        )
        self._after_append(topic, partition, replicated, ())
        return LeaderAppend(
            topic, partition, offset, partition_log.log_end_offset, epoch, partition_log, replicated
        )

    def _after_append(
        self, topic: str, partition: int, replicated: bool, headers: Iterable[BatchHeader]
    ) -> None:
        self.broker.purgatory.notify(topic, partition)
        if replicated:
            self.maybe_advance_high_watermark((topic, partition))
        metrics = self.broker.metrics
        if metrics is not None and headers:
            metrics.appended(topic, headers)

    def append_acknowledged(self, appended: LeaderAppend) -> ErrorCode | None:
        """``acknowledged`` for what ``append_as_leader`` returned; NONE at once when
        the partition has no followers."""
        if not appended.replicated:
            return ErrorCode.none
        return self.acknowledged(
            (appended.topic, appended.partition),
            appended.end_offset,
            appended.leader_epoch,
            appended.partition_log,
        )

    def leader_of(self, key: PartitionKey, leader_epoch: int) -> PartitionLeader | None:
        """This broker's replication state for ``key`` while it leads in ``leader_epoch``."""
        leader = self.leading.get(key)
        return leader if leader is not None and leader.leader_epoch == leader_epoch else None

    def acknowledged(
        self,
        key: PartitionKey,
        end_offset: int,
        leader_epoch: int,
        partition_log: PartitionLog | None,
    ) -> ErrorCode | None:
        """Whether a leader's acks=all append ending at ``end_offset`` in
        ``leader_epoch`` is done: NONE once the high watermark has passed it while this
        broker still leads in that epoch (the same log) and the ISR still has
        ``min.insync.replicas`` members, NOT_ENOUGH_REPLICAS_AFTER_APPEND when it has
        fewer then, NOT_LEADER_OR_FOLLOWER as soon as this broker does not lead in that
        epoch (the append may be truncated away, whatever the high watermark says
        then), None while it waits."""
        view = self.state.topics.get(key[0])
        state = view.states.get(key[1]) if view is not None else None
        leader = self.leader_of(key, leader_epoch)
        if (
            state is None
            or leader is None
            or partition_log is None
            or state.leader != self.node_id
            or state.leader_epoch != leader_epoch
            or self.state.partition_log(*key) is not partition_log
        ):
            return ErrorCode.not_leader_or_follower
        return leader.acks_outcome(
            end_offset, partition_log.high_watermark, self.min_insync_replicas(key[0])
        )

    async def wait_acknowledged(self, appended: LeaderAppend, timeout_s: float) -> ErrorCode:
        """Wait until ``append_acknowledged`` decides: NONE,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, or REQUEST_TIMED_OUT
        after ``timeout_s``."""
        return await self._wait_decided(
            (appended.topic, appended.partition),
            lambda: self.append_acknowledged(appended),
            timeout_s,
        )

    async def wait_for_high_watermark(
        self, key: PartitionKey, offset: int, leader_epoch: int, timeout_s: float
    ) -> bool:
        """Wait until the leader's append to ``key`` ending at ``offset`` in
        ``leader_epoch`` is acknowledged (``acknowledged``); False after the timeout,
        once leadership moved, or when the ISR fell below ``min.insync.replicas``."""
        partition_log = self.state.partition_log(*key)
        outcome = await self._wait_decided(
            key, lambda: self.acknowledged(key, offset, leader_epoch, partition_log), timeout_s
        )
        return outcome == ErrorCode.none

    async def _wait_decided(
        self, key: PartitionKey, decide: Callable[[], ErrorCode | None], timeout_s: float
    ) -> ErrorCode:
        """``decide()`` again each time ``key`` changes, until it answers;
        REQUEST_TIMED_OUT after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            outcome = decide()
            if outcome is not None:
                return outcome
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ErrorCode.request_timed_out
            await self.broker.purgatory.wait([key], remaining)

    def maybe_advance_high_watermark(self, key: PartitionKey, now_ms: int | None = None) -> None:
        """Move the high watermark to what the maximal ISR holds (``PartitionLeader``)."""
        partition_log = self.state.partition_log(*key)
        leader = self.leading.get(key)
        if partition_log is None or leader is None:
            return
        candidate = leader.high_watermark(
            partition_log.log_end_offset,
            _now_ms() if now_ms is None else now_ms,
            self._eligible,
        )
        if candidate > partition_log.high_watermark:
            partition_log.set_high_watermark(candidate)
            self.broker.purgatory.notify(*key)

    async def _check_isr_forever(self) -> None:
        while True:
            await asyncio.sleep(ISR_CHECK_S)
            try:
                now = _now_ms()
                for key in list(self.leading):
                    self.maybe_advance_high_watermark(key, now)
                    self.maybe_change_isr(key, now)
            except Exception:
                log.exception("ISR check failed")

    def maybe_change_isr(self, key: PartitionKey, now_ms: int | None = None) -> None:
        """Ask the controller for the ISR change the leader's state wants, if any."""
        leader = self.leading.get(key)
        partition_log = self.state.partition_log(*key)
        if leader is None or partition_log is None:
            return
        lifecycle = self.broker.lifecycle
        change = leader.next_isr_change(
            partition_log.log_end_offset,
            partition_log.high_watermark,
            _now_ms() if now_ms is None else now_ms,
            self._eligible,
            lifecycle.broker_epoch if lifecycle is not None else -1,
        )
        if change is not None:
            task = asyncio.get_running_loop().create_task(self._alter_isr(key, leader, change))
            self._isr_changes.add(task)
            task.add_done_callback(self._isr_changes.discard)

    async def _alter_isr(
        self, key: PartitionKey, leader: PartitionLeader, change: IsrChange
    ) -> None:
        """Send ``change`` until it is settled: answered, refused for good, or made moot by
        a newer state of the partition (``PartitionLeader.refused``)."""
        from strom.broker.replica.alter_partition import (
            IsrChangeRefused,
            send_alter_partition,
        )

        if change.recovered:
            log.info("%s-%d: reporting the leader recovered (ISR %s)", *key, list(change.isr))
        else:
            log.info(
                "%s-%d: asking the controller for ISR %s (was %s)",
                *key,
                list(change.isr),
                list(change.committed_isr),
            )
        while self.leading.get(key) is leader and leader.pending is change:
            view = self.state.topics.get(key[0])
            state = view.states.get(key[1]) if view is not None else None
            if view is None or state is None:
                return
            try:
                made = await send_alter_partition(
                    self.broker,
                    view.topic_id,
                    key[1],
                    leader.leader_epoch,
                    change,
                    state.leader_recovery_state,
                    ALTER_ISR_TIMEOUT_S,
                )
            except IsrChangeRefused as exc:
                retry = leader.refused(change, exc.error_code)
                log.info("%s-%d: ISR change refused: %s", *key, exc.error_code.name)
            except Exception as exc:
                retry = leader.refused(change, None)
                log.info("%s-%d: ISR change not answered: %s", *key, exc)
            else:
                leader.answered(change, made.isr, made.partition_epoch)
                metrics = self.broker.metrics
                if metrics is not None:
                    metrics.isr_shrinks += bool(change.removed)
                    metrics.isr_expands += bool(change.added)
                self.maybe_advance_high_watermark(key)
                self.maybe_change_isr(key)
                return
            if not retry:
                return
            await asyncio.sleep(FETCH_BACKOFF_S)


class ReplicaFetcher:
    """Fetches, for the partitions this broker follows from one leader, what it lacks.

    Each fetcher has its own connection to the leader (the leader answers a
    connection's requests in order, and holds a fetch up to replica.fetch.wait.max.ms
    while it has less than replica.fetch.min.bytes to send).
    A partition followed while a fetch is held (a leadership that just moved here)
    does not wait for that fetch to end: the connection is dropped and the next fetch,
    sent at once on a new one, includes it."""

    def __init__(self, manager: ReplicaManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: set[PartitionKey] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connection: PeerConnection | None = None
        self._in_flight: set[PartitionKey] = set()
        self._interrupted = False
        self._stopping = False
        config = manager.broker.config
        self.max_wait_ms = int(config["replica.fetch.wait.max.ms"])
        self.min_bytes = int(config["replica.fetch.min.bytes"])
        self.partition_max_bytes = int(config["replica.fetch.max.bytes"])
        self.max_bytes = int(config["replica.fetch.response.max.bytes"])
        self.backoff_s = int(config["replica.fetch.backoff.ms"]) / 1000

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True  # the loop ends even if a cancellation is lost
        self._wake.set()
        if self._task is not None:
            await stop_task(self._task, f"replica fetcher from broker {self.leader_id}")
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def follow(self, key: PartitionKey) -> None:
        self.partitions.add(key)
        self._wake.set()
        if self._in_flight and key not in self._in_flight and self._connection is not None:
            self._interrupted = True
            self._connection.close()  # ends the held fetch; the next one includes ``key``
            self._connection = None

    def unfollow(self, key: PartitionKey) -> None:
        self.partitions.discard(key)

    async def _run(self) -> None:
        while not self._stopping:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                progressed = await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetch from broker %d failed", self.leader_id)
                progressed = False
            if not progressed:
                await asyncio.sleep(self.backoff_s)

    def _request(self) -> tuple[Any, dict[tuple[Any, int], PartitionKey]] | None:
        state = self.manager.state
        lifecycle = self.manager.broker.lifecycle
        by_topic: dict[Any, list[Any]] = {}
        keys: dict[tuple[Any, int], PartitionKey] = {}
        quota = self.manager.follower_quota
        for key in sorted(self.partitions):
            view = state.topics.get(key[0])
            partition_log = state.partition_log(*key)
            if view is None or partition_log is None:
                continue
            if self._throttled(view, key[1]) and quota.exceeded():
                continue  # throttled: fetched again once the quota has room
            partition_state = view.states.get(key[1])
            if partition_state is None or partition_state.leader != self.leader_id:
                continue
            by_topic.setdefault(view.topic_id, []).append(
                # kio's field types are phantom types whose constructors check bounds
                # (about 0.5 us a call): these values are in range by construction, so on
                # this per-partition, per-fetch path they are typed, not checked again.
                fetch_req.FetchPartition(
                    partition=cast(i32, key[1]),
                    current_leader_epoch=cast(i32, partition_state.leader_epoch),
                    fetch_offset=cast(i64, partition_log.log_end_offset),
                    last_fetched_epoch=cast(i32, partition_log.latest_epoch),
                    log_start_offset=cast(i64, partition_log.log_start_offset),
                    partition_max_bytes=cast(i32, self.partition_max_bytes),
                )
            )
            keys[(view.topic_id, key[1])] = key
        if not by_topic:
            return None
        request = fetch_req.FetchRequest(
            cluster_id=None,
            replica_state=fetch_req.ReplicaState(
                replica_id=BrokerId(self.manager.node_id),
                replica_epoch=i64(lifecycle.broker_epoch if lifecycle is not None else -1),
            ),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=self.max_wait_ms)),
            min_bytes=i32(self.min_bytes),
            max_bytes=i32(self.max_bytes),
            isolation_level=i8(0),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=tuple(
                fetch_req.FetchTopic(topic_id=topic_id, partitions=tuple(parts))
                for topic_id, parts in by_topic.items()
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        return request, keys

    async def _fetch_once(self) -> bool:
        from strom.broker.network.cluster_view import inter_broker_endpoint

        built = self._request()
        if built is None:
            await asyncio.sleep(self.backoff_s)
            return True
        request, keys = built
        endpoint = inter_broker_endpoint(self.manager.broker, self.leader_id)
        if endpoint is None:
            return False
        timeout = self.max_wait_ms / 1000 + 5
        connection = self._connection
        if connection is None or (connection.host, connection.port) != (
            endpoint.host,
            endpoint.port,
        ):
            if connection is not None:
                connection.close()
            connection = self._connection = PeerConnection(
                endpoint.host,
                endpoint.port,
                f"strom-replica-{self.manager.node_id}",
                self.manager.broker.inter_broker_security,
            )
        self._in_flight = set(keys.values())
        try:
            response = await connection.request(request, timeout)
        except PeerError as exc:
            if self._interrupted:
                self._interrupted = False
                return True  # dropped on purpose: fetch again at once
            log.debug("replica fetch from broker %d: %s", self.leader_id, exc)
            if self._connection is connection:
                connection.close()
                self._connection = None
            return False
        finally:
            self._in_flight = set()
        if response.error_code != ErrorCode.none:
            log.info("replica fetch from broker %d: %s", self.leader_id, response.error_code.name)
            return False
        progressed = True
        for topic in response.responses:
            for part in topic.partitions:
                key = keys.get((topic.topic_id, part.partition_index))
                if key is None or key not in self.partitions:
                    continue
                if part.records and self._throttled(self.manager.state.topics.get(key[0]), key[1]):
                    self.manager.follower_quota.record(len(part.records))
                if not self._handle_partition(key, part):
                    progressed = False
        return progressed

    def _throttled(self, view: Any, partition: int) -> bool:
        return _throttled(
            view, "follower.replication.throttled.replicas", partition, self.manager.node_id
        )

    def _handle_partition(self, key: PartitionKey, part: Any) -> bool:
        state = self.manager.state
        partition_log = state.partition_log(*key)
        if partition_log is None:
            return True
        error = part.error_code
        if error == ErrorCode.offset_out_of_range:
            self._out_of_range(key, partition_log, part.log_start_offset)
            return True
        if error != ErrorCode.none:
            return False
        diverging = part.diverging_epoch
        if diverging is not None and diverging.epoch >= 0:
            cut = follower.diverged(partition_log, diverging.epoch, diverging.end_offset)
            log.info(
                "%s-%d: the leader's log diverges at epoch %d: truncating to %d",
                key[0],
                key[1],
                diverging.epoch,
                cut.offset,
            )
            return True
        records = part.records
        if records:
            buf = bytearray(records)
            try:
                headers = validate_batches(buf)
            except CorruptBatchError as exc:
                log.warning("%s-%d: corrupt batch from the leader: %s", key[0], key[1], exc)
                return False
            if headers and headers[0].base_offset == partition_log.log_end_offset:
                partition_log.append_as_follower(buf, headers)
        follower.take_high_watermark(partition_log, part.high_watermark)
        return True

    @staticmethod
    def _out_of_range(key: PartitionKey, partition_log: Any, leader_log_start: int) -> None:
        """The leader has nothing at our log end (``follower.out_of_range``)."""
        end = partition_log.log_end_offset
        cut = follower.out_of_range(partition_log, leader_log_start)
        log.warning(
            "%s-%d: offset %d is out of the leader's range (its log starts at %d): truncated to %d",
            key[0],
            key[1],
            end,
            leader_log_start,
            cut.offset,
        )
