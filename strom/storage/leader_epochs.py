"""The leader epoch cache of one partition: where each leader epoch began in its log.

Owns the ``leader-epoch-checkpoint`` file in the partition directory (Kafka's text
format: version ``0``, the number of entries, then ``epoch start_offset`` per line) and
the answers built on it (KIP-101, KIP-279): the latest epoch, and the end offset of an
epoch as OffsetForLeaderEpoch and a fetch's diverging-epoch check need it. Entries only
ever grow in epoch and start offset; truncating the log's end drops the entries that
start at or past the new end, moving the log start up trims the front.

Every change is written at once, atomically (the file is small and changes only when
leadership does), except an epoch taken by an empty log that has no file yet: that one
is written with the log's first flush (``dirty``), so that making a thousand new
partitions' leaders costs no thousand fsyncs. A new epoch and a log start moving up are
written without fsync (``unsynced``: the log's next flush fsyncs the file, on the fsync
thread, so that a produce after a leadership change does not wait on the disk on the
event loop); a truncation of the end is fsynced at once. The file is a cache of what the
batches themselves carry (each batch's partition leader epoch): when it is missing or
unreadable the log rebuilds it from its batch headers, and after a crash the log takes
the epochs of the batches it recovered above its recovery point (``PartitionLog.open``),
so a file that lost its newest entries to a power cut is made whole again.
Does not own the log (partition_log.py).
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from pathlib import Path

from strom.storage.durable import write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """(epoch, start offset) entries, both strictly increasing."""

    def __init__(self, path: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self.dirty = False  # changed since the file was last written
        self.unsynced = False  # written since, but not fsynced: the next flush's
        for epoch, start in entries or ():
            self._add(epoch, start)

    @classmethod
    def read(cls, directory: Path) -> LeaderEpochCache | None:
        """The cache stored in ``directory``; None if its file is missing or malformed."""
        path = directory / FILE_NAME
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return None
        try:
            if int(lines[0]) != VERSION:
                raise ValueError(f"unknown version {lines[0]!r}")
            count = int(lines[1])
            entries = []
            for line in lines[2 : 2 + count]:
                epoch, start = line.split(" ")
                entries.append((int(epoch), int(start)))
            if len(entries) != count:
                raise ValueError(f"expected {count} entries, found {len(entries)}")
        except (ValueError, IndexError) as exc:
            log.warning("rebuilding malformed %s: %s", path, exc)
            return None
        return cls(path, entries)

    def _add(self, epoch: int, start: int) -> None:
        # Kafka's rule: a new entry replaces every entry it contradicts (an epoch at or
        # above it, or a start offset at or above its own).
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start)

    # -- questions --------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for ``requested``, as OffsetForLeaderEpoch answers it.

        The latest epoch ends at the log end offset. An older epoch that is known ends
        where the next one starts; one that is not known answers the largest known epoch
        below it, ending where the first epoch above it starts (KIP-279). An epoch below
        every known one answers itself with the first entry's start offset; above every
        known one, or with no entries, (-1, -1).
        """
        if requested < 0 or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested == self._epochs[-1]:
            return requested, log_end_offset
        higher = bisect_right(self._epochs, requested)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return requested, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in; -1 before the first entry."""
        i = bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    # -- changes ----------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, write: bool = True) -> bool:
        """Record that ``epoch`` begins at ``start_offset``; True if that changed the
        cache (then the file was rewritten, or with ``write=False`` marked ``dirty``).
        An epoch not above the latest is ignored."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        self._add(epoch, start_offset)
        if write or self.path.exists():  # an existing file must not be left stale
            self.write(sync=False)
        else:
            self.dirty = True
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``: drop entries starting at or past it."""
        keep = bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            del self._epochs[keep:], self._starts[keep:]
            self.write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop the entries wholly below it and
        move the one that holds it to start there."""
        covering = bisect_right(self._starts, start_offset) - 1
        if covering < 0 or (covering == 0 and self._starts[0] == start_offset):
            return
        del self._epochs[:covering], self._starts[:covering]
        self._starts[0] = start_offset
        self.write(sync=False)  # a stale file's entries below the start are cut on load

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._starts.clear()
            self.write()

    def write(self, *, sync: bool = True) -> None:
        """Replace the file atomically; fsynced unless ``sync`` is False (then
        ``unsynced`` until the log's next flush fsyncs it)."""
        self.dirty = False
        lines = [str(VERSION), str(len(self._epochs))]
        lines += [f"{e} {s}" for e, s in zip(self._epochs, self._starts, strict=True)]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode(), sync=sync)
        self.unsynced = not sync
