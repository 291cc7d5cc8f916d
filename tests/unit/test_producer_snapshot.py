"""Producer state snapshots (.snapshot, Kafka's format) and the producer state a log
rebuilds at open: written at roll and close, read back with their CRC checked, a
corrupt one passed over, open transactions kept across a clean restart and a kill -9,
the transaction index rebuilt for recovered segments, and how much is replayed."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from strom.protocol.records import ATTR_TRANSACTIONAL, build_batch, validate_batches
from strom.storage import FileHandleCache, LogConfig, PartitionLog
from strom.storage import producer_snapshot as snap
from strom.storage.producer_snapshot import CorruptSnapshotError, SnapshotEntry

T = 1_800_000_000_000


def data(
    pid: int = -1, seq: int = -1, n: int = 2, *, epoch: int = 0, txn: bool = False, size: int = 1
) -> bytearray:
    return bytearray(
        build_batch(
            [(b"k%d" % i, b"v" * size) for i in range(n)],
            base_timestamp=T,
            producer_id=pid,
            producer_epoch=epoch if pid >= 0 else -1,
            base_sequence=seq,
            attributes=ATTR_TRANSACTIONAL if txn else 0,
        )
    )


def append(plog: PartitionLog, buf: bytearray, **kwargs) -> int:
    return plog.append(buf, validate_batches(buf), **kwargs)


def open_log(directory: Path, **kwargs) -> PartitionLog:
    config = LogConfig(**kwargs.pop("config", {}))
    return PartitionLog.open(directory, "t", 0, config, FileHandleCache(16), **kwargs)


def snapshots(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.snapshot"))


# -- the file format ---------------------------------------------------------------------


def test_format_is_kafkas_and_round_trips(tmp_path: Path) -> None:
    entries = [
        SnapshotEntry(7, 3, 41, 1000, 4, T, 2, -1),
        SnapshotEntry(2**40, 0, -1, -1, 0, T + 1, 5, 990),
    ]
    snap.write(tmp_path, 1001, entries)
    path = tmp_path / f"{1001:020d}.snapshot"
    raw = path.read_bytes()
    assert raw[:2] == b"\x00\x01"  # version 1
    assert struct.unpack(">I", raw[2:6])[0] == crc32c(raw[6:])  # CRC32C of the rest
    assert struct.unpack(">i", raw[6:10])[0] == 2
    assert len(raw) == 10 + 2 * 46
    first = struct.unpack(">qhiqiqiq", raw[10:56])
    assert first == (7, 3, 41, 1000, 4, T, 2, -1)
    assert snap.read(tmp_path, 1001) == entries
    assert snap.list_snapshots(tmp_path) == [1001]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-1],  # torn
        lambda raw: raw[:5],  # shorter than a header
        lambda raw: raw[:20] + bytes([raw[20] ^ 1]) + raw[21:],  # a flipped bit
        lambda raw: b"\x00\x02" + raw[2:],  # an unknown version
    ],
)
def test_damaged_snapshots_are_refused(tmp_path: Path, damage) -> None:
    snap.write(tmp_path, 5, [SnapshotEntry(1, 0, 0, 4, 0, T, -1, -1)])
    path = tmp_path / f"{5:020d}.snapshot"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptSnapshotError):
        snap.read(tmp_path, 5)


# -- when snapshots are written and what they hold ------------------------------------------


def test_written_at_roll_and_close_with_the_producer_state(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, config={"segment_bytes": 200})
    append(plog, data(1, 0, epoch=2))  # 0-1
    append(plog, data(2, 0, txn=True))  # 2-3: producer 2's transaction opens
    append(plog, data(1, 2, epoch=2, n=3))  # 4-6
    bases = plog.segments()
    assert len(bases) >= 2
    assert snapshots(directory) == bases[1:][-2:]  # one per roll, at the new base
    end = plog.log_end_offset
    plog.close()
    assert snapshots(directory)[-1] == end
    entries = {e.producer_id: e for e in snap.read(directory, end)}
    assert entries[1] == SnapshotEntry(1, 2, 4, 6, 2, T, -1, -1)
    assert entries[2] == SnapshotEntry(2, 0, 1, 3, 1, T, -1, 2)


def test_only_the_newest_snapshots_are_kept(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, config={"segment_bytes": 100})
    plog.flush()  # recovery point 0
    for seq in range(0, 20, 2):
        append(plog, data(1, seq))  # each batch rolls
    bases = plog.segments()
    # The two newest, and the newest at or below the recovery point (none here).
    assert snapshots(directory) == bases[-2:]
    plog.flush()
    for seq in range(20, 30, 2):
        append(plog, data(1, seq))
    kept = snapshots(directory)
    assert kept[-2:] == plog.segments()[-2:]
    assert len(kept) == 3 and kept[0] <= plog.recovery_point
    assert kept[0] == max(b for b in plog.segments() if b <= plog.recovery_point)
    plog.close()


# -- restarts --------------------------------------------------------------------------


def _open_transaction_log(directory: Path) -> tuple[PartitionLog, int]:
    plog = open_log(directory, config={"segment_bytes": 200})
    append(plog, data(size=50))
    first = append(plog, data(7, 0, txn=True))  # producer 7 opens a transaction...
    for _ in range(8):  # ...and many segments follow it before anything ends it
        append(plog, data(size=60))
    append(plog, data(7, 2, txn=True))
    assert len(plog.segments()) > 4
    assert plog.open_transactions() == [(7, 0, first)]
    assert plog.last_stable_offset == first
    return plog, first


def _finish(plog: PartitionLog, first: int) -> None:
    assert plog.open_transactions() == [(7, 0, first)]
    assert plog.first_unstable_offset == first and plog.last_stable_offset == first
    marker = plog.append_marker(7, 0, 0, False)
    assert plog.last_stable_offset == plog.high_watermark == marker + 1
    assert plog.aborted_transactions(0, marker + 1) == [(7, first)]
    assert plog.aborted_transactions(marker + 1, marker + 2) == []


def test_open_transaction_survives_a_clean_restart(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog, first = _open_transaction_log(directory)
    plog.close()
    reopened = open_log(directory, clean=True)
    assert reopened.replayed_batches == 0  # the snapshot at the log end was enough
    _finish(reopened, first)
    reopened.close()


def test_open_transaction_survives_a_kill(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog, first = _open_transaction_log(directory)
    plog.flush()  # the recovery point is the log end, no snapshot there yet
    recovery_point = plog.recovery_point
    for _ in range(3):
        append(plog, data(size=60))
    # kill -9: the object is dropped without close; the unflushed tail is recovered.
    reopened = open_log(directory, recovery_point=recovery_point)
    assert reopened.log_end_offset == plog.log_end_offset
    assert 0 < reopened.replayed_batches < 10  # from the snapshot below the recovery point
    _finish(reopened, first)
    reopened.close()


def test_open_transaction_survives_a_kill_without_any_snapshot(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog, first = _open_transaction_log(directory)
    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.unlink(directory / name)
    reopened = open_log(directory, recovery_point=0)  # nothing was flushed
    assert reopened.replayed_batches == 11  # every batch of the log, once
    _finish(reopened, first)
    reopened.close()


def test_a_corrupt_snapshot_is_deleted_and_an_older_one_used(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog, first = _open_transaction_log(directory)
    plog.close()
    newest, older = snapshots(directory)[-1], snapshots(directory)[-2]
    path = directory / f"{newest:020d}.snapshot"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(raw)
    reopened = open_log(directory, clean=True)
    assert newest not in snapshots(directory) and older in snapshots(directory)
    assert reopened.replayed_batches > 0
    _finish(reopened, first)
    reopened.close()


def test_transaction_index_is_rebuilt_for_recovered_segments(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, config={"segment_bytes": 250})
    plog.flush()
    append(plog, data(1, 0, txn=True))
    append(plog, data(2, 0, txn=True))
    plog.append_marker(1, 0, 0, False)
    append(plog, data(size=120))
    plog.append_marker(2, 0, 0, False)
    append(plog, data(size=120))
    end = plog.log_end_offset
    expected = plog.aborted_txns(0, end)
    assert len(expected) == 2
    files = {p.name: p.read_bytes() for p in directory.glob("*.txnindex")}
    assert files
    for name in files:  # a crash left the indexes torn
        (directory / name).write_bytes(files[name][:-3])
    reopened = open_log(directory, recovery_point=0)
    assert reopened.aborted_txns(0, end) == expected
    assert {p.name: p.read_bytes() for p in directory.glob("*.txnindex")} == files
    reopened.close()


def test_truncation_deletes_snapshots_above_the_new_end(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, config={"segment_bytes": 150})
    for seq in range(0, 16, 2):
        append(plog, data(3, seq, txn=seq >= 8))
    txn_first = plog.open_transactions()[0][2]
    cut = plog.segments()[-2] + 1
    plog.truncate_to(cut)
    assert all(o <= plog.log_end_offset for o in snapshots(directory))
    assert plog.open_transactions() == ([(3, 0, txn_first)] if txn_first < cut else [])
    entry = plog.producers.get(3)
    assert entry is not None and entry.last_seq == plog.log_end_offset - 1
    plog.close()


# -- how much is replayed ---------------------------------------------------------------


def test_a_snapshot_spares_replaying_100k_batches(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    total = 100_000
    plog = open_log(directory, config={"segment_bytes": 1_000_000})
    template = [bytes(data(size=1)) for _ in range(1)]
    chunk = 2_000
    seq = 0
    for i in range(total // chunk):
        batches = [template[0]] * (chunk - 1)
        batches.append(bytes(data(5, seq, n=1)))  # an idempotent producer too
        seq += 1
        buf = bytearray(b"".join(batches))
        append(plog, buf)
        assert i == 0 or plog.open_transactions() == []
    segments = len(plog.segments())
    assert segments > 3
    plog.close()
    assert snapshots(directory)[-1] == plog.log_end_offset

    reopened = open_log(directory, clean=True)
    assert reopened.replayed_batches == 0
    assert reopened.producers.get(5).last_seq == seq - 1
    reopened.close()

    # Without the snapshot at the log end, the one at the last roll: one segment.
    os.unlink(directory / f"{plog.log_end_offset:020d}.snapshot")
    reopened = open_log(directory, clean=True)
    assert 0 < reopened.replayed_batches < total // (segments - 1)
    assert reopened.producers.get(5).last_seq == seq - 1
    reopened.close()

    # Without any, everything (the count the snapshots spare).
    for offset in snapshots(directory):
        os.unlink(directory / f"{offset:020d}.snapshot")
    reopened = open_log(directory, clean=True)
    assert reopened.replayed_batches == total
    assert reopened.producers.get(5).last_seq == seq - 1
    reopened.close()
