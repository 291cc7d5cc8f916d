"""The peers of ``bench/compare``: Redis Streams and NATS JetStream, from Debian.

Owns: installing (apt) and starting each peer on a free port on 127.0.0.1 with its
data in a temp dir, the workloads run against it, and stopping it again. Each peer
gets the warm-up Strom gets (50,000 writes of 100 B, not counted), and every figure's
note names the client and the settings it ran with.
  - Redis: ``redis-server`` with RDB saves off: AOF off, AOF with ``appendfsync
    everysec``, and AOF with ``appendfsync always`` (fsync before the reply);
    ``redis-benchmark -P 64`` (its 50 connections) runs ``XADD s * f <100 B>`` (and
    100-KB values), and ``XLEN`` then checks the stream holds every entry; reads are
    ``XRANGE s - + COUNT 1000`` over the first 1,000 entries, repeated (memory, not disk).
  - NATS: ``nats-server -js`` with file storage, driven by the NATS C client (Debian's
    libnats, ``bench/nats_bench.c`` compiled here), native and asynchronous as
    librdkafka is: ``js_PublishAsync`` with 16,000 publishes in flight, each counted
    once the server acknowledged it stored, the stream's length checked; a pull
    consumer fetches 10,000 messages a request and acks the last of each. (nats-py, one
    awaited publish and one Python callback per message, measured the Python client,
    not NATS, and is no longer used.)
A peer that cannot be installed or fails gives ``Figure.na`` with the reason.
Does not own Strom's side, the machine limits or the table.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from compare_common import Figure, ensure_binary, free_port, spawn, stop, wait_port


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


def _redis_len(cli: str | None, port: int, key: str) -> int | None:
    """XLEN of ``key`` (None without redis-cli): what the server holds, not what it answered."""
    if not cli:
        return None
    done = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(port), "XLEN", key],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(done.stdout.strip())


# (figure suffix, appendonly, appendfsync): what each promises is in bench/compare.py
REDIS_CONFIGS = (("aof_off", "no", "everysec"), ("aof_everysec", "yes", "everysec"))
REDIS_ALWAYS = ("aof_always", "yes", "always")


def redis(
    tmp: Path,
    small: int,
    large: int,
    timeout: float,
    say=print,
    synced_small: int | None = None,
    warmup: int = 50_000,
) -> dict[str, Figure]:
    synced_small = synced_small or max(10_000, small // 10)
    keys = [
        "redis.xadd.100B.aof_off",
        "redis.xadd.100B.aof_everysec",
        "redis.xadd.100B.aof_always",
        "redis.xrange.100B",
        "redis.xadd.100KB.aof_off",
        "redis.xadd.100KB.aof_everysec",
    ]
    server = ensure_binary("redis-server", "redis-server")
    bench = ensure_binary("redis-benchmark", "redis-tools")
    cli = ensure_binary("redis-cli", "redis-tools")
    if not server or not bench:
        return {k: Figure.na("msg/s", "redis-server/redis-benchmark not installable") for k in keys}
    version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
    version = next((w[2:] for w in version.split() if w.startswith("v=")), "?")
    client = f"Redis {version}, redis-benchmark (50 connections)"
    out: dict[str, Figure] = {}
    small_value = "v" * 100
    large_value = b"v" * 100_000

    def xadd(port: int, key: str, n: int, pipeline: int, args: list[str], stdin) -> float:
        """XADDs/s, once the stream is checked to hold all ``n`` (with redis-cli)."""
        rps = _redis_benchmark(
            bench, port, n, pipeline, ["XADD", key, "*", "f", *args], stdin, timeout
        )
        held = _redis_len(cli, port, key)
        # redis-benchmark stops after n replies, but each of its 50 connections may have
        # a pipeline in flight then: up to 50 x pipeline more entries than it counted
        if held is not None and not n <= held <= n + 50 * pipeline:
            raise RuntimeError(f"the stream holds {held:,} entries for {n:,} XADD")
        return rps

    checked = "XLEN checked" if cli else "XLEN not checked (no redis-cli)"
    for aof, appendonly, appendfsync in (*REDIS_CONFIGS, REDIS_ALWAYS):
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
                appendfsync,
                "--dir",
                str(data),
                "--daemonize",
                "no",
                "--protected-mode",
                "yes",
            ],
            log,
        )
        settings = f"appendonly {appendonly}" + (
            f", appendfsync {appendfsync}" if appendonly == "yes" else ""
        )
        try:
            wait_port(port, proc)
            say(f"redis {aof}: warm-up, {warmup:,} XADD of 100 B (not counted)")
            xadd(port, "warmup", warmup, 64, [small_value], None)
            n = synced_small if aof == "aof_always" else small
            try:
                say(f"redis {aof}: XADD 100 B")
                rps = xadd(port, "s", n, 64, [small_value], None)
                out[f"redis.xadd.100B.{aof}"] = Figure(
                    rps,
                    "msg/s",
                    f"{client}, -P 64, {n:,} XADD of 100 B, {settings}, {checked}",
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
                        f"{client}, XRANGE COUNT 1000, same 1,000 entries, -P 8",
                        {"MB/s": rps * 1000 * 100 / 1e6},
                    )
                except Exception as exc:  # noqa: BLE001
                    out["redis.xrange.100B"] = Figure.na("msg/s", f"redis-benchmark: {exc}")
            if aof == "aof_always":
                continue
            try:
                say(f"redis {aof}: XADD 100 KB")
                rps = xadd(port, "big", large, 16, [], large_value)
                out[f"redis.xadd.100KB.{aof}"] = Figure(
                    rps,
                    "msg/s",
                    f"{client}, -P 16, {large:,} XADD of 100 KB, {settings}, {checked}",
                    {"MB/s": rps * 100_000 / 1e6},
                )
            except Exception as exc:  # noqa: BLE001
                out[f"redis.xadd.100KB.{aof}"] = Figure.na("msg/s", f"redis-benchmark: {exc}")
        except Exception as exc:  # noqa: BLE001
            for k in keys:
                if k.endswith(aof) and k not in out:
                    out[k] = Figure.na("msg/s", f"redis-server: {exc}")
        finally:
            stop(proc)
            log.close()
    for k in keys:
        out.setdefault(k, Figure.na("msg/s", "not run"))
    return out


NATS_SOURCE = Path(__file__).resolve().parent / "nats_bench.c"
NATS_PENDING = 16_000  # unacknowledged async publishes in flight
NATS_FETCH = 10_000  # messages per pull request


def _build_nats_bench(tmp: Path) -> tuple[str | None, str]:
    """Compile bench/nats_bench.c against Debian's libnats; (path or None, why not)."""
    cc = ensure_binary("cc", "gcc")
    if not cc:
        return None, "no C compiler (gcc) installable"
    if not Path("/usr/include/nats/nats.h").exists():
        ensure_binary("libnats-dev-is-not-a-binary", "libnats-dev")  # installs the package
    exe = tmp / "nats_bench"
    done = subprocess.run(
        [cc, "-O2", "-o", str(exe), str(NATS_SOURCE), "-lnats"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        return None, f"nats_bench.c did not build (libnats-dev?): {done.stderr.strip()[:80]}"
    return str(exe), ""


def _libnats_version() -> str:
    header = Path("/usr/include/nats/version.h")
    try:
        for line in header.read_text().splitlines():
            if "NATS_VERSION_STRING" in line and '"' in line:
                return line.split('"')[1]
    except OSError:
        pass
    return "?"


def _nats_run(exe: str, args: list[str], timeout: float) -> tuple[int, float]:
    """(messages, seconds) that one nats_bench run printed; raises with its stderr."""
    done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    _mode, count, seconds = done.stdout.split()
    return int(count), float(seconds)


def nats(
    tmp: Path, small: int, large: int, timeout: float, say=print, warmup: int = 50_000
) -> dict[str, Figure]:
    keys = ["nats.publish.100B", "nats.consume.100B", "nats.publish.100KB"]
    server = ensure_binary("nats-server", "nats-server")
    if not server:
        return {k: Figure.na("msg/s", "nats-server not installable") for k in keys}
    exe, why = _build_nats_bench(tmp)
    if not exe:
        return {k: Figure.na("msg/s", why) for k in keys}
    version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
    client = (
        f"NATS {version.split()[-1].lstrip('v')}, file storage, "
        f"NATS C client (libnats {_libnats_version()}, bench/nats_bench.c)"
    )
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    log = open(tmp / "nats.log", "wb")
    proc = spawn([server, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp / "nats")], log)
    out: dict[str, Figure] = {}

    def publish(key: str, stream: str, count: int, size: int, pending: int) -> None:
        try:
            n, seconds = _nats_run(
                exe, ["publish", url, stream, str(count), str(size), str(pending)], timeout
            )
            rate = n / seconds
            out[key] = Figure(
                rate,
                "msg/s",
                f"{client}, {count:,} js_PublishAsync of {size:,} B, up to {pending:,} in "
                "flight, each acknowledged once stored, stream length checked",
                {"MB/s": rate * size / 1e6},
            )
        except Exception as exc:  # noqa: BLE001 - report and carry on
            out[key] = Figure.na("msg/s", f"{type(exc).__name__}: {exc}"[:120])

    try:
        wait_port(port, proc)
        say(f"nats: warm-up, {warmup:,} x 100 B (not counted)")
        _nats_run(exe, ["publish", url, "WARMUP", str(warmup), "100", str(NATS_PENDING)], timeout)
        say("nats: publish 100 B")
        publish("nats.publish.100B", "SMALL", small, 100, NATS_PENDING)
        if out["nats.publish.100B"].value is not None:
            say("nats: pull consumer 100 B")
            try:
                n, seconds = _nats_run(
                    exe, ["consume", url, "SMALL", str(small), str(NATS_FETCH)], timeout
                )
                rate = n / seconds
                out["nats.consume.100B"] = Figure(
                    rate,
                    "msg/s",
                    f"{client}, pull consumer, {NATS_FETCH:,} messages a fetch, ack all "
                    "on the last of each",
                    {"MB/s": rate * 100 / 1e6},
                )
            except Exception as exc:  # noqa: BLE001
                out["nats.consume.100B"] = Figure.na("msg/s", f"{type(exc).__name__}: {exc}"[:120])
        say("nats: publish 100 KB")
        publish("nats.publish.100KB", "LARGE", large, 100_000, 64)
    except Exception as exc:  # noqa: BLE001 - report and carry on
        reason = f"{type(exc).__name__}: {exc}"[:120]
        for k in keys:
            out.setdefault(k, Figure.na("msg/s", reason))
    finally:
        stop(proc)
        log.close()
    for k in keys:
        out.setdefault(k, Figure.na("msg/s", "not run"))
    return out
