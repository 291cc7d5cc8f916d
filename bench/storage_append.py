"""Storage throughput: append and sequential read on one PartitionLog.

Appends batches of 1,000 records of 100 B (built once with build_batch and reused;
each append copies the bytes into a fresh bytearray as a produce request would),
then reads the whole log back sequentially with 1 MiB reads and checks every batch's
CRC32C, as a consumer with ``check.crcs`` does: that reads every byte the figure counts
(the pages behind the memory-mapped views included). The CRC's own cost, timed on the
same number of in-memory batches, is printed beside it. The data was just written, so
the read comes from the page cache, not the disk. Prints MB/s and records/s. No fsync
(flush.messages/flush.ms unset, Kafka's default) except one
final flush that is timed separately.

    .venv/bin/python bench/storage_append.py [--mb 1024] [--records 1000] [--dir PATH]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from pathlib import Path

from strom.protocol.records import build_batch, crc_ok, iter_headers, validate_batches
from strom.storage import FileHandleCache, LogConfig, PartitionLog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="data to append (MiB)")
    parser.add_argument("--records", type=int, default=1000, help="records per batch")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--segment-mb", type=int, default=256)
    parser.add_argument("--read-bytes", type=int, default=1 << 20)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    parser.add_argument("--max-seconds", type=float, default=12.0, help="cap on the append phase")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    template = build_batch(
        [(None, b"x" * args.value_size)] * args.records, base_timestamp=int(time.time() * 1000)
    )
    batch_size = len(template)
    n_batches = max(1, (args.mb << 20) // batch_size)
    root = Path(tempfile.mkdtemp(prefix="strom-bench-", dir=args.dir))
    try:
        handles = FileHandleCache(64)
        config = LogConfig(segment_bytes=args.segment_mb << 20)
        plog = PartitionLog.open(root / "bench-0", "bench", 0, config, handles)

        started = time.perf_counter()
        done = 0
        for done in range(1, n_batches + 1):
            buf = bytearray(template)
            plog.append(buf, validate_batches(buf))
            if done % 256 == 0 and time.perf_counter() - started > args.max_seconds:
                break
        append_s = time.perf_counter() - started
        flush_started = time.perf_counter()
        plog.flush()
        flush_s = time.perf_counter() - flush_started
        total = plog.size_bytes
        records = plog.log_end_offset
        report("append (incl. validate_batches)", total, records, append_s)
        print(
            f"  final flush of {total / 1e6:.0f} MB: {flush_s:.2f} s, "
            f"{len(plog.segments())} segments"
        )

        started = time.perf_counter()
        for _ in range(done):
            validate_batches(bytearray(template))
        validate_s = time.perf_counter() - started
        print(f"  of which copy + validate_batches (CRC32C) alone: {validate_s:.2f} s")

        started = time.perf_counter()
        offset, read_bytes, reads = 0, 0, 0
        end = plog.log_end_offset
        while offset < end:
            data = plog.read(offset, args.read_bytes, upper_bound=plog.high_watermark)
            reads += 1
            read_bytes += len(data)
            last = None
            for last in iter_headers(data):
                if not crc_ok(data, last):  # reads every byte of the batch after its CRC
                    raise SystemExit(f"CRC32C mismatch in the batch at offset {last.base_offset}")
            assert last is not None
            offset = last.next_offset
        read_s = time.perf_counter() - started
        if read_bytes != total:
            raise SystemExit(f"read back {read_bytes:,} bytes of the {total:,} appended")
        report(
            f"sequential read + CRC32C of every batch ({args.read_bytes >> 10} KiB reads, "
            f"{reads} reads, page cache)",
            read_bytes,
            end,
            read_s,
        )
        header = next(iter_headers(template))
        started = time.perf_counter()
        for _ in range(done):
            crc_ok(template, header)
        crc_s = time.perf_counter() - started
        print(f"  of which CRC32C of as many batches in memory alone: {crc_s:.2f} s")
        plog.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(what: str, nbytes: int, records: int, seconds: float) -> None:
    print(
        f"{what}: {nbytes / 1e6:.0f} MB, {records:,} records in {seconds:.2f} s -> "
        f"{nbytes / 1e6 / seconds:,.0f} MB/s, {records / seconds:,.0f} records/s"
    )


if __name__ == "__main__":
    main()
