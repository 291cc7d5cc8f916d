"""The task API of connectors whose tasks run as Spark jobs (``spark_runner.SparkRunner``):
``SparkSourceTask`` reads its system into DataFrames, ``SparkSinkTask`` writes a
micro-batch of records out.

The runner owns the rest, as Kafka Connect's worker does for a plain task: for a source,
turning rows into records with the connector's value converter, writing them to Kafka
with the ``strom`` batch writer and storing the source offsets once the records are
acknowledged; for a sink, the Structured Streaming query over the ``strom`` source, its
checkpoint and the offsets committed in the group ``connect-<name>``; or, for a task with a
``range_writer``, micro-batches of offset ranges each read by the Spark task that writes
it (``spark_ranges``), the group's offsets their only record. A sink task that
stores its offsets with what it writes (exactly once) says so through ``stored_offsets``;
one that writes through a Spark streaming sink of its own (the lake sink's file sink)
starts its queries in ``start_streams`` on the streams the runner opens.

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
    from pyspark.sql.streaming.query import StreamingQuery

# The runner's opener of a stream of records: the ``strom`` source over the topics, from
# the checkpoint when it has one, else from the group's offsets (or the earliest).
StreamOpener = Callable[[list[str]], "DataFrame"]


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

    def write_batch(
        self, batch: DataFrame, batch_id: int, key_converter: Converter, value_converter: Converter
    ) -> Any:
        """Write a micro-batch (the ``strom`` source's columns: key, value, topic,
        partition, offset, timestamp...) durably, or raise. A batch may come again after
        a failure (at least once); a task that writes idempotently makes it exactly once.
        Called unless ``start_streams`` starts the task's own queries."""
        raise NotImplementedError

    def range_writer(
        self, key_converter: Converter, value_converter: Converter
    ) -> Callable[[list[Any]], int] | None:
        """A function run in Spark's Python workers that writes the records of one
        topic-partition's offset range (Arrow record batches of the ``strom`` source's
        columns: key, value, topic, partition, offset...) durably, or raises, and returns
        the rows written. The runner then reads each micro-batch's ranges in the Spark
        tasks that write them, without a streaming query. None (the default): each
        micro-batch through ``write_batch``."""
        return None

    def stored_offsets(self, topics: list[str]) -> dict[str, dict[str, int]]:
        """``{topic: {partition: next offset}}`` the task stored with what it wrote; the
        runner resumes from them where they are ahead of the group's. None: ``{}``."""
        return {}

    def start_streams(
        self, open_stream: StreamOpener, key_converter: Converter, value_converter: Converter
    ) -> list[StreamingQuery] | None:
        """Start the task's own streaming queries (each with its checkpoint) over streams
        from ``open_stream``, or None to have each micro-batch of the connector's
        topics handed to ``write_batch``."""
        return None

    def restart_after(self, failure: str) -> bool:
        """Whether the queries of ``start_streams`` are to start again after one failed
        with ``failure`` (the task has learnt what it needed), rather than the task fail."""
        return False
