"""The node's share-partitions (KIP-932): those of the partitions this node leads,
their share sessions and lock timers, and their durable state, as Kafka's
share-partition manager keeps them. Built once by the server (``Broker.share_service``);
the wire side is ``share_groups.py``.

A share-partition starts, for a group that has no state for it, at the group's
``share.auto.offset.reset`` (latest by default: the high watermark; earliest: the log
start; by_duration:<ISO-8601>: the first offset at or after now minus the duration).
Its locks expire on a timer of the event loop (``share.record.lock.duration.ms``, else
the broker's group.share.record.lock.duration.ms). Its delivery state is kept in
``__share_group_state`` (strom/coordinator/share_state.py) by the leader of the key's
state partition, the share coordinator: written after each request that changed it
(directly when this node is that leader, else with WriteShareGroupState, in order), and
read when the share-partition is first needed here (ReadShareGroupState
from another node, which a ShareFetch awaits).

An acknowledgement (ShareAcknowledge, or a ShareFetch carrying some) is answered once
its state write is durable: the local append replicated (its high watermark passed), or
the remote share coordinator's WriteShareGroupState answered (after its own append was
replicated); a failed write answers its error for the partition (COORDINATOR_NOT_
AVAILABLE, NOT_COORDINATOR, REQUEST_TIMED_OUT after share.coordinator.write.timeout.ms)
and the state is written again with the next change.

State writes carry the share-partition's leader epoch and state epoch: the share
coordinator fences a stale leader (FENCED_LEADER_EPOCH) or a state initialized anew
since (FENCED_STATE_EPOCH, after AlterShareGroupOffsets), and the fenced share-
partition is dropped here and read again when next needed.

A failed write rolls its acknowledgements back in memory, as Kafka's SharePartition
does: the records are held again by their members and delivered again when their locks
expire.

AlterShareGroupOffsets resets a share-partition held on this node, or the stored state
(with a new state epoch) where it is kept: here, or through the node that keeps it
(ReadShareGroupStateSummary, then InitializeShareGroupState), as Kafka's group
coordinator does; DeleteShareGroupOffsets deletes through it (DeleteShareGroupState).
A partition's leader elsewhere sees either when it next reads the state: as Kafka's
share-partition manager, a node lets go of a group's share-partitions when the group's
last share session there ends, and both need a group without members.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.delete_share_group_state.v0 import request as delete_state
from kio.schema.initialize_share_group_state.v0 import request as initialize_state
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.read_share_group_state.v0 import request as read_state
from kio.schema.read_share_group_state_summary.v1 import request as read_summary
from kio.schema.write_share_group_state.v1 import request as write_state

from strom.broker.network.cluster_view import inter_broker_endpoint
from strom.broker.network.peer_client import PeerError, PeerPool
from strom.config import parse_iso_duration_ms
from strom.coordinator.internal_log import Appended
from strom.coordinator.share_group import ShareGroup
from strom.coordinator.share_partition import Changes, SharePartition, StateBatch
from strom.coordinator.share_sessions import ShareSession, ShareSessionCache
from strom.coordinator.share_state import (
    SHARE_STATE_TOPIC,
    ShareKey,
    ShareState,
    ShareStateStore,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build

if TYPE_CHECKING:
    from strom.broker.replica.manager import ReplicaHolder

log = logging.getLogger(__name__)

FINAL_EPOCH = -1
STATE_TOPIC_WAIT_S = 5.0
RPC_TIMEOUT_S = 5.0
READ_LIMIT = 1 << 20  # bytes read per partition per fetch when the request allows more


# The node's share state ------------------------------------------------------------------


@dataclass(slots=True)
class HeldSharePartition:
    """A share-partition held on this node, with what its timer needs."""

    key: ShareKey
    topic: str
    partition: SharePartition
    leader_epoch: int = -1  # the topic partition's, when this node became its leader
    state_epoch: int = 0  # the stored state's, when read (AlterShareGroupOffsets moves it)
    timer: asyncio.TimerHandle | None = None
    timer_at: int | None = None


@dataclass(frozen=True, slots=True)
class _Summary:
    """A share-partition's stored state in brief, as ReadShareGroupStateSummary answers."""

    error: ErrorCode
    start_offset: int  # -1: no state stored
    delivery_complete_count: int  # offsets past the start accepted or archived
    state_epoch: int = 0


Durable = int | asyncio.Future[int]
"""A state write's outcome: its error code, or a future of it until it is durable."""


class ShareService:
    """This node's share-partitions (those of the partitions it leads), share sessions
    and lock timers; the store of their durable state."""

    def __init__(self, broker: ReplicaHolder) -> None:
        self.broker = broker
        self.store = ShareStateStore(
            broker.state, broker.config, broker.replicas.append_for_coordinator
        )
        self.held: dict[ShareKey, HeldSharePartition] = {}
        self.sessions = ShareSessionCache(
            lambda: int(broker.config["group.share.max.share.sessions"]),
            self._member_left,
            lambda group: int(self.group_setting(group, "share.session.timeout.ms")),
            self.group_idle,
        )
        self.peers = PeerPool(f"strom-share-{broker.node_id}", broker.inter_broker_security)
        # States read from other nodes, waiting for their share-partition to be built.
        self._remote_states: dict[ShareKey, ShareState | None] = {}
        # The next state to send per key, with the acknowledgements waiting for it.
        self._pending_writes: dict[ShareKey, tuple[ShareState, list[asyncio.Future[int]]]] = {}
        self._writers: dict[ShareKey, asyncio.Task[None]] = {}
        # Records acknowledged here by type (Accept, Release, Reject), for /metrics.
        self.acknowledged_records: dict[str, int] = {"Accept": 0, "Release": 0, "Reject": 0}
        coordinator = broker.coordinator
        coordinator.share_member_gone = self.member_gone
        coordinator.share_group_deleted = self.group_deleted

    def _member_left(self, group_id: str, member_id: str) -> bool:
        """Whether the member is known here to have left its group (this node is the
        group's coordinator and the group does not have it)."""
        coordinator = self.broker.coordinator
        if not coordinator.is_coordinator_for(group_id):
            return False
        group = coordinator.groups.get(group_id)
        return not isinstance(group, ShareGroup) or member_id not in group.members

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    def group_setting(self, group_id: str, key: str) -> str:
        """A group config (the group's own value, else the broker's or Kafka's default)."""
        from strom.config import GROUP_CONFIGS

        raw = self.broker.state.image.group_configs(group_id).get(key)
        if raw is not None:
            return raw
        definition = GROUP_CONFIGS[key]
        if definition.broker_name is not None:
            return str(self.broker.config[definition.broker_name])
        return str(definition.default)

    def _configure(self, held: HeldSharePartition) -> None:
        group = held.key.group_id
        sp = held.partition
        sp.lock_duration_ms = int(self.group_setting(group, "share.record.lock.duration.ms"))
        sp.delivery_limit = int(self.group_setting(group, "share.delivery.count.limit"))
        sp.max_in_flight = int(self.group_setting(group, "share.partition.max.record.locks"))

    def share_partition(
        self, key: ShareKey, topic: str, partition_log: Any
    ) -> HeldSharePartition | None:
        """The share-partition of ``key``, from its stored state or started afresh at the
        group's share.auto.offset.reset; None while its state, kept by another node, has
        not been read (``load_remote``)."""
        view = self.broker.state.topic(topic)
        leader_epoch = view.leader_epoch_of(key.partition) if view is not None else -1
        held = self.held.get(key)
        if held is not None and held.leader_epoch != leader_epoch:
            # Led elsewhere in between: the state stored since then is the truth.
            self.drop(key)
            held = None
        if held is None:
            if self.store.topic_exists() and not self.store.leads(key):
                if key not in self._remote_states:
                    return None
                stored = self._remote_states.pop(key)
            else:
                self.store.claim(key, leader_epoch)  # older leaders' writes are fenced
                stored = self.store.read(key)
            if stored is not None:
                sp = SharePartition(stored.start_offset)
                sp.restore(stored.start_offset, stored.batches)
            else:
                sp = SharePartition(self._initial_offset(key.group_id, partition_log))
                sp.dirty = True
            held = self.held[key] = HeldSharePartition(key, topic, sp, leader_epoch)
            held.state_epoch = stored.state_epoch if stored is not None else 0
        self._configure(held)
        return held

    def fenced(self, key: ShareKey, error: int) -> None:
        """A write was refused as stale (a later leader, or the state initialized anew):
        the share-partition is dropped and read again when next needed."""
        log.info(
            "share-partition %s-%d of group %s fenced (%s): read again",
            key.topic_id,
            key.partition,
            key.group_id,
            ErrorCode(error).name,
        )
        self.drop(key)

    def drop(self, key: ShareKey) -> None:
        held = self.held.pop(key, None)
        if held is not None and held.timer is not None:
            held.timer.cancel()

    def _initial_offset(self, group_id: str, partition_log: Any) -> int:
        reset = self.group_setting(group_id, "share.auto.offset.reset")
        if reset == "earliest":
            return int(partition_log.log_start_offset)
        if reset.startswith("by_duration:"):
            since = self.now_ms() - parse_iso_duration_ms(reset.removeprefix("by_duration:"))
            found = partition_log.offset_for_timestamp(since)
            return int(found[0]) if found is not None else int(partition_log.high_watermark)
        return int(partition_log.high_watermark)

    def persist(self, held: HeldSharePartition, *, durable: bool = False) -> Durable:
        """Write the share-partition's state if it changed. With ``durable`` the answer
        says when the write is durable: an error code at once (NONE: nothing to write,
        or a write no follower has to copy), else a future of the error code: the local
        append's high watermark awaited, or another node's WriteShareGroupState
        answered. A failed write leaves the state to write again. The
        acknowledgements the write carries are settled with its outcome: committed,
        or rolled back in memory (``SharePartition.settle``)."""
        sp = held.partition
        if not sp.dirty:
            return ErrorCode.none
        changes = sp.take_changes()
        outcome = self._write(held, durable=durable or bool(changes))
        if changes:
            if isinstance(outcome, int):
                self._settle(held, changes, outcome)
            else:
                outcome.add_done_callback(
                    lambda done: self._settle(
                        held,
                        changes,
                        ErrorCode.unknown_server_error if done.cancelled() else done.result(),
                    )
                )
        return outcome

    def _settle(self, held: HeldSharePartition, changes: Changes, error: int) -> None:
        """Settle the acknowledgements a state write carried; rolled back, their records
        are held again by their members until their locks expire."""
        if self.held.get(held.key) is not held:
            return  # dropped (fenced, led elsewhere): read again when next needed
        if held.partition.settle(changes, committed=error == ErrorCode.none):
            log.info(
                "share state of %s-%d for group %s not written (%s): acknowledgements rolled back",
                held.key.topic_id,
                held.key.partition,
                held.key.group_id,
                ErrorCode(error).name,
            )
            self.arm(held)

    def _write(self, held: HeldSharePartition, *, durable: bool) -> Durable:
        sp = held.partition
        state = ShareState(
            sp.durable_start(),
            sp.durable_state(),
            state_epoch=held.state_epoch,
            leader_epoch=held.leader_epoch,
        )
        sp.mark_stored()
        if self.store.topic_exists() and not self.store.leads(held.key):
            return self._write_remote(held.key, state, durable=durable)
        fenced = self.store.fenced(held.key, held.leader_epoch, held.state_epoch)
        if fenced is not None:
            self.fenced(held.key, fenced)
            return fenced
        appended = self.store.write(held.key, state, self.now_ms())
        if appended is None:
            sp.dirty = True
            return ErrorCode.coordinator_not_available
        if not durable or not appended.replicated:
            return ErrorCode.none
        return asyncio.ensure_future(self.wait_durable(appended))

    async def wait_durable(self, appended: Appended) -> int:
        """NONE once the high watermark of ``__share_group_state`` passed a local
        append (still led in its epoch); COORDINATOR_NOT_AVAILABLE when leadership moved
        or the ISR shrank below min.insync.replicas, REQUEST_TIMED_OUT after
        share.coordinator.write.timeout.ms."""
        timeout_s = int(self.broker.config["share.coordinator.write.timeout.ms"]) / 1000
        replicas = self.broker.replicas
        key = (SHARE_STATE_TOPIC, appended.partition)
        deadline = time.monotonic() + timeout_s
        replicated = await replicas.wait_for_high_watermark(
            key, appended.end_offset, appended.leader_epoch, timeout_s
        )
        if replicated:
            return ErrorCode.none
        if time.monotonic() >= deadline:
            return ErrorCode.request_timed_out
        return ErrorCode.coordinator_not_available

    # The share coordinator on other nodes ------------------------------------------

    def remote_keys(self, keys: Iterable[ShareKey]) -> list[ShareKey]:
        """Keys not held here whose state another node keeps and that are not read yet."""
        if not self.store.topic_exists():
            return []
        return [
            k
            for k in keys
            if k not in self.held and k not in self._remote_states and not self.store.leads(k)
        ]

    async def _call(self, leader: int, body: Any) -> Any | None:
        endpoint = inter_broker_endpoint(self.broker, leader)
        if endpoint is None:
            return None
        try:
            return await self.peers.request(endpoint.host, endpoint.port, body, RPC_TIMEOUT_S)
        except PeerError as exc:
            log.warning("share coordinator %d did not answer: %s", leader, exc)
            return None

    async def load_remote(self, keys: list[ShareKey]) -> None:
        """Read the states of ``keys`` from the nodes that keep them
        (ReadShareGroupState); a key whose read failed stays unread (tried again)."""
        writing = [self._writers[k] for k in keys if k in self._writers]
        if writing:  # a state let go of is read back after its last write (not cancelled)
            await asyncio.wait(writing, timeout=RPC_TIMEOUT_S)
        by_call: dict[tuple[int, str], list[ShareKey]] = {}
        for key in keys:
            by_call.setdefault((self.store.leader_of(key), key.group_id), []).append(key)
        await asyncio.gather(
            *(self._read_remote(leader, group, ks) for (leader, group), ks in by_call.items())
        )

    async def _read_remote(self, leader: int, group_id: str, keys: list[ShareKey]) -> None:
        by_topic = partitions_by_topic(keys)
        state = self.broker.state

        def leader_epoch(topic_id: uuid.UUID, partition: int) -> int:
            meta = state.metadata.by_id.get(topic_id)
            view = state.topic(meta.name) if meta is not None else None
            return view.leader_epoch_of(partition) if view is not None else -1

        body = build(
            read_state.ReadShareGroupStateRequest,
            group_id=group_id,
            topics=tuple(
                build(
                    read_state.ReadStateData,
                    topic_id=t,
                    partitions=tuple(
                        build(
                            read_state.PartitionData, partition=p, leader_epoch=leader_epoch(t, p)
                        )
                        for p in ps
                    ),
                )
                for t, ps in by_topic.items()
            ),
        )
        response = await self._call(leader, body)
        if response is None:
            return
        for result in response.results:
            for part in result.partitions:
                if part.error_code != ErrorCode.none:
                    continue
                key = ShareKey(group_id, result.topic_id, part.partition)
                if key in self.held:
                    continue
                self._remote_states[key] = (
                    None
                    if part.start_offset < 0
                    else ShareState(
                        part.start_offset,
                        [
                            StateBatch(
                                b.first_offset, b.last_offset, b.delivery_state, b.delivery_count
                            )
                            for b in part.state_batches
                        ],
                        state_epoch=part.state_epoch,
                    )
                )

    async def read_summaries(self, keys: list[ShareKey]) -> dict[ShareKey, _Summary]:
        """The stored start offset and delivery-complete count of each key, asked of the
        node that keeps it (ReadShareGroupStateSummary, as Kafka's group coordinator
        asks its share coordinators); a key whose node did not answer is left out."""
        by_call: dict[tuple[int, str], list[ShareKey]] = {}
        for key in keys:
            by_call.setdefault((self.store.leader_of(key), key.group_id), []).append(key)
        found: dict[ShareKey, _Summary] = {}
        for answered in await asyncio.gather(
            *(self._read_summary(leader, group, ks) for (leader, group), ks in by_call.items())
        ):
            found.update(answered)
        return found

    async def _read_summary(
        self, leader: int, group_id: str, keys: list[ShareKey]
    ) -> dict[ShareKey, _Summary]:
        by_topic = partitions_by_topic(keys)
        body = build(
            read_summary.ReadShareGroupStateSummaryRequest,
            group_id=group_id,
            topics=tuple(
                build(
                    read_summary.ReadStateSummaryData,
                    topic_id=t,
                    partitions=tuple(
                        build(read_summary.PartitionData, partition=p, leader_epoch=-1) for p in ps
                    ),
                )
                for t, ps in by_topic.items()
            ),
        )
        response = await self._call(leader, body)
        if response is None:
            return {}
        return {
            ShareKey(group_id, result.topic_id, part.partition): _Summary(
                ErrorCode(part.error_code),
                part.start_offset,
                part.delivery_complete_count,
                part.state_epoch,
            )
            for result in response.results
            for part in result.partitions
        }

    async def high_watermarks(self, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The high watermark of each topic partition: this node's copy's, else its
        leader's latest offset (ListOffsets); one left out when neither is known."""
        found: dict[tuple[str, int], int] = {}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for name, partition in partitions:
            partition_log = self.broker.state.partition_log(name, partition)
            if partition_log is not None:
                found[(name, partition)] = int(partition_log.high_watermark)
                continue
            view = self.broker.state.topic(name)
            leader = view.leader_of(partition) if view is not None else -1
            if leader >= 0:
                by_leader.setdefault(leader, []).append((name, partition))
        for answered in await asyncio.gather(
            *(self._latest_offsets(leader, ps) for leader, ps in by_leader.items())
        ):
            found.update(answered)
        return found

    async def _latest_offsets(
        self, leader: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[int]] = {}
        for name, partition in partitions:
            by_topic.setdefault(name, []).append(partition)
        body = build(
            list_offsets.ListOffsetsRequest,
            replica_id=-1,
            isolation_level=0,  # read_uncommitted: the latest offset is the high watermark
            topics=tuple(
                build(
                    list_offsets.ListOffsetsTopic,
                    name=name,
                    partitions=tuple(
                        build(list_offsets.ListOffsetsPartition, partition_index=p, timestamp=-1)
                        for p in ps
                    ),
                )
                for name, ps in by_topic.items()
            ),
        )
        response = await self._call(leader, body)
        if response is None:
            return {}
        return {
            (topic.name, part.partition_index): int(part.offset)
            for topic in response.topics
            for part in topic.partitions
            if part.error_code == ErrorCode.none and part.offset >= 0
        }

    def _write_remote(self, key: ShareKey, state: ShareState, *, durable: bool) -> Durable:
        """Send the state to the node that keeps it (WriteShareGroupState), in order:
        one write per key at a time, the latest state next (a snapshot holds every
        change before it, so a write waiting for an older state waits for it)."""
        loop = asyncio.get_running_loop()
        _, waiters = self._pending_writes.get(key, (state, []))
        waiter: asyncio.Future[int] | None = loop.create_future() if durable else None
        if waiter is not None:
            waiters.append(waiter)
        self._pending_writes[key] = (state, waiters)
        if key not in self._writers:
            self._writers[key] = loop.create_task(self._drain(key))
        return waiter if waiter is not None else ErrorCode.none

    async def _drain(self, key: ShareKey) -> None:
        try:
            while (pending := self._pending_writes.pop(key, None)) is not None:
                state, waiters = pending
                body = build(
                    write_state.WriteShareGroupStateRequest,
                    group_id=key.group_id,
                    topics=(
                        build(
                            write_state.WriteStateData,
                            topic_id=key.topic_id,
                            partitions=(
                                build(
                                    write_state.PartitionData,
                                    partition=key.partition,
                                    state_epoch=state.state_epoch,
                                    leader_epoch=state.leader_epoch,
                                    start_offset=state.start_offset,
                                    state_batches=tuple(
                                        build(
                                            write_state.StateBatch,
                                            first_offset=b.first_offset,
                                            last_offset=b.last_offset,
                                            delivery_state=b.state,
                                            delivery_count=b.delivery_count,
                                        )
                                        for b in state.batches
                                    ),
                                ),
                            ),
                        ),
                    ),
                )
                try:
                    response = await self._call(self.store.leader_of(key), body)
                except BaseException:
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_result(ErrorCode.coordinator_not_available)
                    raise
                error = (
                    ErrorCode.coordinator_not_available
                    if response is None
                    else response.results[0].partitions[0].error_code
                )
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(error)
                if error in (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch):
                    self.fenced(key, error)
                elif error != ErrorCode.none:
                    held = self.held.get(key)
                    if held is not None:
                        held.partition.dirty = True  # written again at the next change
                    log.warning(
                        "share state of %s-%d for group %s not written: %s",
                        key.topic_id,
                        key.partition,
                        key.group_id,
                        ErrorCode(error).name,
                    )
        finally:
            self._writers.pop(key, None)

    def _delete_remote(self, keys: Iterable[ShareKey]) -> None:
        for key in keys:
            body = build(
                delete_state.DeleteShareGroupStateRequest,
                group_id=key.group_id,
                topics=(
                    build(
                        delete_state.DeleteStateData,
                        topic_id=key.topic_id,
                        partitions=(build(delete_state.PartitionData, partition=key.partition),),
                    ),
                ),
            )
            asyncio.get_running_loop().create_task(self._call(self.store.leader_of(key), body))

    async def initialize_remote(self, starts: dict[ShareKey, int]) -> dict[ShareKey, ErrorCode]:
        """Start the stored states of ``starts`` anew at their offsets, on the nodes that
        keep them, as Kafka's group coordinator resets them: the stored state epoch read
        (ReadShareGroupStateSummary), then InitializeShareGroupState with the next one
        (a share-partition held elsewhere with the older epoch is fenced at its next
        write and read again). The error of each key."""
        summaries = await self.read_summaries(list(starts))
        out: dict[ShareKey, ErrorCode] = {}
        calls: dict[tuple[int, str], list[tuple[ShareKey, int, int]]] = {}
        for key, start in starts.items():
            summary = summaries.get(key)
            if summary is None or summary.error != ErrorCode.none:
                out[key] = summary.error if summary else ErrorCode.coordinator_not_available
                continue
            epoch = summary.state_epoch + 1
            leader = self.store.leader_of(key)
            calls.setdefault((leader, key.group_id), []).append((key, start, epoch))
        for (leader, group_id), entries in calls.items():
            body = build(
                initialize_state.InitializeShareGroupStateRequest,
                group_id=group_id,
                topics=tuple(
                    build(
                        initialize_state.InitializeStateData,
                        topic_id=key.topic_id,
                        partitions=(
                            build(
                                initialize_state.PartitionData,
                                partition=key.partition,
                                state_epoch=epoch,
                                start_offset=start,
                            ),
                        ),
                    )
                    for key, start, epoch in entries
                ),
            )
            out.update(await self._state_call(leader, group_id, body, [k for k, _, _ in entries]))
        return out

    async def delete_remote(self, keys: list[ShareKey]) -> dict[ShareKey, ErrorCode]:
        """Delete the stored states of ``keys`` on the nodes that keep them
        (DeleteShareGroupState, awaited). The error of each key."""
        calls: dict[tuple[int, str], list[ShareKey]] = {}
        for key in keys:
            calls.setdefault((self.store.leader_of(key), key.group_id), []).append(key)
        out: dict[ShareKey, ErrorCode] = {}
        for (leader, group_id), doomed in calls.items():
            by_topic = partitions_by_topic(doomed)
            body = build(
                delete_state.DeleteShareGroupStateRequest,
                group_id=group_id,
                topics=tuple(
                    build(
                        delete_state.DeleteStateData,
                        topic_id=t,
                        partitions=tuple(
                            build(delete_state.PartitionData, partition=p) for p in ps
                        ),
                    )
                    for t, ps in by_topic.items()
                ),
            )
            out.update(await self._state_call(leader, group_id, body, doomed))
        return out

    async def _state_call(
        self, leader: int, group_id: str, body: Any, keys: list[ShareKey]
    ) -> dict[ShareKey, ErrorCode]:
        """A share coordinator RPC's error per key (COORDINATOR_NOT_AVAILABLE for a key
        it did not answer for)."""
        response = await self._call(leader, body)
        out = dict.fromkeys(keys, ErrorCode.coordinator_not_available)
        if response is not None:
            for result in response.results:
                for part in result.partitions:
                    key = ShareKey(group_id, result.topic_id, part.partition)
                    if key in out:
                        out[key] = ErrorCode(part.error_code)
        return out

    def arm(self, held: HeldSharePartition) -> None:
        """Keep the share-partition's lock timer at its earliest deadline."""
        deadline = held.partition.next_deadline()
        if deadline is None:
            if held.timer is not None:
                held.timer.cancel()
                held.timer = held.timer_at = None
            return
        if held.timer is not None and held.timer_at is not None and held.timer_at <= deadline:
            return
        if held.timer is not None:
            held.timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(deadline - self.now_ms(), 0) / 1000
        held.timer = loop.call_later(delay, self._expire, held.key)
        held.timer_at = deadline

    def _expire(self, key: ShareKey) -> None:
        held = self.held.get(key)
        if held is None:
            return
        held.timer = held.timer_at = None
        if held.partition.expire_locks(self.now_ms()):
            self.persist(held)
            self.broker.purgatory.notify(held.topic, key.partition)
        self.arm(held)

    def released(self, held: HeldSharePartition, *, durable: bool = False) -> Durable:
        """Records of this share-partition may have become available: wake fetches.
        The state is written (``persist``: its durability with ``durable``)."""
        outcome = self.persist(held, durable=durable)
        if held.partition.has_available():
            self.broker.purgatory.notify(held.topic, held.key.partition)
        self.arm(held)
        return outcome

    def member_gone(self, group_id: str, member_id: str) -> None:
        """The member closed its share session here or left its group: what it holds
        is released (and written), then its session ends."""
        for held in list(self.held.values()):
            if held.key.group_id == group_id and held.partition.release_member(member_id):
                self.released(held)
        self.sessions.end(group_id, member_id)

    def connection_closed(self, session: ShareSession) -> None:
        """The connection a share session was opened on closed: the session ends and
        what its member holds here is released, as Kafka's share session cache ends it
        then (unless the member opened another session since)."""
        if self.sessions.get((session.group_id, session.member_id)) is session:
            self.member_gone(session.group_id, session.member_id)

    def group_idle(self, group_id: str) -> None:
        """The group's last share session on this node ended: its share-partitions held
        here are let go of (their last changes written first), as Kafka's share-partition
        manager lets go of them when its share session cache finds the group empty. The
        next ShareFetch reads their state again, so an AlterShareGroupOffsets or
        DeleteShareGroupOffsets made meanwhile (they need an empty group) is what it
        finds, wherever the group's and the state's coordinators are."""
        keys = [k for k in self.held if k.group_id == group_id]
        for key in keys:
            held = self.held[key]
            if held.partition.dirty:
                self.persist(held)
            self.drop(key)
        for key in [k for k in self._remote_states if k.group_id == group_id]:
            del self._remote_states[key]
        if keys:
            log.info(
                "share group %s has no share session here: %d share-partition(s) let go of",
                group_id,
                len(keys),
            )

    def group_deleted(self, group_id: str) -> None:
        keys = {k for k in self.held if k.group_id == group_id}
        keys |= set(self.store.keys_of_group(group_id))
        for key in keys:
            self.drop(key)
        self._delete_remote([k for k in keys if not self.store.leads(k)])
        self.store.delete([k for k in keys if self.store.leads(k)], self.now_ms())
        for session_key in [s for s in self.sessions if s[0] == group_id]:
            del self.sessions[session_key]

    def count_acknowledged(self, first: int, last: int, types: list[int]) -> None:
        """Count an acknowledgement batch's records by type (gaps are not records)."""
        names = {1: "Accept", 2: "Release", 3: "Reject"}
        if len(types) == 1:
            name = names.get(types[0])
            if name is not None:
                self.acknowledged_records[name] += last - first + 1
            return
        for kind in types:
            name = names.get(kind)
            if name is not None:
                self.acknowledged_records[name] += 1

    def lag_of(self, key: ShareKey, name: str, start: int) -> int:
        """Records from the start offset to the high watermark not yet finished with
        (-1: no log of the partition here)."""
        partition_log = self.broker.state.partition_log(name, key.partition)
        if partition_log is None:
            return -1
        held = self.held.get(key)
        if held is not None:
            finished = held.partition.finished_in_window()
        else:
            stored = self.store.read(key)
            finished = (
                0
                if stored is None
                else sum(
                    b.last_offset - b.first_offset + 1 for b in stored.batches if b.state in (2, 4)
                )
            )
        return max(int(partition_log.high_watermark) - start - finished, 0)

    def held_lags(self) -> list[tuple[str, str, int, int, int]]:
        """(group, topic, partition, start offset, lag) of each share-partition held
        here (this node leads its topic partition), for /metrics."""
        rows = []
        for key, held in sorted(self.held.items(), key=lambda kv: (kv[0].group_id, kv[1].topic)):
            if not self.broker.state.leads(held.topic, key.partition):
                continue
            start = held.partition.start_offset
            lag = self.lag_of(key, held.topic, start)
            if lag >= 0:
                rows.append((key.group_id, held.topic, key.partition, start, lag))
        return rows


def partitions_by_topic(keys: list[ShareKey]) -> dict[uuid.UUID, list[int]]:
    """The partitions of ``keys`` by topic id, as the share coordinator's requests list them."""
    by_topic: dict[uuid.UUID, list[int]] = {}
    for key in keys:
        by_topic.setdefault(key.topic_id, []).append(key.partition)
    return by_topic
