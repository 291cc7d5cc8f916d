"""The state of one share-partition (KIP-932): which records of a topic partition a
share group has delivered, to whom, and what became of them. Sans-I/O: no sockets,
no clock, no log reads; the caller passes the time in (milliseconds) and the offsets
of the batches it read.

Owns the in-flight window: from the share-partition start offset (SPSO, the first
record not yet finished with) to the end offset (SPEO, one past the last record ever
acquired). Every offset in the window has a state:

- AVAILABLE: may be acquired (never delivered yet, released, or its lock expired);
- ACQUIRED: delivered to one member, locked until a deadline
  (``lock_duration_ms`` after the acquisition, group.share.record.lock.duration.ms);
- ACKNOWLEDGED: accepted by the member that held it: never delivered again;
- ARCHIVED: rejected, delivered ``delivery_limit`` times already
  (group.share.delivery.count.limit: a poison record), or an offset with no record
  (a gap: compacted away, a transaction marker, an aborted record).

and a delivery count (how many times it was acquired). When the records at the start
are ACKNOWLEDGED or ARCHIVED the window moves past them. At most ``max_in_flight``
offsets (group.share.partition.max.record.locks) are in the window: past that no new
record is acquired until the start moves.

Acknowledgement types as on the wire: GAP 0, ACCEPT 1, RELEASE 2, REJECT 3, RENEW 4
(RENEW extends the lock). A release, or a lock that expires, makes the record
AVAILABLE again, or ARCHIVED when its delivery count has reached the limit.

An acknowledgement takes effect in memory at once (the record is no longer held) but
stays unsettled until the state write that carries it is settled, as Kafka's
SharePartition keeps a transition's rollback state: ``take_changes`` hands the
unsettled changes to the write, ``settle`` commits them or rolls them back (the record
ACQUIRED again by its member with its lock deadline, so it is delivered again when the
lock expires). The window's start does not move past an unsettled offset.

What is kept durably (``durable_state`` / ``restore``) is Kafka's ShareSnapshot shape:
the start offset and state batches (first, last, state, delivery count) covering the
window, an ACQUIRED record written as AVAILABLE (a lock does not survive its broker).
Not owned here: reading the log, the timers, writing ``__share_group_state``
(strom/coordinator/share_state.py), who may fetch (the handlers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from strom.protocol.errors import ErrorCode


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


FINISHED = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class _InFlight:
    state: RecordState
    delivery_count: int = 0
    member_id: str | None = None
    deadline_ms: int = 0


# An acknowledged offset's entry, the state the acknowledgement left it in, and what
# it was before: (offset, entry, state after, state before, member, lock deadline).
_Change = tuple[int, _InFlight, RecordState, RecordState, str | None, int]


class Changes:
    """Acknowledgements applied in memory, not yet settled by a state write."""

    __slots__ = ("entries",)

    def __init__(self, entries: list[_Change]) -> None:
        self.entries = entries

    def __bool__(self) -> bool:
        return bool(self.entries)


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets first..last (inclusive) given to one member, delivered ``delivery_count``
    times counting this one (ShareFetch's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one durable state and delivery count (ShareSnapshotValue's
    StateBatch)."""

    first_offset: int
    last_offset: int
    state: int
    delivery_count: int


class SharePartition:
    """One share group's delivery state of one topic partition."""

    def __init__(
        self,
        start_offset: int,
        *,
        lock_duration_ms: int = 30_000,
        delivery_limit: int = 5,
        max_in_flight: int = 2000,
    ) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.lock_duration_ms = lock_duration_ms
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        self._records: dict[int, _InFlight] = {}
        # Whether the durable state changed since ``mark_stored``.
        self.dirty = False
        # Acknowledgements not yet handed to a write, and offsets not yet settled
        # (how many unsettled changes each has).
        self._changes: list[_Change] = []
        self._unsettled: dict[int, int] = {}

    # Reads ---------------------------------------------------------------------------

    def state_of(self, offset: int) -> RecordState | None:
        """The state of an offset in the window; None outside it (below the window every
        record is finished with, above it none was delivered yet)."""
        entry = self._records.get(offset)
        return None if entry is None else entry.state

    def delivery_count_of(self, offset: int) -> int:
        entry = self._records.get(offset)
        return 0 if entry is None else entry.delivery_count

    def holder_of(self, offset: int) -> str | None:
        """The member holding an ACQUIRED offset's lock."""
        entry = self._records.get(offset)
        return (
            entry.member_id if entry is not None and entry.state == RecordState.ACQUIRED else None
        )

    def acquired_by(self, member_id: str) -> list[int]:
        return sorted(
            o
            for o, r in self._records.items()
            if r.state == RecordState.ACQUIRED and r.member_id == member_id
        )

    def next_fetch_offset(self) -> int:
        """Where a fetch should read from: the first AVAILABLE offset in the window (a
        redelivery), else the window's end."""
        for offset in range(self.start_offset, self.end_offset):
            entry = self._records.get(offset)
            if entry is None or entry.state == RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def has_available(self) -> bool:
        return any(r.state == RecordState.AVAILABLE for r in self._records.values())

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def finished_in_window(self) -> int:
        """ACKNOWLEDGED and ARCHIVED offsets above the start (delivery complete)."""
        return sum(1 for r in self._records.values() if r.state in FINISHED)

    def can_acquire_new(self) -> bool:
        return self.in_flight() < self.max_in_flight

    def next_deadline(self) -> int | None:
        """The earliest lock deadline (ms) among ACQUIRED records, if any."""
        deadlines = [
            r.deadline_ms for r in self._records.values() if r.state == RecordState.ACQUIRED
        ]
        return min(deadlines) if deadlines else None

    # Acquiring -----------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        batches: Sequence[tuple[int, int]],
        now_ms: int,
        max_records: int,
    ) -> list[AcquiredRange]:
        """Acquire for ``member_id`` what may be acquired of the log batches read,
        given as (first offset, last offset) in offset order: AVAILABLE offsets in the
        window, and offsets past its end while the window has room. Offsets past the end
        that no batch covers (between two batches) are gaps, archived at once. New
        records are taken batch by batch, so ``max_records`` may be passed to finish a
        batch, as Kafka's batch-optimized acquisition does. Returns the ranges acquired."""
        acquired: list[int] = []
        deadline = now_ms + self.lock_duration_ms
        for first, last in batches:
            if len(acquired) >= max_records:
                break
            if last < self.start_offset:
                continue
            if first >= self.end_offset:  # new records, the common case: taken at once
                room = self.max_in_flight - self.in_flight()
                if room <= 0:
                    break
                if first > self.end_offset:
                    self._archive_gap(self.end_offset, first)
                    room = self.max_in_flight - self.in_flight()
                stop = min(last + 1, first + max(room, 0))
                records = self._records
                for offset in range(first, stop):
                    records[offset] = _InFlight(RecordState.ACQUIRED, 1, member_id, deadline)
                acquired.extend(range(first, stop))
                self.end_offset = max(self.end_offset, stop)
                if stop <= last:
                    break
                continue
            for offset in range(max(first, self.start_offset), last + 1):
                if offset < self.end_offset:
                    entry = self._records.get(offset)
                    if entry is None:
                        entry = self._records[offset] = _InFlight(RecordState.AVAILABLE)
                    if entry.state != RecordState.AVAILABLE:
                        continue
                    if len(acquired) >= max_records:
                        break
                else:
                    if not self.can_acquire_new():
                        break
                    if offset > self.end_offset:
                        self._archive_gap(self.end_offset, offset)
                    entry = self._records[offset] = _InFlight(RecordState.AVAILABLE)
                    self.end_offset = offset + 1
                entry.state = RecordState.ACQUIRED
                entry.delivery_count += 1
                entry.member_id = member_id
                entry.deadline_ms = deadline
                acquired.append(offset)
        self._advance()
        return self._ranges(acquired)

    def _archive_gap(self, first: int, end: int) -> None:
        for offset in range(first, end):
            self._records[offset] = _InFlight(RecordState.ARCHIVED)
        self.end_offset = max(self.end_offset, end)
        self.dirty = True

    def skip_to(self, offset: int) -> None:
        """Offsets below ``offset`` have no deliverable record (the log start moved past
        them, or everything up to there was read and is a gap): those not yet in the
        window are archived; the window then moves past what is finished."""
        if offset > self.end_offset and self.can_acquire_new():
            self._archive_gap(self.end_offset, offset)
        self._advance()

    def move_start(self, log_start_offset: int) -> None:
        """The log start moved past the window's start (retention, deletion): records
        below it are gone, finished or not."""
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            self._records.pop(offset, None)
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)
        self.dirty = True
        self._advance()

    def _ranges(self, offsets: list[int]) -> list[AcquiredRange]:
        runs: list[list[int]] = []  # [first, last, delivery count]
        records = self._records
        for offset in offsets:
            entry = records.get(offset)
            count = entry.delivery_count if entry is not None else 1
            if runs and runs[-1][1] == offset - 1 and runs[-1][2] == count:
                runs[-1][1] = offset
            else:
                runs.append([offset, offset, count])
        return [AcquiredRange(first, last, count) for first, last, count in runs]

    # Acknowledging -------------------------------------------------------------------

    def acknowledge(
        self,
        member_id: str,
        first_offset: int,
        last_offset: int,
        types: Sequence[int],
        now_ms: int,
    ) -> ErrorCode:
        """Apply one acknowledgement batch of ``member_id``: one type for the whole range
        or one per offset. Every offset must be ACQUIRED by this member, else nothing is
        applied and the answer is INVALID_RECORD_STATE (INVALID_REQUEST for a malformed
        batch)."""
        size = last_offset - first_offset + 1
        if size <= 0 or len(types) not in (1, size):
            return ErrorCode.invalid_request
        if any(t not in AcknowledgeType._value2member_map_ for t in types):
            return ErrorCode.invalid_request
        records = self._records
        acquired = RecordState.ACQUIRED
        for offset in range(first_offset, last_offset + 1):
            entry = records.get(offset)
            if entry is None or entry.state != acquired or entry.member_id != member_id:
                return ErrorCode.invalid_record_state
        records = self._records
        changes = self._changes
        unsettled = self._unsettled
        if len(types) == 1 and types[0] == AcknowledgeType.ACCEPT:  # the common case
            done = RecordState.ACKNOWLEDGED
            for offset in range(first_offset, last_offset + 1):
                entry = records[offset]
                changes.append((offset, entry, done, acquired, member_id, entry.deadline_ms))
                unsettled[offset] = unsettled.get(offset, 0) + 1
                entry.state = done
                entry.member_id = None
            self.dirty = True
            self._advance()
            return ErrorCode.none
        for i, offset in enumerate(range(first_offset, last_offset + 1)):
            kind = types[0] if len(types) == 1 else types[i]
            entry = records[offset]
            if kind == AcknowledgeType.RENEW:
                entry.deadline_ms = now_ms + self.lock_duration_ms
                continue
            deadline = entry.deadline_ms
            if kind == AcknowledgeType.ACCEPT:
                self._finish(entry, RecordState.ACKNOWLEDGED)
            elif kind == AcknowledgeType.RELEASE:
                self._release(entry)
            else:  # GAP, REJECT
                self._finish(entry, RecordState.ARCHIVED)
            changes.append((offset, entry, entry.state, acquired, member_id, deadline))
            unsettled[offset] = unsettled.get(offset, 0) + 1
        self._advance()
        return ErrorCode.none

    def take_changes(self) -> Changes:
        """The acknowledgements applied since the last call, for the state write about
        to carry them (to ``settle`` with its outcome)."""
        changes, self._changes = Changes(self._changes), []
        return changes

    def settle(self, changes: Changes, *, committed: bool) -> bool:
        """The write carrying ``changes`` is settled. Committed: the window may move
        past them. Failed: each record still in the state its acknowledgement left is
        ACQUIRED again by its member with its former lock deadline, and the state is
        to be written again. Whether anything was rolled back."""
        unsettled = self._unsettled
        records = self._records
        rolled_back = False
        for offset, entry, after, before, member_id, deadline in changes.entries:
            left = unsettled.get(offset, 0) - 1
            if left > 0:
                unsettled[offset] = left
            else:
                unsettled.pop(offset, None)
            if committed or records.get(offset) is not entry or entry.state != after:
                continue  # committed, or changed again since (acquired anew, moved past)
            entry.state = before
            entry.member_id = member_id
            entry.deadline_ms = deadline
            rolled_back = True
        if rolled_back:
            self.dirty = True
        dirty = self.dirty
        self._advance()
        # The write carried the finished records (``durable_start``): the window's
        # start catching up with it is no change to write.
        self.dirty = dirty
        return rolled_back

    def _finish(self, entry: _InFlight, state: RecordState) -> None:
        entry.state = state
        entry.member_id = None
        self.dirty = True

    def _release(self, entry: _InFlight) -> None:
        if entry.delivery_count >= self.delivery_limit:
            self._finish(entry, RecordState.ARCHIVED)
        else:
            self._finish(entry, RecordState.AVAILABLE)

    def release_member(self, member_id: str) -> int:
        """The member is gone (left, its session closed): what it holds is released."""
        released = 0
        for entry in self._records.values():
            if entry.state == RecordState.ACQUIRED and entry.member_id == member_id:
                self._release(entry)
                released += 1
        if released:
            self._advance()
        return released

    def expire_locks(self, now_ms: int) -> int:
        """Release every record whose lock deadline has passed; how many were."""
        expired = 0
        for entry in self._records.values():
            if entry.state == RecordState.ACQUIRED and entry.deadline_ms <= now_ms:
                self._release(entry)
                expired += 1
        if expired:
            self._advance()
        return expired

    def _advance(self) -> None:
        start = self.start_offset
        records = self._records
        unsettled = self._unsettled
        while start < self.end_offset:
            entry = records.get(start)
            if entry is None or entry.state not in FINISHED or start in unsettled:
                break
            del records[start]
            start += 1
        if start != self.start_offset:
            self.start_offset = start
            self.dirty = True

    # Durable state ------------------------------------------------------------------

    def durable_start(self) -> int:
        """The start offset to write: past the finished records at the window's start,
        settled or not (a write carries the acknowledgements not yet settled)."""
        start = self.start_offset
        records = self._records
        while start < self.end_offset:
            entry = records.get(start)
            if entry is None or entry.state not in FINISHED:
                break
            start += 1
        return start

    def durable_state(self) -> list[StateBatch]:
        """The window from ``durable_start`` as state batches: runs of one durable
        state and delivery count (ACQUIRED written as AVAILABLE)."""
        out: list[StateBatch] = []
        for offset in range(self.durable_start(), self.end_offset):
            entry = self._records.get(offset)
            state = RecordState.AVAILABLE if entry is None else entry.state
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            count = 0 if entry is None else entry.delivery_count
            last = out[-1] if out else None
            if (
                last is not None
                and last.last_offset == offset - 1
                and last.state == state
                and last.delivery_count == count
            ):
                out[-1] = StateBatch(last.first_offset, offset, int(state), count)
            else:
                out.append(StateBatch(offset, offset, int(state), count))
        return out

    def restore(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        """Take a durable state (a snapshot with its updates applied): the window starts
        at ``start_offset`` and ends after the last batch; no lock is held."""
        self._records = {}
        self._changes, self._unsettled = [], {}
        self.start_offset = self.end_offset = start_offset
        for batch in sorted(batches, key=lambda b: b.first_offset):
            state = RecordState(batch.state) if batch.state in (0, 2, 4) else RecordState.AVAILABLE
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                self._records[offset] = _InFlight(state, batch.delivery_count)
            self.end_offset = max(self.end_offset, batch.last_offset + 1)
        self._advance()
        self.dirty = False

    def reset(self, start_offset: int) -> None:
        """Start afresh at ``start_offset`` (AlterShareGroupOffsets): nothing in flight."""
        self._records = {}
        self._changes, self._unsettled = [], {}
        self.start_offset = self.end_offset = start_offset
        self.dirty = True

    def mark_stored(self) -> None:
        self.dirty = False
