"""check_record_counts: a batch must hold exactly the records its header counts."""

from __future__ import annotations

import pytest

from strom.protocol.codecs import DecompressedTooLarge
from strom.protocol.records import (
    HEADER_SIZE,
    InvalidRecordCountError,
    build_batch,
    check_record_counts,
    iter_headers,
    records_fill,
)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("size", [0, 50, 200, 20_000])
def test_honest_batches_pass_and_other_counts_do_not(codec: int, size: int) -> None:
    records = [(b"k%d" % i, b"v" * size) for i in range(130)]  # two-byte offset deltas too
    batch = build_batch(records, codec=codec)
    headers = list(iter_headers(batch))
    bodies = check_record_counts(batch, headers)
    assert (headers[0].position in bodies) == bool(codec)
    body = bodies.get(0, batch[HEADER_SIZE:])
    assert records_fill(body, 0, len(body), 130)
    for wrong in (0, 1, 129, 131, 1000):
        assert not records_fill(body, 0, len(body), wrong)


def test_lengths_that_walk_backwards_or_below_a_record_fail() -> None:
    # zig-zag -3 (0x05), then 2 (0x04): a walk that trusted them could land on the end
    assert not records_fill(bytes([0x05, 0x04, 0, 0]), 0, 4, 2)
    # a record of 2 bytes is shorter than any record can be
    assert not records_fill(bytes([0x04, 0, 0]), 0, 3, 1)
    # two-byte negative length
    assert not records_fill(bytes([0x81, 0x01]) + bytes(200), 0, 202, 1)
    # truncated: the prefix promises more than there is
    assert not records_fill(bytes([0x20, 0, 0]), 0, 3, 1)


def test_a_compressed_batch_past_the_limit_is_too_large() -> None:
    batch = build_batch([(b"k", b"\0" * 100_000)], codec=4)
    with pytest.raises(DecompressedTooLarge):
        check_record_counts(batch, list(iter_headers(batch)), decompress_limit=50_000)


def test_the_error_says_what_is_wrong() -> None:
    batch = bytearray(build_batch([(b"k", b"v")] * 3))
    headers = list(iter_headers(batch))
    headers[0].record_count = 2
    with pytest.raises(InvalidRecordCountError, match="2 record"):
        check_record_counts(batch, headers)
