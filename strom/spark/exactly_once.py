"""Exactly-once writes of the ``strom`` stream sink (``exactlyOnce=true``): one Kafka
transaction per Spark task per micro-batch, and a marker that says which micro-batch a
task last committed, so that the replay of a micro-batch after a crash writes nothing
twice.

Owns the identity of a write task (query id, micro-batch id, Spark partition id, read
from the task's Spark local properties), the transactional id and marker group derived
from it, and the life of one task's transaction: fence, check the marker, begin, commit
with the marker, or abort. Turning rows into records is :mod:`strom.spark.sink`'s.

How a task writes micro-batch ``B`` of query ``Q`` as Spark partition ``P``:

1. A producer with ``transactional.id = <prefix>-<Q>-<P>`` calls ``init_transactions``:
   the previous producer of the same task (a zombie of a killed run or an earlier attempt)
   is fenced, and a transaction it left open is aborted.
2. The committed offset of group ``<prefix>-<Q>-<P>`` on partition 0 of the marker topic
   (the ``topic`` option, else the topic of the task's first row) is read with
   ``require_stable``. Its offset is the last micro-batch id this task committed; if it
   is ``B`` or later, ``B`` is a replay of a micro-batch whose records are already in
   Kafka, and the task writes nothing.
3. Otherwise the task writes its rows in one transaction that also commits offset ``B``
   for the marker group (``send_offsets_to_transaction``): the records and the marker are
   committed together or not at all.
4. Just before the commit, the task checks that the JVM that runs it still lives. When
   that JVM is killed, pyspark's worker (and the daemon that forked it, which sits in a
   process group of its own) can outlive it, and the worker's input then ends at a
   message boundary as if every row had been read: committing then would mark the
   micro-batch done with part of its rows, and the retried task would skip the rest.
   So a task whose JVM is gone aborts instead (Linux: the nearest ``java`` ancestor,
   found when the task starts, read from ``/proc``; elsewhere the check is skipped).

A task whose rows include one stamped 0 writes its transaction by Strom's own requests
(``ZeroTimeTaskTransaction``: ``strom.zero_time.ZeroTimeTransaction``, the same steps):
librdkafka stamps a produce timestamp of 0 with the time of sending, where Kafka keeps a
producer's 0 (CreateTime).

Spark's query id is kept in the checkpoint, so it is the same across restarts of a query
from the same checkpoint (the run id is not); the micro-batch id of a replayed batch is
the id it had. Spark hands neither to a Python writer's ``write()``; it sets them as the
local properties ``sql.streaming.queryId`` and ``streaming.sql.batchId`` of the jobs of a
micro-batch, which reach every task's ``TaskContext``.

What this relies on: a replayed micro-batch gives Spark partition ``P`` the same rows it
had the first time, which holds for the ``strom`` source (its offsets are in the
checkpoint and split the same way) and deterministic queries over it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from strom.zero_time import ZeroTimeError, ZeroTimeTransaction

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
MARKER_PARTITION = 0
TIMEOUT_S = 120.0
# kafka.* settings for the producer only, not handed to the consumer that reads and sends
# the marker (librdkafka would warn of each); the rest (TLS, SASL...) serve both.
_PRODUCER_ONLY = {
    "acks",
    "batch.num.messages",
    "batch.size",
    "compression.codec",
    "compression.level",
    "compression.type",
    "delivery.timeout.ms",
    "enable.idempotence",
    "linger.ms",
    "message.send.max.retries",
    "message.timeout.ms",
    "partitioner",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "queue.buffering.max.ms",
    "request.required.acks",
    "request.timeout.ms",
    "retries",
    "sticky.partitioning.linger.ms",
    "transaction.timeout.ms",
}


class StromSinkError(RuntimeError):
    """The exactly-once sink cannot keep its guarantee for this task."""


@dataclass(frozen=True)
class WriteTask:
    """Which micro-batch of which query a Spark write task writes, and as which partition."""

    query_id: str
    batch_id: int
    partition_id: int

    def transactional_id(self, prefix: str) -> str:
        """The task's transactional id, which is also its marker group's id."""
        return f"{prefix}-{self.query_id}-{self.partition_id}"


def write_task(query_id: str | None, batch_id: str | None, partition_id: int) -> WriteTask:
    """A :class:`WriteTask` from a task's local properties, or an error saying why not."""
    if not query_id or batch_id is None:
        raise StromSinkError(
            "exactlyOnce needs the query id and micro-batch id Spark gives the tasks of a "
            f"streaming query (local properties {QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY}); "
            f"this task has {QUERY_ID_PROPERTY}={query_id!r}, {BATCH_ID_PROPERTY}={batch_id!r}"
        )
    try:
        batch = int(batch_id)
    except ValueError:
        raise StromSinkError(f"micro-batch id {batch_id!r} is not an integer") from None
    return WriteTask(query_id=query_id, batch_id=batch, partition_id=partition_id)


def current_write_task() -> WriteTask:
    """The :class:`WriteTask` of the Spark task this runs in."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise StromSinkError("exactlyOnce writes run in Spark tasks only")
    return write_task(
        context.getLocalProperty(QUERY_ID_PROPERTY),
        context.getLocalProperty(BATCH_ID_PROPERTY),
        context.partitionId(),
    )


def already_committed(marker_offset: int, batch_id: int) -> bool:
    """Whether a marker group's committed offset says micro-batch ``batch_id`` is written.

    The offset is the id of the last micro-batch the task committed, or a negative
    (``OFFSET_INVALID``) when the task has committed none.
    """
    return marker_offset >= 0 and marker_offset >= batch_id


def _process(pid: int) -> tuple[str, str, int] | None:
    """(command name, state, parent pid) of a process from ``/proc``; None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
    return name, state, int(parent)


def jvm_ancestor() -> int | None:
    """The pid of the nearest ``java`` process above this one (the JVM that runs this
    Python worker), or None when there is none or no ``/proc`` to tell."""
    found = _process(os.getpid())
    while found is not None and found[2] > 0:
        pid = found[2]
        found = _process(pid)
        if found is not None and found[0] == "java":
            return pid
    return None


def jvm_alive(pid: int | None) -> bool:
    """Whether the JVM found by ``jvm_ancestor`` still runs (True when none was found)."""
    if pid is None:
        return True
    found = _process(pid)
    return found is not None and found[0] == "java" and found[1] not in ("Z", "X")


@dataclass
class TaskOutcome:
    written: int
    skipped: bool  # the micro-batch was committed by an earlier run of the task


class TaskTransaction:
    """One write task's Kafka transaction for one micro-batch (see the module docstring),
    written by a confluent-kafka transactional producer."""

    def __init__(
        self,
        task: WriteTask,
        prefix: str,
        producer_config: dict[str, Any],
        client_config: dict[str, str],
        marker_topic: str,
    ) -> None:
        self.task = task
        self.jvm = jvm_ancestor()
        self.id = task.transactional_id(prefix)
        self.marker = TopicPartition(marker_topic, MARKER_PARTITION)
        self.producer_config = producer_config
        self.client_config = client_config
        self.consumer = Consumer(
            {
                **{k: v for k, v in client_config.items() if k not in _PRODUCER_ONLY},
                "group.id": self.id,
                "enable.auto.commit": False,
                # OffsetFetch with require_stable: a commit still in flight is waited for
                "isolation.level": "read_committed",
            }
        )
        self.producer = self._producer()

    def _producer(self) -> Any:
        """What ``run``'s ``produce`` writes with (here a confluent-kafka Producer)."""
        return Producer({**self.producer_config, "transactional.id": self.id})

    def run(self, produce: Callable[[Any], int]) -> TaskOutcome:
        """Fence, check the marker, and unless the micro-batch is already in Kafka, write it
        with ``produce`` (which returns how many records it produced) in one transaction."""
        try:
            self._init()
            committed = self._marker_offset()
            if already_committed(committed, self.task.batch_id):
                log.info(
                    "%s: micro-batch %d is already committed (marker at %d); writing nothing",
                    self.id,
                    self.task.batch_id,
                    committed,
                )
                return TaskOutcome(written=0, skipped=True)
            self._begin()
            try:
                written = produce(self.producer)
                self._send_marker(
                    f"strom exactlyOnce micro-batch {self.task.batch_id}: {written} records"
                )
                if not jvm_alive(self.jvm):
                    raise StromSinkError(
                        f"{self.id}: the JVM running micro-batch {self.task.batch_id} is gone; "
                        "its rows may be cut short, so the transaction is aborted"
                    )
                self._commit()
            except BaseException:
                self._abort()
                raise
            return TaskOutcome(written=written, skipped=False)
        finally:
            self.consumer.close()
            self._close()

    def _init(self) -> None:
        self.producer.init_transactions(TIMEOUT_S)

    def _begin(self) -> None:
        self.producer.begin_transaction()

    def _send_marker(self, text: str) -> None:
        marker = TopicPartition(self.marker.topic, self.marker.partition, self.task.batch_id, text)
        self.producer.send_offsets_to_transaction(
            [marker], self.consumer.consumer_group_metadata(), TIMEOUT_S
        )

    def _commit(self) -> None:
        self.producer.commit_transaction(TIMEOUT_S)

    def _close(self) -> None:
        return None

    def _marker_offset(self) -> int:
        (position,) = self.consumer.committed([self.marker], timeout=TIMEOUT_S)
        if position.error is not None:
            raise KafkaException(position.error)
        return position.offset if position.offset != OFFSET_INVALID else -1

    def _abort(self) -> None:
        try:
            self.producer.abort_transaction(TIMEOUT_S)
        except KafkaException as exc:  # fenced or fatal: the coordinator aborts it anyway
            error: KafkaError = exc.args[0]
            log.warning("%s: abort of micro-batch %d: %s", self.id, self.task.batch_id, error)


class ZeroTimeTaskTransaction(TaskTransaction):
    """A task's transaction written by Strom's own requests
    (``strom.zero_time.ZeroTimeTransaction``), for micro-batches with records stamped 0:
    librdkafka stamps a 0 with the time of sending, Kafka keeps a producer's 0
    (CreateTime). The same fencing (the same transactional id), marker and commit."""

    def _producer(self) -> Any:
        timeout = int(self.producer_config.get("transaction.timeout.ms", 60_000))
        return ZeroTimeTransaction(self.client_config, self.id, timeout)

    def _init(self) -> None:
        self.producer.init()

    def _begin(self) -> None:
        return None  # the first partition added begins it on the coordinator's side

    def _send_marker(self, text: str) -> None:
        self.producer.send_offsets(
            self.id, self.marker.topic, self.marker.partition, self.task.batch_id, text
        )

    def _commit(self) -> None:
        self.producer.commit()

    def _close(self) -> None:
        self.producer.close()

    def _abort(self) -> None:
        try:
            self.producer.abort()
        except (ZeroTimeError, OSError, ConnectionError) as exc:  # the coordinator aborts it
            log.warning("%s: abort of micro-batch %d: %s", self.id, self.task.batch_id, exc)
