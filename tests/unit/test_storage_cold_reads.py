"""Reads that must not wait on the disk: bytes of a segment that are not in the page cache
raise ColdRead (the event loop then warms them on a thread) instead of being waited
for, small reads (pread) and large ones (memory mapped) alike; once warmed, the same
read returns exactly what a blocking read returns.

The page cache is emptied of a file with fsync and POSIX_FADV_DONTNEED (clean pages of
a file nobody maps go); real files throughout."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from strom.protocol.records import build_batch, validate_batches
from strom.storage import FileHandleCache, LogConfig, PartitionLog
from strom.storage.segment import MAPPED_READ_BYTES, ColdRead, cached_pread

VALUE_BYTES = 16 << 10


def filled_log(directory: Path, batches: int) -> tuple[PartitionLog, list[bytes]]:
    handles = FileHandleCache()
    plog = PartitionLog.open(directory, "events", 0, LogConfig(), handles)
    stored = []
    for index in range(batches):
        value = (b"batch-%06d:" % index) * (VALUE_BYTES // 13)
        buf = bytearray(build_batch([(b"k", value)], base_timestamp=int(time.time() * 1000)))
        plog.append(buf, validate_batches(buf), leader_epoch=0)
        stored.append(bytes(buf))
    plog.flush()
    return plog, stored


def evict(directory: Path) -> bool:
    """Drop the log files' pages from the page cache; False if this kernel kept them."""
    evicted = True
    for path in directory.glob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            evicted = evicted and cached_pread(fd, 4096, 0) is None
        finally:
            os.close(fd)
    return evicted


@pytest.mark.parametrize("max_bytes", [64 << 10, 2 * MAPPED_READ_BYTES], ids=["pread", "mapped"])
def test_a_cold_read_raises_then_reads_once_warmed(tmp_path: Path, max_bytes: int) -> None:
    plog, stored = filled_log(tmp_path, 160)  # about 2.5 MiB
    fitting = []  # whole batches from the first, up to max_bytes
    for batch in stored:
        if sum(map(len, fitting)) + len(batch) > max_bytes:
            break
        fitting.append(batch)
    assert evict(tmp_path), "the page cache kept the file: nothing to test here"
    with pytest.raises(ColdRead) as raised:
        plog.read(0, max_bytes, wait_for_disk=False)
    cold = raised.value
    assert cold.start == 0 and cold.length > 0
    cold.warm()
    assert bytes(plog.read(0, max_bytes, wait_for_disk=False)) == b"".join(fitting)


def test_a_read_from_the_cache_does_not_raise(tmp_path: Path) -> None:
    plog, stored = filled_log(tmp_path, 8)
    everything = b"".join(stored)
    assert bytes(plog.read(0, 1 << 20, wait_for_disk=False)) == everything
    assert bytes(plog.read(4, 1 << 20, wait_for_disk=False)) == b"".join(stored[4:])


def test_a_cold_read_past_the_first_batch_names_the_bytes_it_wanted(tmp_path: Path) -> None:
    plog, stored = filled_log(tmp_path, 64)
    assert evict(tmp_path)
    with pytest.raises(ColdRead) as raised:
        plog.read(32, 64 << 10, wait_for_disk=False)
    cold = raised.value
    position_of_32 = sum(len(batch) for batch in stored[:32])
    # the index points at or before the batch; the bytes wanted reach it
    assert cold.start <= position_of_32 < cold.start + cold.length
    cold.warm()
    data = bytes(plog.read(32, 64 << 10, wait_for_disk=False))
    assert data == b"".join(stored[32:])[: len(data)] and data
