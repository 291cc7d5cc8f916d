"""The metadata log on disk: what the Raft core asks to keep, in ``__cluster_metadata-0``.

Owns the files of the metadata partition under ``metadata.log.dir``, as Kafka lays them
out:

- ``quorum-state``: the voter's election state (epoch, vote, known leader) as Kafka's
  FileQuorumStateStore writes it, QuorumStateData version 0 in JSON::

      {"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,
       "currentVoters":[{"voterId":1},{"voterId":2}],"data_version":0}

  replaced atomically (temp file, fsync, rename, fsync of the directory).
- the log: segment files ``<20-digit base offset>.log`` of magic-2 record batches, one
  per Raft ``Batch`` (base offset, partitionLeaderEpoch = the batch's epoch, the control
  attribute for control batches, one record per entry with a null key and the entry as
  its value). No index files: the whole log is read once at start-up.
- snapshots: ``<20-digit end offset>-<10-digit epoch>.checkpoint``, written as
  ``.checkpoint.part`` then fsynced and renamed; only the newest is kept. Their bytes are
  the opaque ``Snapshot.data``, not Kafka's record-batch snapshot format.

``persist`` is the durable half of the core's Ready: quorum state first (an epoch is
durable before any of its entries), then a received snapshot, truncation, appends (one
write and one fsync per call, however many batches), then the deletion of segments a
snapshot covers. ``load`` gives back what survived: a torn or corrupt tail (a partial
last batch, a CRC mismatch, an offset out of sequence) is cut off and any later
segment dropped, as the partition logs' recovery does.

The store is not thread-safe; its owner serialises calls. It is not PartitionLog: the
metadata log takes offsets from the core rather than assigning them, truncates at any
offset and is read whole at start-up, so it needs none of the indexes, producer state
or retention of a partition log.

Does not own: Raft logic (which offsets, when to snapshot, what records mean: the core
and the controller), the batch format itself (``strom.protocol.records``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from strom.protocol.records import (
    ATTR_CONTROL,
    HEADER_SIZE,
    CorruptBatchError,
    build_batch,
    crc_ok,
    decode_records,
    parse_header,
)
from strom.raft.messages import Batch, QuorumState, Snapshot, SnapshotId
from strom.storage.durable import fsync_dir, unlink_all, write_atomically
from strom.storage.errors import StorageError

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = f"{METADATA_TOPIC}-0"
QUORUM_STATE_FILE = "quorum-state"
LOG_SUFFIX = ".log"
SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".part"
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024  # metadata.log.segment.bytes


class MetadataLogError(StorageError):
    """The metadata log's files cannot be used (an unreadable quorum-state, a bad append)."""


def metadata_partition_dir(metadata_log_dir: Path | str) -> Path:
    """The ``__cluster_metadata-0`` directory under ``metadata.log.dir``."""
    return Path(metadata_log_dir) / METADATA_PARTITION_DIR


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


def snapshot_name(snapshot_id: SnapshotId) -> str:
    """Kafka's snapshot file name: ``<20-digit end offset>-<10-digit epoch>.checkpoint``."""
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_name(name: str) -> SnapshotId | None:
    """The SnapshotId a file name stands for; None if it is not a snapshot's name."""
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    offset, dash, epoch = stem.partition("-")
    if not dash or len(offset) != 20 or len(epoch) != 10:
        return None
    if not (offset.isdigit() and epoch.isdigit()):
        return None
    return SnapshotId(int(offset), int(epoch))


# quorum-state ---------------------------------------------------------------------


def quorum_state_json(state: QuorumState, voters: Iterable[int] | None = None) -> dict[str, object]:
    """``state`` as Kafka's QuorumStateData v0 JSON object (with its data_version)."""
    return {
        "clusterId": "",
        "leaderId": state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": state.voted_for,
        "appliedOffset": 0,
        "currentVoters": None
        if voters is None
        else [{"voterId": voter} for voter in sorted(voters)],
        "data_version": 0,
    }


def quorum_state_from_json(data: object) -> QuorumState:
    """A QuorumState from Kafka's quorum-state JSON (data_version 0 or 1)."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    version = data.get("data_version", 0)
    if version not in (0, 1):
        raise ValueError(f"unknown data_version {version}")
    epoch = int(data.get("leaderEpoch", -1))
    return QuorumState(
        epoch=max(epoch, 0),
        voted_for=int(data.get("votedId", -1)),
        leader_id=int(data.get("leaderId", -1)),
    )


def write_quorum_state(
    path: Path, state: QuorumState, voters: Iterable[int] | None = None, *, sync: bool = True
) -> None:
    data = json.dumps(quorum_state_json(state, voters), separators=(",", ":")).encode()
    if sync:
        write_atomically(path, data)
    else:
        tmp = f"{path}.tmp"
        Path(tmp).write_bytes(data)
        os.replace(tmp, path)


def read_quorum_state(path: Path) -> QuorumState | None:
    """The quorum-state file's state; None if there is none. A file that cannot be read
    is a MetadataLogError: a voter must not forget whom it voted for."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return quorum_state_from_json(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise MetadataLogError(f"Unreadable quorum state file {path}: {exc}") from None


# The log ----------------------------------------------------------------------------


def encode_batch(batch: Batch, timestamp_ms: int) -> bytes:
    """``batch`` as one magic-2 record batch (null keys, the entries as values)."""
    if not batch.records:
        raise MetadataLogError(f"empty batch at offset {batch.base_offset}")
    return build_batch(
        [(None, record) for record in batch.records],
        base_offset=batch.base_offset,
        base_timestamp=timestamp_ms,
        attributes=ATTR_CONTROL if batch.control else 0,
        partition_leader_epoch=batch.epoch,
    )


def decode_batch(buf: bytes | memoryview, at: int = 0) -> Batch:
    """The Batch encoded at ``buf[at:]`` (whole and checked by the caller)."""
    header = parse_header(buf, at)
    records = decode_records(buf, header)
    return Batch(
        header.base_offset,
        header.partition_leader_epoch,
        tuple(record.value or b"" for record in records),
        header.is_control,
    )


@dataclass(slots=True)
class _Entry:
    """Where one batch lies: its offsets, its segment and its bytes in that segment."""

    base_offset: int
    end_offset: int
    segment: int  # the segment's base offset
    position: int
    size: int


class MetadataLogStore:
    """The durable metadata log of one node. ``load`` first, then ``persist``.

    ``metadata_log_dir`` is ``metadata.log.dir``; the files live in its
    ``__cluster_metadata-0`` subdirectory. ``voters`` (node ids) are written into
    quorum-state as currentVoters, as Kafka's static quorums do. ``sync=False`` skips
    every fsync (tests and benchmarks only: a crash may then lose anything).
    """

    def __init__(
        self,
        metadata_log_dir: Path | str,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        voters: Iterable[int] | None = None,
        sync: bool = True,
    ) -> None:
        self.directory = metadata_partition_dir(metadata_log_dir)
        self.segment_bytes = segment_bytes
        self.voters = None if voters is None else sorted(voters)
        self.sync = sync
        self._entries: list[_Entry] = []
        self._bases: list[int] = []  # base offsets of _entries, for bisect
        self._segments: dict[int, int] = {}  # segment base offset -> size in bytes
        self._active_fd: int | None = None
        self._active_base = 0
        self._quorum_state: QuorumState | None = None
        self._snapshot_id: SnapshotId | None = None
        self._loaded = False

    # -- introspection ------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset the log still holds (or would hold, when empty)."""
        if self._entries:
            return self._entries[0].base_offset
        return self._active_base

    @property
    def log_end_offset(self) -> int:
        return self._entries[-1].end_offset if self._entries else self._active_base

    @property
    def segments(self) -> list[int]:
        return sorted(self._segments)

    @property
    def snapshot_id(self) -> SnapshotId | None:
        return self._snapshot_id

    def _segment_path(self, base: int) -> Path:
        return self.directory / segment_name(base)

    # -- start-up ---------------------------------------------------------------------

    def load(self) -> tuple[QuorumState, Snapshot | None, list[Batch]]:
        """Recover the directory and return (quorum state, latest snapshot, batches).

        The batches are those after the snapshot (a batch ending at or before its end
        offset is covered by it and left out). A damaged tail is cut off first.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        self._close_active()
        self._entries, self._bases, self._segments = [], [], {}
        state = read_quorum_state(self.directory / QUORUM_STATE_FILE)
        self._quorum_state = state
        snapshot = self._load_snapshots()
        self._snapshot_id = snapshot.snapshot_id if snapshot is not None else None
        batches = self._recover_segments()
        self._loaded = True
        if snapshot is not None:
            covered = snapshot.snapshot_id.end_offset
            batches = [batch for batch in batches if batch.end_offset > covered]
            if self.log_end_offset < covered:
                self._reset_at(covered)  # a log the snapshot passed continues after it
        return state or QuorumState(), snapshot, batches

    def _load_snapshots(self) -> Snapshot | None:
        found: list[tuple[SnapshotId, Path]] = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.endswith(SNAPSHOT_SUFFIX + PARTIAL_SUFFIX) or entry.name.endswith(
                    ".tmp"
                ):
                    log.info("removing the partial file %s", entry.path)
                    os.unlink(entry.path)
                    continue
                snapshot_id = parse_snapshot_name(entry.name)
                if snapshot_id is not None:
                    found.append((snapshot_id, Path(entry.path)))
        if not found:
            return None
        found.sort(key=lambda item: (item[0].end_offset, item[0].epoch))
        newest_id, newest_path = found[-1]
        unlink_all(str(path) for _, path in found[:-1])
        return Snapshot(newest_id, newest_path.read_bytes())

    def _recover_segments(self) -> list[Batch]:
        bases = sorted(
            int(name[:20])
            for name in os.listdir(self.directory)
            if name.endswith(LOG_SUFFIX) and len(name) == 24 and name[:20].isdigit()
        )
        batches: list[Batch] = []
        expected: int | None = None
        for i, base in enumerate(bases):
            path = self._segment_path(base)
            if expected is not None and base != expected:
                self._drop_segments(
                    bases[i:], f"segment {path.name} does not follow offset {expected}"
                )
                break
            data = path.read_bytes()
            good, reason = self._scan(data, base, batches)
            self._segments[base] = good
            expected = self._entries[-1].end_offset if self._entries else base
            if good < len(data):
                self._cut(path, good, len(data) - good, reason)
                self._drop_segments(bases[i + 1 :], f"{path.name} was damaged")
                break
        if not self._segments:
            self._reset_at(self._snapshot_id.end_offset if self._snapshot_id else 0)
        else:
            self._active_base = max(self._segments)
            self._open_active()
        return batches

    def _scan(self, data: bytes, segment: int, batches: list[Batch]) -> tuple[int, str]:
        """Read the batches of one segment into ``batches`` and the index; returns how many
        bytes are good and, if not all, why the rest is not."""
        view = memoryview(data)
        position = 0
        next_offset = self._entries[-1].end_offset if self._entries else segment
        while position < len(data):
            if len(data) - position < HEADER_SIZE:
                return position, "torn batch header"
            try:
                header = parse_header(view, position)
            except CorruptBatchError as exc:
                return position, str(exc)
            if position + header.size > len(data):
                return position, "torn batch"
            if header.base_offset != next_offset:
                return position, f"batch offset {header.base_offset} where {next_offset} was due"
            if not crc_ok(view, header):
                return position, "CRC32C mismatch"
            try:
                batch = decode_batch(view, position)
            except CorruptBatchError as exc:
                return position, str(exc)
            if batch.end_offset != header.next_offset:
                return position, "record count does not match the offsets"
            batches.append(batch)
            self._index(_Entry(batch.base_offset, batch.end_offset, segment, position, header.size))
            next_offset = batch.end_offset
            position += header.size
        return position, ""

    def _cut(self, path: Path, at: int, count: int, reason: str) -> None:
        log.warning("truncated %d bytes off %s at position %d (%s)", count, path, at, reason)
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, at)
            if self.sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _drop_segments(self, bases: Sequence[int], reason: str) -> None:
        for base in bases:
            log.warning("dropping metadata log segment %s: %s", segment_name(base), reason)
        unlink_all(str(self._segment_path(base)) for base in bases)
        if bases and self.sync:
            fsync_dir(self.directory)

    def _index(self, entry: _Entry) -> None:
        self._entries.append(entry)
        self._bases.append(entry.base_offset)

    # -- segments -----------------------------------------------------------------------

    def _open_active(self) -> None:
        self._close_active()
        self._active_fd = os.open(
            self._segment_path(self._active_base), os.O_WRONLY | os.O_CREAT, 0o644
        )

    def _close_active(self) -> None:
        if self._active_fd is not None:
            os.close(self._active_fd)
            self._active_fd = None

    def _new_segment(self, base: int) -> None:
        """Start a new empty active segment at ``base`` (the old one synced first)."""
        if self._active_fd is not None and self.sync:
            os.fsync(self._active_fd)
        self._active_base = base
        self._segments[base] = 0
        self._open_active()
        if self.sync:
            fsync_dir(self.directory)

    def _reset_at(self, offset: int) -> None:
        """Remove every segment and start an empty log whose next offset is ``offset``."""
        self._close_active()
        old = [base for base in self._segments if base != offset]
        unlink_all(str(self._segment_path(base)) for base in old)
        self._entries, self._bases = [], []
        self._segments = {}
        path = self._segment_path(offset)
        if path.exists():
            os.truncate(path, 0)
        self._new_segment(offset)

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.load()

    # -- the durable half of Ready -----------------------------------------------------------

    def persist(
        self,
        *,
        quorum_state: QuorumState | None = None,
        snapshot: Snapshot | None = None,
        truncate_to: int | None = None,
        append: Sequence[Batch] = (),
        delete_before: int | None = None,
    ) -> None:
        """Make one Ready durable, in this order: quorum state (when it changed), a
        snapshot received from the leader (the log before it is gone: the log restarts,
        empty, at the snapshot's end), truncation, appends (one fsync), deletion of
        what the snapshot covers."""
        self._ensure_loaded()
        if quorum_state is not None:
            self.save_quorum_state(quorum_state)
        if snapshot is not None:
            self.save_snapshot(snapshot)
            self._reset_at(snapshot.snapshot_id.end_offset)
        if truncate_to is not None:
            self.truncate_to(truncate_to)
        if append:
            self.append(append)
            self.flush()
        if delete_before is not None:
            self.delete_before(delete_before)

    def save_quorum_state(self, state: QuorumState) -> None:
        """Replace quorum-state atomically; a state equal to the last written is skipped."""
        self._ensure_loaded()
        if state == self._quorum_state:
            return
        write_quorum_state(self.directory / QUORUM_STATE_FILE, state, self.voters, sync=self.sync)
        self._quorum_state = state

    def append(self, batches: Sequence[Batch]) -> None:
        """Write ``batches`` after the log's end (not yet fsynced: ``flush``). The first must
        start at the log end offset, or anywhere if the log is empty (a log that restarts
        after a snapshot); each next one where the previous ended."""
        self._ensure_loaded()
        now_ms = int(time.time() * 1000)
        pending = bytearray()
        pending_start = self._segments[self._active_base]
        for batch in batches:
            end = self.log_end_offset
            if batch.base_offset != end:
                if self._entries or pending:
                    raise MetadataLogError(
                        f"append at offset {batch.base_offset} but the metadata log ends at {end}"
                    )
                self._reset_at(batch.base_offset)
                pending_start = 0
            data = encode_batch(batch, now_ms)
            size = self._segments[self._active_base]
            if size > 0 and size + len(data) > self.segment_bytes:
                self._write(pending, pending_start)
                pending = bytearray()
                self._new_segment(batch.base_offset)
                pending_start = size = 0
            pending += data
            self._index(
                _Entry(batch.base_offset, batch.end_offset, self._active_base, size, len(data))
            )
            self._segments[self._active_base] = size + len(data)
        self._write(pending, pending_start)

    def _write(self, data: bytearray, position: int) -> None:
        if not data:
            return
        assert self._active_fd is not None
        view = memoryview(data)
        while view:
            written = os.pwrite(self._active_fd, view, position)
            view = view[written:]
            position += written

    def flush(self) -> None:
        """fsync the active segment (earlier ones were synced as they were closed)."""
        if self.sync and self._active_fd is not None:
            os.fsync(self._active_fd)

    def truncate_to(self, offset: int) -> None:
        """Remove every record at ``offset`` and after. A batch holding ``offset`` in its
        middle is rewritten with the records before it."""
        self._ensure_loaded()
        if offset >= self.log_end_offset:
            return
        if offset <= self.log_start_offset:
            self._reset_at(max(offset, 0))  # nothing is left: the log restarts at offset
            return
        i = bisect_right(self._bases, offset) - 1  # the batch holding offset
        cut = self._entries[i]
        keep = self._shortened(cut, offset) if cut.base_offset < offset else None
        del self._entries[i:]
        del self._bases[i:]
        for base in [b for b in self._segments if b > cut.segment]:
            del self._segments[base]
            os.unlink(self._segment_path(base))
        if cut.segment != self._active_base:
            self._active_base = cut.segment
            self._open_active()
        assert self._active_fd is not None
        os.ftruncate(self._active_fd, cut.position)
        self._segments[cut.segment] = cut.position
        if keep is not None:
            self._write(bytearray(keep), cut.position)
            self._index(_Entry(cut.base_offset, offset, cut.segment, cut.position, len(keep)))
            self._segments[cut.segment] = cut.position + len(keep)
        if self.sync:
            os.fsync(self._active_fd)
            fsync_dir(self.directory)

    def _shortened(self, entry: _Entry, offset: int) -> bytes:
        """The batch at ``entry`` re-encoded with its records below ``offset`` only."""
        with open(self._segment_path(entry.segment), "rb") as file:
            file.seek(entry.position)
            data = file.read(entry.size)
        header = parse_header(data, 0)
        batch = decode_batch(data)
        kept = Batch(
            batch.base_offset,
            batch.epoch,
            batch.records[: offset - batch.base_offset],
            batch.control,
        )
        return encode_batch(kept, header.base_timestamp)

    def delete_before(self, offset: int) -> None:
        """Drop what lies wholly below ``offset`` (a snapshot covers it): whole segments,
        or the whole log when it ends at or before ``offset``."""
        self._ensure_loaded()
        if offset >= self.log_end_offset:
            if self._entries or self._active_base != offset:
                self._reset_at(offset)
            return
        bases = sorted(self._segments)
        gone = []
        for base, following in zip(bases, bases[1:], strict=False):
            if following <= offset:
                gone.append(base)
        if not gone:
            return
        first_kept = bisect_left(self._bases, bases[len(gone)])
        del self._entries[:first_kept]
        del self._bases[:first_kept]
        for base in gone:
            del self._segments[base]
        unlink_all(str(self._segment_path(base)) for base in gone)
        if self.sync:
            fsync_dir(self.directory)

    # -- snapshots -------------------------------------------------------------------

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Write ``snapshot`` atomically and delete the older ones. The active segment
        is rolled so that a later ``delete_before`` can free the segment the snapshot
        covers."""
        self._ensure_loaded()
        path = self.directory / snapshot_name(snapshot.snapshot_id)
        partial = f"{path}{PARTIAL_SUFFIX}"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(snapshot.data)
            while view:
                view = view[os.write(fd, view) :]
            if self.sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)
        if self.sync:
            fsync_dir(self.directory)
        current = self._snapshot_id
        if current is None or (current.end_offset, current.epoch) <= (
            snapshot.snapshot_id.end_offset,
            snapshot.snapshot_id.epoch,
        ):
            self._snapshot_id = snapshot.snapshot_id
        self._delete_older_snapshots()
        if self._entries and self._segments[self._active_base] > 0:
            self._new_segment(self.log_end_offset)

    def _delete_older_snapshots(self) -> None:
        newest = self._snapshot_id
        if newest is None:
            return
        older = []
        for name in os.listdir(self.directory):
            snapshot_id = parse_snapshot_name(name)
            if snapshot_id is not None and snapshot_id != newest:
                older.append(str(self.directory / name))
        if unlink_all(older) and self.sync:
            fsync_dir(self.directory)

    def read_snapshot(self) -> Snapshot | None:
        """The newest snapshot on disk, read again (None if there is none)."""
        if self._snapshot_id is None:
            return None
        path = self.directory / snapshot_name(self._snapshot_id)
        return Snapshot(self._snapshot_id, path.read_bytes())

    def close(self) -> None:
        """fsync and close the active segment."""
        if self._active_fd is not None:
            self.flush()
        self._close_active()
        self._loaded = False
