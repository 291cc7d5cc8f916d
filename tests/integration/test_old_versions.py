"""Old request versions (those kio lacks, Kafka 3.9's low ends) against a real broker.

Each test sends raw requests of the old version and reads the decoded answer: topics
created with CreateTopics v0 and seen by Metadata v0, ListOffsets v0's offset lists,
offsets committed with OffsetCommit v0/v1 and read back with OffsetFetch v0/v1,
DescribeConfigs v0, an ACL round trip with v0 of the ACL APIs, OffsetForLeaderEpoch
v0/v1, DescribeLogDirs v0 and DeleteTopics v0. The broker runs an authorizer that
allows everything when no ACL is found, so the ACL APIs answer.
"""

from __future__ import annotations

import datetime
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Producer
from raw_client import RawClient

from strom.protocol.errors import ErrorCode
from strom.protocol.legacy_versions import request_schema

SECURED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
TOPIC = "old-versions"
RECORDS = 5
LITERAL = 3


def types(api_key: int, version: int) -> ModuleType:
    """The module holding a request version's classes (kio's or legacy_versions')."""
    return sys.modules[request_schema(api_key, version).__module__]


def seconds(n: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=n)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("old-versions") / "data", SECURED)
    process.start()
    yield process
    if process.alive():
        process.stop()


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.port) as raw:
        yield raw


def create_topics_v0(client: RawClient, name: str, partitions: int, **configs: str) -> Any:
    m = types(19, 0)
    request = m.CreateTopicsRequest(
        topics=(
            m.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                assignments=(),
                configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
            ),
        ),
        timeout=seconds(10),
    )
    return client.request(request)


@pytest.fixture(scope="module")
def topic(broker: BrokerProcess, client: RawClient) -> str:
    """A topic made with CreateTopics v0, holding RECORDS records in partition 0."""
    response = create_topics_v0(client, TOPIC, 2, **{"retention.ms": "86400000"})
    assert [(t.name, t.error_code) for t in response.topics] == [(TOPIC, ErrorCode.none)]
    assert not hasattr(response, "throttle_time")  # v0 has none
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    assert producer.flush(15) == 0
    return TOPIC


def test_api_versions_advertise_kafka_3_9_low_ends(client: RawClient) -> None:
    m = sys.modules[request_schema(18, 3).__module__]
    response = client.request(
        m.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    low = {k.api_key: k.min_version for k in response.api_keys}
    for key in (0, 1, 2, 3, 8, 9, 11, 19, 20, 23, 27, 29, 30, 31, 32, 35):
        assert low[key] == 0, key


def test_create_topics_v1_validate_only_creates_nothing(client: RawClient) -> None:
    m = types(19, 1)
    request = m.CreateTopicsRequest(
        topics=(
            m.CreatableTopic(
                name="old-versions-validated",
                num_partitions=1,
                replication_factor=1,
                assignments=(),
                configs=(),
            ),
        ),
        timeout=seconds(10),
        validate_only=True,
    )
    response = client.request(request)
    assert [(t.name, t.error_code, t.error_message) for t in response.topics] == [
        ("old-versions-validated", ErrorCode.none, None)
    ]
    metadata = client.request(types(3, 0).MetadataRequest(topics=()))
    assert "old-versions-validated" not in {t.name for t in metadata.topics}


def test_metadata_v0_with_no_topics_lists_every_topic(client: RawClient, topic: str) -> None:
    response = client.request(types(3, 0).MetadataRequest(topics=()))
    by_name = {t.name: t for t in response.topics}
    assert topic in by_name
    assert sorted(p.partition_index for p in by_name[topic].partitions) == [0, 1]
    assert len(response.brokers) == 1


def test_list_offsets_v0_answers_offset_lists(client: RawClient, topic: str) -> None:
    m = types(2, 0)

    def offsets(timestamp: int, max_num: int, partition: int = 0) -> tuple[Any, ...]:
        request = m.ListOffsetsRequest(
            replica_id=-1,
            topics=(
                m.ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        m.ListOffsetsPartition(
                            partition_index=partition, timestamp=timestamp, max_num_offsets=max_num
                        ),
                    ),
                ),
            ),
        )
        (result,) = client.request(request).topics[0].partitions
        assert result.error_code == ErrorCode.none
        return result.old_style_offsets

    assert offsets(-1, 1) == (RECORDS,)  # latest
    assert offsets(-1, 10) == (RECORDS, 0)  # and the segment's base offset
    assert offsets(-2, 10) == (0,)  # earliest
    future = int(time.time() * 1000) + 3_600_000
    assert offsets(future, 10) == (RECORDS, 0)
    assert offsets(0, 10) == ()  # nothing stamped that early
    assert offsets(-1, 10, partition=1) == (0,)  # an empty partition: its base only

    request = m.ListOffsetsRequest(
        replica_id=-1,
        topics=(
            m.ListOffsetsTopic(
                name=topic,
                partitions=(
                    m.ListOffsetsPartition(partition_index=0, timestamp=-3, max_num_offsets=1),
                ),
            ),
        ),
    )
    (result,) = client.request(request).topics[0].partitions
    assert result.error_code == ErrorCode.unsupported_version  # v0 knows -1 and -2 only


def _find_coordinator(client: RawClient, group: str) -> None:
    """FindCoordinator v0, as old clients ask before committing (it makes the offsets topic)."""
    m = types(10, 0)
    deadline = time.monotonic() + 15
    while client.request(m.FindCoordinatorRequest(key=group)).error_code != ErrorCode.none:
        assert time.monotonic() < deadline, "no coordinator"
        time.sleep(0.2)


def _commit(client: RawClient, version: int, group: str, offset: int, **fields: Any) -> Any:
    _find_coordinator(client, group)
    m = types(8, version)
    partition_fields = {"commit_timestamp": fields.pop("commit_timestamp")} if version == 1 else {}
    request = m.OffsetCommitRequest(
        group_id=group,
        topics=(
            m.OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=(
                    m.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=offset,
                        committed_metadata=f"meta-{offset}",
                        **partition_fields,
                    ),
                ),
            ),
        ),
        **fields,
    )
    return client.request(request)


def _fetch(client: RawClient, version: int, group: str) -> Any:
    m = types(9, version)
    request = m.OffsetFetchRequest(
        group_id=group,
        topics=(m.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0, 1)),),
    )
    (topic_result,) = client.request(request).topics
    return {
        p.partition_index: (p.committed_offset, p.metadata, p.error_code)
        for p in topic_result.partitions
    }


def test_offset_commit_v1_then_offset_fetch_v0_and_v1(client: RawClient, topic: str) -> None:
    response = _commit(
        client,
        1,
        "old-group-v1",
        3,
        generation_id_or_member_epoch=-1,
        member_id="",
        commit_timestamp=int(time.time() * 1000) - 1000,  # recent: expiry counts from it
    )
    assert response.topics[0].partitions[0].error_code == ErrorCode.none
    for version in (0, 1):
        assert _fetch(client, version, "old-group-v1") == {
            0: (3, "meta-3", ErrorCode.none),
            1: (-1, "", ErrorCode.none),
        }


def test_offset_commit_v0_then_offset_fetch_v0(client: RawClient, topic: str) -> None:
    response = _commit(client, 0, "old-group-v0", 4)
    assert response.topics[0].partitions[0].error_code == ErrorCode.none
    assert _fetch(client, 0, "old-group-v0")[0] == (4, "meta-4", ErrorCode.none)


def test_offset_commit_v1_with_a_generation_of_no_group_is_refused(
    client: RawClient, topic: str
) -> None:
    response = _commit(
        client,
        1,
        "old-group-none",
        1,
        generation_id_or_member_epoch=5,
        member_id="someone",
        commit_timestamp=-1,
    )
    assert response.topics[0].partitions[0].error_code == ErrorCode.illegal_generation


def test_describe_configs_v0(client: RawClient, topic: str) -> None:
    m = types(32, 0)
    request = m.DescribeConfigsRequest(
        resources=(
            m.DescribeConfigsResource(
                resource_type=2,
                resource_name=topic,
                configuration_keys=("retention.ms", "cleanup.policy"),
            ),
        )
    )
    (result,) = client.request(request).results
    assert result.error_code == ErrorCode.none
    configs = {c.name: c for c in result.configs}
    assert set(configs) == {"retention.ms", "cleanup.policy"}
    assert configs["retention.ms"].value == "86400000"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].is_default
    assert not hasattr(configs["cleanup.policy"], "synonyms")


def test_acls_v0_round_trip(client: RawClient) -> None:
    create = types(30, 0)
    response = client.request(
        create.CreateAclsRequest(
            creations=(
                create.AclCreation(
                    resource_type=2,  # TOPIC
                    resource_name="old-acl-topic",
                    principal="User:old",
                    host="*",
                    operation=3,  # READ
                    permission_type=3,  # ALLOW
                ),
            )
        )
    )
    assert [r.error_code for r in response.results] == [ErrorCode.none]

    describe = types(29, 0)
    describe_request = describe.DescribeAclsRequest(
        resource_type_filter=2,
        resource_name_filter="old-acl-topic",
        principal_filter=None,
        host_filter=None,
        operation=1,  # ANY
        permission_type=1,  # ANY
    )
    deadline = time.monotonic() + 30
    while True:
        described = client.request(describe_request)
        assert described.error_code == ErrorCode.none
        if described.resources or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    (resource,) = described.resources
    assert (resource.resource_type, resource.resource_name) == (2, "old-acl-topic")
    assert [(a.principal, a.host, a.operation, a.permission_type) for a in resource.acls] == [
        ("User:old", "*", 3, 3)
    ]
    # v1 sees the binding as LITERAL
    v1 = types(29, 1)
    seen = client.request(
        v1.DescribeAclsRequest(
            resource_type_filter=2,
            resource_name_filter="old-acl-topic",
            pattern_type_filter=1,  # ANY
            principal_filter=None,
            host_filter=None,
            operation=1,
            permission_type=1,
        )
    )
    assert [r.pattern_type for r in seen.resources] == [LITERAL]

    delete = types(31, 0)
    deleted = client.request(
        delete.DeleteAclsRequest(
            filters=(
                delete.DeleteAclsFilter(
                    resource_type_filter=2,
                    resource_name_filter="old-acl-topic",
                    principal_filter=None,
                    host_filter=None,
                    operation=1,
                    permission_type=1,
                ),
            )
        )
    )
    (filter_result,) = deleted.filter_results
    assert filter_result.error_code == ErrorCode.none
    assert [(m.resource_name, m.principal) for m in filter_result.matching_acls] == [
        ("old-acl-topic", "User:old")
    ]
    assert client.request(describe_request).resources == ()


def test_offset_for_leader_epoch_v0_and_v1(client: RawClient, topic: str) -> None:
    for version in (0, 1):
        m = types(23, version)
        request = m.OffsetForLeaderEpochRequest(
            topics=(
                m.OffsetForLeaderTopic(
                    topic=topic,
                    partitions=(m.OffsetForLeaderPartition(partition=0, leader_epoch=0),),
                ),
            )
        )
        (result,) = client.request(request).topics[0].partitions
        assert (result.error_code, result.partition, result.end_offset) == (
            ErrorCode.none,
            0,
            RECORDS,
        )
        assert hasattr(result, "leader_epoch") == (version == 1)


def test_describe_log_dirs_v0(client: RawClient, topic: str) -> None:
    m = types(35, 0)
    response = client.request(
        m.DescribeLogDirsRequest(topics=(m.DescribableLogDirTopic(topic=topic, partitions=(0,)),))
    )
    (result,) = response.results
    assert result.error_code == ErrorCode.none
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
        (topic, [0])
    ]
    assert result.topics[0].partitions[0].partition_size > 0


def test_delete_topics_v0(client: RawClient) -> None:
    created = create_topics_v0(client, "old-versions-doomed", 1)
    assert created.topics[0].error_code == ErrorCode.none
    m = types(20, 0)
    response = client.request(
        m.DeleteTopicsRequest(topic_names=("old-versions-doomed",), timeout=seconds(10))
    )
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("old-versions-doomed", ErrorCode.none)
    ]
    assert not hasattr(response, "throttle_time")
    metadata = client.request(types(3, 0).MetadataRequest(topics=()))
    assert "old-versions-doomed" not in {t.name for t in metadata.topics}


def test_a_version_not_served_is_answered_unsupported_version(
    broker: BrokerProcess, topic: str
) -> None:
    """ListOffsets v11 has a known layout but is not served: UNSUPPORTED_VERSION per
    partition, the topics echoed, and the connection stays open."""
    m = types(2, 11)
    with RawClient(broker.port) as raw:
        response = raw.request(
            m.ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=(
                    m.ListOffsetsTopic(
                        name=topic,
                        partitions=(
                            m.ListOffsetsPartition(
                                partition_index=1, current_leader_epoch=-1, timestamp=-1
                            ),
                        ),
                    ),
                ),
                timeout=seconds(1),
            )
        )
        (answered,) = response.topics
        assert answered.name == topic
        assert [(p.partition_index, p.error_code) for p in answered.partitions] == [
            (1, ErrorCode.unsupported_version)
        ]
        metadata = raw.request(types(3, 0).MetadataRequest(topics=()))
        assert topic in {t.name for t in metadata.topics}


def test_a_version_of_unknown_layout_closes_the_connection(broker: BrokerProcess) -> None:
    with RawClient(broker.port) as raw:
        raw.send_bytes(struct.pack(">ihhi", 10, 3, 99, 1) + b"\x00\x00")  # Metadata v99
        assert raw.is_closed_by_peer()


@pytest.fixture(scope="module")
def controller_node(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, int]]:
    """A single node with a CONTROLLER listener of its own (node id 1)."""
    process = BrokerProcess(tmp_path_factory.mktemp("old-alter-partition") / "data")
    controller_port = process.extra_port("CONTROLLER")
    process.overrides.update(
        {
            "node.id": "1",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{process.port},CONTROLLER://127.0.0.1:{controller_port}"
            ),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        }
    )
    process.start()
    try:
        yield process, process.ports["CONTROLLER"]
    finally:
        process.stop()


def test_alter_partition_v0_and_v1_name_topics(controller_node: tuple[BrokerProcess, int]) -> None:
    """AlterPartition v0-1 (topics by name) on the controller listener: the current ISR
    is answered with the partition's state; an unknown name is UNKNOWN_TOPIC_OR_PARTITION."""
    from kafka_helpers import create_topic
    from test_alter_partition_wire import metadata_image

    process, controller_port = controller_node
    create_topic(process.bootstrap, "isr-old", 1)
    image = metadata_image(process.data_dir)
    broker, state = image.broker(1), image.topic("isr-old").partitions[0]
    current = {"leader_epoch": state.leader_epoch, "partition_epoch": state.partition_epoch}
    with RawClient(controller_port) as raw:
        for version in (0, 1):
            m = types(56, version)
            recovery = {"leader_recovery_state": 0} if version == 1 else {}
            for name, expected in (
                ("isr-old", ErrorCode.none),
                ("no-such-topic", ErrorCode.unknown_topic_or_partition),
            ):
                response = raw.request(
                    m.AlterPartitionRequest(
                        broker_id=1,
                        broker_epoch=broker.epoch,
                        topics=(
                            m.TopicData(
                                topic_name=name,
                                partitions=(
                                    m.PartitionData(
                                        partition_index=0, new_isr=(1,), **current, **recovery
                                    ),
                                ),
                            ),
                        ),
                    )
                )
                assert response.error_code == ErrorCode.none
                (topic_answer,) = response.topics
                assert topic_answer.topic_name == name
                (answer,) = topic_answer.partitions
                assert answer.error_code == expected, (version, name)
                if expected == ErrorCode.none:
                    assert (answer.leader_id, tuple(answer.isr)) == (1, (1,))
                    assert answer.partition_epoch == state.partition_epoch


def test_delete_topics_v0_when_deletion_is_disabled(tmp_path: Path) -> None:
    """v0-2 predate TOPIC_DELETION_DISABLED: Kafka answers them INVALID_REQUEST."""
    process = BrokerProcess(tmp_path / "data", {"delete.topic.enable": "false"})
    process.start()
    try:
        with RawClient(process.port) as raw:
            assert create_topics_v0(raw, "kept", 1).topics[0].error_code == ErrorCode.none
            for version, expected in (
                (0, ErrorCode.invalid_request),
                (3, ErrorCode.topic_deletion_disabled),
            ):
                m = types(20, version)
                response = raw.request(
                    m.DeleteTopicsRequest(topic_names=("kept",), timeout=seconds(10))
                )
                assert [(r.name, r.error_code) for r in response.responses] == [("kept", expected)]
    finally:
        process.stop()
