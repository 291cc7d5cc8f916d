"""Share groups (KIP-932) in a three-node cluster: ``kill -9`` of the share coordinator's
node (the leader of the group's ``__share_group_state`` partition) while share consumers
consume and acknowledge.

The checker is independent of the code under test: it keeps, per offset, how often the
consumers were handed a record and how often an acknowledgement of it was confirmed
(``commit_sync`` answered success for its partition). Every record must be delivered
at least once, and none confirmed acknowledged twice: an acknowledgement is answered
only once its state write is replicated, so the next share coordinator knows it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from cluster_process import Cluster
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka_helpers import wait_until
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from raw_client import RawClient

STATE_TOPIC = "__share_group_state"
RECORDS = 300
OVERRIDES = {
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.wait.max.ms": "50",
    "replica.fetch.backoff.ms": "100",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.num.partitions": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": "3000",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "200",
}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})


def _leader(bootstrap: str, topic: str) -> int:
    metadata = _admin(bootstrap).list_topics(topic, timeout=5)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or 0 not in found.partitions:
        return -1
    return int(found.partitions[0].leader)


def _earliest(admin: AdminClient, group: str) -> None:
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(10)


def _start_offsets(cluster: Cluster, group: str, topic: str) -> list[int]:
    """The share-partition's start offset as each live node describes it."""
    found = []
    for node in cluster.brokers:
        if not node.alive():
            continue
        try:
            with RawClient(node.port) as client:
                response = client.request(
                    DescribeShareGroupOffsetsRequest(
                        groups=(
                            DescribeShareGroupOffsetsRequestGroup(
                                group_id=group,
                                topics=(
                                    DescribeShareGroupOffsetsRequestTopic(
                                        topic_name=topic, partitions=(0,)
                                    ),
                                ),
                            ),
                        )
                    )
                )
        except OSError:
            continue
        found += [p.start_offset for g in response.groups for t in g.topics for p in t.partitions]
    return found


def _start_offset(cluster: Cluster, group: str, topic: str) -> int:
    """The share-partition's start offset as the live nodes know it (the highest)."""
    return max(_start_offsets(cluster, group, topic), default=-1)


class Checker:
    """What the consumers were handed and what acknowledgements were confirmed. Once
    ``pause_after`` acknowledgements are confirmed, a consumer holding records it has
    not acknowledged yet waits at ``gate`` (the kill happens meanwhile)."""

    def __init__(self, pause_after: int) -> None:
        self.lock = threading.Lock()
        self.delivered: Counter[int] = Counter()
        self.confirmed: Counter[int] = Counter()
        self.pause_after = pause_after
        self.gate = threading.Event()
        self.paused = 0

    def consume(self, consumer: ShareConsumer, topic: str, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                messages = consumer.poll(0.3)
            except Exception:  # noqa: BLE001 - a poll during the failover is tried again
                continue
            offsets = []
            for message in messages:
                if message.error() is not None:
                    continue
                offsets.append(message.offset())
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            with self.lock:
                self.delivered.update(offsets)
                pause = bool(offsets) and len(self.confirmed) >= self.pause_after
                self.paused += pause
            if not offsets:
                continue
            while pause and not self.gate.wait(0.1) and not stop.is_set():
                pass
            try:
                results = consumer.commit_sync(10)
            except Exception:  # noqa: BLE001 - not confirmed: may come again
                continue
            if results.get(TopicPartition(topic, 0), "missing") is None:
                with self.lock:
                    self.confirmed.update(offsets)


def test_kill_9_of_the_share_coordinator_loses_no_acknowledgement(tmp_path: Path) -> None:
    cluster = Cluster.combined(tmp_path, overrides=OVERRIDES)
    consumers: list[ShareConsumer] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        cluster.start_all()
        bootstrap = cluster.bootstrap()
        wait_until(
            lambda: sorted(_admin(bootstrap).list_topics(timeout=3).brokers) == [1, 2, 3],
            15,
            "3 brokers",
        )
        admin = _admin(bootstrap)
        # A first share group member creates __share_group_state; the topic read is then
        # led by another node, so its acknowledgements go to the coordinator over the wire.
        admin.create_topics([NewTopic("warmup", 1, 3)])["warmup"].result(15)
        warm = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "warmup"})
        warm.subscribe(["warmup"])
        wait_until(
            lambda: (warm.poll(0.2), _leader(bootstrap, STATE_TOPIC))[1] > 0,
            20,
            "__share_group_state led",
        )
        warm.close()
        coordinator = _leader(bootstrap, STATE_TOPIC)
        others = [n for n in (1, 2, 3) if n != coordinator]
        admin.create_topics(
            [
                NewTopic(
                    "jobs",
                    num_partitions=1,
                    replica_assignment=[[others[0], coordinator, others[1]]],
                )
            ]
        )["jobs"].result(15)
        wait_until(lambda: _leader(bootstrap, "jobs") == others[0], 15, "jobs led")
        _earliest(admin, "workers")
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        for i in range(RECORDS):
            producer.produce("jobs", value=b"job-%04d" % i)
            if i % 10 == 9:
                producer.flush(10)  # batches of 10: acquired by either consumer
        assert producer.flush(30) == 0

        checker = Checker(pause_after=RECORDS // 3)
        for _ in range(2):
            consumer = ShareConsumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": "workers",
                    "share.acknowledgement.mode": "explicit",
                    "max.poll.records": 20,  # the work comes in pieces: some left to kill
                }
            )
            consumer.subscribe(["jobs"])
            consumers.append(consumer)
            thread = threading.Thread(target=checker.consume, args=(consumer, "jobs", stop))
            thread.start()
            threads.append(thread)

        def paused() -> int:
            with checker.lock:
                return checker.paused

        wait_until(lambda: paused() >= 1, 30, "a third acknowledged, records held")
        cluster.nodes[coordinator].kill()
        wait_until(
            lambda: _leader(cluster.bootstrap(), STATE_TOPIC) not in (coordinator, -1),
            20,
            "a new share coordinator",
        )
        checker.gate.set()
        wait_until(
            lambda: _start_offset(cluster, "workers", "jobs") == RECORDS,
            60,
            "every record finished after the kill",
        )
        stop.set()
        for thread in threads:
            thread.join(15)
        with checker.lock:
            missing = set(range(RECORDS)) - set(checker.delivered)
            twice = {o: n for o, n in checker.confirmed.items() if n > 1}
        assert not missing, f"never delivered: {sorted(missing)[:20]}"
        assert not twice, f"acknowledged more than once: {twice}"
        assert len(checker.confirmed) > RECORDS // 3  # acknowledgements before and after
        # Every live node describes the state alike: the leader of the share-partition,
        # and the replicas of __share_group_state.
        wait_until(
            lambda: set(_start_offsets(cluster, "workers", "jobs")) == {RECORDS},
            15,
            "every live node to describe the start offset",
        )

        # The killed node comes back; the state stays: only new records are handed out.
        cluster.nodes[coordinator].start()
        for i in range(5):
            producer.produce("jobs", value=b"late-%d" % i)
        assert producer.flush(30) == 0
        late = consumers[0]
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            for message in late.poll(0.3):
                if message.error() is None:
                    got.append(message.offset())
                    late.acknowledge(message, AcknowledgeType.ACCEPT)
        assert sorted(got) == list(range(RECORDS, RECORDS + 5))
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        for consumer in consumers:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closing against a stopped cluster
                pass
        cluster.kill_all()
