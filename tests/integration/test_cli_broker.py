"""`strom broker` as a user runs it: start-up line, bad config, clean shutdown."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from broker_process import BrokerProcess


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "strom.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    "override, needle",
    [
        ("num.partitions=zero", "num.partitions"),
        ("listeners=nonsense", "listeners"),
        ("auto.create.topics.enable=perhaps", "auto.create.topics.enable"),
        ("log.segment.bytes=1", "log.segment.bytes"),
        ("log.cleaner.io.max.bytes.per.second=0", "log.cleaner.io.max.bytes.per.second"),
        ("sasl.kerberos.service.name=kafka", "sasl.kerberos.service.name=kafka is refused"),
        ("remote.fetch.max.wait.ms=100", "remote.fetch.max.wait.ms=100 is refused"),
        ("novalue", "key=value"),
    ],
)
def test_bad_config_is_one_line_and_exit_code_2(tmp_path, override: str, needle: str) -> None:
    result = _run("broker", "--override", f"log.dirs={tmp_path}", "--override", override)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr


def test_missing_properties_file(tmp_path) -> None:
    result = _run("broker", str(tmp_path / "nope.properties"))
    assert result.returncode == 2
    assert "nope.properties" in result.stderr and "Traceback" not in result.stderr


def test_properties_file_start_line_and_sigterm(tmp_path) -> None:
    process = BrokerProcess(tmp_path / "data")
    props = tmp_path / "server.properties"
    props.write_text(
        "# a comment\n"
        f"listeners=PLAINTEXT://127.0.0.1:{process.port}\n"
        f"log.dirs={tmp_path / 'data'}\n"
        "num.partitions=3\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "strom.cli.main", "broker", str(props)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    line = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "listening on" in line:
            break
    assert f"PLAINTEXT://127.0.0.1:{process.port}" in line
    assert str(tmp_path / "data") in line
    proc.terminate()
    rest = proc.stderr.read()
    assert proc.wait(20) == 0
    assert "stopped cleanly" in rest
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()


def test_embedded_default_data_dir(tmp_path) -> None:
    """With no arguments the data lives under ./strom-data (port overridden to stay free)."""
    process = BrokerProcess(tmp_path / "unused")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "broker",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{process.port}",
        ],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    stuck = threading.Timer(60, proc.kill)  # no "listening on" in 60 s: the read ends
    stuck.start()
    line = proc.stderr.readline()
    while "listening on" not in line and line:
        line = proc.stderr.readline()
    stuck.cancel()
    proc.terminate()
    proc.wait(20)
    assert (tmp_path / "strom-data" / "meta.properties").exists()
    assert "strom-data" in line
