"""Idempotent-producer checks of a PartitionLog on real files: duplicates, sequence
gaps, epoch fencing, sequence wrap, and the state rebuilt after a reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.records import ATTR_CONTROL, build_batch, iter_headers, validate_batches
from strom.storage import FileHandleCache, LogConfig, PartitionLog
from strom.storage.producer_state import (
    APPEND,
    MAX_CACHED_BATCHES,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    last_sequence,
)

PID = 4000


def batch(seq: int, n: int = 3, pid: int = PID, epoch: int = 0, attributes: int = 0) -> bytearray:
    return bytearray(
        build_batch(
            [(None, b"v%d" % i) for i in range(n)],
            base_timestamp=1000,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            attributes=attributes,
        )
    )


def append(plog: PartitionLog, *bufs: bytearray) -> int:
    buf = bytearray().join(bufs)
    return plog.append(buf, validate_batches(buf))


def stored(plog: PartitionLog) -> list[tuple[int, int, int, int]]:
    """(base offset, producer id, epoch, base sequence) of every batch in the log."""
    data = plog.read(plog.log_start_offset, 1 << 30)
    return [
        (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence)
        for h in iter_headers(data)
    ]


@pytest.fixture
def plog(tmp_path: Path, handles: FileHandleCache):
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), handles)
    yield log
    log.close()


def test_in_order_batches_append(plog: PartitionLog) -> None:
    assert append(plog, batch(0)) == 0
    assert append(plog, batch(3)) == 3
    assert append(plog, batch(6, n=1)) == 6
    assert plog.log_end_offset == 7
    entry = plog.producers.get(PID)
    assert entry is not None and entry.epoch == 0 and entry.last_seq == 6


def test_duplicate_returns_original_offset_and_appends_nothing(plog: PartitionLog) -> None:
    append(plog, batch(0, pid=1, n=2))  # another producer first, so offsets differ from seqs
    first = append(plog, batch(0))
    second = append(plog, batch(3))
    end = plog.log_end_offset
    assert append(plog, batch(0)) == first == 2
    assert append(plog, batch(3)) == second == 5
    assert plog.log_end_offset == end
    assert len(stored(plog)) == 3
    assert append(plog, batch(6)) == end  # and the producer goes on


def test_only_last_five_batches_are_duplicates(plog: PartitionLog) -> None:
    for i in range(MAX_CACHED_BATCHES + 1):
        append(plog, batch(i, n=1))
    end = plog.log_end_offset
    for i in range(1, MAX_CACHED_BATCHES + 1):
        assert append(plog, batch(i, n=1)) == i
    with pytest.raises(OutOfOrderSequenceError):  # sequence 0 has left the cache
        append(plog, batch(0, n=1))
    assert plog.log_end_offset == end


def test_same_first_sequence_different_length_is_not_a_duplicate(plog: PartitionLog) -> None:
    append(plog, batch(0, n=3))
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(0, n=2))
    assert plog.log_end_offset == 3


def test_gap_and_going_back_are_out_of_order(plog: PartitionLog) -> None:
    append(plog, batch(0))
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(4))  # expected 3
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(2))
    assert plog.log_end_offset == 3
    assert append(plog, batch(3)) == 3


def test_unknown_producer_accepts_any_sequence(plog: PartitionLog) -> None:
    assert append(plog, batch(1234, pid=77, epoch=5)) == 0
    assert append(plog, batch(1237, pid=77, epoch=5)) == 3


def test_older_epoch_is_fenced(plog: PartitionLog) -> None:
    append(plog, batch(0, epoch=2))
    with pytest.raises(InvalidProducerEpochError):
        append(plog, batch(3, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        append(plog, batch(0, epoch=1))  # not even a duplicate from an older epoch
    assert plog.log_end_offset == 3


def test_new_epoch_must_start_at_zero(plog: PartitionLog) -> None:
    append(plog, batch(0, epoch=0))
    append(plog, batch(3, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(6, epoch=1))
    assert append(plog, batch(0, epoch=1)) == 6
    with pytest.raises(InvalidProducerEpochError):
        append(plog, batch(6, epoch=0))  # the old epoch is fenced from now on
    assert append(plog, batch(3, epoch=1)) == 9
    # The new epoch's batches are the duplicates now, not the old epoch's.
    assert append(plog, batch(0, epoch=1)) == 6


def test_sequence_wraps_at_int32_max(plog: PartitionLog) -> None:
    top = 2**31 - 1
    append(plog, batch(top - 1, n=1))
    append(plog, batch(top, n=3))  # sequences top, 0, 1
    assert plog.producers.get(PID).last_seq == 1
    assert append(plog, batch(top, n=3)) == 1  # duplicate across the wrap
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(0))
    assert append(plog, batch(2)) == 4


def test_last_sequence_wraps() -> None:
    (header,) = validate_batches(batch(2**31 - 2, n=5))
    assert last_sequence(header) == 2


def test_batches_without_producer_id_are_not_checked(plog: PartitionLog) -> None:
    plain = bytearray(build_batch([(None, b"x")]))
    assert append(plog, plain) == 0
    assert append(plog, bytearray(plain)) == 1  # same bytes again: no dedup without a pid
    assert append(plog, batch(-1, pid=PID)) == 2  # a producer id but no sequence
    assert len(plog.producers) == 0


def test_several_batches_in_one_append(plog: PartitionLog) -> None:
    assert append(plog, batch(0), batch(3), batch(0, pid=9)) == 0
    assert plog.log_end_offset == 9
    with pytest.raises(OutOfOrderSequenceError):  # the second does not follow the first
        append(plog, batch(6), batch(10))
    assert plog.log_end_offset == 9
    assert append(plog, batch(6), batch(9)) == 9


def test_control_batches_skip_checks() -> None:
    # Control batches pass the sequence checks untouched; they are still recorded
    # (markers end transactions), so the verdict is APPEND, never a refusal.
    state = ProducerStateManager()
    headers = validate_batches(batch(0, n=1, attributes=ATTR_CONTROL))
    assert state.check(headers) == APPEND
    state.record(validate_batches(batch(5, n=1)))
    headers = validate_batches(batch(17, n=1, attributes=ATTR_CONTROL))
    assert state.check(headers) == APPEND


def test_state_rebuilt_after_reopen(tmp_path: Path, handles: FileHandleCache) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=400)  # a few batches per segment: rolls happen
    plog = PartitionLog.open(directory, "t", 0, config, handles)
    offsets = [append(plog, batch(seq, epoch=3)) for seq in range(0, 30, 3)]
    append(plog, batch(0, pid=55, epoch=1))
    assert len(plog.segments()) > 2
    end = plog.log_end_offset
    plog.close()

    plog = PartitionLog.open(directory, "t", 0, config, handles, clean=True)
    entry = plog.producers.get(PID)
    assert entry is not None and entry.epoch == 3 and entry.last_seq == 29
    assert append(plog, batch(27, epoch=3)) == offsets[-1]  # a retry after a restart
    assert plog.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceError):
        append(plog, batch(31, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        append(plog, batch(30, epoch=2))
    assert plog.producers.get(55).last_seq == 2
    assert append(plog, batch(30, epoch=3)) == end
    plog.close()

    # An unclean open (recovery from offset 0) rebuilds the same state.
    plog = PartitionLog.open(directory, "t", 0, config, handles, recovery_point=0)
    assert plog.producers.get(PID).last_seq == 32
    assert append(plog, batch(30, epoch=3)) == end
    plog.close()
