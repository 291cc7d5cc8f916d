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
    """The body rows of the tables in a tool's piped output, as lists of cell texts.

    In a pipe the tools print each table as a header line and tab-separated rows:
    every run of lines holding a tab is one table, its first line the header.
    """
    rows: list[list[str]] = []
    in_table = False
    for line in text.splitlines():
        if "\t" not in line:
            in_table = False
            continue
        if in_table:
            rows.append(line.split("\t"))
        in_table = True
    return rows
