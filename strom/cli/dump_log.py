"""``strom dump-log --files F,...``: print what a segment's files hold, as kafka-dump-log.sh.

Works on the local disk, like ``strom storage``: no broker is needed (stop it or copy
the files first for a consistent view). For a ``.log`` file, one line per batch in
Kafka's shape: base and last offset, record count, base and last sequence, producer
id and epoch, partition leader epoch, transactional and control flags, position,
CreateTime (or LogAppendTime: the batch's max timestamp), size, magic, codec, CRC and
whether the CRC is valid. ``--deep-iteration`` adds a ``|`` line per record (offset,
timestamp, key and value sizes, sequence, header keys; a control record's marker);
``--print-data-log`` (implies it) adds the key and the payload as UTF-8 text. Bytes at
the end that do not make a whole batch are reported as Kafka reports them. For a
``.index``, ``offset: O position: P`` per entry; for a ``.timeindex``,
``timestamp: T offset: O``; offsets absolute (the segment's base offset, from the file
name, added). Batches and records are read with ``strom.protocol.records``, the index
files with ``strom.storage.index``, so this shows what the broker itself reads.
A file that is missing or of another kind is one line and exit code 2 (Kafka skips
unknown files; a typo should not pass silently).
"""

from __future__ import annotations

import argparse
import mmap
import os
from collections.abc import Iterator
from typing import Any

from strom.cli.common import ToolError
from strom.protocol.codecs import CODEC_NAMES
from strom.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchHeader,
    CorruptBatchError,
    crc_ok,
    decode_records,
    read_control_record,
    read_header,
)
from strom.storage.handles import FileHandleCache
from strom.storage.index import OffsetIndex, TimeIndex

SUFFIXES = (".log", ".index", ".timeindex")
_CODEC_NAMES = {
    code: name for name, code in reversed(list(CODEC_NAMES.items())) if name != "uncompressed"
}
_MARKERS = {CONTROL_ABORT: "ABORT", CONTROL_COMMIT: "COMMIT"}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "dump-log",
        help="print the batches, records and index entries of segment files (kafka-dump-log.sh)",
        description="Decode .log, .index and .timeindex files of a partition directory.",
    )
    parser.add_argument(
        "--files", required=True, metavar="F1,F2", help="comma-separated segment files"
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="a line per record, not only per batch"
    )
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print the records' keys and payloads (implies --deep-iteration)",
    )
    parser.set_defaults(run=run, parser=parser)


def base_offset_of(path: str) -> int:
    """The segment's base offset: its file name is the 20-digit offset."""
    stem = os.path.basename(path).split(".", 1)[0]
    if not stem.isdigit():
        raise ValueError(f"{path}: the name is not a segment's base offset")
    return int(stem)


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _sequence(base: int, delta: int) -> int:
    return -1 if base < 0 else (base + delta) & 0x7FFFFFFF


def batch_line(header: BatchHeader, valid: bool) -> str:
    time_kind = "LogAppendTime" if header.attributes & ATTR_TIMESTAMP_TYPE else "CreateTime"
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {_sequence(header.base_sequence, header.last_offset_delta)} "
        f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {str(header.is_transactional).lower()} "
        f"isControl: {str(header.is_control).lower()} position: {header.position} "
        f"{time_kind}: {header.max_timestamp} size: {header.size} magic: {header.magic} "
        f"compresscodec: {_CODEC_NAMES.get(header.codec, header.codec)} crc: {header.crc} "
        f"isvalid: {str(valid).lower()}"
    )


def record_lines(buf: Any, header: BatchHeader, print_data: bool) -> Iterator[str]:
    time_kind = "LogAppendTime" if header.attributes & ATTR_TIMESTAMP_TYPE else "CreateTime"
    control = read_control_record(buf, header) if header.is_control else None
    for record in decode_records(buf, header):
        timestamp = header.max_timestamp if time_kind == "LogAppendTime" else record.timestamp
        line = (
            f"| offset: {record.offset} {time_kind}: {timestamp} "
            f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
            f"sequence: {_sequence(header.base_sequence, record.offset - header.base_offset)} "
            f"headerKeys: [{','.join(key for key, _value in record.headers)}]"
        )
        if control is not None:
            kind, epoch = control
            marker = _MARKERS.get(kind)
            line += (
                f" endTxnMarker: {marker} coordinatorEpoch: {epoch}"
                if marker
                else f" controlType: {kind}"
            )
        elif print_data:
            line += f" key: {_text(record.key)} payload: {_text(record.value)}"
        yield line


def dump_segment(path: str, deep: bool, print_data: bool) -> Iterator[str]:
    yield f"Log starting offset: {base_offset_of(path)}"
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            position = 0
            while position < size:
                try:
                    header = read_header(buf, position)
                except CorruptBatchError:
                    break
                valid = crc_ok(buf, header)
                yield batch_line(header, valid)
                if deep and valid:
                    try:
                        yield from record_lines(buf, header, print_data)
                    except (CorruptBatchError, ValueError) as exc:
                        yield f"| cannot read the records of this batch: {exc}"
                position += header.size
            if position < size:
                name = os.path.basename(path)
                yield f"Found {size - position} invalid bytes at the end of {name}"


def dump_offset_index(path: str) -> Iterator[str]:
    base = base_offset_of(path)
    index = OffsetIndex.load(path, FileHandleCache(2))
    if index is None:
        raise ToolError(f"{path}: not an offset index (its size is not a multiple of 8 bytes)")
    for relative, position in zip(index.rel, index.pos, strict=True):
        yield f"offset: {base + relative} position: {position}"


def dump_time_index(path: str) -> Iterator[str]:
    base = base_offset_of(path)
    index = TimeIndex.load(path, FileHandleCache(2))
    if index is None:
        raise ToolError(f"{path}: not a time index (its size is not a multiple of 12 bytes)")
    for timestamp, relative in zip(index.ts, index.rel, strict=True):
        yield f"timestamp: {timestamp} offset: {base + relative}"


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    files = [f.strip() for f in args.files.split(",") if f.strip()]
    if not files:
        parser.error("--files needs at least one file")
    for path in files:
        if not path.endswith(SUFFIXES):
            parser.error(f"{path}: not a .log, .index or .timeindex file")
        if not os.path.isfile(path):
            parser.error(f"{path}: no such file")
        try:
            base_offset_of(path)
        except ValueError as exc:
            parser.error(str(exc))
    deep = args.deep_iteration or args.print_data_log
    for path in files:
        print(f"Dumping {path}")
        if path.endswith(".log"):
            lines = dump_segment(path, deep, args.print_data_log)
        elif path.endswith(".timeindex"):
            lines = dump_time_index(path)
        else:
            lines = dump_offset_index(path)
        try:
            for line in lines:
                print(line)
        except OSError as exc:
            raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None
    return 0
