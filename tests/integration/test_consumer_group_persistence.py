"""KIP-848 groups kept across broker restarts, with real librdkafka consumers.

Two confluent-kafka consumers with group.protocol=consumer share a topic (a third
joined and left first, so the group epoch is past what a fresh group reaches); the broker
is stopped (SIGTERM) and started, then killed (SIGKILL) and started. Each time the
group comes back from __consumer_offsets with the same group epoch, members, member
epochs and assignments (ConsumerGroupDescribe), and the consumers carry on consuming
without being fenced: same member ids, no partition revoked or assigned again. On a
three-node cluster the same holds when the coordinator is killed and the group's
__consumer_offsets partition is led by another node.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from cluster_process import Cluster
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_helpers import create_topic, wait_until
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.types import GroupId
from raw_client import RawClient

OVERRIDES = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.session.timeout.ms": "10000",
}
TOPIC = "kept-topic"
GROUP = "kept-group"
PARTITIONS = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("kip848-kept") / "data", OVERRIDES)
    process.start()
    yield process
    if process.alive():
        process.stop()


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(start, start + count):
        producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(15) == 0


class GroupMember:
    """A KIP-848 consumer in a thread, counting its rebalance callbacks."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "reconnect.backoff.max.ms": 300,
            }
        )
        self.lock = threading.Lock()
        self.assigned_calls: list[list[int]] = []
        self.revoked_calls: list[list[int]] = []
        self.partitions: set[int] = set()  # owned, as the callbacks told
        self.records: set[tuple[int, int]] = set()
        self.member_ids: set[str] = set()  # every member id the client has had
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        def on_assign(_consumer, partitions) -> None:
            with self.lock:
                self.assigned_calls.append(sorted(tp.partition for tp in partitions))
                self.partitions.update(tp.partition for tp in partitions)

        def on_revoke(_consumer, partitions) -> None:
            with self.lock:
                self.revoked_calls.append(sorted(tp.partition for tp in partitions))
                self.partitions.difference_update(tp.partition for tp in partitions)

        self.consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
        while not self.stop.is_set():
            msg = self.consumer.poll(0.1)
            member_id = self.consumer.memberid()  # from this thread: it blocks on others
            with self.lock:
                if member_id:
                    self.member_ids.add(member_id)
                if msg is not None and not msg.error():
                    self.records.add((msg.partition(), msg.offset()))
        self.consumer.close()

    def owned(self) -> set[int]:
        with self.lock:
            return set(self.partitions)

    def consumed(self) -> set[tuple[int, int]]:
        with self.lock:
            return set(self.records)

    def ids(self) -> set[str]:
        with self.lock:
            return set(self.member_ids)

    def rebalance_calls(self) -> tuple[int, int]:
        with self.lock:
            return len(self.assigned_calls), len(self.revoked_calls)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def describe(port: int) -> tuple:
    """(state, group epoch, assignment epoch, {member id: (epoch, assigned, target)})."""
    with RawClient(port) as client:
        response = client.request(
            ConsumerGroupDescribeRequest(
                group_ids=(GroupId(GROUP),), include_authorized_operations=False
            )
        )
    (group,) = response.groups

    def partitions(assignment) -> frozenset[int]:
        return frozenset(p for t in assignment.topic_partitions for p in t.partitions)

    members = {
        m.member_id: (m.member_epoch, partitions(m.assignment), partitions(m.target_assignment))
        for m in group.members
    }
    return group.group_state, group.group_epoch, group.assignment_epoch, members


def test_kip848_group_survives_stop_and_kill(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    produce(broker.bootstrap, 0, 40)
    everyone = [GroupMember(broker.bootstrap) for _ in range(3)]
    members = everyone[:2]
    try:
        # A third member joins and leaves first: the group epoch goes past what a group
        # rebuilt from scratch by the two remaining members would reach.
        wait_until(lambda: all(m.owned() for m in everyone), 30, "three members assigned")
        everyone[2].close()

        def settled() -> bool:
            owned = [m.owned() for m in members]
            if not all(len(o) == PARTITIONS // 2 for o in owned):
                return False
            state, _, _, described = describe(broker.port)
            return state == "Stable" and len(described) == 2

        wait_until(settled, 30, "two KIP-848 members, two partitions each, Stable")
        before = describe(broker.port)
        assert before[1] >= 5  # three joins, a leave, the topic's metadata
        member_ids = [m.ids() for m in members]
        assert sorted(i for ids in member_ids for i in ids) == sorted(before[3])
        calls = [m.rebalance_calls() for m in members]
        owned = [m.owned() for m in members]
        produced = 40
        for restart in (broker.stop, broker.kill):
            restart()
            broker.start()
            produce(broker.bootstrap, produced, 40)
            produced += 40
            expected = {(p, o) for p in range(PARTITIONS) for o in range(produced // PARTITIONS)}
            wait_until(
                lambda wanted=expected: wanted <= set().union(*(m.consumed() for m in everyone)),
                30,
                "every record consumed after the restart",
            )
            assert describe(broker.port) == before
            assert [m.ids() for m in members] == member_ids
            assert [m.rebalance_calls() for m in members] == calls
            assert [m.owned() for m in members] == owned
    finally:
        for member in members:
            member.close()


def test_kip848_group_moves_with_its_coordinator(tmp_path: Path) -> None:
    overrides = {
        **OVERRIDES,
        "offsets.topic.replication.factor": "3",
        "replica.fetch.wait.max.ms": "100",
        "replica.lag.time.max.ms": "1500",
        "min.insync.replicas": "2",
    }
    cluster = Cluster.combined(tmp_path, overrides=overrides)
    members: list[GroupMember] = []
    try:
        cluster.start_all()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "socket.timeout.ms": 3000})
        wait_until(
            lambda: sorted(admin.list_topics(timeout=3).brokers) == [1, 2, 3], 15, "3 brokers"
        )
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(15)
        produce(cluster.bootstrap(), 0, 40)
        members = [GroupMember(cluster.bootstrap()) for _ in range(2)]

        def coordinator_port() -> int:
            described = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
            return cluster.nodes[described.coordinator.id].port

        def settled() -> bool:
            if not all(len(m.owned()) == PARTITIONS // 2 for m in members):
                return False
            state, _, _, described = describe(coordinator_port())
            return state == "Stable" and len(described) == 2

        wait_until(settled, 30, "two KIP-848 members, two partitions each, Stable")
        old = admin.describe_consumer_groups([GROUP])[GROUP].result(10).coordinator.id
        before = describe(cluster.nodes[old].port)
        member_ids = [m.ids() for m in members]
        calls = [m.rebalance_calls() for m in members]
        owned = [m.owned() for m in members]
        cluster.nodes[old].kill()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "socket.timeout.ms": 3000})
        produce(cluster.bootstrap(), 40, 40)
        expected = {(p, o) for p in range(PARTITIONS) for o in range(80 // PARTITIONS)}
        wait_until(
            lambda: expected <= set().union(*(m.consumed() for m in members)),
            30,
            "every record consumed after the move",
        )
        new = admin.describe_consumer_groups([GROUP])[GROUP].result(10).coordinator.id
        assert new != old
        assert describe(cluster.nodes[new].port) == before
        assert [m.ids() for m in members] == member_ids
        assert [m.rebalance_calls() for m in members] == calls
        assert [m.owned() for m in members] == owned
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        for member in members:
            member.close()
        cluster.kill_all()
