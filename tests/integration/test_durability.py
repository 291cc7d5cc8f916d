"""Acknowledged records survive a clean stop and a kill -9 of the broker mid-produce."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient
from kafka_helpers import consume_to_end, create_topic


def _produce_until_stopped(
    bootstrap: str, topic: str, stop: threading.Event, acked: list[bytes]
) -> None:
    """Produce numbered records until ``stop``; ``acked`` gathers the ones the broker
    acknowledged, as they are."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 2,
            # no retries and no idempotence: a record is either acknowledged once or failed
            "retries": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 3000,
            "socket.timeout.ms": 2000,
        }
    )

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append(msg.value())

    i = 0
    while not stop.is_set():
        try:
            producer.produce(topic, value=b"record-%08d" % i, on_delivery=on_delivery)
            i += 1
        except BufferError:
            producer.poll(0.05)
        if i % 200 == 0:
            producer.poll(0)
            time.sleep(0.002)
    producer.flush(10)


def _topic_id(bootstrap: str, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    return str(description.topic_id)


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_acknowledged_records_survive_broker_death(fresh_broker, how: str) -> None:
    fresh_broker.start()
    topic = "durable"
    create_topic(fresh_broker.bootstrap, topic, 1, {"segment.bytes": "262144"})

    topic_id = _topic_id(fresh_broker.bootstrap, topic)
    stop = threading.Event()
    acked: list[bytes] = []
    worker = threading.Thread(
        target=_produce_until_stopped, args=(fresh_broker.bootstrap, topic, stop, acked)
    )
    worker.start()
    # The broker dies with records acknowledged and more in flight, however fast the
    # machine is: wait for acknowledgements, not for a time.
    deadline = time.monotonic() + 60
    while len(acked) < 2000 and time.monotonic() < deadline and worker.is_alive():
        time.sleep(0.05)
    assert len(acked) >= 2000, f"only {len(acked)} records acknowledged in 60 s"
    if how == "kill9":
        fresh_broker.kill()
    else:
        assert fresh_broker.stop() == 0
    time.sleep(0.5)
    stop.set()
    worker.join(30)
    assert not worker.is_alive()

    fresh_broker.start()
    assert _topic_id(fresh_broker.bootstrap, topic) == topic_id  # ids are persisted
    stored = [m.value() for m in consume_to_end(fresh_broker.bootstrap, topic)]
    # every acknowledged record is there exactly once, and in the order it was acknowledged
    assert len(set(stored)) == len(stored)
    stored_set = set(stored)
    missing = [v for v in acked if v not in stored_set]
    assert not missing
    positions = {value: index for index, value in enumerate(stored)}
    assert [positions[v] for v in acked] == sorted(positions[v] for v in acked)

    # offsets continue where they were
    producer = Producer({"bootstrap.servers": fresh_broker.bootstrap})
    offsets = []
    producer.produce(
        topic, value=b"after-restart", on_delivery=lambda err, msg: offsets.append(msg.offset())
    )
    producer.flush(10)
    assert offsets == [len(stored)]
    fresh_broker.stop()
