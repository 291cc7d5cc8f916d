"""The sparse offset index and time index of one segment.

Owns: the entries of Kafka's ``.index`` (8-byte entries: offset relative to the
segment base as int32, file position as int32, big-endian) and ``.timeindex``
(12-byte entries: timestamp int64, relative offset int32, big-endian), kept in
memory as typed arrays, their binary searches, loading them from their files and
appending new entries to the files (entries are buffered in memory and written
when the segment is flushed, rolled or closed: indexes of segments above the
recovery point are rebuilt on a crash anyway).
Does not own: deciding when an entry is due or what it holds (segment.py), the
log file itself, or fsync policy.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

from strom.storage.handles import FileHandleCache

_LITTLE = sys.byteorder == "little"
_TIME_ENTRY = struct.Struct(">qi")


def _to_wire(values: array[int]) -> bytes:
    if _LITTLE:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _read_file(path: str, handles: FileHandleCache) -> bytes | None:
    try:
        with handles.lease(path) as fd:
            size = os.fstat(fd).st_size
            return os.pread(fd, size, 0) if size else b""
    except FileNotFoundError:
        return None


def _write_entries(
    path: str, handles: FileHandleCache, data: bytes, at: int, truncate: bool
) -> None:
    if not os.path.exists(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
    with handles.lease(path) as fd:
        if truncate:
            os.ftruncate(fd, at)
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, at)
            view = view[n:]
            at += n


class OffsetIndex:
    """Relative offset -> file position, ascending in both."""

    __slots__ = ("path", "rel", "pos", "written")
    ENTRY_SIZE = 8

    def __init__(self, path: str) -> None:
        self.path = path
        self.rel = array("i")
        self.pos = array("i")
        self.written = 0  # entries already in the file

    @classmethod
    def load(cls, path: str, handles: FileHandleCache) -> OffsetIndex | None:
        """The index in ``path``, or None if missing or its size is not whole entries."""
        data = _read_file(path, handles)
        if data is None or len(data) % cls.ENTRY_SIZE:
            return None
        index = cls(path)
        flat = array("i")
        flat.frombytes(data)
        if _LITTLE:
            flat.byteswap()
        index.rel = flat[0::2]
        index.pos = flat[1::2]
        index.written = len(index.rel)
        return index

    def __len__(self) -> int:
        return len(self.rel)

    def append(self, relative_offset: int, position: int) -> None:
        self.rel.append(relative_offset)
        self.pos.append(position)

    def lookup(self, relative_offset: int) -> int:
        """Position of the last entry at or below ``relative_offset`` (0 if none)."""
        i = bisect_right(self.rel, relative_offset) - 1
        return self.pos[i] if i >= 0 else 0

    def last_entry_at_or_below(self, position: int, relative_offset_limit: int) -> int:
        """Position of the last entry with pos <= ``position`` and rel < the limit (-1 if none)."""
        i = min(bisect_right(self.pos, position), bisect_left(self.rel, relative_offset_limit)) - 1
        return self.pos[i] if i >= 0 else -1

    def last_position(self) -> int:
        return self.pos[-1] if self.rel else 0

    def write_pending(self, handles: FileHandleCache) -> None:
        n = len(self.rel)
        if self.written == n:
            return
        flat = array("i", bytes(8 * (n - self.written)))
        flat[0::2] = self.rel[self.written :]
        flat[1::2] = self.pos[self.written :]
        _write_entries(self.path, handles, _to_wire(flat), self.written * 8, False)
        self.written = n

    def rewrite(self, handles: FileHandleCache) -> None:
        self.written = 0
        _write_entries(self.path, handles, b"", 0, True)
        self.write_pending(handles)


class TimeIndex:
    """Max timestamp so far -> relative offset of the batch holding it; both ascending."""

    __slots__ = ("path", "ts", "rel", "written")
    ENTRY_SIZE = 12

    def __init__(self, path: str) -> None:
        self.path = path
        self.ts = array("q")
        self.rel = array("i")
        self.written = 0

    @classmethod
    def load(cls, path: str, handles: FileHandleCache) -> TimeIndex | None:
        data = _read_file(path, handles)
        if data is None or len(data) % cls.ENTRY_SIZE:
            return None
        index = cls(path)
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            index.ts.append(ts)
            index.rel.append(rel)
        index.written = len(index.ts)
        return index

    @staticmethod
    def read_last(path: str, handles: FileHandleCache) -> tuple[int, int] | None:
        """The last entry of the file without loading the index (None if unusable)."""
        try:
            with handles.lease(path) as fd:
                size = os.fstat(fd).st_size
                if size == 0 or size % TimeIndex.ENTRY_SIZE:
                    return None
                return _TIME_ENTRY.unpack(os.pread(fd, TimeIndex.ENTRY_SIZE, size - 12))
        except FileNotFoundError:
            return None

    def __len__(self) -> int:
        return len(self.ts)

    def maybe_append(self, timestamp: int, relative_offset: int) -> None:
        """Add an entry if ``timestamp`` is above the last one (and above -1)."""
        if timestamp > (self.ts[-1] if self.ts else -1):
            self.ts.append(timestamp)
            self.rel.append(relative_offset)

    def last(self) -> tuple[int, int] | None:
        return (self.ts[-1], self.rel[-1]) if self.ts else None

    def floor_below(self, timestamp: int) -> int | None:
        """Relative offset of the last entry whose timestamp is < ``timestamp``.

        Every batch up to and including that offset's batch has a max timestamp
        below ``timestamp``, so a search for it may start there.
        """
        i = bisect_left(self.ts, timestamp) - 1
        return self.rel[i] if i >= 0 else None

    def write_pending(self, handles: FileHandleCache) -> None:
        n = len(self.ts)
        if self.written == n:
            return
        data = b"".join(_TIME_ENTRY.pack(self.ts[i], self.rel[i]) for i in range(self.written, n))
        _write_entries(self.path, handles, data, self.written * 12, False)
        self.written = n

    def rewrite(self, handles: FileHandleCache) -> None:
        self.written = 0
        _write_entries(self.path, handles, b"", 0, True)
        self.write_pending(handles)
