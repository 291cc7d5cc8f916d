"""Group commit on a real PartitionLog: fsyncs run off the loop and cover every append
made before they began; the recovery point only moves to what an fsync covered."""

from __future__ import annotations

import asyncio
from pathlib import Path

from strom.broker.replica.group_commit import GroupCommit
from strom.protocol.records import build_batch, validate_batches
from strom.storage import FileHandleCache, LogConfig, PartitionLog


def append_one(plog: PartitionLog, value: bytes) -> None:
    buf = bytearray(build_batch([(None, value)]))
    plog.append(buf, validate_batches(buf, 1 << 20), defer_flush=True)


def test_appends_during_an_fsync_share_the_next_one(tmp_path: Path, handles: FileHandleCache):
    config = LogConfig(flush_messages=1, index_interval_bytes=1)
    plog = PartitionLog.open(tmp_path / "t-0", "t", 0, config, handles)
    flushes: list[int] = []
    begin = plog.begin_flush

    def counting_begin():  # a spy on the real method, which still does the work
        pending = begin()
        flushes.append(pending.end_offset)
        return pending

    plog.begin_flush = counting_begin  # type: ignore[method-assign]

    async def scenario() -> None:
        commit = GroupCommit()
        try:
            append_one(plog, b"first")
            assert plog.flush_wanted()
            first = commit.durable(plog)  # its fsync starts now, covering offset 0
            later = []
            for i in range(5):  # these arrive while that fsync runs
                append_one(plog, b"v%d" % i)
                later.append(commit.durable(plog))
            assert plog.recovery_point == 0  # nothing is durable before an fsync ends
            await first
            assert plog.recovery_point >= 1
            await asyncio.gather(*later)
            assert plog.recovery_point == plog.log_end_offset == 6
        finally:
            commit.shutdown()

    asyncio.run(scenario())
    assert flushes == [1, 6]  # two fsync rounds for six appends
    assert not plog.flush_wanted()
    plog.close()


def test_index_files_are_synced_only_when_they_changed(tmp_path: Path, handles):
    def flushed_files(plog: PartitionLog) -> list[str]:
        pending = plog.begin_flush()
        pending.sync()
        plog.end_flush(pending)
        return sorted(path.rsplit(".", 1)[1] for path in pending.paths)

    every_batch = PartitionLog.open(
        tmp_path / "a-0", "a", 0, LogConfig(index_interval_bytes=1), handles
    )
    append_one(every_batch, b"a")
    append_one(every_batch, b"b")  # gets an index entry
    assert flushed_files(every_batch) == ["index", "log", "timeindex"]
    assert every_batch.recovery_point == 2
    every_batch.close()

    never = PartitionLog.open(
        tmp_path / "b-0", "b", 0, LogConfig(index_interval_bytes=1 << 30), handles
    )
    append_one(never, b"a")
    append_one(never, b"b")
    assert flushed_files(never) == ["log"]  # no index entry was written: one fsync
    assert never.recovery_point == 2
    never.close()
