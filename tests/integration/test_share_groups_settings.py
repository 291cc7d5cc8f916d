"""Share group settings with values other than their defaults change what the broker
does (a setting Strom accepts is a setting Strom honours), seen on the wire with raw
requests: one broker with tight limits, and one with share groups turned off.

Covered elsewhere: group.share.record.lock.duration.ms and group.share.heartbeat
.interval.ms (test_share_groups.py's broker), the group configs (same module),
share.coordinator.write.timeout.ms (the three-node test: an acknowledgement whose write
cannot be replicated answers REQUEST_TIMED_OUT). share.coordinator.state.topic
.replication.factor is capped by the live brokers: the three-node test runs the default.
group.share.enable (false by default) turns share groups on whatever share.version says
(tests/unit/test_share_features.py).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from cli_helpers import ok, tool
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka_helpers import create_topic, wait_until
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.share_acknowledge.v1 import request as share_ack
from kio.schema.share_fetch.v1 import request as share_fetch
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1 import request as share_heartbeat
from raw_client import RawClient

from strom.protocol.errors import ErrorCode

STATE_TOPIC = "__share_group_state"
TIGHT = {
    "offsets.topic.num.partitions": "1",
    "group.share.max.size": "2",
    "group.share.max.share.sessions": "1",
    "group.share.delivery.count.limit": "2",
    "group.share.partition.max.record.locks": "100",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "300",
    "group.share.min.session.timeout.ms": "1000",
    "group.share.session.timeout.ms": "1500",
    "share.coordinator.state.topic.num.partitions": "2",
    "share.coordinator.state.topic.segment.bytes": "1048576",
}
RELEASE = 2


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("share-tight") / "data", TIGHT)
    process.start()
    yield process
    if process.alive():
        process.stop()


def _queue(broker: BrokerProcess, batches: int, per_batch: int) -> tuple[str, str, uuid.UUID]:
    """A topic of one partition with ``batches`` batches of ``per_batch`` records, and a
    share group reading it from the earliest; the topic's id."""
    topic, group = f"q-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(batches):
        for i in range(per_batch):
            producer.produce(topic, value=b"r%d" % i)
        producer.flush(10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
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
    with RawClient(broker.port) as client:
        response = client.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    topic_id = response.topics[0].topic_id
    assert topic_id is not None
    return topic, group, topic_id


def _join(client: RawClient, group: str, member: str, topic: str) -> Any:
    return client.request(
        share_heartbeat.ShareGroupHeartbeatRequest(
            group_id=group,
            member_id=member,
            member_epoch=0,
            rack_id=None,
            subscribed_topic_names=(topic,),
        )
    )


def _fetch(
    client: RawClient,
    group: str,
    member: str,
    epoch: int,
    topic_id: uuid.UUID,
    release: tuple[int, int] | None = None,
) -> Any:
    """A ShareFetch of partition 0 (releasing first..last first, if given)."""
    acks = ()
    if release is not None:
        acks = (
            share_fetch.AcknowledgementBatch(
                first_offset=release[0], last_offset=release[1], acknowledge_types=(RELEASE,)
            ),
        )
    return client.request(
        share_fetch.ShareFetchRequest(
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            max_wait=datetime.timedelta(milliseconds=300),
            min_bytes=1,
            max_records=1000,
            batch_size=1000,
            topics=(
                share_fetch.FetchTopic(
                    topic_id=topic_id,
                    partitions=(
                        share_fetch.FetchPartition(partition_index=0, acknowledgement_batches=acks),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
    )


def _acquired(response: Any) -> dict[int, int]:
    """Offset -> delivery count of what a ShareFetch acquired."""
    return {
        offset: r.delivery_count
        for t in response.responses
        for p in t.partitions
        for r in p.acquired_records
        for offset in range(r.first_offset, r.last_offset + 1)
    }


def _members(client: RawClient, group: str) -> int:
    response = client.request(
        ShareGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)
    )
    return len(response.groups[0].members)


def test_group_size_sessions_heartbeat_and_session_timeout(tight: BrokerProcess) -> None:
    """group.share.max.size=2: a third member is refused; group.share.max.share.sessions=1:
    a second member's share session is refused while the first member is in its group,
    and taken once it left (group.share.session.timeout.ms=1500 without heartbeats);
    group.share.heartbeat.interval.ms=300 is the interval members are told."""
    topic, group, topic_id = _queue(tight, 1, 5)
    with RawClient(tight.port) as client:
        first = _join(client, group, "m-1", topic)
        assert first.error_code == ErrorCode.none, first.error_message
        assert first.heartbeat_interval == datetime.timedelta(milliseconds=300)
        assert _join(client, group, "m-2", topic).error_code == ErrorCode.none
        third = _join(client, group, "m-3", topic)
        assert third.error_code == ErrorCode.group_max_size_reached, third.error_message
        assert _fetch(client, group, "m-1", 0, topic_id).error_code == ErrorCode.none
        refused = _fetch(client, group, "m-2", 0, topic_id)
        assert refused.error_code == ErrorCode.share_session_limit_reached
        # No more heartbeats: both members leave after the session timeout, and the
        # session of the first is given to the second.
        wait_until(lambda: _members(client, group) == 0, 15, "the members to time out")
        assert _fetch(client, group, "m-2", 0, topic_id).error_code == ErrorCode.none


def test_record_locks_and_delivery_count_limit(tight: BrokerProcess) -> None:
    """group.share.partition.max.record.locks=100: one fetch of 150 records acquires
    about 100 of them (whole batches of 10); group.share.delivery.count.limit=2: records
    released after their second delivery are archived, never delivered a third time."""
    _, group, topic_id = _queue(tight, 15, 10)
    with RawClient(tight.port) as client:
        first = _acquired(_fetch(client, group, "r-1", 0, topic_id))
        assert 100 <= len(first) <= 110 and set(first) == set(range(len(first))), first
        again = _acquired(_fetch(client, group, "r-1", 1, topic_id, release=(0, 9)))
        assert {o: again.get(o) for o in range(10)} == dict.fromkeys(range(10), 2), again
        then = _acquired(_fetch(client, group, "r-1", 2, topic_id, release=(0, 9)))
        assert not set(then) & set(range(10)), then
        response = client.request(
            DescribeShareGroupOffsetsRequest(
                groups=(DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),)
            )
        )
        (described,) = [p for t in response.groups[0].topics for p in t.partitions]
        assert described.start_offset == 10  # 0..9 archived


def test_the_state_topic_is_made_as_configured(tight: BrokerProcess) -> None:
    """share.coordinator.state.topic.num.partitions=2 and .segment.bytes=1048576."""
    topic, group, _ = _queue(tight, 1, 1)
    with RawClient(tight.port) as client:
        assert _join(client, group, "s-1", topic).error_code == ErrorCode.none
    admin = AdminClient({"bootstrap.servers": tight.bootstrap})
    wait_until(lambda: STATE_TOPIC in admin.list_topics(timeout=5).topics, 10, "the state topic")
    assert len(admin.list_topics(STATE_TOPIC, timeout=5).topics[STATE_TOPIC].partitions) == 2
    resource = ConfigResource(ResourceType.TOPIC, STATE_TOPIC)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["segment.bytes"].value == "1048576"
    assert configs["cleanup.policy"].value == "compact"


def test_share_version_turns_share_groups_off_and_on(tight: BrokerProcess) -> None:
    """share.version (Kafka's ShareVersion feature): finalized at 1 on a new cluster; a
    downgrade to 0 turns share groups off (every share API answers UNSUPPORTED_VERSION,
    saying why; group.share.enable is false by default), an upgrade to 1 back on.
    Through ``strom features`` (ApiVersions' features, UpdateFeatures)."""
    topic, group, topic_id = _queue(tight, 1, 1)
    described = ok(tool(tight, "features", "describe")).stdout
    line = next(x for x in described.splitlines() if x.startswith("Feature: share.version\t"))
    assert "SupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1" in line
    refused = tool(tight, "features", "upgrade", "--feature", "share.version=2")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stdout.startswith("Could not upgrade share.version to 2. "), refused.stdout
    assert len(refused.stdout.strip().splitlines()) == 1
    downgraded = ok(tool(tight, "features", "downgrade", "--feature", "share.version=0"))
    assert downgraded.stdout.strip() == "share.version was downgraded to 0."
    try:
        with RawClient(tight.port) as client:
            joined = _join(client, group, "off-1", topic)
            assert joined.error_code == ErrorCode.unsupported_version
            assert "share.version" in (joined.error_message or "")
            fetched = _fetch(client, group, "off-1", 0, topic_id)
            assert fetched.error_code == ErrorCode.unsupported_version
            acked = client.request(
                share_ack.ShareAcknowledgeRequest(
                    group_id=group, member_id="off-1", share_session_epoch=1, topics=()
                )
            )
            assert acked.error_code == ErrorCode.unsupported_version
    finally:
        upgraded = ok(tool(tight, "features", "upgrade", "--feature", "share.version=1"))
    assert upgraded.stdout.strip() == "share.version was upgraded to 1."
    with RawClient(tight.port) as client:
        assert _join(client, group, "on-1", topic).error_code == ErrorCode.none
