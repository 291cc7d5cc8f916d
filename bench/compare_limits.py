"""The machine's own limits for ``bench/compare``: disk with fdatasync, loopback TCP.

Owns:
  - ``dd if=/dev/zero of=F bs=1M count=N conv=fdatasync`` in a temp dir on the same
    disk as the brokers' data (one fdatasync at the end: the disk's streaming rate),
    and ``oflag=dsync`` (a sync after every 1 MB write: what fsync-per-batch costs);
    each run deletes its file, so the next one writes into page-cache memory just
    freed. The same fdatasync runs again with every file kept until the last run
    ends, as a log keeps what it writes: on this VM, memory the guest has not used
    lately costs several times more to write into (a third of the rate); and with
    ``oflag=direct`` (no page cache at all: the disk itself);
  - whether this VM hands freed memory back to its host (free page reporting), which
    is why new page-cache pages cost a host page fault here (``page_reporting``);
  - loopback TCP with ``iperf3`` (installed from Debian if missing) and with a
    Python sender/receiver pair (1 MiB ``sendall`` / ``recv_into``), the ceiling a
    Python broker's socket path can reach.
Does not own any broker workload or the table.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from compare_common import Figure, ensure_binary, free_port, spawn, stop, wait_port

_UNITS = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
_PAGE_REPORTING = Path("/sys/module/page_reporting/parameters")


def page_reporting() -> str | None:
    """One line on free page reporting, if this kernel does it: freed guest memory in
    blocks of 2**order pages goes back to the host (after min_free_ms), and the next
    first touch of it is a page fault in the host, so writing new data into the page
    cache is slow however it is written."""
    values = {}
    for name in ("page_reporting_order", "min_free_ms"):
        try:
            values[name] = (_PAGE_REPORTING / name).read_text().strip()
        except OSError:
            continue
    if "page_reporting_order" not in values:
        return None
    block_kib = 4 << int(values["page_reporting_order"])
    after = f" after {values['min_free_ms']} ms" if "min_free_ms" in values else ""
    return (
        f"this VM returns freed memory to its host in {block_kib:,} KiB blocks{after} "
        "(free page reporting): new page-cache pages are host page faults"
    )


def dd(tmp: Path, count: int, flag: str, timeout: float, keep: str = "") -> Figure:
    """One dd run; with ``keep`` its file stays (named after it) for the caller to
    delete."""
    target = tmp / f"dd-{flag.replace('=', '-')}{keep}"
    try:
        done = subprocess.run(
            ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={count}", flag],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except Exception as exc:  # noqa: BLE001 - report and carry on
        return Figure.na("MB/s", f"dd: {exc}"[:120])
    finally:
        if not keep:
            target.unlink(missing_ok=True)
    m = re.search(r"^(\d+) bytes .* copied, ([\d.]+) s", done.stderr, re.M)
    if not m:
        return Figure.na("MB/s", f"dd output not understood: {done.stderr.strip()[-80:]}")
    mb_s = int(m.group(1)) / float(m.group(2)) / 1e6
    return Figure(mb_s, "MB/s", f"dd bs=1M count={count} {flag}")


def iperf3(timeout: float, seconds: int = 3) -> Figure:
    binary = ensure_binary("iperf3", "iperf3")
    if not binary:
        return Figure.na("MB/s", "iperf3 not installable")
    port = free_port()
    # not "-1" (one client then exit): wait_port's probe would be that client
    server = spawn([binary, "-s", "-B", "127.0.0.1", "-p", str(port)])
    try:
        wait_port(port, server)
        done = subprocess.run(
            [binary, "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        bits = json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]
        return Figure(
            bits / 8 / 1e6, "MB/s", f"iperf3 {bits / 1e9:.1f} Gbit/s", {"Gbit/s": bits / 1e9}
        )
    except Exception as exc:  # noqa: BLE001
        return Figure.na("MB/s", f"iperf3: {exc}"[:120])
    finally:
        stop(server)


_RECEIVER = r"""
import socket, sys, time
total = int(sys.argv[1])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
buf = bytearray(1 << 20); view = memoryview(buf); got = 0; started = None
while got < total:
    n = conn.recv_into(view)
    if not n: break
    if started is None: started = time.perf_counter()
    got += n
print(got, time.perf_counter() - started, flush=True)
"""


def python_loopback(total: int, timeout: float) -> Figure:
    """A Python sender and receiver in two processes; MB/s seen by the receiver."""
    proc = spawn(
        [sys.executable, "-c", _RECEIVER, str(total)], log=None, stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(proc.stdout.readline())
        chunk = memoryview(b"\0" * (1 << 20))
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            sent = 0
            deadline = time.monotonic() + timeout
            while sent < total and time.monotonic() < deadline:
                s.sendall(chunk)
                sent += len(chunk)
        got, seconds = proc.stdout.readline().split()
        proc.wait(timeout)
        return Figure(
            int(got) / float(seconds) / 1e6, "MB/s", "Python sendall / recv_into, 1 MiB buffers"
        )
    except Exception as exc:  # noqa: BLE001
        return Figure.na("MB/s", f"python loopback: {exc}"[:120])
    finally:
        stop(proc, timeout=5)


def median_of(runs: list[Figure]) -> Figure:
    """The median run (by value) of several; a failed run if none succeeded."""
    good = sorted((f for f in runs if f.value is not None), key=lambda f: f.value)
    if not good:
        return runs[0]
    mid = good[len(good) // 2]
    if len(runs) > 1:
        mid.note += f", median of {len(runs)}: " + " / ".join(f"{f.value:.0f}" for f in good)
    return mid


def run(
    tmp: Path,
    dd_mib: int,
    dsync_mib: int,
    loop_bytes: int,
    timeout: float,
    dd_runs: int = 1,
    say=print,
) -> dict[str, Figure]:
    say("limits: dd conv=fdatasync")
    runs = [dd(tmp, dd_mib, "conv=fdatasync", timeout) for _ in range(dd_runs)]
    out = {"limit.dd.fdatasync": median_of(runs)}
    say("limits: dd conv=fdatasync, files kept")
    runs = [dd(tmp, dd_mib, "conv=fdatasync", timeout, keep=f"-kept{i}") for i in range(dd_runs)]
    for kept in tmp.glob("dd-*-kept*"):
        kept.unlink()
    out["limit.dd.fdatasync.kept"] = median_of(runs)
    say("limits: dd oflag=direct")
    runs = [dd(tmp, dd_mib, "oflag=direct", timeout) for _ in range(dd_runs)]
    out["limit.dd.direct"] = median_of(runs)
    say("limits: dd oflag=dsync")
    runs = [dd(tmp, dsync_mib, "oflag=dsync", timeout) for _ in range(dd_runs)]
    out["limit.dd.dsync"] = median_of(runs)
    say("limits: loopback TCP")
    out["limit.tcp.iperf3"] = iperf3(timeout)
    out["limit.tcp.python"] = python_loopback(loop_bytes, timeout)
    return out
