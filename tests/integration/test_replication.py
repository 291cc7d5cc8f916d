"""Replication between real broker processes: followers, the ISR, the high watermark,
acks=all, and leader failover by ``kill -9``, driven by confluent-kafka.

The checker is independent of the code under test: it keeps what the producer saw
acknowledged (delivery reports) and, after healing, reads everything back with a plain
consumer and compares the replicas' segment files byte for byte.

The tests with the same settings share one three-node cluster (``cluster``): each hurts
it and heals it, on topics of its own, and any node a test left down is started again
before the next. The waits after a fault are for what the fault must lead to (a new
leader, the ISR whole again, records acknowledged since), not fixed times.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cluster_process import Cluster
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, PartitionMetadata
from kafka_helpers import wait_until

from strom.protocol.errors import ErrorCode

REPLICATION = {
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    # A group's first use makes __consumer_offsets: 3 partitions, not 50 of 3 replicas.
    "offsets.topic.num.partitions": "3",
}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})


def _partition(bootstrap: str, topic: str, index: int = 0) -> object:
    """The partition as ``bootstrap``'s metadata has it; one with no leader and no replicas
    while that broker has not yet learned of the topic (it follows the controller)."""
    metadata = _admin(bootstrap).list_topics(topic, timeout=5)
    found = metadata.topics.get(topic)
    if found is None or index not in found.partitions:
        return PartitionMetadata()
    return found.partitions[index]


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "checker",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    ends = {}
    for p in range(partitions):
        ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 60
    while any(len(got[p]) < ends[p] for p in got) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got[message.partition()].append(message.value())
    consumer.close()
    return got


def _segment_bytes(node_dir: Path, topic: str, partition: int) -> bytes:
    directory = node_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def _every_broker_listed(cluster: Cluster) -> bool:
    return sorted(_admin(cluster.bootstrap()).list_topics(timeout=3).brokers) == [1, 2, 3]


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster.combined(tmp_path_factory.mktemp("replication"), overrides=REPLICATION)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.kill_all()


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    """The module's cluster with its three nodes up and listed (a node an earlier test
    left down, failing midway, is started again first)."""
    for node in shared_cluster.nodes.values():
        if not node.alive():
            node.start()
    wait_until(lambda: _every_broker_listed(shared_cluster), 30, "3 brokers")
    return shared_cluster


def test_acks_all_survives_kill_9_of_each_leader_in_turn(cluster: Cluster) -> None:
    acked: dict[int, list[bytes]] = {0: [], 1: []}
    failed: list[str] = []
    try:
        admin = _admin(cluster.bootstrap())  # referenced until the creation is answered
        admin.create_topics([NewTopic("orders", 2, 3)])["orders"].result(15)
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap(),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60000,
            }
        )

        def delivered(error: KafkaError | None, message: object) -> None:
            if error is None:
                acked[message.partition()].append(message.value())  # type: ignore[attr-defined]
            else:
                failed.append(str(error))

        sequence = 0

        def produce_until(done: Callable[[], bool], seconds: float, what: str) -> None:
            """Write to both partitions without pause until ``done()`` (asked every 0.2 s)."""
            nonlocal sequence
            deadline = time.monotonic() + seconds
            ask_at = time.monotonic()
            while True:
                if time.monotonic() >= ask_at:
                    if done():
                        return
                    assert time.monotonic() < deadline, f"timed out waiting for {what}"
                    ask_at = time.monotonic() + 0.2
                for partition in (0, 1):
                    producer.produce(
                        "orders",
                        value=b"%08d" % sequence,
                        partition=partition,
                        on_delivery=delivered,
                    )
                    sequence += 1
                producer.poll(0.005)

        def state() -> dict[int, tuple[int, list[int]]]:
            """partition -> (leader, ISR) as the metadata shows them now ({} unanswered)."""
            try:
                topic = admin.list_topics("orders", timeout=2).topics["orders"]
            except KafkaException:
                return {}
            return {p: (m.leader, sorted(m.isrs)) for p, m in topic.partitions.items()}

        def acknowledged_since(counts: list[int]) -> Callable[[], bool]:
            """Once both partitions have acknowledged records beyond ``counts`` (taken
            when the condition is first asked)."""

            def done() -> bool:
                if not counts:
                    counts.extend(len(acked[p]) for p in (0, 1))
                return all(len(acked[p]) > counts[p] for p in (0, 1))

            return done

        def both(first: Callable[[], bool], then: Callable[[], bool]) -> Callable[[], bool]:
            """``first`` until it holds once, then ``then``."""
            held: list[bool] = []

            def done() -> bool:
                if not held and first():
                    held.append(True)
                return bool(held) and then()

            return done

        produce_until(acknowledged_since([]), 30, "the first acknowledgements")
        for _round in range(2):
            for partition in (0, 1):
                leader = state().get(partition, (-1, []))[0]
                victim = cluster.nodes[leader]
                victim.kill()

                def failed_over(victim_id: int = leader, partition: int = partition) -> bool:
                    # the controller fenced it: a new leader, and no ISR holds it
                    now = state()
                    return (
                        len(now) == 2
                        and now[partition][0] not in (victim_id, -1)
                        and all(victim_id not in isr for _, isr in now.values())
                    )

                produce_until(
                    both(failed_over, acknowledged_since([])), 60, f"failover from {leader}"
                )
                victim.start()

                def caught_up() -> bool:
                    now = state()
                    return len(now) == 2 and all(isr == [1, 2, 3] for _, isr in now.values())

                produce_until(
                    both(caught_up, acknowledged_since([])), 60, f"node {leader} back in the ISRs"
                )
        assert producer.flush(60) == 0
        assert not failed, failed[:5]
        assert sum(len(v) for v in acked.values()) > 100

        # Healed: every replica catches up; all ISR again.
        def whole() -> bool:
            return all(
                sorted(_partition(cluster.bootstrap(), "orders", p).isrs) == [1, 2, 3]  # type: ignore[attr-defined]
                for p in (0, 1)
            )

        wait_until(whole, 30, "every replica back in the ISR")
        got = _read_all(cluster.bootstrap(), "orders", 2)
        for partition in (0, 1):
            # Every acknowledged record exactly once, in the order acknowledged.
            assert got[partition] == acked[partition], (
                f"partition {partition}: {len(got[partition])} read, "
                f"{len(acked[partition])} acknowledged"
            )
        for partition in (0, 1):
            # The followers' last fetches land; then the replicas are the same bytes.
            wait_until(
                lambda p=partition: (
                    len({_segment_bytes(n.data_dir, "orders", p) for n in cluster.brokers}) == 1
                ),
                30,
                f"identical replicas of orders-{partition}",
            )
    except BaseException:
        print(cluster.logs())
        raise


def test_acks_all_with_one_replica_alive_is_not_enough_replicas(cluster: Cluster) -> None:
    try:
        one = cluster.nodes[1]
        admin = _admin(one.bootstrap)
        # Replicas on brokers 1 and 2 only, min.insync.replicas=2: stopping broker 2
        # (a follower, not the controller's majority) leaves an ISR of one.
        admin.create_topics(
            [
                NewTopic(
                    "strict",
                    num_partitions=1,
                    replica_assignment=[[1, 2]],
                    config={"min.insync.replicas": "2"},
                )
            ]
        )["strict"].result(15)
        wait_until(
            lambda: sorted(_partition(one.bootstrap, "strict").isrs) == [1, 2],  # type: ignore[attr-defined]
            15,
            "ISR [1, 2]",
        )
        producer = Producer(
            {
                "bootstrap.servers": one.bootstrap,
                "acks": "all",
                "retries": 0,
                "message.timeout.ms": 5000,
            }
        )
        producer.produce("strict", value=b"before")
        assert producer.flush(15) == 0
        cluster.nodes[2].kill()
        wait_until(
            lambda: _partition(one.bootstrap, "strict").isrs == [1],  # type: ignore[attr-defined]
            15,
            "broker 2 out of the ISR",
        )
        errors: list[KafkaError | None] = []
        producer.produce("strict", value=b"x", on_delivery=lambda e, m: errors.append(e))
        producer.flush(15)
        assert errors and errors[0] is not None
        assert errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors[0]
        cluster.nodes[2].start()
        wait_until(
            lambda: sorted(_partition(one.bootstrap, "strict").isrs) == [1, 2],  # type: ignore[attr-defined]
            30,
            "broker 2 back in the ISR",
        )
        producer.produce("strict", value=b"after")
        assert producer.flush(15) == 0
        assert _read_all(one.bootstrap, "strict", 1)[0] == [b"before", b"after"]
        wait_until(  # the follower's last fetch lands; then the replicas are the same bytes
            lambda: (
                len({_segment_bytes(cluster.nodes[n].data_dir, "strict", 0) for n in (1, 2)}) == 1
            ),
            30,
            "identical replicas of strict-0",
        )
    except BaseException:
        print(cluster.logs())
        raise


def test_replica_fetch_min_bytes_holds_the_followers_fetch(tmp_path: Path) -> None:
    """replica.fetch.min.bytes: the follower asks for at least that much, so the leader
    holds its fetch up to replica.fetch.wait.max.ms while less has been written. An
    acks=all record (min.insync.replicas=2) sent just after the previous one was
    acknowledged (the follower's next fetch has just come in) therefore waits for that
    fetch to be answered, about the whole wait; with Kafka's default of 1 byte it is
    acknowledged at once."""
    wait_ms = 3000
    cluster = Cluster.combined(
        tmp_path,
        count=2,
        overrides={
            "replica.fetch.min.bytes": "1000000",
            "replica.fetch.wait.max.ms": str(wait_ms),
            "replica.lag.time.max.ms": "30000",
        },
    )
    try:
        cluster.start_all()
        one = cluster.nodes[1]
        admin = _admin(one.bootstrap)
        wait_until(lambda: sorted(admin.list_topics(timeout=3).brokers) == [1, 2], 15, "2 brokers")
        config = {"min.insync.replicas": "2"}
        admin.create_topics(
            [NewTopic("held", num_partitions=1, replica_assignment=[[1, 2]], config=config)]
        )["held"].result(15)
        wait_until(
            lambda: sorted(_partition(one.bootstrap, "held").isrs) == [1, 2],  # type: ignore[attr-defined]
            15,
            "ISR [1, 2]",
        )
        producer = Producer({"bootstrap.servers": one.bootstrap, "acks": "all", "linger.ms": 0})
        producer.produce("held", value=b"first")
        assert producer.flush(15) == 0
        delivered: list[KafkaError | None] = []
        producer.produce("held", value=b"second", on_delivery=lambda e, m: delivered.append(e))
        producer.flush(wait_ms / 2000)
        assert not delivered, "acknowledged before the follower's held fetch was answered"
        assert producer.flush(15) == 0
        assert delivered == [None]
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()


def test_a_group_keeps_consuming_across_the_kill_of_its_coordinator(cluster: Cluster) -> None:
    try:
        admin = _admin(cluster.bootstrap())
        admin.create_topics([NewTopic("events", 3, 3)])["events"].result(15)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
        sent = {b"%04d" % i for i in range(600)}
        for value in sorted(sent):
            producer.produce("events", value=value, partition=int(value) % 3)
        assert producer.flush(30) == 0

        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap(),
                "group.id": "billing",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        consumer.subscribe(["events"])
        seen: list[bytes] = []
        committed: dict[int, int] = {}

        def consume_until(count: int, seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while len(set(seen)) < count and time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                seen.append(message.value())
                position = TopicPartition("events", message.partition(), message.offset() + 1)
                try:
                    consumer.commit(offsets=[position], asynchronous=False)
                    committed[message.partition()] = message.offset() + 1
                except Exception:  # noqa: BLE001 - a commit during the move is retried later
                    pass

        consume_until(200, 30)
        assert len(set(seen)) >= 200
        described = admin.describe_consumer_groups(["billing"])["billing"].result(10)
        coordinator = described.coordinator.id
        cluster.nodes[coordinator].kill()
        before = dict(committed)
        # The new coordinator loaded the group's offsets from its replica of the log.
        checker = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "billing"})
        wanted = [TopicPartition("events", p) for p in range(3)]
        loaded = {tp.partition: tp.offset for tp in checker.committed(wanted, timeout=20)}
        checker.close()
        assert {p: o for p, o in loaded.items() if o >= 0} == before
        consume_until(600, 60)
        assert set(seen) == sent, f"{len(set(seen))} of {len(sent)} read after the move"
        consumer.close()
        survivor = next(n for n in cluster.brokers if n.alive())
        survivor_admin = _admin(survivor.bootstrap)
        moved = survivor_admin.describe_consumer_groups(["billing"])["billing"].result(10)
        assert moved.coordinator.id != coordinator
        cluster.nodes[coordinator].start()
        # The committed offsets survived the move: a new member starts where they are.
        checker = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "billing"})
        positions = {tp.partition: tp.offset for tp in checker.committed(wanted, timeout=15)}
        checker.close()
        assert positions == {p: 200 for p in range(3)}
        assert committed == positions
    except BaseException:
        print(cluster.logs())
        raise


def test_sigterm_moves_leadership_away_before_the_broker_stops(cluster: Cluster) -> None:
    """A rolling restart: each broker in turn is stopped with SIGTERM and started again
    while an idempotent acks=all producer writes. Controlled shutdown moves its leaders
    away first, so the producer sees no error it does not retry. A broker that is asked
    for a partition it does not lead names the leader (KIP-951)."""
    from kio.schema.produce.v11 import request as produce_v11

    from strom.protocol.records import build_batch
    from strom.wire_client import WireConnection

    acked: list[bytes] = []
    failed: list[str] = []
    try:
        admin = _admin(cluster.bootstrap())
        admin.create_topics([NewTopic("rolling", 3, 3)])["rolling"].result(15)
        wait_until(
            lambda: all(
                len(_partition(cluster.bootstrap(), "rolling", p).isrs) == 3  # type: ignore[attr-defined]
                for p in range(3)
            ),
            15,
            "full ISRs",
        )
        leader = _partition(cluster.bootstrap(), "rolling", 0).leader  # type: ignore[attr-defined]
        follower = next(n for n in cluster.brokers if n.node_id != leader)
        conn = WireConnection(
            "127.0.0.1", follower.port, "kip-951-check", connect_timeout_s=5, request_timeout_s=10
        )
        try:
            batch = build_batch([(None, b"x")])
            response = conn.request(
                produce_v11.ProduceRequest(
                    transactional_id=None,
                    acks=1,
                    timeout=datetime.timedelta(seconds=5),
                    topic_data=(
                        produce_v11.TopicProduceData(
                            name="rolling",
                            partition_data=(
                                produce_v11.PartitionProduceData(index=0, records=batch),
                            ),
                        ),
                    ),
                )
            )
        finally:
            conn.close()
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.not_leader_or_follower
        assert part.current_leader.leader_id == leader
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [
            (leader, cluster.nodes[leader].port)
        ]

        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap(),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
            }
        )

        latest = {p: -1 for p in range(3)}  # partition -> the last sequence acknowledged

        def delivered(error: KafkaError | None, message: object) -> None:
            if error is None:
                acked.append(message.value())  # type: ignore[attr-defined]
                latest[message.partition()] = int(message.value())  # type: ignore[attr-defined]
            else:
                failed.append(str(error))

        sequence = 0

        def produce_until_acknowledged_on_every_partition(what: str) -> None:
            """Write until every partition has acknowledged a record written from now on."""
            nonlocal sequence
            since = sequence
            deadline = time.monotonic() + 60
            while min(latest.values()) < since:
                assert time.monotonic() < deadline, f"nothing acknowledged {what}"
                producer.produce(
                    "rolling",
                    value=b"%08d" % sequence,
                    partition=sequence % 3,
                    on_delivery=delivered,
                )
                sequence += 1
                producer.poll(0.002)

        # A burst with the client's defaults: produce frames large enough to be decoded
        # in place, each answered once replicated.
        for _ in range(30_000):
            while True:
                try:
                    producer.produce(
                        "rolling",
                        value=b"%08d" % sequence,
                        partition=sequence % 3,
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.01)
            sequence += 1
        assert producer.flush(30) == 0
        assert len(acked) == sequence and not failed
        produce_until_acknowledged_on_every_partition("after the burst")
        for node in list(cluster.brokers):
            assert node.stop() == 0  # SIGTERM: controlled shutdown, clean exit
            produce_until_acknowledged_on_every_partition(f"with node {node.node_id} stopped")
            node.start()
            wait_until(
                lambda: all(
                    len(_partition(cluster.bootstrap(), "rolling", p).isrs) == 3  # type: ignore[attr-defined]
                    for p in range(3)
                ),
                30,
                "full ISRs again",
            )
            produce_until_acknowledged_on_every_partition(f"with node {node.node_id} back")
        assert producer.flush(30) == 0
        assert not failed, failed[:5]
        got = _read_all(cluster.bootstrap(), "rolling", 3)
        for p in range(3):
            assert got[p] == [v for v in acked if int(v) % 3 == p]
    except BaseException:
        print(cluster.logs())
        raise
