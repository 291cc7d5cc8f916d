"""The REST proxy's consumer instances (Confluent's v2 API): one confluent-kafka
consumer per instance, in its group, created, used and deleted over HTTP.

Owns the instances by (group, name): their format (json, binary, avro), subscription
or assignment, positions, fetching records and committing offsets, each call made on a
worker thread under the instance's lock (the client blocks, and one instance is one
client); and their expiry: an instance not used for ``consumer.instance.timeout.ms``
is closed and forgotten, leaving its group.

Does not own HTTP or the records' JSON form (``app``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

log = logging.getLogger(__name__)
FORMATS = ("json", "binary", "avro", "jsonschema", "protobuf")


class ProxyError(Exception):
    """An answer in Confluent's error format."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def instance_not_found() -> ProxyError:
    return ProxyError(404, 40403, "Consumer instance not found.")


@dataclass
class Instance:
    group: str
    name: str
    format: str
    consumer: Consumer
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    subscription: list[str] = field(default_factory=list)


class ConsumerInstances:
    def __init__(self, settings: dict[str, Any], timeout_ms: int = 300_000) -> None:
        self.settings = settings
        self.timeout_s = timeout_ms / 1000
        self.instances: dict[tuple[str, str], Instance] = {}
        self.lock = threading.Lock()

    def create(self, group: str, body: dict[str, Any]) -> Instance:
        name = str(body.get("name") or f"rest-consumer-{uuid.uuid4().hex[:12]}")
        form = str(body.get("format") or "binary").lower()
        if form not in FORMATS:
            raise ProxyError(422, 42204, f"Invalid format type {form}")
        reset = str(body.get("auto.offset.reset") or "latest")
        if reset not in ("earliest", "latest", "none"):
            raise ProxyError(422, 42204, f"Invalid value {reset} for auto.offset.reset")
        auto_commit = str(body.get("auto.commit.enable", "false")).lower() == "true"
        with self.lock:
            if (group, name) in self.instances:
                raise ProxyError(
                    409, 40902, f"Consumer with specified consumer ID {name} already exists in "
                    f"the specified consumer group {group}."
                )  # fmt: skip
            consumer = Consumer(
                {
                    **self.settings,
                    "group.id": group,
                    "client.id": name,
                    "auto.offset.reset": "error" if reset == "none" else reset,
                    "enable.auto.commit": auto_commit,
                    "fetch.queue.backoff.ms": 10,
                }
            )
            instance = Instance(group, name, form, consumer)
            self.instances[(group, name)] = instance
        return instance

    def get(self, group: str, name: str) -> Instance:
        instance = self.instances.get((group, name))
        if instance is None:
            raise instance_not_found()
        instance.last_used = time.monotonic()
        return instance

    def delete(self, group: str, name: str) -> None:
        with self.lock:
            instance = self.instances.pop((group, name), None)
        if instance is None:
            raise instance_not_found()
        with instance.lock:
            instance.consumer.close()

    def expire(self) -> list[tuple[str, str]]:
        """Close the instances idle longer than the timeout; their (group, name)."""
        now = time.monotonic()
        with self.lock:
            idle = [k for k, i in self.instances.items() if now - i.last_used > self.timeout_s]
            gone = [self.instances.pop(k) for k in idle]
        for instance in gone:
            log.info("consumer instance %s of %s expired", instance.name, instance.group)
            with instance.lock:
                try:
                    instance.consumer.close()
                except Exception as exc:
                    log.debug("closing an expired consumer: %s", exc)
        return idle

    def close(self) -> None:
        with self.lock:
            instances, self.instances = list(self.instances.values()), {}
        for instance in instances:
            with instance.lock:
                instance.consumer.close()

    # Operations (on worker threads) -------------------------------------------------------

    @staticmethod
    def subscribe(instance: Instance, topics: list[str]) -> None:
        with instance.lock:
            instance.consumer.subscribe(topics)
            instance.subscription = list(topics)

    @staticmethod
    def unsubscribe(instance: Instance) -> None:
        with instance.lock:
            instance.consumer.unsubscribe()
            instance.subscription = []

    @staticmethod
    def assign(instance: Instance, partitions: list[tuple[str, int]]) -> None:
        with instance.lock:
            instance.consumer.assign([TopicPartition(t, p) for t, p in partitions])

    @staticmethod
    def assignment(instance: Instance) -> list[tuple[str, int]]:
        with instance.lock:
            return [(tp.topic, tp.partition) for tp in instance.consumer.assignment()]

    @staticmethod
    def seek(instance: Instance, offsets: list[tuple[str, int, int]]) -> None:
        with instance.lock:
            assigned = {(tp.topic, tp.partition) for tp in instance.consumer.assignment()}
            for topic, partition, offset in offsets:
                if (topic, partition) not in assigned:
                    # Confluent answers 40403... for partitions not assigned; Kafka's
                    # consumer refuses a seek on them too.
                    raise ProxyError(
                        409, 40903, f"Partition {topic}-{partition} is not assigned to this "
                        "consumer instance"
                    )  # fmt: skip
                instance.consumer.seek(TopicPartition(topic, partition, offset))

    @staticmethod
    def seek_to(instance: Instance, partitions: list[tuple[str, int]], end: bool) -> None:
        ConsumerInstances.seek(
            instance, [(t, p, OFFSET_END if end else OFFSET_BEGINNING) for t, p in partitions]
        )

    @staticmethod
    def records(instance: Instance, timeout_ms: int, max_bytes: int) -> list[Any]:
        with instance.lock:
            out, size = [], 0
            deadline = time.monotonic() + timeout_ms / 1000
            while True:
                remaining = max(0.0, deadline - time.monotonic())
                batch = instance.consumer.consume(500, min(remaining, 0.5))
                for message in batch:
                    if message.error() is not None:
                        continue
                    out.append(message)
                    size += len(message.value() or b"") + len(message.key() or b"")
                if out or time.monotonic() >= deadline or size >= max_bytes:
                    return out

    @staticmethod
    def commit(instance: Instance, offsets: list[tuple[str, int, int]] | None) -> None:
        with instance.lock:
            if offsets:
                instance.consumer.commit(
                    offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False
                )
            else:
                try:
                    instance.consumer.commit(asynchronous=False)
                except Exception as exc:  # nothing consumed yet: nothing to commit
                    if "NO_OFFSET" not in str(exc):
                        raise

    @staticmethod
    def committed(instance: Instance, partitions: list[tuple[str, int]]) -> list[Any]:
        with instance.lock:
            return instance.consumer.committed(
                [TopicPartition(t, p) for t, p in partitions], timeout=15
            )
