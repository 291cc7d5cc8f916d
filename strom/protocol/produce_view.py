"""Produce request bodies decoded over the received frame, records left in place.

Owns one decoder: Produce (key 0) versions 0-12 read from a writable buffer, with
each partition's ``records`` a writable memoryview into that buffer instead of a
copy. The broker patches base offsets and leader epochs into those views and
writes them to the log, so a produced batch is never copied between the socket
and the page cache. The fields are named as kio's ``ProduceRequest`` names them
(``transactional_id``, ``acks``, ``timeout``, ``topic_data[].name``,
``.partition_data[].index``, ``.records``; ``timeout`` is in milliseconds here),
so handlers read either; versions 0-2 have no ``transactional_id`` (None here).
Malformed input raises ValueError, as kio's readers do.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")

FIRST_FLEXIBLE_VERSION = 9
FIRST_TRANSACTIONAL_VERSION = 3


@dataclass(frozen=True, slots=True)
class PartitionProduceView:
    index: int
    records: memoryview | None


@dataclass(frozen=True, slots=True)
class TopicProduceView:
    name: str
    partition_data: tuple[PartitionProduceView, ...]


@dataclass(frozen=True, slots=True)
class ProduceRequestView:
    transactional_id: str | None
    acks: int
    timeout: int  # ms
    topic_data: tuple[TopicProduceView, ...]


class _Cursor:
    """Reads Kafka primitives from ``view`` at ``at``, checking bounds."""

    __slots__ = ("view", "at", "end")

    def __init__(self, view: memoryview, at: int) -> None:
        self.view = view
        self.at = at
        self.end = len(view)

    def take(self, n: int) -> int:
        start = self.at
        if n < 0 or start + n > self.end:
            raise ValueError(f"field of {n} bytes at {start} runs past the frame end {self.end}")
        self.at = start + n
        return start

    def int16(self) -> int:
        value: int = _I16.unpack_from(self.view, self.take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _I32.unpack_from(self.view, self.take(4))[0]
        return value

    def uvarint(self) -> int:
        value = shift = 0
        view = self.view
        while True:
            byte = view[self.take(1)]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError("unsigned varint longer than 5 bytes")

    def text(self, length: int) -> str | None:
        if length < 0:
            return None
        start = self.take(length)
        return str(self.view[start : start + length], "utf-8")

    def slice(self, length: int) -> memoryview | None:
        if length < 0:
            return None
        start = self.take(length)
        return self.view[start : start + length]

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())


def _read_classic(c: _Cursor, transactional: bool = True) -> ProduceRequestView:
    transactional_id = c.text(c.int16()) if transactional else None
    acks, timeout = _ACKS_TIMEOUT.unpack_from(c.view, c.take(6))
    topics = []
    for _ in range(c.int32()):
        name = c.text(c.int16())
        partitions = tuple(
            PartitionProduceView(c.int32(), c.slice(c.int32())) for _ in range(c.int32())
        )
        topics.append(TopicProduceView(name or "", partitions))
    return ProduceRequestView(transactional_id, acks, timeout, tuple(topics))


def _read_flexible(c: _Cursor) -> ProduceRequestView:
    transactional_id = c.text(c.uvarint() - 1)
    acks, timeout = _ACKS_TIMEOUT.unpack_from(c.view, c.take(6))
    topics = []
    for _ in range(c.uvarint() - 1):
        name = c.text(c.uvarint() - 1)
        partitions = []
        for _ in range(c.uvarint() - 1):
            index = c.int32()
            records = c.slice(c.uvarint() - 1)
            c.skip_tagged_fields()
            partitions.append(PartitionProduceView(index, records))
        c.skip_tagged_fields()
        topics.append(TopicProduceView(name or "", tuple(partitions)))
    c.skip_tagged_fields()
    return ProduceRequestView(transactional_id, acks, timeout, tuple(topics))


def produce_reader(version: int) -> Callable[[memoryview, int], tuple[ProduceRequestView, int]]:
    """A body reader for Produce ``version``: (request, bytes read) from ``frame`` at
    ``offset``; ``frame`` must be writable for the records views to be."""
    read: Callable[[_Cursor], ProduceRequestView] = _read_classic
    if version >= FIRST_FLEXIBLE_VERSION:
        read = _read_flexible
    elif version < FIRST_TRANSACTIONAL_VERSION:
        read = partial(_read_classic, transactional=False)

    def read_body(frame: memoryview, offset: int) -> tuple[ProduceRequestView, int]:
        cursor = _Cursor(frame, offset)
        body = read(cursor)
        return body, cursor.at - offset

    return read_body
