"""Property test: random batch sizes, timestamps, configs that force rolls, DeleteRecords
and restarts; every read and timestamp lookup must match a brute-force model."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.records import build_batch, iter_headers, validate_batches
from strom.storage import FileHandleCache, LogConfig, OffsetOutOfRangeError, PartitionLog

batch_spec = st.tuples(
    st.integers(min_value=1, max_value=12),  # records
    st.integers(min_value=0, max_value=300),  # value size
    st.integers(min_value=0, max_value=5000),  # timestamp
)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(batch_spec, min_size=1, max_size=3)),
        st.tuples(st.just("delete"), st.floats(min_value=0, max_value=1)),
        st.tuples(st.just("restart"), st.booleans()),
    ),
    min_size=1,
    max_size=40,
)


def expected_read(model, offset, max_bytes, upper=None):
    out, total = [], 0
    for base, last, _ts, size in model:
        if last < offset:
            continue
        if upper is not None and base >= upper:
            break
        if out and total + size > max_bytes:
            break
        out.append(base)
        total += size
        if total > max_bytes:
            break
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    operations=ops,
    segment_bytes=st.integers(min_value=200, max_value=5000),
    index_interval=st.integers(min_value=0, max_value=1500),
    probes=st.lists(
        st.tuples(st.floats(0, 1), st.integers(1, 6000), st.booleans()), min_size=5, max_size=15
    ),
)
def test_log_matches_model(operations, segment_bytes, index_interval, probes):
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval)
    handles = FileHandleCache(8)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "p-0"
        plog = PartitionLog.open(directory, "p", 0, config, handles)
        model: list[tuple[int, int, int, int]] = []
        for op, arg in operations:
            if op == "append":
                buf = bytearray().join(
                    bytearray(build_batch([(None, b"v" * size)] * n, base_timestamp=ts))
                    for n, size, ts in arg
                )
                headers = validate_batches(buf)
                first = plog.append(buf, headers)
                assert first == (model[-1][1] + 1 if model else 0)
                model.extend(
                    (h.base_offset, h.last_offset, h.max_timestamp, h.size) for h in headers
                )
            elif op == "delete":
                target = plog.log_start_offset + int(
                    arg * (plog.high_watermark - plog.log_start_offset)
                )
                assert plog.delete_records_before(target) == max(target, plog.log_start_offset)
                assert plog.segments()[0] <= plog.log_start_offset
                assert len(plog.segments()) == 1 or plog.segments()[1] > plog.log_start_offset
            else:
                start, end = plog.log_start_offset, plog.log_end_offset
                plog.close()
                plog = PartitionLog.open(
                    directory,
                    "p",
                    0,
                    config,
                    handles,
                    clean=arg,
                    log_start_offset=start,
                )
                assert plog.log_end_offset == end and plog.log_start_offset == start
        start = plog.log_start_offset
        visible = [m for m in model if m[1] >= start]
        end = plog.log_end_offset
        assert end == (model[-1][1] + 1 if model else 0)
        for fraction, max_bytes, bounded in probes:
            offset = start + int(fraction * (end - start))
            upper = (start + end) // 2 if bounded else None
            got = [
                h.base_offset for h in iter_headers(plog.read(offset, max_bytes, upper_bound=upper))
            ]
            if offset == end or (upper is not None and offset >= upper):
                assert got == []
            else:
                assert got == expected_read(visible, offset, max_bytes, upper)
            ts = int(fraction * 5100)
            want = next(((max(b, start), t) for b, last, t, _ in visible if t >= ts), None)
            assert plog.offset_for_timestamp(ts) == want
        with pytest.raises(OffsetOutOfRangeError):
            plog.read(start - 1, 10)
        with pytest.raises(OffsetOutOfRangeError):
            plog.read(end + 1, 10)
        if visible:
            # the segment holding the start may still hold earlier batches
            candidates = [m for m in model if m[1] >= plog.segments()[0]]
            top = max(m[2] for m in candidates)
            first_top = next(m for m in candidates if m[2] == top)
            assert plog.max_timestamp() == (first_top[0], top)  # its first record
        plog.close()
        handles.close_all()
