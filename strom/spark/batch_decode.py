"""Fetched record batches (magic 2) -> Arrow columns, without a Python object per record.

Owns decoding the ``records`` bytes of a Fetch response for the Spark source:
:func:`complete_batches` finds the whole batches in the buffer (a batch cut off at the
fetch size limit is left for the next fetch) and :func:`decode` turns the data
batches into :class:`RecordColumns` (key, value, offset, timestamp in µs, timestamp
type, and headers when asked). Control batches are skipped; compressed batches are
decompressed with :mod:`strom.protocol.codecs`.

How: batch headers are parsed in Python, one per batch. Within a batch, a short Python
loop follows the record length prefixes to find where each record starts; everything
else is numpy on arrays of positions (the varint fields of every record at once) and
Arrow: keys and values are cut out of the buffer by one ``take`` over a binary array
whose offsets point at them in place. Record starts are checked against the record
lengths, so malformed input raises :class:`~strom.protocol.records.CorruptBatchError`.
Headers take a slower per-record path (only records that have headers).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom.protocol.codecs import decompress
from strom.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    BatchHeader,
    CorruptBatchError,
    parse_header,
    read_varint,
)

_INT32_MAX = 2**31 - 1

Headers = list[tuple[str, bytes | None]] | None
Bytes = bytes | bytearray | memoryview


@dataclass(slots=True)
class RecordColumns:
    """Records of consecutive batches as columns (Spark's Kafka row fields)."""

    key: pa.Array  # binary, null for a null key
    value: pa.Array  # binary, null for a null value
    offset: np.ndarray  # int64
    timestamp_us: np.ndarray  # int64, µs since the epoch (UTC)
    timestamp_type: np.ndarray  # int32: 0 CreateTime, 1 LogAppendTime
    headers: list[Headers] | None  # per record; None where a record has none

    def __len__(self) -> int:
        return len(self.offset)


def complete_batches(buf: Bytes) -> list[BatchHeader]:
    """Headers of the whole batches at the start of ``buf``, in order.

    A trailing batch that does not lie whole in ``buf`` (a fetch cut at its size limit)
    is left out. Raises CorruptBatchError (UnsupportedMagicError for magic 0/1).
    """
    headers = []
    position = 0
    end = len(buf)
    while end - position >= HEADER_SIZE:
        header = parse_header(buf, position)
        if position + header.size > end:
            break
        headers.append(header)
        position += header.size
    return headers


def decode(
    buf: Bytes,
    batches: list[BatchHeader],
    *,
    first: int = 0,
    end: int = 2**63 - 1,
    include_headers: bool = False,
) -> list[RecordColumns]:
    """Columns of the records with ``first <= offset < end`` in ``batches`` of ``buf``.

    Consecutive uncompressed batches are decoded together, in place in ``buf``;
    consecutive compressed ones together from their joined decompressed bytes. One
    RecordColumns per such run, in offset order; runs left empty are dropped. The
    columns hold copies: ``buf`` may be reused once this returns.
    """
    out = []
    for source, regions in _runs(buf, batches, first, end):
        columns = _decode_run(source, regions, first, end, include_headers)
        if len(columns):
            out.append(columns)
    return out


@dataclass(slots=True)
class _Region:
    """Where one batch's record bytes sit in the buffer they are decoded from."""

    start: int
    end: int
    header: BatchHeader


def _runs(
    buf: Bytes, batches: list[BatchHeader], first: int, end: int
) -> Iterator[tuple[Bytes, list[_Region]]]:
    in_place: list[_Region] = []
    bodies: list[bytes] = []
    inflated: list[_Region] = []
    inflated_size = 0
    for header in batches:
        if (
            header.is_control
            or header.record_count <= 0  # emptied by compaction
            or header.next_offset <= first
            or header.base_offset >= end
        ):
            continue
        body_start = header.position + HEADER_SIZE
        body_end = header.position + header.size
        if header.codec:
            if in_place:
                yield buf, in_place
                in_place = []
            body = decompress(header.codec, bytes(buf[body_start:body_end]))
            bodies.append(body)
            inflated.append(_Region(inflated_size, inflated_size + len(body), header))
            inflated_size += len(body)
        else:
            if inflated:
                yield b"".join(bodies), inflated
                bodies, inflated, inflated_size = [], [], 0
            in_place.append(_Region(body_start, body_end, header))
    if in_place:
        yield buf, in_place
    if inflated:
        yield b"".join(bodies), inflated


def _record_starts(body: Bytes, regions: list[_Region]) -> np.ndarray:
    """Where each record of ``regions`` starts, in order."""
    starts: list[int] = []
    for region in regions:
        _follow_lengths(body, region.start, region.header.record_count, starts)
    return np.array(starts, np.int64)


def _follow_lengths(body: Bytes, pos: int, count: int, starts: list[int]) -> None:
    """Append the starts of ``count`` records from ``pos`` on, following their length
    prefixes.

    The one per-record Python loop; lengths of 1 and 2 varint bytes (records under
    8 KiB) are read inline. Not checked here: ``_decode_run`` checks the result.
    """
    append = starts.append
    try:
        for _ in range(count):
            append(pos)
            b = body[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)
            else:
                c = body[pos + 1]
                if c < 0x80:
                    pos += 2 + ((c << 6) | ((b & 0x7F) >> 1))
                else:
                    length, pos = read_varint(body, pos)
                    pos += max(length, 0)
    except IndexError:
        raise CorruptBatchError("truncated record") from None


def _record_bodies(
    src: np.ndarray, starts: np.ndarray, regions: list[_Region], counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """(where each record's fields start, where it ends) from its length prefix, or None
    if the records do not follow each other: each must end where the next starts, and
    a batch's last record where the batch ends."""
    length, pos = _varints(src, starts)
    record_end = pos + length
    expected = np.empty_like(record_end)
    expected[:-1] = starts[1:]
    expected[np.cumsum(counts) - 1] = [r.end for r in regions]
    if not (record_end == expected).all():
        return None
    return pos, record_end


def _varints(src: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints that start at each of ``pos``: (values, positions after).

    Whole-array passes, one per varint byte, so the common 1- to 3-byte varints cost
    a few numpy operations each. An entry whose varint has ended reads an earlier byte
    of it again in later passes (always in bounds) and ignores it.
    """
    b = src[pos]
    more = b >> 7
    if not more.any():
        raw = b.astype(np.int64)
        return (raw >> 1) ^ -(raw & 1), pos + 1
    size = 1 + more.astype(np.int64)
    b1 = src[pos + more]
    more1 = more & (b1 >> 7)
    if not more1.any():
        raw = ((b & 0x7F) | (b1.astype(np.uint16) << 7) * more).astype(np.int64)
        return (raw >> 1) ^ -(raw & 1), pos + size
    size += more1
    b2 = src[pos + size - 1]
    if (more1 & (b2 >> 7)).any():
        return _long_varints(src, pos)
    raw = (
        (b & 0x7F).astype(np.int64)
        | ((b1 & 0x7F).astype(np.int64) << 7) * more
        | (b2.astype(np.int64) << 14) * more1
    )
    return (raw >> 1) ^ -(raw & 1), pos + size


def _long_varints(src: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_varints`` for any length up to 10 bytes."""
    raw = np.zeros(len(pos), np.uint64)
    going = np.ones(len(pos), np.uint64)
    size = np.zeros(len(pos), np.int64)
    shift = 0
    while going.any():
        if shift > 63:
            raise CorruptBatchError("varint too long")
        b = src[pos + size * going.astype(np.int64)]  # ended: re-read the first byte
        raw |= ((b & 0x7F).astype(np.uint64) << np.uint64(shift)) * going
        size += going.astype(np.int64)
        going &= (b >> 7).astype(np.uint64)
        shift += 7
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, pos + size


def _decode_run(
    body: Bytes, regions: list[_Region], first: int, end: int, include_headers: bool
) -> RecordColumns:
    counts = np.array([r.header.record_count for r in regions], np.int64)
    src = np.frombuffer(body, np.uint8)
    try:
        bodies = _record_bodies(src, _record_starts(body, regions), regions, counts)
        if bodies is None:
            raise CorruptBatchError("record lengths do not fill their batch")
        pos, record_end = bodies
        pos = pos + 1  # attributes (unused in magic 2)
        timestamp_delta, pos = _varints(src, pos)
        offset_delta, pos = _varints(src, pos)
        key_length, pos = _varints(src, pos)
        key_start = pos
        value_length, pos = _varints(src, pos + np.maximum(key_length, 0))
        value_start = pos
        header_count, pos = _varints(src, pos + np.maximum(value_length, 0))
    except IndexError:
        raise CorruptBatchError("truncated record") from None
    if (
        (key_length < -1).any()
        or (value_length < -1).any()
        or (header_count < 0).any()
        or (pos > record_end).any()
        or ((header_count == 0) & (pos != record_end)).any()
    ):
        raise CorruptBatchError("record fields do not match the record length")

    batch = np.repeat(np.arange(len(regions)), counts)
    headers = [r.header for r in regions]
    base_offset = np.array([h.base_offset for h in headers], np.int64)
    offset = base_offset[batch] + offset_delta
    base_ts = np.array([h.base_timestamp for h in headers], np.int64)
    log_append = np.array([bool(h.attributes & ATTR_TIMESTAMP_TYPE) for h in headers])
    timestamp_ms = base_ts[batch] + timestamp_delta
    timestamp_type = np.zeros(len(offset), np.int32)
    if log_append.any():
        max_ts = np.array([h.max_timestamp for h in headers], np.int64)
        appended = log_append[batch]
        timestamp_ms = np.where(appended, max_ts[batch], timestamp_ms)
        timestamp_type = appended.astype(np.int32)

    wanted = (offset >= first) & (offset < end)
    chosen = None if wanted.all() else np.flatnonzero(wanted)
    if chosen is not None:
        offset, timestamp_ms, timestamp_type = (
            offset[chosen],
            timestamp_ms[chosen],
            (timestamp_type[chosen]),
        )
    buffer = pa.py_buffer(body)
    key = _binary_column(buffer, key_start, key_length, chosen)
    value = _binary_column(buffer, value_start, value_length, chosen)
    record_headers = None
    if include_headers:
        record_headers = _headers(body, pos, record_end, header_count, chosen)
    return RecordColumns(key, value, offset, timestamp_ms * 1000, timestamp_type, record_headers)


def _binary_column(
    buffer: pa.Buffer, start: np.ndarray, length: np.ndarray, chosen: np.ndarray | None
) -> pa.Array:
    """A binary array of ``buffer[start:start + length]`` per record (null for length -1),
    for the records ``chosen`` (all when None), copied out by one Arrow ``take``.

    The values are spread over the buffer between other fields; a binary array with
    offsets [start0, end0, start1, end1, ...] sees them in place as its even elements
    (the odd ones are the bytes between), and ``take`` of the even ones packs them."""
    n = len(start)
    n_out = n if chosen is None else len(chosen)
    if n_out == 0:
        return pa.array([], pa.binary())
    if (length < 0).all():  # e.g. keyless records: nothing to copy
        return pa.nulls(n_out, pa.binary())
    if len(buffer) > _INT32_MAX:
        raise CorruptBatchError("record bytes over 2 GiB in one fetch")
    bounds = np.empty(2 * n, np.int32)
    bounds[0::2] = start
    bounds[1::2] = start + np.maximum(length, 0)
    spread = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), buffer])
    index = np.arange(0, 2 * n, 2) if chosen is None else chosen * 2
    nulls = length < 0 if chosen is None else length[chosen] < 0
    return pc.take(spread, pa.array(index, mask=nulls if nulls.any() else None))


def _headers(
    body: Bytes,
    pos: np.ndarray,
    record_end: np.ndarray,
    header_count: np.ndarray,
    chosen: np.ndarray | None,
) -> list[Headers]:
    """Per record, its headers as (key, value) pairs, or None without headers."""
    if chosen is not None:
        pos, record_end, header_count = pos[chosen], record_end[chosen], header_count[chosen]
    out: list[Headers] = [None] * len(pos)
    for i in np.flatnonzero(header_count).tolist():
        p = int(pos[i])
        pairs = []
        for _ in range(int(header_count[i])):
            n, p = read_varint(body, p)
            if n < 0:
                raise CorruptBatchError("null header key")
            key = bytes(body[p : p + n]).decode("utf-8", "replace")
            p += n
            n, p = read_varint(body, p)
            if n < 0:
                value = None
            else:
                value = bytes(body[p : p + n])
                p += n
            pairs.append((key, value))
        if p != record_end[i]:
            raise CorruptBatchError("record headers do not match the record length")
        out[i] = pairs
    return out
