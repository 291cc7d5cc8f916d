"""Bad input costs one connection or gets the Kafka error code, never the broker or data."""

from __future__ import annotations

import datetime
import struct
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_helpers import create_topic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from raw_client import RawClient

from strom.protocol.errors import ErrorCode
from strom.protocol.framing import encode_request
from strom.protocol.records import build_batch


def _still_serves(port: int) -> None:
    client = RawClient(port)
    response = client.request(
        ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    client.close()
    assert response.error_code == ErrorCode.none
    assert any(k.api_key == 0 for k in response.api_keys)


def _produce(client: RawClient, topic: str, records: bytes):
    request = ProduceRequest(
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=records),)
            ),
        ),
    )
    response = client.request(request)
    return response.responses[0].partition_responses[0]


def test_garbage_frame_closes_only_that_connection(broker) -> None:
    client = RawClient(broker.port)
    client.send_bytes(struct.pack(">i", 12) + b"\xff" * 12)
    assert client.is_closed_by_peer()
    _still_serves(broker.port)


def test_unknown_api_key_closes_connection(broker) -> None:
    client = RawClient(broker.port)
    client.send_bytes(struct.pack(">ihhi", 10, 999, 0, 1) + b"\x00\x00")
    assert client.is_closed_by_peer()
    _still_serves(broker.port)


def test_oversized_frame_closes_connection(broker) -> None:
    client = RawClient(broker.port)
    client.send_bytes(struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 100)
    assert client.is_closed_by_peer()
    _still_serves(broker.port)


def test_disconnect_mid_request(broker) -> None:
    frame = encode_request(
        1, "t", ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    client = RawClient(broker.port)
    client.send_bytes(frame[: len(frame) // 2])
    client.close()
    _still_serves(broker.port)


def test_unsupported_api_versions_version_gets_ranges(broker) -> None:
    client = RawClient(broker.port)
    # ApiVersions v99: header v2 then a body the broker cannot know
    client.send_bytes(struct.pack(">ihhi", 11, 18, 99, 7) + b"\x00\x01t\x00\x00")
    frame = client.read_frame()
    correlation, error, count = struct.unpack_from(">ihi", frame, 0)
    client.close()
    assert correlation == 7
    assert error == ErrorCode.unsupported_version
    assert count >= 10
    entries = [struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count)]
    assert (18, 0, 4) in entries
    assert any(key == 0 and low == 0 for key, low, _ in entries)  # Produce v0-2: magic 0/1


def test_corrupt_batch_gets_corrupt_message_and_stores_nothing(broker) -> None:
    create_topic(broker.bootstrap, "corrupt", 1)
    client = RawClient(broker.port)
    good = build_batch([(b"k", b"first")])
    assert _produce(client, "corrupt", good).error_code == ErrorCode.none
    bad = bytearray(build_batch([(b"k", b"second")]))
    bad[-1] ^= 0xFF  # flip a payload byte: the CRC no longer matches
    reply = _produce(client, "corrupt", bytes(bad))
    assert reply.error_code == ErrorCode.corrupt_message
    truncated = build_batch([(b"k", b"third")])[:-3]
    assert _produce(client, "corrupt", truncated).error_code == ErrorCode.corrupt_message
    after = _produce(client, "corrupt", good)
    assert after.error_code == ErrorCode.none and after.base_offset == 1
    assert _produce(client, "no-such-topic", good).error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    client.close()


def test_invalid_topic_name_in_metadata(broker) -> None:
    client = RawClient(broker.port)
    response = client.request(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name="bad name!"),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
    )
    client.close()
    assert response.topics[0].error_code == ErrorCode.invalid_topic_exception


_VALID_FRAMES = [
    encode_request(
        1, "f", ApiVersionsRequest(client_software_name="f", client_software_version="1")
    ),
    encode_request(
        2,
        "f",
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name="fuzz-target"),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    ),
]


@st.composite
def _frames(draw: st.DrawFn) -> bytes:
    choice = draw(st.integers(0, 2))
    if choice == 0:  # random bytes, random claimed size
        body = draw(st.binary(max_size=200))
        size = draw(st.one_of(st.just(len(body)), st.integers(-5, (1 << 31) - 1)))
        return struct.pack(">i", size) + body
    if choice == 1:  # a valid frame with bytes flipped after the size field
        frame = bytearray(draw(st.sampled_from(_VALID_FRAMES)))
        for _ in range(draw(st.integers(1, 6))):
            i = draw(st.integers(4, len(frame) - 1))
            frame[i] = draw(st.integers(0, 255))
        return bytes(frame)
    frame = draw(st.sampled_from(_VALID_FRAMES))  # a valid frame cut short
    return frame[: draw(st.integers(1, len(frame) - 1))]


def test_fuzzed_frames_never_take_the_broker_down(broker) -> None:
    create_topic(broker.bootstrap, "fuzz-target", 1)
    client = RawClient(broker.port)
    assert _produce(client, "fuzz-target", build_batch([(b"k", b"kept")])).error_code == 0
    client.close()

    @settings(
        max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(_frames())
    def throw(frame: bytes) -> None:
        # The broker answers or closes, and closes at the latest when it reads EOF: a
        # connection still open after 10 s (it takes milliseconds) hangs, and fails.
        raw = RawClient(broker.port, timeout=10)
        try:
            raw.send_bytes(frame)
            raw.sock.shutdown(1)  # no more input: a broker waiting for more sees EOF
            try:
                while raw.sock.recv(65536):
                    pass
            except ConnectionResetError:
                pass
            except TimeoutError:
                raise AssertionError(f"the broker left the connection hanging: {frame!r}") from None
        finally:
            raw.close()

    throw()
    assert broker.alive()
    _still_serves(broker.port)
    client = RawClient(broker.port)
    reply = _produce(client, "fuzz-target", build_batch([(b"k", b"after")]))
    client.close()
    assert reply.error_code == ErrorCode.none and reply.base_offset == 1


def _lying(batch: bytes, count: int) -> bytes:
    """``batch`` with recordsCount ``count`` (and lastOffsetDelta count - 1, as an honest
    header would have it) and a CRC that matches: only the records tell the lie."""
    from crc32c import crc32c

    out = bytearray(batch)
    struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def _produce_response(client: RawClient, correlation: int) -> tuple[ErrorCode, int]:
    from kio.serial import entity_reader

    from strom.protocol.framing import codec_for

    frame = client.read_frame()
    assert struct.unpack_from(">i", frame, 0)[0] == correlation
    codec = codec_for(0, 9)
    response, _ = entity_reader(codec.response_type)(frame, 5)
    partition = response.responses[0].partition_responses[0]
    return partition.error_code, partition.base_offset


def test_a_batch_whose_record_count_lies_is_corrupt_message(broker) -> None:
    """A batch whose CRC is right but whose recordsCount says 1 and holds 1,000 records,
    or says 1,000 and holds 1, uncompressed or compressed: CORRUPT_MESSAGE, as Kafka
    answers, and nothing stored, so consumers never read offsets twice."""
    from confluent_kafka import Consumer, TopicPartition

    create_topic(broker.bootstrap, "lies", 1)
    thousand = [(None, b"v%d" % i) for i in range(1000)]
    client = RawClient(broker.port)
    for codec in (0, 3, 4):  # none, lz4, zstd
        many = build_batch(thousand, codec=codec)
        one = build_batch([(None, b"only")], codec=codec)
        for lie in (_lying(many, 1), _lying(one, 1000), _lying(many, 999)):
            assert _produce(client, "lies", lie).error_code == ErrorCode.corrupt_message
    honest = _produce(client, "lies", build_batch(thousand))
    assert (honest.error_code, honest.base_offset) == (ErrorCode.none, 0)
    after = _produce(client, "lies", build_batch([(None, b"after")], codec=3))
    assert (after.error_code, after.base_offset) == (ErrorCode.none, 1000)
    client.close()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lies"})
    consumer.assign([TopicPartition("lies", 0, 0)])
    offsets: list[int] = []
    deadline = time.monotonic() + 20
    while len(offsets) < 1001 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            offsets.append(message.offset())
    consumer.close()
    assert offsets == list(range(1001))


def test_a_batch_too_big_to_decompress_on_the_loop_keeps_its_place(broker) -> None:
    """A zstd batch of a few kB holding 8 MiB (more than the broker decompresses on its
    event loop) is checked on a worker thread; a small produce pipelined right behind it
    on the same connection is still appended after it, and another connection is
    served meanwhile."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("big-inside", 1, 1, config={"max.message.bytes": "1048576"})])[
        "big-inside"
    ].result(15)
    big = build_batch([(b"k", b"\0" * (8 * 1024 * 1024))], codec=4)
    assert len(big) < 64 * 1024
    small = build_batch([(b"k", b"small")])
    client = RawClient(broker.port)
    frames = b"".join(
        encode_request(
            correlation,
            "t",
            ProduceRequest(
                acks=1,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(
                    TopicProduceData(
                        name="big-inside",
                        partition_data=(PartitionProduceData(index=0, records=records),),
                    ),
                ),
            ),
        )
        for correlation, records in ((1, big), (2, small))
    )
    client.send_bytes(frames)
    assert _produce_response(client, 1) == (ErrorCode.none, 0)
    assert _produce_response(client, 2) == (ErrorCode.none, 1)
    client.close()
    _still_serves(broker.port)
