"""The Raft core's in-memory view of the replicated log: batches above a snapshot.

Owns the offsets and epochs the consensus reasons about: the log start offset (the end
of the snapshot the log sits on, if any), the batches from there to the log end, the
epoch of the last record, and the lookups Kafka's KIP-320 divergence check needs
(``end_offset_for_epoch``). Truncation and snapshot installation change it in place.

Does not own durability (the driver persists what the core's ``Ready`` says), record
contents, or any decision about what to append or truncate (``strom.raft.core``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

from strom.raft.messages import Batch, Snapshot, SnapshotId


class RaftLog:
    """Batches contiguous from ``start_offset`` up to ``end_offset``, on an optional
    snapshot that covers everything below ``start_offset``."""

    def __init__(self, snapshot: Snapshot | None = None, batches: Iterable[Batch] = ()) -> None:
        self.snapshot: Snapshot | None = snapshot
        self.start_offset = snapshot.snapshot_id.end_offset if snapshot is not None else 0
        self.start_epoch = snapshot.snapshot_id.epoch if snapshot is not None else 0
        self.batches: list[Batch] = []
        self._bases: list[int] = []
        for batch in batches:
            if batch.end_offset <= self.start_offset:
                continue
            if batch.base_offset < self.start_offset:
                batch = _tail(batch, self.start_offset)
            if batch.base_offset != self.end_offset:
                raise ValueError(
                    f"batch at {batch.base_offset} does not follow the log end {self.end_offset}"
                )
            self._push(batch)

    # Queries ------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self.batches[-1].end_offset if self.batches else self.start_offset

    @property
    def last_epoch(self) -> int:
        """Epoch of the last record (the snapshot's when the log is empty above it)."""
        return self.batches[-1].epoch if self.batches else self.start_epoch

    def epoch_at(self, offset: int) -> int | None:
        """The epoch of the record at ``offset - 1`` (the record before ``offset``); None
        when that record is neither in the log nor the snapshot's last."""
        if offset == self.start_offset:
            return self.start_epoch
        if offset < self.start_offset or offset > self.end_offset:
            return None
        return self.batches[self._index_of(offset - 1)].epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """The largest epoch <= ``epoch`` this log knows, and the offset where it ends
        (the base of the first batch of a later epoch, or the log end); ``(-1, log start)``
        when every epoch known is larger (or the epoch lies wholly inside the snapshot)."""
        for index in range(len(self.batches) - 1, -1, -1):
            batch = self.batches[index]
            if batch.epoch <= epoch:
                return (batch.epoch, batch.end_offset)
        if self.start_offset > 0 and self.start_epoch <= epoch:
            return (self.start_epoch, self.start_offset)
        return (-1, self.start_offset)

    def read(self, offset: int, max_bytes: int, max_batches: int = 1 << 30) -> tuple[Batch, ...]:
        """Whole batches from ``offset`` (a batch boundary) on, at least one when there is
        one, then as many as fit in ``max_bytes`` of record bytes."""
        if offset >= self.end_offset or offset < self.start_offset:
            return ()
        index = self._index_of(offset)
        first = self.batches[index]
        if first.base_offset != offset:
            first = _tail(first, offset)
        out = [first]
        size = _size(first)
        for batch in self.batches[index + 1 :]:
            size += _size(batch)
            if size > max_bytes or len(out) >= max_batches:
                break
            out.append(batch)
        return tuple(out)

    def batches_between(self, start: int, end: int) -> list[Batch]:
        """The batches that hold records in ``[start, end)``, cut to that range."""
        if start >= end or start >= self.end_offset:
            return []
        start = max(start, self.start_offset)
        out = []
        for batch in self.batches[self._index_of(start) :]:
            if batch.base_offset >= end:
                break
            if batch.base_offset < start:
                batch = _tail(batch, start)
            if batch.end_offset > end:
                batch = _head(batch, end)
            out.append(batch)
        return out

    # Changes --------------------------------------------------------------------

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(f"append at {batch.base_offset}, log ends at {self.end_offset}")
        if batch.epoch < self.last_epoch:
            raise ValueError(f"append in epoch {batch.epoch} after epoch {self.last_epoch}")
        self._push(batch)

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or above ``offset`` (never below the log start)."""
        offset = max(offset, self.start_offset)
        if offset >= self.end_offset:
            return
        index = self._index_of(offset)
        kept = self.batches[index]
        del self.batches[index:]
        del self._bases[index:]
        if kept.base_offset < offset:
            self._push(_head(kept, offset))

    def advance_start(self, snapshot: Snapshot) -> None:
        """The log now starts at the end of ``snapshot``, a prefix of this log."""
        sid = snapshot.snapshot_id
        self.snapshot = snapshot
        if sid.end_offset <= self.start_offset:
            return
        if sid.end_offset >= self.end_offset:
            self.batches.clear()
            self._bases.clear()
        else:
            index = self._index_of(sid.end_offset)
            first = self.batches[index]
            rest = self.batches[index + 1 :]
            self.batches.clear()
            self._bases.clear()
            if first.base_offset < sid.end_offset:
                first = _tail(first, sid.end_offset)
            for batch in [first, *rest]:
                self._push(batch)
        self.start_offset = sid.end_offset
        self.start_epoch = sid.epoch

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by ``snapshot``: it starts and ends at its end offset."""
        self.snapshot = snapshot
        self.batches.clear()
        self._bases.clear()
        self.start_offset = snapshot.snapshot_id.end_offset
        self.start_epoch = snapshot.snapshot_id.epoch

    @property
    def snapshot_id(self) -> SnapshotId | None:
        return self.snapshot.snapshot_id if self.snapshot is not None else None

    # Internals ------------------------------------------------------------------

    def _push(self, batch: Batch) -> None:
        self.batches.append(batch)
        self._bases.append(batch.base_offset)

    def _index_of(self, offset: int) -> int:
        return bisect_right(self._bases, offset) - 1


def _size(batch: Batch) -> int:
    return sum(len(r) for r in batch.records) + 16


def _tail(batch: Batch, offset: int) -> Batch:
    cut = offset - batch.base_offset
    return Batch(offset, batch.epoch, batch.records[cut:], batch.control)


def _head(batch: Batch, offset: int) -> Batch:
    cut = offset - batch.base_offset
    return Batch(batch.base_offset, batch.epoch, batch.records[:cut], batch.control)


def cut_batches(batches: Sequence[Batch], offset: int) -> list[Batch]:
    """``batches`` without the records at or above ``offset``."""
    out = []
    for batch in batches:
        if batch.base_offset >= offset:
            break
        out.append(_head(batch, offset) if batch.end_offset > offset else batch)
    return out
