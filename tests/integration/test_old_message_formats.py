"""Old clients' message formats over the wire: Produce v0-2 with message sets of magic 0
and 1 (stored as v2 batches, read back by confluent-kafka), and Fetch v0-3 of v2 batches
written by confluent-kafka, answered in magic 0 (v0-1) and magic 1 (v2-3) as Kafka's
conversion rules say; and kafka-python pinned to Kafka 0.9 and 0.10.1, a real client
of those versions. Requests and responses are laid out by hand here (the old
versions' shapes), and the expected message sets are built with struct and zlib.crc32
(legacy_messages.py), independently of the broker's conversion code."""

from __future__ import annotations

import gzip
import struct
import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka_helpers import consume_all, create_topic
from legacy_messages import entry, message, parse_wrapper
from raw_client import RawClient

from strom.protocol.errors import ErrorCode
from strom.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    CODEC_GZIP,
    build_batch,
    decode_records,
    iter_headers,
)


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values

    def string(self) -> str:
        (n,) = self.take(">h")
        self.at += n
        return self.data[self.at - n : self.at].decode()

    def bytes(self) -> bytes:
        (n,) = self.take(">i")
        self.at += max(n, 0)
        return self.data[self.at - n : self.at] if n >= 0 else b""


def _call(client: RawClient, api_key: int, version: int, body: bytes) -> _Reader:
    client.correlation += 1
    frame = struct.pack(">hhi", api_key, version, client.correlation) + _string("old") + body
    client.send_bytes(struct.pack(">i", len(frame)) + frame)
    response = client.read_frame()
    assert struct.unpack_from(">i", response)[0] == client.correlation
    reader = _Reader(response)
    reader.at = 4
    return reader


def produce(client: RawClient, version: int, topic: str, records: bytes) -> tuple[int, int, int]:
    """(error, base offset, log append time or -1) of a Produce v0-3 to partition 0."""
    body = struct.pack(">hi", -1, 10_000) + struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">iii", 1, 0, len(records)) + records
    if version >= 3:
        body = struct.pack(">h", -1) + body  # null transactional id
    r = _call(client, 0, version, body)
    assert r.take(">i") == (1,) and r.string() == topic and r.take(">i") == (1,)
    index, error, base = r.take(">ihq")
    append_time = r.take(">q")[0] if version >= 2 else -1
    assert index == 0
    return error, base, append_time


def fetch(client: RawClient, version: int, topic: str, offset: int, **limits) -> tuple[int, bytes]:
    """(error, records) of a Fetch v0-4 of partition 0 from ``offset``."""
    send_fetch(client, version, topic, offset, **limits)
    return read_fetch(client, version, topic)


def send_fetch(client: RawClient, version: int, topic: str, offset: int, **limits) -> None:
    """Send a Fetch v0-4 of partition 0 from ``offset`` (read_fetch reads its answer)."""
    body = struct.pack(">iii", -1, 100, 0)  # consumer, max wait 100 ms, min bytes 0
    if version >= 3:
        body += struct.pack(">i", limits.get("max_bytes", 50 * 2**20))
    if version >= 4:
        body += b"\x00"  # read uncommitted
    body += struct.pack(">i", 1) + _string(topic) + struct.pack(">i", 1)
    body += struct.pack(">iqi", 0, offset, limits.get("partition_max_bytes", 2**20))
    client.correlation += 1
    frame = struct.pack(">hhi", 1, version, client.correlation) + _string("old") + body
    client.send_bytes(struct.pack(">i", len(frame)) + frame)


def read_fetch(client: RawClient, version: int, topic: str) -> tuple[int, bytes]:
    """(error, records) of the answer to send_fetch."""
    response = client.read_frame()
    assert struct.unpack_from(">i", response)[0] == client.correlation
    r = _Reader(response)
    r.at = 4
    if version >= 1:
        r.take(">i")  # throttle time
    assert r.take(">i") == (1,) and r.string() == topic and r.take(">i") == (1,)
    index, error, _high_watermark = r.take(">ihq")
    if version >= 4:
        r.take(">q")  # last stable offset
        (aborted,) = r.take(">i")
        r.at += 16 * max(aborted, 0)
    assert index == 0
    return error, r.bytes()


def entries(data: bytes) -> list[bytes]:
    """A message set split into its entries."""
    out, at = [], 0
    while at < len(data):
        (size,) = struct.unpack_from(">i", data, at + 8)
        out.append(data[at : at + 12 + size])
        at += 12 + size
    return out


def stored_batches(client: RawClient, topic: str):
    """(header, [records]) of each v2 batch of partition 0, read with Fetch v4."""
    error, data = fetch(client, 4, topic, 0)
    assert error == ErrorCode.none
    return [(h, decode_records(data, h)) for h in iter_headers(data)]


def test_produce_v0_magic0_read_back_as_v2(broker) -> None:
    create_topic(broker.bootstrap, "old-v0", 1)
    rows = [(b"k0", b"first"), (None, b"second"), (b"k2", None)]
    data = b"".join(entry(0, message(0, 0, key, value)) for key, value in rows)
    with RawClient(broker.port) as client:
        assert produce(client, 0, "old-v0", data)[:2] == (ErrorCode.none, 0)
        assert produce(client, 1, "old-v0", data)[:2] == (ErrorCode.none, 3)
        ((header, records), second) = stored_batches(client, "old-v0")
        assert (header.magic, header.base_offset, header.record_count) == (2, 0, 3)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (i, -1, key, value) for i, (key, value) in enumerate(rows)
    ]
    got = consume_all(broker.bootstrap, "old-v0", 6)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [
        (i, key, value) for i, (key, value) in enumerate(rows + rows)
    ]
    assert {m.timestamp()[1] for m in got} == {-1}  # magic 0 has no timestamp


def test_produce_v2_gzip_magic1_wrapper(broker) -> None:
    create_topic(broker.bootstrap, "old-gzip", 1)
    now = int(time.time() * 1000)
    rows = [(b"a", b"alpha", now - 5), (b"b", b"beta", now - 3), (None, b"gamma", now - 4)]
    inner = b"".join(
        entry(i, message(1, 0, key, value, ts)) for i, (key, value, ts) in enumerate(rows)
    )
    wrapper = entry(2, message(1, CODEC_GZIP, None, gzip.compress(inner), now - 3))
    with RawClient(broker.port) as client:
        assert produce(client, 2, "old-gzip", wrapper) == (ErrorCode.none, 0, -1)
        assert produce(client, 2, "old-gzip", wrapper) == (ErrorCode.none, 3, -1)
        batches = stored_batches(client, "old-gzip")
    assert [(h.base_offset, h.codec, h.record_count) for h, _ in batches] == [
        (0, CODEC_GZIP, 3),
        (3, CODEC_GZIP, 3),
    ]
    got = consume_all(broker.bootstrap, "old-gzip", 6)
    assert [(m.offset(), m.key(), m.value(), m.timestamp()) for m in got] == [
        (i, key, value, (TIMESTAMP_CREATE_TIME, ts))
        for i, (key, value, ts) in enumerate(rows + rows)
    ]


def test_produce_v2_log_append_time_topic(broker) -> None:
    create_topic(broker.bootstrap, "old-lat", 1, {"message.timestamp.type": "LogAppendTime"})
    data = entry(0, message(1, 0, b"k", b"v", 5)) + entry(1, message(1, 0, None, b"w", 6))
    before = int(time.time() * 1000)
    with RawClient(broker.port) as client:
        error, base, append_time = produce(client, 2, "old-lat", data)
        assert (error, base) == (ErrorCode.none, 0)
        assert before <= append_time <= int(time.time() * 1000)
        # Read back in magic 1: every message carries the append time and its flag.
        assert fetch(client, 2, "old-lat", 0) == (
            ErrorCode.none,
            entry(0, message(1, ATTR_TIMESTAMP_TYPE, b"k", b"v", append_time))
            + entry(1, message(1, ATTR_TIMESTAMP_TYPE, None, b"w", append_time)),
        )
    got = consume_all(broker.bootstrap, "old-lat", 2)
    assert [m.timestamp() for m in got] == [(TIMESTAMP_LOG_APPEND_TIME, append_time)] * 2


def test_bad_message_sets_get_kafka_errors(broker) -> None:
    create_topic(broker.bootstrap, "old-bad", 1)
    create_topic(broker.bootstrap, "old-compacted", 1, {"cleanup.policy": "compact"})
    create_topic(broker.bootstrap, "old-small", 1, {"max.message.bytes": "200"})
    good = entry(0, message(0, 0, b"k", b"v"))
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])
    mixed = good + entry(1, message(1, 0, b"k", b"v", 1))
    with RawClient(broker.port) as client:
        assert produce(client, 0, "old-bad", corrupt)[0] == ErrorCode.corrupt_message
        assert produce(client, 1, "old-bad", mixed)[0] == ErrorCode.invalid_record
        assert produce(client, 3, "old-bad", good)[0] == ErrorCode.invalid_record  # v3: v2 only
        assert produce(client, 0, "old-bad", good)[:2] == (ErrorCode.none, 0)  # nothing else
        large = entry(0, message(0, 0, None, b"x" * 300))
        assert produce(client, 1, "old-small", large)[0] == ErrorCode.message_too_large
        # Records refused one by one (a keyless one on a compacted topic): versions
        # without record_errors get the partition's error alone.
        keyless = entry(0, message(1, 0, None, b"v", int(time.time() * 1000)))
        assert produce(client, 2, "old-compacted", keyless)[0] == ErrorCode.invalid_record
        keyless_v2 = build_batch([(None, b"v")], base_timestamp=int(time.time() * 1000))
        assert produce(client, 3, "old-compacted", keyless_v2)[0] == ErrorCode.invalid_record


@pytest.fixture(scope="module")
def written_by_confluent_kafka(broker):
    """Three records with headers in uncompressed v2 batches (one, usually), the same
    three in gzip batches and in zstd batches, each codec in its own topic."""
    names = {"none": "v2-plain", "gzip": "v2-gzip", "zstd": "v2-zstd"}
    for codec, topic in names.items():
        create_topic(broker.bootstrap, topic, 1)
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 200}
        )
        producer.list_topics(topic, timeout=10)  # known before the first record: one batch
        for i in range(3):
            producer.produce(topic, key=f"key-{i}", value=f"value-{i}" * 3, headers={"h": b"x"})
        assert producer.flush(10) == 0
    return names


def test_fetch_v0_and_v3_of_uncompressed_batches(broker, written_by_confluent_kafka) -> None:
    topic = written_by_confluent_kafka["none"]
    with RawClient(broker.port) as client:
        batches = stored_batches(client, topic)
        records = [r for _, batch in batches for r in batch]
        assert {h.codec for h, _ in batches} == {0} and all(r.headers for r in records)
        v0 = b"".join(entry(r.offset, message(0, 0, r.key, r.value)) for r in records)
        v1 = b"".join(entry(r.offset, message(1, 0, r.key, r.value, r.timestamp)) for r in records)
        assert fetch(client, 0, topic, 0) == (ErrorCode.none, v0)
        assert fetch(client, 1, topic, 0) == (ErrorCode.none, v0)
        assert fetch(client, 2, topic, 0) == (ErrorCode.none, v1)
        assert fetch(client, 3, topic, 0) == (ErrorCode.none, v1)
        # From the middle of an uncompressed batch: the records before are dropped.
        assert fetch(client, 3, topic, 1) == (ErrorCode.none, b"".join(entries(v1)[1:]))
        assert fetch(client, 0, topic, 3) == (ErrorCode.none, b"")


def test_fetch_v0_and_v3_of_gzip_batches(broker, written_by_confluent_kafka) -> None:
    """One wrapper per v2 batch, holding all its records, whatever the fetch offset."""
    topic = written_by_confluent_kafka["gzip"]
    with RawClient(broker.port) as client:
        batches = stored_batches(client, topic)
        assert {h.codec for h, _ in batches} == {CODEC_GZIP}
        for version, magic in ((0, 0), (3, 1)):
            for offset in (0, 1):
                error, data = fetch(client, version, topic, offset)
                assert error == ErrorCode.none
                sent = [(h, rs) for h, rs in batches if h.last_offset >= offset]
                assert len(entries(data)) == len(sent)
                for wrapper, (header, records) in zip(entries(data), sent, strict=True):
                    wrapper_offset, got_magic, attributes, ts, value = parse_wrapper(wrapper)
                    assert (wrapper_offset, got_magic) == (header.last_offset, magic)
                    assert attributes == CODEC_GZIP
                    if magic == 0:
                        inner = [entry(r.offset, message(0, 0, r.key, r.value)) for r in records]
                    else:  # relative inner offsets, the wrapper stamped with the max timestamp
                        assert ts == max(r.timestamp for r in records)
                        inner = [
                            entry(i, message(1, 0, r.key, r.value, r.timestamp))
                            for i, r in enumerate(records)
                        ]
                    assert gzip.decompress(value) == b"".join(inner)


def test_fetch_v3_of_zstd_is_unsupported_compression(broker, written_by_confluent_kafka) -> None:
    topic = written_by_confluent_kafka["zstd"]
    with RawClient(broker.port) as client:
        assert fetch(client, 3, topic, 0) == (ErrorCode.unsupported_compression_type, b"")


def test_fetch_v3_limits_count_the_bytes_read(broker, written_by_confluent_kafka) -> None:
    """With a partition limit below the first batch, the whole first batch still comes,
    converted, and no partial message follows it."""
    topic = written_by_confluent_kafka["none"]
    with RawClient(broker.port) as client:
        (_, records), *_ = stored_batches(client, topic)
        want = b"".join(
            entry(r.offset, message(1, 0, r.key, r.value, r.timestamp)) for r in records
        )
        assert fetch(client, 3, topic, 0, partition_max_bytes=10) == (ErrorCode.none, want)
        assert fetch(client, 3, topic, 0, max_bytes=10) == (ErrorCode.none, want)


def test_old_fetchers_read_uncommitted_without_markers(broker) -> None:
    """An aborted transaction's records are sent (these versions read uncommitted), the
    markers never; a read holding only a marker goes on to the records after it."""
    topic = "old-txn"
    create_topic(broker.bootstrap, topic, 1)
    config = {"bootstrap.servers": broker.bootstrap, "transactional.id": "old-txn-producer"}
    producer = Producer(config)
    producer.init_transactions(10)
    for value, commit in ((b"committed", True), (b"aborted", False)):
        producer.begin_transaction()
        producer.produce(topic, value=value, partition=0)
        producer.flush(10)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    assert plain.flush(10) == 0
    with RawClient(broker.port) as client:
        batches = stored_batches(client, topic)
        data = [(h, r) for h, rs in batches if not h.is_control for r in rs]
        markers = [h.base_offset for h, _ in batches if h.is_control]
        assert [r.value for _, r in data] == [b"committed", b"aborted", b"after"]
        assert len(markers) == 2
        want = [entry(r.offset, message(1, 0, r.key, r.value, r.timestamp)) for _, r in data]
        assert fetch(client, 3, topic, 0) == (ErrorCode.none, b"".join(want))
        # From the last marker with a limit that reads only it: the next record comes.
        assert fetch(client, 3, topic, markers[-1], partition_max_bytes=1) == (
            ErrorCode.none,
            want[-1],
        )


@pytest.mark.parametrize(
    ("api_version", "codec"),
    [((0, 9), None), ((0, 9), "gzip"), ((0, 10, 1), None), ((0, 10, 1), "gzip")],
)
def test_kafka_python_speaking_old_versions(broker, api_version, codec) -> None:
    """kafka-python pinned to Kafka 0.9 (Produce v1 and Fetch v1: magic 0) or 0.10.1
    (Produce v2 and Fetch v3: magic 1) writes and reads; confluent-kafka reads too."""
    topic = f"kafka-python-{'-'.join(map(str, api_version))}-{codec}"
    create_topic(broker.bootstrap, topic, 1)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, api_version=api_version, compression_type=codec
    )
    for i in range(5):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i)
    producer.flush()
    producer.close()
    want = [(i, b"k%d" % i, b"v%d" % i) for i in range(5)]
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, api_version=api_version, enable_auto_commit=False
    )
    partition = KpTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < len(want) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += records
    got += [r for records in consumer.poll(timeout_ms=200).values() for r in records]  # extras
    consumer.close()
    assert [(r.offset, r.key, r.value) for r in got] == want
    if api_version == (0, 9):
        assert {r.timestamp for r in got} == {None}  # magic 0 has no timestamps
    else:
        assert all(r.timestamp > 0 for r in got)
    read = consume_all(broker.bootstrap, topic, 5)
    assert [(m.offset(), m.key(), m.value()) for m in read] == want


def _rss(pid: int) -> int:
    for line in open(f"/proc/{pid}/status", encoding="ascii"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_decompression_bombs_are_refused_without_taking_the_memory(broker) -> None:
    """A Produce v0 gzip message set of about 128 kB that holds 128 MiB, and a zstd v2
    batch of a few kB that holds as much sent to a compacted topic (whose keys the broker
    reads): past the 64 MiB a batch may decompress to, MESSAGE_TOO_LARGE, nothing
    stored, the broker's memory not grown by what the bombs hold, another client
    served."""
    import gzip

    from confluent_kafka.admin import AdminClient, NewTopic

    from strom.protocol.records import build_batch

    create_topic(broker.bootstrap, "old-bomb", 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("compact-bomb", 1, 1, config={"cleanup.policy": "compact"})])[
        "compact-bomb"
    ].result(15)
    inner = entry(0, message(0, 0, b"k", b"\0" * (128 * 1024 * 1024)))
    wrapper = entry(0, message(0, 1, None, gzip.compress(inner, compresslevel=1)))
    before = _rss(broker.proc.pid)
    with RawClient(broker.port) as client:
        assert produce(client, 0, "old-bomb", wrapper)[0] == ErrorCode.message_too_large
        zstd_bomb = bytes(
            build_batch([(b"k", b"\0" * (128 * 1024 * 1024))], base_timestamp=1, codec=4)
        )
        assert len(zstd_bomb) < 64 * 1024
        error = produce(client, 3, "compact-bomb", zstd_bomb)[0]
        assert error == ErrorCode.message_too_large
        assert fetch(client, 4, "old-bomb", 0) == (ErrorCode.none, b"")
    grown = _rss(broker.proc.pid) - before
    assert grown < 300 * 1024 * 1024, f"RSS grew by {grown >> 20} MiB"
    with RawClient(broker.port) as other:
        assert produce(other, 0, "old-bomb", entry(0, message(0, 0, b"k", b"v")))[:2] == (
            ErrorCode.none,
            0,
        )


def test_down_conversion_does_not_hold_up_other_clients(broker) -> None:
    """A Fetch v3 of a stored gzip batch of 300,000 small records (a second or more of
    down-conversion) is converted off the event loop: another client's request, sent
    after it, is answered while the fetch is still being converted, and the fetch then
    gets every message."""
    import select

    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from strom.protocol.records import build_batch

    count = 300_000
    create_topic(broker.bootstrap, "many-small", 1, {"max.message.bytes": "10485760"})
    batch = build_batch([(None, b"%08d" % i) for i in range(count)], codec=1)
    with RawClient(broker.port, timeout=60) as slow, RawClient(broker.port) as other:
        assert produce(slow, 3, "many-small", batch)[:2] == (ErrorCode.none, 0)
        send_fetch(slow, 3, "many-small", 0)
        answered = other.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert answered.error_code == ErrorCode.none
        readable, _, _ = select.select([slow.sock], [], [], 0)
        assert not readable, "the fetch was answered before a request sent after it"
        error, data = read_fetch(slow, 3, "many-small")
    assert error == ErrorCode.none
    _, magic, attributes, _, value = parse_wrapper(data)
    assert (magic, attributes & 0x07) == (1, 1)
    inner = entries(gzip.decompress(value))
    assert len(inner) == count
