"""The transaction index of one segment: the aborted transactions whose markers it holds.

Owns: Kafka's ``{base_offset:020d}.txnindex`` file, a sequence of 34-byte entries
(int16 version 0, int64 producerId, int64 firstOffset, int64 lastOffset, int64
lastStableOffset; big-endian) in marker order, so ``last_offset`` ascends. An entry
is written at once when an abort marker is appended to its segment (the file is
created on the first entry: most segments never have one) and fsynced with the
segment by the next flush. Entries are read into memory lazily, on the first look.
Answers which aborted transactions overlap an offset range (Kafka's
``collectAbortedTxns``, with its early stop), drops entries on truncation, and
moves with its segment (retire, delete).
Does not own: deciding what is aborted (producer_state.py), which segment holds a
marker (partition_log.py), the cleaner's copy of entries into cleaned segments
(cleaner.py).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

from strom.storage.handles import FileHandleCache

log = logging.getLogger(__name__)

TXNINDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    """One aborted transaction: its producer, first data offset, marker offset, and the
    last stable offset right after the marker (ignoring the high watermark)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(ENTRY.pack(VERSION, *entry) for entry in entries)


def decode_entries(data: bytes, path: str = "") -> list[AbortedTxn]:
    """Whole entries of ``data``; a torn last entry or an unknown version ends it."""
    entries: list[AbortedTxn] = []
    whole = len(data) - len(data) % ENTRY_SIZE
    if whole != len(data):
        log.warning("%s: ignoring a torn entry at its end", path)
    for version, pid, first, last, lso in ENTRY.iter_unpack(data[:whole]):
        if version != VERSION:
            log.warning("%s: unknown entry version %d; entries after it ignored", path, version)
            break
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


class TransactionIndex:
    """The aborted transactions of one segment (entries in memory only once loaded)."""

    __slots__ = ("path", "handles", "_entries", "_exists", "unsynced")

    def __init__(self, path: str, handles: FileHandleCache, exists: bool | None = None) -> None:
        self.path = path
        self.handles = handles
        self._entries: list[AbortedTxn] | None = None  # None: not loaded
        self._exists = exists  # None: not known yet (checked on first need)
        self.unsynced = False  # entries written since the last flush

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path})"

    @property
    def exists(self) -> bool:
        if self._exists is None:
            self._exists = os.path.exists(self.path)
        return self._exists

    def entries(self) -> list[AbortedTxn]:
        """Every entry, oldest marker first (loaded from the file on first use)."""
        if self._entries is None:
            if not self.exists:
                self._entries = []
            else:
                try:
                    with self.handles.lease(self.path) as fd:
                        data = os.pread(fd, os.fstat(fd).st_size, 0)
                except FileNotFoundError:
                    self._exists = False
                    data = b""
                self._entries = decode_entries(data, self.path)
        return self._entries

    def __len__(self) -> int:
        return len(self.entries()) if self.exists else 0

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry after the last one, writing it to the file at once."""
        entries = self.entries()
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"{self.path}: aborted txn at {entry.last_offset} after {entries[-1].last_offset}"
            )
        if not self.exists:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            self._exists = True
        with self.handles.lease(self.path) as fd:
            data = ENTRY.pack(VERSION, *entry)
            at = len(entries) * ENTRY_SIZE
            while data:
                n = os.pwrite(fd, data, at)
                data, at = data[n:], at + n
        entries.append(entry)
        self.unsynced = True

    def collect(self, start: int, end: int, out: list[AbortedTxn]) -> bool:
        """Add to ``out`` the entries with last_offset >= start and first_offset < end;
        True when no later entry (here or in a later segment) can overlap [start, end):
        an entry whose last stable offset is >= end was written when every transaction
        still open began at or after ``end``."""
        if not self.exists:
            return False
        for entry in self.entries():
            if entry.last_offset >= start and entry.first_offset < end:
                out.append(entry)
            if entry.last_stable_offset >= end:
                return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset``."""
        if not self.exists:
            return
        entries = self.entries()
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        if not entries:
            self.delete()
            self._entries = []
            return
        with self.handles.lease(self.path) as fd:
            os.ftruncate(fd, keep * ENTRY_SIZE)
        self.unsynced = True

    def reset(self) -> None:
        """Forget every entry and remove the file (the index is being rebuilt)."""
        self.delete()
        self._entries = []

    def sync(self) -> None:
        if self.unsynced and self.exists:
            with self.handles.lease(self.path) as fd:
                os.fsync(fd)
        self.unsynced = False

    def files_to_sync(self) -> list[str]:
        if not self.unsynced:
            return []
        self.unsynced = False
        return [self.path] if self.exists else []

    def forget(self) -> None:
        """Close the file's fd (the segment is closed, retired or deleted)."""
        self.handles.forget(self.path)

    def delete(self) -> None:
        self.handles.forget(self.path)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._exists = False
        self.unsynced = False

    def detach(self) -> None:
        """The file was renamed away with its segment (retired): forget it here."""
        self.handles.forget(self.path)
        self._exists = False
        self._entries = None
        self.unsynced = False
