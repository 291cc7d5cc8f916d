"""Incremental fetch sessions (KIP-227) on a real broker: raw Fetch requests at each
session epoch, and kafka-python, which fetches through sessions by default."""

from __future__ import annotations

import datetime

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from raw_client import RawClient

from strom.protocol.errors import ErrorCode


def _topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result()


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(10) == 0


def _fetch(client, session_id, epoch, topic, offsets, forgotten=()):
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=session_id,
        session_epoch=epoch,
        topics=(
            (
                FetchTopic(
                    topic=topic,
                    partitions=tuple(
                        FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                        for p, o in offsets.items()
                    ),
                ),
            )
            if offsets
            else ()
        ),
        forgotten_topics_data=(
            (ForgottenTopic(topic=topic, partitions=tuple(forgotten)),) if forgotten else ()
        ),
    )
    response = client.request(request)
    parts = {p.partition_index: p for t in response.responses for p in t.partitions}
    return response, parts


def test_a_session_answers_only_what_changed(broker) -> None:
    _topic(broker.bootstrap, "sessions", 3)
    _produce(broker.bootstrap, "sessions", 0, 5)
    with RawClient(broker.port) as client:
        full, parts = _fetch(client, 0, 0, "sessions", {0: 0, 1: 0, 2: 0})
        assert full.error_code == ErrorCode.none
        session = full.session_id
        assert session > 0
        assert sorted(parts) == [0, 1, 2] and parts[0].high_watermark == 5

        # Partition 0 moved on to offset 5: nothing new anywhere, so no partitions.
        same, parts = _fetch(client, session, 1, "sessions", {0: 5})
        assert same.session_id == session and parts == {}

        _produce(broker.bootstrap, "sessions", 1, 3)
        news, parts = _fetch(client, session, 2, "sessions", {})
        assert sorted(parts) == [1]  # only the partition with records
        assert parts[1].high_watermark == 3 and len(parts[1].records) > 0

        # Forget partition 2; records there are not answered any more.
        _, parts = _fetch(client, session, 3, "sessions", {1: 3}, forgotten=[2])
        assert parts == {}
        _produce(broker.bootstrap, "sessions", 2, 2)
        _produce(broker.bootstrap, "sessions", 0, 1)
        _, parts = _fetch(client, session, 4, "sessions", {})
        assert sorted(parts) == [0] and parts[0].high_watermark == 6

        stale, parts = _fetch(client, session, 4, "sessions", {})
        assert stale.error_code == ErrorCode.invalid_fetch_session_epoch and parts == {}

        closed, parts = _fetch(client, session, -1, "sessions", {0: 0, 2: 0})
        assert closed.error_code == ErrorCode.none and closed.session_id == 0
        assert parts[2].high_watermark == 2  # a full fetch answers every partition named
        gone, _ = _fetch(client, session, 5, "sessions", {})
        assert gone.error_code == ErrorCode.fetch_session_id_not_found


def test_kafka_python_consumes_through_a_session(broker) -> None:
    _topic(broker.bootstrap, "session-client", 4)
    for partition in range(4):
        _produce(broker.bootstrap, "session-client", partition, 250)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
        max_partition_fetch_bytes=2048,  # many small fetches: the session carries them
    )
    consumer.assign([TopicPartition("session-client", p) for p in range(4)])
    seen = set()
    for message in consumer:
        seen.add((message.partition, message.offset))
        if len(seen) == 1000:
            break
    handlers = consumer._fetcher._session_handlers
    consumer.close()
    assert seen == {(p, o) for p in range(4) for o in range(250)}
    # The client kept one session with the broker (it falls back to full fetches
    # without one): its next request was an incremental one of an open session.
    assert [h.next_metadata.session_id != 0 for h in handlers.values()] == [True]
    assert all(h.next_metadata.epoch > 1 for h in handlers.values())
