"""How the suite starts processes: they find hypothesis (a test dependency, which kio
imports when it can) missing, as where Strom is installed without its test extra."""

from __future__ import annotations

import subprocess
import sys


def test_started_processes_run_without_hypothesis_and_the_tests_with_it() -> None:
    started = subprocess.run(
        [sys.executable, "-c", "import kio.static._phantom as p; print(p.hypothesis)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert started.stdout.strip() == "None"
    import hypothesis.strategies  # noqa: F401  (this process, pytest's, has it)
