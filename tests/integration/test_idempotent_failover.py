"""An idempotent producer's retries across a leader change, with raw Produce requests.

A retried batch must not be written twice, whoever leads the partition when the retry
comes: the broker keeps the metadata of each producer's last five batches on every
replica (followers learn it from the batches they copy) and rebuilds it from the
segments and producer snapshots when a node starts again. The tests send exact batches
(a producer id from InitProducerId, chosen sequences, acks=all) so that nothing depends
on a client's timing, and check each answer against the log of the node answering:

- after ``kill -9`` of the leader, the new leader answers a retry of any of the last
  five committed batches with no error and the offset the first copy got, a retry of
  an older one and a batch past a gap with OUT_OF_ORDER_SEQUENCE_NUMBER, and takes the
  next sequence at its log end;
- a node killed and started again rebuilds the state from its segments, adds what it
  copies as a follower, and answers the same way once it leads in turn; a batch the
  leader before it had alone (its followers stopped) is taken again at the offset it
  had there, since no copy of it survived.

One cluster of three combined nodes serves the module (killing one keeps a quorum);
topics of three replicas in a chosen order (the controller elects the first live one in
the ISR) with ``min.insync.replicas=2``.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_process import Cluster, ClusterNode
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_helpers import wait_until
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from raw_client import RawClient

from strom.protocol.errors import ErrorCode
from strom.protocol.records import build_batch

SETTINGS = {
    # Followers stopped for a moment (the second test) stay in the ISR: only the fencing
    # of a killed node takes a replica out of it here.
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
}
RECORDS = 2  # records per batch: batch k holds sequences 2k and 2k+1
LATEST = -1


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})


def _leader(cluster: Cluster, topic: str, besides: int = -1) -> ClusterNode:
    """The partition's leader as a live node's metadata names it, once it is a live node
    other than ``besides`` with every other live node in the ISR."""
    found: list[ClusterNode] = []

    def elected() -> bool:
        metadata = _admin(cluster.bootstrap()).list_topics(topic, timeout=3)
        found_topic = metadata.topics.get(topic)
        if found_topic is None or 0 not in found_topic.partitions:
            return False
        partition = found_topic.partitions[0]
        node = cluster.nodes.get(partition.leader)
        live = {n.node_id for n in cluster.nodes.values() if n.alive()}
        if node is None or not node.alive() or node.node_id == besides:
            return False
        if not live <= set(partition.isrs):
            return False
        found[:] = [node]
        return True

    wait_until(elected, 40, f"a leader of {topic}-0 other than {besides}")
    return found[0]


def _init_producer(client: RawClient) -> tuple[int, int]:
    response = client.request(
        InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
    )
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


class Producer:
    """One producer id's batches, built once and sent again as a client retries them."""

    def __init__(self, topic: str, pid: int, epoch: int) -> None:
        self.topic = topic
        self.pid = pid
        self.epoch = epoch
        self.batches: dict[tuple[int, int], bytes] = {}

    def batch(self, seq: int, epoch: int | None = None) -> bytes:
        """The batch starting at ``seq``: the same bytes each time it is asked for."""
        epoch = self.epoch if epoch is None else epoch
        key = (epoch, seq)
        if key not in self.batches:
            self.batches[key] = build_batch(
                [(None, f"e{epoch}-s{seq + i}".encode()) for i in range(RECORDS)],
                base_timestamp=int(time.time() * 1000),
                producer_id=self.pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )
        return self.batches[key]

    def send(
        self,
        node: ClusterNode,
        seq: int,
        epoch: int | None = None,
        acks: int = -1,
        timeout_s: float = 15,
    ) -> tuple[int, int]:
        """(error code, base offset) of a Produce of the batch at ``seq`` to ``node``."""
        request = ProduceRequest(
            acks=acks,
            timeout=datetime.timedelta(seconds=timeout_s),
            topic_data=(
                TopicProduceData(
                    name=self.topic,
                    partition_data=(PartitionProduceData(index=0, records=self.batch(seq, epoch)),),
                ),
            ),
        )
        with RawClient(node.listen_port, timeout=30) as client:
            response: Any = client.request(request)
        part = response.responses[0].partition_responses[0]
        return part.error_code, part.base_offset


def _end_offset(node: ClusterNode, topic: str) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            ListOffsetsTopic(
                name=topic,
                partitions=(
                    ListOffsetsPartition(
                        partition_index=0, current_leader_epoch=-1, timestamp=LATEST
                    ),
                ),
            ),
        ),
    )
    with RawClient(node.listen_port) as client:
        response: Any = client.request(request)
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.offset)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster.combined(tmp_path_factory.mktemp("idempotent-failover"), overrides=SETTINGS)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.kill_all()


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    """The module's cluster with its three nodes up and listed (a node an earlier test
    killed is started again first)."""
    for node in shared_cluster.nodes.values():
        if not node.alive():
            node.start(60)
    wait_until(
        lambda: (
            sorted(_admin(shared_cluster.bootstrap()).list_topics(timeout=3).brokers) == [1, 2, 3]
        ),
        30,
        "3 brokers",
    )
    return shared_cluster


def _create(cluster: Cluster, topic: str, replicas: list[int]) -> ClusterNode:
    admin = _admin(cluster.bootstrap())  # referenced until the creation is answered
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas])])[
        topic
    ].result(15)
    return _leader(cluster, topic)


def _start_producer(topic: str, node: ClusterNode) -> Producer:
    with RawClient(node.listen_port) as client:
        pid, epoch = _init_producer(client)
    return Producer(topic, pid, epoch)


def test_new_leaders_answer_retries_as_the_old_one_would(cluster: Cluster) -> None:
    topic = "retried-after-failover"
    try:
        _retries_across_two_failovers(cluster, topic)
    except BaseException:
        print(cluster.lines_about(f"{topic}-0"))
        raise


def _retries_across_two_failovers(cluster: Cluster, topic: str) -> None:
    first, second, third = (cluster.nodes[i] for i in (1, 2, 3))
    assert _create(cluster, topic, [1, 2, 3]) is first
    producer = _start_producer(topic, first)
    # Seven batches, each committed (acks=all): the last five are what a new leader must
    # recognise; the first two are older than that.
    for k in range(7):
        assert producer.send(first, k * RECORDS) == (ErrorCode.none, k * RECORDS)
    first.kill()
    assert _leader(cluster, topic, besides=1) is second
    for k in range(2, 7):
        assert producer.send(second, k * RECORDS) == (ErrorCode.none, k * RECORDS), f"batch {k}"
    assert producer.send(second, 0)[0] == ErrorCode.out_of_order_sequence_number
    gap = producer.send(second, 8 * RECORDS)
    assert gap == (ErrorCode.out_of_order_sequence_number, -1)
    assert _end_offset(second, topic) == 7 * RECORDS
    assert producer.send(second, 7 * RECORDS) == (ErrorCode.none, 7 * RECORDS)
    assert producer.send(second, 8 * RECORDS) == (ErrorCode.none, 8 * RECORDS)
    # Both kinds of answer are in the broker's log, with the producer and its sequences.
    said = second.output()
    assert (
        f"{topic}-0: producer {producer.pid} epoch {producer.epoch} sent sequences 4..5 again: "
        in said
    )
    assert (
        f"{topic}-0: producer {producer.pid} epoch {producer.epoch} sent sequence 16 after 13"
        in said
    )

    # The killed node rebuilds the state from its segments (batches 0-6) and learns
    # batches 7 and 8 from the leader as a follower.
    first.start(60)
    _leader(cluster, topic)  # every live node in the ISR again
    # Batch 9 reaches the leader alone (acks=1, its followers stopped), which is killed
    # before they fetch it; they may still find the answer to a fetch they were waiting
    # for in their sockets, and have it.
    for follower in (first, third):
        follower.pause()
    try:
        assert producer.send(second, 9 * RECORDS, acks=1) == (ErrorCode.none, 9 * RECORDS)
        second.kill()
    finally:
        for follower in (first, third):
            follower.resume()
    assert _leader(cluster, topic, besides=2) is first
    # Batch 9 again: appended at the offset it had (no copy survived) or recognised there.
    assert producer.send(first, 9 * RECORDS) == (ErrorCode.none, 9 * RECORDS)
    for k in range(5, 10):
        assert producer.send(first, k * RECORDS) == (ErrorCode.none, k * RECORDS), f"batch {k}"
    assert producer.send(first, 4 * RECORDS)[0] == ErrorCode.out_of_order_sequence_number
    assert producer.send(first, 11 * RECORDS)[0] == ErrorCode.out_of_order_sequence_number
    assert producer.send(first, 10 * RECORDS) == (ErrorCode.none, 10 * RECORDS)
    assert _end_offset(first, topic) == 11 * RECORDS

    # A retry is answered once its own copy is committed, whatever comes after it: with
    # the follower stopped, batch 11 stays above the high watermark, and the retry of
    # batch 10 below it is answered (it would time out waiting for batch 11).
    third.pause()
    try:
        assert producer.send(first, 11 * RECORDS, acks=1) == (ErrorCode.none, 11 * RECORDS)
        retry = producer.send(first, 10 * RECORDS, timeout_s=5)
        assert retry == (ErrorCode.none, 10 * RECORDS)
    finally:
        third.resume()
    assert producer.send(first, 11 * RECORDS) == (ErrorCode.none, 11 * RECORDS)
