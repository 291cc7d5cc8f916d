"""The classic group protocol and offsets at the byte level, with raw requests.

What real clients cannot show directly: MEMBER_ID_REQUIRED, the leader's
assignment returned byte for byte, REBALANCE_IN_PROGRESS heartbeats, removal
after the session timeout, static members fencing their old member id, and the
records in __consumer_offsets in Kafka's own key and value layouts.
"""

from __future__ import annotations

import datetime
import struct
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka_helpers import create_topic, wait_until
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from raw_client import RawClient

from strom.protocol.errors import ErrorCode

# Members that must stay in their group keep it for 10 s without a heartbeat, so a loaded
# machine pausing the test does not drop them; one a test waits to expire has 1 s.
SESSION_MS = 10_000
EXPIRING_SESSION_MS = 1000
REBALANCE_MS = 2000  # for the test that waits it out; otherwise joins give 5 s
OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "3",
    "offsets.retention.check.interval.ms": "200",
    "group.consumer.min.session.timeout.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
}


@pytest.fixture(scope="module")
def raw_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose ``__consumer_offsets`` exists: the raw clients of these tests send
    group requests without the FindCoordinator a client sends first, which creates it."""
    process = BrokerProcess(tmp_path_factory.mktemp("rawgroups") / "data", OVERRIDES)
    process.start()
    client = RawClient(process.port)
    found = client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=("any",)))
    client.close()
    assert found.coordinators[0].error_code == ErrorCode.none, found
    yield process
    if process.alive():
        process.stop()


def join(
    client: RawClient,
    group: str,
    member_id: str = "",
    instance: str | None = None,
    metadata: bytes = b"sub",
    rebalance_ms: int = 5000,
    session_ms: int = SESSION_MS,
) -> object:
    return client.request(
        JoinGroupRequest(
            group_id=group,
            session_timeout=datetime.timedelta(milliseconds=session_ms),
            rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms),
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=metadata),),
            reason=None,
        )
    )


def sync(
    client: RawClient,
    group: str,
    member_id: str,
    generation: int,
    assignments: dict[str, bytes] | None = None,
) -> object:
    return client.request(
        SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=tuple(
                SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ),
        )
    )


def heartbeat(
    client: RawClient, group: str, member_id: str, generation: int, instance: str | None = None
) -> ErrorCode:
    return client.request(
        HeartbeatRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
        )
    ).error_code


def group_state(client: RawClient, group: str) -> str:
    described = client.request(
        DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)
    )
    return described.groups[0].group_state


def test_find_coordinator_answers_this_node_for_every_key(raw_broker) -> None:
    client = RawClient(raw_broker.port)
    response = client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=("a", "b")))
    assert [(c.key, c.error_code, c.port) for c in response.coordinators] == [
        ("a", ErrorCode.none, raw_broker.port),
        ("b", ErrorCode.none, raw_broker.port),
    ]
    client.close()


def test_join_sync_heartbeat_rebalance_and_session_expiry(raw_broker) -> None:
    group = "raw-group"
    a, b = RawClient(raw_broker.port), RawClient(raw_broker.port)
    first = join(a, group)
    assert first.error_code == ErrorCode.member_id_required
    a_id = first.member_id
    joined = join(a, group, a_id, metadata=b"meta-a")
    assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.none, 1, a_id)
    assert [(m.member_id, m.metadata) for m in joined.members] == [(a_id, b"meta-a")]
    assignment = bytes(range(256)) * 3
    assert sync(a, group, a_id, 1, {a_id: assignment}).assignment == assignment
    assert heartbeat(a, group, a_id, 1) == ErrorCode.none

    with ThreadPoolExecutor(2) as pool:
        b_id = join(b, group, session_ms=EXPIRING_SESSION_MS).member_id
        b_join = pool.submit(join, b, group, b_id, None, b"meta-b", 5000, EXPIRING_SESSION_MS)
        deadline = time.monotonic() + 30
        while heartbeat(a, group, a_id, 1) != ErrorCode.rebalance_in_progress:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        a_join = join(a, group, a_id, metadata=b"meta-a")
        b_joined = b_join.result(10)
    assert a_join.generation_id == b_joined.generation_id == 2
    assert a_join.leader == a_id
    assert {m.member_id: m.metadata for m in a_join.members} == {a_id: b"meta-a", b_id: b"meta-b"}
    assert b_joined.members == ()
    with ThreadPoolExecutor(1) as pool:
        b_sync = pool.submit(sync, b, group, b_id, 2)
        a_sync = sync(a, group, a_id, 2, {a_id: b"for-a", b_id: b"\x00for-b\xff"})
        assert b_sync.result(10).assignment == b"\x00for-b\xff"
    assert a_sync.assignment == b"for-a"
    assert heartbeat(a, group, a_id, 1) == ErrorCode.illegal_generation
    assert heartbeat(a, group, "nobody", 2) == ErrorCode.unknown_member_id

    # b stops heartbeating: after its session timeout (1 s) the group rebalances without it.
    deadline = time.monotonic() + 30
    while heartbeat(a, group, a_id, 2) != ErrorCode.rebalance_in_progress:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    alone = join(a, group, a_id, metadata=b"meta-a")
    assert alone.generation_id == 3
    assert [m.member_id for m in alone.members] == [a_id]
    assert heartbeat(b, group, b_id, 2) == ErrorCode.unknown_member_id

    left = a.request(
        LeaveGroupRequest(
            group_id=group,
            members=(
                MemberIdentity(member_id=a_id, group_instance_id=None, reason=None),
                MemberIdentity(member_id="ghost", group_instance_id=None, reason=None),
            ),
        )
    )
    assert [m.error_code for m in left.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    a.close()
    b.close()


def test_static_member_rejoins_without_rebalance_and_fences_its_old_id(raw_broker) -> None:
    group = "static-group"
    old, new = RawClient(raw_broker.port), RawClient(raw_broker.port)
    first = join(old, group, instance="instance-1")
    assert first.error_code == ErrorCode.none  # static members get an id at once
    old_id = first.member_id
    assert sync(old, group, old_id, 1, {old_id: b"mine"}).assignment == b"mine"

    again = join(new, group, instance="instance-1")
    assert again.error_code == ErrorCode.none
    assert again.member_id != old_id
    assert again.generation_id == 1  # no rebalance: same generation
    assert again.skip_assignment  # it leads; v9 tells it not to assign again
    assert sync(new, group, again.member_id, 1).assignment == b"mine"
    assert heartbeat(old, group, old_id, 1, "instance-1") == ErrorCode.fenced_instance_id
    assert heartbeat(new, group, again.member_id, 1, "instance-1") == ErrorCode.none
    old.close()
    new.close()


def test_static_leader_rejoining_below_v9_keeps_the_generation(raw_broker) -> None:
    """JoinGroup v5 (no skip_assignment): the static leader rejoining a Stable group under a
    new member id gets the current generation with the old leader id named, so it syncs
    as a follower and gets its assignment back; no rebalance (KIP-345)."""
    from kio.schema.join_group.v5.request import JoinGroupRequest as JoinV5
    from kio.schema.join_group.v5.request import JoinGroupRequestProtocol as ProtocolV5

    group = "static-leader-v5"

    def join_v5(client: RawClient) -> object:
        return client.request(
            JoinV5(
                group_id=group,
                session_timeout=datetime.timedelta(milliseconds=SESSION_MS),
                rebalance_timeout=datetime.timedelta(milliseconds=5000),
                member_id="",
                group_instance_id="leader-instance",
                protocol_type="consumer",
                protocols=(ProtocolV5(name="range", metadata=b"sub"),),
            )
        )

    old, new = RawClient(raw_broker.port), RawClient(raw_broker.port)
    first = join_v5(old)
    assert first.error_code == ErrorCode.none and first.leader == first.member_id
    old_id = first.member_id
    assert sync(old, group, old_id, 1, {old_id: b"mine"}).assignment == b"mine"

    again = join_v5(new)
    assert again.error_code == ErrorCode.none
    assert again.member_id != old_id
    assert (again.generation_id, again.leader, again.members) == (1, old_id, ())
    assert sync(new, group, again.member_id, 1).assignment == b"mine"
    assert heartbeat(new, group, again.member_id, 1, "leader-instance") == ErrorCode.none
    assert heartbeat(old, group, old_id, 1, "leader-instance") == ErrorCode.fenced_instance_id
    old.close()
    new.close()


def _kafka_string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_offsets_round_trip_and_are_stored_in_kafka_formats(raw_broker) -> None:
    create_topic(raw_broker.bootstrap, "raw-offsets", 2)
    client = RawClient(raw_broker.port)
    committed = client.request(
        OffsetCommitRequest(
            group_id="offsets-group",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=(
                OffsetCommitRequestTopic(
                    name="raw-offsets",
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=1,
                            committed_offset=42,
                            committed_leader_epoch=7,
                            committed_metadata="hello",
                        ),
                        OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=3,
                            committed_leader_epoch=-1,
                            committed_metadata="x" * 4097,
                        ),
                        OffsetCommitRequestPartition(
                            partition_index=9,
                            committed_offset=1,
                            committed_leader_epoch=-1,
                            committed_metadata=None,
                        ),
                    ),
                ),
                OffsetCommitRequestTopic(
                    name="no-such-topic",
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=1,
                            committed_leader_epoch=-1,
                            committed_metadata=None,
                        ),
                    ),
                ),
            ),
        )
    )
    errors = [[p.error_code for p in t.partitions] for t in committed.topics]
    assert errors == [
        [
            ErrorCode.none,
            ErrorCode.offset_metadata_too_large,
            ErrorCode.unknown_topic_or_partition,
        ],
        [ErrorCode.unknown_topic_or_partition],
    ]
    fetched = client.request(
        OffsetFetchRequest(
            groups=(
                OffsetFetchRequestGroup(
                    group_id="offsets-group",
                    member_id=None,
                    member_epoch=-1,
                    topics=(
                        OffsetFetchRequestTopics(name="raw-offsets", partition_indexes=(0, 1)),
                    ),
                ),
                OffsetFetchRequestGroup(
                    group_id="unknown-group", member_id=None, member_epoch=-1, topics=None
                ),
            ),
            require_stable=True,
        )
    )
    known, unknown = fetched.groups
    partitions = {p.partition_index: p for p in known.topics[0].partitions}
    assert (
        partitions[1].committed_offset,
        partitions[1].committed_leader_epoch,
        partitions[1].metadata,
    ) == (42, 7, "hello")
    assert partitions[0].committed_offset == -1
    assert (unknown.error_code, unknown.topics) == (ErrorCode.none, ())
    client.close()

    # The record in __consumer_offsets, read back as any consumer would read it.
    reader = Consumer(
        {
            "bootstrap.servers": raw_broker.bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
        }
    )
    reader.assign([TopicPartition("__consumer_offsets", p, 0) for p in range(3)])
    expected_key = (
        struct.pack(">h", 1)
        + _kafka_string("offsets-group")
        + _kafka_string("raw-offsets")
        + struct.pack(">i", 1)
    )
    value = None
    deadline = time.monotonic() + 20
    while value is None and time.monotonic() < deadline:
        msg = reader.poll(0.5)
        if msg is not None and not msg.error() and msg.key() == expected_key:
            value = msg.value()
    reader.close()
    assert value is not None
    version, offset, epoch = struct.unpack_from(">hqi", value)
    assert (version, offset, epoch) == (3, 42, 7)
    assert value[14 : 14 + 7] == _kafka_string("hello")
    assert len(value) == 14 + 7 + 8  # then only the commit timestamp


def _cg_heartbeat(
    client: RawClient,
    group: str,
    member_id: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
    owned: object = None,
    instance: str | None = None,
    regex: str | None = None,
) -> object:
    from kio.schema.consumer_group_heartbeat.v1.request import (
        ConsumerGroupHeartbeatRequest,
        TopicPartitions,
    )

    return client.request(
        ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance,
            rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=10),
            subscribed_topic_names=topics,
            subscribed_topic_regex=regex,
            server_assignor="range",
            topic_partitions=None
            if owned is None
            else tuple(
                TopicPartitions(topic_id=t, partitions=tuple(sorted(ps)))
                for t, ps in owned.items()  # type: ignore[attr-defined]
            ),
        )
    )


def _owned(response: object) -> dict:
    assignment = response.assignment  # type: ignore[attr-defined]
    return {tp.topic_id: set(tp.partitions) for tp in assignment.topic_partitions}


def test_kip848_heartbeat_revokes_before_it_reassigns(raw_broker) -> None:
    create_topic(raw_broker.bootstrap, "cg-raw", 4)
    group = "cg-raw-group"
    a, b = RawClient(raw_broker.port), RawClient(raw_broker.port)
    assert _cg_heartbeat(a, group, "", 0, ("cg-raw",)).error_code == ErrorCode.invalid_request
    assert _cg_heartbeat(a, group, "a", 0).error_code == ErrorCode.invalid_request
    assert _cg_heartbeat(a, group, "ghost", 3).error_code == ErrorCode.unknown_member_id

    first = _cg_heartbeat(a, group, "a", 0, ("cg-raw",))
    assert first.error_code == ErrorCode.none
    a_owned = _owned(first)
    assert [sorted(ps) for ps in a_owned.values()] == [[0, 1, 2, 3]]
    a_epoch = first.member_epoch
    assert _cg_heartbeat(a, group, "a", a_epoch + 5).error_code == ErrorCode.fenced_member_epoch

    b_first = _cg_heartbeat(b, group, "b", 0, ("cg-raw",))
    assert _owned(b_first) == {}  # a still owns everything: nothing to hand out yet
    revoke = _cg_heartbeat(a, group, "a", a_epoch, owned=a_owned)
    assert revoke.member_epoch == a_epoch  # keeps its epoch until it has revoked
    assert [sorted(ps) for ps in _owned(revoke).values()] == [[0, 1]]
    b_waiting = _cg_heartbeat(b, group, "b", b_first.member_epoch, owned={})
    if b_waiting.assignment is not None:
        assert not any(_owned(b_waiting).values())  # 2 and 3 are not released yet
    done = _cg_heartbeat(a, group, "a", a_epoch, owned=_owned(revoke))
    assert done.member_epoch > a_epoch
    b_now = _cg_heartbeat(b, group, "b", b_waiting.member_epoch, owned={})
    assert [sorted(ps) for ps in _owned(b_now).values()] == [[2, 3]]
    left = _cg_heartbeat(a, group, "a", -1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    a.close()
    b.close()


def _topic_ids(port: int) -> dict[str, object]:
    from kio.schema.metadata.v12.request import MetadataRequest

    with RawClient(port) as client:
        answer = client.request(
            MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    return {t.name: t.topic_id for t in answer.topics}


def test_kip848_regex_subscription_is_re2_and_follows_new_topics(raw_broker) -> None:
    """SubscribedTopicRegex: whole topic names matched with RE2, in linear time (a pattern
    that would keep a backtracking engine busy for hours against one topic's name is
    answered at once; one that RE2 cannot run in linear time, a backreference, is
    INVALID_REGULAR_EXPRESSION), and a topic created later is assigned once it exists."""
    create_topic(raw_broker.bootstrap, "rx-orders", 2)
    create_topic(raw_broker.bootstrap, "rx-orders-dlq", 1)
    create_topic(raw_broker.bootstrap, "other-rx-orders", 1)
    create_topic(raw_broker.bootstrap, "rx" + "a" * 32, 1)
    ids = _topic_ids(raw_broker.port)
    client = RawClient(raw_broker.port)
    bad = _cg_heartbeat(client, "rx-group", "m", 0, regex="(a)\\1")
    assert bad.error_code == ErrorCode.invalid_regular_expression
    first = _cg_heartbeat(client, "rx-group", "m", 0, regex="rx-orders(-dlq)?")
    assert first.error_code == ErrorCode.none
    assert _owned(first) == {ids["rx-orders"]: {0, 1}, ids["rx-orders-dlq"]: {0}}
    with RawClient(raw_broker.port) as evil:  # its timeout: 10 s
        answer = _cg_heartbeat(evil, "rx-evil", "e", 0, regex="rx(a+)+b")
    assert answer.error_code == ErrorCode.none
    assert _owned(answer) == {}
    create_topic(raw_broker.bootstrap, "rx-orders-eu", 1)
    new_id = _topic_ids(raw_broker.port)["rx-orders-eu"]
    later = _cg_heartbeat(client, "rx-group", "m", first.member_epoch, regex="rx-orders.*")
    deadline = time.monotonic() + 30
    while new_id not in _owned(later) and time.monotonic() < deadline:
        time.sleep(0.2)
        later = _cg_heartbeat(client, "rx-group", "m", later.member_epoch, regex="rx-orders.*")
    assert later.error_code == ErrorCode.none
    assert new_id in _owned(later) and ids["other-rx-orders"] not in _owned(later)
    client.close()


def test_kip848_instance_id_held_by_a_live_member_is_refused(raw_broker) -> None:
    """A member joining with a group.instance.id that a live member holds gets
    UNRELEASED_INSTANCE_ID, and the holder keeps its place; once the holder has left
    (epoch -2), the newcomer joins."""
    create_topic(raw_broker.bootstrap, "cg-static", 2)
    group = "cg-static-group"
    a, b = RawClient(raw_broker.port), RawClient(raw_broker.port)
    first = _cg_heartbeat(a, group, "a", 0, ("cg-static",), instance="i-1")
    assert first.error_code == ErrorCode.none
    refused = _cg_heartbeat(b, group, "b", 0, ("cg-static",), instance="i-1")
    assert refused.error_code == ErrorCode.unreleased_instance_id
    assert "owned by a" in refused.error_message
    still = _cg_heartbeat(a, group, "a", first.member_epoch, owned=_owned(first))
    assert still.error_code == ErrorCode.none
    assert still.member_epoch == first.member_epoch  # no one joined: no new epoch
    left = _cg_heartbeat(a, group, "a", -2, instance="i-1")
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -2)
    joined = _cg_heartbeat(b, group, "b", 0, ("cg-static",), instance="i-1")
    assert joined.error_code == ErrorCode.none
    assert [sorted(ps) for ps in _owned(joined).values()] == [[0, 1]]
    a.close()
    b.close()


def test_kip848_group_max_size_refuses_a_newcomer_only(tmp_path) -> None:
    """group.consumer.max.size: a member joining a full KIP-848 group gets
    GROUP_MAX_SIZE_REACHED, naming the setting; its members keep heartbeating and may rejoin
    with their own id; once one leaves, the newcomer joins. Other groups are not counted."""
    broker = BrokerProcess(tmp_path / "data", {**OVERRIDES, "group.consumer.max.size": "2"})
    broker.start()
    try:
        create_topic(broker.bootstrap, "cg-full", 2)
        a, b, c = (RawClient(broker.port) for _ in range(3))
        a_first = _cg_heartbeat(a, "full", "a", 0, ("cg-full",))
        b_first = _cg_heartbeat(b, "full", "b", 0, ("cg-full",))
        assert (a_first.error_code, b_first.error_code) == (ErrorCode.none, ErrorCode.none)
        refused = _cg_heartbeat(c, "full", "c", 0, ("cg-full",))
        assert refused.error_code == ErrorCode.group_max_size_reached
        assert "group.consumer.max.size=2" in refused.error_message
        assert _cg_heartbeat(c, "other", "c", 0, ("cg-full",)).error_code == ErrorCode.none
        again = _cg_heartbeat(a, "full", "a", a_first.member_epoch)
        assert again.error_code == ErrorCode.none
        rejoined = _cg_heartbeat(a, "full", "a", 0, ("cg-full",))  # as after fencing
        assert rejoined.error_code == ErrorCode.none
        assert _cg_heartbeat(b, "full", "b", -1).error_code == ErrorCode.none
        joined = _cg_heartbeat(c, "full", "c", 0, ("cg-full",))
        assert joined.error_code == ErrorCode.none
        for client in (a, b, c):
            client.close()
    finally:
        broker.stop()


def test_group_configs_are_described_altered_and_applied(raw_broker) -> None:
    """GROUP config resources (Kafka 4.0): IncrementalAlterConfigs sets a group's
    consumer.heartbeat.interval.ms and consumer.session.timeout.ms within the broker's
    bounds, DescribeConfigs shows them as DYNAMIC_GROUP_CONFIG beside the defaults, and
    the group's members are told that interval and expire after that session timeout."""
    create_topic(raw_broker.bootstrap, "cg-configs", 1)
    group = "cg-configs-group"
    admin = AdminClient({"bootstrap.servers": raw_broker.bootstrap})

    def alter(**configs: str) -> None:
        entries = [
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ]
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        admin.incremental_alter_configs([resource])[resource].result(10)

    alter(consumer_heartbeat_interval_ms="1234", consumer_session_timeout_ms="1500")
    resource = ConfigResource(ResourceType.GROUP, group)
    described = admin.describe_configs([resource])[resource].result(10)
    assert {k: (v.value, v.source) for k, v in described.items() if k.startswith("consumer")} == {
        "consumer.heartbeat.interval.ms": ("1234", ConfigSource.GROUP_CONFIG.value),
        "consumer.session.timeout.ms": ("1500", ConfigSource.GROUP_CONFIG.value),
    }
    assert described["share.auto.offset.reset"].value == "latest"
    assert described["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value
    for bad in (
        {"consumer_heartbeat_interval_ms": "99999"},  # above group.consumer.max.heartbeat...
        {"consumer_session_timeout_ms": "1000"},  # not above the heartbeat interval
        {"no_such_config": "1"},
    ):
        with pytest.raises(KafkaException) as refused:
            alter(**bad)
        assert refused.value.args[0].code() == 40  # INVALID_CONFIG

    client = RawClient(raw_broker.port)
    joined = _cg_heartbeat(client, group, "cfg-member", 0, ("cg-configs",))
    assert joined.error_code == ErrorCode.none
    assert joined.heartbeat_interval == datetime.timedelta(milliseconds=1234)
    client.close()

    def members() -> int:
        found = admin.describe_consumer_groups([group])[group].result(10)
        return len(found.members)

    assert members() == 1
    wait_until(lambda: members() == 0, 20, "the silent member to expire after 1.5 s")


def test_group_configs_survive_a_restart(fresh_broker) -> None:
    """A group's configs are kept in the cluster metadata: a restarted broker still has
    them."""
    fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    entry = ConfigEntry(
        "consumer.heartbeat.interval.ms", "7000", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, "kept-group", incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(10)
    fresh_broker.restart()
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, "kept-group")
    kept = admin.describe_configs([resource])[resource].result(30)
    assert kept["consumer.heartbeat.interval.ms"].value == "7000"
    assert kept["consumer.heartbeat.interval.ms"].source == ConfigSource.GROUP_CONFIG.value


def _subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += _kafka_string(topic)
    return out + struct.pack(">i", -1)


def test_offset_delete_refuses_subscribed_topics(raw_broker) -> None:
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )

    create_topic(raw_broker.bootstrap, "od-sub", 1)
    create_topic(raw_broker.bootstrap, "od-free", 1)
    client = RawClient(raw_broker.port)
    group = "od-group"
    member = join(client, group).member_id
    joined = join(client, group, member, metadata=_subscription("od-sub"))
    sync(client, group, member, joined.generation_id, {member: b""})
    committed = client.request(
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=joined.generation_id,
            member_id=member,
            group_instance_id=None,
            topics=tuple(
                OffsetCommitRequestTopic(
                    name=name,
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=5,
                            committed_leader_epoch=-1,
                            committed_metadata=None,
                        ),
                    ),
                )
                for name in ("od-sub", "od-free")
            ),
        )
    )
    assert [t.partitions[0].error_code for t in committed.topics] == [ErrorCode.none] * 2

    def delete(group_id: str) -> object:
        return client.request(
            OffsetDeleteRequest(
                group_id=group_id,
                topics=tuple(
                    OffsetDeleteRequestTopic(
                        name=name, partitions=(OffsetDeleteRequestPartition(partition_index=0),)
                    )
                    for name in ("od-sub", "od-free")
                ),
            )
        )

    assert delete("no-such-group").error_code == ErrorCode.group_id_not_found
    response = delete(group)
    assert response.error_code == ErrorCode.none
    assert [t.partitions[0].error_code for t in response.topics] == [
        ErrorCode.group_subscribed_to_topic,
        ErrorCode.none,
    ]
    fetched = client.request(
        OffsetFetchRequest(
            groups=(
                OffsetFetchRequestGroup(
                    group_id=group, member_id=None, member_epoch=-1, topics=None
                ),
            ),
            require_stable=False,
        )
    )
    assert [(t.name, t.partitions[0].committed_offset) for t in fetched.groups[0].topics] == [
        ("od-sub", 5)
    ]
    client.close()


def test_initial_rebalance_delay_waits_for_more_members(tmp_path) -> None:
    """group.initial.rebalance.delay.ms: a group's first rebalance gathers late joiners.
    The second member joins once the first one's join is held (the group is preparing a
    rebalance): without the delay that join would have completed the rebalance alone."""
    broker = BrokerProcess(
        tmp_path / "data", {**OVERRIDES, "group.initial.rebalance.delay.ms": "4000"}
    )
    broker.start()
    try:
        a, b, watcher = (RawClient(broker.port) for _ in range(3))
        a_id = join(a, "delayed").member_id
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(join, a, "delayed", a_id)
            wait_until(
                lambda: group_state(watcher, "delayed") == "PreparingRebalance",
                10,
                "the first member's join to be held",
            )
            b_id = join(b, "delayed").member_id
            second = join(b, "delayed", b_id)
            joined = first.result(20)
        assert joined.generation_id == second.generation_id == 1
        assert {m.member_id for m in joined.members} == {a_id, b_id}
        for client in (a, b, watcher):
            client.close()
    finally:
        broker.stop()


def test_a_leader_that_never_syncs_is_removed_after_the_rebalance_timeout(raw_broker) -> None:
    """The rebalance timeout is also the time a member has to rejoin once told of a
    rebalance: 2 s, which a loaded machine's pauses stay under."""
    group = "no-sync-group"
    leader, follower = RawClient(raw_broker.port), RawClient(raw_broker.port)
    leader_id = join(leader, group, rebalance_ms=REBALANCE_MS).member_id
    assert join(leader, group, leader_id, rebalance_ms=REBALANCE_MS).leader == leader_id
    assert sync(leader, group, leader_id, 1, {leader_id: b""}).error_code == ErrorCode.none
    follower_id = join(follower, group, rebalance_ms=REBALANCE_MS).member_id
    with ThreadPoolExecutor(1) as pool:
        follower_join = pool.submit(join, follower, group, follower_id, None, b"sub", REBALANCE_MS)
        deadline = time.monotonic() + 30
        while heartbeat(leader, group, leader_id, 1) != ErrorCode.rebalance_in_progress:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        generation = join(leader, group, leader_id, rebalance_ms=REBALANCE_MS).generation_id
        assert follower_join.result(10).generation_id == generation
    # The leader keeps heartbeating but never sends SyncGroup; the follower waits for it.
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(sync, follower, group, follower_id, generation)
        deadline = time.monotonic() + 30
        while heartbeat(leader, group, leader_id, generation) == ErrorCode.none:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert waiting.result(10).error_code == ErrorCode.rebalance_in_progress
    assert heartbeat(leader, group, leader_id, generation) == ErrorCode.unknown_member_id
    alone = join(follower, group, follower_id, rebalance_ms=REBALANCE_MS)
    assert [m.member_id for m in alone.members] == [follower_id]
    leader.close()
    follower.close()


def test_offset_commit_v2_retention_time_expires_the_offset(raw_broker) -> None:
    """OffsetCommit v2-4 carry a retention time: Kafka stores it as the offsets' expiry.
    An offset committed with one second is gone a little later; one with the default
    (-1) stays."""
    from kio.schema.offset_commit.v2.request import (
        OffsetCommitRequest as OffsetCommitV2,
    )
    from kio.schema.offset_commit.v2.request import (
        OffsetCommitRequestPartition as PartitionV2,
    )
    from kio.schema.offset_commit.v2.request import (
        OffsetCommitRequestTopic as TopicV2,
    )

    create_topic(raw_broker.bootstrap, "retained", 1)
    client = RawClient(raw_broker.port)

    def commit(group: str, retention_ms: int) -> None:
        response = client.request(
            OffsetCommitV2(
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                retention_time=datetime.timedelta(milliseconds=retention_ms),
                topics=(
                    TopicV2(
                        name="retained",
                        partitions=(
                            PartitionV2(
                                partition_index=0, committed_offset=3, committed_metadata=""
                            ),
                        ),
                    ),
                ),
            )
        )
        assert response.topics[0].partitions[0].error_code == ErrorCode.none

    def committed(group: str) -> int:
        fetched = client.request(
            OffsetFetchRequest(
                groups=(
                    OffsetFetchRequestGroup(
                        group_id=group,
                        member_id=None,
                        member_epoch=-1,
                        topics=(OffsetFetchRequestTopics(name="retained", partition_indexes=(0,)),),
                    ),
                ),
                require_stable=False,
            )
        )
        return fetched.groups[0].topics[0].partitions[0].committed_offset

    commit("short-lived", 1000)
    commit("default-retention", -1)
    assert committed("short-lived") == 3
    deadline = time.monotonic() + 15
    while committed("short-lived") != -1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert committed("short-lived") == -1
    assert committed("default-retention") == 3
    client.close()
