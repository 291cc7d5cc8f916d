"""Shared fixtures: a real broker process per test module, and per test when asked; and
how ``./dev test`` shares the suite between its pytest-xdist workers."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import BrokerProcess  # noqa: E402
from spark_class_archive import jvm_option  # noqa: E402


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """How ``./dev test`` shares the tests between its pytest-xdist workers: a module's
    tests go to one worker, so its module-scoped broker starts once, and every Spark test
    to one worker, so one SparkSession (and one standalone cluster) serves them all.

    A scheduler of our own rather than ``--dist loadgroup`` marks: xdist 3.8 groups by a
    suffix it writes into ``item._nodeid``, which pytest 9 no longer reads."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleAndSparkScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module in _SPARK_CONNECT_MODULES:
                return "spark-connect"  # one Connect worker's JVM for them all
            return "spark" if module.startswith("tests/spark/") else module

        def _assign_work_unit(self, node: Any) -> None:
            # Longest first: a long scope handed out last would run alone at the end.
            if not getattr(self, "_longest_put_first", False):
                for scope in reversed(_LONGEST_SCOPES):
                    if scope in self.workqueue:
                        self.workqueue.move_to_end(scope, last=False)
                self._longest_put_first = True
            super()._assign_work_unit(node)

    return ModuleAndSparkScheduling(config, log)


# The scopes that take longest (./dev test's --durations), handed out first, longest
# first; the others follow by their number of tests, as xdist orders them.
_LONGEST_SCOPES = (
    "spark",
    "tests/integration/test_ksql_queries.py",
    # not a third Spark driver at the start, beside the two above
    "tests/integration/test_connect_cdc.py",
    "tests/integration/test_nemesis.py",
    "tests/integration/test_replication.py",
    "spark-connect",
    "tests/integration/test_readme.py",
    "tests/integration/test_transactions_clients.py",
    # few tests, which xdist hands out last (by their number), but long: the module 87 s
    # alone, its one test 34 s, a test of 24 s
    "tests/integration/test_reassignment.py",
    "tests/integration/test_replication_faults.py",
    "tests/integration/test_compaction.py",
)


# The modules sharing tests/integration/conftest.py's Connect worker (its JVM starts once).
_SPARK_CONNECT_MODULES = (
    "tests/integration/test_connect_jdbc.py",
    "tests/integration/test_connect_lake.py",
)

WITHOUT_HYPOTHESIS = Path(__file__).parent / "without_hypothesis"


# The JVMs of Spark the tests start compile with C1 alone: they live seconds to minutes
# over small data, where C2's compiler threads cost more CPU than its code saves (a local
# session's start and first micro-batch: 25.6 s of CPU against 41.6 s at load 26-38).
SPARK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def pytest_configure(config: pytest.Config) -> None:
    """The processes the tests start (brokers, tools, services, Spark's Python workers)
    find hypothesis missing, as where Strom is installed without its test extra: kio
    imports it when it can, which took 0.1-0.2 s of each of thousands of starts; the
    Spark drivers they start (the shared sessions, a test's child, the README's snippet,
    the services' sessions: SPARK_SUBMIT_OPTS) and a standalone cluster's master and
    worker (SPARK_DAEMON_JAVA_OPTS) run with ``SPARK_JVM_OPTIONS`` and the class archive
    that ./dev test makes (tests/spark_class_archive.py: half a JVM's CPU to start a
    session and run its first job). Set where the tests
    run: in each pytest-xdist worker, or in the one process of -n 0; not in the process
    that starts the workers, which are pytest and need hypothesis."""
    starts_workers = bool(getattr(config.option, "numprocesses", None))
    if starts_workers and not hasattr(config, "workerinput"):
        return
    paths = [str(WITHOUT_HYPOTHESIS), *filter(None, [os.environ.get("PYTHONPATH")])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    archive = jvm_option()
    for variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        options = [SPARK_JVM_OPTIONS, *filter(None, [archive, os.environ.get(variable)])]
        os.environ[variable] = " ".join(options)


# Modules that take a minute or more of one worker: started first, with the Spark tests
# (one scope of several minutes), so that the suite ends on short modules on both
# workers instead of one worker finishing a long scope alone.
_LONG_FIRST = (
    "tests/spark/",
    "tests/integration/test_readme.py",
    "tests/integration/test_transactions_clients.py",
    "tests/integration/test_nemesis.py",
    "tests/integration/test_replication.py",
    "tests/integration/test_replication_faults.py",
    "tests/integration/test_reassignment.py",
    "tests/integration/test_ksql_queries.py",
    *_SPARK_CONNECT_MODULES,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long modules first (``_LONG_FIRST``), the rest in their usual order."""

    def rank(item: pytest.Item) -> int:
        for position, prefix in enumerate(_LONG_FIRST):
            if item.nodeid.startswith(prefix):
                return position
        return len(_LONG_FIRST)

    items.sort(key=rank)  # stable: each module's tests keep their order


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the imports and the collection made lives as long as the run: it is frozen
    out of the garbage collector's sight, so the collection after each test (below)
    scans what the tests made, not every module loaded (0.2 s a test before, 5 minutes
    of the suite's time)."""
    gc.collect()
    gc.freeze()


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
