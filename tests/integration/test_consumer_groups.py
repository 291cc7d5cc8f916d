"""Consumer groups with real clients: rebalances, a killed member, committed offsets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka_helpers import create_topic, wait_until
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from raw_client import RawClient

from strom.protocol.errors import ErrorCode

CONSUMER_SCRIPT = Path(__file__).parent.parent / "group_consumer.py"
GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "5",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.session.timeout.ms": "3000",
}
PARTITIONS = 6


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups") / "data", GROUP_OVERRIDES)
    process.start()
    yield process
    if process.alive():
        process.stop()


def produce(
    bootstrap: str, topic: str, start: int, count: int, partitions: int = PARTITIONS
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert producer.flush(15) == 0


class Member:
    """One group consumer in a child process (tests/group_consumer.py)."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, assignor: str):
        self.proc = subprocess.Popen(
            [sys.executable, str(CONSUMER_SCRIPT), client, bootstrap, group, topic, assignor],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.records: set[tuple[int, int]] = set()
        self.assigned: list[int] | None = None
        self.committed: dict[int, int] = {}  # partition -> next offset, after each commit
        self.commit_failures: list[str] = []
        self.errors: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_errors, daemon=True).start()

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.errors.append(line.decode(errors="replace").rstrip())
            del self.errors[:-200]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if "assigned" in event:
                self.assigned = event["assigned"]
            for partition, offset in event.get("records", ()):
                self.records.add((partition, offset))
            for partition, offset in event.get("committed", ()):
                self.committed[partition] = offset
            if "commit_failed" in event:
                self.commit_failures.append(event["commit_failed"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)
        self._reader.join(10)  # every event it wrote before it died is read


def _run_group_with_a_killed_member(
    broker: BrokerProcess, client: str, assignor: str, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    per_round = 300
    produce(broker.bootstrap, topic, 0, per_round)
    members = [
        Member(client, broker.bootstrap, f"{topic}-group", topic, assignor) for _ in range(3)
    ]
    try:

        def balanced(group: list[Member]) -> bool:
            owned = [p for m in group for p in (m.assigned or [])]
            return all(m.assigned for m in group) and sorted(owned) == list(range(PARTITIONS))

        wait_until(lambda: balanced(members), 60, "three members sharing six partitions")
        victim, survivors = members[0], members[1:]
        victim_partitions = set(victim.assigned or [])
        at_balance = dict(victim.committed)
        produce(broker.bootstrap, topic, per_round, per_round)
        wait_until(
            lambda: any(
                victim.committed.get(p, 0) > at_balance.get(p, 0) for p in victim_partitions
            ),
            30,
            "the victim to consume and commit from its partitions",
        )
        victim.kill()
        seen_before_kill = [m.records.copy() for m in survivors]
        produce(broker.bootstrap, topic, 2 * per_round, per_round)
        wait_until(lambda: balanced(survivors), 60, "the survivors to take over")
        assert victim_partitions <= {p for m in survivors for p in m.assigned or []}
        per_partition = 3 * per_round // PARTITIONS
        expected = {(p, o) for p in range(PARTITIONS) for o in range(per_partition)}
        wait_until(
            lambda: expected <= set().union(*(m.records for m in members)),
            60,
            "every record to be consumed",
        )
        after_kill = {
            (p, o)
            for p, o in expected
            if p in victim_partitions and o >= 2 * per_round // PARTITIONS
        }
        assert after_kill <= set().union(*(m.records for m in survivors))
        # The survivors took the victim's partitions up where its commits left them:
        # from its last commit it reported, at the latest after the last record it read
        # (its commit of that may have landed as it died), never from the start.
        taken_over = set().union(
            *(m.records - before for m, before in zip(survivors, seen_before_kill, strict=True))
        )
        resumed = {}
        for p in victim_partitions & set(victim.committed):
            read_by_victim = max(o for q, o in victim.records if q == p)
            resumed[p] = min(o for q, o in taken_over if q == p)
            assert victim.committed[p] <= resumed[p] <= read_by_victim + 1, (p, resumed[p])
        assert resumed and all(offset > 0 for offset in resumed.values()), resumed
        failed = [f for m in members for f in m.commit_failures]
        assert not failed, f"commits failed: {failed}"
    except AssertionError:
        for i, member in enumerate(members):
            print(f"member {i}: assigned {member.assigned}, {len(member.records)} records")
            print(f"member {i}: committed {member.committed}, failed {member.commit_failures}")
            print("\n".join(member.errors))
        print(broker.logs())
        raise
    finally:
        for member in members:
            member.stop()


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky", "kip848"])
def test_confluent_group_survives_a_killed_member(group_broker, assignor) -> None:
    _run_group_with_a_killed_member(group_broker, "confluent", assignor, f"cg-{assignor}")


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_other_clients_group_survives_a_killed_member(group_broker, client) -> None:
    _run_group_with_a_killed_member(group_broker, client, "range", f"cg-{client}")


def test_admin_client_lists_describes_alters_and_deletes_groups(group_broker) -> None:
    bootstrap = group_broker.bootstrap
    topic = "admin-groups"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 0, 20, 2)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "admin-g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,  # nothing waits for it to expire
            "client.id": "admin-test-client",
        }
    )
    consumer.subscribe([topic])
    wait_until(
        lambda: consumer.poll(0.2) is not None and bool(consumer.assignment()), 30, "an assignment"
    )
    consumer.commit(offsets=[TopicPartition(topic, 0, 7, "meta-0")], asynchronous=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    listed = admin.list_consumer_groups().result(timeout=10)
    assert "admin-g" in {g.group_id for g in listed.valid}
    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(timeout=10)
    assert "admin-g" in {g.group_id for g in stable.valid}
    empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(timeout=10)
    assert "admin-g" not in {g.group_id for g in empty.valid}

    described = admin.describe_consumer_groups(["admin-g"])["admin-g"].result(timeout=10)
    assert described.state == ConsumerGroupState.STABLE
    assert described.partition_assignor == "range"
    assert len(described.members) == 1
    member = described.members[0]
    assert member.client_id == "admin-test-client"
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]

    request = [ConsumerGroupTopicPartitions("admin-g")]
    offsets = admin.list_consumer_group_offsets(request)["admin-g"].result(timeout=10)
    by_partition = {tp.partition: tp for tp in offsets.topic_partitions}
    assert by_partition[0].offset == 7
    assert by_partition[0].metadata == "meta-0"

    consumer.close()
    wait_until(
        lambda: (
            admin.describe_consumer_groups(["admin-g"])["admin-g"].result(10).state
            == ConsumerGroupState.EMPTY
        ),
        10,
        "the group to be empty",
    )
    altered = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("admin-g", [TopicPartition(topic, 1, 3)])]
    )["admin-g"].result(timeout=10)
    assert altered.topic_partitions[0].error is None
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("admin-g")])[
        "admin-g"
    ].result(timeout=10)
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 7, 1: 3}

    admin.delete_consumer_groups(["admin-g"])["admin-g"].result(timeout=10)
    listed = admin.list_consumer_groups().result(timeout=10)
    assert "admin-g" not in {g.group_id for g in listed.valid}


def test_committed_offsets_survive_restart_and_kill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", GROUP_OVERRIDES)
    broker.start()
    try:
        topic = "durable-offsets"
        create_topic(broker.bootstrap, topic, 2)
        produce(broker.bootstrap, topic, 0, 200, 2)

        def committed() -> dict[int, tuple[int, str | None, int | None]]:
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "durable"})
            try:
                found = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
            finally:
                consumer.close()
            return {tp.partition: (tp.offset, tp.metadata, tp.leader_epoch) for tp in found}

        committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "durable"})
        committer.commit(
            offsets=[TopicPartition(topic, 0, 40, "first", 0), TopicPartition(topic, 1, 11)],
            asynchronous=False,
        )
        committer.close()
        assert committed()[0] == (40, "first", 0)

        broker.stop()
        broker.start()
        assert committed()[0] == (40, "first", 0)
        assert committed()[1][0] == 11

        committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "durable"})
        committer.commit(offsets=[TopicPartition(topic, 0, 60, "second")], asynchronous=False)
        committer.close()
        broker.kill()
        broker.start()
        assert committed()[0][:2] == (60, "second")

        resumed = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "durable",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10_000,  # nothing waits for it to expire
            }
        )
        resumed.subscribe([topic])
        first: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(first) < 2 and time.monotonic() < deadline:
            msg = resumed.poll(0.5)
            if msg is not None and not msg.error():
                first.setdefault(msg.partition(), msg.offset())
        resumed.close()
        assert first == {0: 60, 1: 11}
    finally:
        if broker.alive():
            broker.kill()


def test_kip848_group_shares_partitions_and_consumes_everything(group_broker) -> None:
    """confluent-kafka with group.protocol=consumer: the broker assigns (KIP-848)."""
    bootstrap = group_broker.bootstrap
    topic = "kip848-topic"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 0, 600)
    stop = threading.Event()
    records: set[tuple[int, int]] = set()
    assignments: dict[int, set[int]] = {}
    lock = threading.Lock()

    def member(index: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "kip848-group",
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([topic])
        while not stop.is_set():
            msg = consumer.poll(0.1)
            with lock:
                if msg is not None and not msg.error():
                    records.add((msg.partition(), msg.offset()))
                assignments[index] = {tp.partition for tp in consumer.assignment()}
        consumer.close()

    def shared_by_three() -> bool:
        with lock:
            owned = [p for a in assignments.values() for p in a]
            return (
                len(assignments) == 3
                and all(assignments.values())
                and sorted(owned) == list(range(PARTITIONS))
            )

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    try:
        wait_until(shared_by_three, 60, "three KIP-848 members sharing six partitions")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups(["kip848-group"])["kip848-group"].result(10)
        assert described.type == ConsumerGroupType.CONSUMER
        assert len(described.members) == 3
        produce(bootstrap, topic, 600, 600)
        expected = {(p, o) for p in range(PARTITIONS) for o in range(200)}
        wait_until(lambda: expected <= records, 60, "every record to be consumed")
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)


def test_new_protocol_consumer_commits_to_a_group_that_does_not_exist(group_broker) -> None:
    """A group.protocol=consumer client that assigns partitions itself commits with member
    epoch -1 and the member id it made up (OffsetCommit v9): Kafka creates a simple
    classic group and answers per partition. With a generation, a group that does not
    exist is GROUP_ID_NOT_FOUND from v9 on."""
    bootstrap = group_broker.bootstrap
    topic = "simple-commit-topic"
    create_topic(bootstrap, topic, 1)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "simple-commit-group",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        [stored] = consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        assert stored.error is None
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 5
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = admin.describe_consumer_groups(["simple-commit-group"])["simple-commit-group"]
    described = group.result(10)
    assert (described.type, described.state) == (
        ConsumerGroupType.CLASSIC,
        ConsumerGroupState.EMPTY,
    )

    def commit(group_id: str, epoch: int) -> list[int]:
        partitions = tuple(
            OffsetCommitRequestPartition(
                partition_index=p,
                committed_offset=1,
                committed_leader_epoch=-1,
                committed_metadata=None,
            )
            for p in (0, 7)
        )
        with RawClient(group_broker.port) as client:
            response = client.request(
                OffsetCommitRequest(
                    group_id=group_id,
                    generation_id_or_member_epoch=epoch,
                    member_id="a-member-id-of-its-own",
                    group_instance_id=None,
                    topics=(OffsetCommitRequestTopic(name=topic, partitions=partitions),),
                )
            )
        return [p.error_code for p in response.topics[0].partitions]

    assert commit("simple-commit-raw", -1) == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert commit("no-such-group", 3) == [ErrorCode.group_id_not_found] * 2


def test_new_protocol_static_member_cannot_take_a_live_members_instance_id(group_broker) -> None:
    """Two group.protocol=consumer clients with the same group.instance.id: the second
    is refused (UNRELEASED_INSTANCE_ID, fatal to librdkafka) while the first is alive,
    and the first keeps its partitions."""
    bootstrap = group_broker.bootstrap
    topic = "static-848-topic"
    create_topic(bootstrap, topic, 2)
    errors: list = []
    consumers = [
        Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "static-848-group",
                "group.protocol": "consumer",
                "group.instance.id": "the-instance",
                "error_cb": lambda err, i=i: errors.append((i, err)),
            }
        )
        for i in range(2)
    ]
    try:
        first, second = consumers
        first.subscribe([topic])

        def owns(consumer: Consumer, count: int) -> bool:
            consumer.poll(0.1)
            return len(consumer.assignment()) == count

        wait_until(lambda: owns(first, 2), 30, "the first member to own both partitions")
        second.subscribe([topic])

        def refused() -> bool:
            first.poll(0.05)
            msg = second.poll(0.05)  # a fatal error comes as a message's error
            if msg is not None and msg.error():
                errors.append((1, msg.error()))
            return any(i == 1 and err.code() == KafkaError._FATAL for i, err in errors)

        wait_until(refused, 30, "the second member to be refused")
        error = next(err for i, err in errors if i == 1 and err.code() == KafkaError._FATAL)
        assert "instance ID is still used by another member" in error.str()
        assert second.assignment() == []
        assert owns(first, 2)
        assert not [err for i, err in errors if i == 0]
    finally:
        for consumer in consumers:
            consumer.close()


def test_new_protocol_member_rejoins_after_many_unsubscribes(group_broker) -> None:
    """A group.protocol=consumer member that subscribes and unsubscribes seven times in a
    row (leave with epoch -1, rejoin with epoch 0 under the same member id) gets its
    partitions back each time, and the group ends with that one member."""
    bootstrap = group_broker.bootstrap
    topic = "cycles-848-topic"
    create_topic(bootstrap, topic, 2)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cycles-848", "group.protocol": "consumer"}
    )

    def owns(count: int) -> bool:
        consumer.poll(0.1)
        return len(consumer.assignment()) == count

    try:
        for cycle in range(7):
            consumer.subscribe([topic])
            wait_until(lambda: owns(2), 30, f"both partitions in cycle {cycle}")
            consumer.unsubscribe()
            wait_until(lambda: owns(0), 30, f"no partition after unsubscribing in cycle {cycle}")
        consumer.subscribe([topic])
        wait_until(lambda: owns(2), 30, "both partitions after the last subscribe")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        group = admin.describe_consumer_groups(["cycles-848"])["cycles-848"].result(10)
        assert len(group.members) == 1
    finally:
        consumer.close()
