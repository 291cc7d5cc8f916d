"""One of the worker's compacted topics (configs, offsets, status), kept in memory: read
by a thread of its own from the start of every partition, each record handed to the
owner's ``apply(key, value)``, and written to with an idempotent producer (acks=all).

Owns creating the topic when it is missing (its partitions and replication factor as the
worker's settings say, -1 for the broker's default, ``cleanup.policy=compact``) and
refusing one that is not compacted (as Kafka Connect does: deleting old configs or
offsets would lose them), reading to the end (at start, so a restarted worker knows
everything written before it, and after a write that must be seen back), and keyed
records spread over partitions as Java's producer spreads them (murmur2), so that Kafka
Connect workers and Strom's agree on an offset's partition.

Does not own what records mean (``stores``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0


class TopicLogError(Exception):
    """The topic cannot be created, read or written; one line for the user."""


class TopicLog:
    def __init__(
        self,
        settings: dict[str, Any],
        topic: str,
        partitions: int,
        replication_factor: int,
        apply: Callable[[bytes | None, bytes | None], None],
        setting_name: str,
    ) -> None:
        """``settings``: the Kafka client's; ``setting_name``: the worker property naming
        the topic (``config.storage.topic``...), for messages."""
        self.settings = settings
        self.topic = topic
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.apply = apply
        self.setting_name = setting_name
        self.positions: dict[int, int] = {}  # partition -> next offset to apply
        self._progress = threading.Condition()
        self._stopped = threading.Event()
        self._errors: list[str] = []
        self.admin = AdminClient(settings)
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Create the topic if missing, then read it to its end."""
        partition_count = self._ensure_topic()
        self.producer = Producer(
            {
                **self.settings,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "partitioner": "murmur2_random",
            }
        )
        self.consumer = Consumer(
            {
                **self.settings,
                "group.id": f"strom-connect-reader-{self.topic}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "fetch.queue.backoff.ms": 10,
            }
        )
        self.consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(partition_count)]
        )
        self.positions = dict.fromkeys(range(partition_count), 0)
        self._thread = threading.Thread(
            target=self._read_forever, daemon=True, name=f"read {self.topic}"
        )
        self._thread.start()
        self.read_to_end()

    def _ensure_topic(self) -> int:
        try:
            metadata = self.admin.list_topics(timeout=TIMEOUT_S)
        except Exception as exc:
            raise TopicLogError(f"cannot reach the Kafka cluster: {exc}") from None
        existing = metadata.topics.get(self.topic)
        if existing is None or existing.error is not None:
            topic = NewTopic(
                self.topic,
                self.partitions,
                self.replication_factor,
                config={"cleanup.policy": "compact"},
            )
            try:
                self.admin.create_topics([topic], request_timeout=TIMEOUT_S)[self.topic].result()
                log.info("created topic %s (%s)", self.topic, self.setting_name)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise TopicLogError(
                        f"cannot create topic {self.topic} ({self.setting_name}): {exc}"
                    ) from None
            return self._partition_count()
        self._check_compacted()
        return len(existing.partitions)

    def _partition_count(self) -> int:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            topic = self.admin.list_topics(self.topic, timeout=TIMEOUT_S).topics.get(self.topic)
            if topic is not None and topic.error is None and topic.partitions:
                return len(topic.partitions)
            time.sleep(0.1)
        raise TopicLogError(f"topic {self.topic} ({self.setting_name}) has no partitions")

    def _check_compacted(self) -> None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, self.topic)
        try:
            configs = self.admin.describe_configs([resource], request_timeout=TIMEOUT_S)
            policy = configs[resource].result()["cleanup.policy"].value or ""
        except Exception as exc:
            log.warning("cannot check the cleanup.policy of %s: %s", self.topic, exc)
            return
        if "compact" not in policy.split(","):
            raise TopicLogError(
                f"Topic '{self.topic}' supplied via the '{self.setting_name}' property is "
                f"required to have 'cleanup.policy=compact' to guarantee consistency and "
                f"durability of data, but found the topic currently has "
                f"'cleanup.policy={policy}'"
            )

    def _read_forever(self) -> None:
        assert self.consumer is not None
        while not self._stopped.is_set():
            try:
                messages = self.consumer.consume(500, 0.1)
            except Exception as exc:  # the consumer closed under us at stop
                if not self._stopped.is_set():
                    log.warning("reading %s failed: %s", self.topic, exc)
                return
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        log.warning("reading %s: %s", self.topic, error)
                    continue
                partition, offset = int(message.partition() or 0), int(message.offset() or 0)
                try:
                    self.apply(message.key(), message.value())
                except Exception:  # a record another writer spoilt must not stop the reader
                    log.exception("cannot apply a record of %s at %s", self.topic, offset)
                with self._progress:
                    self.positions[partition] = offset + 1
            self._note_positions()

    def _note_positions(self) -> None:
        """Where the reader is in each partition, past the markers of transactions too
        (the offsets topic holds source tasks' transactions, KIP-618), which no record
        read says."""
        assert self.consumer is not None
        try:
            reached = self.consumer.position(
                [TopicPartition(self.topic, p) for p in self.positions]
            )
        except Exception:  # the consumer closed under us at stop
            return
        with self._progress:
            for tp in reached:
                if tp.offset >= 0 and tp.offset > self.positions.get(tp.partition, 0):
                    self.positions[tp.partition] = tp.offset
            self._progress.notify_all()

    def end_offsets(self) -> dict[int, int]:
        """Each partition's last stable offset: the end a read_committed reader (this one)
        comes to while a source task's transaction is open."""
        requests = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in self.positions}
        try:
            futures = self.admin.list_offsets(
                requests, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=TIMEOUT_S
            )
            return {tp.partition: future.result().offset for tp, future in futures.items()}
        except Exception as exc:
            raise TopicLogError(f"cannot read the end offsets of {self.topic}: {exc}") from None

    def read_to_end(self, timeout_s: float = TIMEOUT_S) -> None:
        """Wait until every record written before this call is applied."""
        ends = self.end_offsets()
        deadline = time.monotonic() + timeout_s
        with self._progress:
            while any(self.positions.get(p, 0) < end for p, end in ends.items()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TopicLogError(f"timed out reading {self.topic} to its end")
                self._progress.wait(min(remaining, 0.2))

    def send(self, key: bytes, value: bytes | None) -> None:
        """Produce a record; its failure is reported by the next ``flush``."""
        assert self.producer is not None

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                self._errors.append(str(error))

        self.producer.produce(self.topic, value=value, key=key, on_delivery=delivered)
        self.producer.poll(0)

    def flush(self, timeout_s: float = TIMEOUT_S) -> None:
        """Wait until every record sent is acknowledged; TopicLogError when one failed."""
        assert self.producer is not None
        left = self.producer.flush(timeout_s)
        if left:
            raise TopicLogError(f"timed out writing {left} records to {self.topic}")
        if self._errors:
            error, self._errors = self._errors[0], []
            raise TopicLogError(f"cannot write to {self.topic}: {error}")

    def write(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Write ``records`` and return once this worker has read them back."""
        for key, value in records:
            self.send(key, value)
        self.flush()
        self.read_to_end()

    def close(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.consumer is not None:
            self.consumer.close()
        if self.producer is not None:
            self.producer.flush(5)
