"""The cleaner on real files: what it keeps, when it runs, its checkpoint, appends
during a cleaning in the worker process, and recovery from a crash at each step of the swap."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from log_reads import read_in_pieces

from strom.protocol.records import build_batch, decode_records, iter_headers, validate_batches
from strom.storage import FileHandleCache, LogConfig, LogManager, PartitionLog, swap
from strom.storage.checkpoint import read_checkpoint
from strom.storage.cleaner import (
    CLEANER_CHECKPOINT,
    UNLIMITED_IO,
    LogCleaner,
    build_cleaned_segments,
    can_leave_idle_priority,
)

NOW = 1_800_000_000_000
CONFIG = LogConfig(
    segment_bytes=600,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.0,
    file_delete_delay_ms=0,
    index_interval_bytes=64,
)


def _append(plog: PartitionLog, pairs, ts: int = NOW) -> int:
    buf = bytearray(build_batch(pairs, base_timestamp=ts))
    return plog.append(buf, validate_batches(buf))


def _records(plog: PartitionLog) -> dict[int, tuple]:
    data = plog.read(plog.log_start_offset, 1 << 30)
    return {r.offset: (r.key, r.value) for h in iter_headers(data) for r in decode_records(data, h)}


def _fill(plog: PartitionLog, rounds: int = 10, keys: int = 5) -> None:
    for r in range(rounds):
        _append(plog, [(b"k%d" % k, b"r%d" % r) for k in range(keys)])
    _append(plog, [(b"tail", b"x" * 700)])  # rolls: everything above is closed


# What a log _fill wrote holds once cleaned: each key's last value, and the tail.
FILL_CLEANED = {45 + k: (b"k%d" % k, b"r9") for k in range(5)} | {50: (b"tail", b"x" * 700)}


def _open(tmp_path: Path, config: LogConfig = CONFIG) -> PartitionLog:
    return PartitionLog.open(tmp_path / "c-0", "c", 0, config, FileHandleCache(32))


def _managed(tmp_path: Path, config: LogConfig = CONFIG) -> tuple[LogManager, PartitionLog]:
    """A LogManager whose cleaner looks for work every millisecond, with one empty log."""
    manager = LogManager(tmp_path, config, cleaner_backoff_ms=1)
    manager.load()
    return manager, manager.create("c", 0, config)


def test_keeps_latest_per_key_merges_segments_and_checkpoints(tmp_path):
    plog = _open(tmp_path)
    _fill(plog)
    before = len(plog.segments())
    cleaner = LogCleaner(tmp_path, lambda: [plog])
    stats = cleaner.clean(plog, NOW)
    assert stats is not None and stats.records_read == 50 and stats.records_kept == 5
    assert _records(plog) == FILL_CLEANED
    assert len(plog.segments()) == before  # groups go by source size: two full ones
    assert read_checkpoint(tmp_path / CLEANER_CHECKPOINT) == {("c", 0): 50}
    assert cleaner.clean(plog, NOW) is None  # nothing dirty any more
    _append(plog, [(b"k0", b"again")])
    _append(plog, [(b"tail", b"z" * 700)])
    before = len(plog.segments())
    cleaner.clean(plog, NOW)
    assert len(plog.segments()) < before  # the small cleaned segments were merged
    records = _records(plog)
    assert records[51] == (b"k0", b"again") and 45 not in records


def test_dirty_ratio_and_compaction_lag(tmp_path):
    config = LogConfig(
        segment_bytes=600,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.5,
        min_compaction_lag_ms=60_000,
        file_delete_delay_ms=0,
    )
    plog = _open(tmp_path, config)
    for r in range(2):
        for k in range(0, 40, 4):
            _append(plog, [(b"k%d" % i, b"%d" % r * 100) for i in range(k, k + 4)])
    _append(plog, [(b"tail", b"x" * 700)])
    cleaner = LogCleaner(tmp_path, lambda: [plog])
    # every record is younger than min.compaction.lag.ms: nothing is cleanable
    assert cleaner.job_for(plog, NOW + 1000, force=True) is None
    job = cleaner.job_for(plog, NOW + 120_000)
    assert job is not None and job.dirty_ratio == 1.0
    cleaner.clean(plog, NOW + 120_000)
    _append(plog, [(b"k0", b"new")])
    _append(plog, [(b"tail", b"y" * 700)])
    # one small dirty segment against a cleaned one: below the 0.5 ratio
    assert cleaner.job_for(plog, NOW + 120_000) is None
    assert cleaner.job_for(plog, NOW + 120_000, force=True) is not None
    lagging = LogConfig(
        segment_bytes=600,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.99,
        max_compaction_lag_ms=1000,
        file_delete_delay_ms=0,
    )
    plog.update_config(lagging)
    assert cleaner.job_for(plog, int(time.time() * 1000) + 5000) is not None  # overdue


def test_appends_during_a_background_cleaning_are_kept(tmp_path):
    manager, plog = _managed(tmp_path)
    for r in range(200):
        _append(plog, [(b"k%d" % (i % 7), b"%d-%d" % (r, i)) for i in range(20)])
    _append(plog, [(b"tail", b"x" * 700)])
    manager.maintain()
    assert manager.cleaner.busy
    appended = []
    deadline = time.monotonic() + 60
    while manager.cleaner.cleanings == 0 and time.monotonic() < deadline:
        appended.append(_append(plog, [(b"during", b"%d" % len(appended))]))
        manager.maintain()
        time.sleep(0.005)
    assert len(appended) > 1
    records = _records(plog)
    for i, offset in enumerate(appended):  # the cleaning began before any of them
        assert records[offset] == (b"during", b"%d" % i)
    latest = {key: value for _, (key, value) in sorted(records.items()) if key != b"during"}
    assert latest[b"k0"] == b"199-14"
    manager.shutdown()


def _swap_under_way(manager: LogManager) -> None:
    """Drive the manager until a finished cleaning's swap is committing its files (it
    stays in that phase until the next ``maintain``: no wake-up is set here)."""
    manager.maintain()
    deadline = time.monotonic() + 60
    while manager.cleaner._swap is None:  # noqa: SLF001 - the swap's phases are internal
        assert time.monotonic() < deadline, "no cleaning finished"
        time.sleep(0.005)
        manager.cleaner.maintain()
    assert not manager.cleaner._swap.finishing  # noqa: SLF001


def _finish_cleaning(manager: LogManager) -> None:
    deadline = time.monotonic() + 60
    while manager.cleaner.busy:
        assert time.monotonic() < deadline, "the swap never finished"
        time.sleep(0.005)
        manager.cleaner.maintain()


def test_delete_records_during_a_swap_keeps_the_pinned_segments_until_it_is_done(tmp_path):
    config = dataclasses.replace(CONFIG, cleanup_policy="compact,delete")
    manager, plog = _managed(tmp_path, config)
    _fill(plog)
    closed = plog.segments()[:-1]
    pinned = plog.closed_segments()
    _swap_under_way(manager)
    assert plog.delete_records_before(50) == 50
    assert plog.segments()[:-1] == closed  # pinned: still there, below the log start
    _finish_cleaning(manager)
    assert manager.cleaner.cleanings == 1
    assert plog.segments()[-1] == 50
    assert not set(plog.closed_segments()) & set(pinned)  # the cleaned ones replaced them
    assert plog.delete_records_before(50) == 50
    assert plog.segments() == [50]  # unpinned: the next pass deletes it
    assert _records(plog) == {50: (b"tail", b"x" * 700)}
    manager.shutdown()
    names = [n for n in os.listdir(plog.directory) if not n.endswith(".snapshot")]
    assert sorted(names) == [
        "00000000000000000050.index",
        "00000000000000000050.log",
        "00000000000000000050.timeindex",
        "leader-epoch-checkpoint",
    ]
    reopened = LogManager(tmp_path, config, cleaner_enabled=False)
    reopened.load()
    assert _records(reopened.get("c", 0)) == {50: (b"tail", b"x" * 700)}
    reopened.shutdown()


def test_a_log_deleted_during_a_swap_is_left_alone(tmp_path):
    manager, plog = _managed(tmp_path)
    _fill(plog)
    _swap_under_way(manager)
    assert manager.delete_topic("c") == 1
    _finish_cleaning(manager)
    assert manager.cleaner.cleanings == 0
    assert not plog.directory.exists()
    assert (
        not (tmp_path / CLEANER_CHECKPOINT).exists()
        or read_checkpoint(tmp_path / CLEANER_CHECKPOINT) == {}
    )
    manager.shutdown()


def test_shutdown_sees_a_swap_under_way_through(tmp_path):
    manager, plog = _managed(tmp_path)
    _fill(plog)
    _swap_under_way(manager)
    manager.shutdown()
    assert manager.cleaner.cleanings == 1
    assert not (plog.directory / swap.MANIFEST).exists()
    assert read_checkpoint(tmp_path / CLEANER_CHECKPOINT) == {("c", 0): 50}
    reopened = LogManager(tmp_path, CONFIG, cleaner_enabled=False)
    reopened.load()
    assert _records(reopened.get("c", 0)) == FILL_CLEANED
    reopened.shutdown()


def test_shutdown_kills_a_worker_that_does_not_stop(tmp_path):
    """A worker that gets no CPU (SCHED_IDLE on a busy machine; SIGSTOP here) cannot see
    the abort: shutdown kills it rather than wait, and the log loads as it was."""
    manager = LogManager(
        tmp_path, CONFIG, cleaner_backoff_ms=1, cleaner_io_max_bytes_per_second=200
    )
    manager.load()
    plog = manager.create("c", 0, CONFIG)
    _fill(plog)
    before = _records(plog)
    manager.maintain()
    assert manager.cleaner.busy  # 200 bytes a second: this cleaning takes many seconds
    executor = manager.cleaner._executor  # noqa: SLF001 - the worker is internal
    assert executor is not None
    deadline = time.monotonic() + 60
    while not executor._processes:  # noqa: SLF001
        assert time.monotonic() < deadline, "no worker process"
        time.sleep(0.01)
    [worker] = list(executor._processes.values())  # noqa: SLF001
    os.kill(worker.pid, signal.SIGSTOP)
    stopping = threading.Thread(target=manager.shutdown)
    stopping.start()
    stopping.join(60)
    assert not stopping.is_alive(), "shutdown waited on a worker that cannot run"
    assert worker.exitcode == -signal.SIGKILL
    reopened = LogManager(tmp_path, CONFIG, cleaner_enabled=False)
    reopened.load()
    assert _records(reopened.get("c", 0)) == before
    assert not list((tmp_path / "c-0").glob("*.cleaned"))
    reopened.shutdown()


def test_a_starved_cleaning_leaves_idle_priority(tmp_path):
    """A worker sharing its CPU with a busy process gets next to no CPU at SCHED_IDLE:
    once its cleaning has waited starved_after_s for one, the worker goes on in the
    normal class (nice 10) and finishes. Where leaving SCHED_IDLE is not permitted,
    cleanings never enter it."""
    manager, plog = _managed(tmp_path)
    _fill(plog)
    manager.maintain()
    _finish_cleaning(manager)  # the worker process is started
    [worker] = manager.cleaner._worker_pids()  # noqa: SLF001 - the worker is internal
    starved_before = manager.cleaner.starved_cleanings
    cpu = min(os.sched_getaffinity(0))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        os.sched_setaffinity(worker, {cpu})
        manager.cleaner.starved_after_s = 0.2
        for r in range(10):  # a cleaning of some milliseconds of CPU
            _append(plog, [(b"k%d" % (i % 7), b"%d-%d" % (r, i)) for i in range(20)])
        _append(plog, [(b"tail", b"y" * 700)])
        manager.maintain()
        assert manager.cleaner.busy
        _finish_cleaning(manager)
        policy = os.sched_getscheduler(worker)
    finally:
        hog.kill()
        hog.wait()
    assert manager.cleaner.cleanings == 2
    idle = can_leave_idle_priority()
    assert manager.cleaner.starved_cleanings - starved_before == (1 if idle else 0)
    assert policy == os.SCHED_OTHER
    latest = {key: value for _, (key, value) in sorted(_records(plog).items())}
    assert latest[b"k0"] == b"9-14" and latest[b"tail"] == b"y" * 700
    manager.shutdown()


def _cleaned_files(tmp_path: Path) -> tuple[PartitionLog, dict, dict, list]:
    plog = _open(tmp_path)
    _fill(plog)
    old = _records(plog)
    cleaner = LogCleaner(tmp_path, lambda: [plog])
    job = cleaner.job_for(plog, NOW, force=True)
    job.config = dataclasses.replace(CONFIG, segment_bytes=10_000)  # one merged segment
    output = build_cleaned_segments(job.spec(1000), threading.Event())
    plog.close()
    expected_new = {o: v for o, v in old.items() if o >= 45}
    return plog, old, expected_new, [(done, job.segments) for done in output.cleaned]


@pytest.mark.parametrize(
    "crash_at", ["cleaned", "committed", "retired", "head-retired", "half-installed"]
)
def test_crash_during_swap_recovers_old_or_new(tmp_path, crash_at):
    plog, old, new, cleaned = _cleaned_files(tmp_path)
    assert len(cleaned) == 1
    done, segments = cleaned[0]
    directory = plog.directory
    if crash_at != "cleaned":
        swap.commit(directory, [(done.base, done.end)])
    if crash_at in ("retired", "head-retired", "half-installed"):
        for i in done.old[1:]:
            os.rename(segments[i].log_path, segments[i].log_path + ".deleted")
    if crash_at == "head-retired":  # the switch retires the head too, before the renames
        for path in (segments[0].log_path, segments[0].index_path, segments[0].timeindex_path):
            os.rename(path, path + ".deleted")
    if crash_at == "half-installed":
        index = swap.segment_file(directory, done.base, ".index")
        os.replace(index + ".swap", index)
    reopened = _open(tmp_path)
    expected = old if crash_at == "cleaned" else new
    assert _records(reopened) == expected
    leftovers = [
        n
        for n in os.listdir(directory)
        if not n.endswith((".log", "index")) and n != "leader-epoch-checkpoint"
    ]
    assert leftovers == []
    reopened.close()


def test_max_compaction_lag_rolls_the_active_segment(tmp_path):
    config = LogConfig(cleanup_policy="compact", max_compaction_lag_ms=1000)
    plog = _open(tmp_path, config)
    _append(plog, [(b"k", b"1")])
    plog.active_segment.first_append_ms = int(time.time() * 1000) - 2000
    _append(plog, [(b"k", b"2")])
    assert plog.segments() == [0, 1]  # segment.ms is a week; the lag rolled it
    plog.update_config(LogConfig(cleanup_policy="delete", max_compaction_lag_ms=1000))
    plog.active_segment.first_append_ms = int(time.time() * 1000) - 2000
    _append(plog, [(b"k", b"3")])
    assert plog.segments() == [0, 1]


def test_cleaning_the_same_base_twice_keeps_both_retired_heads_until_their_delay(tmp_path):
    config = dataclasses.replace(CONFIG, file_delete_delay_ms=60_000)
    plog = _open(tmp_path, config)
    cleaner = LogCleaner(tmp_path, lambda: [plog])
    _fill(plog)
    cleaner.clean(plog, NOW)
    _fill(plog)  # more of the same keys: the next cleaning rewrites base 0 again
    cleaner.clean(plog, NOW)
    retired_heads = [n for n in os.listdir(plog.directory) if n.startswith("0" * 20 + ".log.")]
    assert len(retired_heads) == 2 and all(n.endswith(".deleted") for n in retired_heads)
    latest = {key: value for key, value in _records(plog).values()}
    assert latest[b"k0"] == b"r9" and b"tail" in latest
    assert plog.purge_deleted(everything=True) >= 6  # both heads' three files, at least
    assert not [n for n in os.listdir(plog.directory) if n.endswith(".deleted")]
    plog.close()


def test_an_io_limited_cleaning_keeps_what_an_unlimited_one_keeps(tmp_path):
    """The limited cleaning also takes at least as long as its bytes take at the limit:
    every byte it read and wrote went through the throttle (the offset map's reads too,
    so the true figure is higher), and the throttle only lets bytes through at the rate."""
    limit = 5_000.0  # bytes a second: it must sleep
    results = []
    for name, rate in (("a", UNLIMITED_IO), ("b", limit)):
        plog = _open(tmp_path / name)
        _fill(plog)
        cleaner = LogCleaner(tmp_path / name, lambda p=plog: [p], io_max_bytes_per_second=rate)
        started = time.monotonic()
        stats = cleaner.clean(plog, NOW)
        elapsed = time.monotonic() - started
        results.append((_records(plog), stats.records_kept, plog.segments()))
        plog.close()
    assert results[0] == results[1]
    moved = stats.bytes_read + stats.bytes_written
    assert moved > limit / 10  # enough bytes for the limit to show: 0.1 s of them at least
    assert stats.seconds <= elapsed
    assert stats.seconds >= moved / limit - 0.01, (moved, stats.seconds)


def test_reads_after_a_swap_see_the_new_files_not_old_mappings(tmp_path, monkeypatch):
    from strom.storage import segment

    monkeypatch.setattr(segment, "MAPPED_READ_BYTES", 64)  # these segments are small
    plog = _open(tmp_path)
    _fill(plog)
    # Large reads: each segment's part comes from a mapping of its file.
    old = bytes(plog.read(0, 4 << 20))
    before = plog.read(plog.segments()[1], 4 << 20)
    before_bytes = bytes(before)
    LogCleaner(tmp_path, lambda: [plog]).clean(plog, NOW)
    after = plog.read(0, 4 << 20)
    small = read_in_pieces(plog, 0, 1000)  # the same through reads too small to map
    assert bytes(after) == small != old
    assert bytes(before) == before_bytes  # a view held across the swap keeps its bytes
    assert _records(plog) == FILL_CLEANED
