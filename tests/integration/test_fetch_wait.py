"""Fetch long polling with exact requests: a fetch with less than ``min_bytes`` to answer
waits until ``max_wait_ms`` runs out (and then answers what there is), or until
produces bring it ``min_bytes``; a produce of fewer bytes does not end the wait.

Times are checked one way only where the broker could be early (a wait never ends
before ``max_wait_ms``); where it could only be late, the bound is many seconds wide.
"""

from __future__ import annotations

import datetime
import select
import time

from kafka_helpers import create_topic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader
from raw_client import RawClient

from strom.protocol.errors import ErrorCode
from strom.protocol.framing import codec_for, encode_request
from strom.protocol.records import build_batch, iter_headers

MAX_WAIT_MS = 1000
EARLY_S = 0.02  # clock granularity: a wait may seem this much shorter than it was
LATE_S = 15.0  # a loaded machine may answer late, never this late
FETCH_CODEC = codec_for(FetchRequest.__api_key__, FetchRequest.__version__)


def _send_fetch(client: RawClient, topic: str, max_wait_ms: int, min_bytes: int) -> float:
    """Send a fetch of partition 0 from offset 0, not reading the answer; when it was sent."""
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    client.send_bytes(encode_request(1, "raw-test", request))
    return time.monotonic()


def _read_fetch(client: RawClient) -> list[int]:
    """The base offsets of the batches the fetch sent by ``_send_fetch`` was answered."""
    frame = client.read_frame()
    offset = 5 if FETCH_CODEC.flexible_response_header else 4
    response = entity_reader(FETCH_CODEC.response_type)(frame, offset)[0]
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    return [h.base_offset for h in iter_headers(partition.records or b"")]


def _answered(client: RawClient, within: float) -> bool:
    """Whether an answer (or a close) arrived on ``client`` within ``within`` seconds."""
    readable, _, _ = select.select([client.sock], [], [], within)
    return bool(readable)


def _produce(port: int, topic: str, value: bytes) -> int:
    """Append one record and return its offset once the broker has acknowledged it."""
    request = ProduceRequest(
        acks=1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(
                    PartitionProduceData(index=0, records=build_batch([(None, value)])),
                ),
            ),
        ),
    )
    with RawClient(port) as client:
        reply = client.request(request).responses[0].partition_responses[0]
    assert reply.error_code == ErrorCode.none
    return reply.base_offset


def _wait_for_leader(port: int, topic: str) -> None:
    """Return once a fetch of ``topic`` is answered without error (a new topic's leader
    is known)."""
    deadline = time.monotonic() + 30
    while True:
        with RawClient(port) as client:
            _send_fetch(client, topic, 0, 1)
            try:
                _read_fetch(client)
                return
            except AssertionError:
                assert time.monotonic() < deadline, f"{topic} has no leader after 30 s"
        time.sleep(0.1)


def test_a_fetch_with_nothing_to_read_waits_max_wait_ms(broker) -> None:
    create_topic(broker.bootstrap, "wait-empty", 1)
    _wait_for_leader(broker.port, "wait-empty")
    with RawClient(broker.port, timeout=60) as client:
        sent = _send_fetch(client, "wait-empty", MAX_WAIT_MS, 1)
        assert _read_fetch(client) == []
        waited = time.monotonic() - sent
    assert MAX_WAIT_MS / 1000 - EARLY_S <= waited < MAX_WAIT_MS / 1000 + LATE_S


def test_max_wait_ms_ends_the_wait_with_what_is_there_below_min_bytes(broker) -> None:
    create_topic(broker.bootstrap, "wait-some", 1)
    assert _produce(broker.port, "wait-some", b"x" * 100) == 0
    with RawClient(broker.port, timeout=60) as client:
        sent = _send_fetch(client, "wait-some", MAX_WAIT_MS, 100_000)
        assert _read_fetch(client) == [0]  # less than min_bytes, answered when the wait ends
        waited = time.monotonic() - sent
    assert MAX_WAIT_MS / 1000 - EARLY_S <= waited < MAX_WAIT_MS / 1000 + LATE_S


def test_min_bytes_keeps_a_fetch_waiting_until_produces_bring_enough(broker) -> None:
    create_topic(broker.bootstrap, "wait-min-bytes", 1)
    _wait_for_leader(broker.port, "wait-min-bytes")
    with RawClient(broker.port, timeout=60) as client:
        _send_fetch(client, "wait-min-bytes", 60_000, 2000)
        assert _produce(broker.port, "wait-min-bytes", b"s" * 100) == 0
        # 100 bytes are less than min_bytes: the fetch goes on waiting
        assert not _answered(client, 1.0), "answered below min_bytes before max_wait_ms"
        assert _produce(broker.port, "wait-min-bytes", b"b" * 3000) == 1
        # long before the 60 s of max_wait_ms
        assert _answered(client, LATE_S), "min_bytes reached, but the fetch still waits"
        assert _read_fetch(client) == [0, 1]
