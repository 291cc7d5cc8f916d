"""The path of one record through a task, as Kafka's WorkerSinkTask and WorkerSourceTask
take it, each step under the task's error handling (``errors.ErrorHandler``):

- sink: the consumed bytes (``errors.ConsumedMessage``) through the key converter, the
  value converter, then the transforms in order, into the ``SinkRecord`` the task is
  given (its ``original_*`` fields where it was consumed);
- source: the task's ``SourceRecord`` through the transforms, then the key and value
  converters, into the ``ProducedMessage`` to send.

A record a transform drops, or whose failure is tolerated (``errors.tolerance=all``),
comes out as None: the runner still counts its offset as processed, as Kafka does. Pure
functions of a record and the task's converters, stages and handler, so the worker's
threads and the Spark runner share them (``RecordPath.for_task`` builds one from a
connector's config).

Does not own consuming, producing or offsets (the runners).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from strom.connect.api import SinkRecord, SourceRecord
from strom.connect.connector_config import make_converter, make_header_converter, parse
from strom.connect.converters import (
    Converter,
    HeaderConverter,
    SimpleHeaderConverter,
    header_converter_class,
    header_converter_names,
)
from strom.connect.data import SchemaAndValue
from strom.connect.errors import (
    HEADER_CONVERTER,
    KEY_CONVERTER,
    TASK_PUT,
    TRANSFORMATION,
    VALUE_CONVERTER,
    ConsumedMessage,
    ErrorHandler,
    ErrorReporter,
    Original,
    Skipped,
    error_handler,
)
from strom.connect.plugins import Plugins
from strom.connect.transforms.base import ConnectRecord
from strom.connect.transforms.chain import TransformationStage, build_stages

T = TypeVar("T")
SINK_TASK_CLASS = "org.apache.kafka.connect.sink.SinkTask"  # what Kafka reports for put


class _Dropped(Exception):
    """A record a transform dropped or whose failure was tolerated: it goes no further."""


@dataclass(frozen=True)
class ProducedMessage:
    """A source record as bytes, ready for the producer."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _plugin_name(plugins: Plugins, converter: Converter) -> str:
    """The class name errors report for a converter (Kafka's where it has one)."""
    for plugin in plugins.of_kinds(("converter",)):
        if plugin.cls is type(converter):
            return plugin.listed_name
    return f"{type(converter).__module__}.{type(converter).__qualname__}"


@dataclass
class RecordPath:
    """A task's converters, transforms and error handling, applied record by record."""

    key_converter: Converter
    value_converter: Converter
    stages: list[TransformationStage]
    errors: ErrorHandler
    key_converter_name: str = "key converter"
    value_converter_name: str = "value converter"
    header_converter: HeaderConverter = field(default_factory=SimpleHeaderConverter)

    @classmethod
    def for_task(
        cls,
        task: tuple[str, int],
        connector_props: Mapping[str, str],
        worker_props: Mapping[str, str],
        plugins: Plugins,
        dead_letter_queue: Callable[[], ErrorReporter] | None = None,
    ) -> RecordPath:
        """The path a connector's config asks for (converters as ``make_converter`` picks
        them, ``transforms``, ``errors.*``); ``dead_letter_queue`` builds a sink's queue."""
        key_converter = make_converter("key", connector_props, worker_props, plugins)
        value_converter = make_converter("value", connector_props, worker_props, plugins)
        settings = parse(connector_props, plugins.connector(connector_props["connector.class"]))
        return cls(
            key_converter,
            value_converter,
            build_stages(connector_props, plugins),
            error_handler(task, settings, dead_letter_queue),
            _plugin_name(plugins, key_converter),
            _plugin_name(plugins, value_converter),
            make_header_converter(connector_props, worker_props),
        )

    def _step(
        self, stage: str, executing_class: str, operation: Callable[[], T], original: Original
    ) -> T:
        """``operation()`` under the error handling; _Dropped when its failure is tolerated."""
        result = self.errors.run(stage, executing_class, operation, original)
        if isinstance(result, Skipped):
            raise _Dropped
        return result

    def _transformed(self, record: ConnectRecord, original: Original) -> Any:
        current: ConnectRecord | None = record
        for stage in self.stages:
            if current is None:
                raise _Dropped
            current = self._step(
                TRANSFORMATION, stage.class_name, partial(stage.apply, current), original
            )
        if current is None:
            raise _Dropped
        return current

    def transform(self, record: ConnectRecord, original: Original) -> Any:
        """``record`` through the stages; None when dropped or its failure tolerated."""
        try:
            return self._transformed(record, original)
        except _Dropped:
            return None

    def sink_record(self, message: ConsumedMessage) -> SinkRecord | None:
        """A consumed message as the record the sink task is given, or None."""
        topic = message.topic
        keys, values = self.key_converter, self.value_converter
        try:
            key_schema, key = self._step(
                KEY_CONVERTER,
                self.key_converter_name,
                partial(keys.to_connect_data, topic, message.key),
                message,
            )
            value_schema, value = self._step(
                VALUE_CONVERTER,
                self.value_converter_name,
                partial(values.to_connect_data, topic, message.value),
                message,
            )
            headers = self._step(
                HEADER_CONVERTER,
                self.header_converter_name,
                partial(self._read_headers, topic, message.headers),
                message,
            )
            record = SinkRecord(
                topic=topic,
                kafka_partition=message.partition,
                key_schema=key_schema,
                key=key,
                value_schema=value_schema,
                value=value,
                kafka_offset=message.offset,
                timestamp=message.timestamp,
                timestamp_type=message.timestamp_type,
                headers=headers,
                original_topic=topic,
                original_kafka_partition=message.partition,
                original_kafka_offset=message.offset,
            )
            transformed: SinkRecord = self._transformed(record, message)
            return transformed
        except _Dropped:
            return None

    def produced_message(self, record: SourceRecord) -> ProducedMessage | None:
        """A source task's record as the bytes to produce, or None."""
        keys, values = self.key_converter, self.value_converter
        try:
            final: SourceRecord = self._transformed(record, record)
            key = self._step(
                KEY_CONVERTER,
                self.key_converter_name,
                partial(keys.from_connect_data, final.topic, final.key_schema, final.key),
                record,
            )
            value = self._step(
                VALUE_CONVERTER,
                self.value_converter_name,
                partial(values.from_connect_data, final.topic, final.value_schema, final.value),
                record,
            )
            headers = self._step(
                HEADER_CONVERTER,
                self.header_converter_name,
                partial(self.written_headers, final.topic, final.headers),
                record,
            )
        except _Dropped:
            return None
        return ProducedMessage(
            final.topic, final.kafka_partition, key, value, final.timestamp, headers
        )

    @property
    def header_converter_name(self) -> str:
        converter = self.header_converter
        for cls, kafka in zip(
            map(header_converter_class, header_converter_names()),
            header_converter_names(),
            strict=True,
        ):
            if cls is type(converter):
                return kafka
        return f"{type(converter).__module__}.{type(converter).__qualname__}"

    def written_headers(
        self, topic: str, headers: Sequence[tuple[str, Any]]
    ) -> list[tuple[str, bytes | None]]:
        """A record's headers as bytes: a typed header (``SchemaAndValue``) through the
        header converter; bytes (a header already serialised) as they are."""
        return [
            (
                key,
                self.header_converter.from_connect_header(topic, key, value.schema, value.value)
                if isinstance(value, SchemaAndValue)
                else value,
            )
            for key, value in headers
        ]

    def _read_headers(
        self, topic: str, headers: Sequence[tuple[str, bytes | None]]
    ) -> list[tuple[str, Any]]:
        """Consumed headers as the sink task sees them: each a ``SchemaAndValue`` through the
        header converter."""
        return [
            (key, self.header_converter.to_connect_header(topic, key, value))
            for key, value in headers
        ]

    def errant_reporter(
        self, originals: Mapping[tuple[str, int, int], ConsumedMessage]
    ) -> Callable[[SinkRecord, BaseException], None] | None:
        """A sink task's ``errant_record_reporter`` over the batch it was given
        (``originals`` by where each record was consumed); None, as in Kafka, when the
        connector neither logs errors nor has a dead letter queue."""
        if not self.errors.reporters:
            return None

        def report(record: SinkRecord, error: BaseException) -> None:
            where = (
                record.original_topic or record.topic,
                record.original_kafka_partition
                if record.original_kafka_partition is not None
                else record.kafka_partition,
                record.original_kafka_offset
                if record.original_kafka_offset is not None
                else record.kafka_offset,
            )
            original = originals.get(where) or self._serialized(record)
            self.errors.failed(TASK_PUT, SINK_TASK_CLASS, error, original)

        return report

    def _serialized(self, record: SinkRecord) -> ConsumedMessage:
        """A record the task made itself, as bytes (Kafka's reporter converts it)."""
        return ConsumedMessage(
            record.topic,
            record.kafka_partition,
            record.kafka_offset,
            self.key_converter.from_connect_data(record.topic, record.key_schema, record.key),
            self.value_converter.from_connect_data(record.topic, record.value_schema, record.value),
            record.timestamp,
            record.timestamp_type,
            self.written_headers(record.topic, record.headers),
        )

    def close(self) -> None:
        for stage in self.stages:
            stage.close()
        self.errors.close()
