"""Producer state snapshot files: ``{offset:020d}.snapshot`` in a partition directory.

Owns Kafka's snapshot format (ProducerStateManager, PRODUCER_SNAPSHOT_VERSION 1), all
big-endian: int16 version 1, uint32 CRC32C of every byte after the CRC, int32 entry
count, then per producer int64 producerId, int16 epoch, int32 lastSequence, int64
lastOffset, int32 offsetDelta (lastOffset - firstOffset of its last batch), int64
timestamp, int32 coordinatorEpoch, int64 currentTxnFirstOffset (-1: none). The
offset in the name is the log end offset the state is valid at. Owns encoding,
decoding with its checks (``CorruptSnapshotError``), listing, crash-safe writing
(temporary file, fsync, rename) and removal.
Does not own: what goes into an entry or how it is applied (producer_state.py), nor
when snapshots are taken, chosen or pruned (partition_log.py).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from strom.storage.durable import fsync_dir, unlink_all
from strom.storage.errors import StorageError

SNAPSHOT_SUFFIX = ".snapshot"
TMP_SUFFIX = ".tmp"
VERSION = 1
_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_AT = 6  # version + crc: the CRC covers everything from here


class CorruptSnapshotError(StorageError):
    """A snapshot file that is short, of an unknown version, or fails its CRC."""


class SnapshotEntry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int  # -1: no data batch known (only markers)
    last_offset: int  # last offset of the producer's last data batch; -1 if none
    offset_delta: int  # last offset - first offset of that batch
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no open transaction


def encode(entries: list[SnapshotEntry]) -> bytes:
    body = bytearray(_COUNT.pack(len(entries)))
    for entry in entries:
        body += _ENTRY.pack(*entry)
    return _VERSION.pack(VERSION) + _CRC.pack(crc32c(body)) + bytes(body)


def decode(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _ENTRIES_AT + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is too short")
    (version,) = _VERSION.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    (crc,) = _CRC.unpack_from(data, 2)
    if crc32c(memoryview(data)[_ENTRIES_AT:]) != crc:
        raise CorruptSnapshotError("snapshot CRC32C mismatch")
    (count,) = _COUNT.unpack_from(data, _ENTRIES_AT)
    at = _ENTRIES_AT + _COUNT.size
    if count < 0 or len(data) - at != count * _ENTRY.size:
        raise CorruptSnapshotError(f"{count} entries do not fill {len(data) - at} bytes")
    return [SnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(data[at:])]


def snapshot_path(directory: Path | str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def parse_name(name: str) -> int | None:
    """The offset of a snapshot file name; None for any other name."""
    if len(name) == 29 and name.endswith(SNAPSHOT_SUFFIX) and name[:20].isdigit():
        return int(name[:20])
    return None


def list_snapshots(directory: Path | str) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(o for o in map(parse_name, names) if o is not None)


def read(directory: Path | str, offset: int) -> list[SnapshotEntry]:
    with open(snapshot_path(directory, offset), "rb") as f:
        return decode(f.read())


def write(
    directory: Path | str, offset: int, entries: list[SnapshotEntry], *, sync_dir: bool = True
) -> None:
    """Write the snapshot at ``offset`` so that a crash leaves it whole or absent: a
    temporary file, fsynced, renamed into place; the directory is fsynced too unless
    ``sync_dir`` is False (the caller's next flush does it)."""
    path = snapshot_path(directory, offset)
    tmp = path + TMP_SUFFIX
    data = encode(entries)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(directory)


def delete(directory: Path | str, offsets: list[int]) -> None:
    unlink_all(snapshot_path(directory, offset) for offset in offsets)
