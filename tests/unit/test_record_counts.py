"""check_record_counts: a batch must hold exactly the records its header counts. The
walk is held to the same answers in Python and compiled (where it was built)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.protocol import records
from strom.protocol.codecs import DecompressedTooLarge
from strom.protocol.records import (
    HEADER_SIZE,
    InvalidRecordCountError,
    build_batch,
    check_record_counts,
    iter_headers,
    records_fill_in_python,
)

Walk = Callable[[bytes, int, int, int], bool]

WALKS: list[Walk] = [records_fill_in_python]
if importlib.util.find_spec("strom.protocol._record_walk") is not None:
    from strom.protocol._record_walk import records_fill as records_fill_compiled

    WALKS.append(records_fill_compiled)


def test_the_compiled_walk_is_the_one_used_where_it_was_built() -> None:
    assert records.records_fill is WALKS[-1]


@pytest.fixture(params=WALKS, ids=lambda walk: walk.__module__)
def records_fill(request: pytest.FixtureRequest) -> Walk:
    walk: Walk = request.param
    return walk


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("size", [0, 50, 200, 20_000])
def test_honest_batches_pass_and_other_counts_do_not(
    codec: int, size: int, records_fill: Walk
) -> None:
    records = [(b"k%d" % i, b"v" * size) for i in range(130)]  # two-byte offset deltas too
    batch = build_batch(records, codec=codec)
    headers = list(iter_headers(batch))
    bodies = check_record_counts(batch, headers)
    assert (headers[0].position in bodies) == bool(codec)
    body = bodies.get(0, batch[HEADER_SIZE:])
    assert records_fill(body, 0, len(body), 130)
    for wrong in (0, 1, 129, 131, 1000):
        assert not records_fill(body, 0, len(body), wrong)


def test_lengths_that_walk_backwards_or_below_a_record_fail(records_fill: Walk) -> None:
    # zig-zag -3 (0x05), then 2 (0x04): a walk that trusted them could land on the end
    assert not records_fill(bytes([0x05, 0x04, 0, 0]), 0, 4, 2)
    # a record of 2 bytes is shorter than any record can be
    assert not records_fill(bytes([0x04, 0, 0]), 0, 3, 1)
    # two-byte negative length
    assert not records_fill(bytes([0x81, 0x01]) + bytes(200), 0, 202, 1)
    # truncated: the prefix promises more than there is
    assert not records_fill(bytes([0x20, 0, 0]), 0, 3, 1)
    # a varint that never ends, and one past any length
    assert not records_fill(bytes([0xFF] * 12), 0, 12, 1)
    assert not records_fill(bytes([0xFE] * 9 + [0x01]) + bytes(20), 0, 30, 1)
    # a window the body does not have
    assert not records_fill(bytes([0x0C]) + bytes(6), 0, 8, 1)
    assert not records_fill(bytes([0x0C, 0]), 0, 7, 1)
    assert records_fill(bytes([0x0C]) + bytes(6), 0, 7, 1)
    assert records_fill(b"", 0, 0, 0)


@given(
    lengths=st.lists(st.integers(0, 20_000), max_size=20),
    noise=st.binary(max_size=40),
    count_change=st.integers(-2, 2),
    end_change=st.integers(-3, 3),
)
def test_compiled_and_python_walks_agree(
    lengths: list[int], noise: bytes, count_change: int, end_change: int
) -> None:
    body = bytearray(noise[:3])
    for length in lengths:  # zig-zag varint prefixes, some below a record's size
        value = length << 1
        while value >= 0x80:
            body.append(value & 0x7F | 0x80)
            value >>= 7
        body.append(value)
        body += bytes(length)
    body += noise[3:]
    pos = min(len(noise), 3)
    end = max(0, len(body) - len(noise[3:]) + end_change)
    count = max(0, len(lengths) + count_change)
    answers = {walk(bytes(body), pos, end, count) for walk in WALKS}
    answers |= {walk(memoryview(body), pos, end, count) for walk in WALKS}
    assert len(answers) == 1


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
