"""Running the `strom` command as a user does: a subprocess, its output and exit code."""

from __future__ import annotations

import subprocess
import sys

STROM = [sys.executable, "-m", "strom.cli.main"]


def strom(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*STROM, *args], input=stdin, capture_output=True, text=True, timeout=timeout
    )


def tool(broker, name: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return strom(name, *args, "--bootstrap-server", broker.bootstrap, **kw)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


def one_line_error(result: subprocess.CompletedProcess, code: int | None = None) -> str:
    assert result.returncode != 0
    if code is not None:
        assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the rich tables in a tool's output, as lists of cell texts."""
    return [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in text.splitlines()
        if line.startswith("│")
    ]
