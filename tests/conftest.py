"""Shared fixtures: a real broker process per test module, and per test when asked."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import BrokerProcess  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by the tests of a module."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data")
    process.start()
    yield process
    if process.alive():
        process.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, for tests that restart or kill it."""
    process = BrokerProcess(tmp_path / "data")
    yield process
    if process.alive():
        process.kill()
