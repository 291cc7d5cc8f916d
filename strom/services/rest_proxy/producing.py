"""The REST proxy's one shared producer: every HTTP client's records go through one
confluent-kafka producer, so records from many requests batch together.

Owns the producer (acks=all, idempotent, 5 ms linger), the thread that polls it for
delivery reports, and handing each report back to the event loop as a future's result
(the partition and offset, or the error). Does not own formats or HTTP (``app``).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Producer


@dataclass
class Delivered:
    partition: int | None
    offset: int | None
    timestamp_ms: int | None
    error: KafkaError | None


class SharedProducer:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.producer = Producer(
            {**settings, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
        )
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._poll_forever, daemon=True, name="producer")
        self._thread.start()

    def _poll_forever(self) -> None:
        while not self._stopped.is_set():
            self.producer.poll(0.05)

    def send(
        self,
        loop: asyncio.AbstractEventLoop,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Delivered]:
        """Hand one record to the producer; the future is done once it is acknowledged."""
        future: asyncio.Future[Delivered] = loop.create_future()

        def delivered(error: Any, message: Any) -> None:
            result = Delivered(
                None if error else message.partition(),
                None if error else message.offset(),
                None if error else message.timestamp()[1],
                error,
            )
            loop.call_soon_threadsafe(_finish, future, result)

        extra: dict[str, Any] = {}
        if partition is not None:
            extra["partition"] = partition
        if headers:
            extra["headers"] = headers
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=delivered, **extra)
                return future
            except BufferError:
                self.producer.poll(0.01)

    def close(self) -> None:
        self.producer.flush(30)
        self._stopped.set()
        self._thread.join(5)


def _finish(future: asyncio.Future[Delivered], result: Delivered) -> None:
    if not future.done():
        future.set_result(result)
