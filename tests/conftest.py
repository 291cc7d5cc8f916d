"""Shared fixtures: a real broker process per test module, and per test when asked; and
the grouping that lets ``./dev test`` run the suite on two pytest-xdist workers."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import BrokerProcess  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group the tests for ``--dist loadgroup``: a module's tests run on one worker, so its
    module-scoped broker starts once, and every Spark test runs on one worker, so one
    SparkSession (and one standalone cluster) serves them all. Without xdist the marks do
    nothing."""
    for item in items:
        module = item.nodeid.split("::")[0]
        group = "spark" if module.startswith("tests/spark/") else module
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _free_cycles_after_each_test() -> Iterator[None]:
    """A client caught in a reference cycle (``pytest.raises(...) as info`` makes one:
    the exception's traceback holds the test's frame, which holds the client) would
    live on, with its threads, until some later collection, retrying a broker that has
    stopped into the logs of the tests after it. Collect such cycles as each test ends."""
    yield
    gc.collect()


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
