"""A real Strom broker in a child process, on a free port, with its data in a temp dir.

Tests drive it with real Kafka clients. ``restart()``, ``stop()`` (SIGTERM) and
``kill()`` (SIGKILL) keep the same port and data directory.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_ports = random.Random(os.getpid() ^ time.time_ns())


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port nothing holds now, for a broker about to bind it.

    It is taken below the kernel's ephemeral range: the local ports of client
    connections come from that range, so one of the suite's many connections cannot take
    the port between this check and the broker's bind (a port from ``bind(0)`` could be,
    and the broker then failed to start). A port is handed out once per process.
    """
    low, high = 10000, _ephemeral_low() - 1
    for _ in range(1000):
        port = _ports.randint(low, high) if high > low else 0
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or in TIME_WAIT from an earlier test
            port = s.getsockname()[1]
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "strom.cli.main", "broker"]
        props = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            **self.overrides,
        }
        for key, value in props.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self, timeout: float = 20.0) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker did not start within {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()
