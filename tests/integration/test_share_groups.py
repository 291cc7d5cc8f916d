"""Share groups (KIP-932) on a real broker with confluent-kafka's ShareConsumer: records
shared out among consumers of one partition, redelivered once a hung consumer's locks
expire or at once when a member's connection closes, released and rejected, archived
after the delivery count limit, and the delivery state kept across a restart (in
``__share_group_state``)."""

from __future__ import annotations

import base64
import datetime
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from cli_helpers import ok, table_rows, tool
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)
from kafka_helpers import create_topic, delete_acls, wait_until
from kio.schema.alter_client_quotas.v1 import request as alter_quotas
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_share_group_state.v0 import request as delete_state
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.initialize_share_group_state.v0 import request as init_state
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.read_share_group_state.v0 import request as read_state
from kio.schema.read_share_group_state_summary.v1 import request as read_summary
from kio.schema.share_acknowledge.v1 import request as share_ack
from kio.schema.share_fetch.v1 import request as share_fetch
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1 import request as share_heartbeat
from kio.schema.write_share_group_state.v1 import request as write_state
from raw_client import RawClient

from strom.protocol.errors import ErrorCode
from strom.protocol.framing import encode_request
from strom.wire_client import WireConnection

LOCK_MS = 2000  # short, so a dead consumer's records come back quickly
OVERRIDES = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "200",
    "offsets.topic.num.partitions": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    # An authorizer that allows what no ACL names: the ACLs of the authorization test.
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("share") / "data", OVERRIDES)
    process.overrides["admin.listeners"] = f"http://127.0.0.1:{process.extra_port('admin')}"
    process.start()
    yield process
    if process.alive():
        process.stop()


def _group_configs(bootstrap: str, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(10)


def _new_queue(broker: BrokerProcess, **configs: str) -> tuple[str, str]:
    """A fresh topic of one partition and a share group reading it from the earliest."""
    topic, group = f"q-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    _group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest", **configs)
    return topic, group


def _produce(bootstrap: str, topic: str, values: list[str], *, batches: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    per_batch = max(len(values) // batches, 1)
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode())
        if (i + 1) % per_batch == 0:
            producer.flush(10)
    producer.flush(10)


def _consumer(bootstrap: str, group: str, topic: str, *, explicit: bool = False) -> ShareConsumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    consumer = ShareConsumer(config)
    consumer.subscribe([topic])
    return consumer


def _start_offset(broker: BrokerProcess, group: str, topic: str) -> tuple[int, int]:
    with RawClient(broker.port) as client:
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
    part = response.groups[0].topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return part.start_offset, part.lag


def _poll_values(consumer: ShareConsumer, wanted: int, timeout: float) -> list[tuple[int, str]]:
    """(offset, value) of records polled until ``wanted`` came or the time is up."""
    got: list[tuple[int, str]] = []
    deadline = time.monotonic() + timeout
    while len(got) < wanted and time.monotonic() < deadline:
        for message in consumer.poll(0.5):
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value().decode()))
    return got


def test_consumers_of_one_partition_get_distinct_records_and_together_all(
    broker: BrokerProcess,
) -> None:
    # A long lock for this group: a loaded machine's slow poll must not cause redelivery.
    topic, group = _new_queue(broker, share_record_lock_duration_ms="30000")
    consumers = [_consumer(broker.bootstrap, group, topic) for _ in range(3)]
    received: list[list[int]] = [[] for _ in consumers]
    stop = threading.Event()

    def run(i: int) -> None:
        while not stop.is_set():
            for message in consumers[i].poll(0.2):
                if message.error() is None:
                    received[i].append(message.offset())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        with RawClient(broker.port) as client:

            def all_assigned() -> bool:
                described = client.request(
                    ShareGroupDescribeRequest(
                        group_ids=(group,), include_authorized_operations=False
                    )
                )
                members = described.groups[0].members
                return len(members) == 3 and all(m.assignment.topic_partitions for m in members)

            wait_until(all_assigned, 20, "three members each assigned the partition")
        total = 60
        for batch in range(20):  # one batch at a time, each waited for, so all get some
            _produce(broker.bootstrap, topic, [f"v{batch}-{i}" for i in range(3)])
            wait_until(lambda b=batch: sum(map(len, received)) >= 3 * (b + 1), 20, "the batch")
        everything = sorted(o for r in received for o in r)
        assert everything == list(range(total))  # all of them, none twice
        assert all(received), [len(r) for r in received]  # each consumer got some
    finally:
        stop.set()
        for t in threads:
            t.join()
        for c in consumers:
            c.close()
    wait_until(lambda: _start_offset(broker, group, topic)[0] == total, 10, "all accepted")


_HOLDER = """
import json, sys, time
from confluent_kafka import ShareConsumer
consumer = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                          "share.acknowledgement.mode": "explicit"})
consumer.subscribe([sys.argv[3]])
while True:
    got = [m.offset() for m in consumer.poll(0.5) if m.error() is None]
    if got:
        print(json.dumps(got), flush=True)
        time.sleep(3600)  # holds the records, acknowledging none, until killed
"""


def test_a_hung_consumers_records_go_to_another_after_the_lock_expires(
    broker: BrokerProcess,
) -> None:
    """A consumer stopped (SIGSTOP) while it holds records keeps its connection open,
    so its share session stays: the records come back when their locks expire. (A
    consumer killed outright loses its connection, which releases them at once: the
    closed-connection test.)"""
    # The group's own lock duration, within this broker's bounds (below Kafka's default
    # group.share.min.record.lock.duration.ms): the controller takes the broker's check.
    topic, group = _new_queue(broker, share_record_lock_duration_ms="1500")
    _produce(broker.bootstrap, topic, [f"k{i}" for i in range(10)])
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, broker.bootstrap, group, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = holder.stdout.readline() if holder.stdout else ""
        held = json.loads(line)
        assert held, "the holder got records"
        holder.send_signal(signal.SIGSTOP)
        consumer = _consumer(broker.bootstrap, group, topic)
        try:
            got = _poll_values(consumer, 10, LOCK_MS / 1000 + 20)
            assert sorted(o for o, _ in got) == list(range(10))  # the held ones came back
            consumer.poll(0.5)  # accepts them (implicit acknowledgement)
        finally:
            consumer.close()
    finally:
        holder.kill()
        holder.wait()
    wait_until(lambda: _start_offset(broker, group, topic)[0] == 10, 10, "all accepted")


def test_release_redelivers_and_reject_archives(broker: BrokerProcess) -> None:
    topic, group = _new_queue(broker)
    _produce(broker.bootstrap, topic, ["a", "b", "c"])
    consumer = _consumer(broker.bootstrap, group, topic, explicit=True)
    try:
        first = []
        deadline = time.monotonic() + 20
        while len(first) < 3 and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                first.append(message.value().decode())
                kind = {
                    "a": AcknowledgeType.ACCEPT,
                    "b": AcknowledgeType.RELEASE,
                    "c": AcknowledgeType.REJECT,
                }[message.value().decode()]
                consumer.acknowledge(message, kind)
        assert sorted(first) == ["a", "b", "c"]
        consumer.commit_sync(10)
        again = []
        deadline = time.monotonic() + 20
        while not again and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                again.append(message.value().decode())
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        assert again == ["b"]  # released: delivered again; rejected: never
        consumer.commit_sync(10)
        assert _start_offset(broker, group, topic) == (3, 0)
    finally:
        consumer.close()


def test_the_delivery_count_limit_archives_a_poison_record(broker: BrokerProcess) -> None:
    topic, group = _new_queue(broker, share_delivery_count_limit="2")
    _produce(broker.bootstrap, topic, ["poison"])
    consumer = _consumer(broker.bootstrap, group, topic, explicit=True)
    deliveries = 0
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                if message.value() == b"poison":
                    deliveries += 1
                    consumer.acknowledge(message, AcknowledgeType.RELEASE)
                else:
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            consumer.commit_sync(10)
            if _start_offset(broker, group, topic)[0] == 1:
                break
        assert deliveries == 2  # then archived: the window moved past it
        _produce(broker.bootstrap, topic, ["next"])
        got = []
        while not got and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                got.append(message.value())
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        assert got == [b"next"]
        consumer.commit_sync(10)
    finally:
        consumer.close()


def test_share_groups_are_listed_described_and_deleted(broker: BrokerProcess) -> None:
    topic, group = _new_queue(broker)
    _produce(broker.bootstrap, topic, ["x"])
    consumer = _consumer(broker.bootstrap, group, topic)
    try:
        assert _poll_values(consumer, 1, 20) == [(0, "x")]
        with RawClient(broker.port) as client:
            listed = client.request(ListGroupsRequest(states_filter=(), types_filter=("share",)))
            mine = [g for g in listed.groups if g.group_id == group]
            assert [(g.group_type, g.protocol_type, g.group_state) for g in mine] == [
                ("share", "share", "Stable")
            ]
            refused = client.request(DeleteGroupsRequest(groups_names=(group,)))
            assert refused.results[0].error_code == ErrorCode.non_empty_group
    finally:
        consumer.close()
    with RawClient(broker.port) as client:
        wait_until(
            lambda: (
                client.request(
                    ShareGroupDescribeRequest(
                        group_ids=(group,), include_authorized_operations=False
                    )
                )
                .groups[0]
                .group_state
                == "Empty"
            ),
            10,
            "the group empty",
        )
        deleted = client.request(DeleteGroupsRequest(groups_names=(group,)))
        assert deleted.results[0].error_code == ErrorCode.none
    assert _start_offset(broker, group, topic) == (-1, -1)  # its state went with it


def _heartbeat(client: RawClient, group: str, member: str, epoch: int, topic: str) -> Any:
    return client.request(
        share_heartbeat.ShareGroupHeartbeatRequest(
            group_id=group,
            member_id=member,
            member_epoch=epoch,
            rack_id=None,
            subscribed_topic_names=(topic,) if epoch == 0 else None,
        )
    )


def test_a_restart_keeps_what_was_accepted_and_the_members(broker: BrokerProcess) -> None:
    """The share-partition state and the group's membership (its records in
    __consumer_offsets) are kept across a restart: accepted records never come back, and
    a member goes on heartbeating with its member epoch."""
    topic, group = _new_queue(broker)
    _produce(broker.bootstrap, topic, [f"r{i}" for i in range(6)])
    kept_group = f"sg-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as client:
        client.client_id = "kept-client"
        # As a consumer starts: the group's coordinator found (__consumer_offsets made).
        wait_until(
            lambda: (
                client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=(kept_group,)))
                .coordinators[0]
                .error_code
                == ErrorCode.none
            ),
            15,
            "the group's coordinator",
        )
        joined = _heartbeat(client, kept_group, "kept-1", 0, topic)
        assert joined.error_code == ErrorCode.none, joined.error_message
        assert _heartbeat(client, kept_group, "kept-2", 0, topic).error_code == ErrorCode.none
        first = _heartbeat(client, kept_group, "kept-1", joined.member_epoch, topic)
        assert first.error_code == ErrorCode.none
        left = _heartbeat(client, kept_group, "kept-2", -1, topic)  # tombstoned
        assert left.error_code == ErrorCode.none
        epoch = _heartbeat(client, kept_group, "kept-1", first.member_epoch, topic).member_epoch
    consumer = _consumer(broker.bootstrap, group, topic, explicit=True)
    try:
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 6 and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                got.append(message.offset())
                kind = AcknowledgeType.ACCEPT if message.offset() < 3 else AcknowledgeType.RELEASE
                consumer.acknowledge(message, kind)
        assert sorted(got) == list(range(6))
        consumer.commit_sync(10)
    finally:
        consumer.close()
    broker.restart()
    consumer = _consumer(broker.bootstrap, group, topic)
    try:
        again = _poll_values(consumer, 3, 30)
        assert sorted(o for o, _ in again) == [3, 4, 5]  # the accepted ones never again
        consumer.poll(0.5)
    finally:
        consumer.close()
    with RawClient(broker.port) as client:
        described = client.request(
            ShareGroupDescribeRequest(group_ids=(kept_group,), include_authorized_operations=False)
        ).groups[0]
        assert described.error_code == ErrorCode.none
        assert [(m.member_id, m.client_id, m.member_epoch) for m in described.members] == [
            ("kept-1", "kept-client", epoch)
        ]
        assert described.group_epoch >= epoch
        # The member goes on with its epoch: no UNKNOWN_MEMBER_ID, no rejoin.
        going_on = _heartbeat(client, kept_group, "kept-1", epoch, topic)
        assert going_on.error_code == ErrorCode.none, going_on.error_message
        assert going_on.member_epoch == epoch
        assert _heartbeat(client, kept_group, "kept-2", 1, topic).error_code == (
            ErrorCode.unknown_member_id
        )


def test_the_share_coordinator_rpcs_keep_a_state(broker: BrokerProcess) -> None:
    """What a share-partition's leader on another node asks the node keeping its state:
    initialize, write (batches over the state), read, read a summary, delete."""
    from kio.schema.delete_share_group_state.v0 import request as delete_state
    from kio.schema.initialize_share_group_state.v0 import request as init_state
    from kio.schema.read_share_group_state.v0 import request as read_state
    from kio.schema.read_share_group_state_summary.v1 import request as summary
    from kio.schema.write_share_group_state.v1 import request as write_state

    topic_id, group = uuid.uuid4(), f"rpc-{uuid.uuid4().hex[:8]}"

    def batch(first: int, last: int, state: int, count: int) -> write_state.StateBatch:
        return write_state.StateBatch(
            first_offset=first, last_offset=last, delivery_state=state, delivery_count=count
        )

    def read(
        client: RawClient, leader_epoch: int = 0
    ) -> tuple[int, list[tuple[int, int, int, int]]]:
        part = (
            client.request(
                read_state.ReadShareGroupStateRequest(
                    group_id=group,
                    topics=(
                        read_state.ReadStateData(
                            topic_id=topic_id,
                            partitions=(
                                read_state.PartitionData(partition=0, leader_epoch=leader_epoch),
                            ),
                        ),
                    ),
                )
            )
            .results[0]
            .partitions[0]
        )
        assert part.error_code == ErrorCode.none
        batches = [
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in part.state_batches
        ]
        return part.start_offset, batches

    with RawClient(broker.port) as client:
        # As a broker finds the key's share coordinator (creating __share_group_state).
        key = f"{group}:{base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip('=')}:0"
        found = client.request(FindCoordinatorRequest(key_type=2, coordinator_keys=(key,)))
        assert found.coordinators[0].error_code == ErrorCode.none
        assert found.coordinators[0].port == broker.port
        assert read(client) == (-1, [])
        initialized = client.request(
            init_state.InitializeShareGroupStateRequest(
                group_id=group,
                topics=(
                    init_state.InitializeStateData(
                        topic_id=topic_id,
                        partitions=(
                            init_state.PartitionData(partition=0, state_epoch=1, start_offset=10),
                        ),
                    ),
                ),
            )
        )
        assert initialized.results[0].partitions[0].error_code == ErrorCode.none

        def write(
            start: int, batches: list[write_state.StateBatch], leader_epoch: int, state_epoch: int
        ) -> int:
            written = client.request(
                write_state.WriteShareGroupStateRequest(
                    group_id=group,
                    topics=(
                        write_state.WriteStateData(
                            topic_id=topic_id,
                            partitions=(
                                write_state.PartitionData(
                                    partition=0,
                                    state_epoch=state_epoch,
                                    leader_epoch=leader_epoch,
                                    start_offset=start,
                                    state_batches=tuple(batches),
                                ),
                            ),
                        ),
                    ),
                )
            )
            return int(written.results[0].partitions[0].error_code)

        assert write(-1, [batch(10, 14, 0, 1)], 0, 1) == ErrorCode.none
        assert write(12, [batch(12, 13, 2, 1)], 0, 1) == ErrorCode.none
        assert read(client) == (12, [(12, 13, 2, 1), (14, 14, 0, 1)])
        # A new leader (epoch 3) read the state: the old one's writes are fenced, and so
        # are writes of a state epoch older than the stored one.
        assert read(client, leader_epoch=3)[0] == 12
        assert write(-1, [batch(14, 14, 2, 1)], 2, 1) == ErrorCode.fenced_leader_epoch
        assert write(-1, [batch(14, 14, 2, 1)], 3, 0) == ErrorCode.fenced_state_epoch
        assert read(client) == (12, [(12, 13, 2, 1), (14, 14, 0, 1)])
        summarized = (
            client.request(
                summary.ReadShareGroupStateSummaryRequest(
                    group_id=group,
                    topics=(
                        summary.ReadStateSummaryData(
                            topic_id=topic_id,
                            partitions=(summary.PartitionData(partition=0, leader_epoch=0),),
                        ),
                    ),
                )
            )
            .results[0]
            .partitions[0]
        )
        assert (summarized.start_offset, summarized.state_epoch) == (12, 1)
        assert summarized.delivery_complete_count == 2
        deleted = client.request(
            delete_state.DeleteShareGroupStateRequest(
                group_id=group,
                topics=(
                    delete_state.DeleteStateData(
                        topic_id=topic_id, partitions=(delete_state.PartitionData(partition=0),)
                    ),
                ),
            )
        )
        assert deleted.results[0].partitions[0].error_code == ErrorCode.none
        assert read(client) == (-1, [])


def _share_metrics(broker: BrokerProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    url = f"http://127.0.0.1:{broker.ports['admin']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for match in re.finditer(r"^(kafka_\w*share\w*)(?:\{(.*)\})? (\S+)$", text, re.MULTILINE):
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def test_metrics_show_a_share_groups_members_lag_and_acknowledgements(
    broker: BrokerProcess,
) -> None:
    topic, group = _new_queue(broker, share_record_lock_duration_ms="30000")
    _produce(broker.bootstrap, topic, [f"m{i}" for i in range(10)])
    accepted = ("kafka_server_sharegroupmetrics_recordacknowledgement_total",
                frozenset({("acktype", "Accept")}))  # fmt: skip
    before = _share_metrics(broker).get(accepted, 0.0)
    consumer = _consumer(broker.bootstrap, group, topic, explicit=True)
    try:
        got: list[object] = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            got += [m for m in consumer.poll(0.5) if m.error() is None]
        assert len(got) == 10
        for message in got[:4]:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        assert consumer.commit_sync(10)
        labels = frozenset({("sharegroup", group), ("topic", topic), ("partition", "0")})
        samples = _share_metrics(broker)
        # Six records still held by the consumer: not finished with, so behind.
        assert samples[("kafka_sharegroup_start_offset", labels)] == 4
        assert samples[("kafka_sharegroup_lag", labels)] == 6
        assert samples[("kafka_sharegroup_members", frozenset({("sharegroup", group)}))] == 1
        assert samples[accepted] - before == 4
    finally:
        consumer.close()


def test_the_share_groups_tool_lists_describes_resets_and_deletes(broker: BrokerProcess) -> None:
    topic, group = _new_queue(broker, share_record_lock_duration_ms="30000")
    _produce(broker.bootstrap, topic, [f"t{i}" for i in range(8)])
    consumer = _consumer(broker.bootstrap, group, topic)
    try:
        assert len(_poll_values(consumer, 8, 20)) == 8
        consumer.poll(0.5)  # accepts the eight (implicit acknowledgement)
        listed = ok(tool(broker, "share-groups", "--list")).stdout.split()
        assert group in listed
        members = table_rows(
            ok(tool(broker, "share-groups", "--describe", "--group", group, "--members")).stdout
        )
        assert [(r[0], r[4], r[5]) for r in members] == [(group, "1", f"{topic}:0")]
        state = table_rows(
            ok(tool(broker, "share-groups", "--describe", "--group", group, "--state")).stdout
        )
        assert (state[0][0], state[0][2], state[0][5]) == (group, "Stable", "1")
    finally:
        consumer.close()
    wait_until(lambda: _start_offset(broker, group, topic) == (8, 0), 10, "all accepted")
    offsets = table_rows(ok(tool(broker, "share-groups", "--describe", "--group", group)).stdout)
    assert offsets == [[group, topic, "0", "8", "0"]]
    plan = ok(
        tool(broker, "share-groups", "--reset-offsets", "--group", group, "--topic", topic,
             "--to-offset", "3", "--execute", "--output", "json")
    )  # fmt: skip
    assert json.loads(plan.stdout) == [
        {"group": group, "topic": topic, "partition": 0, "new_offset": 3}
    ]
    assert _start_offset(broker, group, topic) == (3, 5)  # five to read again
    deleted = ok(tool(broker, "share-groups", "--delete", "--group", group)).stdout
    assert table_rows(deleted) == [[group, "Deleted"]]


def _set_client_quota(port: int, client_id: str, consumer_byte_rate: float | None) -> None:
    """consumer_byte_rate for a client id (None: removed), with AlterClientQuotas."""
    entry = alter_quotas.EntryData(
        entity=(alter_quotas.EntityData(entity_type="client-id", entity_name=client_id),),
        ops=(
            alter_quotas.OpData(
                key="consumer_byte_rate",
                value=consumer_byte_rate or 0.0,
                remove=consumer_byte_rate is None,
            ),
        ),
    )
    with RawClient(port) as client:
        response = client.request(
            alter_quotas.AlterClientQuotasRequest(entries=(entry,), validate_only=False)
        )
    assert all(e.error_code == ErrorCode.none for e in response.entries), response


def _share_fetch_request(
    group: str, epoch: int, topic_id: uuid.UUID, max_bytes: int, member: str, max_wait_ms: int
) -> Any:
    return share_fetch.ShareFetchRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=max_bytes,
        max_records=10_000,
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


def _raw_share_fetch(
    client: RawClient,
    group: str,
    epoch: int,
    topic_id: uuid.UUID,
    max_bytes: int,
    member: str = "raw-member",
    max_wait_ms: int = 200,
) -> Any:
    return client.request(
        _share_fetch_request(group, epoch, topic_id, max_bytes, member, max_wait_ms)
    )


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


def test_a_closed_connection_ends_its_share_session_and_releases_its_records(
    broker: BrokerProcess,
) -> None:
    """As in Kafka, a share session ends with the connection it was opened on: a member
    that acquired records and dropped its connection (no final epoch) holds them no
    more, so another member gets them long before their one-minute locks expire; the
    dropped member's session epoch is then unknown. A fetch left waiting by a closed
    connection acquires nothing when records come."""
    topic, group = _new_queue(broker, share_record_lock_duration_ms="60000")
    _produce(broker.bootstrap, topic, [f"d{i}" for i in range(5)])
    topic_id = _topic_id(broker.port, topic)

    def acquired(response: Any) -> set[int]:
        return {
            offset
            for t in response.responses
            for p in t.partitions
            for r in p.acquired_records
            for offset in range(r.first_offset, r.last_offset + 1)
        }

    with RawClient(broker.port) as dropped:
        assert acquired(_raw_share_fetch(dropped, group, 0, topic_id, 1 << 20, "dropped")) == set(
            range(5)
        )
    with RawClient(broker.port) as other:
        got = acquired(_raw_share_fetch(other, group, 0, topic_id, 1 << 20, "other"))
        epoch, deadline = 1, time.monotonic() + 15
        while got != set(range(5)) and time.monotonic() < deadline:
            got |= acquired(_raw_share_fetch(other, group, epoch, topic_id, 1 << 20, "other"))
            epoch += 1
        assert got == set(range(5))
        gone = _raw_share_fetch(other, group, 1, topic_id, 1 << 20, "dropped")
        assert gone.error_code == ErrorCode.share_session_not_found
        # A member whose connection closed while its fetch waited for records: the wait
        # ends with the session, acquiring nothing for it when the records come.
        with RawClient(broker.port) as sleeper:
            sleeper.send_bytes(
                encode_request(
                    1, "t", _share_fetch_request(group, 0, topic_id, 1 << 20, "sleeper", 30_000)
                )
            )
        wait_until(
            lambda: (
                _raw_share_fetch(other, group, 1, topic_id, 1 << 20, "sleeper", 0).error_code
                == ErrorCode.share_session_not_found
            ),
            15,
            "the sleeper's session to end",
        )
        _produce(broker.bootstrap, topic, [f"e{i}" for i in range(5)])
        deadline = time.monotonic() + 15
        while got != set(range(10)) and time.monotonic() < deadline:
            got |= acquired(_raw_share_fetch(other, group, epoch, topic_id, 1 << 20, "other"))
            epoch += 1
        assert got == set(range(10))


def test_a_share_fetch_is_held_to_the_consumers_byte_rate_quota(broker: BrokerProcess) -> None:
    """consumer_byte_rate holds ShareFetch as it holds Fetch: the request's max_bytes cut
    to ten windows' worth, the record bytes counted, a throttle time answered (and the
    connection muted) once over the quota; another client id is not throttled."""
    topic, group = _new_queue(broker)
    _produce(broker.bootstrap, topic, ["v" * 10_000] * 40, batches=40)  # 400 KB
    topic_id = _topic_id(broker.port, topic)
    # 20 KB/s: at most 200 KB in ten windows.
    _set_client_quota(broker.port, "share-slow", 20_000.0)
    try:
        with RawClient(broker.port) as client:
            client.client_id = "share-slow"
            first = _raw_share_fetch(client, group, 0, topic_id, 10 * 1024 * 1024)
            (part,) = first.responses[0].partitions
            assert part.acquired_records, part
            assert 100_000 < len(part.records) <= 200_000 + 12_000
            throttled = first.throttle_time.total_seconds() > 0
            epoch, deadline = 1, time.monotonic() + 20
            while not throttled and time.monotonic() < deadline:
                response = _raw_share_fetch(client, group, epoch, topic_id, 10 * 1024 * 1024)
                throttled = response.throttle_time.total_seconds() > 0
                epoch += 1
            assert throttled, "the share fetches were never throttled"
        # The same records read by a client id without a quota: no throttle.
        other_group = f"sg-{uuid.uuid4().hex[:8]}"
        _group_configs(broker.bootstrap, other_group, share_auto_offset_reset="earliest")
        with RawClient(broker.port) as client:
            client.client_id = "share-fast"
            free = _raw_share_fetch(client, other_group, 0, topic_id, 10 * 1024 * 1024)
            (part,) = free.responses[0].partitions
            assert len(part.records) > 300_000
            assert free.throttle_time.total_seconds() == 0
    finally:
        _set_client_quota(broker.port, "share-slow", None)


def _acl(
    kind: ResourceType, name: str, op: AclOperation, permission: AclPermissionType
) -> AclBinding:
    return AclBinding(
        kind, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", op, permission
    )


def test_share_requests_are_authorized_as_kafka_authorizes_them(broker: BrokerProcess) -> None:
    """READ on the group for ShareGroupHeartbeat, ShareFetch and ShareAcknowledge
    (GROUP_AUTHORIZATION_FAILED), READ on a topic fetched (TOPIC_AUTHORIZATION_FAILED),
    CLUSTER_ACTION for the share coordinator's RPCs (CLUSTER_AUTHORIZATION_FAILED), on
    the wire as a client that is not a super user sends them."""
    topic, group = _new_queue(broker)
    denied_topic, _ = _new_queue(broker)
    _produce(broker.bootstrap, topic, ["a", "b"])
    _produce(broker.bootstrap, denied_topic, ["c"])
    topic_id = _topic_id(broker.port, topic)
    denied_topic_id = _topic_id(broker.port, denied_topic)
    closed_group = f"sg-{uuid.uuid4().hex[:8]}"
    acls = [
        _acl(ResourceType.GROUP, closed_group, AclOperation.READ, AclPermissionType.DENY),
        _acl(ResourceType.TOPIC, denied_topic, AclOperation.READ, AclPermissionType.DENY),
        # Everything on the cluster but CLUSTER_ACTION (the ACL tools still work).
        _acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALL, AclPermissionType.ALLOW),
        _acl(
            ResourceType.BROKER,
            "kafka-cluster",
            AclOperation.CLUSTER_ACTION,
            AclPermissionType.DENY,
        ),
    ]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_acls(acls).values():
        future.result(10)
    try:
        connection = WireConnection(
            "127.0.0.1", broker.port, "share-authz", connect_timeout_s=10, request_timeout_s=30
        )
        try:
            heartbeat = connection.request(
                share_heartbeat.ShareGroupHeartbeatRequest(
                    group_id=closed_group,
                    member_id="m-1",
                    member_epoch=0,
                    rack_id=None,
                    subscribed_topic_names=(topic,),
                )
            )
            assert heartbeat.error_code == ErrorCode.group_authorization_failed
            fetch = connection.request(
                share_fetch.ShareFetchRequest(
                    group_id=closed_group,
                    member_id="m-1",
                    share_session_epoch=0,
                    max_wait=datetime.timedelta(0),
                    min_bytes=1,
                    max_records=10,
                    batch_size=10,
                    topics=(
                        share_fetch.FetchTopic(
                            topic_id=topic_id,
                            partitions=(
                                share_fetch.FetchPartition(
                                    partition_index=0, acknowledgement_batches=()
                                ),
                            ),
                        ),
                    ),
                    forgotten_topics_data=(),
                )
            )
            assert fetch.error_code == ErrorCode.group_authorization_failed
            acknowledge = connection.request(
                share_ack.ShareAcknowledgeRequest(
                    group_id=closed_group, member_id="m-1", share_session_epoch=1, topics=()
                )
            )
            assert acknowledge.error_code == ErrorCode.group_authorization_failed
            # The group may be read, one of the two topics may not.
            fetch = connection.request(
                share_fetch.ShareFetchRequest(
                    group_id=group,
                    member_id="m-2",
                    share_session_epoch=0,
                    max_wait=datetime.timedelta(milliseconds=500),
                    min_bytes=1,
                    max_records=10,
                    batch_size=10,
                    topics=tuple(
                        share_fetch.FetchTopic(
                            topic_id=t,
                            partitions=(
                                share_fetch.FetchPartition(
                                    partition_index=0, acknowledgement_batches=()
                                ),
                            ),
                        )
                        for t in (topic_id, denied_topic_id)
                    ),
                    forgotten_topics_data=(),
                )
            )
            assert fetch.error_code == ErrorCode.none
            errors = {t.topic_id: [p.error_code for p in t.partitions] for t in fetch.responses}
            assert errors[denied_topic_id] == [ErrorCode.topic_authorization_failed]
            assert errors[topic_id] == [ErrorCode.none]
            # The share coordinator's RPCs are for nodes: CLUSTER_ACTION.
            rpcs = [
                init_state.InitializeShareGroupStateRequest(
                    group_id=group,
                    topics=(
                        init_state.InitializeStateData(
                            topic_id=topic_id,
                            partitions=(
                                init_state.PartitionData(
                                    partition=0, state_epoch=9, start_offset=0
                                ),
                            ),
                        ),
                    ),
                ),
                read_state.ReadShareGroupStateRequest(
                    group_id=group,
                    topics=(
                        read_state.ReadStateData(
                            topic_id=topic_id,
                            partitions=(read_state.PartitionData(partition=0, leader_epoch=0),),
                        ),
                    ),
                ),
                write_state.WriteShareGroupStateRequest(
                    group_id=group,
                    topics=(
                        write_state.WriteStateData(
                            topic_id=topic_id,
                            partitions=(
                                write_state.PartitionData(
                                    partition=0,
                                    state_epoch=0,
                                    leader_epoch=0,
                                    start_offset=2,
                                    state_batches=(),
                                ),
                            ),
                        ),
                    ),
                ),
                delete_state.DeleteShareGroupStateRequest(
                    group_id=group,
                    topics=(
                        delete_state.DeleteStateData(
                            topic_id=topic_id,
                            partitions=(delete_state.PartitionData(partition=0),),
                        ),
                    ),
                ),
                read_summary.ReadShareGroupStateSummaryRequest(
                    group_id=group,
                    topics=(
                        read_summary.ReadStateSummaryData(
                            topic_id=topic_id,
                            partitions=(read_summary.PartitionData(partition=0, leader_epoch=0),),
                        ),
                    ),
                ),
            ]
            for rpc in rpcs:
                response = connection.request(rpc)
                codes = [p.error_code for r in response.results for p in r.partitions]
                assert codes == [ErrorCode.cluster_authorization_failed], (type(rpc), codes)
        finally:
            connection.close()
        # Nothing the refused RPCs asked was done: the state is as the fetch left it.
        assert _start_offset(broker, group, topic)[0] == 0
    finally:
        delete_acls(admin, *acls)
