"""The metadata log store: round trips, truncation, torn tails, snapshots, quorum-state."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from strom.protocol.records import iter_headers
from strom.raft.messages import Batch, QuorumState, Snapshot, SnapshotId
from strom.storage.metadata_log import (
    METADATA_PARTITION_DIR,
    QUORUM_STATE_FILE,
    MetadataLogError,
    MetadataLogStore,
    parse_snapshot_name,
    segment_name,
    snapshot_name,
)


def batches(start: int, count: int, epoch: int = 1, per: int = 2) -> list[Batch]:
    out = []
    offset = start
    for i in range(count):
        records = tuple(f"r{offset + j}".encode() for j in range(per))
        out.append(Batch(offset, epoch, records, control=(i == 0 and start == 0)))
        offset += per
    return out


def reopen(store: MetadataLogStore, **kw) -> tuple[QuorumState, Snapshot | None, list[Batch]]:
    store.close()
    again = MetadataLogStore(store.directory.parent, **kw)
    return again.load()


def test_empty_directory_loads_defaults(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    state, snapshot, loaded = store.load()
    assert state == QuorumState() and snapshot is None and loaded == []
    assert (tmp_path / METADATA_PARTITION_DIR / segment_name(0)).exists()
    assert store.log_end_offset == 0


def test_round_trip_batches_and_state(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    written = batches(0, 5)
    store.persist(quorum_state=QuorumState(3, 2, 2), append=written[:2])
    store.persist(append=written[2:])
    assert store.log_end_offset == 10
    state, snapshot, loaded = reopen(store)
    assert state == QuorumState(3, 2, 2)
    assert snapshot is None
    assert loaded == written
    assert loaded[0].control and not loaded[1].control


def test_batches_are_kafka_v2_batches(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    store.persist(append=[Batch(0, 7, (b"leader",), control=True), Batch(1, 7, (b"a", b"b"))])
    data = (tmp_path / METADATA_PARTITION_DIR / segment_name(0)).read_bytes()
    headers = list(iter_headers(data))
    assert [(h.base_offset, h.partition_leader_epoch, h.record_count) for h in headers] == [
        (0, 7, 1),
        (1, 7, 2),
    ]
    assert headers[0].is_control and not headers[1].is_control


def test_append_must_follow_the_end(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    store.persist(append=batches(0, 1))
    with pytest.raises(MetadataLogError):
        store.persist(append=[Batch(5, 1, (b"x",))])


def test_truncate_at_batch_boundary_and_mid_batch(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    written = batches(0, 5)  # offsets 0-9, two records per batch
    store.persist(append=written)
    store.persist(truncate_to=6)
    assert store.log_end_offset == 6
    store.persist(truncate_to=3)  # in the middle of the batch at 2
    assert store.log_end_offset == 3
    store.persist(append=[Batch(3, 2, (b"new",))])
    _, _, loaded = reopen(store)
    assert loaded == [written[0], Batch(2, 1, (b"r2",)), Batch(3, 2, (b"new",))]


def test_truncate_to_start_empties_the_log(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    store.persist(append=batches(0, 3))
    store.persist(truncate_to=0)
    assert store.log_end_offset == 0
    store.persist(append=[Batch(0, 4, (b"again",))])
    assert reopen(store)[2] == [Batch(0, 4, (b"again",))]


def test_truncate_across_segments(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path, segment_bytes=200)
    store.load()
    written = batches(0, 12)
    for batch in written:
        store.persist(append=[batch])
    assert len(store.segments) > 2
    store.persist(truncate_to=4)
    assert store.segments[-1] <= 4
    assert reopen(store, segment_bytes=200)[2] == written[:2]


def test_torn_tail_is_cut_off(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    written = batches(0, 4)
    store.persist(append=written)
    store.close()
    path = tmp_path / METADATA_PARTITION_DIR / segment_name(0)
    size = path.stat().st_size
    whole = path.read_bytes()
    path.write_bytes(whole[: size - 5])  # a partial last batch
    again = MetadataLogStore(tmp_path)
    _, _, loaded = again.load()
    assert loaded == written[:3]
    assert again.log_end_offset == 6
    again.persist(append=[Batch(6, 2, (b"after",))])
    assert reopen(again)[2] == [*written[:3], Batch(6, 2, (b"after",))]


def test_garbage_and_bad_crc_are_cut_off(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    written = batches(0, 3)
    store.persist(append=written)
    store.close()
    path = tmp_path / METADATA_PARTITION_DIR / segment_name(0)
    with open(path, "ab") as file:
        file.write(b"\x00garbage that is not a batch header at all, long enough to parse" * 2)
    assert MetadataLogStore(tmp_path).load()[2] == written
    # Flip a byte in the last batch's records: its CRC no longer matches.
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert MetadataLogStore(tmp_path).load()[2] == written[:2]


def test_damaged_segment_drops_later_ones(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path, segment_bytes=200)
    store.load()
    written = batches(0, 12)
    for batch in written:
        store.persist(append=[batch])
    bases = store.segments
    store.close()
    second = tmp_path / METADATA_PARTITION_DIR / segment_name(bases[1])
    second.write_bytes(second.read_bytes()[:-3])
    again = MetadataLogStore(tmp_path, segment_bytes=200)
    loaded = again.load()[2]
    assert loaded == [b for b in written if b.end_offset <= loaded[-1].end_offset]
    assert again.segments == bases[:2]


def test_snapshot_naming_load_and_cleanup(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    written = batches(0, 5)
    store.persist(append=written[:3])
    first = Snapshot(SnapshotId(6, 1), b"state at 6")
    store.save_snapshot(first)
    directory = tmp_path / METADATA_PARTITION_DIR
    assert (directory / "00000000000000000006-0000000001.checkpoint").exists()
    store.persist(append=written[3:])
    second = Snapshot(SnapshotId(10, 1), b"state at 10")
    store.persist(snapshot=second, delete_before=10)
    names = sorted(os.listdir(directory))
    assert [n for n in names if n.endswith(".checkpoint")] == [snapshot_name(second.snapshot_id)]
    state, snapshot, loaded = reopen(store)
    assert snapshot == second
    assert loaded == []
    again = MetadataLogStore(tmp_path)
    again.load()
    assert again.log_end_offset == 10
    again.persist(append=[Batch(10, 2, (b"x",))])
    assert reopen(again)[2] == [Batch(10, 2, (b"x",))]


def test_delete_before_frees_covered_segments(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    written = batches(0, 6)
    store.persist(append=written[:3])
    store.save_snapshot(Snapshot(SnapshotId(6, 1), b"s"))  # rolls the segment
    store.persist(append=written[3:])
    assert store.segments == [0, 6]
    store.persist(delete_before=6)
    assert store.segments == [6]
    assert store.log_start_offset == 6
    _, snapshot, loaded = reopen(store)
    assert snapshot is not None and snapshot.snapshot_id == SnapshotId(6, 1)
    assert loaded == written[3:]


def test_load_skips_batches_a_snapshot_covers(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    written = batches(0, 4)
    store.persist(append=written)
    store.save_snapshot(Snapshot(SnapshotId(4, 1), b"s"))
    assert reopen(store)[2] == written[2:]


def test_snapshot_from_leader_past_the_log_end(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    store.persist(append=batches(0, 2))
    store.persist(snapshot=Snapshot(SnapshotId(100, 3), b"far"), delete_before=100)
    assert store.log_end_offset == 100
    store.persist(append=[Batch(100, 3, (b"next",))])
    _, snapshot, loaded = reopen(store)
    assert snapshot is not None and snapshot.data == b"far"
    assert loaded == [Batch(100, 3, (b"next",))]


def test_partial_snapshot_is_removed(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_PARTITION_DIR
    directory.mkdir()
    partial = directory / (snapshot_name(SnapshotId(5, 1)) + ".part")
    partial.write_bytes(b"half")
    _, snapshot, _ = MetadataLogStore(tmp_path).load()
    assert snapshot is None and not partial.exists()


def test_snapshot_names() -> None:
    assert snapshot_name(SnapshotId(42, 7)) == "00000000000000000042-0000000007.checkpoint"
    assert parse_snapshot_name("00000000000000000042-0000000007.checkpoint") == SnapshotId(42, 7)
    assert parse_snapshot_name("00000000000000000042.log") is None
    assert parse_snapshot_name("42-7.checkpoint") is None


def test_quorum_state_json_shape(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path, voters=[3, 1, 2])
    store.load()
    store.persist(quorum_state=QuorumState(epoch=5, voted_for=2, leader_id=-1))
    data = json.loads((tmp_path / METADATA_PARTITION_DIR / QUORUM_STATE_FILE).read_text())
    assert data == {
        "clusterId": "",
        "leaderId": -1,
        "leaderEpoch": 5,
        "votedId": 2,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        "data_version": 0,
    }
    assert reopen(store)[0] == QuorumState(5, 2, -1)


def test_quorum_state_written_by_kafka_is_read(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_PARTITION_DIR
    directory.mkdir()
    (directory / QUORUM_STATE_FILE).write_text(
        '{"leaderId":2,"leaderEpoch":9,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA",'
        '"data_version":1}'
    )
    assert MetadataLogStore(tmp_path).load()[0] == QuorumState(9, -1, 2)


def test_unreadable_quorum_state_is_an_error(tmp_path: Path) -> None:
    directory = tmp_path / METADATA_PARTITION_DIR
    directory.mkdir()
    (directory / QUORUM_STATE_FILE).write_text("{not json")
    with pytest.raises(MetadataLogError, match="quorum state"):
        MetadataLogStore(tmp_path).load()


def test_unchanged_quorum_state_is_not_rewritten(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    store.persist(quorum_state=QuorumState(1, 1, 1))
    path = tmp_path / METADATA_PARTITION_DIR / QUORUM_STATE_FILE
    path.write_text(path.read_text())  # same content, new mtime
    before = path.stat().st_mtime_ns
    store.persist(quorum_state=QuorumState(1, 1, 1))
    assert path.stat().st_mtime_ns == before


def test_many_small_batches_in_one_persist(tmp_path: Path) -> None:
    store = MetadataLogStore(tmp_path)
    store.load()
    written = [Batch(i, 1, (b"x" * 30,)) for i in range(2000)]
    store.persist(append=written)
    assert reopen(store)[2] == written


def test_snapshot_received_from_the_leader_replaces_the_whole_log(tmp_path: Path) -> None:
    """The core hands over a received snapshot alone (no delete_before): the log before
    it is gone, whether it ends before the snapshot or past it, and the next append
    continues at the snapshot's end."""
    store = MetadataLogStore(tmp_path)
    store.load()
    store.persist(append=batches(0, 3))  # offsets 0..5
    store.persist(snapshot=Snapshot(SnapshotId(100, 3), b"far"), append=[Batch(100, 3, (b"x",))])
    assert (store.log_start_offset, store.log_end_offset) == (100, 101)
    store.persist(snapshot=Snapshot(SnapshotId(101, 4), b"here"))
    store.persist(append=[Batch(101, 4, (b"y",))])
    _, snapshot, loaded = reopen(store)
    assert snapshot is not None and snapshot.snapshot_id == SnapshotId(101, 4)
    assert loaded == [Batch(101, 4, (b"y",))]
