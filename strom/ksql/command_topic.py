"""The command topic: where a ksql server keeps the statements that changed its
metastore, as ksqlDB does, so a restarted server (or another with the same
``ksql.service.id``) rebuilds its streams, tables and types by replaying them.

The topic is ``_confluent-ksql-<ksql.service.id>_command_topic``: one partition,
kept forever (``retention.ms=-1``), created at start when missing with
``ksql.internal.topic.replicas``. Each record is one command, as ksqlDB writes it:
the key the command id (``stream/`NAME`/create``, ``table/`NAME`/drop``,
``type/NAME/create``...), the value JSON ``{"statement": ..., "streamsProperties":
{...}, "originalProperties": {...}, "version": ...}``. ksqlDB also stores its compiled
plan under ``plan``; Strom replays the statement text instead, with the
``originalProperties`` (the server's format defaults when it was accepted) so a
replay decides as the first run did. A record's offset is the command's sequence
number.

Owns the topic's creation, reading it (from the start to its end, then each command
appended after, by this server or another with the same service id), its end (what a
server must have applied before it executes a request), and appending a
command (acknowledged by all in-sync replicas before the statement answers). Runs
confluent-kafka's blocking clients: call it from a worker thread.

Does not own parsing or applying the commands.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from strom.ksql.config import KsqlServerConfig
from strom.ksql.kafka_calls import TIMEOUT_S, KafkaCallError, create_topic, produce_and_wait

log = logging.getLogger(__name__)
COMMAND_VERSION = 18  # ksqlDB 0.29's Command.VERSION


class CommandTopicError(Exception):
    """The command topic cannot be created, read or written; one line."""


@dataclass(frozen=True)
class Command:
    command_id: str
    statement: str
    streams_properties: dict[str, Any] = field(default_factory=dict)
    original_properties: dict[str, str] = field(default_factory=dict)
    sequence_number: int = -1

    def value_json(self) -> bytes:
        return json.dumps(
            {
                "statement": self.statement,
                "streamsProperties": self.streams_properties,
                "originalProperties": self.original_properties,
                "version": COMMAND_VERSION,
            }
        ).encode()


class CommandTopic:
    def __init__(self, config: KsqlServerConfig, admin: AdminClient) -> None:
        self.name = config.command_topic
        self._config = config
        self._admin = admin
        self._producer = Producer(
            config.client_config(**{"acks": "all", "enable.idempotence": True, "linger.ms": 0})
        )
        self._watermarks: Consumer | None = None  # reads the topic's end, never joins

    def ensure_exists(self) -> None:
        if self.name in self._admin.list_topics(timeout=TIMEOUT_S).topics:
            return
        new = NewTopic(
            self.name,
            num_partitions=1,
            replication_factor=self._config.internal_topic_replicas,
            config={"retention.ms": "-1", "cleanup.policy": "delete"},
        )
        try:
            create_topic(self._admin, new)
        except KafkaCallError as exc:
            raise CommandTopicError(f"cannot create the command topic {self.name}: {exc}") from None

    def end_offset(self) -> int:
        """The offset after the last command written (by any server)."""
        if self._watermarks is None:
            self._watermarks = Consumer(
                self._config.client_config(**{"group.id": f"{self.name}-end"})
            )
        try:
            _, end = self._watermarks.get_watermark_offsets(
                TopicPartition(self.name, 0), timeout=TIMEOUT_S
            )
        except KafkaException as exc:
            raise CommandTopicError(f"cannot read the end of {self.name}: {exc}") from None
        return int(end)

    def reader(self) -> CommandReader:
        """A reader of the commands from the start of the topic."""
        return CommandReader(self._config, self.name)

    def append(self, command: Command) -> int:
        """Write ``command``; its sequence number (the record's offset)."""
        try:
            return produce_and_wait(
                self._producer,
                self.name,
                command.command_id.encode(),
                command.value_json(),
                partition=0,
            )
        except KafkaCallError as exc:
            raise CommandTopicError(
                f"cannot write to the command topic {self.name}: {exc}"
            ) from None

    def close(self) -> None:
        self._producer.flush(TIMEOUT_S)
        if self._watermarks is not None:
            self._watermarks.close()


class CommandReader:
    """Reads the command topic in order: up to its end once (``read_to_end``), then the
    commands appended after (``poll``), by this server or another with the same
    ``ksql.service.id``. One thread at a time."""

    def __init__(self, config: KsqlServerConfig, topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer(
            config.client_config(
                **{
                    "group.id": f"_confluent-ksql-{config.service_id}_command_reader",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                }
            )
        )
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.position = 0

    def read_to_end(self) -> list[Command]:
        _, end = self._consumer.get_watermark_offsets(
            TopicPartition(self.topic, 0), timeout=TIMEOUT_S
        )
        commands: list[Command] = []
        while self.position < end:
            message = self._consumer.poll(TIMEOUT_S)
            if message is None:
                raise CommandTopicError(f"timed out reading the command topic {self.topic}")
            commands.extend(self._decoded(message))
        return commands

    def poll(self, timeout_s: float) -> list[Command]:
        message = self._consumer.poll(timeout_s)
        return [] if message is None else self._decoded(message)

    def _decoded(self, message: Any) -> list[Command]:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return []
            raise CommandTopicError(f"cannot read {self.topic}: {error.str()}")
        offset = message.offset() or 0
        self.position = offset + 1
        command = _decode(message.key(), message.value(), offset)
        return [] if command is None else [command]

    def close(self) -> None:
        self._consumer.close()


def _decode(key: bytes | None, value: bytes | None, offset: int) -> Command | None:
    """A command record; None (logged) for one that is not a command."""
    try:
        body = json.loads(value or b"")
        return Command(
            command_id=(key or b"").decode(),
            statement=str(body["statement"]),
            streams_properties=dict(body.get("streamsProperties") or {}),
            original_properties=dict(body.get("originalProperties") or {}),
            sequence_number=offset,
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        log.warning("command topic record at offset %d is not a command, skipped: %s", offset, exc)
        return None
