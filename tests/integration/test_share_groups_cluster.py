"""Share groups (KIP-932) in a three-node cluster, one cluster for the module:

- the share coordinator's followers held back (SIGSTOP): an acknowledgement whose state
  write cannot reach the high watermark of ``__share_group_state`` is not confirmed and
  is rolled back (the records are the member's again, delivered again once released), and
  after the share coordinator's node is killed the records whose acknowledgements were
  confirmed never come back (raw ShareFetch and ShareAcknowledge: exact control of
  what is acknowledged when);
- ``strom share-groups --describe --offsets`` through each node: the same start offset
  and lag, the group's coordinator asking the share coordinator and the partition's
  leader for what it does not have; ``--reset-offsets`` and ``--delete-offsets``
  through the group's coordinator, written by the share coordinator;
- ``kill -9`` of the share coordinator's node (the leader of the group's
  ``__share_group_state`` partition) while share consumers consume and acknowledge.

The checkers are independent of the code under test: they keep, per offset, how often
the consumers were handed a record and how often an acknowledgement of it was
confirmed (answered with no error). Every record must be delivered at least once, and
none confirmed acknowledged twice: an acknowledgement is answered only once its state
write is replicated, so the next share coordinator knows it.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import STROM, strom, table_rows
from cluster_process import Cluster, ClusterNode
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    PartitionMetadata,
    ResourceType,
)
from kafka_helpers import wait_until
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.share_acknowledge.v1 import request as share_ack
from kio.schema.share_fetch.v1 import request as share_fetch
from raw_client import RawClient

from strom.protocol.errors import ErrorCode

STATE_TOPIC = "__share_group_state"
RECORDS = 300
OVERRIDES = {
    # A follower leaves the ISR after 10 s behind, not 1.5 s: on a loaded machine a
    # follower of __share_group_state (written all the time) fell behind for 1.5 s just
    # before its leader was killed, leaving that partition no replica to elect.
    "replica.lag.time.max.ms": "10000",
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
    # An acknowledgement whose write cannot be replicated is refused after 2 s, not 5 s.
    "share.coordinator.write.timeout.ms": "2000",
}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})


def _partition_0_metadata(bootstrap: str, topic: str) -> PartitionMetadata | None:
    """The metadata of the topic's partition 0, None while unknown."""
    try:
        found = _admin(bootstrap).list_topics(topic, timeout=5).topics.get(topic)
    except Exception:  # noqa: BLE001 - asked again while the cluster settles
        return None
    if found is None or found.error is not None or 0 not in found.partitions:
        return None
    return found.partitions[0]


def _partition_0(bootstrap: str, topic: str) -> tuple[int, list[int]]:
    """The leader and replicas of the topic's partition 0 (-1 and none if unknown)."""
    partition = _partition_0_metadata(bootstrap, topic)
    if partition is None:
        return -1, []
    return int(partition.leader), [int(r) for r in partition.replicas]


def _leader(bootstrap: str, topic: str) -> int:
    return _partition_0(bootstrap, topic)[0]


def _in_sync(bootstrap: str, topic: str) -> set[int]:
    """The in-sync replicas of the topic's partition 0 (none if unknown)."""
    partition = _partition_0_metadata(bootstrap, topic)
    return set() if partition is None else {int(r) for r in partition.isrs}


def _group_configs(admin: AdminClient, group: str, configs: dict[str, str]) -> None:
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(10)


def _earliest(admin: AdminClient, group: str) -> None:
    _group_configs(admin, group, {"share.auto.offset.reset": "earliest"})


def _topic_id(port: int, topic: str) -> uuid.UUID:
    with RawClient(port) as client:
        response = client.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    topic_id = response.topics[0].topic_id
    assert topic_id is not None
    return topic_id


def _share_fetch(
    client: RawClient, group: str, member: str, epoch: int, topic_id: uuid.UUID
) -> tuple[ErrorCode, set[int]]:
    """One raw ShareFetch of partition 0: its error and the offsets it acquired."""
    response = client.request(
        share_fetch.ShareFetchRequest(
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            max_wait=datetime.timedelta(milliseconds=500),
            min_bytes=1,
            max_records=100,
            batch_size=100,
            topics=(
                share_fetch.FetchTopic(
                    topic_id=topic_id,
                    partitions=(
                        share_fetch.FetchPartition(partition_index=0, acknowledgement_batches=()),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
    )
    acquired = {
        offset
        for topic in response.responses
        for part in topic.partitions
        if part.error_code == ErrorCode.none
        for r in part.acquired_records
        for offset in range(r.first_offset, r.last_offset + 1)
    }
    return ErrorCode(response.error_code), acquired


def _accept(
    client: RawClient,
    group: str,
    member: str,
    epoch: int,
    topic_id: uuid.UUID,
    first: int,
    last: int,
    kind: int = 1,
) -> ErrorCode:
    """A raw ShareAcknowledge of first..last of partition 0 (accepting them, or ``kind``:
    2 releases): the partition's answer."""
    response = client.request(
        share_ack.ShareAcknowledgeRequest(
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            topics=(
                share_ack.AcknowledgeTopic(
                    topic_id=topic_id,
                    partitions=(
                        share_ack.AcknowledgePartition(
                            partition_index=0,
                            acknowledgement_batches=(
                                share_ack.AcknowledgementBatch(
                                    first_offset=first, last_offset=last, acknowledge_types=(kind,)
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        )
    )
    assert response.error_code == ErrorCode.none, response
    (answer,) = [p for t in response.responses for p in t.partitions]
    return ErrorCode(answer.error_code)


def _start_offsets(
    cluster: Cluster, group: str, topic: str, through: list[ClusterNode] | None = None
) -> list[int]:
    """The share-partition's start offset as each live node (of ``through``, all if
    None) describes it."""
    found = []
    for node in cluster.brokers if through is None else through:
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three combined nodes; a first share group member has created
    ``__share_group_state`` (one partition, three replicas)."""
    cluster = Cluster.combined(tmp_path_factory.mktemp("share-cluster"), overrides=OVERRIDES)
    try:
        cluster.start_all()
        bootstrap = cluster.bootstrap()
        wait_until(
            lambda: sorted(_admin(bootstrap).list_topics(timeout=3).brokers) == [1, 2, 3],
            15,
            "3 brokers",
        )
        admin = _admin(bootstrap)
        admin.create_topics([NewTopic("warmup", 1, 3)])["warmup"].result(15)
        warm = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "warmup"})
        warm.subscribe(["warmup"])
        wait_until(
            lambda: (warm.poll(0.2), _leader(bootstrap, STATE_TOPIC))[1] > 0,
            20,
            "__share_group_state led",
        )
        warm.close()
        yield cluster
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()


def _whole(cluster: Cluster) -> None:
    """Every node running again and a member of the cluster (after a test's faults)."""
    for node in cluster.nodes.values():
        if node.alive():
            node.resume()
    for node in cluster.nodes.values():
        if not node.alive():
            node.start()
    wait_until(
        lambda: sorted(_admin(cluster.bootstrap()).list_topics(timeout=3).brokers) == [1, 2, 3],
        30,
        "3 brokers again",
    )


def test_an_acknowledgement_is_confirmed_only_once_its_state_write_is_committed(
    cluster: Cluster,
) -> None:
    """The followers of ``__share_group_state`` stopped: the share coordinator's append
    of an acknowledgement cannot reach the high watermark (min.insync.replicas=2, and
    the ISR cannot shrink without the controllers' majority), so the acknowledgement is
    not confirmed, and rolled back in memory: without a failover the records are the
    member's again, and released are delivered again. The coordinator's node killed:
    the records whose acknowledgement was confirmed are never delivered again; the
    others are."""
    bootstrap = cluster.bootstrap()
    coordinator, replicas = _partition_0(bootstrap, STATE_TOPIC)
    followers = [n for n in replicas if n != coordinator]
    assert coordinator > 0 and len(followers) == 2
    admin = _admin(bootstrap)
    # The share-partition is led by the share coordinator's node: its state writes are
    # local appends, awaited to the high watermark.
    admin.create_topics(
        [NewTopic("held", num_partitions=1, replica_assignment=[[coordinator, *followers]])]
    )["held"].result(15)
    wait_until(lambda: _leader(bootstrap, "held") == coordinator, 15, "held led")
    group = "held-back"
    _group_configs(
        admin,
        group,
        {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "30000"},
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(10):
        producer.produce("held", value=b"held-%d" % i)
    assert producer.flush(30) == 0
    topic_id = _topic_id(cluster.nodes[coordinator].port, "held")
    try:
        with RawClient(cluster.nodes[coordinator].port, timeout=60) as client:
            error, acquired = _share_fetch(client, group, "first", 0, topic_id)
            epoch = 1
            deadline = time.monotonic() + 20
            while acquired != set(range(10)) and time.monotonic() < deadline:
                error, more = _share_fetch(client, group, "first", epoch, topic_id)
                acquired |= more
                epoch += 1
            assert error == ErrorCode.none and acquired == set(range(10))
            confirmed: set[int] = set()  # offsets whose acknowledgement answered NONE
            if _accept(client, group, "first", epoch, topic_id, 0, 4) == ErrorCode.none:
                confirmed |= set(range(0, 5))
            for follower in followers:
                cluster.nodes[follower].pause()
            # Each write is appended on the coordinator and not replicated: the
            # acknowledgement is answered with an error (after
            # share.coordinator.write.timeout.ms), never as done. The first may still
            # reach the followers (a fetch they sent before they stopped, answered with
            # it, waits in their sockets); the second cannot.
            held_back = [
                _accept(client, group, "first", epoch + 1, topic_id, 5, 7),
                _accept(client, group, "first", epoch + 2, topic_id, 8, 9),
            ]
            for answer, offsets in zip(held_back, (range(5, 8), range(8, 10)), strict=True):
                if answer == ErrorCode.none:
                    confirmed |= set(offsets)
            assert held_back == [ErrorCode.request_timed_out] * 2, held_back
            # The failed writes' acknowledgements were rolled back in memory, without a
            # failover: the records are the member's again; released, they are
            # delivered again.
            for follower in followers:
                cluster.nodes[follower].resume()
            epoch += 3
            released = _accept(client, group, "first", epoch, topic_id, 5, 9, kind=2)
            deadline = time.monotonic() + 20
            # The followers catching up may outlast a write (then rolled back too).
            while released == ErrorCode.request_timed_out and time.monotonic() < deadline:
                epoch += 1
                released = _accept(client, group, "first", epoch, topic_id, 5, 9, kind=2)
            assert released == ErrorCode.none, released
            epoch += 1
            again_here: set[int] = set()
            deadline = time.monotonic() + 20
            while again_here != set(range(5, 10)) and time.monotonic() < deadline:
                error, more = _share_fetch(client, group, "first", epoch, topic_id)
                again_here |= more
                epoch += 1
            assert again_here == set(range(5, 10)), again_here
        # The followers were left out of the ISR while they stood still (the controllers
        # had their majority back once they resumed): a leader is elected only from the
        # ISR, so the coordinator is killed once they are back in it.
        every_replica = {coordinator, *followers}
        for topic in ("held", STATE_TOPIC):
            wait_until(
                lambda topic=topic: _in_sync(bootstrap, topic) == every_replica,
                60,
                f"{topic} in sync again",
            )
        cluster.nodes[coordinator].kill()
        bootstrap = cluster.bootstrap()
        wait_until(lambda: _leader(bootstrap, "held") in followers, 30, "held led again")
        wait_until(
            lambda: _leader(bootstrap, STATE_TOPIC) in followers, 30, "a new share coordinator"
        )
        leader = _leader(bootstrap, "held")
        delivered: Counter[int] = Counter()
        with RawClient(cluster.nodes[leader].port, timeout=30) as client:
            epoch = 0
            deadline = time.monotonic() + 30
            while not set(range(5, 10)) <= set(delivered) and time.monotonic() < deadline:
                error, acquired = _share_fetch(client, group, "second", epoch, topic_id)
                delivered.update(acquired)
                epoch = epoch + 1 if error == ErrorCode.none else 0
        # Acknowledged and confirmed: never again.
        again = sorted(confirmed & set(delivered))
        assert not again, f"confirmed acknowledged, yet delivered again: {again}"
        assert confirmed == set(range(0, 5))
        # Not confirmed, released, acquired again when the node died: delivered again,
        # once (the release written after the failed writes is the state kept).
        assert dict(delivered) == {offset: 1 for offset in range(5, 10)}, dict(delivered)
    finally:
        _whole(cluster)


def _state_led_elsewhere_than(cluster: Cluster, node_id: int, tmp_path: Path) -> None:
    """``__share_group_state`` led by another node than ``node_id``: its replicas
    reordered (strom reassign-partitions) and the first elected (strom leader-election)
    when ``node_id`` leads it."""
    bootstrap = cluster.bootstrap()
    leader, replicas = _partition_0(bootstrap, STATE_TOPIC)
    if leader != node_id:
        return
    order = [r for r in replicas if r != node_id] + [node_id]
    plan = tmp_path / "state-plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [{"topic": STATE_TOPIC, "partition": 0, "replicas": order}],
            }
        )
    )
    moved = strom("reassign-partitions", "--bootstrap-server", bootstrap, "--execute",
                  "--reassignment-json-file", str(plan))  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    wait_until(lambda: _partition_0(bootstrap, STATE_TOPIC)[1] == order, 15, "replicas reordered")
    elected = strom("leader-election", "--bootstrap-server", bootstrap, "--election-type",
                    "PREFERRED", "--topic", STATE_TOPIC, "--partition", "0")  # fmt: skip
    assert elected.returncode == 0, elected.stderr
    wait_until(lambda: _leader(bootstrap, STATE_TOPIC) == order[0], 15, "the state led elsewhere")


def test_offsets_described_alike_from_every_bootstrap_broker(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``strom share-groups --describe --offsets`` through each node: the group's
    coordinator asks the share coordinator for the stored state
    (ReadShareGroupStateSummary) and the partition's leader for its high watermark
    (ListOffsets) when it has neither here; the topic has one replica, on the third
    node: neither the group's coordinator nor the share coordinator. Reset and deleted
    offsets are then described alike by every node, the partition's leader included."""
    bootstrap = cluster.bootstrap()
    admin = _admin(bootstrap)
    group_coordinator = _leader(bootstrap, "__consumer_offsets")
    _state_led_elsewhere_than(cluster, group_coordinator, tmp_path)
    share_coordinator = _leader(bootstrap, STATE_TOPIC)
    far = next(n for n in sorted(cluster.nodes) if n not in (group_coordinator, share_coordinator))
    admin.create_topics([NewTopic("far", num_partitions=1, replica_assignment=[[far]])])[
        "far"
    ].result(15)
    wait_until(lambda: _leader(bootstrap, "far") == far, 15, "far led")
    group = "far-readers"
    _earliest(admin, group)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(6):
        producer.produce("far", value=b"far-%d" % i)
    assert producer.flush(30) == 0
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe(["far"])
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 30
        while seen != set(range(6)) and time.monotonic() < deadline:
            for message in consumer.poll(0.3):
                if message.error() is None:
                    seen.add(message.offset())
                    # 0..3 done; 4 and 5 given back: two records still to do.
                    kind = (
                        AcknowledgeType.ACCEPT if message.offset() < 4 else AcknowledgeType.RELEASE
                    )
                    consumer.acknowledge(message, kind)
        assert seen == set(range(6))
        consumer.commit_sync(10)
    finally:
        consumer.close()
    expected = [[group, "far", "0", "4", "2"]]
    node = cluster.nodes[group_coordinator]
    wait_until(
        lambda: table_rows(strom("share-groups", "--bootstrap-server", node.bootstrap,
                                 "--describe", "--offsets", "--group", group).stdout) == expected,
        30,
        "the offsets described",
    )  # fmt: skip
    runs = [
        subprocess.Popen(
            [
                *STROM,
                "share-groups",
                "--bootstrap-server",
                n.bootstrap,
                "--describe",
                "--offsets",
                "--group",
                group,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for n in cluster.brokers
    ]
    described = [run.communicate(timeout=60) for run in runs]
    for (stdout, stderr), run in zip(described, runs, strict=True):
        assert run.returncode == 0, stderr
        assert table_rows(stdout) == expected
    # Reset and deleted through the group's coordinator, which neither keeps the state
    # nor holds the share-partition: it writes through the share coordinator
    # (InitializeShareGroupState, DeleteShareGroupState).
    reset = strom("share-groups", "--bootstrap-server", node.bootstrap, "--reset-offsets",
                  "--group", group, "--topic", "far", "--to-offset", "1", "--execute")  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    # Every node describes the new start: the partition's leader let go of its
    # share-partition when the group's last share session there ended.
    assert _start_offsets(cluster, group, "far") == [1, 1, 1]
    deleted = strom("share-groups", "--bootstrap-server", node.bootstrap, "--delete-offsets",
                    "--group", group, "--topic", "far")  # fmt: skip
    assert deleted.returncode == 0, deleted.stderr
    assert table_rows(deleted.stdout) == [["far", "Successful"]]
    assert _start_offsets(cluster, group, "far") == [-1, -1, -1]


def test_kill_9_of_the_share_coordinator_loses_no_acknowledgement(cluster: Cluster) -> None:
    consumers: list[ShareConsumer] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        bootstrap = cluster.bootstrap()
        admin = _admin(bootstrap)
        # The topic read is led by another node than the share coordinator, so its
        # acknowledgements go to the coordinator over the wire.
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
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        for consumer in consumers:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closing against a stopped cluster
                pass
        _whole(cluster)
