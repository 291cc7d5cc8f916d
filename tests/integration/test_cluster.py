"""A cluster of real Strom processes on 127.0.0.1, driven by confluent-kafka.

Nodes are started from Kafka's properties alone (process.roles, node.id,
controller.quorum.voters, listeners): they format themselves, agree on a cluster id,
elect an active controller and register their brokers. Faults are real: ``kill -9``
of the active controller, SIGSTOP of a broker. Quorum and heartbeat timeouts are
lowered (tests/cluster_process.py) so that each test takes seconds.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from cluster_process import Cluster, NodeSpec
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_helpers import wait_until

from strom.cluster.meta_properties import read_meta_properties


@pytest.fixture
def cluster_root(tmp_path: Path) -> Path:
    return tmp_path


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})


def _brokers_seen(bootstrap: str) -> list[int]:
    try:
        return sorted(_admin(bootstrap).list_topics(timeout=3).brokers)
    except Exception:
        return []


def _partition_count(bootstrap: str, topic: str) -> int:
    """How many partitions of ``topic`` the node answering at ``bootstrap`` knows of (a node
    applies the metadata a moment after the controller committed it)."""
    try:
        found = _admin(bootstrap).list_topics(topic, timeout=3).topics.get(topic)
    except Exception:
        return 0
    return len(found.partitions) if found is not None and found.error is None else 0


def _create(bootstrap: str, name: str, partitions: int, replication: int) -> None:
    admin = _admin(bootstrap)  # kept alive until the result is in
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication)], operation_timeout=10, request_timeout=15
    )
    futures[name].result(20)


def _produce_and_consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=f"value-{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


def test_three_combined_nodes_form_one_cluster_from_properties_alone(cluster_root: Path) -> None:
    cluster = Cluster.combined(cluster_root)
    try:
        cluster.start_all()
        for node in cluster.brokers:  # every node answers with all three brokers
            wait_until(lambda n=node: _brokers_seen(n.bootstrap) == [1, 2, 3], 15, "3 brokers")
        ids = {read_meta_properties(n.data_dir).cluster_id for n in cluster.nodes.values()}
        assert len(ids) == 1
        metadata = _admin(cluster.bootstrap()).list_topics(timeout=5)
        assert metadata.cluster_id == ids.pop()

        _create(cluster.brokers[0].bootstrap, "replicated", 6, 3)
        for node in cluster.brokers:  # each broker knows the topic, as committed
            wait_until(
                lambda n=node: _partition_count(n.bootstrap, "replicated") == 6,
                15,
                f"node {node.node_id} to know the topic",
            )
            topic = _admin(node.bootstrap).list_topics("replicated", timeout=5).topics["replicated"]
            leaders = sorted(p.leader for p in topic.partitions.values())
            assert leaders == [1, 1, 2, 2, 3, 3]  # spread evenly
            for partition in topic.partitions.values():
                assert sorted(partition.replicas) == [1, 2, 3]
                assert sorted(partition.isrs) == [1, 2, 3]
        with pytest.raises(Exception, match="(?i)replication"):
            _create(cluster.brokers[1].bootstrap, "too-many-replicas", 1, 4)

        values = _produce_and_consume(cluster.bootstrap(), "replicated", 60)
        assert sorted(values) == sorted(f"value-{i}".encode() for i in range(60))

        admin = _admin(cluster.brokers[2].bootstrap)  # DeleteTopics, forwarded
        with pytest.raises(Exception, match="(?i)invalid topic"):
            admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"].result(10)
        admin.delete_topics(["replicated"])["replicated"].result(10)
        for node in cluster.brokers:
            wait_until(
                lambda n=node: (
                    "replicated" not in _admin(n.bootstrap).list_topics(timeout=3).topics
                ),
                10,
                "the deletion on every node",
            )
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()


def _controller_of(bootstrap: str) -> int:
    try:
        return _admin(bootstrap).list_topics(timeout=3).controller_id
    except Exception:
        return -1


def test_kill_9_of_the_active_controller_and_catch_up_from_a_snapshot(cluster_root: Path) -> None:
    # Snapshots every 5,000 bytes of records (a few dozen), so the restarted node is
    # sent one.
    cluster = Cluster.combined(
        cluster_root, overrides={"metadata.log.max.record.bytes.between.snapshots": "5000"}
    )
    try:
        cluster.start_all()
        first = cluster.brokers[0]
        wait_until(lambda: _brokers_seen(first.bootstrap) == [1, 2, 3], 15, "3 brokers")
        active = _controller_of(first.bootstrap)
        assert active in (1, 2, 3)
        victim = cluster.nodes[active]
        victim.kill()
        survivors = [n for n in cluster.brokers if n is not victim]
        wait_until(
            lambda: all(_controller_of(n.bootstrap) not in (-1, active) for n in survivors),
            15,
            "a new active controller",
        )
        for i, node in enumerate(survivors):  # CreateTopics on any live node
            _create(node.bootstrap, f"after-failover-{i}", 2, 2)
        # Enough changes while the node is down that its log is behind the snapshot.
        for batch in range(4):
            admin = _admin(survivors[0].bootstrap)
            futures = admin.create_topics(
                [NewTopic(f"bulk-{batch}-{i}", 1, 1) for i in range(20)], operation_timeout=10
            )
            for future in futures.values():
                future.result(20)
        victim.start()
        wait_until(
            lambda: (
                {"bulk-3-19", "after-failover-1"}
                <= set(_admin(victim.bootstrap).list_topics(timeout=3).topics)
            ),
            20,
            "the restarted node to catch up",
        )
        assert "metadata snapshot received from the leader" in victim.output()
        assert len(_admin(victim.bootstrap).list_topics(timeout=5).topics) >= 82
        wait_until(lambda: _brokers_seen(victim.bootstrap) == [1, 2, 3], 15, "3 brokers again")
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()


def test_three_controllers_and_two_brokers_with_fencing(cluster_root: Path) -> None:
    specs = [NodeSpec(i, "controller") for i in (1, 2, 3)]
    specs += [NodeSpec(4, "broker"), NodeSpec(5, "broker")]
    cluster = Cluster(cluster_root, specs)
    cluster.nodes[4].properties["broker.rack"] = "rack-a"
    cluster.nodes[5].properties["broker.rack"] = "rack-b"
    try:
        cluster.start_all()
        four, five = cluster.nodes[4], cluster.nodes[5]
        wait_until(lambda: _brokers_seen(four.bootstrap) == [4, 5], 15, "both brokers")
        admin = _admin(five.bootstrap)
        described = admin.describe_cluster(request_timeout=10).result(15)
        assert {(n.id, n.rack) for n in described.nodes} == {(4, "rack-a"), (5, "rack-b")}
        assert described.controller.id in (4, 5)  # clients cannot reach controller-only nodes
        _create(five.bootstrap, "two-replicas", 4, 2)
        wait_until(
            lambda: _partition_count(four.bootstrap, "two-replicas") == 4, 15, "the topic on 4"
        )
        topic = _admin(four.bootstrap).list_topics("two-replicas", timeout=5).topics["two-replicas"]
        assert {p.leader for p in topic.partitions.values()} == {4, 5}
        assert all(sorted(p.replicas) == [4, 5] for p in topic.partitions.values())
        values = _produce_and_consume(cluster.bootstrap(), "two-replicas", 40)
        assert len(values) == 40

        five.pause()  # no more heartbeats: fenced after broker.session.timeout.ms
        wait_until(lambda: _brokers_seen(four.bootstrap) == [4], 15, "broker 5 to be fenced")
        topic = _admin(four.bootstrap).list_topics("two-replicas", timeout=5).topics["two-replicas"]
        assert {p.leader for p in topic.partitions.values()} == {4}  # leadership moved
        five.resume()
        wait_until(lambda: _brokers_seen(four.bootstrap) == [4, 5], 15, "broker 5 back")
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()
