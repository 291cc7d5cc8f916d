"""Message sets of magic 0 and 1: up-conversion to v2 batches (Produce v0-2) and
down-conversion of v2 batches (Fetch v0-3), checked against bytes built here by hand
from the message format's layout (offset, size, CRC32 of magic..end, magic,
attributes, [timestamp], key, value) with struct and zlib.crc32."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest
from legacy_messages import entry, message, parse_wrapper

from strom.protocol import message_sets
from strom.protocol.codecs import decompress
from strom.protocol.errors import ErrorCode
from strom.protocol.message_sets import (
    CorruptMessageError,
    InvalidMessageError,
    InvalidTimestampTypeError,
    MessageTooLargeError,
    UnsupportedCompressionError,
    down_convert,
    up_convert,
)
from strom.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    build_batch,
    build_control_batch,
    decode_records,
    read_header,
    set_log_append_time,
)

LZ4_MAGIC = b"\x04\x22\x4d\x18"


def gzip_wrapper(magic: int, offset: int, inner: bytes, ts: int = -1, attributes: int = 0):
    return entry(offset, message(magic, CODEC_GZIP | attributes, None, gzip.compress(inner), ts))


def records_of(batch: bytes):
    header = read_header(batch)
    return header, [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(batch, header)]


# ---------------------------------------------------------------------------
# Up-conversion


def test_magic0_messages_become_one_uncompressed_batch_without_timestamps():
    data = (
        entry(0, message(0, 0, b"k1", b"v1"))
        + entry(0, message(0, 0, None, b"v2"))
        + entry(7, message(0, 0, b"k3", None))
    )
    batch = up_convert(data, log_append_time=False)
    assert batch == build_batch(
        [(b"k1", b"v1"), (None, b"v2"), (b"k3", None)], timestamps=[-1, -1, -1]
    )
    header, records = records_of(batch)
    assert (header.base_offset, header.codec, header.record_count) == (0, CODEC_NONE, 3)
    assert (header.base_timestamp, header.max_timestamp, header.producer_id) == (-1, -1, -1)
    assert records == [(0, -1, b"k1", b"v1"), (1, -1, None, b"v2"), (2, -1, b"k3", None)]


def test_magic1_messages_keep_their_timestamps():
    data = entry(0, message(1, 0, b"a", b"1", ts=1_700_000_000_005)) + entry(
        1, message(1, 0, b"b", b"2", ts=1_700_000_000_001)
    )
    header, records = records_of(up_convert(data, log_append_time=False))
    assert (header.base_timestamp, header.max_timestamp) == (1_700_000_000_005, 1_700_000_000_005)
    assert records == [(0, 1_700_000_000_005, b"a", b"1"), (1, 1_700_000_000_001, b"b", b"2")]


@pytest.mark.parametrize("wrapper_offset", [2, 0, 41])
def test_gzip_magic1_wrapper_with_relative_offsets_keeps_gzip(wrapper_offset):
    inner = b"".join(
        entry(i, message(1, 0, f"k{i}".encode(), f"v{i}".encode(), ts=1000 + i)) for i in range(3)
    )
    batch = up_convert(gzip_wrapper(1, wrapper_offset, inner, ts=1002), log_append_time=False)
    header, records = records_of(batch)
    assert header.codec == CODEC_GZIP and header.record_count == 3
    assert records == [(i, 1000 + i, f"k{i}".encode(), f"v{i}".encode()) for i in range(3)]


def test_gzip_magic0_wrapper_with_absolute_offsets():
    inner = b"".join(entry(100 + i, message(0, 0, None, b"x" * i)) for i in range(4))
    header, records = records_of(up_convert(gzip_wrapper(0, 103, inner), log_append_time=False))
    assert header.codec == CODEC_GZIP
    assert records == [(i, -1, None, b"x" * i) for i in range(4)]


def test_log_append_time_wrapper_gives_its_timestamp_to_inner_messages():
    inner = entry(0, message(1, 0, None, b"a", ts=1)) + entry(1, message(1, 0, None, b"b", ts=2))
    data = gzip_wrapper(1, 1, inner, ts=9999, attributes=ATTR_TIMESTAMP_TYPE)
    _, records = records_of(up_convert(data, log_append_time=False))
    assert [r[1] for r in records] == [9999, 9999]
    with pytest.raises(InvalidTimestampTypeError) as raised:
        up_convert(data, log_append_time=True)
    assert raised.value.error_code == ErrorCode.invalid_timestamp


@pytest.mark.parametrize("codec", [CODEC_SNAPPY, CODEC_LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_snappy_and_lz4_wrappers_as_kafka_frames_them(codec, magic):
    inner = b"".join(entry(i, message(magic, 0, b"k", b"v" * 50, ts=5)) for i in range(3))
    if codec == CODEC_SNAPPY:  # xerial framing, as the Java client writes it
        block = bytes(cramjam.snappy.compress_raw(inner))
        value = b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block)) + block
    else:  # an LZ4 frame; in magic 0 its header checksum covers the frame magic too
        hc = 0x1A if magic == 0 else 0x82
        block = bytes(cramjam.lz4.compress_block(inner, store_size=False))
        value = LZ4_MAGIC + bytes((0x60, 0x40, hc)) + struct.pack("<I", len(block)) + block
        value += b"\0\0\0\0"
    data = entry(2, message(magic, codec, None, value, ts=5))
    header, records = records_of(up_convert(data, log_append_time=False))
    assert header.codec == codec
    ts = 5 if magic == 1 else -1
    assert records == [(i, ts, b"k", b"v" * 50) for i in range(3)]


def test_lz4_header_checksum_is_xxh32_of_the_descriptor():
    """cramjam's decoder checks the header byte: a frame with a content size (10 bytes
    of descriptor, both the word and the byte steps of XXH32) decodes."""
    payload = b"hello lz4 " * 20
    descriptor = bytes((0x68, 0x40)) + struct.pack("<Q", len(payload))
    block = bytes(cramjam.lz4.compress_block(payload, store_size=False))
    hc = message_sets._lz4_header_checksum(descriptor)
    frame = LZ4_MAGIC + descriptor + bytes((hc,)) + struct.pack("<I", len(block)) + block
    assert bytes(cramjam.lz4.decompress(frame + b"\0\0\0\0")) == payload
    assert message_sets._lz4_header_checksum(bytes((0x60, 0x40))) == 0x82
    assert message_sets._lz4_header_checksum(LZ4_MAGIC + bytes((0x60, 0x40))) == 0x1A


def _magic_byte(data: bytes, magic: int) -> bytes:
    """An entry whose magic byte says ``magic`` (its CRC recomputed)."""
    body = bytearray(data[16:])
    body[0] = magic
    return data[:8] + struct.pack(">iI", len(body) + 4, zlib.crc32(body)) + bytes(body)


def _corrupt(data: bytes) -> bytes:
    broken = bytearray(data)
    broken[-1] ^= 0xFF
    return bytes(broken)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_corrupt(entry(0, message(0, 0, b"k", b"v"))), id="crc"),
        pytest.param(entry(0, message(0, 0, b"k", b"v"))[:-1], id="truncated"),
        pytest.param(struct.pack(">qi", 0, 10) + b"\0" * 10, id="below-overhead"),
        pytest.param(entry(0, message(0, 0, b"k", b"v")) + b"\0" * 5, id="trailing-bytes"),
        pytest.param(_magic_byte(entry(0, message(1, 0, b"k", b"v", ts=1)), 3), id="magic-3"),
        pytest.param(
            gzip_wrapper(1, 0, _corrupt(entry(0, message(1, 0, None, b"v", ts=1)))),
            id="inner-crc",
        ),
        pytest.param(entry(0, message(1, CODEC_GZIP, None, b"not gzip", ts=1)), id="gzip"),
        pytest.param(entry(0, message(1, 6, None, b"x", ts=1)), id="unknown-codec"),
    ],
)
def test_corrupt_message_sets(data):
    with pytest.raises(CorruptMessageError) as raised:
        up_convert(data, log_append_time=False)
    assert raised.value.error_code == ErrorCode.corrupt_message


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            entry(0, message(0, 0, None, b"a")) + entry(1, message(1, 0, None, b"b", ts=1)),
            id="mixed-magic",
        ),
        pytest.param(
            entry(0, message(1, 0, None, b"a", ts=1))
            + gzip_wrapper(1, 1, entry(0, message(1, 0, None, b"b", ts=1))),
            id="two-with-a-wrapper",
        ),
        pytest.param(
            gzip_wrapper(1, 0, gzip_wrapper(1, 0, entry(0, message(1, 0, None, b"b", ts=1)))),
            id="nested-compression",
        ),
        pytest.param(gzip_wrapper(1, 0, entry(0, message(0, 0, None, b"b"))), id="inner-magic"),
        pytest.param(
            gzip_wrapper(1, 1, b"".join(entry(i, message(1, 0, None, b"b", ts=1)) for i in (0, 5))),
            id="wrapper-offset-below-last",
        ),
        pytest.param(gzip_wrapper(1, 0, b""), id="empty-wrapper"),
        pytest.param(entry(0, message(1, CODEC_GZIP, None, None, ts=1)), id="null-wrapper"),
        pytest.param(entry(0, message(1, CODEC_ZSTD, None, b"x", ts=1)), id="zstd-wrapper"),
        pytest.param(
            entry(0, message(0, 0, None, b"a")) + build_batch([(None, b"b")]), id="v2-batch-after"
        ),
    ],
)
def test_invalid_message_sets(data):
    with pytest.raises(InvalidMessageError) as raised:
        up_convert(data, log_append_time=False)
    assert raised.value.error_code == ErrorCode.invalid_record


def test_messages_above_max_message_bytes():
    small = entry(0, message(1, 0, None, b"v" * 10, ts=1))
    large = entry(1, message(1, 0, None, b"v" * 100, ts=1))
    assert up_convert(small + large, log_append_time=False, max_message_bytes=len(large))
    with pytest.raises(MessageTooLargeError) as raised:
        up_convert(small + large, log_append_time=False, max_message_bytes=len(large) - 1)
    assert raised.value.error_code == ErrorCode.message_too_large


def test_uncompressed_log_append_time_message_without_timestamp_is_refused():
    flagged = entry(0, message(1, ATTR_TIMESTAMP_TYPE, None, b"v", ts=-1))
    with pytest.raises(InvalidTimestampTypeError):
        up_convert(flagged, log_append_time=False)
    stamped = entry(0, message(1, ATTR_TIMESTAMP_TYPE, None, b"v", ts=3))
    assert records_of(up_convert(stamped, log_append_time=False))[1] == [(0, 3, None, b"v")]


# ---------------------------------------------------------------------------
# Down-conversion

ROWS = [(b"k0", b"v0", [("h", b"x")]), (None, b"v1", []), (b"k2", None, [])]
STAMPS = [1000, 1005, 1003]


def v2(codec=CODEC_NONE, base_offset=10, **kw) -> bytes:
    return build_batch(ROWS, base_offset=base_offset, timestamps=STAMPS, codec=codec, **kw)


def test_uncompressed_batch_to_magic1_messages_headers_dropped():
    want = b"".join(
        entry(10 + i, message(1, 0, key, value, ts=STAMPS[i]))
        for i, (key, value, _) in enumerate(ROWS)
    )
    assert down_convert(v2(), 1, 10) == want


def test_uncompressed_batch_to_magic0_messages():
    want = b"".join(
        entry(10 + i, message(0, 0, key, value)) for i, (key, value, _) in enumerate(ROWS)
    )
    assert down_convert(v2(), 0, 10) == want


def test_uncompressed_batch_drops_records_before_the_fetch_offset():
    want = b"".join(
        entry(10 + i, message(1, 0, key, value, ts=STAMPS[i]))
        for i, (key, value, _) in enumerate(ROWS)
        if i >= 1
    )
    assert down_convert(v2(), 1, 11) == want


def test_gzip_batch_to_magic1_wrapper_with_relative_offsets():
    got = down_convert(v2(CODEC_GZIP), 1, 11)  # a compressed batch is sent whole
    offset, magic, attributes, ts, value = parse_wrapper(got)
    assert (offset, magic, attributes, ts) == (12, 1, CODEC_GZIP, max(STAMPS))
    assert gzip.decompress(value) == b"".join(
        entry(i, message(1, 0, key, val, ts=STAMPS[i])) for i, (key, val, _) in enumerate(ROWS)
    )


def test_gzip_batch_to_magic0_wrapper_with_absolute_offsets():
    offset, magic, attributes, ts, value = parse_wrapper(down_convert(v2(CODEC_GZIP), 0, 10))
    assert (offset, magic, attributes, ts) == (12, 0, CODEC_GZIP, -1)
    assert gzip.decompress(value) == b"".join(
        entry(10 + i, message(0, 0, key, val)) for i, (key, val, _) in enumerate(ROWS)
    )


def test_log_append_time_batch_stamps_every_message():
    batch = bytearray(v2())
    set_log_append_time(batch, read_header(batch), 77_000)
    want = b"".join(
        entry(10 + i, message(1, ATTR_TIMESTAMP_TYPE, key, value, ts=77_000))
        for i, (key, value, _) in enumerate(ROWS)
    )
    assert down_convert(batch, 1, 0) == want
    compressed = bytearray(v2(CODEC_GZIP))
    set_log_append_time(compressed, read_header(compressed), 77_000)
    offset, _, attributes, ts, value = parse_wrapper(down_convert(compressed, 1, 0))
    assert (offset, attributes, ts) == (12, CODEC_GZIP | ATTR_TIMESTAMP_TYPE, 77_000)
    assert gzip.decompress(value) == b"".join(
        entry(i, message(1, ATTR_TIMESTAMP_TYPE, key, val, ts=77_000))
        for i, (key, val, _) in enumerate(ROWS)
    )


@pytest.mark.parametrize("magic", [0, 1])
def test_snappy_wrapper_in_xerial_framing(magic):
    offset, _, attributes, _, value = parse_wrapper(down_convert(v2(CODEC_SNAPPY), magic, 10))
    assert (offset, attributes) == (12, CODEC_SNAPPY)
    assert value.startswith(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    base = 0 if magic == 1 else 10
    ts = STAMPS if magic else [-1] * 3
    assert decompress(CODEC_SNAPPY, value) == b"".join(
        entry(base + i, message(magic, 0, key, val, ts=ts[i]))
        for i, (key, val, _) in enumerate(ROWS)
    )


@pytest.mark.parametrize("magic", [0, 1])
def test_lz4_wrapper_as_kafka_writes_it(magic):
    offset, _, attributes, _, value = parse_wrapper(down_convert(v2(CODEC_LZ4), magic, 10))
    assert (offset, attributes) == (12, CODEC_LZ4)
    hc = 0x1A if magic == 0 else 0x82  # magic 0: Kafka's checksum over the frame magic too
    assert value[:7] == LZ4_MAGIC + bytes((0x60, 0x40, hc))
    assert value.endswith(b"\0\0\0\0")
    standard = value[:6] + b"\x82" + value[7:]
    base = 0 if magic == 1 else 10
    ts = STAMPS if magic else [-1] * 3
    assert bytes(cramjam.lz4.decompress(standard)) == b"".join(
        entry(base + i, message(magic, 0, key, val, ts=ts[i]))
        for i, (key, val, _) in enumerate(ROWS)
    )


def test_control_batches_dropped_aborted_data_kept():
    txn = build_batch(
        [(b"t", b"aborted")],
        base_offset=3,
        timestamps=[50],
        attributes=ATTR_TRANSACTIONAL,
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
    )
    marker = bytearray(build_control_batch(9, 0, False, 1, 60))
    struct.pack_into(">q", marker, 0, 4)
    after = build_batch([(None, b"next")], base_offset=5, timestamps=[70])
    got = down_convert(txn + bytes(marker) + after, 1, 3)
    assert got == entry(3, message(1, 0, b"t", b"aborted", ts=50)) + entry(
        5, message(1, 0, None, b"next", ts=70)
    )
    assert down_convert(bytes(marker), 1, 4) == b""


def test_zstd_refused_first_and_stops_the_conversion_later():
    zstd = build_batch([(None, b"z")], base_offset=13, codec=CODEC_ZSTD)
    with pytest.raises(UnsupportedCompressionError) as raised:
        down_convert(zstd, 1, 13)
    assert raised.value.error_code == ErrorCode.unsupported_compression_type
    assert down_convert(v2() + zstd, 1, 10) == down_convert(v2(), 1, 10)


def test_size_bound_whole_messages_first_batch_always_whole():
    """Messages are larger than v2 records: the answer keeps whole messages within
    max(bytes read, the first batch converted), as Kafka bounds it."""
    rows = [(None, b"v%03d" % i) for i in range(40)]
    first = build_batch(rows, base_offset=0, timestamps=[1] * 40)
    second = build_batch(rows, base_offset=40, timestamps=[1] * 40)
    messages = [entry(i, message(1, 0, None, b"v%03d" % (i % 40), ts=1)) for i in range(80)]
    size = len(messages[0])
    first_converted = 40 * size
    assert first_converted > len(first)  # the first batch alone is sent whole
    assert down_convert(first, 1, 0) == b"".join(messages[:40])
    data = first + second
    bound = max(len(data), first_converted)
    assert bound < 80 * size
    assert down_convert(data, 1, 0) == b"".join(messages[: bound // size])


def test_nothing_to_convert():
    assert down_convert(b"", 0, 0) == b""


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_down_then_up_round_trip(codec, magic):
    converted = down_convert(v2(codec, base_offset=0), magic, 0)
    _, records = records_of(up_convert(converted, log_append_time=False))
    ts = STAMPS if magic else [-1] * 3
    assert records == [(i, ts[i], key, value) for i, (key, value, _) in enumerate(ROWS)]
