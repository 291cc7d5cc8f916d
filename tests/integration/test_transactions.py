"""Transactions end to end with librdkafka (confluent-kafka): consume-transform-produce
exactly once with offsets sent to the transaction, aborted transactions invisible to
read_committed readers and visible to read_uncommitted ones, a zombie producer fenced,
and the admin view (DescribeTransactions, ListTransactions, DescribeProducers)."""

from __future__ import annotations

import datetime
import struct
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka_helpers import create_topic, wait_until
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from raw_client import RawClient

from strom.protocol.errors import ErrorCode
from strom.protocol.records import build_batch


def _producer(bootstrap: str, transactional_id: str, **extra) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **extra}
    )
    producer.init_transactions(30)
    return producer


def _read(bootstrap: str, topic: str, isolation: str, partitions: int = 1) -> list[bytes]:
    """Every value of ``topic`` from its start to its end for ``isolation`` (the end a
    read_committed consumer sees is the last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    idle = 0
    while len(at_end) < partitions and idle < 60:
        msg = consumer.poll(0.5)
        if msg is None:
            idle += 1
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            raise KafkaException(msg.error())
        at_end.discard(msg.partition())
        values.append(msg.value())
    consumer.close()
    assert len(at_end) == partitions, "did not reach the end of every partition"
    return values


def test_committed_and_aborted_transactions(broker) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    producer = _producer(broker.bootstrap, f"tx-{topic}")
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"committed-{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"aborted-{i}".encode(), partition=i % 2)
    producer.flush(30)  # the aborted records are in the log before the abort
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"after-abort", partition=0)
    producer.commit_transaction(30)

    committed = _read(broker.bootstrap, topic, "read_committed", 2)
    assert sorted(committed) == sorted(
        [f"committed-{i}".encode() for i in range(10)] + [b"after-abort"]
    )
    uncommitted = _read(broker.bootstrap, topic, "read_uncommitted", 2)
    assert sorted(uncommitted) == sorted(committed + [f"aborted-{i}".encode() for i in range(5)])


def test_open_transaction_holds_read_committed_readers_back(broker) -> None:
    topic = f"lso-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    txn = _producer(broker.bootstrap, f"tx-{topic}")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"before")
    plain.flush(10)
    txn.begin_transaction()
    txn.produce(topic, b"in-txn")
    txn.flush(10)
    plain.produce(topic, b"during")
    plain.flush(10)
    # The last stable offset stops at the open transaction's first record.
    assert _read(broker.bootstrap, topic, "read_committed") == [b"before"]
    assert _read(broker.bootstrap, topic, "read_uncommitted") == [b"before", b"in-txn", b"during"]
    txn.commit_transaction(30)
    assert _read(broker.bootstrap, topic, "read_committed") == [b"before", b"in-txn", b"during"]


def test_consume_transform_produce_exactly_once(broker) -> None:
    source = f"in-{uuid.uuid4().hex[:8]}"
    sink = f"out-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, source, 3)
    create_topic(broker.bootstrap, sink, 3)
    total = 300
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(total):
        plain.produce(source, str(i).encode(), partition=i % 3)
    plain.flush(10)

    group = f"eos-{source}"
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    producer = _producer(broker.bootstrap, f"tx-{source}")
    done = 0
    aborted_once = False
    deadline = time.monotonic() + 180
    while done < total:
        assert time.monotonic() < deadline, f"{done} of {total} records processed in 180 s"
        batch = consumer.consume(50, timeout=2)
        batch = [m for m in batch if not m.error()]
        if not batch:
            continue
        producer.begin_transaction()
        for msg in batch:
            producer.produce(sink, b"out-" + msg.value(), partition=msg.partition())
        if not aborted_once and done >= total // 3:
            # Abort one batch half way: rewind to the committed offsets and redo it.
            aborted_once = True
            producer.flush(10)  # abort would drop what is still queued: write it first
            producer.abort_transaction(30)
            committed = consumer.committed(consumer.assignment(), timeout=10)
            for tp in committed:
                consumer.seek(
                    TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0)
                )
            continue
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        done += len(batch)
    consumer.close()
    assert aborted_once

    out = _read(broker.bootstrap, sink, "read_committed", 3)
    counts = Counter(out)
    assert len(out) == total and set(counts.values()) == {1}
    assert counts.keys() == {f"out-{i}".encode() for i in range(total)}
    # read_uncommitted also sees the aborted batch's records.
    assert len(_read(broker.bootstrap, sink, "read_uncommitted", 3)) > total

    # The group's offsets were committed with the transactions: the end of the input.
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    offsets = check.committed([TopicPartition(source, p) for p in range(3)], timeout=10)
    check.close()
    assert sum(tp.offset for tp in offsets) == total


def test_zombie_producer_is_fenced(broker) -> None:
    topic = f"zombie-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    transactional_id = f"tx-{topic}"
    zombie = _producer(broker.bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(10)
    # A new instance with the same transactional id aborts the zombie's transaction
    # and takes the next epoch.
    successor = _producer(broker.bootstrap, transactional_id)
    successor.begin_transaction()
    successor.produce(topic, b"successor")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        zombie.produce(topic, b"zombie-again")
        zombie.commit_transaction(10)
    error = info.value.args[0]
    assert error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), error
    assert _read(broker.bootstrap, topic, "read_committed") == [b"successor"]
    assert sorted(_read(broker.bootstrap, topic, "read_uncommitted")) == [b"successor", b"zombie"]


def test_admin_view_of_transactions(broker) -> None:
    topic = f"view-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    transactional_id = f"tx-{topic}"
    producer = _producer(broker.bootstrap, transactional_id, **{"transaction.timeout.ms": 45000})
    producer.begin_transaction()
    producer.produce(topic, b"open")
    producer.flush(10)
    with RawClient(broker.port) as client:
        described = client.request(
            DescribeTransactionsRequest(transactional_ids=(transactional_id,))
        )
        (state,) = described.transaction_states
        assert state.error_code == ErrorCode.none
        assert state.transaction_state == "Ongoing"
        assert state.transaction_timeout.total_seconds() == 45
        assert [(t.topic, tuple(t.partitions)) for t in state.topics] == [(topic, (0,))]
        # An unknown id carries Kafka's -1 start time, which kio refuses to decode: read
        # its error code from the frame (header, throttle time, array length, error code).
        frame = client.request_frame(DescribeTransactionsRequest(transactional_ids=("nobody",)))
        assert frame[9] == 2  # compact array of one entry
        (missing_error,) = struct.unpack_from(">h", frame, 10)
        assert missing_error == ErrorCode.transactional_id_not_found

        listed = client.request(ListTransactionsRequest(state_filters=("Ongoing",)))
        assert listed.error_code == ErrorCode.none
        ours = [t for t in listed.transaction_states if t.transactional_id == transactional_id]
        assert [(t.producer_id, t.transaction_state) for t in ours] == [
            (state.producer_id, "Ongoing")
        ]
        unknown = client.request(ListTransactionsRequest(state_filters=("Sleeping",)))
        assert tuple(unknown.unknown_state_filters) == ("Sleeping",)

        producers = client.request(
            DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(0,)),))
        )
        (partition,) = producers.topics[0].partitions
        assert partition.error_code == ErrorCode.none
        (active,) = partition.active_producers
        assert active.producer_id == state.producer_id
        assert active.producer_epoch == state.producer_epoch
        assert active.current_txn_start_offset == 0

    producer.commit_transaction(30)
    with RawClient(broker.port) as client:

        def completed() -> bool:
            response = client.request(
                DescribeTransactionsRequest(transactional_ids=(transactional_id,))
            )
            return response.transaction_states[0].transaction_state == "CompleteCommit"

        wait_until(completed, 10, "the transaction to complete")
        producers = client.request(
            DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(0,)),))
        )
        (active,) = producers.topics[0].partitions[0].active_producers
        assert active.current_txn_start_offset == -1


def _stray_transactional_batch(client: RawClient, topic: str, transactional_id: str) -> object:
    """Produce the first batch of a transaction the coordinator never heard of (a late
    retry, a zombie): a real producer id, the transactional flag, no AddPartitionsToTxn."""
    init = client.request(
        InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
    )
    batch = build_batch(
        [(None, b"stray")],
        base_timestamp=int(time.time() * 1000),
        attributes=0x10,  # transactional
        producer_id=init.producer_id,
        producer_epoch=init.producer_epoch,
        base_sequence=0,
    )
    response = client.request(
        ProduceRequest(
            transactional_id=transactional_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                TopicProduceData(
                    name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)
                ),
            ),
        )
    )
    return response.responses[0].partition_responses[0]


def test_partition_verification_can_be_turned_off(broker) -> None:
    """transaction.partition.verification.enable (KIP-890, dynamic): on, a transactional
    batch whose transaction the coordinator does not know is refused; off, the leader
    asks no one and appends it, as Kafka does; on again, refused again."""
    topic = f"verify-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    key = "transaction.partition.verification.enable"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def verification(op: AlterConfigOpType, value: str | None) -> None:
        entry = ConfigEntry(key, value, incremental_operation=op)
        resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(10)

    with RawClient(broker.port) as client:
        refused = _stray_transactional_batch(client, topic, f"stray-{topic}")
        assert refused.error_code != ErrorCode.none, refused
        verification(AlterConfigOpType.SET, "false")
        try:
            answers: list[object] = []
            wait_until(
                lambda: (
                    answers.append(_stray_transactional_batch(client, topic, "a"))
                    or answers[-1].error_code == ErrorCode.none
                ),  # type: ignore[attr-defined]
                10,
                "the stray batch to be appended unverified",
            )
            assert answers[-1].base_offset == 0  # type: ignore[attr-defined]
        finally:
            verification(AlterConfigOpType.DELETE, None)
        wait_until(
            lambda: _stray_transactional_batch(client, topic, "b").error_code != ErrorCode.none,
            10,
            "verification to be on again",
        )
