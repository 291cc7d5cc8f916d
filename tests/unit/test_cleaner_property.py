"""Compaction, checked against a model: random keyed writes and tombstones in batches
of every codec, cleaned (twice, with writes and a DeleteRecords in between), then every key's latest
record is readable at its original offset, older values and expired tombstones are
gone, offsets never repeat, and batches keep their codec. The same holds after the
log is reopened."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    build_batch,
    decode_records,
    iter_headers,
    validate_batches,
)
from strom.storage import FileHandleCache, LogConfig, PartitionLog
from strom.storage.cleaner import LogCleaner

NOW = 1_800_000_000_000
DELETE_RETENTION = 3_600_000
OLD, RECENT = NOW - 2 * DELETE_RETENTION, NOW - 1000
CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]

record = st.tuples(
    st.integers(0, 7),  # key
    st.one_of(st.none(), st.binary(min_size=0, max_size=40)),  # value (None: tombstone)
)
batch = st.tuples(
    st.lists(record, min_size=1, max_size=6),
    st.sampled_from([OLD, RECENT]),
    st.sampled_from(CODECS),
)
phase = st.lists(batch, min_size=1, max_size=25)


def _append(plog: PartitionLog, records, ts: int, codec: int, written: dict) -> None:
    pairs = [(b"key-%d" % k, v) for k, v in records]
    buf = bytearray(build_batch(pairs, base_timestamp=ts, codec=codec))
    base = plog.append(buf, validate_batches(buf))
    for i, (key, value) in enumerate(pairs):
        written[base + i] = (key, value, ts, codec)


def _seal(plog: PartitionLog, written: dict) -> None:
    # A batch larger than segment.bytes: it rolls and fills the active segment alone,
    # so everything written before it is in closed, cleanable segments.
    _append(plog, [(99, b"s" * 700)], RECENT, CODEC_NONE, written)


def _read_all(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None, int]]:
    data = plog.read(plog.log_start_offset, 1 << 30)
    out = []
    for header in iter_headers(data):
        for rec in decode_records(data, header):
            out.append((rec.offset, rec.key, rec.value, header.codec))
    return out


def _check(plog: PartitionLog, written: dict, cleaned_upto: int) -> None:
    got = _read_all(plog)
    offsets = [o for o, *_ in got]
    assert offsets == sorted(set(offsets)), "offsets repeat or go backwards"
    # The cleaner sees the closed segments only: "latest" is latest below the active one.
    latest: dict[bytes, int] = {}
    for offset in sorted(written):
        if offset < cleaned_upto:
            latest[written[offset][0]] = offset
    present = {o for o in offsets}
    for offset, key, value, codec in got:
        w_key, w_value, _ts, w_codec = written[offset]
        assert (key, value, codec) == (w_key, w_value, w_codec), offset
        if offset < cleaned_upto:
            assert latest[key] == offset, f"an older value of {key!r} survived at {offset}"
    for key, offset in latest.items():
        if offset < plog.log_start_offset:
            continue  # deleted by DeleteRecords
        _, value, ts, _ = written[offset]
        expired = value is None and ts < NOW - DELETE_RETENTION and offset < cleaned_upto
        assert (offset in present) == (not expired), (key, offset, value, ts)
    for offset in written:
        if offset >= max(cleaned_upto, plog.log_start_offset):
            assert offset in present  # the active segment is never touched


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=phase, second=phase, merge=st.booleans(), cut=st.floats(0, 1))
def test_compaction_keeps_latest_per_key(first, second, merge, cut) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        handles = FileHandleCache(32)
        config = LogConfig(
            segment_bytes=8000 if merge else 400,
            cleanup_policy="compact",
            delete_retention_ms=DELETE_RETENTION,
            min_cleanable_dirty_ratio=0.0,
            file_delete_delay_ms=0,
            index_interval_bytes=100,
        )
        plog = PartitionLog.open(Path(tmp) / "c-0", "c", 0, config, handles)
        cleaner = LogCleaner(Path(tmp), lambda: [plog])
        written: dict[int, tuple] = {}
        for records, ts, codec in first:
            _append(plog, records, ts, codec, written)
        _seal(plog, written)
        cleaner.clean(plog, NOW)
        _check(plog, written, plog.active_segment.base_offset)
        for records, ts, codec in second:
            _append(plog, records, ts, codec, written)
        # DeleteRecords may move the log start offset anywhere, mid-batch included.
        plog.delete_records_before(int(cut * plog.high_watermark))
        _seal(plog, written)
        segments_before = len(plog.segments())
        cleaner.clean(plog, NOW)
        upto = plog.active_segment.base_offset
        _check(plog, written, upto)
        assert len(plog.segments()) <= segments_before
        cleaner.clean(plog, NOW)  # again: nothing dirty, or only what the cut left
        _check(plog, written, upto)
        plog.close()
        handles.close_all()
        reopened = PartitionLog.open(
            Path(tmp) / "c-0", "c", 0, config, FileHandleCache(32), recovery_point=0
        )
        _check(reopened, written, upto)
        reopened.close()
