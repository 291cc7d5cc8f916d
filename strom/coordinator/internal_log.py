"""Appending to and replaying the coordinators' internal topics.

Owns the two storage moves both coordinators make on their compacted topics
(``__consumer_offsets``, ``__transaction_state``): appending key/value records as
one batch at the leader (``append_records``: the batch is built here and appended
through the leader's one append path, which the broker gives the coordinators as an
``AppendToLeader``: min ISR, high watermark and the rest are its business; the caller
learns what offset and epoch to wait for), and reading a partition back: record by
record (``replay_records``, control batches skipped) or batch by batch
(``replay_batches``). Knows nothing of record formats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from strom.protocol.errors import ErrorCode
from strom.protocol.records import (
    ATTR_TRANSACTIONAL,
    Record,
    build_batch,
    decode_records,
    iter_headers,
)

if TYPE_CHECKING:
    from strom.cluster.node_state import NodeState
    from strom.protocol.records import BatchHeader

_READ_CHUNK = 1 << 20
CONTROL_ABORT = 0  # the type in a control record's key: an abort marker
CONTROL_COMMIT = 1  # a commit marker


class Appended(NamedTuple):
    """Where an append ended: wait for the high watermark to pass ``end_offset``
    while the partition is still led in ``leader_epoch``."""

    partition: int
    end_offset: int
    leader_epoch: int
    replicated: bool  # more than one replica: the followers move the high watermark


class AppendRefused(OSError):
    """A leader append refused before anything was written, with the partition's error
    (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS)."""

    def __init__(self, error_code: ErrorCode) -> None:
        super().__init__(error_code.name)
        self.error_code = error_code


# (topic, partition, batches, their headers) -> where they landed, or AppendRefused
AppendToLeader = Callable[[str, int, bytearray, list["BatchHeader"]], Appended]


def append_records(
    append: AppendToLeader,
    topic_name: str,
    partition: int,
    records: list[tuple[bytes, bytes | None]],
    now_ms: int,
    *,
    producer: tuple[int, int] | None = None,
) -> Appended:
    """Append ``records`` to ``topic_name``-``partition`` as one batch through
    ``append``. ``producer`` (id, epoch) makes it a transactional batch of that
    producer (TxnOffsetCommit). Raises AppendRefused (an OSError) when this broker
    cannot append there."""
    if producer is None:
        buf = bytearray(build_batch(records, base_timestamp=now_ms))
    else:
        buf = bytearray(
            build_batch(
                records,
                base_timestamp=now_ms,
                producer_id=producer[0],
                producer_epoch=producer[1],
                attributes=ATTR_TRANSACTIONAL,
            )
        )
    headers = list(iter_headers(buf))  # built here: no CRC to check
    return append(topic_name, partition, buf, headers)


def replay_batches(
    state: NodeState, topic_name: str, partition: int
) -> Iterator[tuple[bytes | memoryview, BatchHeader]]:
    """Every batch of a partition from its log start, control batches included, with
    the bytes it lies in (decode its records with ``decode_records(data, header)``)."""
    partition_log = state.partition_log(topic_name, partition)
    if partition_log is None:
        return
    offset = partition_log.log_start_offset
    end = partition_log.log_end_offset
    while offset < end:
        data = partition_log.read(offset, _READ_CHUNK)
        if not data:
            break
        for header in iter_headers(data):
            offset = header.next_offset
            yield data, header


def replay_records(
    state: NodeState, topic_name: str, partition: int
) -> Iterator[tuple[BatchHeader, Record]]:
    """Every record of a partition from its log start, with its batch header (control
    batches are skipped)."""
    for data, header in replay_batches(state, topic_name, partition):
        if not header.is_control:
            for record in decode_records(data, header):
                yield header, record
