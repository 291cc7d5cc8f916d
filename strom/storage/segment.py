"""One log segment: a ``.log`` file of back-to-back record batches plus its indexes.

Owns: the files ``{base_offset:020d}.log``, ``.index``, ``.timeindex`` and (only
once an abort marker lands in the segment) ``.txnindex`` of one segment; appending
already-patched batch bytes at the end of the log file; adding sparse index entries
every ``index_interval_bytes``; finding batches by offset and by timestamp through
the indexes (binary search, then a short walk over batch headers); rebuilding the
offset and time indexes and, when asked to verify, cutting a torn or corrupt tail
off the log file; cutting the log file short (truncation, recovery, re-creation at
the same base) without ever shrinking a file a fetch response still holds a mapped
view of past the cut: such a file keeps its length and the kept prefix goes to a new
file renamed over it (``cut_log_file``); and keeping its transaction index
(txn_index.py) in step with its files: truncated with it, fsynced, retired and
deleted with it.
Does not own: assigning offsets, rolling, flush policy, log start offset, what goes
into the transaction index or rebuilding it after a crash (all in partition_log.py
and producer_state.py), or which fds stay open (handles.py). Batches are not
decoded here, only their 61-byte headers are read, except the one batch a timestamp
lookup lands on: its records' offsets and timestamps answer per record, as Kafka does.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import time
from pathlib import Path

from strom.protocol import records
from strom.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    CorruptBatchError,
)
from strom.storage.durable import unlink_all, write_atomically
from strom.storage.handles import FileHandleCache
from strom.storage.index import OffsetIndex, TimeIndex
from strom.storage.txn_index import TXNINDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"  # retired files awaiting file.delete.delay.ms
CLEANED_SUFFIX = ".cleaned"  # files the cleaner is writing (discarded after a crash)
SWAP_SUFFIX = ".swap"  # cleaned files committed to replace old segments
_RECOVERY_CHUNK = 8 << 20
_SCAN_CHUNK = 64 << 10
# Reads of at least this many bytes (asked for and there to read) come from a memory
# mapping of the log file, not pread: the response is sent straight from the page
# cache, with no copy into fresh memory first (which costs page faults as well).
MAPPED_READ_BYTES = 1 << 20


def segment_file(directory: Path | str, base_offset: int, suffix: str) -> str:
    return os.path.join(directory, f"{base_offset:020d}{suffix}")


def cut_log_file(handles: FileHandleCache, path: str, fd: int, size: int) -> None:
    """Cut the log file ``path``, leased as ``fd``, to ``size`` bytes.

    In place when no live view of a mapping of the file reaches past ``size``
    (handles.py). Otherwise a fetch response still holds such a view and touching a
    page past the file's end would kill the broker: the file keeps its length (the
    response sends the bytes it had, as Kafka's would) and the kept prefix is written
    to a new file, fsynced and renamed over ``path`` (the directory fsynced too), and
    the fd cache forgets the old file, which goes when its last view does. Either way
    ``path`` then names a file of ``size`` bytes; the caller fsyncs it as before.
    """
    if handles.cut(path, fd, size):
        return
    log.info("%s: a response still reads past byte %d: cut into a new file", path, size)
    if size:
        prefix = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        try:
            with memoryview(prefix) as view:  # straight from the page cache, no copy
                write_atomically(path, view)
        finally:
            prefix.close()
    else:
        write_atomically(path, b"")
    handles.forget(path)


_WARM_CHUNK = 1 << 20
_NOWAIT_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL)  # a file system without RWF_NOWAIT
_PAGE = mmap.PAGESIZE


class ColdRead(Exception):
    """A read told not to wait on the disk met bytes of ``path`` that are not in the page
    cache. ``warm`` (on a thread: it waits on the disk) brings ``[start, start+length)``
    in; the read then goes again and finds them there."""

    def __init__(self, handles: FileHandleCache, path: str, start: int, length: int) -> None:
        super().__init__(f"{path}: bytes {start}..{start + length} are not in the page cache")
        self.handles = handles
        self.path = path
        self.start = start
        self.length = length

    def warm(self) -> None:
        try:
            with self.handles.lease(self.path) as fd:
                os.posix_fadvise(fd, self.start, self.length, os.POSIX_FADV_WILLNEED)
                position, end = self.start, self.start + self.length
                while position < end:
                    read = len(os.pread(fd, min(_WARM_CHUNK, end - position), position))
                    if read == 0:
                        break
                    position += read
        except FileNotFoundError:
            pass  # deleted since (retention, compaction): the read again will say so


def cached_pread(fd: int, length: int, position: int) -> memoryview | None:
    """``length`` bytes at ``position`` if the page cache holds them all; None when
    reading them would wait on the disk (RWF_NOWAIT)."""
    buffer = bytearray(length)
    try:
        read = os.preadv(fd, [buffer], position, os.RWF_NOWAIT)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno not in _NOWAIT_UNSUPPORTED:
            raise
        return memoryview(os.pread(fd, length, position))  # cannot tell: read
    if read < length:
        return None
    return memoryview(buffer)


def _cached(fd: int, start: int, end: int) -> bool:
    """Whether the first and the last page of [start, end) are in the page cache: the
    pages of a log file are written and read ahead in order, so those two stand for
    the range (one that fails to warm is found cold again on the next read)."""
    probe = bytearray(1)
    try:
        for position in {start, max(start, end - 1) // _PAGE * _PAGE}:
            if os.preadv(fd, [probe], position, os.RWF_NOWAIT) < 1:
                return False
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno not in _NOWAIT_UNSUPPORTED:
            raise
    return True


class _Window:
    """A pread window over a file: few syscalls for a walk over nearby headers. Over
    a mapped file (``mapped`` covers [0, end)) it never reads: the map is the window.
    Given ``cold_file`` (the file's fd cache and path) it reads only what the page cache
    holds, raising ColdRead for the bytes it wanted instead of waiting on the disk."""

    __slots__ = ("fd", "end", "chunk", "start", "data", "cold_file")

    def __init__(
        self,
        fd: int,
        end: int,
        chunk: int,
        mapped: memoryview | None = None,
        cold_file: tuple[FileHandleCache, str] | None = None,
    ) -> None:
        self.fd = fd
        self.end = end  # file size: nothing at or past it is read
        self.chunk = chunk
        self.start = 0
        self.data: bytes | memoryview = b"" if mapped is None else mapped
        self.cold_file = cold_file

    def fetch(self, position: int, length: int) -> int:
        """Make ``[position, position+length)`` available; returns its index in data."""
        start = self.start
        if start <= position and position + length <= start + len(self.data):
            return position - start
        want = min(max(length, self.chunk), self.end - position)
        if want <= 0:
            self.data = b""
        elif self.cold_file is None:
            self.data = os.pread(self.fd, want, position)
        else:
            data = cached_pread(self.fd, want, position)
            if data is None:
                raise ColdRead(*self.cold_file, position, want)
            self.data = data
        self.start = position
        return 0

    def header(self, position: int) -> BatchHeader | None:
        """Header of the batch at ``position``; None if fewer than 61 bytes remain."""
        if position + HEADER_SIZE > self.end:
            return None
        at = self.fetch(position, HEADER_SIZE)
        if len(self.data) - at < HEADER_SIZE:
            return None
        return records.parse_header(self.data, at, position)


def _record_times(fd: int, position: int, header: BatchHeader) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of the batch at ``position``: with
    LogAppendTime every record has the batch's max timestamp."""
    data = os.pread(fd, header.size, position)
    batch = records.read_header(data, 0)
    stamps = records.record_stamps(data, batch)
    if batch.attributes & records.ATTR_TIMESTAMP_TYPE:
        return [(batch.base_offset + delta, batch.max_timestamp) for delta, _, _ in stamps]
    return [(batch.base_offset + delta, ts) for delta, ts, _ in stamps]


class LogSegment:
    """One segment. Indexes of inactive segments load lazily on first use."""

    __slots__ = (
        "base_offset",
        "log_path",
        "index_path",
        "timeindex_path",
        "handles",
        "size",
        "next_offset",
        "offset_index",
        "time_index",
        "bytes_since_index",
        "first_append_ms",
        "_max_ts",
        "_offset_of_max_ts",
        "indexes_unsynced",
        "txn_index",
    )

    def __init__(
        self,
        directory: Path | str,
        base_offset: int,
        handles: FileHandleCache,
        size: int,
        *,
        txn_index_exists: bool | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.log_path = segment_file(directory, base_offset, LOG_SUFFIX)
        self.index_path = segment_file(directory, base_offset, INDEX_SUFFIX)
        self.timeindex_path = segment_file(directory, base_offset, TIMEINDEX_SUFFIX)
        self.handles = handles
        self.size = size
        self.next_offset: int | None = None  # known once the segment was scanned
        self.offset_index: OffsetIndex | None = None
        self.time_index: TimeIndex | None = None
        self.bytes_since_index = 0
        self.first_append_ms: int | None = None
        self._max_ts: int | None = None
        self._offset_of_max_ts = -1
        self.indexes_unsynced = False  # index entries written but not yet fsynced
        # The aborted transactions whose markers are here; ``txn_index_exists`` None
        # means its file's presence is checked on first use.
        self.txn_index = TransactionIndex(
            segment_file(directory, base_offset, TXNINDEX_SUFFIX), handles, txn_index_exists
        )

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size})"

    # -- creation and loading -------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path | str, base_offset: int, handles: FileHandleCache
    ) -> LogSegment:
        """A new empty segment (its three files created, or emptied if present)."""
        segment = cls(directory, base_offset, handles, 0, txn_index_exists=True)
        segment.txn_index.reset()  # a leftover of an earlier segment at this base
        try:
            with handles.lease(segment.log_path) as fd:  # a leftover too: maybe mapped
                cut_log_file(handles, segment.log_path, fd, 0)
        except FileNotFoundError:
            pass
        for path in (segment.log_path, segment.index_path, segment.timeindex_path):
            handles.forget(path)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        segment.offset_index = OffsetIndex(segment.index_path)
        segment.time_index = TimeIndex(segment.timeindex_path)
        segment.next_offset = base_offset
        segment._max_ts = -1
        return segment

    def indexes_look_valid(self) -> bool:
        """Cheap check from file sizes alone: both index files exist with whole entries."""
        for path, entry in ((self.index_path, 8), (self.timeindex_path, 12)):
            try:
                if os.stat(path).st_size % entry:
                    return False
            except FileNotFoundError:
                return False
        return True

    def ensure_indexes(self, index_interval: int) -> None:
        """Load both indexes from their files, rebuilding them if unusable."""
        if self.offset_index is not None and self.time_index is not None:
            return
        offset_index = OffsetIndex.load(self.index_path, self.handles)
        time_index = TimeIndex.load(self.timeindex_path, self.handles)
        if (
            offset_index is None
            or time_index is None
            or (len(offset_index) and not 0 <= offset_index.pos[-1] < self.size)
            or (len(offset_index) and offset_index.rel[-1] < 0)
            or (len(time_index) and time_index.rel[-1] < 0)
        ):
            log.warning("rebuilding unusable indexes of %s", self.log_path)
            self.recover(index_interval, verify=False)
            return
        self.offset_index = offset_index
        self.time_index = time_index
        last = time_index.last()
        if self._max_ts is None:
            if last is None:
                self._max_ts, self._offset_of_max_ts = -1, -1
            else:
                self._max_ts, self._offset_of_max_ts = last[0], self.base_offset + last[1]
        self.bytes_since_index = (
            self.size - offset_index.last_position() if len(offset_index) else self.size
        )

    def load_tail(self, index_interval: int) -> None:
        """For the active segment of a cleanly shut down log: learn its next offset and
        max timestamp by walking the headers after the last offset index entry."""
        self.ensure_indexes(index_interval)
        if self.next_offset is not None:
            return
        assert self.offset_index is not None
        next_offset = self.base_offset
        max_ts, offset_of_max = (
            self._max_ts if self._max_ts is not None else -1,
            self._offset_of_max_ts,
        )
        position = self.offset_index.last_position()
        try:
            with self.handles.lease(self.log_path) as fd:
                window = _Window(fd, self.size, _SCAN_CHUNK)
                while position < self.size:
                    header = window.header(position)
                    if header is None or position + header.size > self.size:
                        raise CorruptBatchError(f"torn batch at {position}")
                    if header.max_timestamp > max_ts:
                        max_ts, offset_of_max = header.max_timestamp, header.last_offset
                    next_offset = header.next_offset
                    position += header.size
        except CorruptBatchError as exc:
            log.warning("%s: %s despite a clean shutdown; recovering it", self.log_path, exc)
            self.recover(index_interval, verify=True)
            return
        self.next_offset = next_offset
        self._max_ts, self._offset_of_max_ts = max_ts, offset_of_max

    def recover(self, index_interval: int, *, verify: bool) -> int:
        """Rebuild both indexes by walking every batch; returns bytes cut off the log.

        Framing, magic and offsets are always checked, the CRC32C too with ``verify``;
        the file is truncated at the first bad or torn batch.
        """
        self.offset_index = OffsetIndex(self.index_path)
        self.time_index = TimeIndex(self.timeindex_path)
        self._max_ts, self._offset_of_max_ts = -1, -1
        self.bytes_since_index = 0
        next_offset = self.base_offset
        position = 0
        reason = ""
        with self.handles.lease(self.log_path) as fd:
            file_size = os.fstat(fd).st_size
            window = _Window(fd, file_size, _RECOVERY_CHUNK)
            while position < file_size:
                try:
                    header = window.header(position)
                except CorruptBatchError as exc:
                    reason = str(exc)
                    break
                if header is None:
                    reason = "torn batch header"
                    break
                if position + header.size > file_size:
                    reason = "torn batch"
                    break
                if (
                    header.base_offset < next_offset
                    or header.last_offset_delta < 0
                    or (header.last_offset - self.base_offset > INT32_MAX)
                ):
                    reason = f"batch offset {header.base_offset} out of sequence"
                    break
                if verify:
                    at = window.fetch(position, header.size)
                    if not records.crc_ok(window.data, records.read_header(window.data, at)):
                        reason = "CRC32C mismatch"
                        break
                self._index_batch(position, header, index_interval)
                next_offset = header.next_offset
                position += header.size
            cut = file_size - position
            if cut:
                cut_log_file(self.handles, self.log_path, fd, position)
                log.warning(
                    "truncated %d bytes off %s at position %d (%s)",
                    cut,
                    self.log_path,
                    position,
                    reason,
                )
        self.size = position
        self.next_offset = next_offset
        self.offset_index.rewrite(self.handles)
        self.time_index.rewrite(self.handles)
        self.indexes_unsynced = True
        return cut

    def _index_batch(self, position: int, header: BatchHeader, index_interval: int) -> None:
        assert self.offset_index is not None and self.time_index is not None
        assert self._max_ts is not None  # known once the indexes are
        if header.max_timestamp > self._max_ts:
            self._max_ts = header.max_timestamp
            self._offset_of_max_ts = header.last_offset
        if self.bytes_since_index >= index_interval:
            self.offset_index.append(header.base_offset - self.base_offset, position)
            self.time_index.maybe_append(
                self._max_ts,
                self._offset_of_max_ts - self.base_offset,
            )
            self.bytes_since_index = 0
        self.bytes_since_index += header.size

    # -- appends -------------------------------------------------------------

    def append(
        self,
        buf: bytearray | memoryview,
        headers: list[BatchHeader],
        index_interval: int,
        now_ms: int,
    ) -> None:
        """Write ``buf`` (patched batches, headers positioned within it) at the end."""
        position = self.size
        view = memoryview(buf)
        at = position
        with self.handles.lease(self.log_path) as fd:
            while view:
                written = os.pwrite(fd, view, at)
                view = view[written:]
                at += written
        if self.first_append_ms is None:
            self.first_append_ms = now_ms
        # Per-batch index bookkeeping, inlined: this runs once per produced batch.
        offset_index, time_index = self.offset_index, self.time_index
        assert offset_index is not None and time_index is not None
        base = self.base_offset
        max_ts, offset_of_max = self._max_ts, self._offset_of_max_ts
        assert max_ts is not None  # known once the indexes are
        since = self.bytes_since_index
        for header in headers:
            if header.max_timestamp > max_ts:
                max_ts = header.max_timestamp
                offset_of_max = header.base_offset + header.last_offset_delta
            if since >= index_interval:
                offset_index.append(header.base_offset - base, position + header.position)
                time_index.maybe_append(max_ts, offset_of_max - base)
                since = 0
            since += header.size
        self._max_ts, self._offset_of_max_ts = max_ts, offset_of_max
        self.bytes_since_index = since
        self.size = position + len(buf)
        self.next_offset = headers[-1].next_offset

    def first_append_time(self, now_ms: int) -> int | None:
        """When this segment got its first batch (for segment.ms); None if empty.

        For a segment reopened after a restart it is the first batch's max timestamp
        (Kafka's rule) unless that is not a plausible past wall-clock time.
        """
        if self.first_append_ms is None and self.size:
            with self.handles.lease(self.log_path) as fd:
                header = _Window(fd, self.size, HEADER_SIZE).header(0)
            ts = header.max_timestamp if header is not None else -1
            self.first_append_ms = ts if 0 < ts <= now_ms else now_ms
        return self.first_append_ms

    def seal(self) -> None:
        """Make the time index's last entry the segment's max timestamp (on roll/close)."""
        if self.time_index is not None and self._max_ts is not None and self._max_ts >= 0:
            self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts - self.base_offset)

    # -- reads ----------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        upper_bound: int | None,
        min_one: bool,
        index_interval: int,
        wait_for_disk: bool = True,
    ) -> tuple[bytes | memoryview, bool]:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (but the
        first batch regardless when ``min_one``), none with base offset >= upper_bound.

        Returns (bytes, done): ``done`` is False when the segment's end was reached
        without hitting a limit, so the caller may go on with the next segment. With
        ``wait_for_disk`` False, bytes not in the page cache raise ColdRead instead
        of being waited for.
        """
        self.ensure_indexes(index_interval)
        assert self.offset_index is not None
        size = self.size
        position = self.offset_index.lookup(offset - self.base_offset)
        if position >= size:
            return b"", False
        with self.handles.lease(self.log_path) as fd:
            # Only when there is that much to send: a consumer at the tail of an active
            # segment reads a little at a time, and the file grows between its reads.
            large = min(max_bytes, size - position) >= MAPPED_READ_BYTES
            mapped = self.handles.mapped(self.log_path, fd, size) if large else None
            chunk = max(max_bytes, 0) + index_interval + 16384
            if not wait_for_disk and mapped is not None:
                length = min(chunk, size - position)
                if not _cached(fd, position, position + length):
                    # the walk and the send would fault the pages in
                    raise ColdRead(self.handles, self.log_path, position, length)
            cold_file = None
            if not wait_for_disk and mapped is None:
                cold_file = (self.handles, self.log_path)
            window = _Window(fd, size, chunk, mapped, cold_file)
            while True:
                header = window.header(position)
                if header is None:
                    return b"", False
                if header.base_offset + header.last_offset_delta >= offset:
                    break
                position += header.size
            start = position
            if upper_bound is not None and header.base_offset >= upper_bound:
                return b"", True
            if header.size > max_bytes and not min_one:
                return b"", True
            limit = start + max_bytes
            end = start + header.size
            done = False
            if end < size:
                # Jump to the furthest indexed batch that still fits, then walk.
                bound = INT32_MAX if upper_bound is None else upper_bound - self.base_offset
                jump = self.offset_index.last_entry_at_or_below(limit, bound)
                if jump > end:
                    end = jump
                while end < size:
                    header = window.header(end)
                    if header is None:
                        break
                    if end + header.size > limit or (
                        upper_bound is not None and header.base_offset >= upper_bound
                    ):
                        done = True
                        break
                    end += header.size
            at = start - window.start
            data = window.data
            if 0 <= at and end - window.start <= len(data):
                if at == 0 and end - start == len(data):
                    return data, done
                return memoryview(data)[at : at + end - start], done  # a view, not a copy
            if wait_for_disk:
                return os.pread(fd, end - start, start), done
            cached = cached_pread(fd, end - start, start)
            if cached is None:
                raise ColdRead(self.handles, self.log_path, start, end - start)
            return cached, done

    def max_timestamp(self, index_interval: int) -> tuple[int, int]:
        """(max timestamp, offset of the batch's last record holding it); (-1, -1) if none."""
        if self._max_ts is None:
            last = TimeIndex.read_last(self.timeindex_path, self.handles)
            if last is not None:
                return last[0], self.base_offset + last[1]
            self.ensure_indexes(index_interval)
        max_ts = self._max_ts
        assert max_ts is not None  # ensure_indexes sets it
        return (max_ts, self._offset_of_max_ts) if max_ts >= 0 else (-1, -1)

    def offset_for_timestamp(
        self, timestamp: int, min_offset: int, index_interval: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``min_offset`` whose
        timestamp is >= ``timestamp``; None if this segment has none. The time index
        leads to a batch, headers are walked to the first batch whose max timestamp is
        >= the target, and only that batch's records are decoded (and the next one's
        if none of them qualifies)."""
        if self.max_timestamp(index_interval)[0] < timestamp:
            return None
        self.ensure_indexes(index_interval)
        assert self.offset_index is not None and self.time_index is not None
        floor = self.time_index.floor_below(timestamp)
        start_offset = self.base_offset + floor if floor is not None else self.base_offset
        start_offset = max(start_offset, min_offset)
        position = self.offset_index.lookup(start_offset - self.base_offset)
        with self.handles.lease(self.log_path) as fd:
            window = _Window(fd, self.size, _SCAN_CHUNK)
            while position < self.size:
                header = window.header(position)
                if header is None:
                    break
                if header.max_timestamp >= timestamp and header.last_offset >= min_offset:
                    for offset, ts in _record_times(fd, position, header):
                        if ts >= timestamp and offset >= min_offset:
                            return offset, ts
                position += header.size
        return None

    def first_offset_of_timestamp(self, offset: int, timestamp: int, index_interval: int) -> int:
        """The offset of the first record holding ``timestamp`` in the first batch from
        the one holding ``offset`` whose max timestamp it is (Kafka's
        ``offsetOfMaxTimestamp``); ``offset`` if no such batch is found."""
        position = self.position_at_or_below(offset, index_interval)
        with self.handles.lease(self.log_path) as fd:
            window = _Window(fd, self.size, _SCAN_CHUNK)
            while position < self.size:
                header = window.header(position)
                if header is None:
                    break
                if header.last_offset >= offset and header.max_timestamp == timestamp:
                    for record_offset, ts in _record_times(fd, position, header):
                        if ts == timestamp:
                            return record_offset
                    break
                position += header.size
        return offset

    def position_at_or_below(self, offset: int, index_interval: int) -> int:
        """File position of an indexed batch at or before the one holding ``offset`` (a
        walk over headers from there finds it)."""
        self.ensure_indexes(index_interval)
        assert self.offset_index is not None
        return self.offset_index.lookup(max(offset - self.base_offset, 0))

    def epoch_starts(self) -> list[tuple[int, int]]:
        """(partition leader epoch, base offset) of each batch whose epoch differs from
        the batch before it in this segment: the leader epoch cache's raw material."""
        starts: list[tuple[int, int]] = []
        last = None
        position = 0
        with self.handles.lease(self.log_path) as fd:
            window = _Window(fd, self.size, _SCAN_CHUNK)
            while position < self.size:
                header = window.header(position)
                if header is None:
                    break
                if header.partition_leader_epoch != last:
                    last = header.partition_leader_epoch
                    starts.append((last, header.base_offset))
                position += header.size
        return starts

    # -- truncation ------------------------------------------------------------

    def truncate_to(self, offset: int, index_interval: int) -> int:
        """Cut the log file before the batch holding ``offset`` (that batch goes too),
        rebuild both indexes, fsync; returns the segment's new next offset."""
        self.ensure_indexes(index_interval)
        assert self.offset_index is not None
        position = self.offset_index.lookup(max(offset - self.base_offset, 0))
        with self.handles.lease(self.log_path) as fd:
            window = _Window(fd, self.size, _SCAN_CHUNK)
            while position < self.size:
                header = window.header(position)
                if header is None or header.last_offset >= offset:
                    break
                position += header.size
            cut_log_file(self.handles, self.log_path, fd, position)
        self.size = position
        self.first_append_ms = None
        self.recover(index_interval, verify=False)
        assert self.next_offset is not None
        self.txn_index.truncate_to(self.next_offset)
        self.flush()
        return self.next_offset

    # -- durability and lifecycle --------------------------------------------

    def write_indexes(self) -> None:
        for index in (self.offset_index, self.time_index):
            if index is not None and index.written != len(index):
                index.write_pending(self.handles)
                self.indexes_unsynced = True

    def flush(self) -> None:
        """Write pending index entries and fsync the log and index files (the
        transaction index too when it was written since)."""
        self.write_indexes()
        for path in (self.log_path, self.index_path, self.timeindex_path):
            with self.handles.lease(path) as fd:
                os.fsync(fd)
        self.indexes_unsynced = False
        self.txn_index.sync()

    def files_to_sync(self) -> list[str]:
        """Write pending index entries; the files a flush must fsync now.

        The log file always; the index files only when they hold entries written
        since the last call, so a flush after every small append costs one fsync.
        """
        pending = any(
            index is not None and index.written != len(index)
            for index in (self.offset_index, self.time_index)
        )
        if pending:
            self.write_indexes()
        txn = self.txn_index.files_to_sync()
        if not self.indexes_unsynced:
            return [self.log_path, *txn]
        self.indexes_unsynced = False
        return [self.log_path, self.index_path, self.timeindex_path, *txn]

    def drop_indexes(self) -> None:
        """Free the in-memory indexes of an inactive segment (reloaded on demand)."""
        self.write_indexes()
        self.offset_index = None
        self.time_index = None

    def close(self) -> None:
        self.write_indexes()
        for path in (self.log_path, self.index_path, self.timeindex_path):
            self.handles.forget(path)
        self.txn_index.forget()

    def delete(self) -> None:
        paths = (self.log_path, self.index_path, self.timeindex_path)
        for path in paths:
            self.handles.forget(path)
        unlink_all(paths)
        self.txn_index.delete()

    def retire(self) -> list[str]:
        """Rename the segment's files to ``*.deleted`` (a reader holding an fd keeps
        reading); returns the new paths for a delayed unlink. Start-up removes leftovers."""
        retired = []
        paths = [self.log_path, self.index_path, self.timeindex_path]
        if self.txn_index.exists:
            paths.append(self.txn_index.path)
        for path in paths:
            self.handles.forget(path)
            target = path + DELETED_SUFFIX
            if os.path.exists(target):
                # Still waiting from an earlier retirement (the cleaner replaces the same
                # base again): a rename over it would free that file inside the rename.
                target = f"{path}.{time.monotonic_ns()}{DELETED_SUFFIX}"
            try:
                os.rename(path, target)
            except FileNotFoundError:
                continue
            retired.append(target)
        self.txn_index.detach()
        return retired

    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return 0
