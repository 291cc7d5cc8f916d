"""Messages of magic 0 and 1 laid out by hand from the format's spec (offset int64, size
int32, CRC32 of magic..end, magic, attributes, [timestamp int64], key and value with
int32 lengths), with struct and zlib.crc32 only: the expected bytes of the tests of
old message formats, built independently of strom/protocol/message_sets.py."""

from __future__ import annotations

import struct
import zlib


def blob(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def message(magic: int, attributes: int, key: bytes | None, value: bytes | None, ts=-1) -> bytes:
    """crc .. end of one message."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", ts)
    body += blob(key) + blob(value)
    return struct.pack(">I", zlib.crc32(body)) + body


def entry(offset: int, msg: bytes) -> bytes:
    """One message set entry: offset, size, message."""
    return struct.pack(">qi", offset, len(msg)) + msg


def parse_wrapper(data: bytes) -> tuple[int, int, int, int, bytes]:
    """(offset, magic, attributes, timestamp, value) of a message set of one wrapper
    message (null key), its size and CRC checked; timestamp -1 in magic 0."""
    offset, size, crc, magic, attributes = struct.unpack_from(">qiIbb", data, 0)
    assert size == len(data) - 12
    assert crc == zlib.crc32(data[16:])
    at = 18
    ts = -1
    if magic == 1:
        (ts,) = struct.unpack_from(">q", data, at)
        at += 8
    assert struct.unpack_from(">i", data, at) == (-1,)  # null key
    (n,) = struct.unpack_from(">i", data, at + 4)
    assert at + 8 + n == len(data)
    return offset, magic, attributes, ts, data[at + 8 :]
