"""The README's snippets run as written, in order, against a fresh broker.

Only the broker's address (127.0.0.1:9092 becomes the test broker's) and the temp
directory differ. Blocks that start a broker of their own (`./dev ...`,
`strom broker ...`) are the quick start, which CI itself runs; every other ``sh`` and
``python`` block is run here, and each one's output is checked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from kafka_helpers import consume_to_end

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```", re.M | re.S)


def runnable_blocks() -> list[tuple[str, str]]:
    blocks = []
    for language, code in BLOCK.findall(README.read_text()):
        lines = [line.strip() for line in code.splitlines()]
        if any(line.startswith(("./dev ", "strom broker")) for line in lines):
            continue  # starts a broker: the quick start
        blocks.append((language, code))
    return blocks


def as_here(code: str, broker: BrokerProcess, tmp_path: Path) -> str:
    code = code.replace("127.0.0.1:9092", broker.bootstrap)
    code = code.replace("/tmp/", f"{tmp_path}/")
    return code.replace("source .venv/bin/activate", f"source {sys.prefix}/bin/activate")


def run(language: str, code: str, broker: BrokerProcess, timeout: float) -> str:
    env = dict(os.environ, STROM_BOOTSTRAP_SERVER=broker.bootstrap)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    if language == "sh":
        command = ["bash", "-e", "-o", "pipefail", "-c", code]
    else:
        command = [sys.executable, "-c", code]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{language} snippet failed:\n{code}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_every_readme_snippet_runs_as_written(tmp_path: Path) -> None:
    blocks = runnable_blocks()
    kinds = [language for language, _ in blocks]
    assert kinds == ["sh", "python", "sh", "python"], kinds  # kcat, client, tools, Spark

    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        (_, kcat), (_, client), (_, tools), (_, spark) = blocks

        out = run("sh", as_here(kcat, broker, tmp_path), broker, timeout=60)
        assert out.splitlines()[-2:] == ["hello", "world"], out

        out = run("python", as_here(client, broker, tmp_path), broker, timeout=120)
        assert len(out.splitlines()) == 4, out  # one line per 250 records of 1,000

        out = run("sh", as_here(tools, broker, tmp_path), broker, timeout=240)
        assert "c1\tfirst" in out and "c2\tsecond" in out, out
        assert "billing" in out, out

        run("python", as_here(spark, broker, tmp_path), broker, timeout=300)
        picked = [m.value() for m in consume_to_end(broker.bootstrap, "orders-with-9")]
        expected = sorted(f"order {i}".encode() for i in range(1000) if "9" in str(i))
        assert sorted(picked) == expected
    finally:
        broker.stop()


@pytest.mark.parametrize("language", ["sh", "python"])
def test_a_failing_snippet_fails_the_check(language: str, tmp_path: Path) -> None:
    """The harness itself: a snippet that fails is reported, not passed over."""
    broker = BrokerProcess(tmp_path / "unused")  # never started: no address is reached
    code = "false\necho never" if language == "sh" else "raise SystemExit(3)"
    with pytest.raises(AssertionError, match="snippet failed"):
        run(language, code, broker, timeout=30)
