"""Idempotent-producer state of one partition (KIP-98 idempotence, no transactions).

Owns: for every producer id seen in a partition, its current epoch and the
metadata of its last ``MAX_CACHED_BATCHES`` appended batches (first and last
sequence, first and last offset, max timestamp); the sequence checks a batch
must pass before it is appended; and rebuilding that state from the batch
headers of a log's newest segments when the log opens.

The checks, for batches with producerId >= 0 and baseSequence >= 0 (all others,
control batches included, pass untouched):

- an epoch below the producer's known epoch: ``InvalidProducerEpochError``;
- the same epoch and the same (first, last) sequence as one of the cached
  batches: a duplicate (a retry), answered with that batch's original base
  offset and not appended again;
- an epoch above the known one: the sequence must restart at 0;
- the same epoch: the first sequence must follow the last one (sequences wrap
  from 2**31-1 to 0); else ``OutOfOrderSequenceError``;
- an unknown producer id: any epoch and sequence (its state may have aged out of
  the segments the state was rebuilt from).

Does not own: writing batches (partition_log.py), producer-id allocation (the
controller), transactions, snapshot files or expiry of idle producer ids (not
done: state is rebuilt from at most the last two segments at open instead).
Work is per batch header, never per record. Not thread-safe, like its log.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from strom.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptBatchError,
    parse_header,
)
from strom.storage.errors import StorageError
from strom.storage.segment import _SCAN_CHUNK, LogSegment, _Window

log = logging.getLogger(__name__)

MAX_CACHED_BATCHES = 5  # Kafka's limit on in-flight requests for idempotence
SEQUENCE_MODULUS = 2**31  # sequences run 0 .. 2**31-1 and wrap to 0
NOT_IDEMPOTENT = None  # check(): no batch carries a producer id and sequence
APPEND = -1  # check(): append, then call record()
_SMALL_READ = 4096  # walk reads for large batches: only their headers are wanted
_LENGTH = struct.Struct(">i")  # batchLength at byte 8
_PRODUCER_ID = struct.Struct(">q")  # producerId at byte 43


class InvalidProducerEpochError(StorageError):
    """A batch from a producer epoch older than the partition has seen (fenced)."""


class OutOfOrderSequenceError(StorageError):
    """A batch whose first sequence does not follow the producer's last one."""


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    """One producer id's epoch and its last appended batches (oldest first)."""

    __slots__ = ("epoch", "batches")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=MAX_CACHED_BATCHES)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def __repr__(self) -> str:
        return f"ProducerEntry(epoch={self.epoch}, batches={list(self.batches)})"


def last_sequence(header: BatchHeader) -> int:
    """The sequence of a batch's last record (wrapping past 2**31-1 to 0)."""
    return (header.base_sequence + header.last_offset_delta) % SEQUENCE_MODULUS


def _in_sequence(last_seq: int, first_seq: int) -> bool:
    return first_seq == (last_seq + 1) % SEQUENCE_MODULUS


class ProducerStateManager:
    """Producer ids -> ProducerEntry for one partition."""

    __slots__ = ("producers", "label")

    def __init__(self, label: str = "") -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.label = label  # topic-partition, for log lines

    def __len__(self) -> int:
        return len(self.producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    # -- produce path -------------------------------------------------------------

    def check(self, headers: Sequence[BatchHeader]) -> int | None:
        """Check the batches of one append against the state, changing nothing.

        Returns NOT_IDEMPOTENT when no batch carries a producer id and sequence
        (append, no bookkeeping), APPEND when they all pass (append, then
        ``record``), or the original base offset (>= 0) of a duplicate batch (do
        not append; a retry gets the offset its first copy got). Raises
        InvalidProducerEpochError or OutOfOrderSequenceError; the whole append is
        then refused.
        """
        for header in headers:
            if header.producer_id >= 0 and header.base_sequence >= 0 and not header.is_control:
                break
        else:
            return NOT_IDEMPOTENT
        # Several batches of one producer in one append: each must follow the one
        # before it, so the check runs over a running (epoch, last seq) per producer.
        pending: dict[int, tuple[int, int]] = {}
        for header in headers:
            pid = header.producer_id
            first_seq = header.base_sequence
            if pid < 0 or first_seq < 0 or header.is_control:
                continue
            epoch = header.producer_epoch
            entry = self.producers.get(pid)
            if pid in pending:
                known_epoch, known_last = pending[pid]
            elif entry is not None:
                known_epoch, known_last = entry.epoch, entry.last_seq
            else:
                pending[pid] = (epoch, last_sequence(header))
                continue
            if epoch < known_epoch:
                raise InvalidProducerEpochError(
                    f"{self.label}: producer {pid} epoch {epoch} is older than {known_epoch}"
                )
            last_seq = last_sequence(header)
            if entry is not None and epoch == entry.epoch:
                duplicate = entry.find_duplicate(first_seq, last_seq)
                if duplicate is not None:
                    return duplicate.first_offset
            if epoch > known_epoch:
                if first_seq != 0:
                    raise OutOfOrderSequenceError(
                        f"{self.label}: producer {pid} new epoch {epoch} starts at sequence "
                        f"{first_seq}, not 0"
                    )
            elif known_last >= 0 and not _in_sequence(known_last, first_seq):
                raise OutOfOrderSequenceError(
                    f"{self.label}: producer {pid} epoch {epoch} sent sequence {first_seq} "
                    f"after {known_last}"
                )
            pending[pid] = (epoch, last_seq)
        return APPEND

    def record(self, headers: Iterable[BatchHeader]) -> None:
        """Remember appended batches (offsets assigned). No checks: ``check`` ran, or
        the batches are read back from the log."""
        producers = self.producers
        for header in headers:
            pid = header.producer_id
            first_seq = header.base_sequence
            if pid < 0 or first_seq < 0 or header.is_control:
                continue
            epoch = header.producer_epoch
            entry = producers.get(pid)
            if entry is None:
                entry = producers[pid] = ProducerEntry(epoch)
            elif epoch != entry.epoch:
                if epoch < entry.epoch:
                    continue  # only met when replaying an odd log: keep the newer epoch
                entry.epoch = epoch
                entry.batches.clear()
            entry.batches.append(
                BatchMetadata(
                    first_seq,
                    last_sequence(header),
                    header.base_offset,
                    header.base_offset + header.last_offset_delta,
                    header.max_timestamp,
                )
            )

    # -- rebuilding at open ----------------------------------------------------------

    def load_segments(self, segments: Sequence[LogSegment]) -> int:
        """Replay the batch headers of ``segments`` (oldest first); returns how many
        headers were read. Only headers are read: large batches are skipped over."""
        count = 0
        for segment in segments:
            count += self._load_segment(segment)
        return count

    def _load_segment(self, segment: LogSegment) -> int:
        size = segment.size
        if size <= 0:
            return 0
        count = 0
        position = 0
        headers: list[BatchHeader] = []
        # The segment was recovered or trusted at open: only lengths and producer
        # ids are read per batch; full headers are parsed for batches with an id.
        length_at, pid_at = _LENGTH.unpack_from, _PRODUCER_ID.unpack_from
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
                    if pid_at(data, at + 43)[0] >= 0:
                        headers.append(parse_header(data, at, position))
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
        self.record(headers)
        return count
