"""Compression codecs of Kafka record batches (gzip, snappy, lz4, zstd) via cramjam.

The produce and fetch paths never call these: batches are stored and served as
they came. They are used where records must be read (tests, tools, and later
compaction and broker-side recompression).

Snappy comes in two shapes on the wire: raw blocks (librdkafka) and the xerial
framing the Java client writes (magic ``\\x82SNAPPY\\x00``, then length-prefixed
raw blocks). Both decompress here; compression writes raw blocks.
"""

from __future__ import annotations

import struct

import cramjam

from strom.protocol.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    CorruptBatchError,
)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"

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


def decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == CODEC_NONE:
            return data
        if codec == CODEC_GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == CODEC_SNAPPY:
            if data.startswith(_XERIAL_MAGIC):
                return _xerial_decompress(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == CODEC_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == CODEC_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptBatchError(f"cannot decompress batch: {exc}") from exc
    raise CorruptBatchError(f"unknown compression codec {codec}")


def _xerial_decompress(data: bytes) -> bytes:
    pos = 16  # magic (8) + version (4) + compatible version (4)
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptBatchError("truncated xerial snappy block")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(data[pos : pos + n])
        pos += n
    return bytes(out)
