"""Produce requests decoded in place agree with kio's decoding, field for field, in
every served version; records come back as writable views into the frame."""

from __future__ import annotations

import datetime
import struct
import sys

import pytest
from kio.index import load_request_schema

from strom.protocol.framing import FrameError, codec_for, decode_request, encode_request
from strom.protocol.produce_view import produce_reader
from strom.protocol.records import build_batch

VERSIONS = range(3, 13)


def _request(version: int, transactional_id: str | None = "tx-1"):
    schema = load_request_schema(0, version)
    module = sys.modules[schema.__module__]
    topic, partition = module.TopicProduceData, module.PartitionProduceData
    batch = build_batch([(b"k", b"v" * 300), (None, b"w")], base_timestamp=1)
    return schema(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=1500),
        topic_data=(
            topic(
                name="orders",
                partition_data=(
                    partition(index=0, records=batch),
                    partition(index=5, records=None),
                ),
            ),
            topic(name="ünïcode-topic", partition_data=(partition(index=2, records=b""),)),
        ),
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transactional_id", ["tx-1", None])
def test_in_place_decoding_matches_kio(version, transactional_id):
    body = _request(version, transactional_id)
    frame = encode_request(7, "client", body)[4:]
    codec = codec_for(0, version)
    reference = decode_request(frame, codec)  # bytes: kio decodes it
    writable = bytearray(frame)
    in_place = decode_request(writable, codec)
    assert (in_place.correlation_id, in_place.client_id) == (7, "client")
    assert in_place.size == reference.size
    got, want = in_place.body, reference.body
    assert got.transactional_id == want.transactional_id == transactional_id
    assert got.acks == want.acks == -1
    assert got.timeout == 1500
    assert [t.name for t in got.topic_data] == [t.name for t in want.topic_data]
    for got_topic, want_topic in zip(got.topic_data, want.topic_data, strict=True):
        for got_part, want_part in zip(
            got_topic.partition_data, want_topic.partition_data, strict=True
        ):
            assert got_part.index == want_part.index
            if want_part.records is None:
                assert got_part.records is None
            else:
                assert bytes(got_part.records) == want_part.records
                assert not got_part.records.readonly
    # The records are the frame's own bytes (a view of it, not a copy).
    assert got.topic_data[0].partition_data[0].records.obj is writable


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_truncated_produce_frames_are_frame_errors(version):
    frame = encode_request(7, "client", _request(version))[4:]
    codec = codec_for(0, version)
    for cut in (len(frame) - 1, len(frame) - 200, 20):
        with pytest.raises(FrameError):
            decode_request(bytearray(frame[:cut]), codec)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_versions_before_transactions_have_no_transactional_id(version):
    """Produce v0-2: acks, timeout, topics; no transactional_id (read as None)."""
    records = b"\x00" * 30
    body = (
        struct.pack(">hi", 1, 2500)
        + struct.pack(">ih", 1, 6)
        + b"orders"
        + struct.pack(">iii", 2, 3, len(records))
        + records
        + struct.pack(">ii", 4, -1)
    )
    frame = bytearray(b"head" + body)
    request, size = produce_reader(version)(memoryview(frame), 4)
    assert size == len(body)
    assert (request.transactional_id, request.acks, request.timeout) == (None, 1, 2500)
    (topic,) = request.topic_data
    assert topic.name == "orders"
    assert [p.index for p in topic.partition_data] == [3, 4]
    assert bytes(topic.partition_data[0].records) == records
    assert topic.partition_data[1].records is None
