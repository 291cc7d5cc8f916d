"""The HTTP services the tests start as processes (schema registry, REST proxy, console,
Connect worker): ``strom <command> ...`` with its output in a log file, and its banner,
the line "Strom <service> on URL/ for ...", waited for.

A log file, not a pipe: a pipe that nobody reads while the tests run fills with 64 KiB
of the service's logs and then stops the service at its next log line."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker_process import served_url


class ServiceProcess:
    """``strom <args>``; ``banner`` and ``url`` once it has started."""

    def __init__(self, args: list[str], log_path: Path | None = None) -> None:
        self.command = [sys.executable, "-m", "strom.cli.main", *args]
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix=f"strom-{args[0]}-", suffix=".log")
            os.close(handle)
            log_path = Path(name)
        self.log_path = log_path
        self.start()

    def start(self, timeout: float = 60.0) -> None:
        with open(self.log_path, "ab") as log:
            self.log_start = log.tell()
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while (banner := self._banner()) is None:
            if time.monotonic() > deadline:
                self.proc.kill()  # its fixture fails in setup and never reaches the teardown
                self.proc.wait(30)
                raise AssertionError(f"{self.command[3]} did not start:\n{self.output()}")
            time.sleep(0.05)
        self.banner = banner
        self.url = served_url(banner)

    def _banner(self) -> str | None:
        output = self.output()
        for line in output.splitlines(keepends=True):
            if line.startswith("Strom ") and " on " in line and line.endswith("\n"):
                return line
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.command[3]} exited:\n{output}")
        return None

    def output(self) -> str:
        """What this run of the service has written."""
        with open(self.log_path, "rb") as log:
            log.seek(self.log_start)
            return log.read().decode(errors="replace")

    def stop(self, timeout: float = 60.0) -> str:
        """Stop it (SIGTERM) and wait; what this run wrote."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout)
        return self.output()
