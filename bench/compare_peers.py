"""The peers of ``bench/compare``: Redis Streams and NATS JetStream, from Debian.

Owns: installing (apt) and starting each peer on a free port on 127.0.0.1 with its
data in a temp dir, the workloads run against it, and stopping it again.
  - Redis: ``redis-server`` with RDB saves off, AOF off and then AOF on with
    ``appendfsync everysec``; ``redis-benchmark -P 64`` runs ``XADD s * f <100 B>``
    (and 100-KB values); reads are ``XRANGE s - + COUNT 1000`` over the first
    1,000 entries, repeated (memory, not disk).
  - NATS: ``nats-server -js`` with file storage; nats-py publishes 100-B (and 100-KB)
    messages with core publish + flush into a stream, timed until the stream holds
    them all; an ordered push consumer (no acks, flow control) reads them back.
A peer that cannot be installed or fails gives ``Figure.na`` with the reason.
Does not own Strom's side, the machine limits or the table.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

from compare_common import Figure, ensure_binary, ensure_module, free_port, spawn, stop, wait_port


def _redis_benchmark(
    bench: str,
    port: int,
    n: int,
    pipeline: int,
    args: list[str],
    stdin: bytes | None,
    timeout: float,
) -> float:
    """requests/s that ``redis-benchmark --csv`` reports for one custom command."""
    cmd = [
        bench,
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-P",
        str(pipeline),
        "-n",
        str(n),
        "--csv",
        *(["-x"] if stdin is not None else []),
        *args,
    ]
    done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout, check=True)
    rows = [line for line in done.stdout.decode().splitlines() if line.startswith('"')]
    return float(rows[-1].split('","')[1])


def redis(tmp: Path, small: int, large: int, timeout: float, say=print) -> dict[str, Figure]:
    keys = [
        "redis.xadd.100B.aof_off",
        "redis.xadd.100B.aof_everysec",
        "redis.xrange.100B",
        "redis.xadd.100KB.aof_off",
        "redis.xadd.100KB.aof_everysec",
    ]
    server = ensure_binary("redis-server", "redis-server")
    bench = ensure_binary("redis-benchmark", "redis-tools")
    if not server or not bench:
        return {k: Figure.na("msg/s", "redis-server/redis-benchmark not installable") for k in keys}
    version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
    version = next((w[2:] for w in version.split() if w.startswith("v=")), "?")
    out: dict[str, Figure] = {}
    small_value = "v" * 100
    large_value = b"v" * 100_000
    for aof, appendonly in (("aof_off", "no"), ("aof_everysec", "yes")):
        data = tmp / f"redis-{aof}"
        data.mkdir()
        port = free_port()
        log = open(tmp / f"redis-{aof}.log", "wb")
        proc = spawn(
            [
                server,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                appendonly,
                "--appendfsync",
                "everysec",
                "--dir",
                str(data),
                "--daemonize",
                "no",
                "--protected-mode",
                "yes",
            ],
            log,
        )
        try:
            wait_port(port, proc)
            try:
                say(f"redis {aof}: XADD 100 B")
                rps = _redis_benchmark(
                    bench, port, small, 64, ["XADD", "s", "*", "f", small_value], None, timeout
                )
                out[f"redis.xadd.100B.{aof}"] = Figure(
                    rps,
                    "msg/s",
                    f"Redis {version}, -P 64, {small:,} XADD",
                    {"MB/s": rps * 100 / 1e6},
                )
            except Exception as exc:  # noqa: BLE001 - report and carry on
                out[f"redis.xadd.100B.{aof}"] = Figure.na("msg/s", f"redis-benchmark: {exc}")
            if aof == "aof_off":
                try:
                    say("redis: XRANGE COUNT 1000")
                    n = max(100, small // 1000)
                    rps = _redis_benchmark(
                        bench, port, n, 8, ["XRANGE", "s", "-", "+", "COUNT", "1000"], None, timeout
                    )
                    out["redis.xrange.100B"] = Figure(
                        rps * 1000,
                        "msg/s",
                        "XRANGE COUNT 1000, same 1,000 entries, -P 8",
                        {"MB/s": rps * 1000 * 100 / 1e6},
                    )
                except Exception as exc:  # noqa: BLE001
                    out["redis.xrange.100B"] = Figure.na("msg/s", f"redis-benchmark: {exc}")
            try:
                say(f"redis {aof}: XADD 100 KB")
                rps = _redis_benchmark(
                    bench, port, large, 16, ["XADD", "big", "*", "f"], large_value, timeout
                )
                out[f"redis.xadd.100KB.{aof}"] = Figure(
                    rps, "msg/s", f"-P 16, {large:,} XADD of 100 KB", {"MB/s": rps * 100_000 / 1e6}
                )
            except Exception as exc:  # noqa: BLE001
                out[f"redis.xadd.100KB.{aof}"] = Figure.na("msg/s", f"redis-benchmark: {exc}")
        except Exception as exc:  # noqa: BLE001
            for k in keys:
                if aof in k and k not in out:
                    out[k] = Figure.na("msg/s", f"redis-server: {exc}")
        finally:
            stop(proc)
            log.close()
    for k in keys:
        out.setdefault(k, Figure.na("msg/s", "not run"))
    return out


async def _nats_workload(
    url: str, small: int, large: int, timeout: float, say
) -> dict[str, Figure]:
    import nats
    from nats.js.api import StorageType, StreamConfig

    out: dict[str, Figure] = {}
    nc = await nats.connect(url, pending_size=8 * 1024 * 1024)
    try:
        js = nc.jetstream()

        async def publish(stream: str, count: int, size: int) -> float:
            await js.add_stream(
                StreamConfig(name=stream, subjects=[stream.lower()], storage=StorageType.FILE)
            )
            payload = b"x" * size
            subject = stream.lower()
            started = time.perf_counter()
            for _ in range(count):
                await nc.publish(subject, payload)
            await nc.flush(timeout=int(timeout))
            while (await js.stream_info(stream)).state.messages < count:
                if time.perf_counter() - started > timeout:
                    raise TimeoutError("stream did not store every message in time")
                await asyncio.sleep(0.005)
            return count / (time.perf_counter() - started)

        say("nats: publish 100 B")
        rate = await publish("SMALL", small, 100)
        out["nats.publish.100B"] = Figure(
            rate, "msg/s", f"{small:,} core publish + flush", {"MB/s": rate * 100 / 1e6}
        )

        say("nats: ordered consumer 100 B")
        got = 0
        done = asyncio.Event()

        async def on_msg(_msg) -> None:
            nonlocal got
            got += 1
            if got >= small:
                done.set()

        # an ordered push consumer: AckPolicy.NONE with flow control, so a Python
        # reader that falls behind is throttled rather than cut off as a slow consumer
        started = time.perf_counter()
        await js.subscribe(
            "small",
            cb=on_msg,
            ordered_consumer=True,
            pending_msgs_limit=4_000_000,
            pending_bytes_limit=2**31 - 1,
        )
        try:
            await asyncio.wait_for(done.wait(), timeout)
            rate = got / (time.perf_counter() - started)
            out["nats.consume.100B"] = Figure(
                rate,
                "msg/s",
                "ordered push consumer (no acks, flow control)",
                {"MB/s": rate * 100 / 1e6},
            )
        except TimeoutError:
            out["nats.consume.100B"] = Figure.na("msg/s", f"timed out ({got:,} of {small:,})")

        say("nats: publish 100 KB")
        rate = await publish("LARGE", large, 100_000)
        out["nats.publish.100KB"] = Figure(
            rate, "msg/s", f"{large:,} x 100 KB", {"MB/s": rate * 100_000 / 1e6}
        )
    finally:
        await nc.close()
    return out


def nats(tmp: Path, small: int, large: int, timeout: float, say=print) -> dict[str, Figure]:
    keys = ["nats.publish.100B", "nats.consume.100B", "nats.publish.100KB"]
    server = ensure_binary("nats-server", "nats-server")
    if not server:
        return {k: Figure.na("msg/s", "nats-server not installable") for k in keys}
    if not ensure_module("nats", "nats-py"):
        return {k: Figure.na("msg/s", "nats-py not installable") for k in keys}
    port = free_port()
    log = open(tmp / "nats.log", "wb")
    proc = spawn([server, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp / "nats")], log)
    out: dict[str, Figure] = {}
    try:
        wait_port(port, proc)
        out = asyncio.run(
            asyncio.wait_for(
                _nats_workload(f"nats://127.0.0.1:{port}", small, large, timeout, say), timeout * 3
            )
        )
    except Exception as exc:  # noqa: BLE001 - report and carry on
        reason = f"{type(exc).__name__}: {exc}"[:120]
        out = {k: Figure.na("msg/s", reason) for k in keys}
    finally:
        stop(proc)
        log.close()
    version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
    for k in keys:
        out.setdefault(k, Figure.na("msg/s", "not run"))
        if out[k].value is not None:
            out[k].note = f"NATS {version.split()[-1].lstrip('v')}, {out[k].note}"
    return out
