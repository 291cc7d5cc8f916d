"""The fault tests' checker (tests/fault_workload.py) on made-up logs: a value written
twice is a violation, unless librdkafka sent it again under a bumped producer epoch (the
batch headers of the segment files tell the copies' writers apart)."""

from __future__ import annotations

import struct

from fault_workload import Ack, History, batch_writers, check


def _batch(base_offset: int, producer_id: int, producer_epoch: int, body: bytes) -> bytes:
    """A record batch's header (magic 2) for one record, then ``body`` as its records."""
    after_length = struct.pack(">ibIhiqqqhii", 0, 2, 0, 0, 0, 0, 0, producer_id,
                               producer_epoch, 0, 1) + body  # fmt: skip
    return struct.pack(">qi", base_offset, len(after_length)) + after_length


def test_batch_writers_reads_each_offsets_producer_and_epoch() -> None:
    segment = _batch(0, 7, 0, b"x" * 10) + _batch(1, 7, 1, b"y" * 3) + _batch(2, -1, -1, b"")
    assert batch_writers(segment) == {0: (7, 0), 1: (7, 1), 2: (-1, -1)}


def test_a_copy_under_the_same_epoch_is_a_violation_a_resend_after_a_bump_is_not() -> None:
    history = History()
    history.acks.append(Ack(1.0, 0.5, 0, 0, 1, b"p0-1"))
    log = {0: {0: b"p0-1", 1: b"p0-1"}}

    same_epoch = check(history, log, {0: {0: (7, 0), 1: (7, 0)}})
    assert any("in the log twice" in v.text for v in same_epoch)
    other_producer = check(history, log, {0: {0: (7, 0), 1: (8, 1)}})
    assert any("in the log twice" in v.text for v in other_producer)
    without_headers = check(history, log)
    assert any("in the log twice" in v.text for v in without_headers)

    assert check(history, log, {0: {0: (7, 0), 1: (7, 1)}}) == []
