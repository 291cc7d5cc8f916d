"""Large reads are views of memory mappings of segment files; a log cut short while a
response still holds such a view must not let the view touch pages past the file's
new end (SIGBUS would kill the broker), and the view keeps the bytes it had (Kafka's
semantics: a response already built is sent as it was).

Scenarios that touch a view after a cut run in a fresh interpreter, so that a SIGBUS
kills the child (returncode -7) and fails the test instead of killing pytest.
Real files throughout; expected bytes come from the batches appended, not the code."""

from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.protocol.records import build_batch, validate_batches
from strom.storage import FileHandleCache, LogConfig, PartitionLog
from strom.storage.segment import MAPPED_READ_BYTES, LogSegment

BATCHES = 48
RECORDS_PER_BATCH = 4
VALUE_BYTES = 16 << 10  # 48 batches of about 64 KiB: about 3 MiB in one segment
INTERVAL = LogConfig().index_interval_bytes
VIEW_CHANGED = 3  # the child's exit status when a view's bytes changed

Views = list[tuple[memoryview, bytes]]  # each view with its bytes before the cut


def make_batch(index: int) -> bytearray:
    """A batch whose values name it, so that bytes from a wrong place never compare equal."""
    value = (b"batch-%06d:" % index) * (VALUE_BYTES // 13)
    return bytearray(
        build_batch(
            [(b"k%d" % record, value) for record in range(RECORDS_PER_BATCH)],
            base_timestamp=int(time.time() * 1000),  # no roll by segment.ms
        )
    )


def fill(plog: PartitionLog, count: int = BATCHES, first: int = 0) -> list[bytes]:
    """Append ``count`` batches; returns each one's bytes as stored (offsets patched)."""
    stored = []
    for index in range(first, first + count):
        buf = make_batch(index)
        plog.append(buf, validate_batches(buf), leader_epoch=0)
        stored.append(bytes(buf))
    return stored


def fill_segment(segment: LogSegment, count: int) -> list[bytes]:
    buffers = [make_batch(index) for index in range(count)]
    data = bytearray(b"".join(buffers))
    headers = validate_batches(data)
    offset = segment.base_offset
    for header in headers:  # offsets in sequence, as a partition log assigns them
        data[header.position : header.position + 8] = offset.to_bytes(8, "big")
        offset += RECORDS_PER_BATCH
    headers = validate_batches(data)
    segment.append(data, headers, INTERVAL, 0)
    return [bytes(data[h.position : h.position + h.size]) for h in headers]


def open_log(directory: Path, handles: FileHandleCache) -> PartitionLog:
    return PartitionLog.open(directory, "events", 0, LogConfig(), handles)


def log_file(directory: Path) -> Path:
    (path,) = directory.glob("*.log")
    return path


def mapped_view(data: bytes | memoryview) -> memoryview:
    assert isinstance(data, memoryview) and isinstance(data.obj, mmap.mmap), type(data)
    assert len(data) >= MAPPED_READ_BYTES
    return data


# -- a view read after a cut: in a child interpreter -----------------------------------


def one_view_then_truncate(directory: Path) -> Views:
    plog = open_log(directory, FileHandleCache())
    fill(plog)
    view = mapped_view(plog.read(0, 2 * MAPPED_READ_BYTES))
    views = [(view, bytes(view))]
    plog.truncate_to(2 * RECORDS_PER_BATCH)
    assert plog.log_end_offset == 2 * RECORDS_PER_BATCH
    return views


def views_of_old_and_new_mappings_then_truncate(directory: Path) -> Views:
    """A view of a shorter mapping a longer one replaced in the cache, and one of that."""
    plog = open_log(directory, FileHandleCache())
    fill(plog, 24)
    old_view = mapped_view(plog.read(0, 2 * MAPPED_READ_BYTES))
    fill(plog, 24, first=24)
    new_view = mapped_view(plog.read(20 * RECORDS_PER_BATCH, 2 * MAPPED_READ_BYTES))
    assert new_view.obj is not old_view.obj
    assert len(new_view.obj) > len(old_view.obj)  # type: ignore[arg-type]
    views = [(old_view, bytes(old_view)), (new_view, bytes(new_view))]
    plog.truncate_to(RECORDS_PER_BATCH)
    assert plog.log_end_offset == RECORDS_PER_BATCH
    return views


def segment_recreated_at_its_base(directory: Path) -> Views:
    """LogSegment.create empties a file left at its base."""
    directory.mkdir()
    handles = FileHandleCache()
    segment = LogSegment.create(directory, 0, handles)
    fill_segment(segment, BATCHES)
    view = mapped_view(segment.read(0, 2 * MAPPED_READ_BYTES, None, True, INTERVAL)[0])
    views = [(view, bytes(view))]
    fresh = LogSegment.create(directory, 0, handles)
    assert fresh.size == 0 and os.path.getsize(fresh.log_path) == 0
    return views


def recovery_cuts_a_corrupt_batch(directory: Path) -> Views:
    """Recovery cuts the log file at the first batch whose CRC fails."""
    directory.mkdir()
    handles = FileHandleCache()
    segment = LogSegment.create(directory, 0, handles)
    stored = fill_segment(segment, BATCHES)
    view = mapped_view(segment.read(0, 3 * MAPPED_READ_BYTES, None, True, INTERVAL)[0])
    corrupt_at = len(b"".join(stored[:3])) + 100  # inside the 4th batch's records
    with open(segment.log_path, "r+b") as f:
        f.seek(corrupt_at)
        f.write(b"\xff")
    views = [(view, bytes(view))]  # the view shares the page cache: it sees the flip
    cut = segment.recover(INTERVAL, verify=True)
    assert cut == len(b"".join(stored[3:]))
    assert os.path.getsize(segment.log_path) == len(b"".join(stored[:3]))
    return views


CHILD_SCENARIOS: dict[str, Callable[[Path], Views]] = {
    scenario.__name__: scenario
    for scenario in (
        one_view_then_truncate,
        views_of_old_and_new_mappings_then_truncate,
        segment_recreated_at_its_base,
        recovery_cuts_a_corrupt_batch,
    )
}


def run_in_child(name: str, directory: str) -> None:
    """The child's body: run the scenario, then read every byte of every view."""
    for view, before in CHILD_SCENARIOS[name](Path(directory)):
        if bytes(view) != before:
            sys.exit(VIEW_CHANGED)
    sys.exit(0)


@pytest.mark.parametrize("scenario", sorted(CHILD_SCENARIOS))
def test_a_view_outlives_a_cut_of_its_file(tmp_path: Path, scenario: str) -> None:
    here = str(Path(__file__).resolve().parent)
    script = (
        "import sys\n"
        f"sys.path.insert(0, {here!r})\n"
        "from test_storage_mapped_reads import run_in_child\n"
        "run_in_child(sys.argv[1], sys.argv[2])\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", script, scenario, str(tmp_path / "p")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode != -signal.SIGBUS, "SIGBUS reading a view: the broker would die"
    assert child.returncode != VIEW_CHANGED, "a view's bytes changed with the cut"
    assert child.returncode == 0, child.stderr


# -- what the log shows after a truncation with a live view ------------------------


def test_truncation_with_a_live_view_leaves_a_truncated_log_everywhere(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    plog = open_log(directory, FileHandleCache())
    stored = fill(plog)
    old_inode = os.stat(log_file(directory)).st_ino
    view = mapped_view(plog.read(0, 2 * MAPPED_READ_BYTES))  # never touched after the cut

    keep = 30  # batches kept: more than MAPPED_READ_BYTES, so the new file is mapped too
    cut = keep * RECORDS_PER_BATCH
    plog.truncate_to(cut + 1)  # inside batch ``keep``: that batch goes too
    expected = b"".join(stored[:keep])
    assert len(expected) > MAPPED_READ_BYTES

    # The log's own answers.
    assert plog.log_end_offset == cut
    assert plog.high_watermark == cut
    assert bytes(plog.read(0, 1 << 30)) == expected
    assert bytes(mapped_view(plog.read(0, 2 * MAPPED_READ_BYTES))) == expected[: 2 << 20]
    middle = 17
    assert bytes(plog.read(middle * RECORDS_PER_BATCH + 2, 1 << 30)) == b"".join(
        stored[middle:keep]
    )

    # The file on disk: a new inode holding the kept prefix, no temporary file left.
    path = log_file(directory)
    assert path.read_bytes() == expected
    assert os.stat(path).st_ino != old_inode
    assert [p.name for p in directory.iterdir() if p.name.endswith(".tmp")] == []

    # Appends go to the new file.
    more = fill(plog, 2, first=100)
    assert plog.log_end_offset == cut + 2 * RECORDS_PER_BATCH
    assert path.read_bytes() == expected + b"".join(more)
    plog.flush()

    # A reopen (as after a crash: the first log is not closed) recovers the same log,
    # its indexes agreeing with the file.
    reopened = open_log(directory, FileHandleCache())
    assert reopened.log_end_offset == cut + 2 * RECORDS_PER_BATCH
    assert bytes(reopened.read(0, 1 << 30)) == expected + b"".join(more)
    assert bytes(reopened.read(middle * RECORDS_PER_BATCH, 1 << 30)) == b"".join(
        stored[middle:keep] + more
    )
    assert len(view) >= MAPPED_READ_BYTES  # the view lived through all of it
    view.release()


def test_truncation_without_a_live_view_cuts_the_file_in_place(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    plog = open_log(directory, FileHandleCache())
    stored = fill(plog)
    path = log_file(directory)
    inode = os.stat(path).st_ino
    mapped_view(plog.read(0, 2 * MAPPED_READ_BYTES)).release()  # the cache keeps the mapping

    plog.truncate_to(2 * RECORDS_PER_BATCH)
    assert os.stat(path).st_ino == inode
    assert path.read_bytes() == b"".join(stored[:2])
    assert bytes(plog.read(0, 1 << 30)) == b"".join(stored[:2])

    # Again after refilling: the cut file's mapping was closed and a new one made; with
    # its view gone, the next cut is in place too.
    stored = stored[:2] + fill(plog, 30, first=2)
    view = mapped_view(plog.read(0, 2 * MAPPED_READ_BYTES))
    assert bytes(view) == b"".join(stored)[: len(view)]
    view.release()
    plog.truncate_to(RECORDS_PER_BATCH)
    assert os.stat(path).st_ino == inode
    assert path.read_bytes() == stored[0]
    assert bytes(plog.read(0, 1 << 30)) == stored[0]


def test_a_view_of_another_file_at_the_path_does_not_stop_an_in_place_cut(
    tmp_path: Path,
) -> None:
    """Once a cut replaced the file, views of the old one do not hold back the new one."""
    directory = tmp_path / "p"
    plog = open_log(directory, FileHandleCache())
    stored = fill(plog)
    path = log_file(directory)
    old_view = mapped_view(plog.read(0, 2 * MAPPED_READ_BYTES))
    plog.truncate_to(30 * RECORDS_PER_BATCH)  # replaced: old_view lives on
    inode = os.stat(path).st_ino
    plog.truncate_to(10 * RECORDS_PER_BATCH)  # no view of this file: in place
    assert os.stat(path).st_ino == inode
    assert path.read_bytes() == b"".join(stored[:10])
    assert len(old_view) >= MAPPED_READ_BYTES
    old_view.release()
