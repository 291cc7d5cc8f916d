"""strom.spark.batch_decode against the straightforward per-record decoder of
strom.protocol.records: every field of every record, for keys and values null, empty,
small and large, headers, every codec, control and LogAppendTime batches, compacted
batches with offset gaps, buffers of many batches, a truncated last batch, and
malformed records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip(
    "pyspark", reason="PySpark is not installed (the spark extra: pip install -e '.[spark]')"
)

from strom.protocol.records import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    CorruptBatchError,
    UnsupportedMagicError,
    build_batch,
    decode_records,
    iter_headers,
    read_header,
    rebuild_batch,
    scan_records,
    set_log_append_time,
)
from strom.spark.batch_decode import RecordColumns, complete_batches, decode

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
BASE_TS = 1_700_000_000_000

Row = tuple[int, int, int, bytes | None, bytes | None, list | None]


def decoded_rows(columns: list[RecordColumns]) -> list[Row]:
    rows = []
    for cols in columns:
        headers = cols.headers if cols.headers is not None else [None] * len(cols)
        rows += zip(
            cols.offset.tolist(),
            cols.timestamp_us.tolist(),
            cols.timestamp_type.tolist(),
            cols.key.to_pylist(),
            cols.value.to_pylist(),
            headers,
            strict=True,
        )
    return rows


def reference_rows(
    buf: bytes, *, first: int = 0, end: int = 2**63, include_headers: bool = True
) -> list[Row]:
    rows = []
    for header in iter_headers(buf):
        if header.is_control:
            continue
        log_append = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
        for rec in decode_records(buf, header):
            if not first <= rec.offset < end:
                continue
            timestamp = header.max_timestamp if log_append else rec.timestamp
            headers = (rec.headers or None) if include_headers else None
            rows.append(
                (rec.offset, timestamp * 1000, int(log_append), rec.key, rec.value, headers)
            )
    return rows


def check(buf: bytes, **kwargs) -> list[Row]:
    got = decoded_rows(decode(buf, complete_batches(buf), **kwargs))
    include_headers = kwargs.get("include_headers", False)
    want = reference_rows(
        buf,
        first=kwargs.get("first", 0),
        end=kwargs.get("end", 2**63),
        include_headers=include_headers,
    )
    assert got == want
    return got


def mixed_records(count: int) -> list[tuple]:
    records = []
    for i in range(count):
        key = [None, b"", f"key-{i}".encode(), bytes(300)][i % 4]
        value = [f"value-{i}".encode(), None, b"", bytes([i % 251]) * 20_000][i % 4 if i % 7 else 0]
        headers = [("h", f"{i}".encode()), ("", None), ("empty", b"")] if i % 3 == 0 else []
        records.append((key, value, headers))
    return records


@pytest.mark.parametrize("codec", CODECS)
def test_every_field_of_mixed_records_in_every_codec(codec: int) -> None:
    buf = build_batch(
        mixed_records(60),
        base_offset=1000,
        timestamps=[BASE_TS + (i * 37) % 500 - 100 for i in range(60)],
        codec=codec,
    )
    rows = check(buf, include_headers=True)
    assert len(rows) == 60
    assert rows[0][3] is None and rows[1][3] == b"" and rows[2][3] == b"key-2"
    assert rows[1][4] is None and rows[2][4] == b"" and len(rows[3][4]) == 20_000
    assert rows[0][5] == [("h", b"0"), ("", None), ("empty", b"")] and rows[1][5] is None
    check(buf)  # without headers


def test_many_batches_with_mixed_codecs_and_offset_filtering() -> None:
    buf = b""
    offset = 0
    for n, codec in enumerate(CODECS * 2):
        count = 5 + n * 3
        buf += build_batch(
            mixed_records(count), base_offset=offset, base_timestamp=BASE_TS + n, codec=codec
        )
        offset += count
    columns = decode(buf, complete_batches(buf))
    assert len(columns) > 1  # runs of compressed and uncompressed batches
    assert [r[0] for r in check(buf)] == list(range(offset))
    assert [r[0] for r in check(buf, first=7, end=offset - 9)] == list(range(7, offset - 9))
    assert check(buf, first=offset) == []


def test_many_records_need_long_varints_for_offset_deltas() -> None:
    records = [(None, i.to_bytes(4, "big")) for i in range(20_000)]
    buf = build_batch(records, base_offset=5, timestamps=[BASE_TS + i for i in range(20_000)])
    rows = check(buf)
    assert rows[-1][:2] == (20_004, (BASE_TS + 19_999) * 1000)


def test_control_batches_are_skipped() -> None:
    marker = build_batch(
        [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        base_offset=3,
        attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL,
        producer_id=7,
    )
    data = build_batch([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], attributes=ATTR_TRANSACTIONAL)
    after = build_batch([(b"d", b"4")], base_offset=4)
    buf = data + marker + after
    assert [r[0] for r in check(buf)] == [0, 1, 2, 4]
    assert decode(marker, complete_batches(marker)) == []


def test_log_append_time_batches_carry_the_batch_time() -> None:
    batch = bytearray(build_batch([(None, b"x"), (None, b"y")], base_timestamp=BASE_TS))
    set_log_append_time(batch, read_header(batch), BASE_TS + 5000)
    buf = bytes(batch) + build_batch([(None, b"z")], base_offset=2, base_timestamp=BASE_TS)
    rows = check(buf)
    assert [(r[1], r[2]) for r in rows] == [
        ((BASE_TS + 5000) * 1000, 1),
        ((BASE_TS + 5000) * 1000, 1),
        (BASE_TS * 1000, 0),
    ]


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_ZSTD])
def test_compacted_batches_with_offset_gaps(codec: int) -> None:
    full = build_batch([(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)], base_offset=50)
    header = read_header(full)
    kept = [rec for rec in scan_records(full[61:], 10) if rec[2] % 3 == 0]
    body = b"".join(full[61 + start : 61 + end] for start, end, *_ in kept)
    buf = rebuild_batch(full, header, body, len(kept), codec)
    assert [r[0] for r in check(buf)] == [50, 53, 56, 59]
    assert [r[0] for r in check(buf, first=51, end=59)] == [53, 56]
    emptied = rebuild_batch(full, header, b"", 0, codec)  # kept for its producer state
    assert decode(emptied, complete_batches(emptied)) == []
    assert [r[0] for r in check(emptied + buf)] == [50, 53, 56, 59]


def test_a_truncated_last_batch_is_left_for_the_next_fetch() -> None:
    first = build_batch([(None, b"a"), (None, b"b")])
    second = build_batch([(None, b"c")], base_offset=2)
    for cut in (1, 20, 61, len(second) - 1):
        buf = first + second[:cut]
        assert [h.base_offset for h in complete_batches(buf)] == [0]
        assert [r[0] for r in decoded_rows(decode(buf, complete_batches(buf)))] == [0, 1]
    assert complete_batches(b"") == []


def test_old_message_formats_are_reported() -> None:
    buf = bytearray(build_batch([(None, b"a")]))
    buf[16] = 1
    with pytest.raises(UnsupportedMagicError):
        complete_batches(bytes(buf))


@pytest.mark.parametrize("where", ["record length", "key length", "header count", "truncated"])
def test_malformed_records_raise_corrupt_batch_error(where: str) -> None:
    records = [(b"key", b"value", [("h", b"v")]), (b"k2", b"v2", [])]
    buf = bytearray(build_batch(records))
    # first record: length(1) attributes(1) ts(1) offset(1) keylen(1)=3 "key" ...
    if where == "record length":
        buf[61] += 2
    elif where == "key length":
        buf[65] = 40  # 20 bytes: past the record
    elif where == "header count":
        buf[61 + 1 + 4 + 3 + 1 + 5] = 8  # 4 headers instead of 1
    header = read_header(bytes(buf))
    if where == "truncated":
        header.record_count += 1
    with pytest.raises(CorruptBatchError):
        decode(bytes(buf), [header], include_headers=True)


blobs = st.none() | st.binary(max_size=40) | st.binary(min_size=100, max_size=9000)
record = st.tuples(
    blobs,
    blobs,
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.lists(st.tuples(record, st.integers(-(2**40), 2**40)), min_size=1, max_size=40),
            st.sampled_from(CODECS),
        ),
        min_size=1,
        max_size=5,
    ),
    include_headers=st.booleans(),
    data=st.data(),
)
def test_decode_matches_the_reference_decoder(batches, include_headers, data) -> None:
    buf = b""
    offset = 0
    for stamped, codec in batches:
        records = [rec for rec, _ in stamped]
        stamps = [BASE_TS + jitter for _, jitter in stamped]
        buf += build_batch(records, base_offset=offset, timestamps=stamps, codec=codec)
        offset += len(records)
    first = data.draw(st.integers(0, offset))
    end = data.draw(st.integers(first, offset + 1))
    check(buf, first=first, end=end, include_headers=include_headers)
