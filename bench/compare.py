"""Strom side by side with Redis Streams, NATS JetStream and the machine's limits.

Runs, one after another on this machine and bounded in time, the same workloads
against Strom (one confluent-kafka producer / consumer, tuned and with the client's
defaults), Redis Streams (``redis-benchmark`` XADD, AOF off, everysec and always) and
NATS JetStream (file storage, the NATS C client), plus the machine's limits (``dd``
with fdatasync, loopback TCP), then prints one table with the ratios Strom/peer and
Strom/limit. Like is put beside like: each row says what an acknowledged write
promises (no fsync, fsync within about a second, fsync before the acknowledgement),
and the notes under the table name every client and every setting that is not the
client's default; every system gets the same warm-up. Everything binds to
127.0.0.1; every process started is stopped, also on Ctrl-C or an error. A peer
that cannot be installed or fails shows "n/a" with the reason.

Usage: ./bench/compare [--quick] [--json PATH] [--markdown PATH] [--dir DIR]
       ./dev bench compare [same options]
Default run stays under ~8 minutes, --quick under ~3. Helpers: bench/compare_*.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare_limits  # noqa: E402
import compare_peers  # noqa: E402
import compare_strom  # noqa: E402
from compare_common import Figure, stop_all  # noqa: E402

# What an acknowledged write promises, per row (a single node: no replica to fall back on)
PAGE_CACHE = "in the broker's page cache: survives the broker's crash, not the machine's"
PROMISES = [
    f"Strom acks=1 / acks=all, no fsync (Kafka's default): {PAGE_CACHE}",
    "Redis AOF off: in Redis's memory only: lost if Redis crashes",
    "Strom log.flush.interval.ms=1000: in the page cache, fsynced once older than 1 s (the "
    "broker checks each second): a machine crash loses up to ~2 s",
    "Redis appendfsync everysec: written to the AOF before the reply, fsynced each second: "
    "a machine crash loses up to ~2 s",
    "Strom log.flush.interval.messages=1 / Redis appendfsync always: fsynced before the "
    "acknowledgement",
    "NATS JetStream publish: written to the server's file store before the acknowledgement, "
    "no fsync per write: survives the server's crash, not the machine's",
]

# (workload, Strom figure, unit shown, [(compared with, figure), ...])
ROWS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    (
        "produce 100 B, acks=1, 6 partitions, no fsync",
        "strom.produce.100B.acks1",
        "rec/s",
        [
            ("Redis XADD -P 64, AOF off", "redis.xadd.100B.aof_off"),
            ("NATS JetStream async publish (file), C client", "nats.publish.100B"),
        ],
    ),
    (
        "produce 100 B, acks=all, 6 partitions, no fsync",
        "strom.produce.100B.acksall",
        "rec/s",
        [
            ("Redis XADD -P 64, AOF off", "redis.xadd.100B.aof_off"),
            ("NATS JetStream async publish (file), C client", "nats.publish.100B"),
        ],
    ),
    (
        "produce 100 B, acks=all, log.flush.interval.ms=1000",
        "strom.produce.100B.flush1s",
        "rec/s",
        [("Redis XADD -P 64, AOF everysec", "redis.xadd.100B.aof_everysec")],
    ),
    (
        "produce 100 B, acks=all, fsync every write",
        "strom.produce.100B.fsync",
        "rec/s",
        [("Redis XADD -P 64, AOF always", "redis.xadd.100B.aof_always")],
    ),
    (
        "produce 100 B, client defaults (acks=all, no fsync)",
        "strom.produce.100B.defaults",
        "rec/s",
        [
            ("Redis XADD -P 64, AOF off", "redis.xadd.100B.aof_off"),
            ("NATS JetStream async publish (file), C client", "nats.publish.100B"),
        ],
    ),
    (
        "consume 100 B, one consumer",
        "strom.consume.100B",
        "rec/s",
        [
            ("NATS JetStream pull consumer, C client", "nats.consume.100B"),
            ("Redis XRANGE COUNT 1000 (memory)", "redis.xrange.100B"),
        ],
    ),
    (
        "consume 100 B, client defaults, poll()",
        "strom.consume.100B.defaults",
        "rec/s",
        [
            ("NATS JetStream pull consumer, C client", "nats.consume.100B"),
            ("Redis XRANGE COUNT 1000 (memory)", "redis.xrange.100B"),
        ],
    ),
    (
        "produce 100 KB records, acks=1, no fsync",
        "strom.produce.100KB",
        "MB/s",
        [
            ("Redis XADD 100 KB, AOF off", "redis.xadd.100KB.aof_off"),
            ("NATS JetStream async publish 100 KB, C client", "nats.publish.100KB"),
            ("limit: dd conv=fdatasync, files kept", "limit.dd.fdatasync.kept"),
            ("limit: loopback TCP, Python", "limit.tcp.python"),
        ],
    ),
    (
        "consume 100 KB records (page cache)",
        "strom.consume.100KB",
        "MB/s",
        [
            ("limit: loopback TCP, iperf3", "limit.tcp.iperf3"),
            ("limit: loopback TCP, Python", "limit.tcp.python"),
        ],
    ),
    (
        "produce ~1 MB batches, acks=all, fsync every write",
        "strom.produce.1MB.fsync",
        "MB/s",
        [
            ("limit: dd conv=fdatasync", "limit.dd.fdatasync"),
            ("limit: dd conv=fdatasync, files kept", "limit.dd.fdatasync.kept"),
            ("limit: dd oflag=direct (the disk, no page cache)", "limit.dd.direct"),
            ("limit: dd oflag=dsync (sync per 1 MB)", "limit.dd.dsync"),
        ],
    ),
]

SIZES = {
    # small: 100-B records; large: 100-KB records; synced: 100-KB records into the
    # fsync-every-write broker; synced_small: 100-B records there (and Redis's XADDs
    # with appendfsync always); dd/dsync in MiB; loop: bytes over loopback; step: s
    "full": {
        "small": 3_000_000,
        "large": 10_000,
        "synced": 5_000,
        "synced_small": 300_000,
        "dd": 1024,
        "dsync": 256,
        "dd_runs": 3,
        "loop": 8 << 30,
        "step": 90.0,
        "budget": 420.0,
    },
    "quick": {
        "small": 500_000,
        "large": 3_000,
        "synced": 1_000,
        "synced_small": 100_000,
        "dd": 512,
        "dsync": 128,
        "dd_runs": 1,
        "loop": 2 << 30,
        "step": 40.0,
        "budget": 160.0,
    },
}


def value_in(fig: Figure | None, unit: str) -> float | None:
    if fig is None or fig.value is None:
        return None
    if unit == "MB/s":
        return fig.value if fig.unit == "MB/s" else fig.extra.get("MB/s")
    return fig.value


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "MB/s":
        return f"{value:,.0f} MB/s"
    if value >= 1e6:
        return f"{value / 1e6:.2f} M/s"
    return f"{value / 1e3:,.0f} k/s"


def na_reason(fig: Figure | None) -> str:
    return "n/a (not run)" if fig is None else f"n/a ({fig.note})"


def table_rows(figs: dict[str, Figure]) -> list[list[str]]:
    rows = []
    for workload, strom_key, unit, others in ROWS:
        strom = value_in(figs.get(strom_key), unit)
        strom_text = fmt(strom, unit) if strom is not None else na_reason(figs.get(strom_key))
        if unit == "rec/s" and strom is not None:
            mb = figs[strom_key].extra.get("MB/s")
            strom_text += f" ({mb:,.0f} MB/s)" if mb else ""
        for i, (label, key) in enumerate(others):
            theirs = value_in(figs.get(key), unit)
            their_text = fmt(theirs, unit) if theirs is not None else na_reason(figs.get(key))
            ratio = f"{strom / theirs:.2f}x" if strom and theirs else "n/a"
            rows.append(
                [workload if i == 0 else "", strom_text if i == 0 else "", label, their_text, ratio]
            )
    return rows


HEADERS = ["workload", "Strom", "compared with", "their figure", "Strom / it"]


def print_table(rows: list[list[str]], title: str) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        widths = [max(len(r[i]) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
        for r in [HEADERS, *rows]:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        return
    table = Table(title=title, show_lines=False)
    for h in HEADERS:
        table.add_column(
            h, justify="right" if h in ("Strom", "their figure", "Strom / it") else "left"
        )
    for i, r in enumerate(rows):
        table.add_row(*r, end_section=i + 1 < len(rows) and rows[i + 1][0] != "")
    Console(width=160).print(table)


def markdown(rows: list[list[str]], title: str, notes: list[str]) -> str:
    lines = [title, "", "| " + " | ".join(HEADERS) + " |", "|---|---:|---|---:|---:|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def machine_title() -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
    ).stdout.strip()
    return (
        f"bench/compare, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Strom {commit or '?'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs, under ~3 minutes")
    parser.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    parser.add_argument(
        "--dir", metavar="DIR", help="where data goes (default: system temp dir; dd runs there too)"
    )
    parser.add_argument(
        "--only",
        default="limits,strom,redis,nats",
        help="comma-separated parts to run (default: all)",
    )
    args = parser.parse_args()
    size = SIZES["quick" if args.quick else "full"]
    parts = set(args.only.split(","))

    def on_term(signum, _frame):  # SIGTERM/SIGHUP: unwind through the finally blocks
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    started = time.monotonic()

    def say(msg: str) -> None:
        print(f"[{time.monotonic() - started:5.0f}s] {msg}", file=sys.stderr, flush=True)

    figs: dict[str, Figure] = {}
    step = size["step"]
    phases = [
        (
            "limits",
            lambda tmp: compare_limits.run(
                tmp, size["dd"], size["dsync"], size["loop"], step, size["dd_runs"], say
            ),
        ),
        (
            "strom",
            lambda tmp: compare_strom.run(
                tmp, size["small"], size["large"], size["synced"], step, say, size["synced_small"]
            ),
        ),
        (
            "redis",
            lambda tmp: compare_peers.redis(
                tmp, size["small"], size["large"], step, say, size["synced_small"]
            ),
        ),
        ("nats", lambda tmp: compare_peers.nats(tmp, size["small"], size["large"], step, say)),
    ]
    interrupted = False
    try:
        with tempfile.TemporaryDirectory(prefix="strom-compare-", dir=args.dir) as tmpdir:
            for name, phase in phases:
                if name not in parts:
                    continue
                if time.monotonic() - started > size["budget"]:
                    say(f"{name}: skipped, time budget spent")
                    continue
                tmp = Path(tmpdir) / name
                tmp.mkdir()
                try:
                    figs.update(phase(tmp))
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # noqa: BLE001 - a failed part is "n/a", not a crash
                    say(f"{name}: failed: {type(exc).__name__}: {exc}")
                    for _w, strom_key, unit, others in ROWS:
                        for key in [strom_key, *(k for _l, k in others)]:
                            if key.startswith(name) or (
                                name == "limits" and key.startswith("limit.")
                            ):
                                figs.setdefault(key, Figure.na(unit, f"{name} failed: {exc}"[:100]))
                finally:
                    stop_all()
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted; every started process is stopped")
    finally:
        stop_all()

    title = machine_title() + (" (--quick)" if args.quick else "")
    rows = table_rows(figs)
    print_table(rows, title)
    notes = sorted({f"{k}: {f.note}" for k, f in figs.items() if f.value is not None and f.note})
    notes[:0] = [
        f"every system first took a {compare_strom.WARMUP:,}-write warm-up of 100 B (not "
        "counted); Strom's figures count what the broker's end offsets show stored",
        *(f"an acknowledged write promises: {p}" for p in PROMISES),
    ]
    for note in notes:
        print(f"- {note}")
    memory = compare_limits.page_reporting()
    if memory:
        print(f"machine: {memory}")
        notes.insert(0, f"machine: {memory}")
    say(f"done in {time.monotonic() - started:.0f}s")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "title": title,
                    "machine": memory,
                    "seconds": time.monotonic() - started,
                    "figures": {
                        k: {"value": f.value, "unit": f.unit, "note": f.note, **f.extra}
                        for k, f in sorted(figs.items())
                    },
                },
                indent=2,
            )
            + "\n"
        )
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows, title, notes))
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
