"""Reading a PartitionLog back in tests, piece by piece."""

from __future__ import annotations

from strom.protocol.records import iter_headers
from strom.storage import PartitionLog


def read_in_pieces(plog: PartitionLog, offset: int, max_bytes: int) -> bytes:
    """Everything from ``offset`` to the log end, through reads of ``max_bytes``."""
    out = bytearray()
    while offset < plog.log_end_offset:
        data = plog.read(offset, max_bytes)
        out += data
        offset = list(iter_headers(data))[-1].last_offset + 1
    return bytes(out)
