"""Record batches (magic 2) kept as bytes: header parsing, validation, patching.

The broker never decodes individual records on the produce or fetch path. This
module reads the fixed 61-byte batch header, checks CRC32C with the ``crc32c``
package, checks that a produced batch holds as many records as its header counts
(``check_record_counts``: only the records' length prefixes are read), and rewrites
the few header fields the broker owns (base offset, partition leader epoch, and the
timestamp for LogAppendTime topics).

Layout of a v2 batch (big-endian)::

    offset size field
         0    8 baseOffset
         8    4 batchLength            bytes after this field
        12    4 partitionLeaderEpoch
        16    1 magic                  always 2 here
        17    4 crc                    CRC32C of bytes 21..end
        21    2 attributes             bits 0-2 codec, 3 timestamp type,
                                       4 transactional, 5 control
        23    4 lastOffsetDelta
        27    8 baseTimestamp
        35    8 maxTimestamp
        43    8 producerId
        51    2 producerEpoch
        53    4 baseSequence
        57    4 recordsCount
        61    .. records (compressed as a block when codec != 0)

A record inside (only built here, for tests and internal topics)::

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint, key, valueLength varint, value, headerCount varint,
    headers (keyLength varint, key, valueLength varint, value)

Where a feature needs the records themselves (compaction, broker-side
recompression, the key check on compacted topics), ``scan_records`` walks a
batch's (decompressed) records once, reading only lengths, offset delta and key,
and ``rebuild_batch`` wraps record bytes copied unchanged (their deltas stay
relative to the batch's base offset and base timestamp) in a new batch header.

Control batches (attributes transactional | control) hold one uncompressed record
whose key is int16 version + int16 type (0 abort, 1 commit: the end-transaction
markers of KIP-98) and, for markers, whose value is int16 version + int32
coordinator epoch. ``build_control_batch`` writes such a marker and
``control_type`` / ``read_control_record`` read one back.

Not here: compression codecs (``codecs.py``), wire framing (``framing.py``).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from strom.protocol import batch_format

# The format's codec ids and error, under the names records has always given them.
CODEC_NONE = batch_format.CODEC_NONE
CODEC_GZIP = batch_format.CODEC_GZIP
CODEC_SNAPPY = batch_format.CODEC_SNAPPY
CODEC_LZ4 = batch_format.CODEC_LZ4
CODEC_ZSTD = batch_format.CODEC_ZSTD
CorruptBatchError = batch_format.CorruptBatchError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what batchLength does not count
WritableBuffer = bytearray | memoryview  # batches patched in place (a frame view)
MAGIC_V2 = 2

# what the header and CRC readers take: any buffer of a batch's bytes, a mapped file's too
ReadableBytes = bytes | bytearray | memoryview | mmap.mmap

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LENGTH_AT_8 = struct.Struct(">qi")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")

ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_TIMESTAMP = -1


class UnsupportedMagicError(CorruptBatchError):
    """A batch with a magic byte other than 2 (message format v0/v1)."""


@dataclass(slots=True)
class BatchHeader:
    """The header fields of one batch and where it sits in its buffer."""

    position: int
    size: int  # whole batch, LOG_OVERHEAD included
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)


def parse_header(buf: ReadableBytes, at: int, position: int | None = None) -> BatchHeader:
    """The header whose 61 bytes are at ``buf[at:]``, whether or not the rest follows.

    ``position`` is recorded as the batch's place (a file position when walking a
    segment; ``at`` by default). Checks magic and minimum size, not the CRC.
    """
    fields = _HEADER.unpack_from(buf, at)
    header = BatchHeader(
        at if position is None else position, fields[1] + LOG_OVERHEAD, fields[0], *fields[2:]
    )
    if header.magic != MAGIC_V2:
        raise UnsupportedMagicError(f"magic {header.magic} is not supported")
    if header.size < HEADER_SIZE:
        raise CorruptBatchError(f"batch length {header.size - LOG_OVERHEAD} is too small")
    return header


def read_header(buf: ReadableBytes, position: int = 0) -> BatchHeader:
    """Parse the batch at ``position``, which must lie whole in ``buf``; no CRC check."""
    if len(buf) - position < HEADER_SIZE:
        if len(buf) - position >= 17 and buf[position + 16] != MAGIC_V2:
            raise UnsupportedMagicError(f"magic {buf[position + 16]} is not supported")
        raise CorruptBatchError("truncated batch header")
    header = parse_header(buf, position)
    if position + header.size > len(buf):
        raise CorruptBatchError("batch extends past the end of the buffer")
    return header


def crc_ok(buf: ReadableBytes, header: BatchHeader) -> bool:
    start = header.position + 21
    end = header.position + header.size
    return crc32c(memoryview(buf)[start:end]) == header.crc


def iter_headers(buf: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """Every batch header in a buffer of back-to-back batches (sizes checked)."""
    position = 0
    end = len(buf)
    while position < end:
        header = read_header(buf, position)
        yield header
        position += header.size


def validate_batches(
    buf: bytes | bytearray | memoryview, max_batch_size: int | None = None
) -> list[BatchHeader]:
    """Headers of every batch in a produced ``records`` field, each fully checked.

    Raises CorruptBatchError for bad framing, CRC, magic or counts, and
    BatchTooLargeError when a batch exceeds ``max_batch_size``.
    """
    headers = []
    for header in iter_headers(buf):
        if max_batch_size is not None and header.size > max_batch_size:
            raise BatchTooLargeError(f"batch of {header.size} bytes exceeds {max_batch_size}")
        if header.record_count <= 0:
            raise InvalidRecordCountError(f"batch claims {header.record_count} records")
        if header.last_offset_delta != header.record_count - 1 and not header.is_control:
            raise InvalidRecordCountError(
                f"lastOffsetDelta {header.last_offset_delta} does not match "
                f"{header.record_count} records"
            )
        if not crc_ok(buf, header):
            raise CorruptBatchError("CRC32C mismatch")
        headers.append(header)
    if not headers:
        raise CorruptBatchError("no record batch in the request")
    return headers


class BatchTooLargeError(ValueError):
    """A batch larger than the topic's max.message.bytes."""


class InvalidRecordCountError(CorruptBatchError):
    """recordsCount and lastOffsetDelta disagree or are not positive, or the batch holds
    another number of records than recordsCount says."""


# The smallest record after its length prefix: attributes, timestamp delta, offset
# delta, key length, value length and header count, one byte each.
_MIN_RECORD = 6


def _record_steps() -> list[int]:
    """For each two bytes ``b0 | b1 << 8`` that may begin a record: how far the next
    record begins (the length prefix and the length it says), or 0 where the walk must
    read the varint itself (three bytes or more) or the length is no record's."""
    steps = [0] * 65536
    for b0 in range(0, 0x80, 2):  # one-byte zig-zag lengths, even: not negative
        if b0 >> 1 >= _MIN_RECORD:
            for b1 in range(256):
                steps[b0 | b1 << 8] = 1 + (b0 >> 1)
    for b0 in range(0x80, 0x100, 2):  # two-byte zig-zag lengths
        for b1 in range(0x80):
            steps[b0 | b1 << 8] = 2 + (((b0 >> 1) & 0x3F) | (b1 << 6))
    return steps


_STEPS: list[int] = []


def records_fill_in_python(
    body: bytes | bytearray | memoryview, pos: int, end: int, count: int
) -> bool:
    """Whether exactly ``count`` records, read by their length prefixes alone, fill
    ``body[pos:end]``, none shorter than the smallest record. Nothing but the lengths is
    read, one table lookup a record for lengths below 8 KiB, about 0.1 us a record: the
    count check of every produced batch where _record_walk.c, the same walk compiled
    (about 1 ns a record), was not built."""
    global _STEPS
    steps = _STEPS or (_STEPS := _record_steps())
    if end > len(body):
        return False
    try:
        for _ in range(count):
            step = steps[body[pos] | body[pos + 1] << 8]
            if not step:
                length, after = read_varint(body, pos)
                if length < _MIN_RECORD:
                    return False
                step = after - pos + length
            pos += step
    except (IndexError, CorruptBatchError):
        return False
    return pos == end


try:
    from strom.protocol._record_walk import records_fill
except ImportError:  # installed where no C compiler was at hand
    records_fill = records_fill_in_python


def check_record_counts(
    buf: bytes | bytearray | memoryview,
    headers: list[BatchHeader],
    decompress_limit: int | None = None,
) -> dict[int, bytes]:
    """Check that every batch holds exactly the records its recordsCount says, as Kafka
    does before it takes a batch: InvalidRecordCountError otherwise. Compressed batches
    are decompressed for it (at most ``decompress_limit`` bytes each, else
    codecs.DecompressedTooLarge); their records are returned by batch position, for
    the checks that read them next."""
    bodies: dict[int, bytes] = {}
    for header in headers:
        start = header.position + HEADER_SIZE
        if header.codec:
            body = records_body(buf, header, decompress_limit)
            bodies[header.position] = body
            filled = records_fill(body, 0, len(body), header.record_count)
        else:
            filled = records_fill(buf, start, header.position + header.size, header.record_count)
        if not filled:
            raise InvalidRecordCountError(
                f"the batch does not hold the {header.record_count} record(s) its header counts"
            )
    return bodies


def set_base_offset(buf: WritableBuffer, header: BatchHeader, base_offset: int) -> None:
    """Rewrite baseOffset in place; the CRC does not cover it."""
    _BASE_OFFSET.pack_into(buf, header.position, base_offset)
    header.base_offset = base_offset


def set_partition_leader_epoch(buf: WritableBuffer, header: BatchHeader, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place; the CRC does not cover it."""
    _I32.pack_into(buf, header.position + 12, epoch)
    header.partition_leader_epoch = epoch


def set_log_append_time(buf: WritableBuffer, header: BatchHeader, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` and recompute its CRC."""
    p = header.position
    header.attributes |= ATTR_TIMESTAMP_TYPE
    header.max_timestamp = timestamp_ms
    _I16.pack_into(buf, p + 21, header.attributes)
    _I64.pack_into(buf, p + 35, timestamp_ms)
    header.crc = crc32c(memoryview(buf)[p + 21 : p + header.size])
    _U32.pack_into(buf, p + 17, header.crc)


# ---------------------------------------------------------------------------
# Building batches: used by tests, benchmarks and internal topics, never on the
# produce path (clients build their own batches).


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def write_varint(out: bytearray, n: int) -> None:
    """Append a zig-zag encoded signed varint (records use signed varints)."""
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag signed varint at ``pos``; returns (value, next position)."""
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise CorruptBatchError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptBatchError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


@dataclass(slots=True)
class Record:
    """One decoded record; offsets and timestamps are absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
) -> bytes:
    body = bytearray(b"\x00")
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    for blob in (key, value):
        if blob is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(blob))
            body += blob
    write_varint(body, len(headers))
    for hkey, hvalue in headers:
        encoded = hkey.encode()
        write_varint(body, len(encoded))
        body += encoded
        if hvalue is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(hvalue))
            body += hvalue
    out = bytearray()
    write_varint(out, len(body))
    out += body
    return bytes(out)


def build_batch(
    records: Sequence[
        tuple[bytes | None, bytes | None]
        | tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]
    ],
    *,
    base_offset: int = 0,
    base_timestamp: int = 0,
    timestamps: list[int] | None = None,
    codec: int = CODEC_NONE,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode (key, value[, headers]) pairs as one magic-2 batch."""
    from strom.protocol.codecs import compress

    if not records:
        raise ValueError("a batch holds at least one record")
    stamps = timestamps or [base_timestamp] * len(records)
    first_ts = stamps[0]
    body = bytearray()
    for delta, rec in enumerate(records):
        headers = list(rec[2]) if len(rec) > 2 else []
        body += _encode_record(delta, stamps[delta] - first_ts, rec[0], rec[1], headers)
    payload = compress(codec, bytes(body)) if codec else bytes(body)
    attrs = (attributes & ~ATTR_CODEC_MASK) | codec
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attrs,
            len(records) - 1,
            first_ts,
            max(stamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + payload
    )
    crc = crc32c(after_crc)
    head = struct.pack(">qiibI", base_offset, len(after_crc) + 9, partition_leader_epoch, 2, crc)
    return head + after_crc


def decode_records(buf: bytes | memoryview, header: BatchHeader) -> list[Record]:
    """Decode every record of one batch (decompressing it). Not for hot paths."""
    from strom.protocol.codecs import decompress

    start = header.position + HEADER_SIZE
    body = bytes(buf[start : header.position + header.size])
    if header.codec:
        body = decompress(header.codec, body)
    out: list[Record] = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = read_varint(body, pos)
        end = pos + length
        pos += 1  # record attributes
        ts_delta, pos = read_varint(body, pos)
        off_delta, pos = read_varint(body, pos)
        key, pos = _read_blob(body, pos)
        value, pos = _read_blob(body, pos)
        n_headers, pos = read_varint(body, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(n_headers):
            hkey, pos = _read_blob(body, pos)
            hvalue, pos = _read_blob(body, pos)
            headers.append(((hkey or b"").decode(), hvalue))
        if pos != end:
            raise CorruptBatchError("record length does not match its contents")
        out.append(
            Record(
                header.base_offset + off_delta,
                header.base_timestamp + ts_delta,
                key,
                value,
                headers,
            )
        )
    return out


def _read_blob(body: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(body, pos)
    if n < 0:
        return None, pos
    if pos + n > len(body):
        raise CorruptBatchError("record field extends past the batch")
    return body[pos : pos + n], pos + n


# ---------------------------------------------------------------------------
# Reading records without building Record objects: compaction, recompression and
# key checks. Speed matters here (the cleaner runs this once or twice per record).


def records_body(
    buf: bytes | bytearray | memoryview, header: BatchHeader, limit: int | None = None
) -> bytes:
    """The (decompressed) records of one batch as bytes; a compressed batch may make at
    most ``limit`` bytes (codecs.MAX_DECOMPRESSED by default)."""
    from strom.protocol.codecs import MAX_DECOMPRESSED, decompress

    body = bytes(buf[header.position + HEADER_SIZE : header.position + header.size])
    if not header.codec:
        return body
    return decompress(header.codec, body, MAX_DECOMPRESSED if limit is None else limit)


def scan_records(body: bytes, count: int) -> list[tuple[int, int, int, bytes | None, bool]]:
    """(start, end, offset delta, key, is tombstone) of each of ``count`` records in
    ``body``: ``body[start:end]`` is the record's bytes, length prefix included."""
    out: list[tuple[int, int, int, bytes | None, bool]] = []
    append = out.append
    pos = 0
    try:
        for _ in range(count):
            start = pos
            b = body[pos]  # record length (zig-zag varint; 1-2 bytes inline)
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                v = (b & 0x7F) | (body[pos + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = read_varint(body, pos)
            end = pos + length
            pos += 1  # attributes
            while body[pos] & 0x80:  # timestamp delta: skipped
                pos += 1
            b = body[pos + 1]  # offset delta
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                delta, pos = read_varint(body, pos + 1)
            b = body[pos]  # key length
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                n, pos = read_varint(body, pos)
            if n < 0:
                key = None
            else:
                key = body[pos : pos + n]
                pos += n
            # value length -1 is the single byte 0x01
            append((start, end, delta, key, body[pos] == 1))
            if end > len(body) or pos >= end:
                raise CorruptBatchError("record length does not match its contents")
            pos = end
    except IndexError:
        raise CorruptBatchError("truncated record") from None
    if pos != len(body):
        raise CorruptBatchError("records do not fill the batch")
    return out


def index_latest_offsets(
    body: bytes, count: int, base_offset: int, latest: dict[bytes, int], tombstones: set[int]
) -> None:
    """For compaction: ``latest[key] = offset`` for each of ``count`` records in ``body``
    in order (keyless records are skipped), and the offsets of tombstones (null value)
    added to ``tombstones``. The same walk as ``scan_records``, without building tuples."""
    pos = 0
    try:
        for _ in range(count):
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                v = (b & 0x7F) | (body[pos + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = read_varint(body, pos)
            end = pos + length
            pos += 1
            while body[pos] & 0x80:
                pos += 1
            b = body[pos + 1]
            if b < 0x80:
                offset = base_offset + ((b >> 1) ^ -(b & 1))
                pos += 2
            else:
                delta, pos = read_varint(body, pos + 1)
                offset = base_offset + delta
            b = body[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                n, pos = read_varint(body, pos)
            if n >= 0:
                latest[body[pos : pos + n]] = offset
                if body[pos + n] == 1:
                    tombstones.add(offset)
            pos = end
    except IndexError:
        raise CorruptBatchError("truncated record") from None
    if pos != len(body):
        raise CorruptBatchError("records do not fill the batch")


def record_stamps(
    buf: bytes | bytearray | memoryview, header: BatchHeader, body: bytes | None = None
) -> list[tuple[int, int, bool]]:
    """(offset delta, timestamp, has a key) of each record of the batch at ``header``,
    in order: what per-record validation and timestamp lookups need, without the
    values and headers. ``body``: the batch's records when they are already at hand
    (decompressed)."""
    if body is None:
        body = records_body(buf, header)
    base_timestamp = header.base_timestamp
    out: list[tuple[int, int, bool]] = []
    pos = 0
    try:
        for _ in range(header.record_count):
            length, pos = read_varint(body, pos)
            end = pos + length
            ts_delta, at = read_varint(body, pos + 1)  # after the attributes byte
            delta, at = read_varint(body, at)
            key_length, at = read_varint(body, at)
            if end > len(body) or at > end:
                raise CorruptBatchError("record length does not match its contents")
            out.append((delta, base_timestamp + ts_delta, key_length >= 0))
            pos = end
    except IndexError:
        raise CorruptBatchError("truncated record") from None
    if pos != len(body):
        raise CorruptBatchError("records do not fill the batch")
    return out


def rebuild_batch(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    records: bytes,
    record_count: int,
    codec: int,
) -> bytes:
    """A copy of the batch at ``header`` holding ``records`` (uncompressed record bytes
    taken from it, deltas unchanged) compressed with ``codec``. Base offset, last
    offset delta, timestamps, producer id/epoch/sequence and the other attribute
    bits are kept; the CRC is recomputed."""
    from strom.protocol.codecs import compress

    p = header.position
    payload = compress(codec, records) if codec else records
    attributes = (header.attributes & ~ATTR_CODEC_MASK) | codec
    after_crc = bytearray(buf[p + 21 : p + 57])
    _I16.pack_into(after_crc, 0, attributes)
    after_crc += _I32.pack(record_count)
    after_crc += payload
    crc = crc32c(after_crc)
    head = struct.pack(
        ">qiibI", header.base_offset, len(after_crc) + 9, header.partition_leader_epoch, 2, crc
    )
    return head + after_crc


def recompress_batches(
    buf: bytes | bytearray | memoryview,
    headers: list[BatchHeader],
    codec: int,
    bodies: dict[int, bytes] | None = None,
) -> tuple[bytearray, list[BatchHeader]]:
    """The batches of ``buf`` with every data batch in ``codec`` (records unchanged;
    control batches and batches already in ``codec`` are copied as they are), and
    the new headers. ``bodies``: records already decompressed, by batch position."""
    out = bytearray()
    for header in headers:
        p = header.position
        if header.codec == codec or header.is_control:
            out += buf[p : p + header.size]
        else:
            body = bodies.get(p) if bodies else None
            if body is None:
                body = records_body(buf, header)
            out += rebuild_batch(buf, header, body, header.record_count, codec)
    return out, list(iter_headers(out))


# ---------------------------------------------------------------------------
# Control batches: the end-transaction markers (KIP-98).

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_MARKER_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytearray:
    """One end-transaction marker as a v2 control batch: attributes transactional |
    control, one record (key: version 0 + type 1 commit / 0 abort; value: version 0 +
    the coordinator epoch), base sequence -1, base offset 0 (patched when appended)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return bytearray(
        build_batch(
            [(key, value)],
            base_timestamp=timestamp_ms,
            attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=-1,
        )
    )


def read_control_record(
    buf: bytes | bytearray | memoryview, header: BatchHeader
) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of a control batch's first record; the epoch
    is -1 when the value is not a marker's. None when the batch is not a control batch
    or its record cannot be read (compressed, truncated, negative key version)."""
    if not header.is_control or header.codec or header.record_count < 1:
        return None
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    if end > len(buf):
        return None
    body = bytes(buf[start:end])
    try:
        _length, pos = read_varint(body, 0)
        pos += 1  # record attributes
        _ts_delta, pos = read_varint(body, pos)
        _off_delta, pos = read_varint(body, pos)
        key, pos = _read_blob(body, pos)
        value, pos = _read_blob(body, pos)
    except CorruptBatchError:
        return None
    if key is None or len(key) < 4:
        return None
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        return None
    coordinator_epoch = -1
    if value is not None and len(value) >= 6:
        coordinator_epoch = _MARKER_VALUE.unpack_from(value)[1]
    return kind, coordinator_epoch


def control_type(buf: bytes | bytearray | memoryview, header: BatchHeader) -> int | None:
    """The type of a control batch's record (CONTROL_ABORT 0, CONTROL_COMMIT 1, or
    another control type); None when it is not readable (see read_control_record)."""
    found = read_control_record(buf, header)
    return None if found is None else found[0]
