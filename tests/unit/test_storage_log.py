"""PartitionLog behaviour on real files: offsets, reads, rolls, indexes, timestamps,
DeleteRecords and the flush policy. Expected results come from a brute-force model
of the appended batches."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from log_reads import read_in_pieces

from strom.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    build_batch,
    crc_ok,
    iter_headers,
    read_header,
    validate_batches,
)
from strom.storage import FileHandleCache, LogConfig, OffsetOutOfRangeError, PartitionLog
from strom.storage import partition_log as partition_log_module
from strom.storage import segment as segment_module


@dataclass
class Written:
    base: int
    last: int
    max_ts: int
    size: int


def make_batch(n: int, ts: int = 1000, value_size: int = 20, stamps: list[int] | None = None):
    return bytearray(
        build_batch(
            [(b"k%d" % i, b"v" * value_size) for i in range(n)],
            base_timestamp=ts,
            timestamps=stamps,
        )
    )


def append_batches(plog: PartitionLog, bufs: list[bytearray], model: list[Written]) -> int:
    buf = bytearray().join(bufs)
    headers = validate_batches(buf)
    first = plog.append(buf, headers)
    for h in headers:
        model.append(Written(h.base_offset, h.last_offset, h.max_timestamp, h.size))
    return first


def expected_read(model: list[Written], offset: int, max_bytes: int, upper=None):
    out, total = [], 0
    for w in model:
        if w.last < offset:
            continue
        if upper is not None and w.base >= upper:
            break
        if out and total + w.size > max_bytes:
            break
        if not out and w.size > max_bytes:
            out.append(w.base)
            break
        out.append(w.base)
        total += w.size
    return out


def bases_of(data: bytes) -> list[int]:
    return [h.base_offset for h in iter_headers(data)]


def open_log(tmp_path: Path, handles: FileHandleCache, **config) -> PartitionLog:
    return PartitionLog.open(tmp_path / "events-0", "events", 0, LogConfig(**config), handles)


def test_append_assigns_offsets_and_round_trips(tmp_path, handles):
    plog = open_log(tmp_path, handles)
    assert plog.log_end_offset == 0 and plog.high_watermark == 0
    assert plog.read(0, 1000) == b""
    first = plog.append(*_validated(make_batch(5)))
    second = plog.append(*_validated(make_batch(3) + make_batch(2)), leader_epoch=7)
    assert (first, second) == (0, 5)
    assert plog.log_end_offset == plog.high_watermark == 10
    assert (plog.directory / f"{0:020d}.log").exists()
    data = plog.read(0, 1 << 20)
    headers = list(iter_headers(data))
    assert [(h.base_offset, h.record_count) for h in headers] == [(0, 5), (5, 3), (8, 2)]
    assert [h.partition_leader_epoch for h in headers] == [0, 7, 7]
    assert all(crc_ok(data, h) for h in headers)
    assert plog.size_bytes == len(data)


def _validated(buf: bytearray):
    return buf, validate_batches(buf)


def test_read_from_middle_of_batch_returns_whole_batch(tmp_path, handles):
    plog = open_log(tmp_path, handles)
    for _ in range(3):
        plog.append(*_validated(make_batch(10)))
    data = plog.read(14, 1 << 20)
    assert bases_of(data) == [10, 20]
    assert bases_of(plog.read(29, 1)) == [20]


def test_max_bytes_honoured_but_one_batch_always(tmp_path, handles):
    plog = open_log(tmp_path, handles)
    bufs = [make_batch(10, value_size=100) for _ in range(5)]
    size = len(bufs[0])
    for buf in bufs:
        plog.append(*_validated(buf))
    assert bases_of(plog.read(0, 1)) == [0]
    assert bases_of(plog.read(0, size)) == [0]
    assert bases_of(plog.read(0, 2 * size + 10)) == [0, 10]
    assert bases_of(plog.read(15, 3 * size - 1)) == [10, 20]
    assert len(plog.read(0, 100 * size)) == 5 * size


def test_upper_bound_excludes_batches_at_or_above(tmp_path, handles):
    plog = open_log(tmp_path, handles, index_interval_bytes=0)
    for _ in range(5):
        plog.append(*_validated(make_batch(10)))
    assert bases_of(plog.read(0, 1 << 20, upper_bound=30)) == [0, 10, 20]
    assert bases_of(plog.read(0, 1 << 20, upper_bound=31)) == [0, 10, 20, 30]
    assert plog.read(30, 1 << 20, upper_bound=30) == b""


def test_out_of_range(tmp_path, handles):
    plog = open_log(tmp_path, handles)
    plog.append(*_validated(make_batch(10)))
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(11, 100)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1, 100)
    assert plog.read(10, 100) == b""


def test_roll_by_segment_bytes_and_reads_across_segments(tmp_path, handles):
    batch_size = len(make_batch(4))
    plog = open_log(tmp_path, handles, segment_bytes=batch_size * 3 + 5)
    model: list[Written] = []
    for _ in range(10):
        append_batches(plog, [make_batch(4)], model)
    assert plog.segments() == [0, 12, 24, 36]
    names = sorted(os.listdir(plog.directory))
    assert f"{12:020d}.log" in names and f"{12:020d}.index" in names
    assert f"{12:020d}.timeindex" in names
    for offset in range(40):
        for max_bytes in (1, batch_size, 2 * batch_size + 1, 7 * batch_size, 1 << 20):
            assert bases_of(plog.read(offset, max_bytes)) == expected_read(model, offset, max_bytes)
    # one append never spans two segments
    append_batches(plog, [make_batch(4), make_batch(4)], model)  # 3 batches in segment 36
    append_batches(plog, [make_batch(4), make_batch(4)], model)
    assert plog.segments() == [0, 12, 24, 36, 48]
    assert bases_of(plog.read(48, 1 << 20)) == [48, 52]


def test_a_batch_bigger_than_segment_bytes_gets_its_own_segment(tmp_path, handles):
    plog = open_log(tmp_path, handles, segment_bytes=100)
    for _ in range(3):
        plog.append(*_validated(make_batch(5)))
    assert plog.segments() == [0, 5, 10]  # never an empty roll
    assert bases_of(plog.read(0, 1 << 20)) == [0, 5, 10]


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


def test_roll_by_segment_ms(tmp_path, handles, monkeypatch):
    clock = FakeClock(1_700_000_000.0)
    monkeypatch.setattr(partition_log_module, "time", clock)
    plog = open_log(tmp_path, handles, segment_ms=60_000)
    plog.append(*_validated(make_batch(2)))
    clock.now += 30
    plog.append(*_validated(make_batch(2)))
    assert plog.segments() == [0]
    clock.now += 31
    plog.append(*_validated(make_batch(2)))
    assert plog.segments() == [0, 4]
    clock.now += 59
    plog.append(*_validated(make_batch(2)))
    assert plog.segments() == [0, 4]
    assert bases_of(plog.read(0, 1 << 20)) == [0, 2, 4, 6]


def test_roll_when_index_is_full(tmp_path, handles):
    plog = open_log(tmp_path, handles, index_interval_bytes=0, segment_index_bytes=8 * 4)
    for _ in range(10):
        plog.append(*_validated(make_batch(1)))
    # index_interval 0: an entry per batch, four entries per index
    assert plog.segments() == [0, 4, 8]
    assert bases_of(plog.read(0, 1 << 20)) == list(range(10))


def _index_entries(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]


def _time_entries(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [struct.unpack_from(">qi", data, i) for i in range(0, len(data), 12)]


def test_index_entries_every_interval_bytes_and_lookups_match_brute_force(tmp_path, handles):
    interval = 1000
    plog = open_log(tmp_path, handles, index_interval_bytes=interval, segment_bytes=25_000)
    model: list[Written] = []
    record_times: list[tuple[int, int]] = []  # (offset, timestamp) of every record
    ts = 10_000
    for i in range(300):
        n = 1 + (i * 7) % 9
        # timestamps go mostly up with some going back
        ts += (i * 13) % 17 - 4
        stamps = [ts + (j * 3) % 5 for j in range(n)]
        base = append_batches(plog, [make_batch(n, stamps=stamps, value_size=10 + i % 50)], model)
        record_times.extend((base + j, stamp) for j, stamp in enumerate(stamps))
    plog.flush()
    assert len(plog.segments()) > 2
    # the offset index of each segment: one entry each time >= interval bytes went by
    for base in plog.segments():
        seg_batches = [
            w
            for w in model
            if w.base >= base
            and (
                base == plog.segments()[-1]
                or w.base < plog.segments()[plog.segments().index(base) + 1]
            )
        ]
        expected, since, position = [], 0, 0
        for w in seg_batches:
            if since >= interval:
                expected.append((w.base - base, position))
                since = 0
            since += w.size
            position += w.size
        entries = _index_entries(plog.directory / f"{base:020d}.index")
        assert entries == expected
        assert len(entries) >= sum(w.size for w in seg_batches) // (interval + 400) - 1
        times = _time_entries(plog.directory / f"{base:020d}.timeindex")
        assert [t for t, _ in times] == sorted({t for t, _ in times})
    for offset in range(0, plog.log_end_offset, 3):
        for max_bytes in (1, 500, 3000):
            assert bases_of(plog.read(offset, max_bytes)) == expected_read(model, offset, max_bytes)
    # per record: the first record whose timestamp is >= the target
    for target in range(9_990, ts + 10, 3):
        want = next(((o, t) for o, t in record_times if t >= target), None)
        assert plog.offset_for_timestamp(target) == want, target
    top = max(t for _, t in record_times)
    assert plog.max_timestamp() == next((o, t) for o, t in record_times if t == top)


def test_reads_use_the_index_not_a_scan(tmp_path, handles, monkeypatch):
    plog = open_log(tmp_path, handles, index_interval_bytes=4096)
    for _ in range(2000):
        plog.append(*_validated(make_batch(5, value_size=100)))
    assert plog.size_bytes > 1_000_000 and plog.segments() == [0]
    read_bytes = []
    real_pread = os.pread

    def counting_pread(fd, n, pos):
        data = real_pread(fd, n, pos)
        read_bytes.append(len(data))
        return data

    monkeypatch.setattr(segment_module.os, "pread", counting_pread)
    data = plog.read(7_777, 2000)
    assert bases_of(data)[0] == 7_775
    assert sum(read_bytes) < 30_000 and len(read_bytes) <= 2
    read_bytes.clear()
    assert plog.offset_for_timestamp(1000) == (0, 1000)
    assert sum(read_bytes) < 70_000


def test_offset_for_timestamp_and_max_timestamp(tmp_path, handles):
    plog = open_log(tmp_path, handles, segment_bytes=400, index_interval_bytes=100)
    assert plog.max_timestamp() == (-1, -1)
    assert plog.offset_for_timestamp(0) is None
    for ts in (100, 300, 200, 500, 400):
        plog.append(*_validated(make_batch(2, stamps=[ts - 50, ts])))
    assert len(plog.segments()) > 1
    # per record, not per batch: offsets 0-9 hold 50, 100, 250, 300, 150, 200, 450, ...
    assert plog.offset_for_timestamp(0) == (0, 50)
    assert plog.offset_for_timestamp(100) == (1, 100)
    assert plog.offset_for_timestamp(101) == (2, 250)
    assert plog.offset_for_timestamp(260) == (3, 300)
    assert plog.offset_for_timestamp(301) == (6, 450)
    assert plog.offset_for_timestamp(451) == (7, 500)
    assert plog.offset_for_timestamp(501) is None
    assert plog.max_timestamp() == (7, 500)
    plog.delete_records_before(3)
    assert plog.offset_for_timestamp(0) == (3, 300)


def test_log_append_time(tmp_path, handles):
    plog = open_log(tmp_path, handles, message_timestamp_type="LogAppendTime")
    buf, headers = _validated(make_batch(3, ts=5))
    plog.append(buf, headers, log_append_time_ms=123_456)
    data = plog.read(0, 1 << 20)
    header = read_header(data)
    assert header.max_timestamp == 123_456 and header.attributes & ATTR_TIMESTAMP_TYPE
    assert crc_ok(data, header)
    assert plog.max_timestamp() == (0, 123_456)  # every record has the append time
    assert plog.offset_for_timestamp(6) == (0, 123_456)


def test_delete_records_before_moves_start_and_deletes_whole_segments(tmp_path, handles):
    batch_size = len(make_batch(5))
    plog = open_log(tmp_path, handles, segment_bytes=2 * batch_size)
    for _ in range(7):
        plog.append(*_validated(make_batch(5)))
    assert plog.segments() == [0, 10, 20, 30]
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records_before(36)
    assert plog.delete_records_before(12) == 12
    assert plog.segments() == [10, 20, 30]  # segment 10 holds 12: kept whole
    assert not (plog.directory / f"{0:020d}.log").exists()
    assert not (plog.directory / f"{0:020d}.index").exists()
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(11, 100)
    assert bases_of(plog.read(12, 1 << 20)) == [10, 15, 20, 25, 30]
    assert plog.delete_records_before(5) == 12  # never moves back
    assert plog.delete_records_before(35) == 35
    assert plog.segments() == [30]  # the active segment stays
    assert plog.read(35, 100) == b""
    assert plog.append(*_validated(make_batch(1))) == 35


def test_flush_messages_advances_recovery_point(tmp_path, handles):
    plog = open_log(tmp_path, handles, flush_messages=10)
    plog.append(*_validated(make_batch(4)))
    plog.append(*_validated(make_batch(4)))
    assert plog.recovery_point == 0
    plog.append(*_validated(make_batch(4)))
    assert plog.recovery_point == 12
    plog.append(*_validated(make_batch(4)))
    assert plog.recovery_point == 12
    plog.flush()
    assert plog.recovery_point == 16


def test_flush_ms_via_maybe_flush(tmp_path, handles, monkeypatch):
    clock = FakeClock(1_700_000_000.0)
    monkeypatch.setattr(partition_log_module, "time", clock)
    plog = open_log(tmp_path, handles, flush_ms=1000)
    plog.append(*_validated(make_batch(4)))
    now_ms = int(clock.now * 1000)
    assert not plog.maybe_flush(now_ms + 999)
    assert plog.recovery_point == 0
    assert plog.maybe_flush(now_ms + 1000)
    assert plog.recovery_point == 4
    assert not plog.maybe_flush(now_ms + 5000)
    clock.now += 0.5
    plog.append(*_validated(make_batch(1)))
    assert plog.recovery_point == 4
    clock.now += 1.0
    plog.append(*_validated(make_batch(1)))  # the oldest unflushed append is 1 s old
    assert plog.recovery_point == 6


def test_never_flushes_by_default(tmp_path, handles):
    plog = open_log(tmp_path, handles)
    for _ in range(50):
        plog.append(*_validated(make_batch(10)))
    assert not plog.maybe_flush(1 << 60)
    assert plog.recovery_point == 0


def test_headers_must_cover_the_buffer(tmp_path, handles):
    plog = open_log(tmp_path, handles)
    buf, headers = _validated(make_batch(2) + make_batch(2))
    with pytest.raises(ValueError):
        plog.append(buf, headers[:1])
    with pytest.raises(ValueError):
        plog.append(buf, [])


def test_delete_removes_directory(tmp_path, handles):
    plog = open_log(tmp_path, handles)
    plog.append(*_validated(make_batch(2)))
    plog.delete()
    assert not (tmp_path / "events-0").exists()
    assert os.listdir(tmp_path) == []


def _pread_all(plog: PartitionLog, offset: int) -> bytes:
    """Everything from ``offset`` through reads too small to use a mapping."""
    return read_in_pieces(plog, offset, segment_module.MAPPED_READ_BYTES // 4)


def test_large_reads_come_from_a_mapping_and_match_small_reads(tmp_path, handles):
    plog = open_log(tmp_path, handles)
    for _ in range(60):
        plog.append(*_validated(make_batch(50, value_size=1000)))  # ~3 MB in all
    large = plog.read(0, 8 << 20)
    assert isinstance(large, memoryview)  # a view of the mapped file, not a copy
    assert bytes(large) == _pread_all(plog, 0) == (plog.directory / f"{0:020d}.log").read_bytes()
    middle = plog.read(1000, 2 << 20)
    assert bases_of(middle)[0] == 1000 and len(middle) <= 2 << 20
    assert bytes(middle) == _pread_all(plog, 1000)[: len(middle)]
    # Near the end there is less than MAPPED_READ_BYTES to send: read, not mapped.
    tail = plog.read(plog.log_end_offset - 100, 8 << 20)
    assert not isinstance(tail, memoryview) and bases_of(tail) == [2900, 2950]


def test_a_mapped_view_outlives_growth_and_deletion_of_its_file(tmp_path, handles):
    plog = open_log(tmp_path, handles)
    for _ in range(30):
        plog.append(*_validated(make_batch(50, value_size=1000)))
    before = plog.read(0, 8 << 20)
    snapshot = bytes(before)
    end = plog.log_end_offset
    for _ in range(30):
        plog.append(*_validated(make_batch(50, value_size=1000)))
    grown = plog.read(0, 8 << 20)  # the active segment grew past the mapping: remapped
    assert bases_of(grown)[-1] == plog.log_end_offset - 50 > end
    assert bytes(grown[: len(snapshot)]) == snapshot
    plog._roll()  # noqa: SLF001 - close the segment so that it can be deleted
    plog.append(*_validated(make_batch(1)))
    plog.delete_records_before(plog.log_end_offset - 1)
    assert not (plog.directory / f"{0:020d}.log").exists()
    assert bytes(before) == snapshot and bytes(grown[: len(snapshot)]) == snapshot


def test_mappings_are_bounded_and_give_back_their_descriptors(tmp_path, monkeypatch):
    from strom.storage import handles as handles_module

    monkeypatch.setattr(handles_module, "MAX_MAPPINGS", 2)

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    baseline = open_fds()
    cache = FileHandleCache(16)
    logs = [PartitionLog.open(tmp_path / f"m-{i}", "m", i, LogConfig(), cache) for i in range(5)]
    for plog in logs:
        for _ in range(25):  # more than MAPPED_READ_BYTES to read
            plog.append(*_validated(make_batch(50, value_size=1000)))
        assert isinstance(plog.read(0, 4 << 20), memoryview)
    cached = len(cache)  # segment and index fds the cache keeps open
    # Each live mapping holds one more descriptor; only the two newest are kept.
    assert open_fds() <= baseline + cached + 2
    cache.close_all()
    for plog in logs:
        plog.close()
    assert open_fds() == baseline
