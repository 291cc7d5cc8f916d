"""What replication asks of the storage: the leader epoch cache and its file, a
follower's appends of the leader's bytes, truncation back to an offset (durable,
across segments, with producer state and epochs following), the high watermark apart
from the log end, and the replication offset checkpoint. Real files throughout;
expected answers come from models of the appended batches, not from the code."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from strom.protocol.records import build_batch, iter_headers, validate_batches
from strom.storage import FileHandleCache, LogConfig, LogManager, PartitionLog
from strom.storage.leader_epochs import FILE_NAME, LeaderEpochCache


def batch(n: int, *, pid: int = -1, seq: int = -1, epoch: int = -1, size: int = 20) -> bytearray:
    return bytearray(
        build_batch(
            [(b"k%d" % i, b"v" * size) for i in range(n)],
            base_timestamp=1000,
            producer_id=pid,
            producer_epoch=epoch if pid >= 0 else -1,
            base_sequence=seq,
        )
    )


def append(plog: PartitionLog, buf: bytearray, leader_epoch: int = 0, **kwargs) -> int:
    return plog.append(buf, validate_batches(buf), leader_epoch=leader_epoch, **kwargs)


def open_log(path: Path, handles: FileHandleCache, **config) -> PartitionLog:
    return PartitionLog.open(path, "events", 0, LogConfig(**config), handles)


def all_bytes(plog: PartitionLog) -> bytes:
    return bytes(plog.read(plog.log_start_offset, 1 << 30))


# -- the epoch cache ------------------------------------------------------------------


def test_end_offset_for_epoch_follows_kip_279(tmp_path):
    cache = LeaderEpochCache(tmp_path / FILE_NAME, [(1, 0), (3, 10), (6, 25)])
    assert cache.end_offset_for(6, 40) == (6, 40)  # the latest ends at the log end
    assert cache.end_offset_for(3, 40) == (3, 25)  # a known one where the next begins
    assert cache.end_offset_for(4, 40) == (3, 25)  # unknown: the largest below it
    assert cache.end_offset_for(2, 40) == (1, 10)
    assert cache.end_offset_for(0, 40) == (0, 0)  # below all: itself, first start
    assert cache.end_offset_for(7, 40) == (-1, -1)  # above all
    assert cache.end_offset_for(-1, 40) == (-1, -1)
    assert LeaderEpochCache(tmp_path / "x").end_offset_for(0, 5) == (-1, -1)
    assert cache.epoch_for_offset(9) == 1 and cache.epoch_for_offset(10) == 3


def test_cache_file_is_kafkas_format_and_changes_are_written(tmp_path):
    cache = LeaderEpochCache(tmp_path / FILE_NAME)
    assert cache.assign(2, 0)
    assert not cache.assign(2, 5)  # not above the latest: ignored
    assert not cache.assign(1, 7)
    assert cache.assign(5, 12)
    assert (tmp_path / FILE_NAME).read_text() == "0\n2\n2 0\n5 12\n"
    cache.truncate_from_end(12)  # the epoch-5 entry starts at the new end: gone
    assert LeaderEpochCache.read(tmp_path).entries() == [(2, 0)]
    cache.assign(7, 20)
    cache.assign(8, 30)
    cache.truncate_from_start(25)  # 7 holds 25: it now starts there
    assert LeaderEpochCache.read(tmp_path).entries() == [(7, 25), (8, 30)]
    (tmp_path / FILE_NAME).write_text("0\n3\n1 0\n")  # fewer lines than it says
    assert LeaderEpochCache.read(tmp_path) is None
    assert LeaderEpochCache.read(tmp_path / "missing") is None


def test_appends_keep_the_epoch_cache_and_reopen_reads_it(tmp_path, handles):
    plog = open_log(tmp_path / "p", handles)
    append(plog, batch(3), leader_epoch=0)
    append(plog, batch(2), leader_epoch=0)
    append(plog, batch(4), leader_epoch=2)
    plog.assign_epoch(5)  # leadership taken with nothing appended yet
    append(plog, batch(1), leader_epoch=5)
    assert plog.epochs.entries() == [(0, 0), (2, 5), (5, 9)]
    assert plog.end_offset_for_epoch(2) == (2, 9)
    assert plog.end_offset_for_epoch(5) == (5, 10)
    plog.close()
    reopened = open_log(tmp_path / "p", handles)
    assert reopened.epochs.entries() == [(0, 0), (2, 5), (5, 9)]
    reopened.close()
    os.unlink(tmp_path / "p" / FILE_NAME)  # a log from before epochs were kept
    rebuilt = open_log(tmp_path / "p", handles)
    # Rebuilt from the batches: the epoch taken without an append leaves no trace there.
    assert rebuilt.epochs.entries() == [(0, 0), (2, 5), (5, 9)]
    assert (tmp_path / "p" / FILE_NAME).exists()


def test_high_watermark_apart_from_the_log_end(tmp_path, handles):
    plog = open_log(tmp_path / "p", handles)
    append(plog, batch(5))
    assert plog.high_watermark == 5
    append(plog, batch(5), advance_high_watermark=False)
    assert (plog.high_watermark, plog.log_end_offset) == (5, 10)
    plog.set_high_watermark(50)
    assert plog.high_watermark == 10  # capped by the log end
    plog.set_high_watermark(7)
    assert plog.high_watermark == 7
    plog.delete_records_before(3)
    plog.set_high_watermark(0)
    assert plog.high_watermark == 3  # never below the log start


# -- follower appends ------------------------------------------------------------------


def test_follower_copies_the_leaders_bytes_exactly(tmp_path, handles):
    leader = open_log(tmp_path / "leader", handles, segment_bytes=600)
    follower = open_log(tmp_path / "follower", handles, segment_bytes=600)
    for i in range(9):
        sequence = sum(1 + j % 3 for j in range(i))
        append(leader, batch(1 + i % 3, pid=7, seq=sequence, epoch=0), leader_epoch=i // 6 * 3)
    leader.assign_epoch(5)  # leadership moved twice with nothing written in epoch 5
    leader.assign_epoch(6)
    append(leader, batch(2), leader_epoch=6)
    offset = 0
    while offset < leader.log_end_offset:
        chunk = bytearray(leader.read(offset, 500))
        follower.append_as_follower(chunk, validate_batches(chunk))
        assert follower.log_end_offset > offset, "the follower's log end did not move"
        offset = follower.log_end_offset
    assert all_bytes(follower) == all_bytes(leader)
    assert follower.epochs.entries() == leader.epochs.entries() == [(0, 0), (3, 12), (6, 18)]
    assert len(follower.segments()) > 1  # rolled like a leader's log
    assert follower.high_watermark == 0  # the follower's high watermark is set apart
    entry = follower.producers.get(7)
    assert entry is not None and entry.last_seq == leader.producers.get(7).last_seq


def test_follower_refuses_batches_that_do_not_start_at_its_end(tmp_path, handles):
    leader = open_log(tmp_path / "leader", handles)
    follower = open_log(tmp_path / "follower", handles)
    append(leader, batch(3))
    append(leader, batch(3))
    second = bytearray(leader.read(3, 1 << 20))
    with pytest.raises(ValueError, match="offset 3 where 0"):
        follower.append_as_follower(second, validate_batches(second))
    assert follower.log_end_offset == 0 and all_bytes(follower) == b""


# -- truncation --------------------------------------------------------------------------


def test_truncate_inside_a_batch_removes_the_whole_batch(tmp_path, handles):
    plog = open_log(tmp_path / "p", handles)
    append(plog, batch(4))  # 0-3
    append(plog, batch(4), leader_epoch=1)  # 4-7
    append(plog, batch(4), leader_epoch=2)  # 8-11
    plog.truncate_to(6)
    assert plog.log_end_offset == 4
    assert [h.base_offset for h in iter_headers(all_bytes(plog))] == [0]
    assert plog.epochs.entries() == [(0, 0)]
    assert plog.high_watermark == 4 and plog.recovery_point <= 4
    assert append(plog, batch(2), leader_epoch=3) == 4  # appends go on from there


def test_truncation_is_durable_across_segments_without_a_clean_close(tmp_path, handles):
    plog = open_log(tmp_path / "p", handles, segment_bytes=400)
    bases = [append(plog, batch(3, size=60)) for _ in range(10)]
    assert len(plog.segments()) >= 4
    cut = bases[4]
    expected = bytes(plog.read(0, 1 << 30))[
        : sum(h.size for h in validate_batches(bytearray(plog.read(0, 1 << 30)))[:4])
    ]
    plog.truncate_to(cut)
    assert plog.log_end_offset == cut
    assert all(base < cut for base in plog.segments())
    # No close, no flush: the cut must already be on disk (the process could die now).
    reopened = PartitionLog.open(
        tmp_path / "p",
        "events",
        0,
        LogConfig(segment_bytes=400),
        FileHandleCache(8),
        recovery_point=0,
    )
    assert reopened.log_end_offset == cut
    assert all_bytes(reopened) == expected


def test_truncation_forgets_the_producer_batches_it_removed(tmp_path, handles):
    plog = open_log(tmp_path / "p", handles)
    append(plog, batch(2, pid=9, seq=0, epoch=0))
    third = batch(2, pid=9, seq=2, epoch=0)
    assert append(plog, bytearray(third)) == 2
    assert append(plog, bytearray(third)) == 2  # a retry: deduplicated
    plog.truncate_to(2)
    # The retried batch is not in the log any more: it is appended anew, not deduplicated.
    assert append(plog, bytearray(third)) == 2
    assert plog.log_end_offset == 4


def test_truncate_to_the_log_start_or_below_empties_the_log_there(tmp_path, handles):
    plog = open_log(tmp_path / "p", handles, segment_bytes=400)
    for _ in range(6):
        append(plog, batch(3, size=60))
    plog.delete_records_before(6)
    plog.truncate_to(2)
    assert (plog.log_start_offset, plog.log_end_offset) == (6, 6)
    assert plog.segments() == [6] and plog.epochs.entries() == []
    assert append(plog, batch(1), leader_epoch=4) == 6


def test_random_appends_and_truncations_match_a_model(tmp_path):
    """Leader and follower logs under random appends, epoch changes and truncations,
    reopened now and then without a clean close: each always holds exactly the model's
    batches, and the follower's epoch cache equals the leader's."""
    for seed in range(6):
        rng = random.Random(seed)
        handles = FileHandleCache(16)
        root = tmp_path / str(seed)
        config = {"segment_bytes": rng.choice([300, 700, 100_000])}
        plog = open_log(root / "leader", handles, **config)
        model: list[tuple[int, int, int]] = []  # (base, count, epoch)
        epoch = 0
        for _ in range(120):
            op = rng.random()
            if op < 0.6:
                count = rng.randint(1, 4)
                base = append(plog, batch(count, size=rng.randint(1, 80)), leader_epoch=epoch)
                model.append((base, count, epoch))
            elif op < 0.75:
                epoch += rng.randint(1, 3)
            elif op < 0.9 and model:
                cut = rng.randint(0, model[-1][0] + model[-1][1])
                plog.truncate_to(cut)
                model = [m for m in model if m[0] + m[1] <= cut]
            else:
                plog = PartitionLog.open(
                    root / "leader", "events", 0, LogConfig(**config), handles, recovery_point=0
                )
            end = model[-1][0] + model[-1][1] if model else 0
            assert plog.log_end_offset == end, seed
            held = [
                (h.base_offset, h.record_count, h.partition_leader_epoch)
                for h in iter_headers(all_bytes(plog))
            ]
            assert held == model, seed
            starts: list[tuple[int, int]] = []
            for base, _, e in model:
                if not starts or e > starts[-1][0]:
                    starts.append((e, base))
            cached = plog.epochs.entries()
            assert cached[: len(starts)] == starts, seed  # plus perhaps a taken epoch
            follower = open_log(root / f"f{rng.randint(0, 1 << 30)}", handles, **config)
            data = bytearray(all_bytes(plog))
            if data:
                follower.append_as_follower(data, validate_batches(data))
            assert follower.epochs.entries() == starts, seed
            follower.close()
        handles.close_all()


# -- the replication offset checkpoint ---------------------------------------------------


def test_high_watermarks_survive_a_restart_capped_by_the_log_end(tmp_path):
    manager = LogManager(tmp_path, LogConfig())
    manager.load()
    replicated = manager.create("events", 0)
    plain = manager.create("events", 1)
    append(replicated, batch(5))
    append(replicated, batch(5), advance_high_watermark=False)
    append(plain, batch(4))
    manager.shutdown()
    assert "events 0 5" in (tmp_path / "replication-offset-checkpoint").read_text()
    reopened = LogManager(tmp_path, LogConfig())
    reopened.load()
    assert reopened.get("events", 0).high_watermark == 5
    assert reopened.get("events", 1).high_watermark == 4
    reopened.shutdown()
    os.unlink(tmp_path / "replication-offset-checkpoint")
    again = LogManager(tmp_path, LogConfig())
    again.load()
    assert again.get("events", 0).high_watermark == 10  # no checkpoint: the log end
    again.shutdown()


def test_a_follower_behind_its_leaders_log_start_starts_over_there(tmp_path, handles):
    plog = open_log(tmp_path / "p", handles, segment_bytes=400)
    for _ in range(4):
        append(plog, batch(3, size=60), leader_epoch=1)
    plog.truncate_fully_and_start_at(40)
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (40, 40, 40)
    assert plog.segments() == [40] and plog.epochs.entries() == []
    plog.close()
    reopened = open_log(tmp_path / "p", handles)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (40, 40)


def test_an_empty_logs_epoch_is_written_with_its_first_flush(tmp_path, handles):
    plog = open_log(tmp_path / "p", handles)
    plog.assign_epoch(3)  # a new partition's leader: no fsync for it yet
    assert not (tmp_path / "p" / FILE_NAME).exists()
    append(plog, batch(2), leader_epoch=3)
    assert not (tmp_path / "p" / FILE_NAME).exists()
    # A crash now: the file is missing, the batches say where epoch 3 began.
    crashed = PartitionLog.open(
        tmp_path / "p", "events", 0, LogConfig(), FileHandleCache(4), recovery_point=0
    )
    assert crashed.epochs.entries() == [(3, 0)]
    plog.flush()
    assert LeaderEpochCache.read(tmp_path / "p").entries() == [(3, 0)]
    append(plog, batch(1), leader_epoch=5)  # a log with data: written at once
    assert LeaderEpochCache.read(tmp_path / "p").entries() == [(3, 0), (5, 2)]


def test_a_leader_deposed_before_its_first_append_drops_its_empty_epoch(tmp_path, handles):
    # Leader in epoch 2 with 3 records, re-elected in epoch 4, deposed before appending.
    plog = open_log(tmp_path / "events-0", handles)
    append(plog, batch(3), leader_epoch=2)
    plog.assign_epoch(4)
    assert plog.latest_epoch == 4 and plog.log_end_offset == 3
    # Its new leader (epoch 5) never had epoch 4: it ends epoch 2 at 3. The follower
    # cuts at its own end: no record goes, but the empty epoch must, or its next fetch
    # would ask with epoch 4 again, for ever.
    plog.truncate_to(3)
    assert plog.log_end_offset == 3
    assert plog.latest_epoch == 2
    assert plog.end_offset_for_epoch(2) == (2, 3)
    plog.close()
    reopened = open_log(tmp_path / "events-0", handles)
    assert reopened.latest_epoch == 2  # the file says so too
    reopened.close()
