"""Strom's PySpark data source, format ``"strom"``: Kafka topics as Spark sources and
sinks, with the options and row schema of Spark's own Kafka connector.

    import strom.spark
    strom.spark.register(spark)
    df = (spark.readStream.format("strom")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Needs the ``strom[spark]`` extra (PySpark >= 4.0, pyarrow) and Java 17+.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.spark.kafka_meta import StromSourceError
from strom.spark.options import StromOptionError
from strom.spark.source import StromDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = StromDataSource.name()
# Leads the PYTHONPATH of the Python processes of the sessions made here: its
# sitecustomize has them import the installed PySpark (cached bytecode) rather than
# Spark's zip of it (see worker_site/sitecustomize.py).
WORKER_SITE = str(Path(__file__).parent / "worker_site")


def register(spark: SparkSession) -> None:
    """Make ``format("strom")`` available to ``spark`` (read, readStream, write, writeStream)."""
    spark.dataSource.register(StromDataSource)


def local_session(app_name: str = "strom", master: str = "local[2]", **conf: Any) -> SparkSession:
    """A SparkSession whose Python workers run this interpreter, with ``strom`` registered.

    Spark starts its Python workers with ``PYSPARK_PYTHON`` (default ``python3``), which
    may not see the packages of a virtualenv; this points it at ``sys.executable``
    unless it is already set. ``conf`` entries are Spark settings, e.g.
    ``**{"spark.sql.shuffle.partitions": "2"}``.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    _lead_pythonpath(WORKER_SITE)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {"spark.ui.enabled": "false", **conf}.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    register(spark)
    return spark


def _lead_pythonpath(directory: str) -> None:
    """Put ``directory`` first on the PYTHONPATH that the JVM, started next, hands on to
    the Python processes it starts."""
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    if directory not in entries:
        os.environ["PYTHONPATH"] = os.pathsep.join([directory, *entries])


__all__ = [
    "FORMAT",
    "StromDataSource",
    "StromOptionError",
    "StromSourceError",
    "local_session",
    "register",
]
