"""Idempotent produce over the wire: retried batches deduplicated, sequence gaps and
old epochs refused, per partition; librdkafka and kafka-python idempotent producers
round-trip exactly once and in order."""

from __future__ import annotations

import datetime
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka_helpers import consume_all, consume_to_end, create_topic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from raw_client import RawClient

from strom.protocol.errors import ErrorCode
from strom.protocol.records import build_batch, iter_headers

LATEST = -1


def _init_producer(client: RawClient, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
    response = client.request(
        InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=producer_id,
            producer_epoch=epoch,
        )
    )
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def _batch(pid: int, epoch: int, seq: int, n: int = 4, tag: str = "r") -> bytes:
    return build_batch(
        [(None, f"{tag}-{seq + i}".encode()) for i in range(n)],
        # Now, as a client stamps it: a producer whose last batch is older than
        # producer.id.expiration.ms (1 day) is forgotten, at the latest by a restart.
        base_timestamp=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def _produce(client: RawClient, topic: str, records_by_partition: dict[int, bytes]):
    request = ProduceRequest(
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=tuple(
                    PartitionProduceData(index=p, records=r)
                    for p, r in records_by_partition.items()
                ),
            ),
        ),
    )
    response = client.request(request)
    return {p.index: p for p in response.responses[0].partition_responses}


def _end_offset(client: RawClient, topic: str, partition: int = 0) -> int:
    response = client.request(
        ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(
                ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        ListOffsetsPartition(
                            partition_index=partition, current_leader_epoch=-1, timestamp=LATEST
                        ),
                    ),
                ),
            ),
        )
    )
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return part.offset


def _stored_headers(data_dir: Path, topic: str, partition: int):
    headers = []
    for path in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        headers += list(iter_headers(path.read_bytes()))
    return headers


def test_retried_batch_gets_same_offset_and_is_stored_once(broker) -> None:
    create_topic(broker.bootstrap, "idem-dup", 1)
    client = RawClient(broker.port)
    pid, epoch = _init_producer(client)
    first = _produce(client, "idem-dup", {0: _batch(pid, epoch, 0)})[0]
    assert first.error_code == ErrorCode.none and first.base_offset == 0
    second = _produce(client, "idem-dup", {0: _batch(pid, epoch, 4)})[0]
    assert second.base_offset == 4
    for seq, offset in ((0, 0), (4, 4), (0, 0)):
        retry = _produce(client, "idem-dup", {0: _batch(pid, epoch, seq)})[0]
        assert retry.error_code == ErrorCode.none
        assert retry.base_offset == offset
    assert _end_offset(client, "idem-dup") == 8
    client.close()
    values = [m.value() for m in consume_all(broker.bootstrap, "idem-dup", 8, timeout=10)]
    assert values == [f"r-{i}".encode() for i in range(8)]


def test_sequence_gap_is_out_of_order(broker) -> None:
    create_topic(broker.bootstrap, "idem-gap", 1)
    client = RawClient(broker.port)
    pid, epoch = _init_producer(client)
    assert _produce(client, "idem-gap", {0: _batch(pid, epoch, 0)})[0].error_code == 0
    gap = _produce(client, "idem-gap", {0: _batch(pid, epoch, 5)})[0]
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert gap.base_offset == -1
    assert _end_offset(client, "idem-gap") == 4
    assert _produce(client, "idem-gap", {0: _batch(pid, epoch, 4)})[0].base_offset == 4
    client.close()


def test_bumped_epoch_fences_the_old_one(broker) -> None:
    create_topic(broker.bootstrap, "idem-epoch", 1)
    client = RawClient(broker.port)
    pid, epoch = _init_producer(client)
    assert _produce(client, "idem-epoch", {0: _batch(pid, epoch, 0)})[0].error_code == 0
    same_pid, new_epoch = _init_producer(client, pid, epoch)
    assert same_pid == pid and new_epoch == epoch + 1
    not_zero = _produce(client, "idem-epoch", {0: _batch(pid, new_epoch, 4)})[0]
    assert not_zero.error_code == ErrorCode.out_of_order_sequence_number
    assert _produce(client, "idem-epoch", {0: _batch(pid, new_epoch, 0)})[0].base_offset == 4
    fenced = _produce(client, "idem-epoch", {0: _batch(pid, epoch, 4)})[0]
    assert fenced.error_code == ErrorCode.invalid_producer_epoch
    assert fenced.base_offset == -1
    assert _end_offset(client, "idem-epoch") == 8
    client.close()


def test_errors_are_per_partition(broker) -> None:
    create_topic(broker.bootstrap, "idem-parts", 3)
    client = RawClient(broker.port)
    pid, epoch = _init_producer(client)
    first = _produce(client, "idem-parts", {p: _batch(pid, epoch, 0) for p in range(3)})
    assert all(r.error_code == 0 and r.base_offset == 0 for r in first.values())
    mixed = _produce(
        client,
        "idem-parts",
        {0: _batch(pid, epoch, 4), 1: _batch(pid, epoch, 9), 2: _batch(pid, epoch, 0)},
    )
    assert (mixed[0].error_code, mixed[0].base_offset) == (ErrorCode.none, 4)
    assert (mixed[1].error_code, mixed[1].base_offset) == (
        ErrorCode.out_of_order_sequence_number,
        -1,
    )
    assert (mixed[2].error_code, mixed[2].base_offset) == (ErrorCode.none, 0)  # duplicate
    assert [_end_offset(client, "idem-parts", p) for p in range(3)] == [8, 4, 4]
    client.close()


def test_duplicate_detected_after_restart(fresh_broker) -> None:
    fresh_broker.start()
    create_topic(fresh_broker.bootstrap, "idem-restart", 1)
    client = RawClient(fresh_broker.port)
    pid, epoch = _init_producer(client)
    for seq in range(0, 20, 4):
        _produce(client, "idem-restart", {0: _batch(pid, epoch, seq)})
    client.close()
    fresh_broker.stop()
    fresh_broker.start()
    client = RawClient(fresh_broker.port)
    retry = _produce(client, "idem-restart", {0: _batch(pid, epoch, 16)})[0]
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 16)
    gap = _produce(client, "idem-restart", {0: _batch(pid, epoch, 24)})[0]
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert _produce(client, "idem-restart", {0: _batch(pid, epoch, 20)})[0].base_offset == 20
    assert _end_offset(client, "idem-restart") == 24
    client.close()


def test_confluent_idempotent_producer_exactly_once_in_order(broker) -> None:
    topic = "idem-librdkafka"
    create_topic(broker.bootstrap, topic, 3)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 100,
        }
    )
    errors = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)

    total = 5000
    for i in range(total):
        producer.produce(
            topic, key=f"k{i % 37}".encode(), value=str(i).encode(), on_delivery=on_delivery
        )
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors

    received = consume_to_end(broker.bootstrap, topic)  # every record there, no more
    assert len(received) == total
    values = [int(m.value()) for m in received]
    assert sorted(values) == list(range(total))
    by_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for msg in received:
        by_partition[msg.partition()].append((msg.offset(), int(msg.value())))
    assert len(by_partition) == 3
    for rows in by_partition.values():
        rows.sort()
        assert [offset for offset, _ in rows] == list(range(len(rows)))
        assert [v for _, v in rows] == sorted(v for _, v in rows), "order within a partition"
    headers = _stored_headers(broker.data_dir, topic, 0)
    assert headers and all(h.producer_id >= 0 and h.base_sequence >= 0 for h in headers)


def test_kafka_python_idempotent_producer(broker) -> None:
    topic = "idem-kafka-python"
    create_topic(broker.bootstrap, topic, 2)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all", linger_ms=2
    )
    futures = [producer.send(topic, value=b"%d" % i, partition=i % 2) for i in range(400)]
    producer.flush()
    metas = [f.get(timeout=10) for f in futures]
    producer.close()
    for p in range(2):
        assert sorted(m.offset for m in metas if m.partition == p) == list(range(200))

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    partitions = [TopicPartition(topic, p) for p in range(2)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    got: dict[int, list[int]] = {0: [], 1: []}
    for msg in consumer:
        got[msg.partition].append(int(msg.value))
        if sum(len(v) for v in got.values()) == 400:
            break
    consumer.close()
    assert got[0] == list(range(0, 400, 2))
    assert got[1] == list(range(1, 400, 2))
    headers = _stored_headers(broker.data_dir, topic, 0)
    assert headers and all(h.producer_id >= 0 and h.base_sequence >= 0 for h in headers)
