"""LogManager and FileHandleCache: discovery of partition directories, checkpoints,
the clean shutdown marker, topic deletion, and bounded fds with 1,000 partitions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.protocol.records import build_batch, iter_headers, validate_batches
from strom.storage import FileHandleCache, LogConfig, LogDirLockedError, LogManager
from strom.storage.checkpoint import read_checkpoint, write_checkpoint
from strom.storage.log_manager import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    parse_partition_dir,
)


def append(plog, n: int = 2) -> int:
    buf = bytearray(build_batch([(None, b"x" * 10)] * n))
    return plog.append(buf, validate_batches(buf))


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_checkpoint_round_trip_and_format(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    entries = {("a.b-c", 0): 5, ("a.b-c", 12): 0, ("x", 3): 1 << 40}
    write_checkpoint(path, entries)
    assert read_checkpoint(path) == entries
    lines = path.read_text().splitlines()
    assert lines[:2] == ["0", "3"] and "a.b-c 12 0" in lines
    assert not path.with_name(path.name + ".tmp").exists()
    assert read_checkpoint(tmp_path / "missing") == {}
    path.write_text("0\n5\nbroken\n")
    assert read_checkpoint(path) == {}


def test_partition_dir_names():
    assert parse_partition_dir("orders-0") == ("orders", 0)
    assert parse_partition_dir("my-topic.v2-17") == ("my-topic.v2", 17)
    assert parse_partition_dir("__consumer_offsets-49") == ("__consumer_offsets", 49)
    assert parse_partition_dir("nodash") is None
    assert parse_partition_dir("topic-x") is None
    assert parse_partition_dir("t-0.abcdef-delete") is None


def test_shutdown_and_load_round_trip(tmp_path):
    config = LogConfig(segment_bytes=300)
    manager = LogManager(tmp_path, config)
    manager.load(lambda topic: config)
    a = manager.create("my-topic.v2", 3)
    b = manager.create("other", 0)
    assert manager.create("other", 0) is b
    for _ in range(10):
        append(a)
    append(b, 5)
    a.delete_records_before(6)
    manager.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {
        ("my-topic.v2", 3): 20,
        ("other", 0): 5,
    }
    assert read_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {
        ("my-topic.v2", 3): 6,
        ("other", 0): 0,
    }
    manager = LogManager(tmp_path, config)
    manager.load(lambda topic: config)
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    a = manager.get("my-topic.v2", 3)
    assert a is not None and a.log_start_offset == 6 and a.log_end_offset == 20
    assert [h.base_offset for h in iter_headers(a.read(6, 1 << 20))][0] == 6
    assert sorted((p.topic, p.partition) for p in manager.all_logs()) == [
        ("my-topic.v2", 3),
        ("other", 0),
    ]
    assert manager.get("other", 1) is None
    manager.shutdown()


def test_unclean_load_recovers_from_the_checkpointed_recovery_point(tmp_path):
    config = LogConfig(segment_bytes=300)
    manager = LogManager(tmp_path, config)
    manager.load()
    plog = manager.create("t", 0)
    for _ in range(10):
        append(plog)
    plog.flush()
    manager.checkpoint()
    append(plog)
    # crash: no shutdown; the tail of the active segment is torn
    last_segment = plog.segments()[-1]
    log_file = plog.directory / f"{last_segment:020d}.log"
    with open(log_file, "ab") as f:
        f.write(b"\x00\x00\x00")
    manager.handles.close_all()
    os.close(manager._lock_fd)  # the crashed process's lock goes with it
    manager = LogManager(tmp_path, config)
    manager.load()
    plog = manager.get("t", 0)
    assert plog is not None and plog.log_end_offset == 22
    manager.shutdown()


def test_log_dir_lock(tmp_path):
    first = LogManager(tmp_path, LogConfig())
    first.load()
    with pytest.raises(LogDirLockedError):
        LogManager(tmp_path, LogConfig()).load()
    first.shutdown()
    LogManager(tmp_path, LogConfig()).load()


def test_delete_topic(tmp_path):
    manager = LogManager(tmp_path, LogConfig())
    manager.load()
    for p in range(3):
        append(manager.create("gone", p))
    append(manager.create("gone-not", 0))
    assert manager.delete_topic("gone") == 3
    assert manager.get("gone", 0) is None and manager.get("gone-not", 0) is not None
    live = [n for n in os.listdir(tmp_path) if not n.endswith("-delete")]
    assert sorted(live) == [".lock", "gone-not-0"]  # renamed at once, removed in the background
    with pytest.raises(ValueError):
        manager.create("../evil", 0)
    manager.shutdown()
    assert [n for n in os.listdir(tmp_path) if n.startswith("gone")] == ["gone-not-0"]


def test_flush_due(tmp_path):
    manager = LogManager(tmp_path, LogConfig())
    manager.load()
    fast = manager.create("fast", 0, LogConfig(flush_ms=100))
    slow = manager.create("slow", 0)
    append(fast)
    append(slow)
    assert manager.flush_due(int(1e15)) == 1
    assert fast.recovery_point == 2 and slow.recovery_point == 0
    manager.shutdown()


def test_thousand_partitions_with_bounded_fds(tmp_path: Path):
    config = LogConfig()
    baseline = open_fds()
    manager = LogManager(tmp_path, config, max_open_files=64)
    manager.load()
    for p in range(1000):
        plog = manager.create("many", p)
        append(plog, 1 + p % 3)
        assert open_fds() <= baseline + 64 + 2
    for p in range(0, 1000, 7):
        plog = manager.get("many", p)
        assert plog is not None
        assert len(plog.read(0, 1 << 20)) > 0
    assert len(manager.handles) <= 64
    manager.shutdown()
    assert open_fds() <= baseline
    manager = LogManager(tmp_path, config, max_open_files=64)
    manager.load()
    assert open_fds() <= baseline + 64 + 2
    logs = manager.all_logs()
    assert len(logs) == 1000
    assert all(p.log_end_offset == 1 + p.partition % 3 for p in logs)
    for plog in logs:
        assert append(plog) == 1 + plog.partition % 3
    assert open_fds() <= baseline + 64 + 2
    manager.shutdown()


def test_handle_cache_lru_and_pinning(tmp_path):
    cache = FileHandleCache(2)
    paths = []
    for i in range(4):
        path = tmp_path / f"f{i}"
        path.write_bytes(b"%d" % i)
        paths.append(str(path))
    with cache.lease(paths[0]) as fd0:
        # fd0 is pinned: filling the cache does not close it
        for path in paths[1:]:
            with cache.lease(path) as fd:
                assert os.pread(fd, 1, 0) == path[-1].encode()
        assert os.pread(fd0, 1, 0) == b"0"
    assert len(cache) <= 2
    opens = cache.opens
    with cache.lease(paths[3]):
        pass
    assert cache.opens == opens  # still cached
    with cache.lease(paths[1]):
        pass
    assert cache.opens == opens + 1  # was evicted, reopened
    with cache.lease(paths[2]) as fd:
        cache.forget(paths[2])  # deleted while in use: closed when released
        assert os.pread(fd, 1, 0) == b"2"
    cache.close_all()
    assert len(cache) == 0
    with pytest.raises(FileNotFoundError):
        cache.acquire(str(tmp_path / "does-not-exist"))
