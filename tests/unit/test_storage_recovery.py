"""Start-up of a PartitionLog from existing files: clean restarts, torn and corrupt
tails after a crash, missing or partial indexes, and the recovery point."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from strom.protocol.records import build_batch, iter_headers, validate_batches
from strom.storage import FileHandleCache, LogConfig, PartitionLog


def make_batch(n: int, ts: int = 1000) -> bytearray:
    return bytearray(build_batch([(b"key", b"value-%d" % i) for i in range(n)], base_timestamp=ts))


def append(plog: PartitionLog, n: int, ts: int = 1000) -> int:
    buf = make_batch(n, ts)
    return plog.append(buf, validate_batches(buf))


def bases_of(data: bytes) -> list[int]:
    return [h.base_offset for h in iter_headers(data)]


CONFIG = LogConfig(index_interval_bytes=200, segment_bytes=1000)


def reopen(path: Path, handles: FileHandleCache, **kwargs) -> PartitionLog:
    return PartitionLog.open(path, "t", 0, CONFIG, handles, **kwargs)


def filled(tmp_path: Path, handles: FileHandleCache, batches: int = 30) -> PartitionLog:
    plog = reopen(tmp_path / "t-0", handles)
    for i in range(batches):
        append(plog, 3, ts=1000 + i)
    return plog


def seg_file(plog: PartitionLog, base: int, suffix: str) -> Path:
    return plog.directory / f"{base:020d}{suffix}"


def test_clean_restart_keeps_everything_and_continues_offsets(tmp_path, handles):
    plog = filled(tmp_path, handles)
    segments, end, data = plog.segments(), plog.log_end_offset, plog.read(0, 1 << 20)
    ts_lookup, max_ts = plog.offset_for_timestamp(1017), plog.max_timestamp()
    plog.close()
    assert len(handles) == 0
    plog = reopen(tmp_path / "t-0", handles, clean=True)
    assert plog.segments() == segments and len(segments) > 2
    assert plog.log_end_offset == plog.high_watermark == plog.recovery_point == end
    assert plog.read(0, 1 << 20) == data
    assert plog.offset_for_timestamp(1017) == ts_lookup == (51, 1017)
    assert plog.max_timestamp() == max_ts == (87, 1029)  # the first record holding it
    assert append(plog, 2, ts=2000) == end
    assert plog.max_timestamp() == (end, 2000)


def test_crash_with_torn_tail_keeps_intact_batches(tmp_path, handles, caplog):
    plog = filled(tmp_path, handles)
    end = plog.log_end_offset
    active = plog.segments()[-1]
    plog.close()
    log_file = seg_file(plog, active, ".log")
    intact = log_file.stat().st_size
    half = make_batch(3)[:40]
    with open(log_file, "ab") as f:
        f.write(make_batch(3)[:-7])  # a torn batch
    with caplog.at_level(logging.WARNING, logger="strom.storage"):
        plog = reopen(tmp_path / "t-0", handles, recovery_point=0)
    assert log_file.stat().st_size == intact
    assert plog.log_end_offset == end
    cut = [r for r in caplog.records if "truncated" in r.getMessage()]
    assert len(cut) == 1 and str(len(make_batch(3)) - 7) in cut[0].getMessage()
    assert append(plog, 3) == end
    assert bases_of(plog.read(end - 3, 1 << 20)) == [end - 3, end]
    plog.close()
    with open(log_file, "ab") as f:
        f.write(half)  # torn inside the header
    plog = reopen(tmp_path / "t-0", handles, recovery_point=end)
    assert plog.log_end_offset == end + 3


def test_crash_mid_batch_truncation_and_lost_index(tmp_path, handles):
    plog = filled(tmp_path, handles)
    active = plog.segments()[-1]
    data = plog.read(active, 1 << 20)
    headers = list(iter_headers(data))
    assert len(headers) >= 3
    plog.close()
    log_file = seg_file(plog, active, ".log")
    # cut the file in the middle of its third batch and lose its index
    cut_at = headers[2].position + headers[2].size // 2
    os.truncate(log_file, cut_at)
    seg_file(plog, active, ".index").unlink()
    plog = reopen(tmp_path / "t-0", handles, recovery_point=active)
    assert plog.log_end_offset == headers[1].next_offset
    assert log_file.stat().st_size == headers[2].position
    assert seg_file(plog, active, ".index").exists()
    assert bases_of(plog.read(active, 1 << 20)) == [h.base_offset for h in headers[:2]]
    assert append(plog, 1) == headers[1].next_offset


def test_garbage_tail_is_cut(tmp_path, handles):
    plog = filled(tmp_path, handles, batches=5)
    end = plog.log_end_offset
    plog.close()
    log_file = seg_file(plog, 0, ".log")
    size = log_file.stat().st_size
    with open(log_file, "ab") as f:
        f.write(os.urandom(3000))
    plog = reopen(tmp_path / "t-0", handles)
    assert plog.log_end_offset == end and log_file.stat().st_size == size


def test_corrupt_batch_in_an_old_segment_drops_later_segments(tmp_path, handles):
    plog = filled(tmp_path, handles)
    segments = plog.segments()
    plog.close()
    first = seg_file(plog, 0, ".log")
    headers = list(iter_headers(first.read_bytes()))
    raw = bytearray(first.read_bytes())
    raw[headers[3].position + 70] ^= 0xFF  # inside the records: CRC mismatch
    first.write_bytes(raw)
    plog = reopen(tmp_path / "t-0", handles, recovery_point=0)
    assert plog.segments() == [0]
    assert plog.log_end_offset == headers[3].base_offset
    for base in segments[1:]:
        assert not seg_file(plog, base, ".log").exists()
        assert not seg_file(plog, base, ".index").exists()


def test_segments_below_the_recovery_point_are_trusted(tmp_path, handles):
    plog = filled(tmp_path, handles)
    end, segments = plog.log_end_offset, plog.segments()
    plog.close()
    first = seg_file(plog, 0, ".log")
    raw = bytearray(first.read_bytes())
    raw[100] ^= 0xFF
    first.write_bytes(raw)
    plog = reopen(tmp_path / "t-0", handles, recovery_point=segments[-1])
    assert plog.segments() == segments and plog.log_end_offset == end


def test_clean_open_rebuilds_missing_or_partial_indexes(tmp_path, handles):
    plog = filled(tmp_path, handles)
    data = plog.read(0, 1 << 20)
    segments = plog.segments()
    expected_index = seg_file(plog, segments[0], ".index").read_bytes()
    expected_time = seg_file(plog, segments[1], ".timeindex").read_bytes()
    assert expected_index and expected_time
    plog.close()
    seg_file(plog, segments[0], ".index").unlink()
    with open(seg_file(plog, segments[1], ".timeindex"), "ab") as f:
        f.write(b"\x00\x01\x02")
    with open(seg_file(plog, segments[-1], ".index"), "ab") as f:
        f.write(b"\x00")
    plog = reopen(tmp_path / "t-0", handles, clean=True)
    assert seg_file(plog, segments[0], ".index").read_bytes() == expected_index
    assert seg_file(plog, segments[1], ".timeindex").read_bytes() == expected_time
    assert seg_file(plog, segments[-1], ".index").stat().st_size % 8 == 0
    assert plog.read(0, 1 << 20) == data
    assert plog.offset_for_timestamp(1010) == (30, 1010)


def test_recovered_log_start_offset_is_clamped(tmp_path, handles):
    plog = filled(tmp_path, handles, batches=4)
    plog.close()
    plog = reopen(tmp_path / "t-0", handles, clean=True, log_start_offset=5)
    assert plog.log_start_offset == 5
    assert bases_of(plog.read(5, 1 << 20)) == [3, 6, 9]
    plog.close()
    plog = reopen(tmp_path / "t-0", handles, clean=True, log_start_offset=10**6)
    assert plog.log_start_offset == plog.log_end_offset == 12


def test_empty_log_starts_at_log_start_offset(tmp_path, handles):
    plog = reopen(tmp_path / "t-0", handles, log_start_offset=42)
    assert plog.segments() == [42] and plog.log_end_offset == 42
    assert append(plog, 1) == 42


def test_segment_age_after_restart_comes_from_the_first_batch(tmp_path, handles):
    config = LogConfig(segment_ms=60_000)
    now_ms = int(time.time() * 1000)
    plog = PartitionLog.open(tmp_path / "t-0", "t", 0, config, handles)
    append(plog, 1, ts=now_ms - 120_000)  # in-process age counts from the append
    append(plog, 1, ts=now_ms - 120_000)
    assert plog.segments() == [0]
    plog.close()
    plog = PartitionLog.open(tmp_path / "t-0", "t", 0, config, handles, clean=True)
    append(plog, 1, ts=now_ms)  # after a restart the first batch's timestamp says 2 min old
    assert plog.segments() == [0, 2]
    append(plog, 1, ts=now_ms)
    assert plog.segments() == [0, 2]


def _append_in_epoch(plog: PartitionLog, epoch: int, n: int = 3) -> int:
    buf = make_batch(n)
    return plog.append(buf, validate_batches(buf), leader_epoch=epoch)


def test_a_new_epochs_entry_lost_with_the_file_comes_back_from_the_batches(tmp_path, handles):
    """A new epoch is written to leader-epoch-checkpoint without fsync (the next flush
    fsyncs it): a power cut may leave the file without it. Recovery above the recovery
    point takes the epochs of the batches it recovered."""
    plog = reopen(tmp_path / "t-0", handles)
    plog.assign_epoch(1)
    for _ in range(10):
        _append_in_epoch(plog, 1)
    plog.flush()
    flushed = plog.log_end_offset
    stale = (plog.directory / "leader-epoch-checkpoint").read_bytes()
    plog.assign_epoch(2)
    second = plog.log_end_offset
    for _ in range(10):
        _append_in_epoch(plog, 2)
    assert plog.epochs.entries() == [(1, 0), (2, second)]
    (plog.directory / "leader-epoch-checkpoint").write_bytes(stale)  # the file lost it
    recovered = reopen(tmp_path / "t-0", FileHandleCache(), recovery_point=flushed)
    assert recovered.log_end_offset == plog.log_end_offset
    assert recovered.epochs.entries() == [(1, 0), (2, second)]
    assert recovered.end_offset_for_epoch(1) == (1, second)


def test_a_stale_entry_past_a_truncation_gives_way_to_the_recovered_batches(tmp_path, handles):
    """The file still says epoch 2 began at an offset the log was truncated below
    before epoch 3's batches were written there: recovery replaces that entry."""
    plog = reopen(tmp_path / "t-0", handles)
    plog.assign_epoch(1)
    for _ in range(5):
        _append_in_epoch(plog, 1)
    cut = plog.log_end_offset
    plog.assign_epoch(2)
    for _ in range(5):
        _append_in_epoch(plog, 2)
    stale = (plog.directory / "leader-epoch-checkpoint").read_bytes()  # [(1, 0), (2, cut)]
    plog.truncate_to(cut - 3)  # a follower told its log diverged
    plog.assign_epoch(3)
    third = plog.log_end_offset
    for _ in range(5):
        _append_in_epoch(plog, 3)
    (plog.directory / "leader-epoch-checkpoint").write_bytes(stale)
    recovered = reopen(tmp_path / "t-0", FileHandleCache(), recovery_point=third)
    assert recovered.epochs.entries() == [(1, 0), (3, third)]
