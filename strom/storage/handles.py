"""A bounded LRU cache of open OS file descriptors, shared by every segment.

Owns: opening segment and index files (read/write, never creating them), keeping
at most ``capacity`` of them open, closing the least recently used ones, and
pinning an fd while a caller uses it so that eviction by another thread can never
close (and let the OS reuse) a descriptor in use. Also read-only memory mappings of
files that large reads send from (at most ``MAX_MAPPINGS`` kept for reuse; a mapping
dropped while a response still holds a view of it is unmapped when the view goes),
every mapping of each path tracked weakly until then, and cutting a file short in
place (``cut``) only when no live view of any mapping of it reaches past the cut:
touching a mapped page past a file's end raises SIGBUS, which kills the process.
Does not own: file positions (callers use os.pread/os.pwrite), creating or
deleting files, replacing a file that cannot be cut in place (segment.py), fsync
policy.

With 1,000 partitions there are 3,000+ segment files; the broker must start under
``ulimit -n 1024``, so segments ask this cache for an fd each time they need one
and an evicted fd is simply reopened on next use.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import weakref
from collections import OrderedDict

log = logging.getLogger(__name__)

_OPEN_FLAGS = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
MAX_MAPPINGS = 64  # each mapping holds a duplicate fd while it lives

_FileId = tuple[int, int]  # (st_dev, st_ino): which file a mapping is of, whatever its name


def _file_id(fd: int) -> _FileId:
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


class FileHandleCache:
    """LRU of open fds keyed by path. Thread-safe; fds are pinned while leased."""

    __slots__ = ("capacity", "_entries", "_orphans", "_maps", "_mappings", "_lock", "opens")

    def __init__(self, capacity: int = 512) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        # path -> [fd, pins]
        self._entries: OrderedDict[str, list[int]] = OrderedDict()
        # fds forgotten while pinned: fd -> pins; closed when the last lease ends
        self._orphans: dict[int, int] = {}
        # path -> read-only mapping of its first len() bytes, least recently used first
        self._maps: OrderedDict[str, mmap.mmap] = OrderedDict()
        # path -> every mapping made of it that may still live (the cache's and older,
        # shorter ones that responses' views keep alive), with the file each is of
        self._mappings: dict[str, list[tuple[_FileId, weakref.ref[mmap.mmap]]]] = {}
        self._lock = threading.Lock()
        self.opens = 0  # how many times a file was opened (for tests and metrics)

    def __len__(self) -> int:
        return len(self._entries) + len(self._orphans)

    def lease(self, path: str) -> _Lease:
        """``with cache.lease(path) as fd:`` pins an open fd for the block."""
        return _Lease(self, path)

    def acquire(self, path: str) -> int:
        """Open (or reuse) the fd of ``path`` and pin it; pair with release()."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is None:
                fd = os.open(path, _OPEN_FLAGS)
                self.opens += 1
                entry = [fd, 1]
                self._entries[path] = entry
                self._evict()
                return fd
            self._entries.move_to_end(path)
            entry[1] += 1
            return entry[0]

    def release(self, path: str, fd: int) -> None:
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None and entry[0] == fd:
                entry[1] -= 1
                if len(self._entries) > self.capacity:
                    self._evict()
                return
            pins = self._orphans.get(fd)
            if pins is None:
                return
            if pins <= 1:
                del self._orphans[fd]
                os.close(fd)
            else:
                self._orphans[fd] = pins - 1

    def mapped(self, path: str, fd: int, size: int) -> memoryview | None:
        """A read-only view of bytes [0, size) of ``path``, which the caller has leased
        as ``fd``, from a memory mapping kept for the next reads; None if the file
        cannot be mapped. Reading a mapped page past the end of a file kills the
        process, so whoever cuts a mapped file short goes through ``cut``, which never
        lets a live view reach past the new end."""
        if size <= 0:
            return None
        with self._lock:
            mapping = self._maps.get(path)
            if mapping is None or len(mapping) < size:
                try:
                    file_id = _file_id(fd)
                    mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
                except (OSError, ValueError):
                    return None
                self._forget_dead_mappings()
                # A shorter old mapping lives on in its views: it stays tracked.
                self._mappings.setdefault(path, []).append((file_id, weakref.ref(mapping)))
                self._maps[path] = mapping
            self._maps.move_to_end(path)
            while len(self._maps) > MAX_MAPPINGS:
                self._maps.popitem(last=False)
            return memoryview(mapping)[:size]

    def cut(self, path: str, fd: int, size: int) -> bool:
        """Cut ``path``, leased as ``fd``, to ``size`` bytes in place (ftruncate, no
        fsync) and return True, unless a live view of a mapping of this file reaches
        past ``size``: then return False and leave the file whole (the caller replaces
        it under its name instead, so the old file keeps its length until its views
        go). Mappings of the file with no view alive are closed either way; no new
        mapping of it can be made while this runs."""
        file_id = _file_id(fd)
        with self._lock:
            self._maps.pop(path, None)
            tracked = self._mappings.pop(path, [])
            kept = []
            viewed_past_cut = False
            for mapped_file, ref in tracked:
                mapping = ref()
                if mapping is None:
                    continue
                if mapped_file != file_id:  # of a file that had this name before
                    kept.append((mapped_file, ref))
                    continue
                try:
                    mapping.close()
                except BufferError:  # a view of it is alive
                    kept.append((mapped_file, ref))
                    viewed_past_cut = viewed_past_cut or len(mapping) > size
            if kept:
                self._mappings[path] = kept
            if viewed_past_cut:
                return False
            os.ftruncate(fd, size)
            return True

    def forget(self, path: str) -> None:
        """Close the fd of ``path`` (before the file is deleted or renamed)."""
        with self._lock:
            self._maps.pop(path, None)
            entry = self._entries.pop(path, None)
            if entry is None:
                return
            fd, pins = entry
            if pins:
                self._orphans[fd] = pins
            else:
                os.close(fd)

    def close_all(self) -> None:
        """Close every unpinned fd (pinned ones close when released)."""
        with self._lock:
            self._maps.clear()
            for fd, pins in self._entries.values():
                if pins:
                    self._orphans[fd] = pins
                else:
                    os.close(fd)
            self._entries.clear()

    def _forget_dead_mappings(self) -> None:
        # Called with the lock held, when a mapping is made: few are ever tracked.
        for path in list(self._mappings):
            alive = [(file_id, ref) for file_id, ref in self._mappings[path] if ref() is not None]
            if alive:
                self._mappings[path] = alive
            else:
                del self._mappings[path]

    def _evict(self) -> None:
        # Called with the lock held. Pinned entries are skipped, so the cache may
        # briefly exceed its capacity while many fds are in use at once.
        excess = len(self._entries) - self.capacity
        if excess <= 0:
            return
        victims = []
        for path, (_fd, pins) in self._entries.items():
            if not pins:
                victims.append(path)
                if len(victims) == excess:
                    break
        for path in victims:
            fd, _pins = self._entries.pop(path)
            os.close(fd)


class _Lease:
    __slots__ = ("_cache", "_path", "_fd")

    def __init__(self, cache: FileHandleCache, path: str) -> None:
        self._cache = cache
        self._path = path
        self._fd = -1

    def __enter__(self) -> int:
        self._fd = self._cache.acquire(self._path)
        return self._fd

    def __exit__(self, *exc: object) -> None:
        self._cache.release(self._path, self._fd)
