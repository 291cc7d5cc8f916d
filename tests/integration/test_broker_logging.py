"""The broker's own log: JSON lines with log.format=json, a rotated log.file beside
stderr, and a log.file that cannot be opened is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from broker_process import BrokerProcess
from confluent_kafka.admin import AdminClient, NewTopic


def test_json_lines_on_stderr_and_a_rotated_file(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "strom.log"
    log_file.parent.mkdir()
    broker = BrokerProcess(
        tmp_path / "data",
        {
            "log.format": "json",
            "log.file": str(log_file),
            "log.file.max.bytes": "600",
            "log.file.backup.count": "2",
        },
    )
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        names = [f"logged-{i}" for i in range(20)]
        for future in admin.create_topics([NewTopic(n, 1) for n in names]).values():
            future.result(30)
    finally:
        broker.stop()
    stderr_lines = [line for line in broker.log_path.read_text().splitlines() if line.strip()]
    entries = [json.loads(line) for line in stderr_lines]  # every line is one JSON object
    assert {"time", "level", "logger", "message"} <= set(entries[0])
    assert entries[0]["time"].endswith("Z")
    assert any("started in" in e["message"] for e in entries)
    assert any("stopped cleanly" in e["message"] for e in entries)

    files = sorted(p.name for p in log_file.parent.iterdir())
    assert files == ["strom.log", "strom.log.1", "strom.log.2"]  # rotated, two kept
    for path in log_file.parent.iterdir():
        assert path.stat().st_size <= 600 + 2000  # one record may carry it past the limit
        for line in path.read_text().splitlines():
            json.loads(line)
    assert "stopped cleanly" in log_file.read_text()  # the newest lines are in strom.log


def test_a_log_file_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "broker",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            f"log.dirs={tmp_path / 'data'}",
            "--override",
            f"log.file={tmp_path / 'missing-dir' / 'strom.log'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    missing = tmp_path / "missing-dir" / "strom.log"
    assert done.stderr.strip().splitlines() == [
        f"strom broker: log.file {missing}: No such file or directory"
    ]
