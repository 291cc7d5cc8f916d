"""The Raft core's messages through Kafka's wire and back: every request is encoded as a
whole request frame and decoded as the receiving node would, every response encoded as
a response frame and decoded as the sender would, and the core's message comes out equal
(fields the wire does not carry are filled in from the request, as the driver needs)."""

from __future__ import annotations

import pytest
from kio.serial import entity_reader

from strom.controller import quorum_wire as wire
from strom.protocol.framing import codec_for, decode_request, encode_request, encode_response_chunks
from strom.raft.messages import (
    Batch,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RaftError,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)

RECEIVE = {
    VoteRequest: wire.vote_from_wire,
    BeginQuorumEpochRequest: wire.begin_from_wire,
    EndQuorumEpochRequest: wire.end_from_wire,
    FetchRequest: wire.fetch_from_wire,
    FetchSnapshotRequest: wire.fetch_snapshot_from_wire,
}
BATCHES = (
    Batch(0, 3, (b"leader-change",), control=True),
    Batch(1, 3, (b"a", b"bb", b"")),
)


def _through_wire(request, response):
    body = wire.request_to_wire(request, "cluster-x")
    frame = encode_request(7, "test", body)[4:]
    codec = codec_for(type(body).__api_key__, type(body).__version__)
    received = decode_request(frame, codec).body
    assert RECEIVE[type(request)](received, request.dst) == request
    chunks = encode_response_chunks(7, codec, wire.response_to_wire(response, codec.response_type))
    data = b"".join(bytes(c) for c in chunks)[4:]
    start = 5 if codec.flexible_response_header else 4
    decoded, _ = entity_reader(codec.response_type)(memoryview(data), start)
    return wire.response_from_wire(request, decoded)


@pytest.mark.parametrize("pre_vote", [True, False])
def test_vote(pre_vote: bool) -> None:
    request = VoteRequest(2, 1, 5, 4, 120, pre_vote)
    response = VoteResponse(1, 2, RaftError.NONE, 5, -1, True, pre_vote=pre_vote)
    assert _through_wire(request, response) == response


def test_begin_and_end_quorum_epoch() -> None:
    begin = BeginQuorumEpochRequest(3, 1, 9)
    answer = BeginQuorumEpochResponse(1, 3, RaftError.FENCED_LEADER_EPOCH, 10, 2)
    assert _through_wire(begin, answer) == answer
    end = EndQuorumEpochRequest(3, 1, 9, (2, 1))
    answer_end = EndQuorumEpochResponse(1, 3, RaftError.NONE, 9, 3)
    assert _through_wire(end, answer_end) == answer_end


def test_fetch_with_batches_divergence_and_snapshot() -> None:
    request = FetchRequest(4, 1, 3, 17, 2, 250, 65536)
    response = FetchResponse(
        1, 4, RaftError.NONE, 3, 1, 4, 0, BATCHES, 2, 12, SnapshotId(40, 2),
        fetch_offset=17, last_fetched_epoch=2,
    )  # fmt: skip
    assert _through_wire(request, response) == response


def test_fetch_snapshot() -> None:
    request = FetchSnapshotRequest(2, 1, 6, SnapshotId(100, 5), 4096, 1024)
    response = FetchSnapshotResponse(
        1, 2, RaftError.NONE, 6, 1, SnapshotId(100, 5), 9000, 4096, b"\x00\x01chunk"
    )
    assert _through_wire(request, response) == response


def test_a_batch_cut_by_max_bytes_is_left_out() -> None:
    data = wire.encode_batches(BATCHES)
    assert wire.decode_batches(data) == BATCHES
    assert wire.decode_batches(data[:-1]) == BATCHES[:1]
    assert wire.decode_batches(b"") == ()
