"""PRINT topic [FROM BEGINNING] [INTERVAL n] [LIMIT n]: a topic's records as text lines,
as ksqlDB's ``/query`` endpoint writes them. A plain consumer, no query engine.

Owns guessing the key and value formats as ksqlDB's ``RecordFormatter`` does (each
record removes the formats it does not decode as, in the order AVRO, PROTOBUF, JSON,
JSON_SR, KAFKA_INT, KAFKA_BIGINT, KAFKA_DOUBLE, KAFKA_STRING; a record is shown in the
first left, its raw bytes when none is; a poll's records are all formatted, and again
when the first format is ruled out on the way), the ``Key format: ... / Value format:
...`` lines each time the guess changes, one line per record (``rowtime: 2026/01/02
03:04:05.678 Z, key: ..., value: ..., partition: N``; a null is ``<null>``), every
INTERVAL-th record, up to LIMIT, and an empty line whenever a poll brings nothing (so a
gone client is noticed). A key may be windowed (``TUMBLING(KAFKA_STRING)``: shown
``[key@start/-]``, a session's ``[key@start/end]``). The registry formats are
Confluent's wire format (a zero byte, a schema id the registry has, of that format):
AVRO shown as its record's JSON, PROTOBUF as the message's one-line text format,
JSON_SR as its JSON; they are never guessed without ``ksql.schema.registry.url``.

Reads all partitions from their start (FROM BEGINNING) or end, without a consumer
group offset of its own. Blocking (confluent-kafka, the registry client): run
``print_records`` on a worker thread; it stops when ``stopped`` is set.
"""

from __future__ import annotations

import datetime
import io
import json
import struct
import threading
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from strom.ksql.statements import PrintTopic

POLL_S = 1.0
FORMATS = (
    "AVRO", "PROTOBUF", "JSON", "JSON_SR", "KAFKA_INT", "KAFKA_BIGINT", "KAFKA_DOUBLE",
    "KAFKA_STRING",
)  # fmt: skip
REGISTRY_FORMATS = ("AVRO", "PROTOBUF", "JSON_SR")
WINDOW_KINDS = ("SESSION", "HOPPING", "TUMBLING")
_REGISTRY_TYPES = {"AVRO": "AVRO", "PROTOBUF": "PROTOBUF", "JSON_SR": "JSON"}


def _as_text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text else None


class RegistryDecoder:
    """Confluent's wire format decoded through the schema registry, for the guess: the
    schemas' types cached by id (a missing id too)."""

    def __init__(self, registry: Any, topic: str) -> None:
        self._registry = registry  # strom.ksql.registry_formats.RegistryFormats
        self._topic = topic
        self._types: dict[int, str | None] = {}

    def _schema_type(self, schema_id: int) -> str | None:
        if schema_id not in self._types:
            try:
                found = self._registry._registry().get_schema(schema_id)
                self._types[schema_id] = found.schema_type or "AVRO"
            except Exception:  # not there, or the registry's error: not this format
                self._types[schema_id] = None
        return self._types[schema_id]

    def decoded(self, fmt: str, data: bytes, is_key: bool) -> str | None:
        """``data`` shown in the registry format ``fmt``; None when it is not in it."""
        if len(data) < 5 or data[0] != 0:
            return None
        schema_id = struct.unpack(">I", data[1:5])[0]
        if self._schema_type(schema_id) != _REGISTRY_TYPES[fmt]:
            return None
        try:
            if fmt == "JSON_SR":
                return json.dumps(json.loads(data[5:]), separators=(",", ":"))
            if fmt == "PROTOBUF":
                return self._protobuf(schema_id, data[5:])
            return self._avro_text(schema_id, data[5:])
        except Exception:  # the decoder's: not this format
            return None

    def _protobuf(self, schema_id: int, body: bytes) -> str:
        from google.protobuf import text_format

        from strom.services.protobuf_schemas import decode_indexes

        indexes, at = decode_indexes(body, 0)
        message = self._registry.protobuf_class(schema_id, indexes)()
        message.ParseFromString(body[at:])
        return str(text_format.MessageToString(message, as_one_line=True))

    def _avro_text(self, schema_id: int, body: bytes) -> str:
        """The record read with its writer's schema as Strom's queries read it
        (``RegistryFormats.avro_schema``): a DATE, TIME or TIMESTAMP is its number (epoch
        days, ms of the day, epoch ms), as ksqlDB's PRINT shows it (Confluent's Avro
        deserializer without logical type conversions), any int32 of days too; a string
        shown as it is, anything else as the JSON of Avro's ``toString``."""
        import fastavro

        value = fastavro.schemaless_reader(
            io.BytesIO(body), self._registry.avro_schema(schema_id), None
        )
        return value if isinstance(value, str) else json.dumps(value, default=str)


def _decoded(fmt: str, data: bytes) -> str | None:
    """``data`` shown in the plain format ``fmt``; None when it does not decode so."""
    if fmt == "JSON":
        text = _as_text(data)
        if text is None:
            return None
        try:
            json.loads(text)
        except ValueError:
            return None
        return text
    if fmt == "KAFKA_INT":
        return str(struct.unpack(">i", data)[0]) if len(data) == 4 else None
    if fmt == "KAFKA_BIGINT":
        return str(struct.unpack(">q", data)[0]) if len(data) == 8 else None
    if fmt == "KAFKA_DOUBLE":
        return repr(struct.unpack(">d", data)[0]) if len(data) == 8 else None
    return _as_text(data)


class FormatGuess:
    """The formats a key or a value may still be in; the registry formats only with a
    ``RegistryDecoder``. A key may also be windowed, as ksqlDB guesses: ``SESSION(f)``
    (the key in ``f``, then the window's end and start, 8 bytes each), ``HOPPING(f)``
    and ``TUMBLING(f)`` (the key, then the window's start), each before ``f``."""

    def __init__(self, registry: RegistryDecoder | None = None, is_key: bool = False) -> None:
        plain = [f for f in FORMATS if registry is not None or f not in REGISTRY_FORMATS]
        self.possible = (
            [w for f in plain for w in (*(f"{k}({f})" for k in WINDOW_KINDS), f)]
            if is_key
            else plain
        )
        self._registry = registry
        self._is_key = is_key

    def _decoded(self, fmt: str, data: bytes) -> str | None:
        kind, _, inner = fmt.partition("(")
        if inner:  # a windowed key
            size = 16 if kind == "SESSION" else 8
            if len(data) < size:
                return None
            key = self._decoded(inner[:-1], data[:-size])
            if key is None:
                return None
            if kind == "SESSION":
                end, start = struct.unpack(">qq", data[-16:])
                return f"[{key}@{start}/{end}]" if 0 <= start <= end else None
            start = struct.unpack(">q", data[-8:])[0]
            return f"[{key}@{start}/-]" if 0 <= start < 2**63 - 1 else None  # a valid window
        if fmt in REGISTRY_FORMATS:
            assert self._registry is not None
            return self._registry.decoded(fmt, data, self._is_key)
        return _decoded(fmt, data)

    def show(self, data: bytes | None) -> str:
        if data is None:
            return "<null>"
        shown = None
        for fmt in list(self.possible):
            decoded = self._decoded(fmt, data)
            if decoded is None:
                self.possible.remove(fmt)
            elif shown is None:
                shown = decoded
        return shown if shown is not None else repr(data)[2:-1]

    def line(self, prefix: str) -> str:
        if not self.possible:
            return (
                f"{prefix} does not match any supported format. It may be a STRING with "
                "encoding other than UTF8, or some other format."
            )
        return prefix + " or ".join(self.possible)


def format_batch(
    keys: FormatGuess,
    values: FormatGuess,
    records: list[tuple[int, bytes | None, bytes | None, int | None]],
) -> list[str]:
    """The lines of a poll's records (timestamp, key, value, partition), as ksqlDB's
    formatter writes a batch: every record refines the guesses, and when the format the
    batch started with is ruled out on the way, the batch is written again in the one
    left first (a 4-byte string first shown as a KAFKA_INT is then shown as text)."""

    def written() -> list[str]:
        return [
            f"rowtime: {rowtime(timestamp)}, key: {keys.show(key)}, "
            f"value: {values.show(value)}, partition: {partition}"
            for timestamp, key, value, partition in records
        ]

    active_key, active_value = keys.possible[:1], values.possible[:1]
    lines = written()
    if set(active_key) <= set(keys.possible) and set(active_value) <= set(values.possible):
        return lines
    return written()


def rowtime(timestamp_ms: int) -> str:
    if timestamp_ms < 0:
        return "N/A"
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y/%m/%d %H:%M:%S.") + f"{timestamp_ms % 1000:03d} Z"


def print_records(
    client_config: dict[str, Any],
    statement: PrintTopic,
    partitions: list[int],
    emit: Callable[[str], None],
    stopped: threading.Event,
    registry: Any = None,
    *,
    format_lines: bool = True,
    failed: Callable[[str], None] | None = None,
) -> None:
    """Emit the lines of ``statement`` until LIMIT, or until ``stopped`` is set;
    ``registry`` (``strom.ksql.registry_formats.RegistryFormats``, None without a
    registry) decodes the registry formats. Without ``format_lines`` the ``Key format:
    / Value format:`` lines are left out (ksqlDB's websocket PRINT sends the records
    only); a consumer error goes to ``failed`` (by default emitted as a line)."""
    consumer = Consumer(
        {
            **client_config,
            "group.id": f"_strom-ksql-print-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    start = OFFSET_BEGINNING if statement.from_beginning else OFFSET_END
    consumer.assign([TopicPartition(statement.topic, p, start) for p in partitions])
    decoder = RegistryDecoder(registry, statement.topic) if registry is not None else None
    keys, values = FormatGuess(decoder, is_key=True), FormatGuess(decoder)
    shown_formats = ["", ""]
    polled = written = 0
    try:
        while not stopped.is_set():
            # One record waited for, then what else has arrived: consume(500, POLL_S)
            # would hold the first ones back until the timeout.
            first = consumer.poll(POLL_S)
            messages = [] if first is None else [first, *consumer.consume(499, 0)]
            records = [m for m in messages if m.error() is None]
            for message in messages:
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    (failed or emit)(error.str())
                    return
            if not records:
                emit("")
                continue
            lines = []
            batch = [(r.timestamp()[1], r.key(), r.value(), r.partition()) for r in records]
            for text in format_batch(keys, values, batch):
                polled += 1
                if (polled - 1) % statement.interval == 0:
                    written += 1
                    lines.append(text)
                if statement.limit is not None and written >= statement.limit:
                    break
            for index, line in enumerate(
                (keys.line("Key format: "), values.line("Value format: "))
            ):
                # each line again when its guess changes
                if format_lines and shown_formats[index] != line:
                    shown_formats[index] = line
                    emit(line)
            for line in lines:
                emit(line)
            if statement.limit is not None and written >= statement.limit:
                return
    finally:
        consumer.close()
