"""Compression codecs of Kafka record batches (gzip, snappy, lz4, zstd) via cramjam.

The produce and fetch paths never call these: batches are stored and served as
they came. They are used where records must be read (tests, tools, and later
compaction and broker-side recompression).

Snappy comes in two shapes on the wire: raw blocks (librdkafka) and the xerial
framing the Java client writes (magic ``\\x82SNAPPY\\x00``, then length-prefixed
raw blocks). Both decompress here; compression writes raw blocks.

Decompression is bounded: what one batch (or old message set) decompresses to may not
exceed ``limit`` (``MAX_DECOMPRESSED``, 64 MiB, by default), else
``DecompressedTooLarge``, and the work stops there: a gzip, lz4 or zstd payload is
decompressed into a buffer of ``limit`` bytes whose pages are taken only as they are
written (an anonymous mapping), and snappy's declared lengths are checked before
anything is decompressed. A 1 MB payload that would make 512 MiB costs at most the
limit, in memory and in time.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable

import cramjam

from strom.protocol.batch_format import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    CorruptBatchError,
)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
MAX_DECOMPRESSED = 64 * 1024 * 1024


class DecompressedTooLarge(CorruptBatchError):
    """A payload that decompresses to more than the limit (a decompression bomb, or a
    batch far larger than any producer makes)."""


CODEC_NAMES = {
    "none": CODEC_NONE,
    "uncompressed": CODEC_NONE,
    "gzip": CODEC_GZIP,
    "snappy": CODEC_SNAPPY,
    "lz4": CODEC_LZ4,
    "zstd": CODEC_ZSTD,
}


def compress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptBatchError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes, limit: int = MAX_DECOMPRESSED) -> bytes:
    """``data`` decompressed; DecompressedTooLarge past ``limit`` bytes, CorruptBatchError
    for what cannot be decompressed."""
    try:
        if codec == CODEC_NONE:
            return data
        if codec == CODEC_SNAPPY:
            if data.startswith(_XERIAL_MAGIC):
                return _xerial_decompress(data, limit)
            _check_snappy_length(data, limit)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == CODEC_GZIP:
            return _bounded(cramjam.gzip.decompress_into, data, limit)
        if codec == CODEC_LZ4:
            return _bounded(cramjam.lz4.decompress_into, data, limit)
        if codec == CODEC_ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, limit)
    except cramjam.DecompressionError as exc:
        raise CorruptBatchError(f"cannot decompress batch: {exc}") from exc
    raise CorruptBatchError(f"unknown compression codec {codec}")


def _too_large(limit: int) -> DecompressedTooLarge:
    return DecompressedTooLarge(f"the payload decompresses to more than {limit} bytes")


def _bounded(decompress_into: Callable[[bytes, mmap.mmap], int], data: bytes, limit: int) -> bytes:
    """Decompress into ``limit`` bytes of lazily backed memory; past them, refuse."""
    out = mmap.mmap(-1, max(limit, 1))
    try:
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" in str(exc) or "smaller than required" in str(exc):
                raise _too_large(limit) from None
            raise
        if written >= limit:  # filled to the brim: there may be more
            raise _too_large(limit)
        return out[:written]
    finally:
        out.close()


def _check_snappy_length(block: bytes, limit: int) -> int:
    """A raw snappy block's declared uncompressed length (its leading varint), checked
    against ``limit`` before anything is decompressed."""
    length = shift = 0
    for position in range(min(len(block), 5)):
        byte = block[position]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    if length > limit:
        raise _too_large(limit)
    return length


def _xerial_decompress(data: bytes, limit: int) -> bytes:
    pos = 16  # magic (8) + version (4) + compatible version (4)
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptBatchError("truncated xerial snappy block")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        block = data[pos : pos + n]
        if len(out) + _check_snappy_length(block, limit) > limit:
            raise _too_large(limit)
        out += cramjam.snappy.decompress_raw(block)
        pos += n
    return bytes(out)
