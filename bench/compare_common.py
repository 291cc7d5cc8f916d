"""Shared pieces of ``bench/compare``: figures, child processes, installs.

Owns: the ``Figure`` record every measurement returns, starting and stopping
child processes in their own process group (so a Ctrl-C or an error never leaves
one behind), free ports on 127.0.0.1, installing a missing Debian package or
PyPI package, and a process's CPU time (the other benches read it from here too).
Does not own any measurement.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any

_STARTED: list[subprocess.Popen[Any]] = []


@dataclass
class Figure:
    """One measured figure, or the reason there is none (``value`` is None)."""

    value: float | None
    unit: str  # "rec/s", "MB/s", "msg/s"
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @classmethod
    def na(cls, unit: str, reason: str) -> Figure:
        return cls(None, unit, reason)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen[Any], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"not listening on 127.0.0.1:{port} after {timeout:.0f}s")


def spawn(
    args: list[str], log: IO[bytes] | int | None = subprocess.DEVNULL, **kwargs: Any
) -> subprocess.Popen[Any]:
    """Start a child in its own process group and remember it for ``stop_all``."""
    kwargs.setdefault("stdout", log)
    kwargs.setdefault("stderr", log)
    proc = subprocess.Popen(args, start_new_session=True, **kwargs)
    _STARTED.append(proc)
    return proc


def stop(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM the child's process group, SIGKILL it if it does not go in time."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
    if proc in _STARTED:
        _STARTED.remove(proc)


def stop_all() -> None:
    for proc in list(_STARTED):
        stop(proc, timeout=5)


_APT_UPDATED = False


def ensure_binary(binary: str, package: str) -> str | None:
    """Path of ``binary``, installing Debian ``package`` if missing; None if impossible."""
    global _APT_UPDATED
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin")
    if found:
        return found
    if not shutil.which("apt-get"):
        return None
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in range(2):
        if attempt == 1 or not _APT_UPDATED:
            subprocess.run(
                [*sudo, "apt-get", "update", "-qq"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=300,
            )
            _APT_UPDATED = True
        done = subprocess.run(
            [*sudo, "apt-get", "install", "-y", "-qq", package],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=600,
        )
        if done.returncode == 0:
            break
    return shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin")


def ensure_module(module: str, requirement: str) -> bool:
    """Import ``module``, pip-installing ``requirement`` into this interpreter if missing."""
    try:
        __import__(module)
        return True
    except ImportError:
        pass
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", requirement],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=300,
    )
    try:
        __import__(module)
        return True
    except ImportError:
        return False
