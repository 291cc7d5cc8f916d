"""The transaction coordinator of this node: every transactional id it is responsible for.

Owns the state machine of Kafka's transactions (KIP-98; transaction version 1, the
one every client speaks) for the transactional ids whose ``__transaction_state``
partition this node leads: InitProducerId (a new producer id or an epoch bump that
fences the older producer; a retry with the expected id and epoch, KIP-360),
AddPartitionsToTxn (also its verify-only form, KIP-890), AddOffsetsToTxn, EndTxn,
the coordinator's own aborts of transactions past their timeout (the epoch is
bumped first, so the late producer is fenced), the expiry of transactional ids idle
for ``transactional.id.expiration.ms``, and the listing the admin APIs show.

States and transitions, as Kafka's TransactionMetadata has them:

    Empty -> Ongoing (AddPartitions/AddOffsets) -> PrepareCommit | PrepareAbort (EndTxn)
    -> markers written to every partition -> CompleteCommit | CompleteAbort -> Ongoing ...
    Ongoing -> PrepareEpochFence (InitProducerId or timeout: epoch bumped) -> PrepareAbort
    Empty | Complete* -> Dead (expired: tombstone)

Every transition is written to ``__transaction_state`` (Kafka's formats,
transaction_log.py) and takes effect once that write is replicated (``wait_replicated``
is given by the broker); while one is being written the id has a pending state and
other requests for it get CONCURRENT_TRANSACTIONS, which clients retry. The markers of
a prepared transaction are sent by the broker (``send_markers``; the coordinator
epoch, the leader epoch of the state partition, goes with them so that a deposed
coordinator's markers are refused); when they are all written the transaction
completes. A node that becomes leader of a state partition replays it and finishes
the transactions found prepared there. Knows nothing of sockets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strom.coordinator.internal_log import (
    AppendRefused,
    AppendToLeader,
    append_records,
    replay_records,
)
from strom.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for
from strom.coordinator.safe_regex import compile_pattern
from strom.coordinator.transaction_log import (
    TRANSACTION_TOPIC,
    TransactionLogError,
    TxnRecord,
    TxnState,
    decode_key,
    decode_value,
    transaction_partition_for,
    txn_key,
    txn_value,
)
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.cluster.node_state import NodeState
    from strom.config import BrokerConfig

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
MAX_EPOCH = 32767  # Short.MaxValue: an epoch at MAX_EPOCH - 1 needs a new producer id
NO_EPOCH = -1
WRITE_TIMEOUT_S = 5.0

_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True, slots=True)
class MarkerBatch:
    """The markers ending one transaction, one per partition it wrote to."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(slots=True)
class TxnMetadata:
    """What the coordinator knows of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = NO_EPOCH  # the epoch before the last bump (retries)
    pending: TxnState | None = None  # a transition being written

    def record(
        self,
        state: TxnState | None = None,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: set[TopicPartition] | None = None,
        start_ms: int | None = None,
        last_update_ms: int | None = None,
    ) -> TxnRecord:
        """The TransactionLogValue of this metadata with the values given changed (a
        value left out, or None, is this metadata's own)."""
        by_topic: dict[str, set[int]] = {}
        for topic, index in self.partitions if partitions is None else partitions:
            by_topic.setdefault(topic, set()).add(index)
        return TxnRecord(
            producer_id=self.producer_id if producer_id is None else producer_id,
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            state=state if state is not None else self.state,
            partitions=by_topic,
            last_update_ms=self.last_update_ms if last_update_ms is None else last_update_ms,
            start_ms=self.start_ms if start_ms is None else start_ms,
        )

    def apply(self, record: TxnRecord) -> None:
        if record.producer_epoch != self.producer_epoch or record.producer_id != self.producer_id:
            self.last_producer_epoch = (
                self.producer_epoch if record.producer_id == self.producer_id else NO_EPOCH
            )
        self.producer_id = record.producer_id
        self.producer_epoch = record.producer_epoch
        self.timeout_ms = record.timeout_ms
        self.state = record.state
        self.partitions = {(t, p) for t, ids in record.partitions.items() for p in ids}
        self.last_update_ms = record.last_update_ms
        self.start_ms = record.start_ms


class TransactionCoordinator:
    def __init__(
        self,
        state: NodeState,
        config: BrokerConfig,
        *,
        new_producer_id: Callable[[], Awaitable[int]],
        wait_replicated: Callable[[TopicPartition, int, int, float], Awaitable[bool]],
        send_markers: Callable[[MarkerBatch], Awaitable[bool]],
        append: AppendToLeader,
    ) -> None:
        self.state = state
        self.config = config
        self.new_producer_id = new_producer_id
        self.wait_replicated = wait_replicated
        self.send_markers = send_markers
        self.append = append  # the leader's one append path (the broker's)
        self.txns: dict[str, TxnMetadata] = {}
        self.loaded: dict[int, int] = {}  # state partition -> coordinator epoch
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: list[asyncio.Task[None]] = []

    # Settings and placement ------------------------------------------------------

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    @property
    def max_timeout_ms(self) -> int:
        return int(self.config["transaction.max.timeout.ms"])

    @property
    def state_partitions(self) -> int:
        topic = self.state.topic(TRANSACTION_TOPIC)
        if topic is not None:
            return topic.partitions
        return int(self.config["transaction.state.log.num.partitions"])

    def partition_of(self, transactional_id: str) -> int:
        return transaction_partition_for(transactional_id, self.state_partitions)

    def coordinator_error(self, transactional_id: str) -> ErrorCode:
        """NONE when this node coordinates the id now, else the error to answer."""
        topic = self.state.topic(TRANSACTION_TOPIC)
        if topic is None:
            return ErrorCode.coordinator_not_available
        partition = self.partition_of(transactional_id)
        if topic.leader_of(partition) != self.state.node_id:
            return ErrorCode.not_coordinator
        if partition not in self.loaded:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    def topic_request(self, live_brokers: int) -> tuple[int, int, dict[str, str]]:
        """(partitions, replication factor, configs) to create ``__transaction_state``."""
        factor = max(
            1, min(int(self.config["transaction.state.log.replication.factor"]), live_brokers)
        )
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "segment.bytes": str(self.config["transaction.state.log.segment.bytes"]),
            "min.insync.replicas": str(
                min(int(self.config["transaction.state.log.min.isr"]), factor)
            ),
            "unclean.leader.election.enable": "false",
        }
        return int(self.config["transaction.state.log.num.partitions"]), factor, configs

    # Lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        topic = self.state.topic(TRANSACTION_TOPIC)
        if topic is not None:
            for partition in range(topic.partitions):
                if topic.leader_of(partition) == self.state.node_id:
                    self.load_partition(partition)
        loop = asyncio.get_running_loop()
        abort_every = int(
            self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        )
        expire_every = int(
            self.config["transaction.remove.expired.transaction.cleanup.interval.ms"]
        )
        self._timers = [
            loop.create_task(self._every(abort_every / 1000, self.abort_timed_out)),
            loop.create_task(self._every(expire_every / 1000, self.expire_transactional_ids)),
        ]

    def stop(self) -> None:
        for task in [*self._timers, *self._tasks]:
            task.cancel()

    async def _every(self, interval_s: float, work: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                work()
            except Exception:
                log.exception("transaction coordinator housekeeping failed")

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def load_partition(self, partition: int) -> None:
        """This node now leads ``__transaction_state``-``partition``: replay it, and
        finish the transactions it left prepared."""
        topic = self.state.topic(TRANSACTION_TOPIC)
        if topic is None:
            return
        epoch = topic.leader_epoch_of(partition)
        if self.loaded.get(partition) == epoch:
            return
        self.loaded[partition] = epoch
        found: dict[str, TxnRecord | None] = {}
        for _, record in replay_records(self.state, TRANSACTION_TOPIC, partition):
            if record.key is None:
                continue
            try:
                txn_id = decode_key(record.key)
                if txn_id is None:
                    continue
                found[txn_id] = None if record.value is None else decode_value(record.value)
            except TransactionLogError as exc:
                log.warning("skipping an unreadable record of %s: %s", TRANSACTION_TOPIC, exc)
        count = 0
        for txn_id, value in found.items():
            if value is None or value.state == TxnState.DEAD:
                self.txns.pop(txn_id, None)
                continue
            meta = TxnMetadata(txn_id, value.producer_id, value.producer_epoch, value.timeout_ms)
            meta.apply(value)
            self.txns[txn_id] = meta
            count += 1
            if meta.state in _PREPARED:
                self._spawn(self._complete(meta, meta.state == TxnState.PREPARE_COMMIT))
        if count:
            log.info(
                "loaded %d transactional id(s) from %s-%d (coordinator epoch %d)",
                count,
                TRANSACTION_TOPIC,
                partition,
                epoch,
            )

    def unload_partition(self, partition: int) -> None:
        """Another node leads ``__transaction_state``-``partition`` now."""
        if self.loaded.pop(partition, None) is None:
            return
        count = self.state_partitions
        for txn_id in [t for t in self.txns if transaction_partition_for(t, count) == partition]:
            del self.txns[txn_id]

    # Writing a transition -----------------------------------------------------------

    async def _write(self, meta: TxnMetadata, record: TxnRecord | None) -> ErrorCode:
        """Write ``record`` (None: a tombstone) for ``meta`` and wait until it is
        replicated; the metadata takes it only then. ``meta.pending`` is set by the
        caller and cleared here."""
        partition = self.partition_of(meta.transactional_id)
        epoch = self.loaded.get(partition)
        try:
            if epoch is None:
                return ErrorCode.not_coordinator
            try:
                appended = append_records(
                    self.append,
                    TRANSACTION_TOPIC,
                    partition,
                    [
                        (
                            txn_key(meta.transactional_id),
                            None if record is None else txn_value(record),
                        )
                    ],
                    self.now_ms(),
                )
            except AppendRefused as exc:
                log.info("state of %s not written: %s", meta.transactional_id, exc)
                if exc.error_code == ErrorCode.not_enough_replicas:
                    return ErrorCode.coordinator_not_available  # as Kafka: retriable
                return ErrorCode.not_coordinator
            except OSError:
                log.exception("could not write the state of %s", meta.transactional_id)
                return ErrorCode.not_coordinator
            if appended.replicated:
                ok = await self.wait_replicated(
                    (TRANSACTION_TOPIC, partition),
                    appended.end_offset,
                    appended.leader_epoch,
                    WRITE_TIMEOUT_S,
                )
                if not ok:
                    return ErrorCode.not_coordinator
            if self.loaded.get(partition) != epoch:
                return ErrorCode.not_coordinator
            if record is None:
                self.txns.pop(meta.transactional_id, None)
            else:
                meta.apply(record)
            return ErrorCode.none
        finally:
            meta.pending = None

    # InitProducerId ------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int = -1,
        expected_epoch: int = -1,
    ) -> ProducerIdAndEpoch:
        if not transactional_id:
            return ProducerIdAndEpoch(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ProducerIdAndEpoch(ErrorCode.invalid_transaction_timeout)
        error = self.coordinator_error(transactional_id)
        if error != ErrorCode.none:
            return ProducerIdAndEpoch(error)
        meta = self.txns.get(transactional_id)
        if meta is None:
            producer_id = await self.new_producer_id()
            meta = self.txns.get(transactional_id)  # another request may have made it
            if meta is None:
                meta = TxnMetadata(transactional_id, producer_id, NO_EPOCH, timeout_ms)
                self.txns[transactional_id] = meta
        if meta.pending is not None:
            return ProducerIdAndEpoch(ErrorCode.concurrent_transactions)
        expected = expected_producer_id >= 0
        if expected and not (
            expected_producer_id == meta.producer_id
            and expected_epoch in (meta.producer_epoch, meta.last_producer_epoch)
        ):
            return ProducerIdAndEpoch(ErrorCode.producer_fenced)
        if meta.state in _PREPARED or meta.state in (
            TxnState.PREPARE_EPOCH_FENCE,
            TxnState.DEAD,
        ):
            return ProducerIdAndEpoch(ErrorCode.concurrent_transactions)
        if meta.state == TxnState.ONGOING:
            # The older producer's transaction is aborted under a bumped epoch (which
            # fences it); the client retries and then gets the next epoch.
            self._fence_and_abort(meta)
            return ProducerIdAndEpoch(ErrorCode.concurrent_transactions)
        if expected and expected_epoch == meta.last_producer_epoch and meta.state == TxnState.EMPTY:
            # A retry of a bump that was written: answer it again.
            return ProducerIdAndEpoch(ErrorCode.none, meta.producer_id, meta.producer_epoch)
        producer_id, epoch = meta.producer_id, meta.producer_epoch + 1
        if epoch >= MAX_EPOCH - 1 or meta.producer_epoch == MAX_EPOCH - 1:
            meta.pending = TxnState.EMPTY
            try:
                producer_id = await self.new_producer_id()
            except BaseException:
                meta.pending = None
                raise
            epoch = 0
        now = self.now_ms()
        meta.pending = TxnState.EMPTY
        error = await self._write(
            meta,
            meta.record(
                TxnState.EMPTY,
                producer_id=producer_id,
                producer_epoch=epoch,
                timeout_ms=timeout_ms,
                partitions=set(),
                start_ms=-1,
                last_update_ms=now,
            ),
        )
        if error != ErrorCode.none:
            return ProducerIdAndEpoch(error)
        return ProducerIdAndEpoch(ErrorCode.none, meta.producer_id, meta.producer_epoch)

    # Adding partitions -----------------------------------------------------------------

    def _check_producer(self, meta: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode:
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if meta.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        return ErrorCode.none

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """The verify-only form of AddPartitionsToTxn (KIP-890): whether each partition
        is part of the producer's ongoing transaction, changing nothing."""
        wanted = list(partitions)
        error = self.coordinator_error(transactional_id)
        if error == ErrorCode.none:
            meta = self.txns.get(transactional_id)
            error = self._check_producer(meta, producer_id, epoch)
        if error != ErrorCode.none:
            return dict.fromkeys(wanted, error)
        assert meta is not None
        return {
            tp: ErrorCode.none
            if meta.state == TxnState.ONGOING and tp in meta.partitions
            else ErrorCode.invalid_txn_state
            for tp in wanted
        }

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> ErrorCode:
        """Add partitions to the producer's transaction (starting it if need be)."""
        error = self.coordinator_error(transactional_id)
        if error != ErrorCode.none:
            return error
        meta = self.txns.get(transactional_id)
        error = self._check_producer(meta, producer_id, epoch)
        if error != ErrorCode.none:
            return error
        assert meta is not None
        if meta.pending is not None or meta.state in _PREPARED:
            return ErrorCode.concurrent_transactions
        if meta.state in (TxnState.PREPARE_EPOCH_FENCE, TxnState.DEAD):
            return ErrorCode.invalid_txn_state
        wanted = set(partitions)
        if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
            return ErrorCode.none
        now = self.now_ms()
        starting = meta.state != TxnState.ONGOING
        meta.pending = TxnState.ONGOING
        return await self._write(
            meta,
            meta.record(
                TxnState.ONGOING,
                partitions=(set() if starting else meta.partitions) | wanted,
                start_ms=now if starting else meta.start_ms,
                last_update_ms=now,
            ),
        )

    async def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets_partitions: int,
    ) -> ErrorCode:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction, so the offsets committed in it get the markers too."""
        partition = partition_for(group_id, offsets_partitions)
        return await self.add_partitions(
            transactional_id, producer_id, epoch, [(OFFSETS_TOPIC, partition)]
        )

    # Ending ----------------------------------------------------------------------------

    async def end_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> ErrorCode:
        error = self.coordinator_error(transactional_id)
        if error != ErrorCode.none:
            return error
        meta = self.txns.get(transactional_id)
        error = self._check_producer(meta, producer_id, epoch)
        if error != ErrorCode.none:
            return error
        assert meta is not None
        if meta.pending is not None:
            return ErrorCode.concurrent_transactions
        state = meta.state
        if state == TxnState.ONGOING:
            return await self._prepare(meta, commit)
        if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return ErrorCode.none  # a retry of an end that completed
        if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions  # still writing the markers
        return ErrorCode.invalid_txn_state

    async def _prepare(
        self, meta: TxnMetadata, commit: bool, *, epoch: int | None = None
    ) -> ErrorCode:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        meta.pending = target
        record = meta.record(target, producer_epoch=epoch, last_update_ms=self.now_ms())
        error = await self._write(meta, record)
        if error == ErrorCode.none:
            self._spawn(self._complete(meta, commit))
        return error

    async def _complete(self, meta: TxnMetadata, commit: bool) -> None:
        """Write the markers of a prepared transaction, then its completion."""
        partition = self.partition_of(meta.transactional_id)
        coordinator_epoch = self.loaded.get(partition)
        if coordinator_epoch is None:
            return
        batch = MarkerBatch(
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            commit,
            coordinator_epoch,
            tuple(sorted(meta.partitions)),
        )
        if batch.partitions and not await self.send_markers(batch):
            return  # this node stopped coordinating: the next coordinator finishes it
        while self.loaded.get(partition) == coordinator_epoch:
            if meta.pending is not None:
                await asyncio.sleep(0.01)
                continue
            target = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            meta.pending = target
            error = await self._write(
                meta, meta.record(target, partitions=set(), last_update_ms=self.now_ms())
            )
            if error == ErrorCode.none:
                return
            await asyncio.sleep(0.1)

    def _fence_and_abort(self, meta: TxnMetadata) -> None:
        """Abort an ongoing transaction under a bumped epoch, fencing its producer
        (InitProducerId of a newer instance, or the transaction's timeout)."""
        epoch = (
            meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH - 1 else meta.producer_epoch
        )
        meta.pending = TxnState.PREPARE_EPOCH_FENCE
        self._spawn(self._fenced_abort(meta, epoch))

    async def _fenced_abort(self, meta: TxnMetadata, epoch: int) -> None:
        meta.pending = None
        error = await self._prepare(meta, commit=False, epoch=epoch)
        if error != ErrorCode.none:
            log.warning("could not abort the transaction of %s: %s", meta.transactional_id, error)

    # Housekeeping ---------------------------------------------------------------------

    def abort_timed_out(self, now_ms: int | None = None) -> int:
        """Abort every ongoing transaction older than its timeout; returns how many."""
        now = self.now_ms() if now_ms is None else now_ms
        count = 0
        for meta in list(self.txns.values()):
            if (
                meta.state == TxnState.ONGOING
                and meta.pending is None
                and meta.start_ms + meta.timeout_ms < now
            ):
                log.info(
                    "aborting the transaction of %s (producer %d epoch %d): past its timeout "
                    "of %d ms",
                    meta.transactional_id,
                    meta.producer_id,
                    meta.producer_epoch,
                    meta.timeout_ms,
                )
                self._fence_and_abort(meta)
                count += 1
        return count

    def expire_transactional_ids(self, now_ms: int | None = None) -> int:
        """Remove transactional ids idle longer than transactional.id.expiration.ms."""
        now = self.now_ms() if now_ms is None else now_ms
        horizon = int(self.config["transactional.id.expiration.ms"])
        count = 0
        for meta in list(self.txns.values()):
            if (
                meta.pending is None
                and (meta.state == TxnState.EMPTY or meta.state in _COMPLETE)
                and meta.last_update_ms + horizon <= now
            ):
                meta.pending = TxnState.DEAD
                self._spawn(self._expire(meta))
                count += 1
        return count

    async def _expire(self, meta: TxnMetadata) -> None:
        error = await self._write(meta, None)
        if error == ErrorCode.none:
            log.info("transactional id %s expired", meta.transactional_id)

    # Views for the admin APIs -----------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        error = self.coordinator_error(transactional_id)
        if error != ErrorCode.none:
            return error, None
        meta = self.txns.get(transactional_id)
        if meta is None:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, meta

    def list_transactions(
        self,
        states: Iterable[TxnState] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int = -1,
        pattern: str | None = None,
    ) -> list[TxnMetadata]:
        wanted_states = set(states)
        wanted_ids = set(producer_ids)
        regex = compile_pattern(pattern) if pattern else None
        now = self.now_ms()
        out = []
        for meta in self.txns.values():
            if wanted_states and meta.state not in wanted_states:
                continue
            if wanted_ids and meta.producer_id not in wanted_ids:
                continue
            if min_duration_ms >= 0 and (
                meta.state != TxnState.ONGOING or now - meta.start_ms < min_duration_ms
            ):
                continue
            if regex is not None and not regex.fullmatch(meta.transactional_id):
                continue
            out.append(meta)
        return out
