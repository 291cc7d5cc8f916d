"""PRINT topic [FROM BEGINNING] [INTERVAL n] [LIMIT n]: a topic's records as text lines,
as ksqlDB's ``/query`` endpoint writes them. A plain consumer, no query engine.

Owns guessing the key and value formats as ksqlDB's ``RecordFormatter`` does (each
record removes the formats it does not decode as, in the order JSON, KAFKA_INT,
KAFKA_BIGINT, KAFKA_DOUBLE, KAFKA_STRING; a record is shown in the first left, its raw
bytes when none is), the ``Key format: ... / Value format: ...`` lines each time the
guess changes, one line per record (``rowtime: 2026/01/02 03:04:05.678 Z, key: ...,
value: ..., partition: N``; a null is ``<null>``), every INTERVAL-th record, up to
LIMIT, and an empty line whenever a poll brings nothing (so a gone client is noticed).
The schema registry formats are not guessed yet.

Reads all partitions from their start (FROM BEGINNING) or end, without a consumer
group offset of its own. Blocking (confluent-kafka): run ``print_records`` on a worker
thread; it stops when ``stopped`` is set.
"""

from __future__ import annotations

import datetime
import json
import struct
import threading
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from strom.ksql.statements import PrintTopic

POLL_S = 1.0
FORMATS = ("JSON", "KAFKA_INT", "KAFKA_BIGINT", "KAFKA_DOUBLE", "KAFKA_STRING")


def _as_text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text else None


def _decoded(fmt: str, data: bytes) -> str | None:
    """``data`` shown in ``fmt``; None when it does not decode so."""
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
    """The formats a key or a value may still be in."""

    def __init__(self) -> None:
        self.possible = list(FORMATS)

    def show(self, data: bytes | None) -> str:
        if data is None:
            return "<null>"
        shown = None
        for fmt in list(self.possible):
            decoded = _decoded(fmt, data)
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
) -> None:
    """Emit the lines of ``statement`` until LIMIT, or until ``stopped`` is set."""
    consumer = Consumer(
        {
            **client_config,
            "group.id": f"_strom-ksql-print-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    start = OFFSET_BEGINNING if statement.from_beginning else OFFSET_END
    consumer.assign([TopicPartition(statement.topic, p, start) for p in partitions])
    keys, values = FormatGuess(), FormatGuess()
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
                    emit(error.str())
                    return
            if not records:
                emit("")
                continue
            lines = []
            for record in records:
                text = (
                    f"rowtime: {rowtime(record.timestamp()[1])}, "
                    f"key: {keys.show(record.key())}, value: {values.show(record.value())}, "
                    f"partition: {record.partition()}"
                )
                polled += 1
                if (polled - 1) % statement.interval == 0:
                    written += 1
                    lines.append(text)
                if statement.limit is not None and written >= statement.limit:
                    break
            for index, line in enumerate(
                (keys.line("Key format: "), values.line("Value format: "))
            ):
                if shown_formats[index] != line:  # each line again when its guess changes
                    shown_formats[index] = line
                    emit(line)
            for line in lines:
                emit(line)
            if statement.limit is not None and written >= statement.limit:
                return
    finally:
        consumer.close()
