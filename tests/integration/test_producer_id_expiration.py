"""Idle producer ids expire from a real broker's partitions: three successive
librdkafka idempotent producers are listed by DescribeProducers, then none once
producer.id.expiration.ms has passed (checked every
producer.id.expiration.check.interval.ms)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Producer
from kafka_helpers import create_topic, wait_until
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from raw_client import RawClient

from strom.protocol.errors import ErrorCode

EXPIRATION_MS = 3000  # long enough for the three producers to be seen together
RECORDS_PER_PRODUCER = 10


@pytest.fixture
def expiring_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path / "data",
        {
            "producer.id.expiration.ms": str(EXPIRATION_MS),
            "producer.id.expiration.check.interval.ms": "500",
        },
    )
    process.start()
    yield process
    if process.alive():
        process.stop()


def _produce_idempotently(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors: list[Any] = []

    def on_delivery(err: Any, _message: Any) -> None:
        if err is not None:
            errors.append(err)

    for i in range(RECORDS_PER_PRODUCER):
        producer.produce(topic, value=b"%d" % i, partition=0, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert errors == []


def _active_producers(client: RawClient, topic: str) -> list[Any]:
    response = client.request(
        DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(0,)),))
    )
    (partition,) = response.topics[0].partitions
    assert partition.error_code == ErrorCode.none
    return list(partition.active_producers)


def test_idle_producers_expire(expiring_broker: BrokerProcess) -> None:
    topic = "expiring-producers"
    create_topic(expiring_broker.bootstrap, topic, 1)
    for _ in range(3):
        _produce_idempotently(expiring_broker.bootstrap, topic)  # a new producer id each

    with RawClient(expiring_broker.port) as client:
        producers = _active_producers(client, topic)
        assert len({p.producer_id for p in producers}) == 3
        for producer in producers:
            assert producer.producer_epoch == 0
            assert producer.last_sequence == RECORDS_PER_PRODUCER - 1
            assert producer.current_txn_start_offset == -1

        wait_until(lambda: _active_producers(client, topic) == [], 15, "the producer ids to expire")
