"""Message sets of magic 0 and 1, converted to and from v2 record batches. Sans-I/O.

Strom stores only v2 record batches (``records.py``). Produce v0-2 may carry message
sets in the formats before them, and Fetch v0-3 must answer in them: v0-1 in magic 0,
v2-3 in magic 1. This module owns those formats and the two conversions, following
Kafka 3.9 (``LegacyRecord``, ``AbstractLegacyRecordBatch``, ``LogValidator``,
``RecordsUtil.downConvert``); it does no I/O and knows nothing of the broker.

A message set is entries back to back (big-endian)::

    offset        int64
    message_size  int32     bytes of the message that follows
    crc           uint32    CRC32 (zlib's, not CRC32C) of magic..end of the message
    magic         int8      0 or 1
    attributes    int8      bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4),
                            bit 3 LogAppendTime (magic 1 only)
    timestamp     int64     magic 1 only; -1 is no timestamp
    key           int32 length (-1 null) + bytes
    value         int32 length (-1 null) + bytes

A compressed message is a wrapper: null key, its value the compressed bytes of an inner
message set of uncompressed messages of the same magic. In magic 0 the inner offsets
are absolute; in magic 1 they are relative (0, 1, ...) and the wrapper carries the
absolute offset of the last inner message (a wrapper offset of 0, as some librdkafka
versions write, means base 0). A magic 1 wrapper marked LogAppendTime gives its
timestamp to every inner message. Compression framing on the wire, as Kafka writes it:
gzip as is; snappy in xerial framing (magic ``\\x82SNAPPY\\x00``, 32 KiB blocks);
lz4 as an LZ4 frame of independent 64 KiB blocks without checksums, whose header
checksum byte in magic 0 is computed, as Kafka's first LZ4 code did, over the frame
magic too (Kafka ignores it when reading magic 0; so does this module). zstd has no
legacy form.

Up-conversion (``up_convert``, for Produce v0-2): the whole message set becomes one v2
batch of base offset 0 (the log assigns offsets on append, as Kafka's LogValidator
does, ignoring the producer's), producer id -1, with each record's timestamp (magic 0:
-1, NO_TIMESTAMP) and the wrapper's codec kept. Kafka's checks: a bad CRC, a truncated
or undersized message, an unknown magic or codec is CORRUPT_MESSAGE
(``CorruptMessageError``); messages of different magics, more than one message beside a
compressed one, a compressed inner message, an inner magic unlike its wrapper's, an
empty or null wrapper, a zstd wrapper, or a magic 1 wrapper offset below its last inner
offset is INVALID_RECORD (``InvalidMessageError``); a message marked LogAppendTime on a
LogAppendTime topic, or one without a timestamp on a CreateTime topic, is
INVALID_TIMESTAMP (``InvalidTimestampTypeError``); a message (wrapper) larger than the
topic's max.message.bytes, entry overhead included, is MESSAGE_TOO_LARGE
(``MessageTooLargeError``). Each error names its Kafka code.

Down-conversion (``down_convert``, for Fetch v0-3): each v2 batch read becomes messages
of the asked magic, as Kafka's RecordsUtil.downConvert does: control batches (the
transaction markers) are dropped; an uncompressed batch becomes one message per record
at or after the fetch offset; a compressed batch becomes one wrapper in the same codec
holding all its records (the client skips those before its offset); headers are dropped
(the formats have none); timestamps are the records' (magic 1; a LogAppendTime batch
gives its time to every message and the LogAppendTime bit to every message's
attributes), none in magic 0. Aborted transactional records are converted like any
others: old fetchers read uncommitted. A zstd batch cannot be converted: it is
UNSUPPORTED_COMPRESSION_TYPE when it comes first, else the conversion stops before it.
Size: Kafka sends max(bytes read, the first converted batch's size), cutting the rest
mid-message or padding it with an overflow marker; here the same bound applies but only
whole messages are sent and nothing is padded, so the first converted batch is always
whole and a client reads the same messages.
"""

from __future__ import annotations

import struct
import zlib
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

import cramjam

from strom.protocol.codecs import MAX_DECOMPRESSED, DecompressedTooLarge, compress, decompress
from strom.protocol.errors import ErrorCode
from strom.protocol.records import (
    ATTR_CODEC_MASK,
    ATTR_TIMESTAMP_TYPE,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptBatchError,
    build_batch,
    iter_headers,
    read_varint,
    records_body,
)

MAGIC_V0 = 0
MAGIC_V1 = 1
LOG_OVERHEAD = 12  # offset + message_size
RECORD_OVERHEAD_V0 = 14  # crc, magic, attributes, key and value lengths
LEGACY_CODECS = frozenset({CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4})

# offset, message_size, crc, magic, attributes: the fixed start of every entry.
_ENTRY_HEAD = struct.Struct(">qiIbb")
_OFFSET_SIZE_CRC = struct.Struct(">qiI")
_V0_HEAD = struct.Struct(">bb")  # magic, attributes
_V1_HEAD = struct.Struct(">bbq")  # magic, attributes, timestamp
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_NULL = _I32.pack(-1)


class MessageSetError(ValueError):
    """A message set that cannot be converted; ``error_code`` is Kafka's answer."""

    error_code = ErrorCode.corrupt_message


class CorruptMessageError(MessageSetError):
    error_code = ErrorCode.corrupt_message


class DecompressedTooLargeError(MessageSetError):
    """A compressed wrapper that decompresses past the limit (codecs.decompress)."""

    error_code = ErrorCode.message_too_large


class InvalidMessageError(MessageSetError):
    error_code = ErrorCode.invalid_record


class InvalidTimestampTypeError(MessageSetError):
    error_code = ErrorCode.invalid_timestamp


class MessageTooLargeError(MessageSetError):
    error_code = ErrorCode.message_too_large


class UnsupportedCompressionError(MessageSetError):
    error_code = ErrorCode.unsupported_compression_type


@dataclass(slots=True)
class LegacyMessage:
    """One entry of a message set; ``timestamp`` is -1 in magic 0."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return self.magic == MAGIC_V1 and bool(self.attributes & ATTR_TIMESTAMP_TYPE)


# ---------------------------------------------------------------------------
# Reading message sets


def read_message_set(data: bytes | bytearray | memoryview) -> list[LegacyMessage]:
    """Every entry of ``data``, CRCs checked, wrappers left compressed.

    Raises CorruptMessageError for bad framing, CRC or magic, and InvalidMessageError
    for a v2 batch (magic 2) among the messages."""
    view = memoryview(data)
    end = len(view)
    pos = 0
    out: list[LegacyMessage] = []
    while pos < end:
        if end - pos < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
            raise CorruptMessageError(f"truncated message at byte {pos}")
        offset, size, crc, magic, attributes = _ENTRY_HEAD.unpack_from(view, pos)
        start = pos + LOG_OVERHEAD
        stop = start + size
        if size < RECORD_OVERHEAD_V0:
            raise CorruptMessageError(f"message size {size} is below the minimum overhead")
        if stop > end:
            raise CorruptMessageError(f"message of {size} bytes at byte {pos} is truncated")
        if magic == 2:
            raise InvalidMessageError("a record batch of magic 2 among magic 0/1 messages")
        if magic not in (MAGIC_V0, MAGIC_V1):
            raise CorruptMessageError(f"invalid magic {magic}")
        if zlib.crc32(view[start + 4 : stop]) != crc:
            raise CorruptMessageError(f"message at byte {pos} fails its CRC32")
        at = start + 6
        timestamp = NO_TIMESTAMP
        if magic == MAGIC_V1:
            if stop - at < 16:
                raise CorruptMessageError("message too small for its timestamp")
            (timestamp,) = _I64.unpack_from(view, at)
            at += 8
        key, at = _read_bytes(view, at, stop)
        value, at = _read_bytes(view, at, stop)
        if at != stop:
            raise CorruptMessageError("message size does not match its key and value")
        out.append(LegacyMessage(offset, magic, attributes, timestamp, key, value))
        pos = stop
    return out


def _read_bytes(view: memoryview, at: int, stop: int) -> tuple[bytes | None, int]:
    if stop - at < 4:
        raise CorruptMessageError("message truncated in a length field")
    (n,) = _I32.unpack_from(view, at)
    at += 4
    if n < 0:
        return None, at
    if at + n > stop:
        raise CorruptMessageError("key or value runs past its message")
    return bytes(view[at : at + n]), at + n


def wrapper_records(
    wrapper: LegacyMessage, decompress_limit: int = MAX_DECOMPRESSED
) -> list[LegacyMessage]:
    """The inner messages of a compressed wrapper, with absolute offsets and the
    timestamps Kafka gives them (a LogAppendTime magic 1 wrapper's own); its payload
    may decompress to ``decompress_limit`` bytes at most."""
    codec = wrapper.codec
    if codec == CODEC_ZSTD:
        raise InvalidMessageError("a zstd wrapper has no legacy message format")
    if codec not in LEGACY_CODECS:
        raise CorruptMessageError(f"unknown compression codec {codec}")
    if wrapper.value is None:
        raise InvalidMessageError("compressed message set with a null value")
    payload = wrapper.value
    if codec == CODEC_LZ4 and wrapper.magic == MAGIC_V0:
        payload = _with_lz4_header_checksum(payload)
    try:
        inner = read_message_set(decompress(codec, payload, decompress_limit))
    except DecompressedTooLarge as exc:
        raise DecompressedTooLargeError(str(exc)) from None
    except CorruptBatchError as exc:
        raise CorruptMessageError(str(exc)) from None
    if not inner:
        raise InvalidMessageError("compressed message set with no inner messages")
    for message in inner:
        if message.magic != wrapper.magic:
            raise InvalidMessageError(
                f"inner magic {message.magic} does not match wrapper magic {wrapper.magic}"
            )
        if message.codec:
            raise InvalidMessageError("inner messages must not be compressed")
    if wrapper.magic == MAGIC_V1:
        last = inner[-1].offset
        if wrapper.offset == 0:
            base = 0
        elif wrapper.offset < last:
            raise InvalidMessageError(
                f"wrapper offset {wrapper.offset} is below the last inner offset {last}"
            )
        else:
            base = wrapper.offset - last
        for message in inner:
            message.offset += base
            if wrapper.log_append_time:
                message.timestamp = wrapper.timestamp
    return inner


# ---------------------------------------------------------------------------
# Up-conversion (produce)


def up_convert(
    data: bytes | bytearray | memoryview,
    *,
    log_append_time: bool,
    max_message_bytes: int | None = None,
    decompress_limit: int = MAX_DECOMPRESSED,
) -> bytes:
    """The records of the magic 0/1 message set ``data`` as one v2 batch.

    ``log_append_time``: the topic's message.timestamp.type is LogAppendTime (the
    caller stamps the batch on append, as for any batch). ``max_message_bytes``: the
    largest entry (message and its 12 bytes of offset and size) the topic takes.
    Raises a MessageSetError."""
    messages = read_message_set(data)
    if not messages:
        raise CorruptMessageError("no message in the message set")
    if max_message_bytes is not None:
        _check_sizes(data, max_message_bytes)
    magic = messages[0].magic
    if any(m.magic != magic for m in messages):
        raise InvalidMessageError("messages of different magic values in one message set")
    codec = CODEC_NONE
    records = messages
    if any(m.codec for m in messages):
        if len(messages) > 1:
            raise InvalidMessageError("compressed outer message set has more than one message")
        codec = messages[0].codec
        records = wrapper_records(messages[0], decompress_limit)
    for shallow in messages:
        if shallow.log_append_time and (
            log_append_time or any(r.timestamp == NO_TIMESTAMP for r in records)
        ):
            raise InvalidTimestampTypeError(
                "producers should not set the timestamp type to LogAppendTime"
            )
    return build_batch(
        [(r.key, r.value) for r in records],
        timestamps=[r.timestamp for r in records],
        codec=codec,
    )


def _check_sizes(data: bytes | bytearray | memoryview, max_message_bytes: int) -> None:
    """MessageTooLargeError when an entry of ``data`` (framing already checked) is
    larger than ``max_message_bytes``, as Kafka checks each shallow message."""
    pos = 0
    while pos < len(data):
        (size,) = _I32.unpack_from(data, pos + 8)
        if size + LOG_OVERHEAD > max_message_bytes:
            raise MessageTooLargeError(
                f"message of {size + LOG_OVERHEAD} bytes exceeds {max_message_bytes}"
            )
        pos += size + LOG_OVERHEAD


# ---------------------------------------------------------------------------
# Down-conversion (fetch)


def down_convert(data: bytes | bytearray | memoryview, magic: int, fetch_offset: int) -> bytes:
    """The v2 batches ``data`` (whole, as a log read returns them) as a message set of
    ``magic``, for a fetch from ``fetch_offset``; see the module docstring for what is
    kept, dropped and how much is sent. Raises UnsupportedCompressionError when the
    first batch to convert is zstd, CorruptMessageError when it cannot be read (one that
    decompresses past codecs' limit: the fetcher is told, the broker keeps its memory)."""
    out = bytearray()
    ends: list[int] = []  # where each converted entry ends in ``out``
    first_size = 0
    for header in iter_headers(data):
        if header.is_control:
            continue
        if header.codec == CODEC_ZSTD:
            if ends:
                break
            raise UnsupportedCompressionError("zstd batches cannot be down-converted")
        try:
            _convert_batch(data, header, magic, fetch_offset, out, ends)
        except CorruptBatchError as exc:  # a stored batch past the decompression limit
            if ends:
                break  # what was converted before it goes out
            raise CorruptMessageError(f"batch at offset {header.base_offset}: {exc}") from None
        if not first_size and ends:
            first_size = len(out)
    limit = max(len(data), first_size)
    if len(out) <= limit:
        return bytes(out)
    return bytes(out[: ends[bisect_right(ends, limit) - 1]])


def _convert_batch(
    data: bytes | bytearray | memoryview,
    header: BatchHeader,
    magic: int,
    fetch_offset: int,
    out: bytearray,
    ends: list[int],
) -> None:
    """Append the batch's records to ``out`` as messages of ``magic`` (a compressed batch
    as one wrapper). The records are walked once, one at a time: a batch of a million
    records costs its bytes, not a million objects at once."""
    codec = header.codec
    stamp_bit = 0
    log_append_time = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    if log_append_time:  # LogAppendTime: the batch's time for all
        stamp_bit = ATTR_TIMESTAMP_TYPE if magic == MAGIC_V1 else 0
    records = _iter_records(records_body(data, header), header)
    if codec == CODEC_NONE:
        for offset, timestamp, key, value in records:
            if offset >= fetch_offset:
                if log_append_time:
                    timestamp = header.max_timestamp
                write_message(out, offset, magic, stamp_bit, timestamp, key, value)
                ends.append(len(out))
        return
    inner = bytearray()
    base = None
    last_offset = max_timestamp = NO_TIMESTAMP
    for offset, timestamp, key, value in records:
        if base is None:
            base = offset if magic == MAGIC_V1 else 0
        if log_append_time:
            timestamp = header.max_timestamp
        write_message(inner, offset - base, magic, stamp_bit, timestamp, key, value)
        last_offset = offset
        max_timestamp = max(max_timestamp, timestamp)
    if base is None:
        return  # no records
    value = compress_legacy(codec, magic, bytes(inner))
    del inner
    write_message(out, last_offset, magic, codec | stamp_bit, max_timestamp, None, value)
    ends.append(len(out))


def _iter_records(
    body: bytes, header: BatchHeader
) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of each record in the batch's records ``body``,
    one at a time; headers are skipped. One walk with the one-byte varints read inline:
    the whole cost of a conversion is here and in writing the messages."""
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    pos = 0
    try:
        for _ in range(header.record_count):
            length, pos = _varint(body, pos)
            end = pos + length
            ts_delta, pos = _varint(body, pos + 1)  # after the attributes byte
            offset_delta, pos = _varint(body, pos)
            n, pos = _varint(body, pos)
            key = None
            if n >= 0:
                key = body[pos : pos + n]
                pos += n
            n, pos = _varint(body, pos)
            value = None
            if n >= 0:
                value = body[pos : pos + n]
                pos += n
            if pos > end or end > len(body):
                raise CorruptBatchError("record length does not match its contents")
            yield base_offset + offset_delta, base_timestamp + ts_delta, key, value
            pos = end
    except IndexError:
        raise CorruptBatchError("truncated record") from None


def _varint(body: bytes, pos: int) -> tuple[int, int]:
    b = body[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    c = body[pos + 1]
    if c < 0x80:
        v = (b & 0x7F) | (c << 7)
        return (v >> 1) ^ -(v & 1), pos + 2
    return read_varint(body, pos)


def write_message(
    out: bytearray,
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> None:
    """Append one entry (offset, size, message with its CRC32) to ``out``."""
    head = (
        _V1_HEAD.pack(magic, attributes, timestamp) if magic else _V0_HEAD.pack(magic, attributes)
    )
    body = b"".join(
        (
            head,
            _NULL if key is None else _I32.pack(len(key)),
            key or b"",
            _NULL if value is None else _I32.pack(len(value)),
            value or b"",
        )
    )
    out += _OFFSET_SIZE_CRC.pack(offset, len(body) + 4, zlib.crc32(body))
    out += body


# ---------------------------------------------------------------------------
# Compression framing of legacy wrappers

_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG = 0x60  # version 01, independent blocks, no block or content checksum
_LZ4_BD = 0x40  # 64 KiB blocks
_LZ4_BLOCK = 64 * 1024
_LZ4_UNCOMPRESSED = 0x80000000
_U32_LE = struct.Struct("<I")


def compress_legacy(codec: int, magic: int, data: bytes) -> bytes:
    """``data`` compressed for a magic ``magic`` wrapper, framed as Kafka frames it."""
    if codec == CODEC_SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        for at in range(0, len(data), _XERIAL_BLOCK):
            block = cramjam.snappy.compress_raw(data[at : at + _XERIAL_BLOCK])
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if codec == CODEC_LZ4:
        descriptor = bytes((_LZ4_FLG, _LZ4_BD))
        checked = _LZ4_MAGIC + descriptor if magic == MAGIC_V0 else descriptor
        out = bytearray(_LZ4_MAGIC + descriptor + bytes((_lz4_header_checksum(checked),)))
        for at in range(0, len(data), _LZ4_BLOCK):
            chunk = data[at : at + _LZ4_BLOCK]
            lz4_block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
            if len(lz4_block) >= len(chunk):
                out += _U32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED)
                out += chunk
            else:
                out += _U32_LE.pack(len(lz4_block))
                out += lz4_block
        out += _U32_LE.pack(0)  # end mark
        return bytes(out)
    return compress(codec, data)


def _with_lz4_header_checksum(frame: bytes) -> bytes:
    """A magic 0 LZ4 frame with its header checksum byte recomputed the standard way,
    for a decoder that checks it (Kafka's reader skips it for magic 0)."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return frame
    flg = frame[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)  # content size, dict id
    if len(frame) <= end:
        return frame
    fixed = bytearray(frame)
    fixed[end] = _lz4_header_checksum(frame[4:end])
    return bytes(fixed)


_M32 = 0xFFFFFFFF
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393


def _lz4_header_checksum(data: bytes) -> int:
    """The second byte of XXH32(data, seed 0), for the few bytes of an LZ4 frame header
    (under 16, so the hash's short form is all that is needed)."""
    assert len(data) < 16
    h = (_P5 + len(data)) & _M32
    at = 0
    while at + 4 <= len(data):
        h = (h + int.from_bytes(data[at : at + 4], "little") * _P3) & _M32
        h = (((h << 17) | (h >> 15)) & _M32) * _P4 & _M32
        at += 4
    for byte in data[at:]:
        h = (h + byte * _P5) & _M32
        h = (((h << 11) | (h >> 21)) & _M32) * _P1 & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return (h >> 8) & 0xFF
