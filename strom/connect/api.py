"""The connector API in Python, shaped as Kafka Connect's: ``SourceConnector`` and
``SinkConnector`` (a connector declares its settings as a ``config_def.ConfigDef``, which
``/config/validate`` reads, and splits its work into ``task_configs(max_tasks)``),
``SourceTask`` (``poll()`` returns ``SourceRecord``s, each with its source partition and
offset) and ``SinkTask`` (``put()`` takes ``SinkRecord``s, ``flush()`` makes them durable
before their offsets are committed), and the contexts the runtime gives them.

Source partitions and offsets are JSON-able maps, as in Kafka (``{"filename": ...}``,
``{"position": 123}``); they are stored in the offsets topic under the connector's name.
Kafka's Java method names become Python's (``taskConfigs`` is ``task_configs``).

Does not own running tasks (``runtime``), data conversion (``converters``) or which
class a name means (``plugins``).
"""

from __future__ import annotations

import functools
import importlib.metadata
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.connect.config_def import ConfigDef, ConfigValue
from strom.connect.data import Schema, SchemaAndValue

SourcePartition = Mapping[str, Any]
SourceOffset = Mapping[str, Any]


@functools.cache
def strom_version() -> str:
    """The installed Strom's version: every built-in plugin's version."""
    try:
        return importlib.metadata.version("strom")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class ConnectException(Exception):
    """A connector's or task's failure; the worker reports it as FAILED with its trace."""


class RetriableException(ConnectException):
    """A failure that may pass if the operation is tried again (Kafka's
    ``RetriableException``): retried per ``errors.retry.timeout``, a sink's ``put``
    redelivered."""


class ConnectorContext:
    """What a running connector may ask of the worker."""

    def request_task_reconfiguration(self) -> None:
        """Ask for ``task_configs`` again (the connector's input changed)."""

    def raise_error(self, error: Exception) -> None:
        """Fail the connector with ``error``."""


class Connector(ABC):
    """A connector instance: configured once, it divides its work into task configs."""

    CONFIG_DEF = ConfigDef()

    def initialize(self, context: ConnectorContext) -> None:
        self.context = context

    def version(self) -> str:
        return strom_version()

    def config(self) -> ConfigDef:
        """The settings this connector declares (read by ``/config/validate``)."""
        return self.CONFIG_DEF

    def validate(self, props: Mapping[str, str]) -> dict[str, ConfigValue]:
        """Each declared setting's value and errors; override for checks across keys."""
        return self.config().validate_all(props)

    @abstractmethod
    def start(self, props: dict[str, str]) -> None:
        """Start with the connector's settings (already validated)."""

    @abstractmethod
    def task_class(self) -> type[Task]:
        """The task class this connector's tasks run."""

    @abstractmethod
    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """At most ``max_tasks`` task configs, one per task to run."""

    @abstractmethod
    def stop(self) -> None:
        """Release what ``start`` took."""


class SourceConnector(Connector):
    def exactly_once_support(self, config: Mapping[str, str]) -> bool | None:
        """Whether its tasks' records may be written exactly once, each batch a transaction
        with its offsets (KIP-618): True, False, or None when the connector does not say
        (then ``exactly.once.support=required`` is refused)."""
        return None

    def can_define_transaction_boundaries(self, config: Mapping[str, str]) -> bool:
        """Whether its tasks may define their own transactions through
        ``context.transaction_context()`` (KIP-618's ``transaction.boundary=connector``)."""
        return False

    def alter_offsets(
        self, config: Mapping[str, str], offsets: Mapping[str, tuple[SourcePartition, Any]]
    ) -> bool:
        """Check (and apply externally) offsets a user alters with the REST API
        (``{partition key: (partition, offset or None)}``); raise ConnectException to
        refuse them. True when the connector manages no offsets elsewhere."""
        return False


class SinkConnector(Connector):
    def alter_offsets(
        self, config: Mapping[str, str], offsets: Mapping[tuple[str, int], int | None]
    ) -> bool:
        """As ``SourceConnector.alter_offsets``, with ``{(topic, partition): offset}``."""
        return False


class Task(ABC):
    def version(self) -> str:
        return strom_version()

    @abstractmethod
    def start(self, props: dict[str, str]) -> None:
        """Start with the task's config (one of the connector's ``task_configs``)."""

    @abstractmethod
    def stop(self) -> None:
        """Stop; called from another thread while ``poll``/``put`` may be running."""


@dataclass
class SourceRecord:
    source_partition: SourcePartition | None
    source_offset: SourceOffset | None
    topic: str
    kafka_partition: int | None = None
    key_schema: Schema | None = None
    key: Any = None
    value_schema: Schema | None = None
    value: Any = None
    timestamp: int | None = None
    # Each header's value: a SchemaAndValue the header converter writes, or bytes (None)
    # written as they are.
    headers: list[tuple[str, SchemaAndValue | bytes | None]] = field(default_factory=list)


@dataclass
class SinkRecord:
    topic: str
    kafka_partition: int
    key_schema: Schema | None
    key: Any
    value_schema: Schema | None
    value: Any
    kafka_offset: int
    timestamp: int | None = None
    timestamp_type: str = "CreateTime"
    # Each header as the header converter read it (a transform may add bytes).
    headers: list[tuple[str, SchemaAndValue | bytes | None]] = field(default_factory=list)
    # Where the record was consumed, whatever transforms changed (Kafka's KIP-793).
    original_topic: str | None = None
    original_kafka_partition: int | None = None
    original_kafka_offset: int | None = None


class OffsetStorageReader(ABC):
    """A source task's committed offsets, by source partition."""

    @abstractmethod
    def offset(self, partition: SourcePartition) -> dict[str, Any] | None: ...

    def offsets(self, partitions: list[SourcePartition]) -> list[dict[str, Any] | None]:
        return [self.offset(partition) for partition in partitions]


class TransactionContext:
    """A source task's say over its transactions (KIP-618's ``transaction.boundary=
    connector``): ask that the open transaction be committed or aborted after the batch
    ``poll`` returned, or after one of its records. Thread-safe; the runtime acts on the
    requests once it has sent the records concerned."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batch: str | None = None
        self._records: dict[int, str] = {}

    def commit_transaction(self, record: SourceRecord | None = None) -> None:
        """Commit after the current batch, or after ``record`` (one ``poll`` returned)."""
        self._request("commit", record)

    def abort_transaction(self, record: SourceRecord | None = None) -> None:
        """Abort after the current batch, or after ``record``: the records of the open
        transaction are discarded and their offsets not committed."""
        self._request("abort", record)

    def _request(self, what: str, record: SourceRecord | None) -> None:
        with self._lock:
            if record is None:
                self._batch = what
            else:
                self._records[id(record)] = what

    def requested_after(self, record: SourceRecord) -> str | None:
        """ "commit", "abort" or None: what was asked for after this record (once)."""
        with self._lock:
            return self._records.pop(id(record), None)

    def requested_after_batch(self) -> str | None:
        with self._lock:
            what, self._batch = self._batch, None
            return what


@dataclass
class SourceTaskContext:
    task_config: dict[str, str]
    offset_storage_reader: OffsetStorageReader
    transactions: TransactionContext | None = None

    def configs(self) -> dict[str, str]:
        return self.task_config

    def transaction_context(self) -> TransactionContext | None:
        """The task's TransactionContext when its connector defines the transactions
        (exactly-once source support with ``transaction.boundary=connector``), else None,
        as Kafka's ``transactionContext()``."""
        return self.transactions


ErrantRecordReporter = Callable[["SinkRecord", BaseException], None]


@dataclass
class SinkTaskContext:
    task_config: dict[str, str]
    # Offsets the task asks to rewind to, (topic, partition) -> offset; the runtime seeks.
    rewinds: dict[tuple[str, int], int] = field(default_factory=dict)
    commit_requested: bool = False
    errant_reporter: ErrantRecordReporter | None = None

    def configs(self) -> dict[str, str]:
        return self.task_config

    def errant_record_reporter(self) -> ErrantRecordReporter | None:
        """Report a record ``put`` cannot write (Kafka's KIP-610): it goes where the
        connector's ``errors.*`` say (log, dead letter queue); with
        ``errors.tolerance=none`` the call raises and the task fails."""
        return self.errant_reporter

    def offset(self, topic: str, partition: int, offset: int) -> None:
        self.rewinds[(topic, partition)] = offset

    def request_commit(self) -> None:
        self.commit_requested = True


class SourceTask(Task):
    def initialize(self, context: SourceTaskContext) -> None:
        self.context = context

    @abstractmethod
    def poll(self) -> list[SourceRecord] | None:
        """Records read since the last call; None or [] when none (return within about
        a second, so that pause and stop are seen)."""

    def commit(self) -> None:
        """The offsets of the records polled so far are committed."""


class SinkTask(Task):
    def initialize(self, context: SinkTaskContext) -> None:
        self.context = context

    @abstractmethod
    def put(self, records: list[SinkRecord]) -> None:
        """Write (or buffer) records."""

    def flush(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Make everything ``put`` so far durable: its offsets are committed next."""

    def pre_commit(self, offsets: Mapping[tuple[str, int], int]) -> Mapping[tuple[str, int], int]:
        """The offsets (next to read) that may be committed; flushes by default."""
        self.flush(offsets)
        return offsets

    def open(self, partitions: list[tuple[str, int]]) -> None:
        """Partitions assigned to this task."""

    def close(self, partitions: list[tuple[str, int]]) -> None:
        """Partitions taken from this task."""
