"""Kafka Connect's error handling for a task's records (Kafka's
``RetryWithToleranceOperator``, ``LogReporter`` and ``DeadLetterQueueReporter``).

Each step of a record's path runs through ``ErrorHandler.run`` with its stage (Kafka's
names: ``KEY_CONVERTER``, ``VALUE_CONVERTER``, ``TRANSFORMATION``, ``TASK_PUT``...) and the
class executing it:

- a ``RetriableException`` is retried while ``errors.retry.timeout`` lasts (0: never;
  -1: forever), waiting 300 ms, then twice as long each time, at most
  ``errors.retry.delay.max.ms`` (past that, a random delay below it), never past the
  deadline, and not at all once the task is stopping;
- a failure is reported (below) and then, with ``errors.tolerance=none``, fails the task
  (``ConnectException("Tolerance exceeded in error handler")`` caused by it); with
  ``all`` the record is skipped (``run`` answers ``SKIPPED``). Conversion and
  transformation failures of any kind are tolerated; in other stages only retriable
  ones are, as in Kafka (any other fails the task: "Unhandled exception in error
  handler"). Retries exhausted count as a failure.
- reporters: ``errors.log.enable`` logs ``Error encountered in task <connector>-<n>.
  Executing stage '<STAGE>' with class '<class>'`` (with the consumed record's topic,
  partition, offset and timestamp when ``errors.log.include.messages``); a sink's
  ``errors.deadletterqueue.topic.name`` receives the original record (key, value, headers
  and timestamp as consumed), with ``errors.deadletterqueue.context.headers.enable``
  Kafka's ``__connect.errors.*`` headers. The dead letter queue topic is created when
  missing (one partition, ``errors.deadletterqueue.topic.replication.factor``); its
  records are flushed before the task's offsets are committed, so a skipped record is
  either in the queue or consumed again.

Class names in the reports are Kafka's where Strom has the plugin under a Kafka name
(``org.apache.kafka.connect.json.JsonConverter``), and Python's for exceptions.

Pure of any runner: the worker's threads and the Spark runner build one ``ErrorHandler``
per task from the connector's config (``error_handler``). Does not own the record path
(``record_path``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.connect.api import ConnectException, RetriableException, SourceRecord

log = logging.getLogger(__name__)
T = TypeVar("T")

TASK_POLL = "TASK_POLL"
TASK_PUT = "TASK_PUT"
TRANSFORMATION = "TRANSFORMATION"
KEY_CONVERTER = "KEY_CONVERTER"
VALUE_CONVERTER = "VALUE_CONVERTER"
HEADER_CONVERTER = "HEADER_CONVERTER"
KAFKA_PRODUCE = "KAFKA_PRODUCE"
KAFKA_CONSUME = "KAFKA_CONSUME"
# Stages whose failures of any kind are tolerated; elsewhere only retriable ones.
TOLERATE_ANY = (TRANSFORMATION, KEY_CONVERTER, VALUE_CONVERTER, HEADER_CONVERTER)

RETRIES_DELAY_MIN_MS = 300
HEADER_PREFIX = "__connect.errors."
HEADER_TOPIC = HEADER_PREFIX + "topic"
HEADER_PARTITION = HEADER_PREFIX + "partition"
HEADER_OFFSET = HEADER_PREFIX + "offset"
HEADER_CONNECTOR_NAME = HEADER_PREFIX + "connector.name"
HEADER_TASK_ID = HEADER_PREFIX + "task.id"
HEADER_STAGE = HEADER_PREFIX + "stage"
HEADER_EXECUTING_CLASS = HEADER_PREFIX + "class.name"
HEADER_EXCEPTION = HEADER_PREFIX + "exception.class.name"
HEADER_EXCEPTION_MESSAGE = HEADER_PREFIX + "exception.message"
HEADER_EXCEPTION_STACK_TRACE = HEADER_PREFIX + "exception.stacktrace"


@dataclass(frozen=True)
class ConsumedMessage:
    """A record as a sink task's consumer read it, before conversion (the bytes a dead
    letter queue receives)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    timestamp_type: str = "CreateTime"
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


Original = ConsumedMessage | SourceRecord


@dataclass
class ErrorContext:
    """One failure: where, by which class, what, and the record it happened to."""

    task: tuple[str, int]
    stage: str
    executing_class: str
    error: BaseException
    original: Original | None
    attempts: int = 1


class ErrorReporter(Protocol):
    def report(self, context: ErrorContext) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class Skipped:
    """What ``ErrorHandler.run`` answers for a record it tolerated a failure of."""

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = Skipped()


def class_name(obj: Any) -> str:
    """A Python class's full name."""
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


class ErrorHandler:
    """Retries, tolerance and reporting for one task (Kafka's RetryWithToleranceOperator)."""

    def __init__(
        self,
        task: tuple[str, int],
        tolerate_all: bool = False,
        retry_timeout_ms: int = 0,
        retry_delay_max_ms: int = 60000,
        reporters: list[ErrorReporter] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.task = task
        self.tolerate_all = tolerate_all
        self.retry_timeout_ms = retry_timeout_ms
        self.retry_delay_max_ms = retry_delay_max_ms
        self.reporters = reporters or []
        self.clock = clock
        self.stopping = threading.Event()
        self.failures = 0

    def run(
        self,
        stage: str,
        executing_class: str,
        operation: Callable[[], T],
        original: Original | None,
    ) -> T | Skipped:
        """``operation()``'s answer; SKIPPED when it failed and the failure is tolerated;
        ConnectException when it is not."""
        try:
            return self._with_retries(operation)
        except Exception as exc:
            if stage not in TOLERATE_ANY and not isinstance(exc, RetriableException):
                self.failures += 1
                self.report(ErrorContext(self.task, stage, executing_class, exc, original))
                raise ConnectException("Unhandled exception in error handler") from exc
            self.failed(stage, executing_class, exc, original)
            return SKIPPED

    def failed(
        self, stage: str, executing_class: str, error: BaseException, original: Original | None
    ) -> None:
        """A failure already known (a sink task's errant record): reported, then the task
        fails unless ``errors.tolerance=all`` (Kafka's ``executeFailed``)."""
        self.failures += 1
        self.report(ErrorContext(self.task, stage, executing_class, error, original))
        if not self.tolerate_all:
            raise ConnectException("Tolerance exceeded in error handler") from error

    def _with_retries(self, operation: Callable[[], T]) -> T:
        timeout_ms = self.retry_timeout_ms
        deadline = float("inf") if timeout_ms < 0 else self.clock() + timeout_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            try:
                return operation()
            except RetriableException:
                if self.clock() >= deadline or self.stopping.is_set():
                    raise
                self._back_off(attempt, deadline)

    def _back_off(self, attempt: int, deadline: float) -> None:
        delay_ms = RETRIES_DELAY_MIN_MS << min(attempt - 1, 40)
        if delay_ms > self.retry_delay_max_ms:
            delay_ms = random.randrange(max(1, self.retry_delay_max_ms))
        delay_s = min(delay_ms / 1000, max(0.0, deadline - self.clock()))
        log.debug("task %s-%s: retrying in %.3f s", *self.task, delay_s)
        self.stopping.wait(delay_s)

    def report(self, context: ErrorContext) -> None:
        for reporter in self.reporters:
            try:
                reporter.report(context)
            except Exception:  # a reporter failing must not hide the record's failure
                log.exception("task %s-%s: reporting an error failed", *self.task)

    def flush(self) -> None:
        """Wait for what the reporters sent (before the task commits its offsets)."""
        for reporter in self.reporters:
            reporter.flush()

    def close(self) -> None:
        self.stopping.set()
        for reporter in self.reporters:
            reporter.close()


def _describe(original: Original | None) -> str:
    if isinstance(original, ConsumedMessage):
        text = (
            f"{{topic='{original.topic}', partition={original.partition}, offset={original.offset}"
        )
        if original.timestamp is not None:
            text += f", timestamp={original.timestamp}, timestampType={original.timestamp_type}"
        return ", where consumed record is " + text + "}"
    if original is not None:
        return f", where source record is = {original}"
    return ""


class LogReporter:
    """``errors.log.enable``: each failure logged at ERROR with its trace."""

    def __init__(self, include_messages: bool) -> None:
        self.include_messages = include_messages

    def message(self, context: ErrorContext) -> str:
        connector, task = context.task
        details = _describe(context.original) if self.include_messages else ""
        return (
            f"Error encountered in task {connector}-{task}. Executing stage "
            f"'{context.stage}' with class '{context.executing_class}'{details}."
        )

    def report(self, context: ErrorContext) -> None:
        log.error(self.message(context), exc_info=context.error)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def context_headers(context: ErrorContext) -> list[tuple[str, bytes | None]]:
    """Kafka's ``__connect.errors.*`` headers for a failure."""
    headers: list[tuple[str, bytes | None]] = []
    original = context.original
    if isinstance(original, ConsumedMessage):
        headers += [
            (HEADER_TOPIC, original.topic.encode()),
            (HEADER_PARTITION, str(original.partition).encode()),
            (HEADER_OFFSET, str(original.offset).encode()),
        ]
    connector, task = context.task
    error = context.error
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    headers += [
        (HEADER_CONNECTOR_NAME, connector.encode()),
        (HEADER_TASK_ID, str(task).encode()),
        (HEADER_STAGE, context.stage.encode()),
        (HEADER_EXECUTING_CLASS, context.executing_class.encode()),
        (HEADER_EXCEPTION, class_name(error).encode()),
        (HEADER_EXCEPTION_MESSAGE, str(error).encode()),
        (HEADER_EXCEPTION_STACK_TRACE, trace.encode()),
    ]
    return headers


class DeadLetterQueueReporter:
    """A sink's ``errors.deadletterqueue.topic.name``: each failed record's original bytes
    produced there, with the context headers when enabled."""

    def __init__(
        self,
        topic: str,
        admin_settings: Mapping[str, Any],
        producer_settings: Mapping[str, Any],
        replication_factor: int,
        context_headers_enabled: bool,
        flush_timeout_s: float = 30.0,
    ) -> None:
        self.topic = topic.strip()
        self.context_headers_enabled = context_headers_enabled
        self.flush_timeout_s = flush_timeout_s
        self.failures: list[str] = []
        _create_topic(admin_settings, self.topic, replication_factor)
        self.producer = Producer(dict(producer_settings))

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            log.error(
                "Could not produce message to dead letter queue. topic=%s: %s", self.topic, error
            )
            self.failures.append(str(error))

    def report(self, context: ErrorContext) -> None:
        original = context.original
        if not isinstance(original, ConsumedMessage):
            return  # a source record has no consumed bytes: Kafka's DLQ serves sinks only
        headers: list[tuple[str, str | bytes | None]] = list(original.headers)
        if self.context_headers_enabled:
            headers += context_headers(context)
        extra: dict[str, Any] = {}
        if original.timestamp is not None and original.timestamp >= 0:
            extra["timestamp"] = original.timestamp
        while True:
            try:
                self.producer.produce(
                    self.topic,
                    original.value,
                    original.key,
                    headers=headers,
                    on_delivery=self._delivered,
                    **extra,
                )
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)

    def flush(self) -> None:
        left = self.producer.flush(self.flush_timeout_s)
        if left or self.failures:
            reason = self.failures[0] if self.failures else f"{left} records not acknowledged"
            self.failures.clear()
            raise ConnectException(
                f"Could not produce to the dead letter queue {self.topic}: {reason}"
            )

    def close(self) -> None:
        self.producer.flush(self.flush_timeout_s)


def _create_topic(admin_settings: Mapping[str, Any], topic: str, replication_factor: int) -> None:
    """The dead letter queue topic, created with one partition when missing (Kafka's)."""
    admin = AdminClient(dict(admin_settings))
    if topic in admin.list_topics(timeout=30).topics:
        return
    log.error("Topic %s doesn't exist. Will attempt to create topic.", topic)
    futures = admin.create_topics([NewTopic(topic, 1, replication_factor)])
    try:
        futures[topic].result(30)
    except Exception as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise ConnectException(
                f"Could not initialize dead letter queue with topic={topic}: {exc}"
            ) from exc


def error_handler(
    task: tuple[str, int],
    settings: Mapping[str, Any],
    dead_letter_queue: Callable[[], ErrorReporter] | None = None,
) -> ErrorHandler:
    """The handler a task's connector settings (parsed, ``connector_config.parse``) ask
    for; ``dead_letter_queue`` makes the sink's reporter when a topic is named."""
    reporters: list[ErrorReporter] = []
    if settings.get("errors.log.enable"):
        reporters.append(LogReporter(bool(settings.get("errors.log.include.messages"))))
    queue = (settings.get("errors.deadletterqueue.topic.name") or "").strip()
    if dead_letter_queue is not None and queue:
        reporters.append(dead_letter_queue())
    return ErrorHandler(
        task,
        tolerate_all=str(settings.get("errors.tolerance", "none")).lower() == "all",
        retry_timeout_ms=int(settings.get("errors.retry.timeout", 0)),
        retry_delay_max_ms=int(settings.get("errors.retry.delay.max.ms", 60000)),
        reporters=reporters,
    )
