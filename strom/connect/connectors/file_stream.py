"""The FileStream connectors, as Kafka ships them
(``org.apache.kafka.connect.file.FileStreamSourceConnector`` and
``FileStreamSinkConnector``), with their keys: ``file`` (standard input or output when
unset), ``topic`` (the source's one topic), ``batch.size`` (the most lines a source poll
returns, 2000), and the sink's ``topics`` / ``topics.regex`` (the common sink keys).

The source reads lines (ended by ``\\n``, ``\\r\\n`` or ``\\r``) as UTF-8 strings, one
record each, with a null key, the value schema STRING and the time read as timestamp;
its source partition is ``{"filename": FILE}`` and its offset ``{"position": BYTES}``,
the byte position after the last line, as Kafka's: a restarted task seeks there. A line
not yet ended waits for its end. A file that does not exist yet is waited for. Standard
input keeps no offsets.

The sink appends each record's value and a newline: a string as it is, null as ``null``,
bytes as UTF-8 text, maps, lists and structs as compact JSON (Kafka prints Java's
``toString`` there). Each batch is written through at once; ``flush`` fsyncs the file,
before its offsets commit.

Runs in the worker (``runtime.InWorkerRunner``): the file is on the worker's machine.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any, cast

from strom.connect import config_def as cd
from strom.connect.api import (
    ConnectException,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SourceConnector,
    SourcePartition,
    SourceRecord,
    SourceTask,
    Task,
)
from strom.connect.converters import java_string
from strom.connect.data import STRING_SCHEMA, Struct

log = logging.getLogger(__name__)

FILENAME_FIELD = "filename"
POSITION_FIELD = "position"
DEFAULT_BATCH_SIZE = 2000
IDLE_WAIT_S = 0.2
READ_CHUNK = 64 * 1024

FILE_KEY = cd.ConfigKey(
    "file",
    cd.STRING,
    None,
    cd.HIGH,
    "Source filename. If not specified, the standard input will be used",
)


class FileStreamSourceConnector(SourceConnector):
    def exactly_once_support(self, config: Mapping[str, str]) -> bool | None:
        return True  # its offsets (a position in the file) commit with its records

    CONFIG_DEF = cd.ConfigDef(
        [
            FILE_KEY,
            cd.ConfigKey(
                "topic",
                cd.STRING,
                cd.REQUIRED,
                cd.HIGH,
                "The topic to publish data to",
                check=cd.non_empty,
            ),
            cd.ConfigKey(
                "batch.size",
                cd.INT,
                DEFAULT_BATCH_SIZE,
                cd.LOW,
                "The maximum number of records the source task can read from the file each "
                "time it is polled",
            ),
        ]
    )

    def start(self, props: dict[str, str]) -> None:
        self.settings = self.CONFIG_DEF.parse(props)
        log.info("file source reading from %s", self.settings["file"] or "standard input")

    def task_class(self) -> type[Task]:
        return FileStreamSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        config = {"topic": self.settings["topic"], "batch.size": str(self.settings["batch.size"])}
        if self.settings["file"]:
            config["file"] = self.settings["file"]
        return [config]  # one file, one reader: one task, as Kafka's

    def stop(self) -> None:
        pass

    def alter_offsets(
        self, config: Mapping[str, str], offsets: Mapping[str, tuple[SourcePartition, Any]]
    ) -> bool:
        if not config.get("file"):
            raise ConnectException(
                "Offsets cannot be modified if the 'file' configuration is unspecified. This is "
                "because stdin is used for input and offsets are not tracked."
            )
        for partition, offset in offsets.values():
            if offset is None:
                continue  # a tombstone clears any partition
            if POSITION_FIELD not in offset:
                raise ConnectException(
                    "Offset objects should either be null or contain the key 'position'"
                )
            position = offset[POSITION_FIELD]
            if not isinstance(position, int) or isinstance(position, bool):
                raise ConnectException(
                    "The value for the 'position' key in the offset is expected to be a Long value"
                )
            if position < 0:
                raise ConnectException(
                    "The value for the 'position' key in the offset should be a non-negative value"
                )
            if FILENAME_FIELD not in partition:
                raise ConnectException("Partition objects should contain the key 'filename'")
        return True


class FileStreamSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        self.filename = props.get("file") or None
        self.topic = props["topic"]
        self.batch_size = int(props.get("batch.size", DEFAULT_BATCH_SIZE))
        self.stream: io.BufferedReader | None = None
        self.position = 0
        self.pending = b""
        self.stopping = threading.Event()

    def _open(self) -> bool:
        if self.filename is None:
            self.stream = cast(io.BufferedReader, sys.stdin.buffer)
            return True
        try:
            stream = open(self.filename, "rb")  # noqa: SIM115 - kept open across polls
        except FileNotFoundError:
            log.warning("file %s not found for the file source; waiting for it", self.filename)
            return False
        offset = self.context.offset_storage_reader.offset({FILENAME_FIELD: self.filename})
        if offset is not None:
            position = offset.get(POSITION_FIELD)
            if not isinstance(position, int) or position < 0:
                stream.close()
                raise ConnectException(f"Unexpected offset for {self.filename}: {offset}")
            log.info("file source resuming %s at byte %d", self.filename, position)
            stream.seek(position)
            self.position = position
        self.stream = stream
        return True

    def poll(self) -> list[SourceRecord] | None:
        if self.stream is None and not self._open():
            self.stopping.wait(IDLE_WAIT_S * 5)
            return None
        assert self.stream is not None
        records: list[SourceRecord] = []
        while len(records) < self.batch_size and not self.stopping.is_set():
            line, size = self._next_line()
            if line is None:
                data = self.stream.read1(READ_CHUNK)
                if not data:
                    break
                self.pending += data
                continue
            self.position += size
            records.append(
                SourceRecord(
                    source_partition=self._partition(),
                    source_offset=None
                    if self.filename is None
                    else {POSITION_FIELD: self.position},
                    topic=self.topic,
                    value_schema=STRING_SCHEMA,
                    value=line,
                    timestamp=int(time.time() * 1000),
                )
            )
        if self.stopping.is_set():
            self._close()
        elif not records:
            self.stopping.wait(IDLE_WAIT_S)
        return records

    def _partition(self) -> dict[str, str] | None:
        return None if self.filename is None else {FILENAME_FIELD: self.filename}

    def _next_line(self) -> tuple[str | None, int]:
        """The next whole line in the buffer and the bytes it took (with its end)."""
        buffer = self.pending
        newline = buffer.find(b"\n")
        carriage = buffer.find(b"\r")
        if carriage != -1 and (newline == -1 or carriage < newline):
            if carriage + 1 == len(buffer):
                return None, 0  # a \r last: a \n may follow
            end = carriage + 2 if buffer[carriage + 1 : carriage + 2] == b"\n" else carriage + 1
            text = buffer[:carriage]
        elif newline != -1:
            end = newline + 1
            text = buffer[:newline]
        else:
            return None, 0
        self.pending = buffer[end:]
        return text.decode("utf-8", "replace"), end

    def stop(self) -> None:
        self.stopping.set()

    def _close(self) -> None:
        if self.stream is not None and self.filename is not None:
            self.stream.close()
        self.stream = None


class FileStreamSinkConnector(SinkConnector):
    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "file",
                cd.STRING,
                None,
                cd.HIGH,
                "Destination filename. If not specified, the standard output will be used",
            )
        ]
    )

    def start(self, props: dict[str, str]) -> None:
        self.settings = self.CONFIG_DEF.parse(props)

    def task_class(self) -> type[Task]:
        return FileStreamSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        config = {"file": self.settings["file"]} if self.settings["file"] else {}
        return [dict(config) for _ in range(max_tasks)]

    def stop(self) -> None:
        pass

    def alter_offsets(
        self, config: Mapping[str, str], offsets: Mapping[tuple[str, int], int | None]
    ) -> bool:
        return True  # the file sink keeps no offsets of its own


def render_line(value: Any) -> str:
    """A sink record's value as the line the file sink writes."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Struct | dict | list):
        return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=False, default=str)
    return java_string(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return {name: _plain(item) for name, item in value.values.items()}
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


class FileStreamSinkTask(SinkTask):
    def start(self, props: dict[str, str]) -> None:
        self.filename = props.get("file") or None
        if self.filename is None:
            self.out: IO[str] = sys.stdout
        else:
            try:
                self.out = open(self.filename, "a", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise ConnectException(
                    f"Couldn't find or create file '{self.filename}' for FileStreamSinkTask: "
                    f"{exc.strerror}"
                ) from None

    def put(self, records: list[SinkRecord]) -> None:
        self.out.write("".join(render_line(record.value) + "\n" for record in records))
        self.out.flush()  # in the file at once, as Kafka's unbuffered stream; fsync on flush

    def flush(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self.out.flush()
        if self.filename is not None:
            os.fsync(self.out.fileno())

    def stop(self) -> None:
        if self.filename is not None and not self.out.closed:
            self.out.close()
