"""The task API of connectors whose tasks run as Spark jobs (``spark_runner.SparkRunner``):
``SparkSourceTask`` reads its system into DataFrames, ``SparkSinkTask`` writes a
micro-batch of records out.

The runner owns the rest, as Kafka Connect's worker does for a plain task: for a source,
turning rows into records with the connector's value converter, writing them to Kafka
with the ``strom`` batch writer and storing the source offsets once the records are
acknowledged; for a sink, the Structured Streaming query over the ``strom`` source, its
checkpoint and the offsets committed in the group ``connect-<name>``.

Both are ``api.Task`` subclasses, so the herder treats them as any task; only the runner
calls the methods below. Imports PySpark for types only: a worker without the ``spark``
extra still loads the connectors' classes.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.connect.api import OffsetStorageReader, SourceOffset, SourcePartition, Task
from strom.connect.converters import Converter
from strom.connect.data import Schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class SourceBatch:
    """Rows read from a source system for one topic.

    ``rows`` has one column per field of ``value_schema`` (a Connect struct), in its order;
    the runner converts each row into a record value with the value converter. Records
    have a null key. ``source_offset`` is stored under ``source_partition`` once every
    record is acknowledged; None stores nothing (a bulk copy).
    """

    topic: str
    rows: DataFrame
    value_schema: Schema
    source_partition: SourcePartition
    source_offset: SourceOffset | None


class SparkSourceTask(Task):
    """A source task that reads with Spark; ``poll_batches`` is called in a loop."""

    def initialize(self, spark: SparkSession, offsets: OffsetStorageReader) -> None:
        self.spark = spark
        self.offsets = offsets

    @abstractmethod
    def poll_batches(self, stopping: Callable[[], bool]) -> list[SourceBatch]:
        """The batches of new rows (empty when none). Waits for its poll interval first
        (in steps, returning early when ``stopping()``)."""


class SparkSinkTask(Task):
    """A sink task that writes each micro-batch of the connector's topics."""

    def initialize(self, spark: SparkSession) -> None:
        self.spark = spark

    @abstractmethod
    def write_batch(
        self, batch: DataFrame, batch_id: int, key_converter: Converter, value_converter: Converter
    ) -> Any:
        """Write a micro-batch (the ``strom`` source's columns: key, value, topic,
        partition, offset, timestamp...) durably, or raise. A batch may come again after
        a failure (at least once); a task that writes idempotently makes it exactly once."""
