"""Log cleaner figures: cleaner throughput for 100-byte records (storage level), and
produce throughput and p99 produce latency of a broker while its cleaner runs versus
while it is idle.

    ./dev bench cleaner [--records N] [--keys K] [--skip-broker] [--io-limit-mb MB]
    ./dev bench cleaner --neighbours

Each figure is taken twice: with the cleaner's I/O unlimited (Kafka's default) and with
log.cleaner.io.max.bytes.per.second set, the knob that trades cleaning speed for
produce latency on a machine where the cleaner shares the cores with the broker.

The latency comparison that matters is taken within one run, so that the machine's
drift between runs does not weigh on it: while the cleaner works, its worker process
is stopped and continued (SIGSTOP/SIGCONT) every half second, and each produce is
counted as "running" or "paused" by the window it was due to be sent in. Every sample
counts, those answered after the window switched too (how many did is printed), and a
latency runs from the record's scheduled send time, so a client that fell behind has
that counted (no coordinated omission). A failed delivery fails the run.

Produce throughput is what the broker stored (its end offsets, no delivery failed), not
what was handed to the client. The broker's own figures for its cleanings (records read
and kept, bytes, seconds, per partition) come from the line it logs at INFO for every
cleaning, read from its whole log file; the broker has no cleaner metric on its admin
listener yet. Every wait has a deadline (``--wait-seconds``).

``--neighbours`` runs the same comparison beside a broker whose cleaner is disabled,
with an idle-priority process in its place that only spins, only copies 64 MB
buffers, copies 1 MB buffers half of the time in 1 ms slices, or runs this file's
cleaner benchmark on its own (not through the broker): what the machine does to the
tail when anything works beside the broker. Last, the 64 MB copy runs on a CPU of its
own, with the broker and the client pinned to the other one.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_common import cpu_seconds  # noqa: E402

from strom.protocol.codecs import CODEC_NAMES  # noqa: E402
from strom.protocol.records import build_batch, validate_batches  # noqa: E402
from strom.storage import FileHandleCache, LogConfig, PartitionLog  # noqa: E402
from strom.storage.cleaner import UNLIMITED_IO, LogCleaner  # noqa: E402

BATCH = 500  # records per batch, like a busy producer's


def fill(plog: PartitionLog, records: int, keys: int, codec: int) -> None:
    value = b"v" * 90
    batches: dict[int, bytearray] = {}
    for start in range(0, records, BATCH):
        n = min(BATCH, records - start)
        k0 = start % keys
        if (k0, n) not in batches:
            pairs = [(b"key-%08d" % ((k0 + i) % keys), value) for i in range(n)]
            batches[(k0, n)] = bytearray(build_batch(pairs, base_timestamp=1, codec=codec))
        buf = bytearray(batches[(k0, n)])
        plog.append(buf, validate_batches(buf))


def cleaner_throughput(
    records: int, keys: int, codec_name: str, io_limit: float = UNLIMITED_IO
) -> float:
    codec = CODEC_NAMES[codec_name]
    with tempfile.TemporaryDirectory() as tmp:
        config = LogConfig(
            segment_bytes=32 << 20,
            cleanup_policy="compact",
            min_cleanable_dirty_ratio=0.0,
            file_delete_delay_ms=0,
        )
        plog = PartitionLog.open(Path(tmp) / "bench-0", "bench", 0, config, FileHandleCache(64))
        fill(plog, records, keys, codec)
        # A batch bigger than segment.bytes would be needed to roll; close the active
        # segment by rolling explicitly instead.
        plog._roll()  # noqa: SLF001 - benchmark setup only
        cleaner = LogCleaner(Path(tmp), lambda: [plog], io_max_bytes_per_second=io_limit)
        started = time.perf_counter()
        stats = cleaner.clean(plog)
        elapsed = time.perf_counter() - started
        assert stats is not None
        plog.close()
        rate = stats.records_read / elapsed
        limit = "" if io_limit >= UNLIMITED_IO else f", I/O limit {io_limit / 1e6:g} MB/s"
        print(
            f"cleaner, {codec_name:>4} batches of {BATCH}, 100 B records, {keys:,} keys{limit}: "
            f"{stats.records_read:,} records in {elapsed:.2f} s = {rate:,.0f} records/s "
            f"({stats.bytes_read / elapsed / 1e6:.0f} MB/s read, "
            f"{stats.records_kept:,} kept)"
        )
        return rate


WAIT_SECONDS = 300.0  # the longest any wait of this bench may take (--wait-seconds)


def _produce_rate(bootstrap: str, topic: str, records: int) -> float:
    """Records/s the broker stored (end offsets grown by ``records``, no failed delivery)."""
    from compare_strom import produce

    fig = produce(
        bootstrap, topic, records, 100, "1", WAIT_SECONDS, partitions=1, settings={"acks": "1"}
    )
    if fig.value is None:
        raise SystemExit(f"produce to {topic}: {fig.note}")
    return fig.value


def _produce_latency(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    latencies: list[float] = []
    failed: list[str] = []
    value = b"l" * 100

    def delivered(err, _msg, due: float) -> None:
        if err is None:
            latencies.append(time.perf_counter() - due)
        else:
            failed.append(str(err))

    started = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        due = started + i / rate
        while (now := time.perf_counter()) < due:
            producer.poll(min(due - now, 0.001))
        # timed from when it was due, not from when it went: lateness counts
        producer.produce(topic, value=value, on_delivery=lambda e, m, t=due: delivered(e, m, t))
        producer.poll(0)
    left = producer.flush(30)
    if failed or left or len(latencies) != n:
        raise SystemExit(
            f"latency run: {len(latencies):,} of {n:,} delivered, {len(failed):,} failed "
            f"({failed[0] if failed else 'none reported'}), {left:,} unanswered"
        )
    return sorted(latencies)


LATENCY_SECONDS = 6.0  # 12,000 samples at 2,000/s: p99 is the 120th slowest
INTERLEAVED_SECONDS = 12.0  # the running/paused run: 6 s of each


def _cleaner_worker(broker_pid: int) -> int | None:
    """The pid of the broker's cleaner worker (a spawned multiprocessing child)."""
    try:
        children = Path(f"/proc/{broker_pid}/task/{broker_pid}/children").read_text().split()
    except OSError:
        return None
    for pid in children:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command:
            return int(pid)
    return None


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    return ordered[max(0, int(len(ordered) * q) - 1)] * 1000


CLEANED = re.compile(
    r"(?P<topic>[\w.-]+)-(?P<partition>\d+): cleaned offsets up to (?P<end>\d+): "
    r"(?P<kept>\d+) of (?P<read>\d+) records kept, \d+ -> \d+ segments, "
    r"(?P<bytes_read>\d+) -> (?P<bytes_written>\d+) bytes in (?P<seconds>[\d.]+)s"
)


def _cleanings(broker, topic: str) -> list[dict[str, str]]:
    """Every cleaning of ``topic`` the broker logged, from its whole log file."""
    try:
        text = broker.log_path.read_text(errors="replace")
    except OSError:
        return []
    return [m.groupdict() for m in CLEANED.finditer(text) if m["topic"] == topic]


def _wait_cleaned(broker, topic: str, partitions: int) -> list[dict[str, str]]:
    """The cleanings once ``partitions`` partitions of ``topic`` have one; bounded."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        done = _cleanings(broker, topic)
        if len({c["partition"] for c in done}) >= partitions:
            return done
        if not broker.alive():
            raise SystemExit(f"the broker exited while {topic} was being cleaned")
        if time.monotonic() > deadline:
            cleaned = len({c["partition"] for c in done})
            raise SystemExit(
                f"{cleaned} of {partitions} partitions of {topic} cleaned after "
                f"{WAIT_SECONDS:.0f} s: given up"
            )
        time.sleep(0.05)


def _report_cleanings(done: list[dict[str, str]]) -> None:
    records = sum(int(c["read"]) for c in done)
    seconds = sum(float(c["seconds"]) for c in done)
    print(
        f"  the broker's cleanings (its log lines): {len(done)} over "
        f"{len({c['partition'] for c in done})} partitions, {records:,} records read, "
        f"{sum(int(c['kept']) for c in done):,} kept, "
        f"{sum(int(c['bytes_read']) for c in done) / 1e6:.0f} MB read, "
        f"{sum(int(c['bytes_written']) for c in done) / 1e6:.0f} MB written, "
        f"{seconds:.2f} s of cleaning = {records / seconds if seconds else float('nan'):,.0f} "
        "records/s"
    )


def _interleaved_latency(
    bootstrap: str,
    topic: str,
    worker: int,
    rate: int = 2000,
    seconds: float | None = None,
    label: str = "the cleaner",
) -> tuple[float, float]:
    """p99 of produce latency (ms) in windows with ``worker`` running and paused."""
    seconds = seconds or INTERLEAVED_SECONDS
    from confluent_kafka import Producer

    window = 0.5
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    value = b"i" * 100
    samples: dict[bool, list[float]] = {True: [], False: []}
    crossed = {True: 0, False: 0}  # answered after their window switched
    failed: list[str] = []
    switches = 0
    running = True
    busy_cpu = 0.0

    def delivered(err, due: float, switch: int, state: bool) -> None:
        # Every sample counts, in the window it was due in, from when it was due.
        if err is not None:
            failed.append(str(err))
            return
        samples[state].append(time.perf_counter() - due)
        if switch != switches:
            crossed[state] += 1

    producer.produce(topic, value=value)  # connect and learn the partition's leader
    if producer.flush(30):
        raise SystemExit("the first record of the interleaved run was not delivered in 30 s")
    started = switched_at = time.perf_counter()
    cpu_mark = cpu_seconds(worker)
    try:
        for i in range(int(rate * seconds)):
            due = started + i / rate
            while (now := time.perf_counter()) < due:
                producer.poll(min(due - now, 0.001))
            if now - switched_at >= window:
                if running:
                    busy_cpu += cpu_seconds(worker) - cpu_mark
                os.kill(worker, signal.SIGSTOP if running else signal.SIGCONT)
                running = not running
                cpu_mark = cpu_seconds(worker)
                switches += 1
                switched_at = time.perf_counter()
            producer.produce(
                topic,
                value=value,
                on_delivery=lambda e, _m, t=due, n=switches, r=running: delivered(e, t, n, r),
            )
            producer.poll(0)
        left = producer.flush(30)
    finally:
        os.kill(worker, signal.SIGCONT)
    if running:
        busy_cpu += cpu_seconds(worker) - cpu_mark
    on, off = samples[True], samples[False]
    sent = int(rate * seconds)
    if failed or left or len(on) + len(off) != sent:
        raise SystemExit(
            f"interleaved run: {len(on) + len(off):,} of {sent:,} delivered, {len(failed):,} "
            f"failed ({failed[0] if failed else 'none reported'}), {left:,} unanswered"
        )
    p99_on, p99_off = _percentile(on, 0.99), _percentile(off, 0.99)
    print(
        f"  interleaved, half-second windows: {label} running p50 {_percentile(on, 0.5):.2f} / "
        f"p99 {p99_on:.2f} ms ({len(on):,} samples, {crossed[True]:,} answered after the "
        f"switch), paused p50 {_percentile(off, 0.5):.2f} / p99 {p99_off:.2f} ms "
        f"({len(off):,} samples, {crossed[False]:,} after the switch): "
        f"p99 {p99_on / p99_off - 1:+.0%}; "
        f"{label} used {busy_cpu / (seconds / 2):.0%} of a core while running"
    )
    return p99_on, p99_off


def _measure(bootstrap: str, label: str, records: int) -> tuple[float, float]:
    rate = _produce_rate(bootstrap, "load", records)
    latencies = _produce_latency(bootstrap, "load", 2000, LATENCY_SECONDS)
    p99 = _percentile(latencies, 0.99)
    p50 = latencies[len(latencies) // 2] * 1000
    print(
        f"produce with the cleaner {label:<8}: {rate:>10,.0f} records/s (100 B, acks=1); "
        f"latency at 2,000/s p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    )
    return rate, p99


def broker_figures(records: int, keys: int, io_limit: float = UNLIMITED_IO) -> None:
    from broker_process import BrokerProcess
    from confluent_kafka import Producer
    from kafka_helpers import create_topic

    partitions = 6
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(
            Path(tmp) / "data",
            {
                "log.cleaner.enable": "false",
                "log.cleaner.backoff.ms": "100",
                "log.retention.check.interval.ms": "100",
                "log.cleaner.io.max.bytes.per.second": repr(io_limit),
            },
        )
        if io_limit < UNLIMITED_IO:
            print(f"broker with log.cleaner.io.max.bytes.per.second = {io_limit / 1e6:g} MB/s:")
        else:
            print("broker with the cleaner's I/O unlimited (the default):")
        broker.start()
        try:
            create_topic(
                broker.bootstrap,
                "compacted",
                partitions,
                {"cleanup.policy": "compact", "segment.bytes": str(8 << 20), "segment.ms": "1000"},
            )
            create_topic(broker.bootstrap, "load", 1)
            producer = Producer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "linger.ms": 20,
                    "batch.num.messages": 10000,
                }
            )
            value = b"v" * 90
            for i in range(records):
                while True:
                    try:
                        producer.produce(
                            "compacted",
                            key=b"key-%08d" % (i % keys),
                            value=value,
                            partition=i % partitions,
                        )
                        break
                    except BufferError:
                        producer.poll(0.01)
            if producer.flush(WAIT_SECONDS):
                raise SystemExit("the records to clean were not all delivered")
            time.sleep(1.1)  # segment.ms: the next record rolls, the rest becomes cleanable
            for p in range(partitions):
                producer.produce("compacted", key=b"roll", value=b"r", partition=p)
            if producer.flush(WAIT_SECONDS):
                raise SystemExit("the records that roll the segments were not delivered")
            idle = _measure(broker.bootstrap, "disabled", 300_000)
            broker.stop()
            broker.overrides["log.cleaner.enable"] = "true"
            broker.start()
            # The worker process starts with the first cleaning; measure during the
            # next ones (steady state: the worker stays up).
            _wait_cleaned(broker, "compacted", 1)
            assert broker.proc is not None
            worker = _cleaner_worker(broker.proc.pid)
            if worker is not None:
                _interleaved_latency(broker.bootstrap, "load", worker)
            else:
                print("  (no cleaner worker process found: no interleaved run)")
            before = len({c["partition"] for c in _cleanings(broker, "compacted")})
            busy = _measure(broker.bootstrap, "running", 300_000)
            after = len({c["partition"] for c in _cleanings(broker, "compacted")})
            print(
                f"  (partitions cleaned: {before} of {partitions} before the run, {after} after; "
                f"the cleaner was busy throughout: {after < partitions})"
            )
            _report_cleanings(_wait_cleaned(broker, "compacted", partitions))
            idle_again = _measure(broker.bootstrap, "idle", 300_000)
            for label, base in (("disabled", idle), ("idle", idle_again)):
                print(
                    f"running vs {label}: throughput {busy[0] / base[0] - 1:+.0%}, "
                    f"p99 latency {busy[1] / base[1] - 1:+.0%}"
                )
        finally:
            if broker.alive():
                broker.stop()


_IDLE_PRIORITY = "import os; os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
_MEMCPY_64MB = (
    "source, target = bytearray(64 << 20), bytearray(64 << 20)\nwhile True: target[:] = source"
)
NEIGHBOURS = {
    "a spin loop": "while True: pass",
    "a 64 MB memcpy loop": _MEMCPY_64MB,
    "1 MB memcpys for 1 ms of every 2": (
        "import time\nsource, target = bytearray(1 << 20), bytearray(1 << 20)\nwhile True:\n"
        "    end = time.perf_counter() + 0.001\n"
        "    while time.perf_counter() < end: target[:] = source\n"
        "    time.sleep(0.001)"
    ),
    "the cleaner's work on its own": (
        f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import cleaner\n"
        "while True: cleaner.cleaner_throughput(1_000_000, 10_000, 'none')"
    ),
}


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` onto ``cpus``."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(thread), cpus)
        except OSError:
            pass  # the thread ended meanwhile


def neighbour_figures() -> None:
    """Produce latency beside an idle-priority neighbour, running and paused: each
    neighbour free to run on any CPU, then the 64 MB memcpy on a CPU of its own (the
    broker and this client pinned to the other), which shows whether the neighbour
    slows the broker through the CPUs they share or through anything else."""
    import subprocess

    from broker_process import BrokerProcess
    from kafka_helpers import create_topic

    runs = [(label, code, False) for label, code in NEIGHBOURS.items()]
    if len(os.sched_getaffinity(0)) >= 2:
        runs.append(("a 64 MB memcpy loop", _MEMCPY_64MB, True))
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"log.cleaner.enable": "false"})
        broker.start()
        assert broker.proc is not None
        every_cpu = os.sched_getaffinity(0)
        try:
            create_topic(broker.bootstrap, "load", 1)
            for label, code, pinned in runs:
                where = "on a CPU of its own" if pinned else "on any CPU"
                print(f"broker with its cleaner disabled, beside {label} (SCHED_IDLE, {where}):")
                neighbour = subprocess.Popen(
                    [sys.executable, "-c", _IDLE_PRIORITY + code], stdout=subprocess.DEVNULL
                )
                try:
                    if pinned:
                        first, second = sorted(every_cpu)[:2]
                        _pin(neighbour.pid, {second})
                        _pin(broker.proc.pid, {first})
                        os.sched_setaffinity(0, {first})  # the client's threads follow
                    time.sleep(3)  # the cleaner's loop is filling its first log
                    _interleaved_latency(broker.bootstrap, "load", neighbour.pid, label=label)
                finally:
                    neighbour.kill()
                    neighbour.wait()
                    os.sched_setaffinity(0, every_cpu)
                    _pin(broker.proc.pid, every_cpu)
        finally:
            broker.stop()


def main() -> None:
    global WAIT_SECONDS, INTERLEAVED_SECONDS, LATENCY_SECONDS
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--skip-broker", action="store_true")
    parser.add_argument(
        "--neighbours",
        action="store_true",
        help="only the latency beside idle-priority neighbours (the machine's share)",
    )
    parser.add_argument(
        "--wait-seconds",
        type=float,
        default=WAIT_SECONDS,
        help="deadline of every wait (cleanings, deliveries)",
    )
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=INTERLEAVED_SECONDS,
        help="length of the interleaved run (each plain latency run takes half of it)",
    )
    parser.add_argument(
        "--io-limit-mb",
        type=float,
        default=80.0,
        help="log.cleaner.io.max.bytes.per.second (MB/s) for the throttled runs",
    )
    args = parser.parse_args()
    WAIT_SECONDS, INTERLEAVED_SECONDS = args.wait_seconds, args.latency_seconds
    LATENCY_SECONDS = args.latency_seconds / 2
    if args.neighbours:
        neighbour_figures()
        return
    io_limit = args.io_limit_mb * 1e6
    for codec in ("none", "lz4", "zstd"):
        cleaner_throughput(args.records, args.keys, codec)
    cleaner_throughput(args.records, args.keys, "none", io_limit)
    if not args.skip_broker:
        broker_figures(args.records * 6, args.keys)
        broker_figures(args.records * 6, args.keys, io_limit)


if __name__ == "__main__":
    main()
