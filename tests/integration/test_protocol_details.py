"""Protocol details checked with exact requests: fetch limits, acks=0, advertised listeners."""

from __future__ import annotations

import datetime
import struct
import subprocess
import time

from confluent_kafka import Producer
from kafka_helpers import consume_to_end, create_topic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader
from raw_client import RawClient

from strom.protocol.errors import ErrorCode
from strom.protocol.framing import codec_for, encode_request
from strom.protocol.records import build_batch, iter_headers


def _fetch(
    client: RawClient,
    topic: str,
    offsets: dict[int, int],
    partition_max: int,
    max_bytes: int = 2**31 - 1,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
):
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=tuple(
                    FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=partition_max)
                    for p, o in offsets.items()
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    response = client.request(request)
    return {p.partition_index: p for p in response.responses[0].partitions}


def _produce_body(topic: str, partition: int, batch: bytes, acks: int = 1) -> ProduceRequest:
    return ProduceRequest(
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=partition, records=batch),),
            ),
        ),
    )


def _produce(client: RawClient, topic: str, partition: int, batch: bytes) -> int:
    response = client.request(_produce_body(topic, partition, batch))
    reply = response.responses[0].partition_responses[0]
    assert reply.error_code == ErrorCode.none
    return reply.base_offset


def test_fetch_returns_whole_batches_within_limits(broker) -> None:
    create_topic(broker.bootstrap, "limits", 2)
    client = RawClient(broker.port)
    big = build_batch([(None, b"b" * 3000)] * 3)  # one batch of ~9 KB holding offsets 0-2
    small = build_batch([(None, b"s" * 10)] * 4)  # offsets 3-6
    assert _produce(client, "limits", 0, big) == 0
    assert _produce(client, "limits", 0, small) == 3
    assert _produce(client, "limits", 1, small) == 0

    # fetching offset 1 returns the whole batch that holds it, from its base offset
    parts = _fetch(client, "limits", {0: 1}, partition_max=100)
    records = parts[0].records
    assert [h.base_offset for h in iter_headers(records)] == [0]  # bigger than the limit: once
    assert parts[0].high_watermark == 7 and parts[0].log_start_offset == 0

    # with room, both batches come back, whole
    parts = _fetch(client, "limits", {0: 0}, partition_max=1 << 20)
    assert [h.base_offset for h in iter_headers(parts[0].records)] == [0, 3]

    # the request's max_bytes stops the second partition once the first used the budget
    parts = _fetch(client, "limits", {0: 0, 1: 0}, partition_max=1 << 20, max_bytes=len(big))
    assert [h.base_offset for h in iter_headers(parts[0].records)] == [0]
    assert parts[1].records in (b"", None)

    # an offset past the end is out of range; at the end is empty and fine
    parts = _fetch(client, "limits", {0: 8}, partition_max=1000)
    assert parts[0].error_code == ErrorCode.offset_out_of_range
    parts = _fetch(client, "limits", {0: 7}, partition_max=1000)
    assert parts[0].error_code == ErrorCode.none and not parts[0].records
    client.close()


def test_acks_zero_stores_records_without_responses(broker) -> None:
    create_topic(broker.bootstrap, "fire-and-forget", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 0, "linger.ms": 5})
    for i in range(500):
        producer.produce("fire-and-forget", value=b"f%d" % i)
    assert producer.flush(10) == 0
    values = [m.value() for m in consume_to_end(broker.bootstrap, "fire-and-forget")]
    assert values == [b"f%d" % i for i in range(500)]

    # On the wire: a Produce with acks=0 gets no response at all. The next request's
    # response is the first frame back, and the record is stored.
    client = RawClient(broker.port)
    client.send_bytes(
        encode_request(
            41, "acks0", _produce_body("fire-and-forget", 0, build_batch([(None, b"raw")]), acks=0)
        )
    )
    client.correlation = 41
    metadata = client.request_frame(
        MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    )
    assert struct.unpack_from(">i", metadata, 0)[0] == 42
    client.close()
    values = [m.value() for m in consume_to_end(broker.bootstrap, "fire-and-forget")]
    assert values[-1] == b"raw" and len(values) == 501


def test_invalid_records_are_named_by_index(broker) -> None:
    """KIP-467: INVALID_RECORD / INVALID_TIMESTAMP list each offending record by its index
    in the batch with Kafka's messages, and the partition's error_message says why."""
    create_topic(broker.bootstrap, "named-keyless", 1, {"cleanup.policy": "compact"})
    client = RawClient(broker.port)
    batch = build_batch([(b"a", b"0"), (None, b"1"), (b"c", b"2"), (None, b"3")])
    reply = client.request(_produce_body("named-keyless", 0, batch))
    reply = reply.responses[0].partition_responses[0]
    assert reply.error_code == ErrorCode.invalid_record and reply.base_offset == -1
    assert [e.batch_index for e in reply.record_errors] == [1, 3]
    assert all(
        e.batch_index_error_message
        == "Compacted topic cannot accept message without key in topic partition named-keyless-0"
        for e in reply.record_errors
    )
    assert reply.error_message.startswith("One or more records have been rejected due to 2 ")

    create_topic(broker.bootstrap, "named-late", 1, {"message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    batch = build_batch([(None, b"x")] * 3, timestamps=[now, now + 7_200_000, now])
    reply = client.request(_produce_body("named-late", 0, batch))
    reply = reply.responses[0].partition_responses[0]
    client.close()
    assert reply.error_code == ErrorCode.invalid_timestamp
    [error] = reply.record_errors
    assert error.batch_index == 1
    assert error.batch_index_error_message.startswith(
        f"Timestamp {now + 7_200_000} of message with offset 1 is out of range."
    )
    assert reply.error_message == "One or more records have been rejected due to invalid timestamp"


def test_advertised_listener_is_what_clients_are_told(fresh_broker) -> None:
    fresh_broker.overrides["advertised.listeners"] = f"PLAINTEXT://localhost:{fresh_broker.port}"
    fresh_broker.start()
    listing = subprocess.run(
        ["kcat", "-b", fresh_broker.bootstrap, "-L"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert f"broker 1 at localhost:{fresh_broker.port}" in listing
    fresh_broker.stop()


def _read_response(client: RawClient, body_type: type, correlation: int):
    frame = client.read_frame()
    (got,) = struct.unpack_from(">i", frame, 0)
    assert got == correlation  # responses come back in request order
    codec = codec_for(body_type.__api_key__, body_type.__version__)
    offset = 5 if codec.flexible_response_header else 4
    return entity_reader(codec.response_type)(frame, offset)[0]


def test_requests_behind_a_long_poll_are_handled_while_it_waits(broker) -> None:
    create_topic(broker.bootstrap, "pipelined", 1)
    client = RawClient(broker.port)
    fetch = FetchRequest(
        max_wait=datetime.timedelta(seconds=20),
        min_bytes=1,
        max_bytes=1 << 20,
        topics=(
            FetchTopic(
                topic="pipelined",
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    produce = _produce_body("pipelined", 0, build_batch([(None, b"wake up")]))
    # The fetch waits for data; the produce sent behind it on the same connection is
    # handled at once, so the fetch wakes with its batch instead of timing out empty.
    client.send_bytes(encode_request(1, "raw-test", fetch) + encode_request(2, "raw-test", produce))
    fetched = _read_response(client, FetchRequest, 1)
    assert [h.base_offset for h in iter_headers(fetched.responses[0].partitions[0].records)] == [0]
    produced = _read_response(client, ProduceRequest, 2)
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
    client.close()


def test_fsync_on_every_append_answers_pipelined_produces_in_order(fresh_broker) -> None:
    fresh_broker.overrides["log.flush.interval.messages"] = "1"
    fresh_broker.start()
    create_topic(fresh_broker.bootstrap, "synced", 1)
    client = RawClient(fresh_broker.port)
    requests = b"".join(
        encode_request(
            n, "raw-test", _produce_body("synced", 0, build_batch([(None, b"v%d" % n)] * 3), -1)
        )
        for n in range(1, 41)
    )
    client.send_bytes(requests)  # 40 produces in flight, each needing an fsync
    bases = []
    for n in range(1, 41):
        reply = _read_response(client, ProduceRequest, n).responses[0].partition_responses[0]
        assert reply.error_code == ErrorCode.none
        bases.append(reply.base_offset)
    assert bases == [3 * i for i in range(40)]
    client.close()
    values = [m.value() for m in consume_to_end(fresh_broker.bootstrap, "synced")]
    assert values == [b"v%d" % n for n in range(1, 41) for _ in range(3)]


def test_large_frames_arriving_in_pieces_between_small_ones(broker) -> None:
    create_topic(broker.bootstrap, "pieces", 1)
    client = RawClient(broker.port)

    def produce_request(n: int, value: bytes) -> bytes:
        body = _produce_body("pieces", 0, build_batch([(None, value)]))
        return encode_request(n, "raw-test", body)

    big = b"".join(bytes([i % 251]) for i in range(300_000))
    stream = (
        produce_request(1, b"small before")
        + produce_request(2, big)  # received into a buffer of its own
        + produce_request(3, b"small after")
    )
    cuts = [0, 100, 70_000, 250_000, len(stream) - 10, len(stream)]
    for start, end in zip(cuts, cuts[1:], strict=False):
        client.send_bytes(stream[start:end])
        time.sleep(0.05)  # each piece arrives in its own read
    for n in (1, 2, 3):
        reply = _read_response(client, ProduceRequest, n).responses[0].partition_responses[0]
        assert reply.error_code == ErrorCode.none and reply.base_offset == n - 1
    client.close()
    values = [m.value() for m in consume_to_end(broker.bootstrap, "pieces")]
    assert values == [b"small before", big, b"small after"]
