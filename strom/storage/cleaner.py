"""Log compaction: the cleaner keeps the latest record of every key in closed segments.

Owns: choosing which compacted log to clean (``cleanup.policy`` with ``compact``;
``min.cleanable.dirty.ratio``, ``min.compaction.lag.ms``, ``max.compaction.lag.ms``),
the cleaner-offset checkpoint (Kafka's ``cleaner-offset-checkpoint``: per partition,
the first offset not yet cleaned), building cleaned segments, and swapping them in.

A cleaning of one log: the range is every closed segment from the log start up to
the first segment holding a record younger than min.compaction.lag.ms or lying at
or above the first unstable offset (an open transaction, or one whose marker the
high watermark has not passed: never cleaned); the active segment never. An offset
map (key -> latest offset) is built over the dirty part of the range (from the
checkpoint on), leaving out aborted transactional batches; then every batch of the
range is rewritten, keeping a record when no later record of its key exists, and
dropping tombstones (null values) whose batch is older than delete.retention.ms,
keyless records, and whole batches of aborted transactions (a transactional batch
of a producer within one of its aborted ranges, from the transaction indexes: the
owner hands them to the worker). Kept records are copied byte for byte into a batch
with the same base offset, last offset delta, timestamps, producer id/epoch/sequence
and codec (compressed batches are decompressed and recompressed with their own
codec), so offsets never change and consumers see gaps. Committed transactional
batches are cleaned by key like any other. Batches left untouched: control batches
(transaction markers are always kept), and the last data batch of each producer id in
the range (whole, even when aborted: the transaction index still tells read_committed
consumers to skip it), so producer state rebuilt from the log keeps each producer's
last sequence. Each
cleaned segment keeps the transaction index entries of the segments it replaces
(written beside it as ``.txnindex.cleaned``). Runs of small segments are merged into
one while their sizes add up to no more than segment.bytes.

Concurrency: ``maintain`` (called periodically by the log manager on the owner's
thread, the broker's event loop) starts a cleaning in a worker process, which only
reads the closed segments' files and writes ``*.cleaned`` files. When it is done, the
swap (swap.py: crash-safe) goes in three phases so that the owner never waits on a
disk: the manifest and its fsyncs run on a file thread while the old segments stay
pinned in the PartitionLog (retention may move the log start offset past them but
deletes them only later); then, on the owner's thread and in one step, the segment
list is switched and the files renamed (no fsync); then the directory fsync, the
manifest's removal and the checkpoint run on the file thread again. Appends only
touch the active segment, so none is lost. A process, not a thread, cleans: a thread
decoding records holds the GIL so much that the event loop's produce latency went
from 13 ms to 500 ms at p99 (bench/cleaner.py); the process runs at nice 10 and
dies with the broker. Each cleaning starts at idle priority (SCHED_IDLE: only spare
CPU) and is moved back to the normal class once it has waited STARVED_AFTER_S for a
CPU: on a machine that stays busy an idle-priority cleaning never ends (where the
move back is not permitted, cleanings run at nice 10 only). The swap's fsyncs on
the loop had cost 10-14 ms per cleaned run (more while the disk was busy).

Differences from Kafka: tombstone expiry is judged by the batch's max timestamp
(not by when the tombstone was first cleaned); empty batches are never written (a
producer's last batch is kept whole instead); transaction markers are kept forever
(Kafka removes a marker after delete.retention.ms once its transaction's data is
gone), and so are their transaction index entries.
Does not own: the swap protocol (swap.py), segment rolling (partition_log.py).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
import struct
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from strom.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    index_latest_offsets,
    parse_header,
    rebuild_batch,
    records_body,
    scan_records,
)
from strom.storage import swap
from strom.storage.checkpoint import read_checkpoint, write_checkpoint
from strom.storage.log_config import LogConfig
from strom.storage.partition_log import PartitionLog
from strom.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    LogSegment,
    segment_file,
)
from strom.storage.txn_index import TXNINDEX_SUFFIX, AbortedTxn, encode_entries

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
_READ_CHUNK = 1 << 20  # also the throttle's step
UNLIMITED_IO = 1.7976931348623157e308  # log.cleaner.io.max.bytes.per.second default
_THROTTLE_STEP_S = 0.1
# How long shutdown waits for an aborted cleaning to stop before it kills the worker:
# at SCHED_IDLE on a busy machine the worker may get no CPU to see the flag for minutes.
ABORT_WAIT_S = 2.0
_WRITE_BUFFER = 4 << 20
_OFFSET_ENTRY = struct.Struct(">ii")
INT64_MAX = 2**63 - 1
_TIME_ENTRY = struct.Struct(">qi")


class CleaningAborted(Exception):
    """The cleaner is shutting down (or the log went away) mid-cleaning."""


@dataclass(frozen=True)
class CleaningSpec:
    """What the worker process needs for one cleaning (plain, picklable data)."""

    directory: str
    segments: tuple[tuple[int, str, int], ...]  # (base offset, .log path, size), oldest first
    end: int  # base offset of the first segment after the range
    first_dirty: int
    config: LogConfig
    now_ms: int
    max_map_entries: int
    io_max_bytes_per_second: float = UNLIMITED_IO
    # Aborted transactions with data or markers in the range (from the transaction
    # indexes; a marker may lie past the range).
    aborted: tuple[AbortedTxn, ...] = ()


@dataclass
class CleaningJob:
    """A snapshot, taken on the owner's thread, of what one cleaning works on."""

    log: PartitionLog
    segments: list[LogSegment]  # the cleanable range, oldest first, all closed
    end: int
    first_dirty: int
    config: LogConfig
    now_ms: int
    dirty_ratio: float
    aborted: list[AbortedTxn] = dataclasses.field(default_factory=list)

    def spec(
        self, max_map_entries: int, io_max_bytes_per_second: float = UNLIMITED_IO
    ) -> CleaningSpec:
        return CleaningSpec(
            str(self.log.directory),
            tuple((s.base_offset, s.log_path, s.size) for s in self.segments),
            self.end,
            self.first_dirty,
            self.config,
            self.now_ms,
            max_map_entries,
            io_max_bytes_per_second,
            tuple(self.aborted),
        )


@dataclass
class CleanedSegment:
    old: list[int]  # indexes into the job's segments
    base: int
    end: int  # base offset of the segment after the old ones
    size: int


@dataclass
class CleaningStats:
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    segments_before: int = 0
    segments_after: int = 0


@dataclass
class CleaningOutput:
    cleaned: list[CleanedSegment]
    map_end: int  # the next cleaning's first dirty offset
    stats: CleaningStats


_Result = TypeVar("_Result")


class _Abort(Protocol):
    def is_set(self) -> bool: ...


class _AbortSwitch(_Abort, Protocol):
    """The scheduler's side of the abort flag (a threading or multiprocessing Event)."""

    def set(self) -> None: ...

    def clear(self) -> None: ...


class _Throttle:
    """Keeps a cleaning's I/O (bytes read and written) at or under ``rate`` bytes a
    second, as Kafka's log.cleaner.io.max.bytes.per.second does, by sleeping whenever
    it runs ahead. The cleaner's reads compete with the broker for memory bandwidth
    and CPU even at idle priority; this is the operator's knob to trade cleaning
    speed for produce latency."""

    def __init__(self, rate: float, abort: _Abort) -> None:
        self.rate = rate
        self.abort = abort
        self.started = time.monotonic()
        self.done = 0

    def account(self, nbytes: int) -> None:
        if self.rate >= UNLIMITED_IO:
            return
        self.done += nbytes
        while (ahead := self.started + self.done / self.rate - time.monotonic()) > 0.001:
            if self.abort.is_set():
                raise CleaningAborted
            time.sleep(min(ahead, _THROTTLE_STEP_S))


def _batches(path: str, size: int, throttle: _Throttle) -> Iterator[tuple[bytes, BatchHeader]]:
    """(buffer, header) for every whole batch in the first ``size`` bytes of a file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        offset = 0
        while offset + HEADER_SIZE <= size:
            chunk = min(_READ_CHUNK, size - offset)
            throttle.account(chunk)
            data = os.pread(fd, chunk, offset)
            n = len(data)
            pos = 0
            while pos + HEADER_SIZE <= n:
                header = parse_header(data, pos)
                if pos + header.size > n:
                    break
                yield data, header
                pos += header.size
            if pos == 0:
                if n < HEADER_SIZE:
                    return
                header = parse_header(data, 0)  # one batch larger than the chunk
                if offset + header.size > size:
                    return
                data = os.pread(fd, header.size, offset)
                yield data, parse_header(data, 0)
                pos = header.size
            offset += pos
    finally:
        os.close(fd)


class _SegmentWriter:
    """Writes one cleaned segment (``*.cleaned`` files) with its sparse indexes."""

    def __init__(self, directory: str, base: int, index_interval: int) -> None:
        self.base = base
        self.paths = [
            segment_file(directory, base, s) + CLEANED_SUFFIX
            for s in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)
        ]
        self.file = open(self.paths[0], "wb", buffering=_WRITE_BUFFER)  # noqa: SIM115
        self.interval = index_interval
        self.size = 0
        self.since_index = 0
        self.max_ts = -1
        self.offset_of_max = -1
        self.last_time_entry = -1
        self.offset_entries = bytearray()
        self.time_entries = bytearray()

    def write(self, data: bytes | memoryview, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_ts:
            self.max_ts = header.max_timestamp
            self.offset_of_max = header.base_offset + header.last_offset_delta
        if self.since_index >= self.interval:
            self.offset_entries += _OFFSET_ENTRY.pack(header.base_offset - self.base, self.size)
            self._time_entry()
            self.since_index = 0
        self.file.write(data)
        self.size += len(data)
        self.since_index += len(data)

    def _time_entry(self) -> None:
        if self.max_ts > self.last_time_entry:
            self.time_entries += _TIME_ENTRY.pack(self.max_ts, self.offset_of_max - self.base)
            self.last_time_entry = self.max_ts

    def finish(self, aborted: list[AbortedTxn]) -> None:
        """Complete the files; ``aborted`` are the transaction index entries of the
        segments this one replaces (no .txnindex is written when there are none)."""
        self._time_entry()  # sealed: the last entry is the segment's max timestamp
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        files: list[tuple[str, bytes | bytearray]] = [
            (self.paths[1], self.offset_entries),
            (self.paths[2], self.time_entries),
        ]
        if aborted:
            files.append((self.paths[3], encode_entries(aborted)))
        for path, data in files:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

    def discard(self) -> None:
        if not self.file.closed:
            self.file.close()
        for path in self.paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def build_cleaned_segments(job: CleaningSpec, abort: _Abort) -> CleaningOutput:
    """The heavy part of a cleaning: reads the old segments' files and writes the
    ``*.cleaned`` ones, nothing else (any thread or process)."""
    started = time.perf_counter()
    stats = CleaningStats(segments_before=len(job.segments))
    max_map_entries = job.max_map_entries
    bases = [base for base, _, _ in job.segments] + [job.end]
    paths = [(path, size) for _, path, size in job.segments]
    throttle = _Throttle(job.io_max_bytes_per_second, abort)
    aborted = _AbortedRanges(job.aborted)
    # 1. The offset map over the dirty part, and each producer's last batch.
    latest: dict[bytes, int] = {}
    tombstones: set[int] = set()
    last_batch: dict[int, int] = {}
    map_end = job.end
    indexed_from = job.end  # base of the first segment whose records are in the map
    for i, (path, size) in enumerate(paths):
        dirty = bases[i + 1] > job.first_dirty
        if dirty:
            indexed_from = min(indexed_from, bases[i])
        for data, header in _batches(path, size, throttle):
            if abort.is_set():
                raise CleaningAborted
            time.sleep(0)  # let the event loop thread take the GIL
            if header.producer_id >= 0 and not header.is_control:
                last_batch[header.producer_id] = header.base_offset  # its last data batch
            if not dirty or header.is_control or aborted.holds(header):
                continue
            index_latest_offsets(
                records_body(data, header),
                header.record_count,
                header.base_offset,
                latest,
                tombstones,
            )
        if dirty and len(latest) >= max_map_entries:
            map_end = bases[i + 1]  # the map is full: clean up to here this time
            break
    survivors = _Survivors(latest, tombstones, indexed_from, map_end)
    # 2. Rewrite the range in groups that each become one segment.
    n = bases.index(map_end)
    config = job.config
    horizon = job.now_ms - config.delete_retention_ms
    directory = job.directory
    cleaned: list[CleanedSegment] = []
    groups: list[list[int]] = []
    size = 0
    for i in range(n):
        if (
            groups
            and (
                size + paths[i][1] > config.segment_bytes
                or bases[i + 1] - 1 - bases[groups[-1][0]] > INT32_MAX
            )
        ) or not groups:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += paths[i][1]
    try:
        for group in groups:
            writer = _SegmentWriter(directory, bases[group[0]], config.index_interval_bytes)
            try:
                for i in group:
                    for data, header in _batches(*paths[i], throttle):
                        if abort.is_set():
                            raise CleaningAborted
                        time.sleep(0)
                        stats.bytes_read += header.size
                        stats.records_read += header.record_count
                        written = writer.size
                        _clean_batch(
                            writer, data, header, survivors, last_batch, aborted, horizon, stats
                        )
                        throttle.account(writer.size - written)
                writer.finish(aborted.markers_in(bases[group[0]], bases[group[-1] + 1]))
            except BaseException:
                writer.discard()
                raise
            cleaned.append(CleanedSegment(group, writer.base, bases[group[-1] + 1], writer.size))
            stats.bytes_written += writer.size
    except BaseException:
        for done in cleaned:
            swap.discard_cleaned(directory, done.base)
        raise
    stats.segments_after = len(cleaned) + len(paths) - n
    stats.seconds = time.perf_counter() - started
    return CleaningOutput(cleaned, map_end, stats)


# -- the worker process ------------------------------------------------------------------

_worker_abort: _Abort | None = None
_worker_idle = False  # its cleanings start at SCHED_IDLE


def _worker_init(abort: _Abort, parent: int) -> None:
    """Runs in the cleaner process: lower priority than the broker (nice 10; each
    cleaning starts at SCHED_IDLE when the broker may raise it out of that class
    again), no Ctrl-C of its own, and (Linux) killed with its parent, so a ``kill -9``
    of the broker leaves no cleaner behind."""
    global _worker_abort, _worker_idle
    _worker_abort = abort
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.nice(10)
    except OSError:
        pass
    _worker_idle = can_leave_idle_priority()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)  # the broker is already gone


def _clean_in_worker(spec: CleaningSpec) -> CleaningOutput:
    assert _worker_abort is not None
    if _worker_idle:  # only spare CPU, until the broker sees it starve (_StarvationWatch)
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            pass
    return build_cleaned_segments(spec, _worker_abort)


def can_leave_idle_priority() -> bool:
    """Whether this process's user may move a thread from SCHED_IDLE back to the normal
    class at nice 10 (root, CAP_SYS_NICE, or an RLIMIT_NICE of 10 or more): tried on a
    thread of its own, since scheduling classes are a thread's. A worker that could
    not be raised never goes idle: at nice 10 it still gets a share of a busy CPU."""
    allowed: list[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except (OSError, AttributeError):
            allowed.append(False)
        else:
            allowed.append(True)

    thread = threading.Thread(target=probe, name="priority-probe")
    thread.start()
    thread.join()
    return allowed == [True]


class _AbortedRanges:
    """The aborted transactions of a cleaning: which batches are their data, and which
    transaction index entries each cleaned segment keeps."""

    def __init__(self, entries: tuple[AbortedTxn, ...]) -> None:
        self.entries = sorted(entries, key=lambda t: t.last_offset)
        self.ranges: dict[int, list[tuple[int, int]]] = {}
        for entry in entries:
            self.ranges.setdefault(entry.producer_id, []).append(
                (entry.first_offset, entry.last_offset)
            )
        for spans in self.ranges.values():
            spans.sort()

    def holds(self, header: BatchHeader) -> bool:
        """Whether a batch is data of an aborted transaction (never a control batch)."""
        if not self.ranges or not header.is_transactional or header.is_control:
            return False
        spans = self.ranges.get(header.producer_id)
        if spans is None:
            return False
        base = header.base_offset
        i = bisect_right(spans, (base, INT64_MAX)) - 1
        return i >= 0 and spans[i][0] <= base <= spans[i][1]

    def markers_in(self, start: int, end: int) -> list[AbortedTxn]:
        """The entries whose markers lie in [start, end): the index of those segments."""
        return [t for t in self.entries if start <= t.last_offset < end]


class _Survivors:
    """Which records of the range survive, from the offset map: in the dirty part
    exactly the map's offsets (sorted, found by bisection, so batches with none or
    all of their records surviving are never decoded); in the clean part the records
    whose key the map does not hold."""

    def __init__(
        self, latest: dict[bytes, int], tombstones: set[int], indexed_from: int, end: int
    ) -> None:
        self.latest = latest
        self.offsets = sorted(latest.values())
        self.tombstones = {o for o in self.offsets if o in tombstones}
        self.indexed_from = indexed_from  # segments from here on went into the map
        self.end = end

    def in_range(self, first: int, last: int) -> list[int]:
        offsets = self.offsets
        return offsets[bisect_left(offsets, first) : bisect_right(offsets, last)]


def _clean_batch(
    writer: _SegmentWriter,
    data: bytes,
    header: BatchHeader,
    survivors: _Survivors,
    last_batch: dict[int, int],
    aborted: _AbortedRanges,
    horizon: int,
    stats: CleaningStats,
) -> None:
    p = header.position
    count = header.record_count
    if header.is_control or (
        header.producer_id >= 0 and last_batch.get(header.producer_id) == header.base_offset
    ):
        writer.write(memoryview(data)[p : p + header.size], header)
        stats.records_kept += count
        return
    if aborted.holds(header):
        return  # an aborted transaction's data: no reader may see it
    base = header.base_offset
    drop_tombstones = header.max_timestamp < horizon
    if base >= survivors.indexed_from:
        keep = survivors.in_range(base, base + header.last_offset_delta)
        if drop_tombstones and survivors.tombstones:
            keep = [o for o in keep if o not in survivors.tombstones]
        if not keep:
            return
        if len(keep) == count:
            writer.write(memoryview(data)[p : p + header.size], header)
            stats.records_kept += count
            return
        wanted = set(keep)
        body = records_body(data, header)
        spans = [
            (start, end)
            for start, end, delta, _key, _tomb in scan_records(body, count)
            if base + delta in wanted
        ]
    else:
        latest = survivors.latest
        body = records_body(data, header)
        spans = [
            (start, end)
            for start, end, _delta, key, tombstone in scan_records(body, count)
            if key is not None and key not in latest and not (tombstone and drop_tombstones)
        ]
    kept_count = len(spans)
    stats.records_kept += kept_count
    if not kept_count:
        return
    if kept_count == count:
        writer.write(memoryview(data)[p : p + header.size], header)
        return
    records = b"".join([body[s:e] for s, e in spans])
    writer.write(rebuild_batch(data, header, records, kept_count, header.codec), header)


@dataclass
class _Swap:
    """A finished cleaning being swapped into its log. Phases: ``committing`` (the
    manifest and renames of swap.commit, on the file thread), then ``finishing``
    (swap.finish and the checkpoint, on the file thread); the switch of the log's
    segment list runs on the owner's thread between the two."""

    job: CleaningJob
    output: CleaningOutput
    runs: list[list[LogSegment]]  # the old segments each cleaned segment replaces
    ranges: list[swap.Range]  # (base, end) of each cleaned segment, as in the manifest
    files: Future[None]
    finishing: bool = False


class _Inline:
    """Runs file work at once in the calling thread (``LogCleaner.clean``)."""

    def submit(self, fn: Callable[..., None], *args: object) -> Future[None]:
        future: Future[None] = Future()
        try:
            fn(*args)
        except BaseException as exc:  # handed to whoever reads the future
            future.set_exception(exc)
        else:
            future.set_result(None)
        return future


# A cleaning at idle priority (SCHED_IDLE: only the CPU time no other thread wants)
# that has waited this long in all for a CPU goes on in the normal class at nice 10,
# where a busy machine still gives it a share (about a tenth of a core against one
# nice-0 process). Kafka's cleaner threads run at normal priority; an idle-priority
# cleaner on a machine that stays busy could wait for ever while the dirty part of
# its logs grows.
STARVED_AFTER_S = 2.0
_WATCH_INTERVAL_S = 0.25


def _pids(executor: ProcessPoolExecutor | None) -> list[int]:
    """The ids of a pool's worker processes (ProcessPoolExecutor has no public way to
    reach them before Python 3.14; a pool shut down has none)."""
    processes = executor._processes if executor is not None else None  # noqa: SLF001
    if not processes:
        return []
    return [p.pid for p in list(processes.values()) if p.pid]


def _run_delay_s(pid: int) -> float | None:
    """How long the main thread of process ``pid`` has waited, runnable, for a CPU in
    all (Linux's /proc/PID/schedstat); None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _to_normal_class(pid: int) -> bool:
    """Process ``pid`` moved out of SCHED_IDLE into the normal class (its nice value
    stays); False where that failed (gone, not permitted, not Linux)."""
    try:
        os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        return False
    return True


class _StarvationWatch:
    """Watches the worker through one cleaning, from a thread of the broker's: once it
    has waited ``starved_after_s`` for a CPU since the cleaning began (its run delay;
    the time elapsed where the kernel does not tell), it is moved out of SCHED_IDLE
    (nice 10 stays). Checked again at every look, since the worker puts itself back at
    SCHED_IDLE as it takes the cleaning up."""

    def __init__(self, pids: Callable[[], list[int]], what: str, starved_after_s: float) -> None:
        self._pids = pids
        self.what = what
        self.starved_after_s = starved_after_s
        self.raised = False
        self._stopped = threading.Event()
        self._started = time.monotonic()
        self._baseline: dict[int, float] = {}
        for pid in pids():
            self._waited(pid)
        threading.Thread(target=self._run, name="cleaner-watch", daemon=True).start()

    def _waited(self, pid: int) -> float:
        delay = _run_delay_s(pid)
        if delay is None:
            return time.monotonic() - self._started
        return delay - self._baseline.setdefault(pid, delay)

    def _run(self) -> None:
        while not self._stopped.wait(_WATCH_INTERVAL_S):
            for pid in self._pids():
                waited = self._waited(pid)
                if waited < self.starved_after_s:
                    continue
                try:
                    if os.sched_getscheduler(pid) != os.SCHED_IDLE:
                        continue
                except (OSError, AttributeError):
                    continue  # gone, or not Linux
                if not _to_normal_class(pid):
                    continue
                if not self.raised:
                    self.raised = True
                    log.info(
                        "%s: the cleaning waited %.1fs for a CPU at idle priority: "
                        "it goes on at nice 10",
                        self.what,
                        waited,
                    )

    def stop(self) -> None:
        self._stopped.set()


class LogCleaner:
    """Cleans the compacted logs of one LogManager, one log at a time, in one worker
    process (started on first use); swaps the results in with the fsyncs on a thread.

    ``wake``, when set, is called (from another thread) as soon as a cleaning or a
    swap's file work is done, so that the owner calls ``maintain`` without waiting
    for its next tick."""

    def __init__(
        self,
        log_dir: Path,
        logs: Callable[[], list[PartitionLog]],
        *,
        enabled: bool = True,
        backoff_ms: int = 15000,
        max_map_entries: int = 5_000_000,
        io_max_bytes_per_second: float = UNLIMITED_IO,
    ) -> None:
        self.log_dir = Path(log_dir)
        self._logs = logs
        self.enabled = enabled
        self.backoff_ms = backoff_ms
        self.max_map_entries = max_map_entries
        self.io_max_bytes_per_second = io_max_bytes_per_second
        self.checkpoints: dict[tuple[str, int], int] = {}
        self.wake: Callable[[], None] | None = None
        self._executor: ProcessPoolExecutor | None = None
        self._files: ThreadPoolExecutor | None = None  # manifest, renames, fsyncs
        self._abort: _AbortSwitch = threading.Event()  # replaced by the worker's shared Event
        self._running: tuple[CleaningJob, Future[CleaningOutput]] | None = None
        self._watch: _StarvationWatch | None = None
        self.starved_after_s = STARVED_AFTER_S
        self.starved_cleanings = 0  # cleanings moved out of SCHED_IDLE
        self._swap: _Swap | None = None
        self._next_check_ms = 0
        self.last_stats: CleaningStats | None = None
        self.cleanings = 0

    def load(self) -> None:
        self.checkpoints = read_checkpoint(self.log_dir / CLEANER_CHECKPOINT)

    def _checkpoint_snapshot(self) -> dict[tuple[str, int], int]:
        live = {(p.topic, p.partition) for p in self._logs()}
        self.checkpoints = {k: v for k, v in self.checkpoints.items() if k in live}
        return dict(self.checkpoints)

    def _notify(self, _future: Future[_Result]) -> None:
        if self.wake is not None:
            self.wake()

    # -- choosing -------------------------------------------------------------------

    def job_for(
        self, plog: PartitionLog, now_ms: int, *, force: bool = False
    ) -> CleaningJob | None:
        """What cleaning ``plog`` now would work on; None if it needs none (or, unless
        ``force``, its dirty ratio is below min.cleanable.dirty.ratio and no record
        has waited max.compaction.lag.ms)."""
        config = plog.config
        if not config.compact or plog.closed:
            return None
        closed = plog.closed_segments()
        interval = config.index_interval_bytes
        start = plog.log_start_offset
        bases = [s.base_offset for s in closed] + [plog.active_segment.base_offset]
        unstable = plog.first_unstable_offset
        cleanable: list[LogSegment] = []
        for i, segment in enumerate(closed):
            if bases[i + 1] <= start:
                continue  # below the log start offset: about to be deleted
            if unstable is not None and bases[i + 1] > unstable:
                break  # holds an undecided (or not yet replicated) transaction
            if (
                config.min_compaction_lag_ms > 0
                and segment.max_timestamp(interval)[0] > now_ms - config.min_compaction_lag_ms
            ):
                break
            cleanable.append(segment)
        if not cleanable:
            return None
        end = bases[bases.index(cleanable[-1].base_offset) + 1]
        first_dirty = max(self.checkpoints.get((plog.topic, plog.partition), 0), start)
        if first_dirty >= end:
            return None
        clean_bytes = dirty_bytes = 0
        first_dirty_segment: LogSegment | None = None
        for i, segment in enumerate(cleanable):
            following = end if i + 1 == len(cleanable) else cleanable[i + 1].base_offset
            if following <= first_dirty:
                clean_bytes += segment.size
            else:
                dirty_bytes += segment.size
                if first_dirty_segment is None:
                    first_dirty_segment = segment
        total = clean_bytes + dirty_bytes
        ratio = dirty_bytes / total if total else 0.0
        overdue = False
        if first_dirty_segment is not None and config.max_compaction_lag_ms < 2**62:
            first = first_dirty_segment.first_append_time(now_ms)
            overdue = first is not None and now_ms - first > config.max_compaction_lag_ms
        if not force and not overdue and ratio < config.min_cleanable_dirty_ratio:
            return None
        aborted = plog.aborted_txns(cleanable[0].base_offset, end)
        return CleaningJob(plog, cleanable, end, first_dirty, config, now_ms, ratio, aborted)

    # -- running ----------------------------------------------------------------------

    def clean(
        self, plog: PartitionLog, now_ms: int | None = None, *, force: bool = True
    ) -> CleaningStats | None:
        """Clean ``plog`` now in the calling thread (tools, tests, benchmarks); None if
        there was nothing to clean."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        job = self.job_for(plog, now_ms, force=force)
        if job is None:
            return None
        spec = job.spec(self.max_map_entries, self.io_max_bytes_per_second)
        output = build_cleaned_segments(spec, threading.Event())
        pending = self._begin_swap(job, output, _Inline())
        while pending is not None:
            pending = self._advance_swap(pending, _Inline())
        return output.stats

    def maintain(self, now_ms: int | None = None) -> None:
        """Owner's thread, periodically: move a swap on, install a finished cleaning,
        start the next."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        if self._swap is not None:
            if not self._swap.files.done():
                return
            self._swap = self._advance_swap(self._swap, self._file_thread())
            if self._swap is not None:
                return
            self._next_check_ms = 0  # look for more work at once
        if self._running is not None:
            job, future = self._running
            if not future.done():
                return
            self._running = None
            self._end_watch()
            self._next_check_ms = 0
            try:
                self._swap = self._begin_swap(job, future.result(), self._file_thread())
            except CleaningAborted:
                pass
            except BrokenProcessPool:
                log.warning("the cleaner process died; starting a new one for the next cleaning")
                self._stop_executor()
            except Exception as exc:
                if job.log.closed:  # deleted or closed meanwhile: nothing to keep
                    log.info("cleaning %r stopped: the log is gone (%s)", job.log, exc)
                else:
                    log.exception("cleaning %r failed", job.log)
            if self._swap is not None:
                return
        if not self.enabled or now_ms < self._next_check_ms:
            return
        best: CleaningJob | None = None
        for plog in self._logs():
            try:
                candidate = self.job_for(plog, now_ms)
            except OSError:
                log.exception("cannot inspect %r for cleaning", plog)
                continue
            if candidate is not None and (best is None or candidate.dirty_ratio > best.dirty_ratio):
                best = candidate
        if best is None:
            self._next_check_ms = now_ms + self.backoff_ms
            return
        if self._executor is None:
            context = multiprocessing.get_context("spawn")
            self._abort = context.Event()
            self._executor = ProcessPoolExecutor(
                1, mp_context=context, initializer=_worker_init, initargs=(self._abort, os.getpid())
            )
        self._abort.clear()
        spec = best.spec(self.max_map_entries, self.io_max_bytes_per_second)
        future = self._executor.submit(_clean_in_worker, spec)
        executor = self._executor
        watch = _StarvationWatch(
            lambda: _pids(executor),
            f"{best.log.topic}-{best.log.partition}",
            self.starved_after_s,
        )
        future.add_done_callback(lambda _done: watch.stop())
        future.add_done_callback(self._notify)
        self._running = (best, future)
        self._watch = watch
        log.info(
            "%s-%d: cleaning started for offsets %d..%d (dirty from %d, ratio %.2f)",
            best.log.topic,
            best.log.partition,
            best.segments[0].base_offset,
            best.end,
            best.first_dirty,
            best.dirty_ratio,
        )

    def _end_watch(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self.starved_cleanings += self._watch.raised
            self._watch = None

    def _file_thread(self) -> ThreadPoolExecutor:
        if self._files is None:
            self._files = ThreadPoolExecutor(1, thread_name_prefix="cleaner-swap")
        return self._files

    # -- swapping (owner's thread; file work on ``files``) ---------------------------

    def _begin_swap(
        self, job: CleaningJob, output: CleaningOutput, files: ThreadPoolExecutor | _Inline
    ) -> _Swap | None:
        """Pin the old segments and commit the swap's files (swap.commit), or drop the
        cleaned segments if the log changed meanwhile (retention, DeleteRecords,
        deletion). The pin keeps retention from taking the old segments while the
        commit runs, so the log still holds them when the switch comes."""
        plog = job.log
        directory = plog.directory
        runs = [[job.segments[i] for i in done.old] for done in output.cleaned]
        if plog.closed or not os.path.isdir(directory) or not all(map(plog.holds_run, runs)):
            for done in output.cleaned:
                swap.discard_cleaned(directory, done.base)
            log.info("%r changed during cleaning; its cleaned segments were dropped", plog)
            return None
        for run in runs:
            plog.pin(run)
        ranges = [(done.base, done.end) for done in output.cleaned]
        pending = _Swap(job, output, runs, ranges, files.submit(swap.commit, directory, ranges))
        pending.files.add_done_callback(self._notify)
        return pending

    def _advance_swap(self, pending: _Swap, files: ThreadPoolExecutor | _Inline) -> _Swap | None:
        """The next phase of a swap whose file work is done; None once it is over."""
        plog = pending.job.log
        directory = plog.directory
        error = pending.files.exception()
        if pending.finishing:
            if error is not None:  # a restart finishes the swap from its manifest
                log.error("%r: finishing a cleaner swap failed: %s", plog, error)
            self._cleaned(pending)
            return None
        for run in pending.runs:
            plog.unpin(run)
        if error is not None or plog.closed:
            if error is not None:
                log.error("%r: committing a cleaner swap failed, rolled back: %s", plog, error)
            try:
                swap.roll_back(directory, [base for base, _end in pending.ranges])
            except OSError:
                if not plog.closed:
                    raise
            return None
        # The switch: segment list and file names change in one step of the owner.
        for done, run in zip(pending.output.cleaned, pending.runs, strict=True):
            new = LogSegment(directory, done.base, plog.handles, done.size)
            if not plog.replace_segments(run, new):
                raise RuntimeError(f"{plog!r}: segments pinned for a swap left the log")
        swap.install_files(directory, pending.ranges)
        self.checkpoints[(plog.topic, plog.partition)] = pending.output.map_end
        pending.finishing = True
        pending.files = files.submit(self._finish_files, directory, self._checkpoint_snapshot())
        pending.files.add_done_callback(self._notify)
        return pending

    def _finish_files(self, directory: Path, checkpoints: dict[tuple[str, int], int]) -> None:
        try:
            swap.finish(directory)
        except FileNotFoundError:
            pass  # the partition was deleted meanwhile: nothing left to finish
        write_checkpoint(self.log_dir / CLEANER_CHECKPOINT, checkpoints)

    def _cleaned(self, pending: _Swap) -> None:
        plog = pending.job.log
        stats = pending.output.stats
        self.last_stats = stats
        self.cleanings += 1
        log.info(
            "%s-%d: cleaned offsets up to %d: %d of %d records kept, %d -> %d segments, "
            "%d -> %d bytes in %.2fs",
            plog.topic,
            plog.partition,
            pending.output.map_end,
            stats.records_kept,
            stats.records_read,
            stats.segments_before,
            stats.segments_after,
            stats.bytes_read,
            stats.bytes_written,
            stats.seconds,
        )

    @property
    def busy(self) -> bool:
        return self._running is not None or self._swap is not None

    def _worker_pids(self) -> list[int]:
        return _pids(self._executor)

    def _raise_worker_priority(self) -> None:
        """Back to the normal scheduling class (nice 10 stays), so that the worker gets
        the CPU to see an abort, or to die of a kill."""
        for pid in self._worker_pids():
            _to_normal_class(pid)

    def _kill_worker(self) -> None:
        for pid in self._worker_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _stop_executor(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def shutdown(self) -> None:
        """Abort a running cleaning (its files are removed; those of a worker that does
        not stop within ABORT_WAIT_S go when the log is loaded next), finish a swap under
        way, stop the file thread, and kill the worker process."""
        if self._running is not None:
            job, future = self._running
            self._abort.set()
            self._raise_worker_priority()  # SCHED_IDLE: on a busy machine it may never run
            try:
                output = future.result(ABORT_WAIT_S)  # aborted, or finished: not installed
            except FutureTimeout:
                # still starved: killed below; the files it was writing (*.cleaned) are
                # discarded when the log is loaded next
                log.warning(
                    "the cleaner's worker did not stop within %.0fs of its abort", ABORT_WAIT_S
                )
            except Exception:
                pass
            else:
                for done in output.cleaned:
                    swap.discard_cleaned(job.log.directory, done.base)
            self._running = None
        self._end_watch()
        while self._swap is not None:  # a few ms of renames and fsyncs: see it through
            try:
                self._swap.files.result()
            except Exception:
                pass  # _advance_swap reports it
            self._swap = self._advance_swap(self._swap, _Inline())
        if self._files is not None:
            self._files.shutdown(wait=True)
            self._files = None
        # the worker holds nothing to save: killed, it needs no CPU to wind its
        # interpreter down (at nice 10 on a busy machine that took over 40 s)
        self._raise_worker_priority()
        self._kill_worker()
        self._stop_executor()
