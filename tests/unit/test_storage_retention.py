"""Retention on real files: retention.ms and retention.bytes delete whole closed
segments (never the active one), move the log start offset, and retired files wait
file.delete.delay.ms as ``*.deleted`` before they are unlinked."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.records import build_batch, validate_batches
from strom.storage import (
    FileHandleCache,
    LogConfig,
    LogManager,
    OffsetOutOfRangeError,
    PartitionLog,
)

NOW = 1_800_000_000_000
HOUR = 3_600_000


def _append(plog: PartitionLog, ts: int, n: int = 5) -> int:
    buf = bytearray(build_batch([(b"k", b"v" * 50)] * n, base_timestamp=ts))
    return plog.append(buf, validate_batches(buf))


def _log(tmp_path: Path, handles: FileHandleCache, **config) -> PartitionLog:
    # One batch (5 records, ~340 bytes) per segment: each append after the first rolls.
    config.setdefault("segment_bytes", 400)
    return PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(**config), handles)


def _files(plog: PartitionLog, suffix: str) -> list[str]:
    return sorted(p.name for p in plog.directory.iterdir() if p.name.endswith(suffix))


def test_retention_by_time_deletes_old_closed_segments(tmp_path, handles):
    plog = _log(tmp_path, handles, retention_ms=10 * HOUR, file_delete_delay_ms=0)
    ages = [30, 20, 11, 9, 1, 50]  # hours; a young segment stops the walk (the 50h one stays)
    for age in ages:
        _append(plog, NOW - age * HOUR)
    assert plog.segments() == [0, 5, 10, 15, 20, 25]
    assert plog.enforce_retention(NOW) == 3
    assert plog.segments() == [15, 20, 25]
    assert plog.log_start_offset == 15
    assert _files(plog, ".log") == [f"{b:020d}.log" for b in (15, 20, 25)]
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(14, 1000)
    assert plog.read(15, 100_000)  # still readable from the new start
    assert plog.enforce_retention(NOW) == 0


def test_active_segment_is_never_deleted(tmp_path, handles):
    plog = _log(tmp_path, handles, retention_ms=HOUR, file_delete_delay_ms=0)
    _append(plog, NOW - 100 * HOUR)
    _append(plog, NOW - 100 * HOUR)
    assert plog.enforce_retention(NOW) == 1
    assert plog.segments() == [5]  # the active one, although expired, stays
    assert plog.log_start_offset == 5 and plog.log_end_offset == 10


def test_retention_by_size_keeps_at_least_the_limit(tmp_path, handles):
    plog = _log(tmp_path, handles, retention_ms=-1, file_delete_delay_ms=0)
    for _ in range(6):
        _append(plog, NOW)
    segment_size = plog.size_bytes // 6
    plog.update_config(
        LogConfig(
            segment_bytes=400,
            retention_ms=-1,
            retention_bytes=3 * segment_size + 10,
            file_delete_delay_ms=0,
        )
    )
    assert plog.enforce_retention(NOW) == 2  # 6 -> 4 segments; 3 would be under the limit
    assert plog.segments() == [10, 15, 20, 25]
    assert plog.log_start_offset == 10
    assert plog.size_bytes >= 3 * segment_size + 10


def test_retention_needs_the_delete_policy(tmp_path, handles):
    plog = _log(tmp_path, handles, retention_ms=HOUR, cleanup_policy="compact")
    _append(plog, NOW - 100 * HOUR)
    _append(plog, NOW - 100 * HOUR)
    assert plog.enforce_retention(NOW) == 0
    assert plog.segments() == [0, 5]


def test_deleted_files_wait_for_the_delay(tmp_path, handles):
    plog = _log(tmp_path, handles, retention_ms=HOUR, file_delete_delay_ms=60_000)
    for _ in range(3):
        _append(plog, NOW - 100 * HOUR)
    assert plog.enforce_retention(NOW) == 2
    assert _files(plog, ".log.deleted") == [f"{b:020d}.log.deleted" for b in (0, 5)]
    assert _files(plog, ".log") == [f"{10:020d}.log"]
    assert plog.purge_deleted(NOW + 59_000) == 0
    assert plog.purge_deleted(NOW + 60_000) == 6  # .log, .index, .timeindex of each
    assert _files(plog, ".deleted") == []


def test_leftover_deleted_files_are_removed_at_open(tmp_path, handles):
    plog = _log(tmp_path, handles, retention_ms=HOUR, file_delete_delay_ms=60_000)
    for _ in range(3):
        _append(plog, NOW - 100 * HOUR)
    plog.enforce_retention(NOW)
    plog.flush()  # a crash now: the .deleted files were never unlinked
    reopened = _log(tmp_path, FileHandleCache(8), retention_ms=HOUR)
    assert _files(reopened, ".deleted") == []
    assert reopened.segments() == [10]


def test_log_manager_checks_retention_on_its_interval(tmp_path):
    manager = LogManager(tmp_path, LogConfig(), retention_check_interval_ms=1000)
    manager.load()
    config = LogConfig(segment_bytes=400, retention_ms=HOUR, file_delete_delay_ms=0)
    plog = manager.create("t", 0, config)
    for _ in range(3):
        _append(plog, NOW - 100 * HOUR)
    manager.maintain(NOW)
    assert plog.segments() == [10]
    assert plog.log_start_offset == 10
    manager.checkpoint()
    manager.shutdown()
    manager = LogManager(tmp_path, LogConfig())
    manager.load(lambda topic: config)
    assert manager.get("t", 0).log_start_offset == 10
    manager.shutdown()
