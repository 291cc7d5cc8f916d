"""The network side of the metadata quorum: runs this node's Raft core on the event loop.

Owns the one ``RaftNode`` of this process and everything around it that is I/O: the
tick, the driver's contract of the core (after every call: persist the
Ready through the metadata log store, then send its messages, then hand what committed
to the metadata listener; the persisting, fsyncs included, runs on a thread of its own
so that the event loop serving clients never waits on the disk: the rest of a Ready is
done once it is durable, and the next Ready taken only after that), requests to the
other voters through the peer pool (translated by ``quorum_wire``), the responses owed
to requests that came in on the controller listener, proposals that wait for their
commit, and snapshots of the metadata state (written on that thread too) every so many
records (or bytes of them), and at least every ``snapshot_interval_ms`` while something
applied is not in the last one (``metadata.log.max.snapshot.interval.ms``; 0 turns
that off).

Voters are this node's peers in ``controller.quorum.voters``; a broker-only node
runs the core as an observer that only fetches.

The tick is a timer set for the core's next timer (``RaftNode.next_timer_ms``: a
held fetch to answer, a request to retry, an election or fetch timeout) or the next
snapshot by time, whichever comes first, at least TICK_MS from now and at most
MAX_TICK_WAIT_MS; it is set again after every call into the core. An idle node (a
single voter with nothing to do, a follower between fetches) so wakes when there is
something to do rather than every TICK_MS; a call after which the core has nothing to
hand out skips building a Ready.

Does not own consensus (``strom.raft``), the files (``strom.storage.metadata_log``)
or what the records mean (the metadata listener it is given).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from strom.broker.network.peer_client import PeerError, PeerPool, PeerSecurity
from strom.controller import quorum_wire
from strom.raft.core import QuorumInfo, RaftConfig, RaftNode, Ready, Role
from strom.raft.messages import (
    REQUESTS,
    Batch,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    Message,
    Snapshot,
    VoteRequest,
)
from strom.storage.metadata_log import MetadataLogStore

log = logging.getLogger(__name__)

TICK_MS = 10  # the shortest wait between ticks
MAX_TICK_WAIT_MS = 1000  # the longest, whatever the core's timers say


class NotLeaderError(Exception):
    """This node is not (or no longer) the quorum's leader; carries the leader it knows."""

    def __init__(self, leader_id: int) -> None:
        super().__init__(f"not the active controller (leader is {leader_id})")
        self.leader_id = leader_id


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class MetadataListener(Protocol):
    """What the driver hands committed data to (the node's metadata image)."""

    def apply_snapshot(self, snapshot: Snapshot) -> None: ...

    def apply_batch(self, batch: Batch) -> None: ...

    def snapshot_data(self) -> bytes:
        """The state as of the last applied batch, serialised for a snapshot."""
        ...


class QuorumDriver:
    def __init__(
        self,
        node_id: int,
        voter_ids: frozenset[int],
        voters: dict[int, tuple[str, int]],
        raft_config: RaftConfig,
        store: MetadataLogStore,
        cluster_id: str,
        listener: MetadataListener,
        *,
        on_leadership: Callable[[bool], None] | None = None,
        snapshot_every_records: int = 20000,
        snapshot_every_bytes: int | None = None,
        snapshot_interval_ms: int = 0,
        leader_change_record: Callable[..., bytes] | None = None,
        peer_security: PeerSecurity | None = None,
    ) -> None:
        self.node_id = node_id
        self.voter_ids = frozenset(voter_ids)
        self.voters = voters  # id -> (host, port) of each other voter's controller listener
        self.raft_config = raft_config
        self.store = store
        self.cluster_id = cluster_id
        self.listener = listener
        # Told when this node starts (True) or stops (False) serving as the leader.
        self.on_leadership = on_leadership
        self.snapshot_every_records = snapshot_every_records
        # When set, snapshots follow the bytes of records applied instead of their count
        # (metadata.log.max.record.bytes.between.snapshots).
        self.snapshot_every_bytes = snapshot_every_bytes
        self._bytes_since_snapshot = 0
        self.snapshot_interval_ms = snapshot_interval_ms
        self._last_snapshot_ms = _now_ms()  # or the start
        self.leader_change_record = leader_change_record
        self.peers = PeerPool(f"strom-quorum-{node_id}", peer_security)
        self.node: RaftNode | None = None
        self._tokens = itertools.count(1)
        self._owed: dict[int, asyncio.Future[Message]] = {}
        self._proposals: dict[int, tuple[int, asyncio.Future[int]]] = {}  # base -> epoch
        self._tick_timer: asyncio.TimerHandle | None = None
        self._tick_due_ms = 0  # when the timer set fires (monotonic ms)
        self._sending: set[asyncio.Task[None]] = set()
        self._applied_since_snapshot = 0
        self._applied_offset = -1  # the end offset of the last batch applied
        self._applied_epoch = -1
        self._was_leader_ready = False
        self._committed_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.stopped = False
        # The store is written on this thread only while a Ready is being persisted;
        # the loop touches it only when no persisting is in flight.
        self._disk = ThreadPoolExecutor(1, thread_name_prefix=f"strom-metadata-fsync-{node_id}")
        self._persisting: asyncio.Future[None] | None = None
        self._pump_again = False

    # Life cycle -------------------------------------------------------------

    def start(self) -> None:
        quorum_state, snapshot, batches = self.store.load()
        now = _now_ms()
        kwargs: dict[str, Any] = {
            "quorum_state": quorum_state,
            "snapshot": snapshot,
            "batches": batches,
        }
        if self.leader_change_record is not None:
            kwargs["leader_change_record"] = self.leader_change_record
        self.node = RaftNode(
            self.node_id,
            self.voter_ids,
            self.raft_config,
            random.Random(),
            now,
            **kwargs,
        )
        self._pump()  # sets the first tick

    async def stop(self, graceful: bool = True) -> None:
        """Stop; a leader first hands over (EndQuorumEpoch) when ``graceful``."""
        if self.stopped:
            return
        if graceful and self.node is not None and self.node.role == Role.LEADER:
            self.node.resign(_now_ms())
            self._pump()
            await asyncio.sleep(0.05)  # let EndQuorumEpoch leave
        self.stopped = True
        if self._tick_timer is not None:
            self._tick_timer.cancel()
            self._tick_timer = None
        for task in list(self._sending):
            task.cancel()
        self._fail_proposals(-1)
        for future in self._owed.values():
            if not future.done():
                future.cancel()
        self.peers.close()
        if self._persisting is not None:
            try:
                await asyncio.shield(self._persisting)
            except Exception:
                pass  # logged by _persisted
        self._disk.shutdown(wait=True)
        self.store.close()

    def _tick(self) -> None:
        self._tick_timer = None
        if self.stopped or self.node is None:
            return
        try:
            self.node.tick(_now_ms())
            self._pump()
        except Exception:
            log.exception("metadata quorum tick failed")
            self._set_tick()

    def _set_tick(self) -> None:
        """Set the tick for the core's next timer or the next snapshot by time (within
        TICK_MS..MAX_TICK_WAIT_MS from now), unless it is set for earlier already."""
        node = self.node
        if node is None or self.stopped:
            return
        now = _now_ms()
        due = node.next_timer_ms()
        if self.snapshot_interval_ms > 0 and self._applied_since_snapshot > 0:
            due = min(due, self._last_snapshot_ms + self.snapshot_interval_ms)
        due = min(max(due, now + TICK_MS), now + MAX_TICK_WAIT_MS)
        if self._tick_timer is not None:
            if self._tick_due_ms <= due:
                return
            self._tick_timer.cancel()
        self._tick_due_ms = due
        self._tick_timer = asyncio.get_running_loop().call_later((due - now) / 1000, self._tick)

    # Queries ----------------------------------------------------------------

    @property
    def leader_id(self) -> int:
        return self.node.leader_id if self.node is not None else -1

    @property
    def epoch(self) -> int:
        return self.node.epoch if self.node is not None else -1

    @property
    def leader_ready(self) -> bool:
        return self.node is not None and self.node.leader_ready

    @property
    def applied_offset(self) -> int:
        """The end offset of everything applied to the metadata state."""
        return self._applied_offset

    def describe(self) -> QuorumInfo:
        assert self.node is not None
        self.node.tick(_now_ms())  # the core's clock is its last call's: bring it to now
        self._pump()
        return self.node.describe()

    async def wait_applied(self, offset: int, timeout_s: float) -> bool:
        """Wait until everything below ``offset`` is applied here; False on timeout."""
        if self._applied_offset >= offset:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._committed_waiters.append((offset, future))
        try:
            await asyncio.wait_for(future, timeout_s)
            return True
        except TimeoutError:
            return False

    # Requests from other nodes ------------------------------------------------

    async def handle(self, request: Message) -> Message:
        """Give a request that came in on the controller listener to the core; its answer.

        ConnectionError once the driver has stopped (the connection is then closed)."""
        if self.stopped or self.node is None:
            raise ConnectionError("the metadata quorum of this node has stopped")
        token = next(self._tokens)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._owed[token] = future
        try:
            self.node.receive(_with_token(request, token), _now_ms())
            self._pump()
            return await future
        finally:
            self._owed.pop(token, None)

    # Proposals ------------------------------------------------------------------

    async def propose(self, records: Sequence[bytes]) -> int:
        """Append ``records`` as one batch; returns its end offset once committed.

        NotLeaderError when this node is not the leader, or loses leadership before
        the batch commits (it may still commit later under the next leader, as in
        Kafka)."""
        node = self.node
        if node is None or not node.leader_ready:
            raise NotLeaderError(self.leader_id)
        base = node.propose(list(records), _now_ms())
        if base is None:
            raise NotLeaderError(self.leader_id)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._proposals[base] = (node.epoch, future)
        self._pump()
        return await future

    def _fail_proposals(self, leader_id: int) -> None:
        for _, future in self._proposals.values():
            if not future.done():
                future.set_exception(NotLeaderError(leader_id))
        self._proposals.clear()

    # The driver's contract ---------------------------------------------------------

    def _pump(self) -> None:
        node = self.node
        assert node is not None
        self._set_tick()  # the call before may have moved the core's timers
        if self._persisting is not None:  # the Ready before is not durable yet
            self._pump_again = True
            return
        if not node.has_ready:
            self._after_step()
            return
        ready = node.ready()
        if (
            ready.quorum_state is None
            and ready.snapshot is None
            and ready.truncate_to is None
            and not ready.append
            and ready.delete_before is None
        ):
            self._act_on(ready)
            return
        persisting = asyncio.get_running_loop().run_in_executor(
            self._disk,
            functools.partial(
                self.store.persist,
                quorum_state=ready.quorum_state,
                snapshot=ready.snapshot,
                truncate_to=ready.truncate_to,
                append=ready.append,
                delete_before=ready.delete_before,
            ),
        )
        self._persisting = persisting
        persisting.add_done_callback(functools.partial(self._persisted, ready))

    def _persisted(self, ready: Ready, persisting: asyncio.Future[None]) -> None:
        """The Ready is durable (or its persisting failed: logged, as a failed tick is):
        now its messages, commits and snapshots, then the Ready that waited."""
        self._persisting = None
        if self.stopped:
            return
        _succeeded(persisting, "persisting the metadata log failed")  # acted on all the same
        try:
            self._act_on(ready)
        except Exception:
            log.exception("metadata quorum step failed")
        if self._pump_again:
            self._pump_again = False
            self._pump()

    def _act_on(self, ready: Ready) -> None:
        """What a durable Ready asks for: send its messages, answer what is owed, apply
        what committed, take a snapshot when one is due."""
        node = self.node
        assert node is not None
        if ready.snapshot is not None:
            log.info(
                "metadata snapshot received from the leader, up to offset %d (epoch %d)",
                ready.snapshot.snapshot_id.end_offset,
                ready.snapshot.snapshot_id.epoch,
            )
        for message in ready.messages:
            if isinstance(message, REQUESTS):
                task = asyncio.get_running_loop().create_task(self._send(message))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
            else:
                token = getattr(message, "token", None)  # every response has one
                owed = self._owed.pop(token, None) if token is not None else None
                if owed is not None and not owed.done():
                    owed.set_result(message)
        if ready.committed_snapshot is not None:
            self.listener.apply_snapshot(ready.committed_snapshot)
            self._applied_offset = ready.committed_snapshot.snapshot_id.end_offset
            self._applied_epoch = ready.committed_snapshot.snapshot_id.epoch
            self._applied_since_snapshot = self._bytes_since_snapshot = 0
            self._last_snapshot_ms = _now_ms()
        for batch in ready.committed:
            self.listener.apply_batch(batch)
            self._applied_offset = batch.end_offset
            self._applied_epoch = batch.epoch
            self._applied_since_snapshot += len(batch.records)
            if self.snapshot_every_bytes is not None:
                self._bytes_since_snapshot += sum(len(r) for r in batch.records)
            pending = self._proposals.pop(batch.base_offset, None)
            if pending is not None:
                epoch, proposal = pending
                if proposal.done():
                    pass
                elif epoch == batch.epoch:
                    proposal.set_result(batch.end_offset)
                else:
                    proposal.set_exception(NotLeaderError(node.leader_id))
        if self._committed_waiters and (ready.committed or ready.committed_snapshot):
            still = []
            for offset, waiter in self._committed_waiters:
                if self._applied_offset >= offset:
                    if not waiter.done():
                        waiter.set_result(None)
                else:
                    still.append((offset, waiter))
            self._committed_waiters = still
        self._after_step()

    def _after_step(self) -> None:
        """After every step, with or without a Ready: tell of a change of leadership,
        take a snapshot when one is due."""
        node = self.node
        assert node is not None
        leader_ready = node.leader_ready
        if leader_ready != self._was_leader_ready:
            self._was_leader_ready = leader_ready
            if not leader_ready:
                self._fail_proposals(node.leader_id)
            if self.on_leadership is not None:
                self.on_leadership(leader_ready)
        if self.snapshot_every_bytes is not None:
            due = self._bytes_since_snapshot >= self.snapshot_every_bytes
        else:
            due = self._applied_since_snapshot >= self.snapshot_every_records
        if self.snapshot_interval_ms > 0 and self._applied_since_snapshot > 0:
            due = due or _now_ms() - self._last_snapshot_ms >= self.snapshot_interval_ms
        if due:
            self._take_snapshot()

    def _take_snapshot(self) -> None:
        """Write a snapshot of the applied state on the disk thread; the core learns of
        it once it is durable (``_snapshot_saved``)."""
        from strom.raft.messages import SnapshotId

        assert self.node is not None
        snapshot = Snapshot(
            SnapshotId(self._applied_offset, self._applied_epoch), self.listener.snapshot_data()
        )
        self._applied_since_snapshot = self._bytes_since_snapshot = 0
        self._last_snapshot_ms = _now_ms()
        persisting = asyncio.get_running_loop().run_in_executor(
            self._disk, self.store.save_snapshot, snapshot
        )
        self._persisting = persisting
        persisting.add_done_callback(functools.partial(self._snapshot_saved, snapshot))

    def _snapshot_saved(self, snapshot: Snapshot, persisting: asyncio.Future[None]) -> None:
        self._persisting = None
        if self.stopped:
            return
        if _succeeded(persisting, "writing a metadata snapshot failed"):
            assert self.node is not None
            self.node.take_snapshot(snapshot)
            log.info(
                "metadata snapshot at offset %d (epoch %d), %d bytes",
                snapshot.snapshot_id.end_offset,
                snapshot.snapshot_id.epoch,
                len(snapshot.data),
            )
        self._pump_again = False
        self._pump()

    async def _send(self, message: Message) -> None:
        address = self.voters.get(message.dst)
        if address is None:
            return
        body = quorum_wire.request_to_wire(message, self.cluster_id)
        timeout_s = self.raft_config.request_timeout_ms / 1000
        if hasattr(message, "max_wait_ms"):
            timeout_s += message.max_wait_ms / 1000
        try:
            response = await self.peers.request(address[0], address[1], body, timeout_s)
        except PeerError as exc:
            log.debug("quorum request to node %d failed: %s", message.dst, exc)
            return  # the core retries when its request timeout passes
        answer = quorum_wire.response_from_wire(message, response)
        if answer is None or self.stopped or self.node is None:
            return
        self.node.receive(answer, _now_ms())
        self._pump()


def _succeeded(work: asyncio.Future[None], failure: str) -> bool:
    """Whether the disk thread's ``work`` succeeded; its exception logged as ``failure``."""
    try:
        work.result()
    except Exception:
        log.exception(failure)
        return False
    return True


RaftRequest = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
)


def _with_token(message: Message, token: int) -> Message:
    """``message`` (a request: each of them has a token) carrying ``token``."""
    from dataclasses import replace

    if not isinstance(message, RaftRequest):
        raise TypeError(f"not a request: {type(message).__name__}")
    return replace(message, token=token)
