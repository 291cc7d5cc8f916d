"""The registry's Kafka side: the ``_schemas`` topic read into the state on a thread of
its own, and changes written to it.

Owns creating ``_schemas`` when it is missing (one partition, compacted, replicated up
to three times as the cluster allows), the reader (a consumer assigned the partition
from its start, applying every record to ``store.RegistryState`` under the state's
lock and noting the next offset), waiting until everything written so far is read
(at start, and after each write: a registration answers once the registry reads it
back, so every instance agrees and a restart loses nothing), and the idempotent
producer of changes (acks=all). A change (``change``) is checked once read back: when
the state ignored one of its records, because a record another writer put first holds
the id or version it claims, it is planned again from the state read since and written
again, so an answer is always what every reader holds, however many instances write.

Does not own what records mean (``store``) or HTTP (``app``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ListOffsetsResultInfo, NewTopic, OffsetSpec

from strom.services.schema_registry.store import Record, RegistryError, RegistryState

log = logging.getLogger(__name__)
TOPIC = "_schemas"
TIMEOUT_S = 30.0
PLANS = 5  # a change is planned again at most this many times when its claims lose
Result = TypeVar("Result")


class SchemasLog:
    def __init__(self, settings: dict[str, Any], topic: str = TOPIC) -> None:
        self.settings = settings
        self.topic = topic
        self.state = RegistryState()
        self.lock = threading.RLock()  # the state's: the reader writes, requests read
        # One change at a time from this instance; re-entered by a caller that checks
        # something before ``change`` under it.
        self.write_lock = threading.RLock()
        self.applied = 0  # the offset after the last record applied
        self.lost: set[int] = set()  # offsets of claims ``apply`` ignored, until checked
        self._progress = threading.Condition(self.lock)
        self._stopped = threading.Event()
        self.admin = AdminClient(self.settings)
        self._ensure_topic()
        self.producer = Producer(
            {**settings, "acks": "all", "enable.idempotence": True, "linger.ms": 0}
        )
        self.consumer = Consumer(
            {
                **settings,
                "group.id": "strom-schema-registry-reader",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "fetch.queue.backoff.ms": 10,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self._thread = threading.Thread(target=self._read_forever, daemon=True, name="schemas")
        self._thread.start()

    def _ensure_topic(self) -> None:
        admin = self.admin
        metadata = admin.list_topics(timeout=TIMEOUT_S)
        if self.topic in metadata.topics:
            return
        replicas = max(1, min(3, len(metadata.brokers)))
        topic = NewTopic(self.topic, 1, replicas, config={"cleanup.policy": "compact"})
        try:
            admin.create_topics([topic], request_timeout=TIMEOUT_S)[self.topic].result()
        except Exception as exc:  # created meanwhile by another instance
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise

    def _read_forever(self) -> None:
        while not self._stopped.is_set():
            try:
                # Wait for one record, then take what else has arrived: a batch of 500
                # would hold every record back until the timeout.
                first = self.consumer.poll(0.2)
                messages = [] if first is None else [first, *self.consumer.consume(499, 0)]
            except Exception as exc:  # the consumer was closed under us at stop
                if not self._stopped.is_set():
                    log.warning("reading %s failed: %s", self.topic, exc)
                return
            if not messages:
                continue
            with self.lock:
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            log.warning("reading %s: %s", self.topic, error)
                        continue
                    offset = message.offset()
                    assert offset is not None  # a consumed record has its offset
                    if not self.state.apply(message.key(), message.value()):
                        log.warning(
                            "%s offset %d claims a schema id or version held by another "
                            "schema: ignored", self.topic, offset
                        )  # fmt: skip
                        self.lost.add(offset)
                    self.applied = offset + 1
                self._progress.notify_all()

    def end_offset(self) -> int:
        """The topic's end offset, asked with the admin client (the consumer belongs to
        the reader thread)."""
        partition = TopicPartition(self.topic, 0)
        futures = self.admin.list_offsets(
            {partition: OffsetSpec.latest()}, request_timeout=TIMEOUT_S
        )
        try:
            info: ListOffsetsResultInfo = futures[partition].result()
            return info.offset
        except Exception as exc:
            raise RegistryError(
                500, 50002, f"Cannot read the end offset of {self.topic}: {exc}"
            ) from None

    def wait_until_read(self, offset: int, timeout_s: float = TIMEOUT_S) -> None:
        """Wait until every record below ``offset`` is applied (50002 on timeout)."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while self.applied < offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RegistryError(
                        500, 50002, f"Timed out reading {self.topic} up to offset {offset}"
                    )
                self._progress.wait(min(remaining, 0.5))

    def catch_up(self, timeout_s: float = TIMEOUT_S) -> None:
        self.wait_until_read(self.end_offset(), timeout_s)

    def change(self, plan: Callable[[], tuple[Result, list[Record]]]) -> Result:
        """Make a change: ``plan`` (called under the state's lock) gives (result, records);
        write the records, read them back and check that every claim they make holds.
        When one lost to a record another writer put before it, plan again from the state
        read since (the same schema may now have its id, or the next id is free) and
        write again, up to ``PLANS`` times (then 50001), and restate the lost claims'
        keys (``RegistryState.restatement``). The result of the plan whose records all
        held."""
        lost_keys: list[bytes] = []
        with self.write_lock:
            try:
                for _ in range(PLANS):
                    with self.lock:
                        result, records = plan()
                    lost = self._write(records)
                    rewritten = {key for key, _ in records}
                    lost_keys = [k for k in lost_keys if k not in rewritten] + lost
                    if not lost:
                        return result
            finally:
                if lost_keys:
                    self._restate(lost_keys)
        raise RegistryError(
            500, 50001, f"Error while writing to {self.topic}: other writers took the schema "
            f"ids or versions planned {PLANS} times; try again"
        )  # fmt: skip

    def _restate(self, keys: list[bytes]) -> None:
        """Write again what readers hold under ``keys``, where this registry's claims
        lost; a failure is logged (the change's answer stands)."""
        with self.lock:
            records = [self.state.restatement(key) for key in dict.fromkeys(keys)]
        try:
            if self._write(records):
                log.warning("restating keys of %s: another writer changed them", self.topic)
        except RegistryError as exc:
            log.warning("restating keys of %s: %s", self.topic, exc.message)

    def _write(self, records: list[Record]) -> list[bytes]:
        """Write ``records`` and return once this registry has read them back: the keys of
        those whose claims lost (``RegistryState.apply``)."""
        if not records:
            return []
        offsets: list[int] = []
        errors: list[Any] = []

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                errors.append(error)
            else:
                offsets.append(message.offset())

        for key, value in records:
            self.producer.produce(self.topic, value=value, key=key, on_delivery=delivered)
        self.producer.flush(TIMEOUT_S)
        if errors or len(offsets) != len(records):
            raise RegistryError(
                500, 50001, f"Error while writing to {self.topic}: {errors[0] if errors else '?'}"
            )
        last = max(offsets)
        self.wait_until_read(last + 1)
        in_order = sorted(offsets)  # one producer, one partition: the records' own order
        with self.lock:
            lost = [
                key
                for (key, _), offset in zip(records, in_order, strict=True)
                if offset in self.lost
            ]
            self.lost = {offset for offset in self.lost if offset > last}
        return lost

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        self.consumer.close()
        self.producer.flush(5)
