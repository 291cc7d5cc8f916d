"""Large records: 100-KB produce and consume, with where the CPU goes.

Owns the large-record figures of issue 3 in one focused run: one confluent-kafka
producer writes ``--count`` records of ``--size`` bytes (acks=1, 1 MB batches) to a
6-partition topic, then one consumer reads them back twice (the second read is
from page cache). Besides MB/s it prints the CPU each side used, as a share of one
core and as core-seconds per GB moved, so a run on a shared or small machine still
shows which side is the bound. Before and after the produce it writes as much new
data with a bare loop of 1 MiB ``pwrite`` calls into a new file, kept to the end: the
rate this machine gives any writer of new data, beside which the produce figure is to
be read. (Whichever writes first in a run made just after another may reuse memory
the last run freed, and be faster for it.)

    ./dev bench large_records [--count 20000] [--size 100000]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_common import cpu_seconds  # noqa: E402
from compare_strom import consume, produce  # noqa: E402
from produce_consume import create  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def new_file_write_rate(path: Path, total: int) -> float:
    """MB/s of a bare loop of 1 MiB ``pwrite`` calls into a new file of ``total`` bytes:
    what any writer of new data gets from this machine's page cache. The file is kept
    until the run ends, as a log keeps what it writes."""
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started, written = time.perf_counter(), 0
        while written < total:
            written += os.pwrite(fd, chunk, written)
        return written / (time.perf_counter() - started) / 1e6
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-large-") as tmp:
        total = args.count * args.size
        gigabytes = total / 1e9

        def machine_rate(when: str) -> None:
            rate = new_file_write_rate(Path(tmp) / when, total)
            print(f"machine: 1 MiB pwrites into a new file {rate:7.0f} MB/s ({when})", flush=True)

        machine_rate("before")
        broker = BrokerProcess(Path(tmp) / "strom", {"log.segment.bytes": "268435456"})
        broker.start()
        try:
            create(broker.bootstrap, "large", 6)
            pid = broker.proc.pid
            for phase in ("produce", "consume", "consume (cached)"):
                b0, c0, t0 = cpu_seconds(pid), own_cpu(), time.perf_counter()
                if phase == "produce":
                    figure = produce(broker.bootstrap, "large", args.count, args.size, "1", 300)
                else:
                    figure = consume(broker.bootstrap, "large", args.count, 6, 300)
                elapsed = time.perf_counter() - t0
                b_cpu, c_cpu = cpu_seconds(pid) - b0, own_cpu() - c0
                mb_s = figure.extra.get("MB/s", float("nan")) if figure.extra else float("nan")
                print(
                    f"{phase:17} {mb_s:7.0f} MB/s   broker {100 * b_cpu / elapsed:3.0f}% of a core"
                    f" ({b_cpu / gigabytes:.2f} core-s/GB)   client {100 * c_cpu / elapsed:3.0f}%"
                    f" ({c_cpu / gigabytes:.2f} core-s/GB)",
                    flush=True,
                )
                if phase == "produce":
                    machine_rate("after")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
