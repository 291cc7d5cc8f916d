"""The one SparkSession the Spark tests share (local[2], 2 shuffle partitions), with the
``strom`` format registered. Starting a session costs ~10 s, so there is only one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    import strom.spark

    session = strom.spark.local_session(
        "strom-tests",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.streaming.stopTimeout": "10s",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
