"""strom dump-log's decoding of segment files built here with the project's own batch code."""

from __future__ import annotations

from pathlib import Path

from strom.cli.dump_log import dump_segment
from strom.protocol.codecs import CODEC_GZIP
from strom.protocol.records import build_batch, build_control_batch, read_header, set_base_offset


def test_compressed_batches_sequences_control_markers_and_a_torn_tail(tmp_path: Path) -> None:
    data = build_batch(
        [(b"k1", b"one", [("a", b"1"), ("b", None)]), (None, b"two")],
        base_offset=100,
        timestamps=[5000, 5007],
        codec=CODEC_GZIP,
        producer_id=9,
        producer_epoch=2,
        base_sequence=2147483647,  # wraps to 0 for the second record, as Kafka's sequences do
        partition_leader_epoch=3,
    )
    marker = build_control_batch(9, 2, commit=False, coordinator_epoch=4, timestamp_ms=6000)
    set_base_offset(marker, read_header(marker), 102)
    path = tmp_path / "00000000000000000100.log"
    path.write_bytes(data + bytes(marker) + b"\x01\x02\x03")

    lines = list(dump_segment(str(path), deep=True, print_data=True))
    assert lines[0] == "Log starting offset: 100"
    assert lines[1] == (
        "baseOffset: 100 lastOffset: 101 count: 2 baseSequence: 2147483647 lastSequence: 0 "
        "producerId: 9 producerEpoch: 2 partitionLeaderEpoch: 3 isTransactional: false "
        f"isControl: false position: 0 CreateTime: 5007 size: {len(data)} magic: 2 "
        f"compresscodec: gzip crc: {read_header(data).crc} isvalid: true"
    )
    assert lines[2] == (
        "| offset: 100 CreateTime: 5000 keySize: 2 valueSize: 3 sequence: 2147483647 "
        "headerKeys: [a,b] key: k1 payload: one"
    )
    assert lines[3] == (
        "| offset: 101 CreateTime: 5007 keySize: -1 valueSize: 3 sequence: 0 headerKeys: [] "
        "key: null payload: two"
    )
    assert "isTransactional: true isControl: true" in lines[4]
    assert f"position: {len(data)} " in lines[4]
    assert lines[5].endswith("endTxnMarker: ABORT coordinatorEpoch: 4")
    assert lines[6] == f"Found 3 invalid bytes at the end of {path.name}"
    assert len(lines) == 7

    shallow = list(dump_segment(str(path), deep=False, print_data=False))
    assert [line[:11] for line in shallow[1:3]] == ["baseOffset:"] * 2
