"""Moving replicas and leaders between real broker processes: a partition reassigned
from brokers {1,2,3} to {2,3,4} while an idempotent acks=all producer writes, with
``strom reassign-partitions``; a preferred leader election after a failover, with
``strom leader-election`` (confluent-kafka's ElectLeaders).

The checks use only what clients observe and what is on disk: delivery reports, a
plain consumer reading everything back, Metadata, and the brokers' data directories.

The move to {2,3,4} and the removal of broker 4 share one cluster of three combined
nodes and a broker (``four_nodes``), on topics of their own, one after the other: the
removal, which takes broker 4 away for good, comes second and stops the cluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import ok, strom
from cluster_process import Cluster, NodeSpec
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from kafka_helpers import wait_until

REPLICATION = {
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "min.insync.replicas": "2",
}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})


def _partition(admin: AdminClient, topic: str, index: int = 0) -> object:
    """The partition's metadata, once the broker asked knows it: a broker answers for a
    topic created a moment ago only after it has applied the creation (up to 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions
        if index in partitions or time.monotonic() > deadline:
            return partitions[index]
        time.sleep(0.1)


def _read_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "checker",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < end and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


def _configs(admin: AdminClient) -> dict[str, str | None]:
    """Topic "bulk"'s configs and broker 2's (one broker per DescribeConfigs)."""
    values: dict[str, str | None] = {}
    for resource in (
        ConfigResource(ResourceType.TOPIC, "bulk"),
        ConfigResource(ResourceType.BROKER, "2"),
    ):
        for future in admin.describe_configs([resource]).values():
            values.update({k: e.value for k, e in future.result(10).items()})
    return values


def _create(
    admin: AdminClient, topic: str, replicas: list[int], config: dict[str, str] | None = None
) -> None:
    admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[replicas], config=config or {})]
    )[topic].result(15)


@pytest.fixture(scope="module")
def four_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    specs = [NodeSpec(i, "broker,controller") for i in (1, 2, 3)] + [NodeSpec(4, "broker")]
    cluster = Cluster(tmp_path_factory.mktemp("four-nodes"), specs, overrides=REPLICATION)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.kill_all()


def test_reassignment_from_1_2_3_to_2_3_4_while_producing(
    four_nodes: Cluster, tmp_path: Path
) -> None:
    cluster = four_nodes
    acked: list[bytes] = []
    failed: list[str] = []
    try:
        admin = _admin(cluster.bootstrap())
        wait_until(
            lambda: sorted(admin.list_topics(timeout=3).brokers) == [1, 2, 3, 4], 15, "4 brokers"
        )
        _create(admin, "moving", [1, 2, 3])
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap(),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
            }
        )

        def delivered(error: KafkaError | None, message: object) -> None:
            if error is None:
                acked.append(message.value())  # type: ignore[attr-defined]
            else:
                failed.append(str(error))

        sequence = 0

        def produce_for(seconds: float) -> None:
            nonlocal sequence
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                producer.produce("moving", value=b"%08d" % sequence, on_delivery=delivered)
                sequence += 1
                producer.poll(0.002)

        produce_for(1.0)
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [{"topic": "moving", "partition": 0, "replicas": [2, 3, 4]}],
                }
            )
        )
        bootstrap = cluster.nodes[2].bootstrap
        executed = ok(
            strom(
                "reassign-partitions",
                "--bootstrap-server",
                bootstrap,
                "--execute",
                "--reassignment-json-file",
                str(plan),
            )
        )
        assert "Successfully started partition reassignments for moving-0" in executed.stdout
        rollback = executed.stdout.split("Current partition replica assignment")[1]
        assert '"replicas": [1, 2, 3]' in rollback
        deadline = time.monotonic() + 60
        while True:
            produce_for(0.5)
            verify = strom(
                "reassign-partitions",
                "--bootstrap-server",
                bootstrap,
                "--verify",
                "--reassignment-json-file",
                str(plan),
            )
            if verify.returncode == 0:
                break
            assert "still in progress" in verify.stdout or "rather than" in verify.stdout, verify
            assert time.monotonic() < deadline, "the reassignment never completed"
        assert "Reassignment of partition moving-0 is completed." in verify.stdout
        produce_for(1.0)
        assert producer.flush(30) == 0
        assert not failed, failed[:5]
        state = _partition(admin, "moving")
        assert sorted(state.replicas) == [2, 3, 4]  # type: ignore[attr-defined]
        assert state.leader in (2, 3, 4)  # type: ignore[attr-defined]
        listed = ok(strom("reassign-partitions", "--bootstrap-server", bootstrap, "--list"))
        assert "No partition reassignments found." in listed.stdout
        # Every acknowledged record exactly once, in order, served by the new replicas.
        assert _read_all(cluster.bootstrap(), "moving") == acked
        # The old replica's files are gone.
        old = cluster.nodes[1].data_dir
        wait_until(lambda: not list(old.glob("moving-0*")), 15, "node 1's replica removed")
        assert (cluster.nodes[4].data_dir / "moving-0").is_dir()
    except BaseException:
        print(cluster.logs())
        raise


def test_removing_a_broker_after_moving_its_replicas_off(
    four_nodes: Cluster, tmp_path: Path
) -> None:
    """Scale in: move every replica off broker 4, stop it, unregister it; the cluster
    lists three brokers and the data is intact."""
    cluster = four_nodes
    try:
        admin = _admin(cluster.bootstrap())
        wait_until(
            lambda: sorted(admin.list_topics(timeout=3).brokers) == [1, 2, 3, 4], 15, "4 brokers"
        )
        _create(admin, "leaving", [4, 1, 2])
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
        for i in range(200):
            producer.produce("leaving", value=b"%04d" % i)
        assert producer.flush(15) == 0
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [{"topic": "leaving", "partition": 0, "replicas": [3, 1, 2]}],
                }
            )
        )
        bootstrap = cluster.nodes[1].bootstrap
        ok(
            strom(
                "reassign-partitions",
                "--bootstrap-server",
                bootstrap,
                "--execute",
                "--reassignment-json-file",
                str(plan),
            )
        )
        wait_until(
            lambda: (
                strom(
                    "reassign-partitions",
                    "--bootstrap-server",
                    bootstrap,
                    "--verify",
                    "--reassignment-json-file",
                    str(plan),
                ).returncode
                == 0
            ),
            60,
            "the move off broker 4",
        )
        assert cluster.nodes[4].stop() == 0
        done = ok(strom("cluster", "--bootstrap-server", bootstrap, "--unregister", "4"))
        assert "Broker 4 is no longer registered." in done.stdout
        overview = ok(strom("cluster", "--bootstrap-server", bootstrap)).stdout
        assert "Brokers:          3" in overview and "FencedBrokers:    []" in overview
        again = strom("cluster", "--bootstrap-server", bootstrap, "--unregister", "4")
        assert again.returncode == 1 and "BROKER_ID_NOT_REGISTERED" in again.stderr
        assert _read_all(cluster.bootstrap(), "leaving") == [b"%04d" % i for i in range(200)]
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()  # the cluster's last test: it stops now, not at the module's end


def _fail_over_from_3(cluster: Cluster) -> AdminClient:
    """Topic "pref" on [3, 1, 2]: kill broker 3, let another lead, bring 3 back in sync."""
    admin = _admin(cluster.bootstrap())
    wait_until(lambda: sorted(admin.list_topics(timeout=3).brokers) == [1, 2, 3], 15, "3 brokers")
    _create(admin, "pref", [3, 1, 2])
    wait_until(lambda: _partition(admin, "pref").leader == 3, 15, "broker 3 leads")  # type: ignore[attr-defined]
    cluster.nodes[3].kill()
    survivor = _admin(cluster.nodes[1].bootstrap)
    wait_until(lambda: _partition(survivor, "pref").leader in (1, 2), 15, "a new leader")  # type: ignore[attr-defined]
    cluster.nodes[3].start()
    return survivor


def test_leadership_goes_back_to_the_preferred_replica_by_itself(tmp_path: Path) -> None:
    overrides = {**REPLICATION, "leader.imbalance.check.interval.seconds": "1"}
    cluster = Cluster.combined(tmp_path, overrides=overrides)
    try:
        cluster.start_all()
        survivor = _fail_over_from_3(cluster)
        wait_until(lambda: _partition(survivor, "pref").leader == 3, 30, "broker 3 leads again")  # type: ignore[attr-defined]
        # The controller logs the move once its election is committed, which the brokers
        # may apply (and show) first.
        wait_until(
            lambda: (
                "leadership back to the preferred replica: pref-0"
                in "".join(n.output() for n in cluster.nodes.values())
            ),
            15,
            "the move logged",
        )
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()


def test_preferred_leader_election_after_a_failover(tmp_path: Path) -> None:
    overrides = {**REPLICATION, "auto.leader.rebalance.enable": "false"}
    cluster = Cluster.combined(tmp_path, overrides=overrides)
    try:
        cluster.start_all()
        survivor = _fail_over_from_3(cluster)
        wait_until(
            lambda: sorted(_partition(survivor, "pref").isrs) == [1, 2, 3],  # type: ignore[attr-defined]
            30,
            "broker 3 back in sync",
        )
        assert _partition(survivor, "pref").leader != 3  # type: ignore[attr-defined]
        elected = ok(
            strom(
                "leader-election",
                "--bootstrap-server",
                cluster.nodes[1].bootstrap,
                "--election-type",
                "preferred",
                "--topic",
                "pref",
                "--partition",
                "0",
            )
        )
        assert (
            "Successfully completed leader election (preferred) for partitions pref-0"
            in elected.stdout
        )
        wait_until(lambda: _partition(survivor, "pref").leader == 3, 15, "broker 3 leads again")  # type: ignore[attr-defined]
        again = ok(
            strom(
                "leader-election",
                "--bootstrap-server",
                cluster.nodes[1].bootstrap,
                "--election-type",
                "PREFERRED",
                "--topic",
                "pref",
                "--partition",
                "0",
            )
        )
        assert "Valid replica already elected for partitions pref-0" in again.stdout
        missing = strom(
            "leader-election",
            "--bootstrap-server",
            cluster.nodes[1].bootstrap,
            "--election-type",
            "PREFERRED",
            "--topic",
            "nope",
            "--partition",
            "0",
        )
        assert missing.returncode == 1 and "nope-0: UNKNOWN_TOPIC_OR_PART" in missing.stdout
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()


def test_a_throttled_move_keeps_to_its_rate_and_the_throttle_goes_afterwards(
    tmp_path: Path,
) -> None:
    specs = [NodeSpec(i, "broker,controller") for i in (1, 2, 3)]
    cluster = Cluster(tmp_path, specs, overrides=REPLICATION)
    try:
        cluster.start_all()
        admin = _admin(cluster.bootstrap())
        wait_until(
            lambda: sorted(admin.list_topics(timeout=3).brokers) == [1, 2, 3], 15, "3 brokers"
        )
        _create(admin, "bulk", [1])
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "linger.ms": 20})
        for i in range(80):
            producer.produce("bulk", value=b"%03d" % i + b"z" * 100_000)
        assert producer.flush(30) == 0
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {"version": 1, "partitions": [{"topic": "bulk", "partition": 0, "replicas": [2]}]}
            )
        )
        bootstrap = cluster.nodes[1].bootstrap
        executed = ok(
            strom(
                "reassign-partitions",
                "--bootstrap-server",
                bootstrap,
                "--execute",
                "--reassignment-json-file",
                str(plan),
                "--throttle",
                "1000000",
            )
        )
        assert "The inter-broker throttle limit was set to 1000000 B/s" in executed.stdout
        values = _configs(admin)
        assert values["leader.replication.throttled.replicas"] == "0:1"
        assert values["follower.replication.throttled.replicas"] == "0:2"
        assert values["follower.replication.throttled.rate"] == "1000000"
        # 8 MB at 1 MB/s: the move cannot be done yet (unthrottled it takes a fraction
        # of a second here).
        first = strom(
            "reassign-partitions",
            "--bootstrap-server",
            bootstrap,
            "--verify",
            "--reassignment-json-file",
            str(plan),
        )
        assert first.returncode == 1 and "still in progress" in first.stdout
        deadline = time.monotonic() + 90
        while True:
            verify = strom(
                "reassign-partitions",
                "--bootstrap-server",
                bootstrap,
                "--verify",
                "--reassignment-json-file",
                str(plan),
            )
            if verify.returncode == 0:
                break
            assert time.monotonic() < deadline, "the throttled move never completed"
            time.sleep(0.2)  # each --verify is a process of its own: no longer pause
        assert "Throttle was removed." in verify.stdout
        values = _configs(admin)
        assert values["leader.replication.throttled.replicas"] in ("", None)
        assert values["follower.replication.throttled.rate"] != "1000000"
        got = _read_all(cluster.bootstrap(), "bulk")
        assert [v[:3] for v in got] == [b"%03d" % i for i in range(80)]
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()


def test_unclean_election_only_when_allowed(tmp_path: Path) -> None:
    """Replicas [1, 2]: broker 2 falls out of the ISR, then broker 1 (the last in sync)
    dies. Broker 2 alone does not lead "fragile" while unclean election is off; the
    unclean election of ``strom leader-election`` makes it lead, and the loss is logged.
    "lenient", with unclean.leader.election.enable=true, gets broker 2 as its leader by
    itself once broker 2 is back."""
    overrides = {**REPLICATION, "min.insync.replicas": "1", "auto.leader.rebalance.enable": "false"}
    cluster = Cluster.combined(tmp_path, overrides=overrides)
    try:
        cluster.start_all()
        admin = _admin(cluster.nodes[3].bootstrap)
        wait_until(
            lambda: sorted(admin.list_topics(timeout=3).brokers) == [1, 2, 3], 15, "3 brokers"
        )
        _create(admin, "fragile", [1, 2])
        _create(admin, "lenient", [1, 2], {"unclean.leader.election.enable": "true"})
        for topic in ("fragile", "lenient"):
            wait_until(
                lambda t=topic: sorted(_partition(admin, t).isrs) == [1, 2],  # type: ignore[attr-defined]
                15,
                f"{topic}: ISR [1, 2]",
            )
        cluster.nodes[2].kill()
        for topic in ("fragile", "lenient"):
            wait_until(lambda t=topic: _partition(admin, t).isrs == [1], 15, f"{topic}: ISR [1]")  # type: ignore[attr-defined]
        producer = Producer({"bootstrap.servers": cluster.nodes[1].bootstrap, "acks": "all"})
        producer.produce("fragile", value=b"only on 1")
        producer.produce("lenient", value=b"only on 1")
        assert producer.flush(15) == 0
        cluster.nodes[1].kill()
        cluster.nodes[2].start()
        wait_until(lambda: _partition(admin, "lenient").leader == 2, 15, "lenient led by 2")  # type: ignore[attr-defined]
        # The controller step that gave "lenient" its leader (broker 2 unfenced, or
        # broker 1 fenced) chose leaders for every leaderless partition: "fragile" had its
        # chance there, and none comes later unless someone asks.
        assert _partition(admin, "fragile").leader == -1  # type: ignore[attr-defined]
        elected = ok(
            strom(
                "leader-election",
                "--bootstrap-server",
                cluster.nodes[3].bootstrap,
                "--election-type",
                "unclean",
                "--topic",
                "fragile",
                "--partition",
                "0",
            )
        )
        assert (
            "Successfully completed leader election (unclean) for partitions fragile-0"
            in elected.stdout
        )
        wait_until(lambda: _partition(admin, "fragile").leader == 2, 15, "broker 2 leads")  # type: ignore[attr-defined]
        wait_until(lambda: "unclean election" in cluster.nodes[2].output(), 15, "the loss logged")
        # The new leader takes writes again (it reported itself recovered).
        producer = Producer({"bootstrap.servers": cluster.nodes[2].bootstrap, "acks": "all"})
        producer.produce("fragile", value=b"after")
        assert producer.flush(15) == 0
        assert _read_all(cluster.nodes[2].bootstrap, "fragile") == [b"after"]
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()
