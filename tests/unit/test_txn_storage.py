"""The storage side of transactions (KIP-98) on real files, no broker: control batches,
the last stable offset, markers and their fencing, the transaction index (.txnindex)
on the leader and on a follower, truncation, retention and the cleaner."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from strom.protocol.records import (
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    build_batch,
    build_control_batch,
    control_type,
    decode_records,
    iter_headers,
    read_control_record,
    validate_batches,
)
from strom.storage import FileHandleCache, LogConfig, PartitionLog
from strom.storage.cleaner import LogCleaner
from strom.storage.producer_state import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from strom.storage.txn_index import ENTRY, ENTRY_SIZE, AbortedTxn

T = 1_800_000_000_000


def data(
    pid: int = -1,
    seq: int = -1,
    n: int = 2,
    *,
    epoch: int = 0,
    txn: bool = False,
    key: bytes = b"k",
    value: bytes = b"v",
) -> bytearray:
    return bytearray(
        build_batch(
            [(key + b"%d" % i, value) for i in range(n)],
            base_timestamp=T,
            producer_id=pid,
            producer_epoch=epoch if pid >= 0 else -1,
            base_sequence=seq,
            attributes=ATTR_TRANSACTIONAL if txn else 0,
        )
    )


def append(plog: PartitionLog, buf: bytearray, **kwargs) -> int:
    return plog.append(buf, validate_batches(buf), **kwargs)


def open_log(path: Path, handles: FileHandleCache, **config) -> PartitionLog:
    return PartitionLog.open(path, "t", 0, LogConfig(**config), handles)


def txnindex(plog: PartitionLog, base: int = 0) -> Path:
    return plog.directory / f"{base:020d}.txnindex"


def entries_on_disk(path: Path) -> list[AbortedTxn]:
    raw = path.read_bytes()
    assert len(raw) % ENTRY_SIZE == 0
    out = []
    for version, *fields in ENTRY.iter_unpack(raw):
        assert version == 0
        out.append(AbortedTxn(*fields))
    return out


@pytest.fixture
def plog(tmp_path: Path, handles: FileHandleCache):
    log = open_log(tmp_path / "t-0", handles)
    yield log
    log.close()


# -- control batches ---------------------------------------------------------------


def test_control_batch_round_trip() -> None:
    for commit, kind in ((True, CONTROL_COMMIT), (False, CONTROL_ABORT)):
        buf = build_control_batch(77, 3, commit, 12, T)
        assert isinstance(buf, bytearray)
        (header,) = validate_batches(buf)  # CRC32C, sizes and counts check out
        assert header.is_control and header.is_transactional and header.codec == 0
        assert (header.producer_id, header.producer_epoch) == (77, 3)
        assert header.base_sequence == -1 and header.record_count == 1
        assert header.max_timestamp == T
        assert control_type(buf, header) == kind
        assert read_control_record(buf, header) == (kind, 12)
        (record,) = decode_records(buf, header)
        assert record.key == bytes([0, 0, 0, kind])  # int16 version 0, int16 type
        assert record.value == bytes([0, 0, 0, 0, 0, 12])  # int16 version 0, int32 epoch
    plain = data(1, 0)
    assert control_type(plain, validate_batches(plain)[0]) is None


# -- the last stable offset ------------------------------------------------------------


def test_open_transaction_holds_the_lso_until_committed(plog: PartitionLog) -> None:
    append(plog, data())  # 0-1: plain
    first = append(plog, data(1, 0, txn=True))  # 2-3: producer 1 opens a transaction
    assert first == 2
    assert plog.first_unstable_offset == 2 and plog.last_stable_offset == 2
    append(plog, data(2, 0))  # another producer's idempotent data: 4-5
    append(plog, data())  # plain: 6-7
    assert plog.high_watermark == 8 and plog.last_stable_offset == 2
    append(plog, data(1, 2, txn=True))  # the same transaction goes on: 8-9
    assert plog.open_transactions() == [(1, 0, 2)]
    assert plog.last_stable_offset == 2
    marker = plog.append_marker(1, 0, 5, True)
    assert marker == 10 and plog.log_end_offset == 11
    assert plog.first_unstable_offset is None
    assert plog.last_stable_offset == plog.high_watermark == 11
    assert plog.open_transactions() == []
    assert plog.aborted_transactions(0, 11) == []
    assert not txnindex(plog).exists()  # commits write no index entry
    (state,) = [p for p in plog.producer_states() if p.producer_id == 1]
    assert state.producer_epoch == 0 and state.coordinator_epoch == 5
    assert state.last_sequence == 3 and state.current_txn_start_offset == -1
    headers = list(iter_headers(plog.read(10, 1 << 20)))
    assert headers[0].is_control and headers[0].base_offset == 10


def test_aborted_transaction_is_indexed_and_found_for_overlapping_ranges(
    plog: PartitionLog,
) -> None:
    append(plog, data())  # 0-1
    append(plog, data(1, 0, txn=True))  # 2-3 aborted later
    append(plog, data(2, 0, txn=True))  # 4-5 producer 2, committed later
    append(plog, data(1, 2, txn=True))  # 6-7
    assert plog.last_stable_offset == 2
    assert plog.open_transactions() == [(1, 0, 2), (2, 0, 4)]
    abort_at = plog.append_marker(1, 0, 0, False)  # 8
    assert abort_at == 8
    assert plog.last_stable_offset == 4  # producer 2 still open
    append(plog, data())  # 9-10
    commit_at = plog.append_marker(2, 0, 0, True)  # 11
    assert commit_at == 11 and plog.last_stable_offset == 12
    # Kafka's rule: marker (last offset) >= start and first offset < end.
    assert plog.aborted_transactions(0, 12) == [(1, 2)]
    assert plog.aborted_transactions(0, 3) == [(1, 2)]
    assert plog.aborted_transactions(7, 9) == [(1, 2)]
    assert plog.aborted_transactions(8, 9) == [(1, 2)]  # only the marker is in range
    assert plog.aborted_transactions(0, 2) == []  # ends before the transaction
    assert plog.aborted_transactions(9, 12) == []  # starts after its marker
    # The index entry: (producer, first offset, marker offset, LSO right after it),
    # the LSO being producer 2's open transaction at the time.
    assert entries_on_disk(txnindex(plog)) == [AbortedTxn(1, 2, 8, 4)]
    assert plog.aborted_txns(0, 12) == [AbortedTxn(1, 2, 8, 4)]


def test_completed_transaction_stays_unstable_until_the_hw_passes_its_marker(
    plog: PartitionLog,
) -> None:
    append(plog, data(), advance_high_watermark=False)  # 0-1
    append(plog, data(1, 0, txn=True), advance_high_watermark=False)  # 2-3
    assert plog.high_watermark == 0 and plog.last_stable_offset == 0
    plog.set_high_watermark(4)
    assert plog.last_stable_offset == 2 and plog.first_unstable_offset == 2
    marker = plog.append_marker(1, 0, 0, True, advance_high_watermark=False)
    assert marker == 4 and plog.open_transactions() == []
    assert plog.first_unstable_offset == 2 and plog.last_stable_offset == 2  # HW is 4
    plog.set_high_watermark(5)  # the marker is below the high watermark now
    assert plog.first_unstable_offset is None
    assert plog.last_stable_offset == 5
    # An abort behaves the same, and the LSO never passes the high watermark.
    append(plog, data(1, 2, txn=True), advance_high_watermark=False)  # 5-6
    plog.append_marker(1, 0, 0, False, advance_high_watermark=False)  # 7
    plog.set_high_watermark(7)
    assert plog.last_stable_offset == 5
    plog.set_high_watermark(8)
    assert plog.last_stable_offset == 8
    assert plog.aborted_transactions(5, 8) == [(1, 5)]


# -- fencing and refusals -----------------------------------------------------------


def test_marker_from_an_older_producer_epoch_is_refused(plog: PartitionLog) -> None:
    append(plog, data(1, 0, epoch=3, txn=True))
    with pytest.raises(InvalidProducerEpochError):
        plog.append_marker(1, 2, 0, False)
    assert plog.log_end_offset == 2 and plog.open_transactions() == [(1, 3, 0)]
    plog.append_marker(1, 3, 0, False)
    assert plog.open_transactions() == []


def test_marker_from_an_older_coordinator_epoch_is_refused(plog: PartitionLog) -> None:
    append(plog, data(1, 0, txn=True))
    plog.append_marker(1, 0, 7, True)
    append(plog, data(1, 2, txn=True))
    end = plog.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError):
        plog.append_marker(1, 0, 6, False)
    assert plog.log_end_offset == end and plog.open_transactions() == [(1, 0, 3)]
    plog.append_marker(1, 0, 7, False)  # the same coordinator epoch passes
    assert plog.aborted_transactions(0, plog.log_end_offset) == [(1, 3)]


def test_non_transactional_batch_during_a_transaction_is_refused(plog: PartitionLog) -> None:
    append(plog, data(1, 0, txn=True))
    with pytest.raises(InvalidTxnStateError):
        append(plog, data(1, 2))
    with pytest.raises(InvalidTxnStateError):  # also later in one append
        append(plog, data(1, 2, txn=True) + data(1, 4))
    assert plog.log_end_offset == 2
    append(plog, data(1, 2, txn=True))
    plog.append_marker(1, 0, 0, True)
    assert append(plog, data(1, 4)) == 5  # after the commit: plain idempotent is fine


def test_marker_without_an_open_transaction_is_appended_and_harmless(
    plog: PartitionLog,
) -> None:
    append(plog, data(1, 0, txn=True))
    plog.append_marker(1, 0, 0, False)
    retry = plog.append_marker(1, 0, 0, False)  # a retried marker
    assert retry == 3 and plog.log_end_offset == 4
    unknown = plog.append_marker(99, 0, 0, True)  # a producer never seen here
    assert unknown == 4
    assert plog.last_stable_offset == plog.high_watermark == 5
    assert plog.aborted_transactions(0, 5) == [(1, 0)]
    assert entries_on_disk(txnindex(plog)) == [AbortedTxn(1, 0, 2, 3)]


def test_abort_with_a_bumped_epoch_fences_the_old_epoch(plog: PartitionLog) -> None:
    append(plog, data(1, 0, txn=True))
    append(plog, data(1, 2, txn=True))
    plog.append_marker(1, 1, 0, False)  # the coordinator aborts with epoch + 1
    with pytest.raises(InvalidProducerEpochError):
        append(plog, data(1, 4, txn=True))
    with pytest.raises(OutOfOrderSequenceError):  # the new epoch starts at 0
        append(plog, data(1, 4, epoch=1, txn=True))
    assert append(plog, data(1, 0, epoch=1, txn=True)) == 5


# -- the follower ---------------------------------------------------------------------


def _leader_history(plog: PartitionLog) -> None:
    append(plog, data())
    append(plog, data(1, 0, txn=True))
    append(plog, data(2, 0, txn=True))
    append(plog, data(3, 0))
    plog.append_marker(1, 0, 1, False)
    append(plog, data(2, 2, txn=True))
    append(plog, data(4, 0, n=5, txn=True))
    plog.append_marker(2, 0, 1, True)
    append(plog, data(1, 2, txn=True))
    plog.append_marker(4, 0, 2, False)
    append(plog, data())


@pytest.mark.parametrize("one_by_one", [False, True])
def test_follower_copy_gives_the_same_transactions_and_index(
    tmp_path: Path, handles: FileHandleCache, one_by_one: bool
) -> None:
    leader = open_log(tmp_path / "leader", handles, segment_bytes=300)
    follower = open_log(tmp_path / "follower", handles, segment_bytes=300)
    _leader_history(leader)
    assert len(leader.segments()) > 2  # markers land in several segments
    raw = bytearray(leader.read(0, 1 << 30))
    headers = list(iter_headers(raw))
    if one_by_one:
        for h in headers:
            buf = raw[h.position : h.position + h.size]
            follower.append_as_follower(buf, validate_batches(buf))
    else:
        follower.append_as_follower(raw, validate_batches(raw))
    follower.set_high_watermark(leader.high_watermark)
    end = leader.log_end_offset
    assert follower.log_end_offset == end
    assert follower.last_stable_offset == leader.last_stable_offset
    assert follower.open_transactions() == leader.open_transactions() == [(1, 0, 17)]
    assert follower.producer_states() == leader.producer_states()
    for start in range(end):
        assert follower.aborted_transactions(start, end) == leader.aborted_transactions(start, end)
    assert leader.aborted_transactions(0, end) == [(1, 2), (4, 11)]
    leader_files = sorted(p.name for p in leader.directory.glob("*.txnindex"))
    follower_files = sorted(p.name for p in follower.directory.glob("*.txnindex"))
    assert len(leader_files) == 2

    def joined(plog: PartitionLog, names: list[str]) -> bytes:
        return b"".join((plog.directory / name).read_bytes() for name in names)

    assert joined(leader, leader_files) == joined(follower, follower_files)
    if one_by_one:  # the same appends roll the same segments: the same files
        assert leader_files == follower_files
        for name in leader_files:
            assert (leader.directory / name).read_bytes() == (
                follower.directory / name
            ).read_bytes()
    else:
        assert len(follower_files) == 1  # one append never spans two segments
    leader.close()
    follower.close()


# -- truncation ---------------------------------------------------------------------


def test_truncation_drops_index_entries_and_reopens_the_transaction(
    tmp_path: Path, handles: FileHandleCache
) -> None:
    plog = open_log(tmp_path / "t-0", handles, segment_bytes=250)
    append(plog, data())  # 0-1
    append(plog, data(1, 0, txn=True))  # 2-3
    append(plog, data(1, 2, txn=True))  # 4-5
    abort_at = plog.append_marker(1, 0, 0, False)  # 6
    append(plog, data(2, 0, txn=True))  # 7-8
    plog.append_marker(2, 0, 0, True)  # 9
    append(plog, data())  # 10-11
    assert plog.aborted_transactions(0, 12) == [(1, 2)]
    marker_segment = plog.segments()[-1]
    for base in plog.segments():
        if base <= abort_at:
            marker_segment = base
    assert txnindex(plog, marker_segment).exists()
    plog.truncate_to(abort_at)  # the abort marker goes: producer 1 is open again
    assert plog.log_end_offset == abort_at
    assert not txnindex(plog, marker_segment).exists()
    assert plog.aborted_transactions(0, abort_at) == []
    assert plog.open_transactions() == [(1, 0, 2)]
    assert plog.last_stable_offset == 2
    plog.append_marker(1, 0, 0, False)  # the new leader's decision, same as before
    assert plog.aborted_transactions(0, plog.log_end_offset) == [(1, 2)]
    plog.truncate_to(2)  # below the transaction: nothing open
    assert plog.open_transactions() == [] and plog.last_stable_offset == 2
    assert not list(plog.directory.glob("*.txnindex"))
    plog.close()


def test_truncation_keeps_earlier_entries_of_the_segment(plog: PartitionLog) -> None:
    append(plog, data(1, 0, txn=True))  # 0-1
    plog.append_marker(1, 0, 0, False)  # 2
    append(plog, data(2, 0, txn=True))  # 3-4
    plog.append_marker(2, 0, 0, False)  # 5
    append(plog, data())  # 6-7
    assert len(entries_on_disk(txnindex(plog))) == 2
    plog.truncate_to(5)
    assert entries_on_disk(txnindex(plog)) == [AbortedTxn(1, 0, 2, 3)]
    assert plog.open_transactions() == [(2, 0, 3)]
    assert plog.aborted_transactions(0, 5) == [(1, 0)]


# -- retention -----------------------------------------------------------------------


def test_retention_never_deletes_from_the_first_unstable_offset_on(
    tmp_path: Path, handles: FileHandleCache
) -> None:
    plog = open_log(
        tmp_path / "t-0", handles, segment_bytes=250, retention_bytes=0, file_delete_delay_ms=0
    )
    big = b"x" * 100  # a batch per segment
    append(plog, data(value=big))  # 0-1
    append(plog, data(value=big))  # 2-3
    append(plog, data(1, 0, txn=True))  # 4-5: opens a transaction
    for _ in range(6):
        append(plog, data(value=big))
    holding = max(b for b in plog.segments() if b <= 4)
    assert holding > 0 and len(plog.segments()) > 3
    plog.enforce_retention(T)
    assert plog.segments()[0] == holding and plog.log_start_offset <= 4
    assert plog.last_stable_offset == 4
    # DeleteRecords moves the log start offset but keeps the segment too.
    assert plog.delete_records_before(plog.high_watermark) == plog.high_watermark
    assert plog.segments()[0] == holding
    assert plog.last_stable_offset == plog.high_watermark  # never below the log start
    # An unreplicated completion still holds them.
    plog.append_marker(1, 0, 0, True, advance_high_watermark=False)
    plog.enforce_retention(T)
    assert plog.segments()[0] == holding
    plog.set_high_watermark(plog.log_end_offset)
    plog.enforce_retention(T)
    assert plog.segments() == [plog.segments()[-1]]
    plog.close()


def test_retention_by_time_stops_at_an_open_transaction(
    tmp_path: Path, handles: FileHandleCache
) -> None:
    plog = open_log(
        tmp_path / "t-0", handles, segment_bytes=250, retention_ms=1000, file_delete_delay_ms=0
    )
    for _ in range(3):
        append(plog, data())
    append(plog, data(1, 0, txn=True))
    start = plog.log_end_offset - 2
    for _ in range(4):
        append(plog, data())
    plog.enforce_retention(T + 10_000)
    assert plog.segments()[0] <= start < plog.segments()[1]
    plog.close()


# -- the cleaner -----------------------------------------------------------------------

COMPACT = dict(
    segment_bytes=300,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.0,
    file_delete_delay_ms=0,
    index_interval_bytes=64,
)


def _kv(plog: PartitionLog) -> dict[int, tuple[bytes | None, bytes | None, bool]]:
    raw = plog.read(plog.log_start_offset, 1 << 30)
    out = {}
    for h in iter_headers(raw):
        for r in decode_records(raw, h):
            out[r.offset] = (r.key, r.value, h.is_control)
    return out


def test_cleaner_drops_aborted_data_keeps_markers_and_latest_committed(
    tmp_path: Path, handles: FileHandleCache
) -> None:
    plog = open_log(tmp_path / "c-0", handles, **COMPACT)
    append(plog, data(key=b"a", value=b"old"))  # 0-1: a0, a1 = old
    append(plog, data(1, 0, txn=True, key=b"a", value=b"bad"))  # 2-3: aborted later
    append(plog, data(2, 0, txn=True, key=b"b", value=b"new"))  # 4-5: committed
    abort_at = plog.append_marker(1, 0, 0, False)  # 6
    commit_at = plog.append_marker(2, 0, 0, True)  # 7
    append(plog, data(2, 2, txn=True, key=b"b", value=b"newer"))  # 8-9: committed too
    append(plog, data(1, 2, txn=True, key=b"c", value=b"last"))  # 10-11: aborted, 1's last
    plog.append_marker(2, 0, 0, True)  # 12
    plog.append_marker(1, 0, 0, False)  # 13
    append(plog, data(key=b"z", value=b"x" * 200))  # rolls: everything above is closed
    assert len(plog.segments()) > 3
    before = plog.aborted_txns(0, plog.log_end_offset)
    assert [(t.producer_id, t.first_offset) for t in before] == [(1, 2), (1, 10)]
    stats = LogCleaner(tmp_path, lambda: [plog]).clean(plog, T)
    assert stats is not None
    kv = _kv(plog)
    assert kv[0] == (b"a0", b"old", False) and kv[1] == (b"a1", b"old", False)  # not shadowed
    assert 2 not in kv and 3 not in kv  # aborted data gone
    assert 4 not in kv and 5 not in kv  # committed, but b0/b1 were written again
    assert kv[8] == (b"b0", b"newer", False) and kv[9] == (b"b1", b"newer", False)
    assert kv[10][1] == b"last"  # producer 1's last batch stays whole (in the index)
    for marker in (abort_at, commit_at, 12, 13):
        assert kv[marker][2]  # every marker kept
    # The index entries survive the swap and still answer readers.
    assert plog.aborted_txns(0, plog.log_end_offset) == before
    files = list(plog.directory.glob("*.txnindex"))
    assert sum(len(entries_on_disk(f)) for f in files) == len(before)
    assert not list(plog.directory.glob("*.cleaned")) and not list(plog.directory.glob("*.swap"))
    plog.close()
    directory, config = tmp_path / "c-0", LogConfig(**COMPACT)
    reopened = PartitionLog.open(directory, "c", 0, config, FileHandleCache(8), clean=True)
    assert reopened.aborted_txns(0, reopened.log_end_offset) == before
    reopened.close()
    # Recovered from offset 0, the index is rebuilt from the markers replayed: the
    # first abort's data is gone, so only the transaction that still has data stays.
    reopened = PartitionLog.open(directory, "c", 0, config, FileHandleCache(8))
    assert reopened.aborted_txns(0, reopened.log_end_offset) == before[1:]
    reopened.close()


def test_cleaner_never_cleans_at_or_past_the_first_unstable_offset(
    tmp_path: Path, handles: FileHandleCache
) -> None:
    plog = open_log(tmp_path / "c-0", handles, **COMPACT)
    for r in range(3):
        append(plog, data(key=b"k", value=b"r%d" % r))
    txn_first = append(plog, data(1, 0, txn=True, key=b"t"))
    for r in range(3, 9):
        append(plog, data(key=b"k", value=b"r%d" % r))
    append(plog, data(key=b"z", value=b"x" * 200))
    bases = plog.segments()
    holding = max(b for b in bases if b <= txn_first)
    cleaner = LogCleaner(tmp_path, lambda: [plog])
    job = cleaner.job_for(plog, T, force=True)
    assert job is not None and job.end <= holding
    pickle.loads(pickle.dumps(job.spec(1000)))  # what the worker process gets
    cleaner.clean(plog, T)
    kv = _kv(plog)
    # Below the transaction's segment only the range's latest copy of k0 survives
    # (r2); from it on nothing was touched (all six copies r3..r8 are still there).
    k0 = sorted(offset for offset, (k, _v, _c) in kv.items() if k == b"k0")
    assert len(k0) == 7 and k0[0] < holding <= k0[1]
    assert kv[k0[0]][1] == b"r2"
    plog.append_marker(1, 0, 0, True)
    assert plog.first_unstable_offset is None
    append(plog, data(key=b"z", value=b"y" * 200))  # roll the marker's segment closed
    cleaner.clean(plog, T)
    kv = _kv(plog)
    assert sum(1 for k, _v, _c in kv.values() if k == b"k0") == 1
    assert kv[txn_first][0] == b"t0"  # committed and producer 1's last batch
    plog.close()


def test_txnindex_files_follow_retired_segments(tmp_path: Path, handles: FileHandleCache) -> None:
    plog = open_log(
        tmp_path / "t-0", handles, segment_bytes=250, retention_bytes=0, file_delete_delay_ms=60_000
    )
    append(plog, data(1, 0, txn=True))
    plog.append_marker(1, 0, 0, False)
    for _ in range(4):
        append(plog, data())
    assert txnindex(plog).exists()
    plog.enforce_retention(T)
    assert not txnindex(plog).exists()
    assert (plog.directory / (txnindex(plog).name + ".deleted")).exists()
    plog.purge_deleted(everything=True)
    assert not [n for n in os.listdir(plog.directory) if n.endswith(".deleted")]
    plog.close()
