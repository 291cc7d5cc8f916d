"""Running connectors' tasks: the ``TaskRunner`` interface the herder drives, and the
runner that runs tasks inside the worker process (``InWorkerRunner``).

A runner starts a task from its ``TaskSpec`` (id, kind, class, task config and the
connector's config) in a target state (STARTED or PAUSED), changes that state, stops it
(waiting ``task.shutdown.graceful.timeout.ms``), and reports each state change
(RUNNING, PAUSED, FAILED with its trace, UNASSIGNED once stopped) to a listener. A
failed task stays failed, and known to the runner, until the herder restarts it.

In the worker, each task is a thread with confluent-kafka clients:

- a source task polls its ``SourceTask``, converts each record's key and value with the
  connector's converters, and produces it with an idempotent producer (acks=all,
  murmur2 partitioning as Java's). Every ``offset.flush.interval.ms``, on pause and on
  stop, it flushes the producer and then stores the source offsets of the records
  acknowledged (so a stored offset never runs ahead of the records in the topic), and
  calls ``commit()``. Each record goes through the connector's transforms and converters
  (``record_path``) under its ``errors.*`` handling: a failure not tolerated fails the
  task; a record dropped or skipped still has its offset stored. A record the producer
  cannot write fails the task, or with ``errors.tolerance=all`` is reported and skipped
  (Kafka's KIP-779).
- a sink task consumes in the group ``connect-<connector>`` (Kafka Connect's) from the
  earliest offset, subscribed to ``topics`` or ``topics.regex``, converts and transforms
  records (``record_path``, under ``errors.*``: a skipped record goes to the dead letter
  queue, whose sends are flushed before each offset commit) and ``put``s them (a
  ``RetriableException`` from ``put`` redelivers the batch after a backoff, as Kafka's;
  ``errant_record_reporter`` reports a record ``put`` cannot write), and every
  ``offset.flush.interval.ms``, when partitions are revoked and on
  stop it calls ``pre_commit`` (which flushes) and commits the offsets it returns.
  Pausing pauses the consumer's partitions; the consumer keeps polling, so it stays in
  its group. Its ``stop()`` is called by its own thread after the last commit (a source
  task's from the stopping thread, to end a waiting ``poll``), as in Kafka.

Each topic a source task's record was written to (acknowledged) and each topic a sink
task consumed from is told to the runner's ``topic_listener`` (KIP-558's active topics;
the herder records it once).

After a clean stop a restarted task resumes exactly after the last record written (no
record lost or repeated); after a crash it resumes at the last commit (at least once).

The Spark runner (``spark_runner.SparkRunner``) is the same interface for tasks written
against ``spark_tasks``; a connector chooses by its task class (docs/connect.md keeps
the table).

Does not own which tasks should run (``herder``) or where offsets are kept (``stores``).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from strom.client_security import librdkafka_properties
from strom.connect.api import (
    ConnectException,
    OffsetStorageReader,
    RetriableException,
    SinkRecord,
    SinkTask,
    SinkTaskContext,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
    Task,
    TransactionContext,
)
from strom.connect.connector_config import client_overrides
from strom.connect.errors import (
    KAFKA_PRODUCE,
    ConsumedMessage,
    DeadLetterQueueReporter,
    ErrorHandler,
    ErrorReporter,
)
from strom.connect.plugins import SOURCE, Plugins
from strom.connect.record_path import RecordPath
from strom.connect.stores import STARTED, OffsetStore, compact_json, offset_key
from strom.connect.topic_creation import TopicCreator
from strom.connect.worker_config import WorkerConfig

log = logging.getLogger(__name__)

TaskId = tuple[str, int]
RUNNING = "RUNNING"
PAUSED = "PAUSED"
FAILED = "FAILED"
UNASSIGNED = "UNASSIGNED"
POLL_S = 0.1
SINK_BATCH = 500
SOURCE_TASK_CLASS = "org.apache.kafka.connect.runtime.WorkerSourceTask"  # as Kafka reports
RETRY_PUT_MIN_S = 0.3
RETRY_PUT_MAX_S = 10.0
POLL_BOUNDARY = "poll"
INTERVAL_BOUNDARY = "interval"
CONNECTOR_BOUNDARY = "connector"


def task_name(task_id: TaskId) -> str:
    """Kafka's ConnectorTaskId text: ``<connector>-<task>``."""
    return f"{task_id[0]}-{task_id[1]}"


@dataclass(frozen=True)
class TaskSpec:
    task_id: TaskId
    kind: str  # plugins.SOURCE or plugins.SINK
    task_class: type[Task]
    task_config: dict[str, str]
    connector_config: dict[str, str]


StateListener = Callable[[TaskId, str, str | None], None]
TopicListener = Callable[[TaskId, str], None]  # a task's active topic (KIP-558)


class TaskRunner(ABC):
    """Where a connector's tasks run."""

    @abstractmethod
    def start(self, spec: TaskSpec, target_state: str) -> None:
        """Start a task (STARTED or PAUSED)."""

    @abstractmethod
    def set_target_state(self, task_id: TaskId, target_state: str) -> None: ...

    @abstractmethod
    def stop(self, task_ids: list[TaskId]) -> None:
        """Stop tasks and wait for them (at most the graceful shutdown timeout)."""

    @abstractmethod
    def tasks(self) -> dict[TaskId, TaskSpec]:
        """Every task the runner has, running, paused or failed."""

    def stop_all(self) -> None:
        self.stop(list(self.tasks()))


class _StoreReader(OffsetStorageReader):
    def __init__(self, store: OffsetStore, connector: str) -> None:
        self.store = store
        self.connector = connector

    def offset(self, partition: Any) -> dict[str, Any] | None:
        # What another worker committed last (a task moved here) is read first, as Kafka's
        # offset reader reads the offsets topic to its end before it answers.
        self.store.refresh()
        stored: dict[str, Any] | None = self.store.get(self.connector, dict(partition))
        return stored


class _TaskThread(threading.Thread):
    """One task in the worker: the loop of its kind, its clients, its state."""

    def __init__(
        self, spec: TaskSpec, target_state: str, runner: InWorkerRunner, generation: int
    ) -> None:
        super().__init__(daemon=True, name=f"task {task_name(spec.task_id)}")
        self.spec = spec
        self.runner = runner
        self.config = runner.worker_config
        self.target_state = target_state
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self.task: Task | None = None
        self.reported: str | None = None
        self.flush_interval_s = self.config["offset.flush.interval.ms"] / 1000
        self.flush_timeout_s = self.config["offset.flush.timeout.ms"] / 1000
        self.log_errors = spec.connector_config.get("errors.log.enable", "false") == "true"
        self.errors: ErrorHandler | None = None

    def active_topic(self, topic: str) -> None:
        """A topic this task produced to or consumed from (the listener keeps it once;
        asked each time, as Kafka's tasks ask the status store, so a topic reset while
        the task still uses it is recorded again)."""
        listener = self.runner.topic_listener
        if listener is not None:
            listener(self.spec.task_id, topic)

    def report(self, state: str, trace: str | None = None) -> None:
        if state != self.reported or trace is not None:
            self.reported = state
            self.runner.listener(self.spec.task_id, state, trace)

    def set_target_state(self, state: str) -> None:
        with self.changed:
            self.target_state = state
            self.changed.notify_all()

    def request_stop(self) -> None:
        self.stopping.set()
        if self.errors is not None:
            self.errors.stopping.set()  # no more retries
        with self.changed:
            self.changed.notify_all()
        if self.spec.kind == SOURCE:
            # As Kafka: a source task's stop() comes from another thread, to end a poll
            # that waits; a sink task is stopped by its own thread once it has committed.
            self.stop_task()

    def stop_task(self) -> None:
        if self.task is not None:
            try:
                self.task.stop()
            except Exception:  # a task that cannot stop cleanly still stops being run
                log.exception("stopping task %s", task_name(self.spec.task_id))

    @property
    def paused(self) -> bool:
        return self.target_state != STARTED and not self.stopping.is_set()

    def record_path(
        self, dead_letter_queue: Callable[[], ErrorReporter] | None = None
    ) -> RecordPath:
        path = RecordPath.for_task(
            self.spec.task_id,
            self.spec.connector_config,
            self.config.props,
            self.runner.plugins,
            dead_letter_queue,
        )
        self.errors = path.errors
        return path

    def client_settings(self, client: str) -> dict[str, Any]:
        settings = self.config.client_settings(client)
        settings.update(librdkafka_properties(client_overrides(self.spec.connector_config, client)))
        settings.setdefault("client.id", f"connector-{client}-{task_name(self.spec.task_id)}")
        return settings

    def run(self) -> None:
        try:
            self.execute()
        except Exception as exc:
            trace = traceback.format_exc()
            if self.log_errors or not isinstance(exc, ConnectException):
                log.error("task %s failed: %s", task_name(self.spec.task_id), exc)
            self.report(FAILED, trace)
            return
        self.report(UNASSIGNED)

    def execute(self) -> None:
        raise NotImplementedError

    def wait_while_paused(self, on_pause: Callable[[], None]) -> None:
        if not self.paused:
            return
        on_pause()
        self.report(PAUSED)
        with self.changed:
            while self.paused:
                self.changed.wait(1.0)
        if not self.stopping.is_set():
            self.report(RUNNING)


class _SourceTaskThread(_TaskThread):
    topics: TopicCreator | None = None  # KIP-158: the connector's topic.creation.* groups

    def execute(self) -> None:
        self.topics = TopicCreator.for_connector(
            self.config["topic.creation.enable"],
            self.spec.connector_config,
            self.client_settings("admin"),
        )
        if self.runner.exactly_once_source:
            self.execute_in_transactions()
            return
        path = self.record_path()
        connector = self.spec.task_id[0]
        producer = Producer(
            {
                **self.client_settings("producer"),
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "partitioner": "murmur2_random",
            }
        )
        failures: list[str] = []
        pending: dict[bytes, tuple[Any, Any]] = {}

        def delivered(record: SourceRecord, error: Any, message: Any) -> None:
            if error is None:
                return
            if path.errors.tolerate_all:  # Kafka's KIP-779: reported, then skipped
                failure = KafkaException(error)
                path.errors.failed(KAFKA_PRODUCE, SOURCE_TASK_CLASS, failure, record)
            else:
                failures.append(f"{message.topic()}: {error}")

        def commit() -> None:
            left = producer.flush(self.flush_timeout_s)
            if failures:
                raise ConnectException(
                    f"Unrecoverable exception from producer send callback: {failures[0]}"
                )
            if left:
                log.warning(
                    "task %s: %d records not acknowledged within offset.flush.timeout.ms; "
                    "offsets not committed this time",
                    task_name(self.spec.task_id),
                    left,
                )
                return
            if pending:
                self.runner.offset_store.put(connector, dict(pending))
                pending.clear()
            assert isinstance(self.task, SourceTask)
            self.task.commit()

        task = self.spec.task_class()
        assert isinstance(task, SourceTask)
        self.task = task
        reader = _StoreReader(self.runner.offset_store, connector)
        task.initialize(SourceTaskContext(dict(self.spec.task_config), reader))
        task.start(dict(self.spec.task_config))
        self.report(RUNNING)
        last_commit = time.monotonic()
        try:
            while not self.stopping.is_set():
                self.wait_while_paused(commit)
                if self.stopping.is_set():
                    break
                for record in task.poll() or []:
                    self._produce(producer, record, path, delivered)
                    if record.source_partition is not None and record.source_offset is not None:
                        partition = dict(record.source_partition)
                        key = offset_key(connector, partition)
                        pending[key] = (partition, dict(record.source_offset))
                producer.poll(0)
                if failures:
                    commit()
                if time.monotonic() - last_commit >= self.flush_interval_s:
                    commit()
                    last_commit = time.monotonic()
            commit()
        finally:
            producer.flush(self.flush_timeout_s)
            path.close()

    def execute_in_transactions(self) -> None:
        """Exactly-once source support (KIP-618): the task's records are written in
        transactions, each with the source offsets of its records, written to the offsets
        topic by the same transactional producer (``transactional.id`` ``<group.id>-
        <connector>-<task>``, so a task started again elsewhere fences this one). Readers
        with read_committed, the worker's offset store among them, see both or neither.
        Where a transaction ends is the connector's ``transaction.boundary``: ``poll``
        (each batch ``poll`` returns), ``interval`` (the first batch polled once
        ``transaction.boundary.interval.ms``, default ``offset.flush.interval.ms``, has
        passed since the transaction began) or ``connector`` (the task asks through
        ``context.transaction_context()``). A pause commits the open transaction (left
        open, it would hold back every read_committed reader); a stop commits it, or with
        ``connector`` aborts it (the connector has not ended it; its records are read
        again from the committed offsets)."""
        path = self.record_path()
        connector, number = self.spec.task_id
        config = self.runner.worker_config
        settings = self.spec.connector_config
        boundary = (settings.get("transaction.boundary") or POLL_BOUNDARY).lower()
        interval_ms = settings.get("transaction.boundary.interval.ms")
        interval_s = (
            int(interval_ms) if interval_ms else config["offset.flush.interval.ms"]
        ) / 1000
        producer = Producer(
            {
                **self.client_settings("producer"),
                "transactional.id": f"{config['group.id']}-{connector}-{number}",
                "linger.ms": 5,
                "partitioner": "murmur2_random",
            }
        )
        failures: list[str] = []
        timeout_s = self.flush_timeout_s * 6

        def delivered(record: SourceRecord, error: Any, message: Any) -> None:
            if error is not None:
                failures.append(f"{message.topic()}: {error}")

        task = self.spec.task_class()
        assert isinstance(task, SourceTask)
        self.task = task
        reader = _StoreReader(self.runner.offset_store, connector)
        transactions = TransactionContext() if boundary == CONNECTOR_BOUNDARY else None
        pending: dict[bytes, tuple[Any, Any]] = {}
        began: float | None = None  # when the open transaction began

        def finish(commit: bool) -> None:
            nonlocal began
            if began is None:
                return
            if commit:
                for key, (_, offset) in pending.items():
                    producer.produce(config["offset.storage.topic"], compact_json(offset), key)
                try:
                    producer.commit_transaction(timeout_s)
                except KafkaException:
                    producer.abort_transaction(timeout_s)
                    raise
                if failures:
                    raise ConnectException(f"Unrecoverable exception from producer: {failures[0]}")
                self.runner.offset_store.note(pending)
                task.commit()
            else:
                producer.abort_transaction(timeout_s)
                failures.clear()
            pending.clear()
            began = None

        try:
            producer.init_transactions(timeout_s)
            task.initialize(SourceTaskContext(dict(self.spec.task_config), reader, transactions))
            task.start(dict(self.spec.task_config))
            self.report(RUNNING)
            while not self.stopping.is_set():
                self.wait_while_paused(lambda: finish(True))
                if self.stopping.is_set():
                    break
                for record in task.poll() or []:
                    if began is None:
                        producer.begin_transaction()
                        began = time.monotonic()
                    self._produce(producer, record, path, delivered)
                    if record.source_partition is not None and record.source_offset is not None:
                        partition = dict(record.source_partition)
                        key = offset_key(connector, partition)
                        pending[key] = (partition, dict(record.source_offset))
                    if transactions is not None:
                        asked = transactions.requested_after(record)
                        if asked is not None:
                            finish(asked == "commit")
                producer.poll(0)
                if transactions is not None:
                    asked = transactions.requested_after_batch()
                    if asked is not None:
                        finish(asked == "commit")
                elif boundary == INTERVAL_BOUNDARY:
                    if began is not None and time.monotonic() - began >= interval_s:
                        finish(True)
                else:
                    finish(True)
            finish(transactions is None)
        finally:
            producer.flush(self.flush_timeout_s)
            path.close()

    def _produce(
        self,
        producer: Producer,
        record: SourceRecord,
        path: RecordPath,
        delivered: Callable[[SourceRecord, Any, Any], None],
    ) -> None:
        message = path.produced_message(record)
        if message is None:
            return  # dropped by a transform, or its failure tolerated
        topic = message.topic

        def acknowledged(error: Any, produced: Any) -> None:
            delivered(record, error, produced)
            if error is None:
                self.active_topic(topic)

        if self.topics is not None:
            self.topics.ensure(message.topic)
        extra: dict[str, Any] = {}
        if message.partition is not None:
            extra["partition"] = message.partition
        if message.timestamp is not None:
            extra["timestamp"] = message.timestamp
        if message.headers:
            extra["headers"] = message.headers
        while True:
            try:
                producer.produce(
                    message.topic,
                    message.value,
                    message.key,
                    on_delivery=acknowledged,
                    **extra,
                )
                return
            except BufferError:  # the producer's queue is full: let it drain
                producer.poll(POLL_S)
            except KafkaException as exc:  # refused at once (too large, unknown partition)
                if not path.errors.tolerate_all:
                    raise
                path.errors.failed(KAFKA_PRODUCE, SOURCE_TASK_CLASS, exc, record)
                return


class _SinkTaskThread(_TaskThread):
    def execute(self) -> None:
        path = self.record_path(self.dead_letter_queue)
        connector = self.spec.task_id[0]
        consumer = Consumer(
            {
                **self.client_settings("consumer"),
                "group.id": f"connect-{connector}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
            }
        )
        task = self.spec.task_class()
        assert isinstance(task, SinkTask)
        self.task = task
        context = SinkTaskContext(dict(self.spec.task_config))
        task.initialize(context)
        task.start(dict(self.spec.task_config))
        current: dict[tuple[str, int], int] = {}  # the next offset to read, per partition
        assignment: list[TopicPartition] = []

        def commit(partitions: list[tuple[str, int]] | None = None) -> None:
            chosen = {tp: o for tp, o in current.items() if partitions is None or tp in partitions}
            if not chosen:
                return
            path.errors.flush()  # the dead letter queue holds what these offsets skip
            offsets = task.pre_commit(chosen)
            if not offsets:
                return
            try:
                consumer.commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                    asynchronous=False,
                )
            except KafkaException as exc:
                log.warning("task %s: offset commit failed: %s", task_name(self.spec.task_id), exc)

        def assigned(_: Any, partitions: list[TopicPartition]) -> None:
            assignment.extend(partitions)
            task.open([(tp.topic, tp.partition) for tp in partitions])
            if self.paused:
                consumer.pause(partitions)

        def revoked(_: Any, partitions: list[TopicPartition]) -> None:
            gone = [(tp.topic, tp.partition) for tp in partitions]
            commit(gone)
            task.close(gone)
            for tp in gone:
                current.pop(tp, None)
            assignment[:] = [tp for tp in assignment if (tp.topic, tp.partition) not in gone]

        topics = [
            t.strip() for t in self.spec.task_config.get("topics", "").split(",") if t.strip()
        ]
        regex = self.spec.task_config.get("topics.regex", "")
        subscription = topics or [regex if regex.startswith("^") else "^" + regex]
        consumer.subscribe(subscription, on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        self.report(RUNNING)
        last_commit = time.monotonic()
        try:
            while not self.stopping.is_set():
                if self.paused:
                    consumer.pause(assignment)
                    commit()
                    self.report(PAUSED)
                    while self.paused:
                        consumer.poll(POLL_S)  # stays in the group; nothing is returned
                    if self.stopping.is_set():
                        break
                    consumer.resume(assignment)
                    self.report(RUNNING)
                consumed = [
                    _consumed(m) for m in consumer.consume(SINK_BATCH, POLL_S) if m.error() is None
                ]
                for topic in sorted({message.topic for message in consumed}):
                    self.active_topic(topic)
                records = [r for r in map(path.sink_record, consumed) if r is not None]
                if records:
                    originals = {(m.topic, m.partition, m.offset): m for m in consumed}
                    context.errant_reporter = path.errant_reporter(originals)
                    self._put(task, records)
                for message in consumed:
                    current[(message.topic, message.partition)] = message.offset + 1
                for (topic, partition), offset in context.rewinds.items():
                    consumer.seek(TopicPartition(topic, partition, offset))
                    current[(topic, partition)] = offset
                context.rewinds.clear()
                due = time.monotonic() - last_commit >= self.flush_interval_s
                if due or context.commit_requested:
                    commit()
                    context.commit_requested = False
                    last_commit = time.monotonic()
            commit()
            task.close([(tp.topic, tp.partition) for tp in assignment])
        finally:
            self.stop_task()
            consumer.close()
            path.close()

    def dead_letter_queue(self) -> ErrorReporter:
        config = self.spec.connector_config
        return DeadLetterQueueReporter(
            config["errors.deadletterqueue.topic.name"],
            self.client_settings("admin"),
            self.client_settings("producer"),
            int(config.get("errors.deadletterqueue.topic.replication.factor", "3")),
            config.get("errors.deadletterqueue.context.headers.enable", "false").lower() == "true",
            self.flush_timeout_s,
        )

    def _put(self, task: SinkTask, records: list[SinkRecord]) -> None:
        """``task.put``, the batch given again after a RetriableException (Kafka's
        redelivery), with a backoff, until it passes or the task stops."""
        delay_s = RETRY_PUT_MIN_S
        while True:
            try:
                task.put(records)
                return
            except RetriableException as exc:
                log.warning(
                    "task %s: put failed, retrying the batch: %s", task_name(self.spec.task_id), exc
                )
                if self.stopping.wait(delay_s):
                    raise
                delay_s = min(delay_s * 2, RETRY_PUT_MAX_S)


def _consumed(message: Any) -> ConsumedMessage:
    """A confluent-kafka message as the record path reads it."""
    timestamp_type, timestamp = message.timestamp()
    return ConsumedMessage(
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        key=message.key(),
        value=message.value(),
        timestamp=timestamp if timestamp_type else None,
        timestamp_type="LogAppendTime" if timestamp_type == 2 else "CreateTime",
        headers=list(message.headers() or []),
    )


class InWorkerRunner(TaskRunner):
    """Tasks as threads of this worker process."""

    def __init__(
        self,
        worker_config: WorkerConfig,
        plugins: Plugins,
        offset_store: OffsetStore,
        listener: StateListener,
        topic_listener: TopicListener | None = None,
    ) -> None:
        self.worker_config = worker_config
        self.plugins = plugins
        self.offset_store = offset_store
        self.listener = listener
        self.topic_listener = topic_listener
        self.threads: dict[TaskId, _TaskThread] = {}
        self.generation = 0
        # KIP-618: source tasks write their records and offsets in transactions
        self.exactly_once_source = worker_config.exactly_once_source

    def start(self, spec: TaskSpec, target_state: str) -> None:
        kind = _SourceTaskThread if spec.kind == SOURCE else _SinkTaskThread
        thread = kind(spec, target_state, self, self.generation)
        self.threads[spec.task_id] = thread
        thread.start()

    def set_target_state(self, task_id: TaskId, target_state: str) -> None:
        thread = self.threads.get(task_id)
        if thread is not None and thread.target_state != target_state:
            thread.set_target_state(target_state)

    def stop(self, task_ids: list[TaskId]) -> None:
        threads = [self.threads.pop(t) for t in task_ids if t in self.threads]
        for thread in threads:
            thread.request_stop()
        deadline = time.monotonic() + self.worker_config["task.shutdown.graceful.timeout.ms"] / 1000
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.error(
                    "task %s did not stop within task.shutdown.graceful.timeout.ms",
                    task_name(thread.spec.task_id),
                )

    def tasks(self) -> dict[TaskId, TaskSpec]:
        return {task_id: thread.spec for task_id, thread in self.threads.items()}
