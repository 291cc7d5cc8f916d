"""Producer state of one partition: idempotence and transactions (KIP-98).

Owns: for every producer id seen in a partition (until it expires), its current
epoch, the metadata of its last ``MAX_CACHED_BATCHES`` appended batches (first and
last sequence, first and last offset, max timestamp), the epoch of the last
transaction coordinator that wrote a marker for it, its last timestamp, and the
first offset of its open transaction; the partition's open transactions (by first
offset) and its completed transactions whose markers are not yet below the high
watermark, from which the first unstable offset comes; the checks a batch or a
marker must pass before it is appended; applying appended batches and markers
(``record``), which tells the caller which transactions completed, with the last
stable offset right after each (what the transaction index stores for aborts);
turning the state into snapshot entries and back; replaying batch headers (and the
one record of each control batch) from segments when a log opens or is truncated;
and expiring idle producers.

Expiry (Kafka's ``isProducerExpired``): a producer with no open transaction whose last
timestamp (the max timestamp of its last batch or marker as appended) is
``expiration_ms`` or more before now is forgotten, by ``remove_expired`` and, for the
entries of a snapshot, by ``load_snapshot``. A producer that sends again after that is
an unknown producer to ``check`` (below).

The checks, for data batches with producerId >= 0 and baseSequence >= 0 (control
batches are checked by ``check_marker`` instead):

- an epoch below the producer's known epoch: ``InvalidProducerEpochError``;
- the same epoch and the same (first, last) sequence as one of the cached
  batches: a duplicate (a retry), answered with that batch's original base
  offset and not appended again;
- an epoch above the known one: the sequence must restart at 0;
- the same epoch: the first sequence must follow the last one (sequences wrap
  from 2**31-1 to 0; a producer whose epoch a marker bumped starts again at 0);
  else ``OutOfOrderSequenceError``;
- a non-transactional batch from a producer with an open transaction:
  ``InvalidTxnStateError``;
- an unknown producer id: any epoch and sequence (its state may have aged out of
  the log, or expired).

A refusal's message names the partition, producer id, epoch and sequence (and the
producer's last batches here, for a sequence out of order); a retried batch, and an
unknown producer's batch at a sequence other than 0, are logged at INFO with the same,
so that a failover test's broker logs tell what each replica answered.

Transactions: a transactional data batch (attribute 0x10) from a producer with no
open transaction opens one at its base offset. A commit or abort marker (a control
batch) ends it: the producer's epoch becomes the marker's if higher, its coordinator
epoch the marker's, and the transaction moves to the completed-but-unreplicated set
until the high watermark passes its marker. A marker for a producer with no open
transaction changes only the epochs (retried markers are harmless).
``first_unstable_offset(hw)`` is the first offset of the earliest transaction still
open or completed at or above ``hw``; a heap of open first offsets and a heap of
unreplicated ones, both pruned lazily, keep it cheap enough to ask on every request.

Does not own: writing batches or the transaction index (partition_log.py,
txn_index.py), the snapshot file format (producer_snapshot.py), producer-id
allocation (the controller), the transaction coordinator, or when expiry runs and
with which ``producer.id.expiration.ms`` (partition_log.py, log_manager.py). Work is
per batch header, never per record (except the one record of a control batch).
Not thread-safe, like its log.
"""

from __future__ import annotations

import heapq
import logging
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from strom.protocol.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    parse_header,
    read_control_record,
)
from strom.storage.errors import StorageError
from strom.storage.producer_snapshot import SnapshotEntry
from strom.storage.segment import _SCAN_CHUNK, LogSegment, _Window
from strom.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

MAX_CACHED_BATCHES = 5  # Kafka's limit on in-flight requests for idempotence
SEQUENCE_MODULUS = 2**31  # sequences run 0 .. 2**31-1 and wrap to 0
NOT_IDEMPOTENT = None  # check(): no batch carries producer state (append, no bookkeeping)
APPEND = -1  # check(): append, then call record()
_SMALL_READ = 4096  # walk reads for large batches: only their headers are wanted
_TRACKED = ATTR_TRANSACTIONAL | ATTR_CONTROL
_LENGTH = struct.Struct(">i")  # batchLength at byte 8
_PRODUCER_ID = struct.Struct(">q")  # producerId at byte 43
_BASE_OFFSET = struct.Struct(">q")  # baseOffset at byte 0
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta at byte 23


class InvalidProducerEpochError(StorageError):
    """A batch or marker from a producer epoch older than the partition has seen."""


class OutOfOrderSequenceError(StorageError):
    """A batch whose first sequence does not follow the producer's last one."""


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer whose transaction is open."""


class TransactionCoordinatorFencedError(StorageError):
    """A marker from a coordinator epoch older than the producer's last marker's."""


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction a marker ended, as ``record`` reports it."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool
    last_stable_offset: int  # right after the marker, the high watermark aside

    def aborted_txn(self) -> AbortedTxn:
        return AbortedTxn(
            self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class ProducerState(NamedTuple):
    """One producer as DescribeProducers reports it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction


class ProducerEntry:
    """One producer id's epochs, last appended batches (oldest first) and transaction."""

    __slots__ = (
        "epoch",
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
    )

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=MAX_CACHED_BATCHES)
        self.coordinator_epoch = -1  # -1: no marker seen
        self.current_txn_first_offset = -1  # -1: no open transaction
        self.last_timestamp = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def __repr__(self) -> str:
        return (
            f"ProducerEntry(epoch={self.epoch}, coordinator_epoch={self.coordinator_epoch}, "
            f"txn={self.current_txn_first_offset}, batches={list(self.batches)})"
        )


def last_sequence(header: BatchHeader) -> int:
    """The sequence of a batch's last record (wrapping past 2**31-1 to 0)."""
    return (header.base_sequence + header.last_offset_delta) % SEQUENCE_MODULUS


def is_expired(entry: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
    """Whether a producer may be forgotten (Kafka's isProducerExpired): no open
    transaction, and its last timestamp ``expiration_ms`` or more before ``now_ms``."""
    return entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= expiration_ms


def _known_batches(entry: ProducerEntry | None) -> str:
    """The batches of a producer a refusal names: (first..last sequence @ first offset)."""
    if entry is None or not entry.batches:
        return ""
    known = ", ".join(f"{b.first_seq}..{b.last_seq}@{b.first_offset}" for b in entry.batches)
    return f" (its last batches here: {known})"


def _in_sequence(last_seq: int, first_seq: int) -> bool:
    return first_seq == (last_seq + 1) % SEQUENCE_MODULUS


class ProducerStateManager:
    """Producer ids -> ProducerEntry for one partition, and its transactions."""

    __slots__ = ("producers", "label", "_open", "_open_heap", "_unreplicated")

    def __init__(self, label: str = "") -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.label = label  # topic-partition, for log lines
        self._open: dict[int, int] = {}  # first offset of an open transaction -> producer id
        self._open_heap: list[int] = []  # those first offsets (stale ones popped lazily)
        # (first offset, marker offset) of completed transactions whose markers may not
        # be below the high watermark yet (popped lazily once they are).
        self._unreplicated: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    # -- produce path -------------------------------------------------------------

    def check(self, headers: Sequence[BatchHeader]) -> int | None:
        """Check the batches of one append against the state, changing nothing.

        Returns NOT_IDEMPOTENT when no batch carries a producer id with a sequence or
        the transactional/control attribute (append, no bookkeeping), APPEND when they
        all pass (append, then ``record``), or the original base offset (>= 0) of a
        duplicate batch (do not append; a retry gets the offset its first copy got).
        Raises InvalidProducerEpochError, OutOfOrderSequenceError or
        InvalidTxnStateError; the whole append is then refused.
        """
        for header in headers:
            if header.producer_id >= 0 and (
                header.base_sequence >= 0 or header.attributes & _TRACKED
            ):
                break
        else:
            return NOT_IDEMPOTENT
        # Several batches of one producer in one append: each must follow the one
        # before it, so the check runs over a running (epoch, last seq, in a
        # transaction) per producer.
        pending: dict[int, tuple[int, int, bool]] = {}
        for header in headers:
            pid = header.producer_id
            first_seq = header.base_sequence
            if pid < 0 or first_seq < 0 or header.is_control:
                continue
            transactional = header.is_transactional
            epoch = header.producer_epoch
            entry = self.producers.get(pid)
            if pid in pending:
                known_epoch, known_last, in_txn = pending[pid]
            elif entry is not None:
                known_epoch, known_last = entry.epoch, entry.last_seq
                in_txn = entry.current_txn_first_offset >= 0
            else:
                if first_seq != 0:
                    log.info(
                        "%s: producer %d is unknown here: its batch at epoch %d, sequence "
                        "%d is taken as the first",
                        self.label,
                        pid,
                        epoch,
                        first_seq,
                    )
                pending[pid] = (epoch, last_sequence(header), transactional)
                continue
            if epoch < known_epoch:
                raise InvalidProducerEpochError(
                    f"{self.label}: producer {pid} epoch {epoch} (sequence {first_seq}) is "
                    f"older than {known_epoch}"
                )
            last_seq = last_sequence(header)
            if entry is not None and epoch == entry.epoch:
                duplicate = entry.find_duplicate(first_seq, last_seq)
                if duplicate is not None:
                    log.info(
                        "%s: producer %d epoch %d sent sequences %d..%d again: answered with "
                        "offset %d, where they are",
                        self.label,
                        pid,
                        epoch,
                        first_seq,
                        last_seq,
                        duplicate.first_offset,
                    )
                    return duplicate.first_offset
            if epoch > known_epoch:
                if first_seq != 0:
                    raise OutOfOrderSequenceError(
                        f"{self.label}: producer {pid} new epoch {epoch} starts at sequence "
                        f"{first_seq}, not 0"
                    )
            elif not _in_sequence(known_last, first_seq):
                raise OutOfOrderSequenceError(
                    f"{self.label}: producer {pid} epoch {epoch} sent sequence {first_seq} "
                    f"after {known_last}{_known_batches(entry)}"
                )
            if in_txn and not transactional:
                raise InvalidTxnStateError(
                    f"{self.label}: producer {pid} sent a non-transactional batch while its "
                    "transaction is open"
                )
            pending[pid] = (epoch, last_seq, in_txn or transactional)
        return APPEND

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Whether a leader may append a marker: InvalidProducerEpochError for an epoch
        below the producer's, TransactionCoordinatorFencedError for a coordinator epoch
        below the last marker's. An unknown producer passes."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"{self.label}: marker for producer {producer_id} epoch {producer_epoch} is "
                f"older than {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{self.label}: marker for producer {producer_id} from coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}"
            )

    def record(
        self, headers: Iterable[BatchHeader], buf: bytes | bytearray | memoryview | None = None
    ) -> list[CompletedTxn]:
        """Apply appended batches (offsets assigned), in order; returns the transactions
        their markers completed. No checks: ``check`` ran, or the batches come from a
        leader or the log. ``buf`` holds the batches (header positions index into it):
        without it control batches are not read and end nothing."""
        completed: list[CompletedTxn] = []
        for header in headers:
            if header.producer_id < 0:
                continue
            if header.attributes & ATTR_CONTROL:
                if buf is None or not header.attributes & ATTR_TRANSACTIONAL:
                    continue
                found = read_control_record(buf, header)
                if found is not None:
                    done = self.apply_marker(header, found[0], found[1])
                    if done is not None:
                        completed.append(done)
            else:
                self.apply_batch(header)
        return completed

    def apply_batch(self, header: BatchHeader) -> None:
        """Apply one data batch with a producer id (``record`` does it in turn)."""
        pid = header.producer_id
        first_seq = header.base_sequence
        transactional = header.attributes & ATTR_TRANSACTIONAL
        if first_seq < 0 and not transactional:
            return
        epoch = header.producer_epoch
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(epoch)
        elif epoch != entry.epoch:
            if epoch < entry.epoch:
                return  # only met when replaying an odd log: keep the newer epoch
            entry.epoch = epoch
            entry.batches.clear()
        if first_seq >= 0:
            entry.batches.append(
                BatchMetadata(
                    first_seq,
                    last_sequence(header),
                    header.base_offset,
                    header.base_offset + header.last_offset_delta,
                    header.max_timestamp,
                )
            )
        entry.last_timestamp = header.max_timestamp
        if transactional and entry.current_txn_first_offset < 0:
            first = header.base_offset
            entry.current_txn_first_offset = first
            self._open[first] = pid
            heapq.heappush(self._open_heap, first)

    def apply_marker(
        self, header: BatchHeader, control_type: int, coordinator_epoch: int
    ) -> CompletedTxn | None:
        """Apply one control batch of a transactional producer: a commit or abort marker
        ends the producer's open transaction (returned), other control types are
        ignored."""
        if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
            return None
        pid = header.producer_id
        epoch = header.producer_epoch
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(epoch)
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()  # the new epoch's sequences start at 0
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = header.max_timestamp
        if first < 0:
            return None  # no data in the transaction here: nothing changes for readers
        self._open.pop(first, None)
        marker = header.base_offset
        stable = self._first_open()
        heapq.heappush(self._unreplicated, (first, marker))
        if stable is None:
            stable = marker + 1
        return CompletedTxn(pid, first, marker, control_type == CONTROL_ABORT, stable)

    # -- transactions ---------------------------------------------------------------

    def _first_open(self) -> int | None:
        heap, live = self._open_heap, self._open
        while heap and heap[0] not in live:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """First offset of the earliest transaction that is open or whose marker is at
        or above ``high_watermark``; None if there is none. Transactions completed
        below ``high_watermark`` are forgotten (high watermarks only grow)."""
        first = self._first_open()
        heap = self._unreplicated
        while heap and heap[0][1] < high_watermark:
            heapq.heappop(heap)
        if heap and (first is None or heap[0][0] < first):
            return heap[0][0]
        return first

    def first_undecided_offset(self) -> int | None:
        """First offset of the earliest open transaction (None if none is open)."""
        return self._first_open()

    def open_transactions(self) -> list[tuple[int, int, int]]:
        """(producer id, producer epoch, first offset) of each open transaction, earliest
        first."""
        producers = self.producers
        return [(pid, producers[pid].epoch, first) for first, pid in sorted(self._open.items())]

    def states(self) -> list[ProducerState]:
        """Every producer as DescribeProducers reports it, by producer id."""
        return [
            ProducerState(
                pid,
                entry.epoch,
                entry.last_seq,
                entry.last_timestamp,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
            )
            for pid, entry in sorted(self.producers.items())
        ]

    # -- expiry ----------------------------------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget every producer ``is_expired`` at ``now_ms``; returns their ids."""
        producers = self.producers
        expired = [
            pid for pid, entry in producers.items() if is_expired(entry, now_ms, expiration_ms)
        ]
        for pid in expired:
            del producers[pid]
        return expired

    # -- snapshots -------------------------------------------------------------------

    def snapshot_entries(self) -> list[SnapshotEntry]:
        """The state as snapshot entries (each producer's last batch only, as Kafka)."""
        entries = []
        for pid, entry in self.producers.items():
            if entry.batches:
                last = entry.batches[-1]
                last_seq, last_offset = last.last_seq, last.last_offset
                delta = last.last_offset - last.first_offset
            else:
                last_seq, last_offset, delta = -1, -1, 0
            entries.append(
                SnapshotEntry(
                    pid,
                    entry.epoch,
                    last_seq,
                    last_offset,
                    delta,
                    entry.last_timestamp,
                    entry.coordinator_epoch,
                    entry.current_txn_first_offset,
                )
            )
        return entries

    def load_snapshot(
        self,
        entries: Iterable[SnapshotEntry],
        now_ms: int | None = None,
        expiration_ms: int | None = None,
    ) -> int:
        """Replace the state by a snapshot's (completed transactions are not in it).
        With ``now_ms`` and ``expiration_ms``, entries already expired then are left out
        (Kafka's loadFromSnapshot); returns how many were."""
        self.producers.clear()
        self._open.clear()
        self._open_heap.clear()
        self._unreplicated.clear()
        skipped = 0
        for snap in entries:
            entry = ProducerEntry(snap.epoch)
            if snap.last_offset >= 0 and snap.last_sequence >= 0:
                entry.batches.append(
                    BatchMetadata(
                        (snap.last_sequence - snap.offset_delta) % SEQUENCE_MODULUS,
                        snap.last_sequence,
                        snap.last_offset - snap.offset_delta,
                        snap.last_offset,
                        snap.timestamp,
                    )
                )
            entry.coordinator_epoch = snap.coordinator_epoch
            entry.last_timestamp = snap.timestamp
            entry.current_txn_first_offset = max(snap.current_txn_first_offset, -1)
            if (
                now_ms is not None
                and expiration_ms is not None
                and is_expired(entry, now_ms, expiration_ms)
            ):
                skipped += 1
                continue
            if entry.current_txn_first_offset >= 0:
                self._open[entry.current_txn_first_offset] = snap.producer_id
                self._open_heap.append(entry.current_txn_first_offset)
            self.producers[snap.producer_id] = entry
        heapq.heapify(self._open_heap)
        return skipped

    # -- rebuilding from the log -------------------------------------------------------

    def replay(
        self,
        segments: Sequence[LogSegment],
        from_offset: int,
        index_interval: int,
        rebuild_from: int | None = None,
    ) -> int:
        """Apply the batches of ``segments`` (oldest first) from ``from_offset`` on;
        returns how many batch headers were read. Only headers are read (large batches
        are skipped over), plus the record of each transactional control batch. The
        transaction index of each segment whose base is >= ``rebuild_from`` gets the
        aborted transactions met in it (that index is being rebuilt)."""
        count = 0
        for segment in segments:
            rebuild = rebuild_from is not None and segment.base_offset >= rebuild_from
            count += self._replay_segment(segment, from_offset, index_interval, rebuild)
        return count

    def _replay_segment(
        self, segment: LogSegment, from_offset: int, index_interval: int, rebuild: bool
    ) -> int:
        size = segment.size
        if size <= 0 or (segment.next_offset is not None and segment.next_offset <= from_offset):
            return 0
        position = 0
        if from_offset > segment.base_offset:
            position = segment.position_at_or_below(from_offset, index_interval)
        count = 0
        length_at, pid_at = _LENGTH.unpack_from, _PRODUCER_ID.unpack_from
        base_at, delta_at = _BASE_OFFSET.unpack_from, _LAST_DELTA.unpack_from
        with segment.handles.lease(segment.log_path) as fd:
            window = _Window(fd, size, _SCAN_CHUNK)
            try:
                while position + HEADER_SIZE <= size:
                    at = window.fetch(position, HEADER_SIZE)
                    data = window.data
                    if len(data) - at < HEADER_SIZE:
                        break
                    batch_size = length_at(data, at + 8)[0] + LOG_OVERHEAD
                    if batch_size < HEADER_SIZE or position + batch_size > size:
                        break
                    count += 1
                    if (
                        pid_at(data, at + 43)[0] >= 0
                        and base_at(data, at)[0] + delta_at(data, at + 23)[0] >= from_offset
                    ):
                        header = parse_header(data, at, position)
                        if not header.attributes & ATTR_CONTROL:
                            self.apply_batch(header)
                        elif header.attributes & ATTR_TRANSACTIONAL:
                            at = window.fetch(position, batch_size)
                            found = read_control_record(window.data, parse_header(window.data, at))
                            done = (
                                None
                                if found is None
                                else self.apply_marker(header, found[0], found[1])
                            )
                            if done is not None and done.aborted and rebuild:
                                segment.txn_index.append(done.aborted_txn())
                    position += batch_size
                    # Small batches: read many headers at once; large ones: only
                    # the next header's neighbourhood, not the whole batch.
                    window.chunk = _SMALL_READ if batch_size > _SCAN_CHUNK // 4 else _SCAN_CHUNK
            except CorruptBatchError as exc:
                log.warning(
                    "%s: stopped rebuilding producer state at %s:%d: %s",
                    self.label,
                    segment.log_path,
                    position,
                    exc,
                )
        return count
