"""The log of one topic partition: an ordered list of segments in one directory.

Owns: assigning offsets to appended batches (patching base offset, partition leader
epoch and, when asked, LogAppendTime in place), appending a leader's batches as
they are on a follower (``append_as_follower``), appending transaction markers
(``append_marker``), truncating the end back to an offset (``truncate_to``: a
follower whose log diverged from its leader's), rolling segments by size, age and
index fullness, the flush policy and the recovery point, the log start offset (moved
by DeleteRecords, whole segments below it deleted), the high watermark (the log end
offset unless the replication that moves it asks otherwise), the last stable offset
(the high watermark, or the first offset of the earliest transaction still open or
whose marker the high watermark has not passed, if lower), the leader epoch cache
(leader_epochs.py) kept in step with appends and truncations, reads by offset and
lookups by timestamp across segments, the aborted transactions of an offset range
(from the segments' transaction indexes), start-up recovery of segments above the
recovery point (their transaction indexes rebuilt from the markers replayed),
retention (``enforce_retention``: retention.ms / retention.bytes over closed
segments, never from the segment holding the first unstable offset on) and the
delayed removal of retired segments (renamed ``*.deleted``, unlinked after
file.delete.delay.ms by ``purge_deleted``), and swapping in segments the cleaner
rewrote (``replace_segments``; the swap protocol itself is in cleaner.py).
Keeps a ProducerStateManager (producer_state.py) that ``append`` consults for
batches carrying a producer id and sequence (duplicates, out-of-order sequences,
fenced epochs, non-transactional writes inside a transaction) and that every append
path feeds, transactions included; and its ``.snapshot`` files
(producer_snapshot.py): one is written at each roll (at the new segment's base) and
at close (at the log end); at open the newest usable one (at or below the log end,
and at or below the first recovered segment after an unclean shutdown) is loaded and
the log replayed from its offset, headers only (the whole log when there is none).
The two newest snapshots are kept, plus the newest at or below the recovery point.
Producers idle for producer.id.expiration.ms (read from the callable the owner hands
in, at each use: a dynamic broker config) are forgotten by
``remove_expired_producers``, which the owner calls on its schedule, and when the
state is rebuilt (at open and after a truncation): a snapshot's expired entries are
not loaded and the expired producers the replay met are dropped after it, so a restart
does not bring them back; snapshots written later do not hold them.
Does not own: validating produced batches (the broker calls
``records.validate_batches`` first), the sequence and transaction rules themselves
(producer_state.py), the transaction coordinator, choosing and building compacted
segments (cleaner.py), checkpoint files (log_manager.py), fd caching (handles.py).

A PartitionLog is not thread-safe: its owner serialises calls (the broker's event
loop does). Only the FileHandleCache it shares with other logs is locked.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

from strom.protocol.records import (
    BatchHeader,
    build_control_batch,
    iter_headers,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from strom.storage import producer_snapshot, swap
from strom.storage.durable import fsync_dir, unlink_all
from strom.storage.errors import OffsetOutOfRangeError
from strom.storage.handles import FileHandleCache
from strom.storage.leader_epochs import FILE_NAME as EPOCH_FILE
from strom.storage.leader_epochs import LeaderEpochCache
from strom.storage.log_config import LogConfig
from strom.storage.producer_snapshot import SNAPSHOT_SUFFIX, TMP_SUFFIX, CorruptSnapshotError
from strom.storage.producer_state import (
    NOT_IDEMPOTENT,
    ProducerState,
    ProducerStateManager,
)
from strom.storage.segment import INT32_MAX, LOG_SUFFIX, LogSegment
from strom.storage.txn_index import TXNINDEX_SUFFIX, AbortedTxn

log = logging.getLogger(__name__)

_STALE_SUFFIXES = (".deleted", ".cleaned")
_SNAPSHOT_TMP = SNAPSHOT_SUFFIX + TMP_SUFFIX
# A segment's kept prefix being written when a crash came (segment.cut_log_file): the
# .log it was to replace is whole and authoritative.
_LOG_TMP = LOG_SUFFIX + TMP_SUFFIX


def remove_tree(directory: Path) -> None:
    """Remove a deleted partition's renamed directory. Any thread."""
    shutil.rmtree(directory, ignore_errors=True)


SNAPSHOTS_KEPT = 2  # the newest producer state snapshots kept (plus one at or below
# the recovery point, which an unclean restart may need)


class PendingFlush:
    """The files one flush must fsync; ``sync`` is safe on any thread."""

    __slots__ = ("paths", "directory", "end_offset", "handles", "replaced")

    def __init__(
        self,
        paths: list[str],
        directory: Path | None,
        end_offset: int,
        handles: FileHandleCache,
        replaced: list[str] | None = None,
    ) -> None:
        self.paths = paths
        self.directory = directory
        self.end_offset = end_offset  # durable up to here once synced
        self.handles = handles
        # Small files replaced by rename without fsync (the leader epoch cache,
        # partition.metadata): opened by path, never through the fd cache, whose fd
        # may be the replaced file's.
        self.replaced = replaced or []

    def sync(self) -> None:
        for path in self.paths:
            try:
                with self.handles.lease(path) as fd:
                    os.fsync(fd)
            except FileNotFoundError:
                pass  # deleted since (retention, compaction): nothing left to make durable
        for path in self.replaced:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # the log's directory is gone (the partition deleted)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self.directory is not None:
            fsync_dir(self.directory)


class PartitionLog:
    """Append-only log of one partition. Create with ``PartitionLog.open``."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        handles: FileHandleCache,
        segments: list[LogSegment],
        log_start_offset: int,
        high_watermark: int | None = None,
        *,
        recovered_from: int | None = None,
        producer_id_expiration_ms: Callable[[], int] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.config = config
        self.handles = handles
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        active = segments[-1]
        assert active.next_offset is not None
        self.log_end_offset: int = active.next_offset
        self.log_start_offset: int = min(
            max(log_start_offset, segments[0].base_offset), self.log_end_offset
        )
        self.high_watermark: int = (
            self.log_end_offset
            if high_watermark is None
            else min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        )
        self.recovery_point: int = self.log_end_offset
        self._dirty: list[LogSegment] = []  # segments written since the last flush
        self._oldest_unflushed_ms: int | None = None
        self._dir_dirty = False  # files created since the last flush
        self._unsynced_files: list[str] = []  # written without fsync: the next flush's
        self._closed = False
        # Retired segment files: (unlink at ms, paths), oldest first.
        self._pending_deletes: list[tuple[int, list[str]]] = []
        # Segments a cleaner swap is about to replace: kept until it is done.
        self._pinned: set[LogSegment] = set()
        self._snapshots: list[int] = producer_snapshot.list_snapshots(directory)
        # producer.id.expiration.ms as of now; None: producers never expire.
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self.producers = ProducerStateManager(f"{topic}-{partition}")
        self.replayed_batches = 0  # batch headers read to rebuild the producer state
        self._load_producer_state(recovered_from)
        self._delete_segments_below_start()
        self.epochs = self._load_epochs()
        if recovered_from is not None:
            self._take_recovered_epochs(recovered_from)

    # -- producer state ----------------------------------------------------------

    def _load_producer_state(self, rebuild_from: int | None = None) -> None:
        """Rebuild the producer state: load the newest readable snapshot at or below the
        log end (and at or below ``rebuild_from``, the base of the first segment
        recovered at an unclean open, whose transaction indexes are rebuilt by the
        replay), then replay the log from its offset to the log end (from the first
        segment without one). Snapshots above the log end, below the first segment,
        or corrupt are deleted. Producers already expired now are left out: those of
        the snapshot are not loaded (Kafka's rule), those of the replay are removed
        after it."""
        label = f"{self.topic}-{self.partition}"
        now_ms = int(time.time() * 1000)
        expiration_ms = self.producer_id_expiration_ms
        end = self.log_end_offset
        first_base = self._bases[0]
        limit = end if rebuild_from is None else min(end, rebuild_from)
        producers = ProducerStateManager(label)
        loaded: int | None = None
        skipped = 0  # expired producers left out
        doomed: list[int] = []
        for offset in reversed(self._snapshots):
            if offset > limit or offset < first_base:
                doomed.append(offset)
                continue
            try:
                skipped = producers.load_snapshot(
                    producer_snapshot.read(self.directory, offset), now_ms, expiration_ms
                )
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("%s: deleting producer state snapshot %d: %s", label, offset, exc)
                producers = ProducerStateManager(label)
                doomed.append(offset)
                continue
            loaded = offset
            break
        self._delete_snapshots(doomed)
        start = first_base if loaded is None else loaded
        if rebuild_from is not None:
            for segment in self._segments:
                if segment.base_offset >= rebuild_from:
                    segment.txn_index.reset()
        i = max(0, bisect_right(self._bases, start) - 1)
        self.replayed_batches = producers.replay(
            self._segments[i:], start, self.config.index_interval_bytes, rebuild_from
        )
        if expiration_ms is not None:
            skipped += len(producers.remove_expired(now_ms, expiration_ms))
        self.producers = producers
        log.debug(
            "%s: producer state from %s, %d batch headers replayed, %d producers "
            "(%d expired ones left out)",
            label,
            "the log" if loaded is None else f"the snapshot at {loaded}",
            self.replayed_batches,
            len(producers),
            skipped,
        )

    @property
    def producer_id_expiration_ms(self) -> int | None:
        """producer.id.expiration.ms as of now; None if producers never expire."""
        setting = self._producer_id_expiration_ms
        return None if setting is None else setting()

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget the producers idle for producer.id.expiration.ms at ``now_ms`` (no
        open transaction, last batch or marker timestamp that long ago; Kafka's
        removeExpiredProducers); returns how many. The next snapshot leaves them out,
        and a batch they send later is a new producer's."""
        expiration_ms = self.producer_id_expiration_ms
        if expiration_ms is None:
            return 0
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        expired = self.producers.remove_expired(now_ms, expiration_ms)
        if expired:
            log.debug(
                "%s-%d: %d producer ids expired (idle for %d ms or more)",
                self.topic,
                self.partition,
                len(expired),
                expiration_ms,
            )
        return len(expired)

    def _delete_snapshots(self, offsets: list[int]) -> None:
        if offsets:
            producer_snapshot.delete(self.directory, offsets)
            gone = set(offsets)
            self._snapshots = [o for o in self._snapshots if o not in gone]

    def _take_snapshot(self, *, sync_dir: bool) -> None:
        """Write the producer state as the snapshot at the log end offset (none if there
        is one at that offset already), then prune old snapshots."""
        offset = self.log_end_offset
        if offset in self._snapshots:
            return
        producer_snapshot.write(
            self.directory, offset, self.producers.snapshot_entries(), sync_dir=sync_dir
        )
        if not sync_dir:
            self._dir_dirty = True
        self._snapshots.append(offset)
        self._snapshots.sort()
        self._prune_snapshots()

    def _prune_snapshots(self) -> None:
        """Keep the newest SNAPSHOTS_KEPT snapshots and the newest at or below the
        recovery point; delete the others and any below the first segment."""
        snapshots = self._snapshots
        if not snapshots:
            return
        keep = set(snapshots[-SNAPSHOTS_KEPT:])
        durable = [o for o in snapshots if o <= self.recovery_point]
        if durable:
            keep.add(durable[-1])
        first_base = self._bases[0]
        self._delete_snapshots([o for o in snapshots if o not in keep or o < first_base])

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the producer state snapshots on disk, ascending."""
        return list(self._snapshots)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest transaction still open or whose marker is not
        yet below the high watermark; None if there is none. (It may lie below the log
        start offset after DeleteRecords; the last stable offset never does.)"""
        return self.producers.first_unstable_offset(self.high_watermark)

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first unstable offset if that is lower (but not
        below the log start offset): what read_committed consumers may read up to."""
        high_watermark = self.high_watermark
        first = self.producers.first_unstable_offset(high_watermark)
        if first is None or first >= high_watermark:
            return high_watermark
        return max(first, self.log_start_offset)

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction with data in
        [start, end): marker offset >= start and first offset < end, oldest marker
        first, as Fetch answers read_committed consumers (Kafka's
        collectAbortedTransactions)."""
        return [(t.producer_id, t.first_offset) for t in self.aborted_txns(start, end)]

    def aborted_txns(self, start: int, end: int) -> list[AbortedTxn]:
        """The transaction index entries behind ``aborted_transactions``. An entry
        lives in the segment of its marker, so the walk starts at the segment holding
        ``start`` and stops at an entry that proves no later one overlaps."""
        found: list[AbortedTxn] = []
        i = max(0, bisect_right(self._bases, start) - 1)
        for segment in self._segments[i:]:
            if segment.txn_index.collect(start, end, found):
                break
        return found

    def producer_states(self) -> list[ProducerState]:
        """Every producer of the partition, by id, as DescribeProducers reports them:
        (producer_id, producer_epoch, last_sequence, last_timestamp,
        coordinator_epoch, current_txn_start_offset), -1 where unknown or none."""
        return self.producers.states()

    def open_transactions(self) -> list[tuple[int, int, int]]:
        """(producer id, producer epoch, first offset) of every open transaction,
        earliest first: the hanging-transaction view."""
        return self.producers.open_transactions()

    def has_open_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether this producer, at this epoch, has a transaction open here: its next
        transactional batch continues it and needs no verification."""
        entry = self.producers.get(producer_id)
        return (
            entry is not None
            and entry.epoch == producer_epoch
            and entry.current_txn_first_offset >= 0
        )

    def _load_epochs(self) -> LeaderEpochCache:
        cache = LeaderEpochCache.read(self.directory)
        if cache is None:
            cache = LeaderEpochCache(self.directory / EPOCH_FILE)
            if self.log_end_offset > self.log_start_offset:
                # No file (a log from before epochs were kept, or a damaged file): the
                # batches carry their epochs.
                entries: list[tuple[int, int]] = []
                for segment in self._segments:
                    for epoch, start in segment.epoch_starts():
                        if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                            entries.append((epoch, start))
                cache = LeaderEpochCache(self.directory / EPOCH_FILE, entries)
                if entries:
                    cache.write()
        cache.truncate_from_end(self.log_end_offset)
        cache.truncate_from_start(self.log_start_offset)
        return cache

    def _take_recovered_epochs(self, recovered_from: int) -> None:
        """After a crash: the epochs of the batches recovered from ``recovered_from`` on
        (the segment holding the recovery point), as Kafka's recovery assigns them. The
        cache file may have lost its newest entries (they are fsynced with the flush
        after them); the batches carry their epochs. A new entry replaces those it
        contradicts (``LeaderEpochCache._add``)."""
        for segment in self._segments:
            if segment.base_offset < recovered_from:  # the base of a recovered segment
                continue
            for epoch, start in segment.epoch_starts():
                if epoch >= 0:
                    self.epochs.assign(epoch, start)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )

    # -- opening ----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        handles: FileHandleCache,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        clean: bool = False,
        producer_id_expiration_ms: Callable[[], int] | None = None,
    ) -> PartitionLog:
        """Open (creating if missing) the log in ``directory``.

        Unless ``clean``, every segment from the one holding ``recovery_point`` on is
        verified batch by batch (framing, offsets, CRC32C); the first bad or torn batch
        and everything after it is cut off and later segments are dropped. Segments
        below (or all, when ``clean``) are trusted; only an index file that is missing
        or not a whole number of entries is rebuilt.

        The high watermark starts at ``high_watermark`` (from the replication offset
        checkpoint) capped by the log end offset, or at the log end offset when None.

        ``producer_id_expiration_ms`` gives producer.id.expiration.ms at each use (None:
        producers never expire).
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        swap.recover(directory)  # finish or roll back a cleaner swap cut short by a crash
        sizes: dict[int, int] = {}
        txn_indexes: set[int] = set()
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(LOG_SUFFIX) and len(name) == 24 and name[:20].isdigit():
                    sizes[int(name[:20])] = entry.stat().st_size
                elif name.endswith(TXNINDEX_SUFFIX) and name[:20].isdigit():
                    txn_indexes.add(int(name[:20]))
                elif name.endswith((*_STALE_SUFFIXES, _SNAPSHOT_TMP, _LOG_TMP)):
                    log.info("removing leftover %s", entry.path)
                    os.unlink(entry.path)
        bases = sorted(sizes)
        recovered_from: int | None = None
        interval = config.index_interval_bytes
        segments: list[LogSegment] = []
        if not bases:
            segments.append(LogSegment.create(directory, max(log_start_offset, 0), handles))
        else:
            verify_from = len(bases) if clean else max(0, bisect_right(bases, recovery_point) - 1)
            if verify_from < len(bases):
                recovered_from = bases[verify_from]  # its transaction indexes are rebuilt
            for i, base in enumerate(bases):
                segment = LogSegment(
                    directory, base, handles, sizes[base], txn_index_exists=base in txn_indexes
                )
                segments.append(segment)
                is_last = i == len(bases) - 1
                if i < verify_from:
                    if not segment.indexes_look_valid():
                        log.warning("rebuilding missing or partial indexes of %s", segment.log_path)
                        segment.recover(interval, verify=False)
                        cls._settle(segment, is_last)
                    continue
                cut = segment.recover(interval, verify=True)
                later = bases[i + 1 :]
                assert segment.next_offset is not None
                if later and (cut or segment.next_offset > later[0]):
                    for dropped in later:
                        log.warning(
                            "dropping segment %s after a damaged one",
                            LogSegment(directory, dropped, handles, 0).log_path,
                        )
                        LogSegment(directory, dropped, handles, 0).delete()
                    is_last = True
                cls._settle(segment, is_last)
                segment.flush()
                if is_last:
                    break
            segments[-1].load_tail(interval)
        return cls(
            directory,
            topic,
            partition,
            config,
            handles,
            segments,
            log_start_offset,
            high_watermark,
            recovered_from=recovered_from,
            producer_id_expiration_ms=producer_id_expiration_ms,
        )

    @staticmethod
    def _settle(segment: LogSegment, is_active: bool) -> None:
        # An inactive segment's time index ends with its max timestamp; its indexes
        # then leave memory until a read needs them.
        if not is_active:
            segment.seal()
            segment.drop_indexes()
        else:
            segment.write_indexes()

    # -- introspection ------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def segments(self) -> list[int]:
        """Base offsets of the segments, oldest first."""
        return list(self._bases)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    @property
    def closed(self) -> bool:
        return self._closed

    def closed_segments(self) -> list[LogSegment]:
        """Every segment but the active one, oldest first (a copy of the list)."""
        return self._segments[:-1]

    def holds_run(self, old: list[LogSegment]) -> bool:
        """``old`` is a contiguous run of this open log's closed segments, in order."""
        if self._closed or not old:
            return False
        segments = self._segments
        try:
            i = segments.index(old[0])
        except ValueError:
            return False
        return segments[i : i + len(old)] == old and i + len(old) < len(segments)

    def pin(self, segments: list[LogSegment]) -> None:
        """Keep ``segments`` in the log until ``unpin``: retention and DeleteRecords
        still move the log start offset past them, but delete them only afterwards
        (the cleaner's swap holds them while its files are being committed)."""
        self._pinned.update(segments)

    def unpin(self, segments: list[LogSegment]) -> None:
        self._pinned.difference_update(segments)

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> bool:
        """Put ``new`` in place of the run ``old`` (closed segments, contiguous, in order;
        ``new.base_offset == old[0].base_offset``). Returns False, changing nothing, if
        ``old`` is no longer such a run in this log (retention or DeleteRecords took
        some of it). The old segments are retired (renamed ``*.deleted``), the first one
        too, so that the new files' renames to its names (swap.py) free no file: freeing
        a large file is slow and would happen on the owner's thread."""
        if not self.holds_run(old) or new.base_offset != old[0].base_offset:
            return False
        segments = self._segments
        i = segments.index(old[0])
        for segment in old:
            self._retire(segment)
        segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]
        return True

    # -- appends -----------------------------------------------------------------

    def append(
        self,
        buf: bytearray | memoryview,
        headers: list[BatchHeader],
        *,
        leader_epoch: int = 0,
        log_append_time_ms: int | None = None,
        defer_flush: bool = False,
        advance_high_watermark: bool = True,
    ) -> int:
        """Append validated back-to-back batches; returns the first batch's base offset.

        The high watermark moves to the new log end unless ``advance_high_watermark``
        is False (a replicated partition: its followers' progress moves it). A
        ``leader_epoch`` above the latest one starts a new entry in the epoch cache.

        The flush policy is applied at once unless ``defer_flush``: then the caller
        checks ``flush_wanted()`` and flushes (perhaps with begin/end_flush, so that
        one fsync covers several appends).

        ``headers`` come from ``records.validate_batches(buf)``; their offsets, leader
        epoch (and LogAppendTime when ``log_append_time_ms`` is given) are patched into
        ``buf`` in place. The whole of ``buf`` goes into one segment with one write.

        Batches with a producer id and sequence are checked first (producer_state.py):
        a duplicate of one of the producer's last five batches is not appended and
        its original base offset is returned; an old epoch raises
        InvalidProducerEpochError, a sequence gap OutOfOrderSequenceError, a
        non-transactional batch of a producer whose transaction is open
        InvalidTxnStateError, and then nothing is appended. A transactional batch
        opens its producer's transaction if none is open.
        """
        if not headers:
            raise ValueError("nothing to append")
        last = headers[-1]
        if headers[0].position != 0 or last.position + last.size != len(buf):
            raise ValueError("headers do not cover the buffer")
        first = headers[0]
        if first is last and first.producer_id < 0:
            verdict = NOT_IDEMPOTENT  # the common plain batch: skip the call
        else:
            verdict = self.producers.check(headers)
            if verdict is not NOT_IDEMPOTENT and verdict >= 0:
                return verdict  # a retried batch already in the log
        return self._append(
            buf,
            headers,
            leader_epoch,
            log_append_time_ms,
            defer_flush,
            advance_high_watermark,
            verdict is not NOT_IDEMPOTENT,
        )

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        *,
        leader_epoch: int = 0,
        advance_high_watermark: bool = True,
        defer_flush: bool = False,
    ) -> int:
        """Append a transaction marker (WriteTxnMarkers); returns its offset.

        A control batch (records.build_control_batch) committing or aborting the
        producer's transaction, appended like ``append`` appends (offset, leader epoch,
        roll, high watermark, flush policy). It ends the producer's open transaction;
        an abort adds the transaction to the index of the segment the marker lands
        in. A producer epoch below the producer's raises InvalidProducerEpochError, a
        coordinator epoch below the one of its last marker
        TransactionCoordinatorFencedError; nothing is appended then. A marker for a
        producer with no open transaction is appended all the same (a retried marker)
        and changes nothing but the producer's epochs.
        """
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        buf = build_control_batch(
            producer_id, producer_epoch, commit, coordinator_epoch, int(time.time() * 1000)
        )
        return self._append(
            buf,
            list(iter_headers(buf)),
            leader_epoch,
            None,
            defer_flush,
            advance_high_watermark,
            True,
        )

    def _append(
        self,
        buf: bytearray | memoryview,
        headers: list[BatchHeader],
        leader_epoch: int,
        log_append_time_ms: int | None,
        defer_flush: bool,
        advance_high_watermark: bool,
        track_producers: bool,
    ) -> int:
        now_ms = int(time.time() * 1000)
        first_offset = offset = self.log_end_offset
        if leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(leader_epoch, first_offset, write=not self._empty)
        for header in headers:
            set_base_offset(buf, header, offset)
            set_partition_leader_epoch(buf, header, leader_epoch)
            if log_append_time_ms is not None:
                set_log_append_time(buf, header, log_append_time_ms)
            offset += header.last_offset_delta + 1
        segment = self._segments[-1]
        if segment.size and self._should_roll(segment, len(buf), offset - 1, now_ms):
            segment = self._roll()
        segment.append(buf, headers, self.config.index_interval_bytes, now_ms)
        if track_producers:
            self._record_producers(segment, headers, buf)
        if not self._dirty or self._dirty[-1] is not segment:
            self._dirty.append(segment)
        self.log_end_offset = offset
        if advance_high_watermark:
            self.high_watermark = offset
        if self._oldest_unflushed_ms is None:
            self._oldest_unflushed_ms = now_ms
        if not defer_flush:
            self.maybe_flush(now_ms)
        return first_offset

    def append_as_follower(
        self,
        buf: bytearray | memoryview,
        headers: list[BatchHeader],
        *,
        defer_flush: bool = False,
    ) -> None:
        """Append batches copied from the leader's log, offsets and epochs as they are.

        They must start at the log end offset and follow one another; the producer
        state (transactions and the transaction index included) and the epoch cache
        learn from them as from the leader's appends, without checks. The high
        watermark does not move (the leader's, capped by ours, is set apart).
        """
        if not headers:
            raise ValueError("nothing to append")
        last = headers[-1]
        if headers[0].position != 0 or last.position + last.size != len(buf):
            raise ValueError("headers do not cover the buffer")
        expected = self.log_end_offset
        for header in headers:
            if header.base_offset != expected:
                raise ValueError(
                    f"{self.topic}-{self.partition}: batch at offset {header.base_offset}"
                    f" where {expected} was expected"
                )
            expected = header.next_offset
        epochs = self.epochs
        for header in headers:
            if header.partition_leader_epoch > epochs.latest_epoch:
                epochs.assign(
                    header.partition_leader_epoch, header.base_offset, write=not self._empty
                )
        now_ms = int(time.time() * 1000)
        segment = self._segments[-1]
        if segment.size and self._should_roll(segment, len(buf), last.last_offset, now_ms):
            segment = self._roll()
        segment.append(buf, headers, self.config.index_interval_bytes, now_ms)
        self._record_producers(segment, headers, buf)
        if not self._dirty or self._dirty[-1] is not segment:
            self._dirty.append(segment)
        self.log_end_offset = expected
        if self._oldest_unflushed_ms is None:
            self._oldest_unflushed_ms = now_ms
        if not defer_flush:
            self.maybe_flush(now_ms)

    def _record_producers(
        self, segment: LogSegment, headers: list[BatchHeader], buf: bytearray | memoryview
    ) -> None:
        """Apply appended batches to the producer state; aborted transactions go into
        the transaction index of ``segment``, which now holds their markers."""
        for done in self.producers.record(headers, buf):
            if done.aborted:
                segment.txn_index.append(done.aborted_txn())

    # -- replication state -----------------------------------------------------------

    def set_high_watermark(self, offset: int) -> None:
        """Set the high watermark, kept within [log start offset, log end offset]."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    @property
    def latest_epoch(self) -> int:
        """The latest leader epoch in the log's epoch cache; -1 if none."""
        return self.epochs.latest_epoch

    @property
    def _empty(self) -> bool:
        # Nothing in the log: an epoch taken now is written with the first flush.
        return self.log_end_offset == self.log_start_offset and not self.epochs.entries()

    def assign_epoch(self, epoch: int) -> None:
        """A new leader's epoch begins at the log end offset (Kafka assigns it when
        leadership is taken, before the first append)."""
        self.epochs.assign(epoch, self.log_end_offset, write=not self._empty)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers (leader_epochs.py)."""
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above ``offset`` (a whole batch when ``offset`` is
        inside it), durably: the files are cut and fsynced before this returns. The
        high watermark, recovery point, epoch cache and producer state follow. An
        offset at or below the log start empties the log and restarts it there.

        At or past the log end no record goes, but epoch entries starting at or past
        ``offset`` still do (as Kafka's truncateTo): a leader deposed before its first
        append keeps an entry for its empty epoch that its new leader never had."""
        if offset >= self.log_end_offset:
            self.epochs.truncate_from_end(offset)
            return
        interval = self.config.index_interval_bytes
        if offset <= self.log_start_offset:
            self.truncate_fully_and_start_at(max(offset, self.log_start_offset))
            return
        keep = max(1, bisect_right(self._bases, offset - 1))
        for segment in self._segments[keep:]:
            if segment in self._dirty:
                self._dirty.remove(segment)
            segment.delete()
        del self._segments[keep:], self._bases[keep:]
        active = self._segments[-1]
        end = active.truncate_to(offset, interval)
        if active.size == 0 and len(self._segments) > 1:
            # The batch holding ``offset`` began in the segment before: drop the empty one.
            active.delete()
            self._segments.pop()
            self._bases.pop()
            active = self._segments[-1]
            end = active.truncate_to(offset, interval)
        if active in self._dirty:
            self._dirty.remove(active)
        self._delete_snapshots([o for o in self._snapshots if o > end])
        fsync_dir(self.directory)
        self._after_truncation(end)

    def truncate_fully_and_start_at(self, start: int) -> None:
        """Remove every segment and start an empty log at ``start`` (a follower whose
        leader's log starts past this one's end), durably."""
        for segment in self._segments:
            if segment in self._dirty:
                self._dirty.remove(segment)
            segment.delete()
        segment = LogSegment.create(self.directory, start, self.handles)
        segment.flush()
        self._segments = [segment]
        self._bases = [start]
        self._delete_snapshots(list(self._snapshots))
        fsync_dir(self.directory)
        self.log_start_offset = start
        self.epochs.clear()
        self._after_truncation(start)
        self.high_watermark = start

    def _after_truncation(self, end: int) -> None:
        log.info("%s-%d: truncated to offset %d", self.topic, self.partition, end)
        self.log_end_offset = end
        self.high_watermark = min(self.high_watermark, end)
        self.recovery_point = min(self.recovery_point, end)
        self.epochs.truncate_from_end(end)
        self._load_producer_state()

    def _should_roll(self, segment: LogSegment, size: int, last_offset: int, now_ms: int) -> bool:
        config = self.config
        offset_index, time_index = segment.offset_index, segment.time_index
        assert offset_index is not None and time_index is not None
        first_append = segment.first_append_time(now_ms)
        return (
            segment.size + size > config.segment_bytes
            or segment.size + size > INT32_MAX
            or last_offset - segment.base_offset > INT32_MAX
            or (first_append is not None and now_ms - first_append > config.roll_ms)
            or len(offset_index) >= config.max_offset_index_entries
            or len(time_index) >= config.max_time_index_entries
        )

    def _roll(self) -> LogSegment:
        old = self._segments[-1]
        old.seal()
        old.write_indexes()
        if old not in self._dirty:
            self._dirty.append(old)  # its sealed time index is fsynced by the next flush
        # The producer state as of the new segment's base: a restart replays from here.
        self._take_snapshot(sync_dir=False)
        segment = LogSegment.create(self.directory, self.log_end_offset, self.handles)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._dir_dirty = True
        self._delete_segments_below_start()
        log.debug(
            "%s-%d: rolled segment at offset %d (previous %d bytes)",
            self.topic,
            self.partition,
            segment.base_offset,
            old.size,
        )
        return segment

    # -- durability ----------------------------------------------------------------

    def flush_wanted(self, now_ms: int | None = None) -> bool:
        """Whether flush.messages / flush.ms call for a flush now."""
        unflushed = self.log_end_offset - self.recovery_point
        if unflushed <= 0 or not self._dirty:
            return False
        config = self.config
        if config.flush_messages is not None and unflushed >= config.flush_messages:
            return True
        if config.flush_ms is not None and self._oldest_unflushed_ms is not None:
            if now_ms is None:
                now_ms = int(time.time() * 1000)
            return now_ms - self._oldest_unflushed_ms >= config.flush_ms
        return False

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Apply flush.messages / flush.ms; returns True if it flushed."""
        if self.flush_wanted(now_ms):
            self.flush()
            return True
        return False

    def flush(self) -> None:
        """fsync every segment written since the last flush; recovery point = end."""
        pending = self.begin_flush()
        pending.sync()
        self.end_flush(pending)

    def begin_flush(self) -> PendingFlush:
        """The owner's half of a flush: write pending index entries, name the files.

        The returned PendingFlush may ``sync()`` on another thread while appends
        go on (group commit); ``end_flush`` then moves the recovery point to what
        was the log end when the flush began.
        """
        if self.epochs.dirty:
            self.epochs.write(sync=False)
        if self.epochs.unsynced:
            self.epochs.unsynced = False
            self._unsynced_files.append(os.fspath(self.epochs.path))
            self._dir_dirty = True  # renamed into place
        paths = [path for segment in self._dirty for path in segment.files_to_sync()]
        replaced, self._unsynced_files = self._unsynced_files, []
        directory = self.directory if self._dir_dirty else None
        self._dirty.clear()
        self._dir_dirty = False
        self._oldest_unflushed_ms = None
        return PendingFlush(paths, directory, self.log_end_offset, self.handles, replaced)

    def sync_with_next_flush(self, path: Path) -> None:
        """``path``, a file of this log's directory written without fsync, is made
        durable (with the directory) by the next flush."""
        self._unsynced_files.append(os.fspath(path))
        self._dir_dirty = True

    def end_flush(self, pending: PendingFlush) -> None:
        if pending.end_offset > self.recovery_point:
            self.recovery_point = pending.end_offset

    # -- reads -----------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        upper_bound: int | None = None,
        wait_for_disk: bool = True,
    ) -> bytes | memoryview:
        """Whole batches from the one containing ``offset``, across segments.

        The result is bytes-like: often a memoryview over the buffer the segment was
        read into, so that a fetch sends the bytes without copying them again.

        At most ``max_bytes`` in total except that the first batch is returned whole
        even if larger; no batch whose base offset is >= ``upper_bound``. b"" at the
        log end offset. Raises OffsetOutOfRangeError outside [log start, log end]. With
        ``wait_for_disk`` False, raises ColdRead (segment.py) where bytes it would read
        are not in the page cache: warm them on a thread, then read again.
        """
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
                f" of {self.topic}-{self.partition}"
            )
        if offset == self.log_end_offset or (upper_bound is not None and offset >= upper_bound):
            return b""
        segments = self._segments
        i = max(0, bisect_right(self._bases, offset) - 1)
        interval = self.config.index_interval_bytes
        data, done = segments[i].read(offset, max_bytes, upper_bound, True, interval, wait_for_disk)
        if done or i + 1 == len(segments) or len(data) >= max_bytes:
            return data
        chunks = [data] if data else []
        remaining = max_bytes - len(data)
        for segment in segments[i + 1 :]:
            data, done = segment.read(
                offset, remaining, upper_bound, not chunks, interval, wait_for_disk
            )
            if data:
                chunks.append(data)
                remaining -= len(data)
            if done or remaining <= 0:
                break
        return b"".join(chunks)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start offset whose
        timestamp is >= ``timestamp`` (per record, as Kafka answers; only the batch the
        time index leads to is decoded)."""
        interval = self.config.index_interval_bytes
        start = self.log_start_offset
        i = max(0, bisect_right(self._bases, start) - 1)
        for segment in self._segments[i:]:
            found = segment.offset_for_timestamp(timestamp, start, interval)
            if found is not None:
                return found
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record holding the largest timestamp, in the
        earliest batch holding it (KIP-734); (-1, -1) if there is none. The segments'
        indexes name the batch; only that batch is decoded."""
        interval = self.config.index_interval_bytes
        best_ts, best_offset, best = -1, -1, None
        i = max(0, bisect_right(self._bases, self.log_start_offset) - 1)
        for segment in self._segments[i:]:
            ts, offset = segment.max_timestamp(interval)
            if ts > best_ts:
                best_ts, best_offset, best = ts, offset, segment
        if best is None or best_ts < 0:
            return -1, -1
        return best.first_offset_of_timestamp(best_offset, best_ts, interval), best_ts

    # -- log start offset --------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (<= high watermark) and delete the
        segments lying entirely below it (never the active one, nor one holding or
        above the first unstable offset: an open transaction's state and index stay
        whole). Returns the new start."""
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete before {offset}: high watermark is {self.high_watermark}"
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.epochs.truncate_from_start(offset)
        self._delete_segments_below_start()
        return self.log_start_offset

    def _delete_segments_below_start(self, now_ms: int | None = None) -> int:
        # Segments whose successor starts at or below the log start offset hold nothing
        # readable. The active one is kept; it goes after the next roll. So is every
        # segment from the one holding the first unstable offset on.
        start = self.log_start_offset
        unstable = self.first_unstable_offset
        if unstable is not None and unstable < start:
            start = unstable
        count = 0
        while len(self._segments) > 1 and self._bases[1] <= start:
            if self._segments[0] in self._pinned:
                break  # the next pass deletes it
            segment = self._segments.pop(0)
            self._bases.pop(0)
            self._retire(segment, now_ms)
            count += 1
            log.info(
                "%s-%d: deleted segment %d below log start offset %d",
                self.topic,
                self.partition,
                segment.base_offset,
                start,
            )
        if count:
            self._prune_snapshots()
        return count

    def _retire(self, segment: LogSegment, now_ms: int | None = None) -> None:
        """Take a segment out of service: rename its files ``*.deleted`` and unlink them
        after file.delete.delay.ms (at once when that is 0)."""
        if segment in self._dirty:
            self._dirty.remove(segment)
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            segment.delete()
            return
        paths = segment.retire()
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        self._pending_deletes.append((now_ms + delay, paths))

    def due_deletes(self, now_ms: int | None = None, *, everything: bool = False) -> list[str]:
        """Take the retired files whose file.delete.delay.ms has passed (all with
        ``everything``): the caller unlinks them, perhaps on another thread."""
        if not self._pending_deletes:
            return []
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        due: list[str] = []
        while self._pending_deletes and (everything or self._pending_deletes[0][0] <= now_ms):
            due += self._pending_deletes.pop(0)[1]
        return due

    def purge_deleted(self, now_ms: int | None = None, *, everything: bool = False) -> int:
        """Unlink retired files whose delay has passed (all with ``everything``)."""
        return unlink_all(self.due_deletes(now_ms, everything=everything))

    # -- retention ------------------------------------------------------------------------

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete the oldest closed segments that retention.ms or retention.bytes let go
        (only when cleanup.policy includes ``delete``; never the active segment), and
        move the log start offset to the first remaining one. Returns how many went.

        By time: a segment goes when its largest record timestamp (its file's mtime if
        it has none) is more than retention.ms old; the walk stops at the first one
        that is not. By size: the oldest segments go while the log stays at or above
        retention.bytes without them. Neither takes the segment holding the first
        unstable offset or any after it.
        """
        config = self.config
        if not config.delete or len(self._segments) < 2:
            return 0
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        closed = self._segments[:-1]
        count = 0
        if config.retention_ms >= 0:
            interval = config.index_interval_bytes
            for segment in closed:
                largest = segment.max_timestamp(interval)[0]
                if largest < 0:
                    largest = segment.last_modified_ms()
                if now_ms - largest <= config.retention_ms:
                    break
                count += 1
        if config.retention_bytes >= 0:
            excess = self.size_bytes - config.retention_bytes
            by_size = 0
            for segment in closed:
                if excess - segment.size < 0:
                    break
                excess -= segment.size
                by_size += 1
            count = max(count, by_size)
        unstable = self.first_unstable_offset
        if unstable is not None:
            while count and self._bases[count] > unstable:
                count -= 1
        if not count:
            return 0
        new_start = self._bases[count]
        if new_start > self.log_start_offset:
            log.info(
                "%s-%d: retention moves the log start offset from %d to %d",
                self.topic,
                self.partition,
                self.log_start_offset,
                new_start,
            )
            self.log_start_offset = new_start
            self.epochs.truncate_from_start(new_start)
        return self._delete_segments_below_start(now_ms)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Flush (fsync) and release every fd. The log must not be used afterwards."""
        if self._closed:
            return
        self._take_snapshot(sync_dir=False)  # made durable by the flush below
        active = self._segments[-1]
        time_index = active.time_index
        entries = len(time_index) if time_index is not None else 0
        active.seal()
        if time_index is not None and len(time_index) != entries and active not in self._dirty:
            self._dirty.append(active)
        self.flush()
        for segment in self._segments:
            segment.close()
        self.purge_deleted(everything=True)
        self._closed = True

    def delete(self, remove: Callable[[Path], None] = remove_tree) -> None:
        """Close without flushing and remove the partition directory.

        The directory is first renamed to ``{name}.{uuid}-delete`` (atomic), so a crash
        during the removal leaves nothing that looks like a live partition; ``remove``
        (perhaps handing it to another thread) removes the renamed directory.
        """
        for segment in self._segments:
            for path in (segment.log_path, segment.index_path, segment.timeindex_path):
                self.handles.forget(path)
            segment.txn_index.forget()
        self._closed = True
        grave = self.directory.with_name(f"{self.directory.name}.{uuid.uuid4().hex}-delete")
        try:
            os.rename(self.directory, grave)
        except FileNotFoundError:
            return
        remove(grave)
