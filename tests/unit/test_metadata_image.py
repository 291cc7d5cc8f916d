"""The metadata image: replaying Kafka's metadata records, snapshots of it, its reads."""

from __future__ import annotations

import uuid

import pytest

from strom.cluster.image import (
    ConfigResourceType,
    Endpoint,
    MetadataImage,
    MetadataImageError,
    PartitionState,
)
from strom.cluster.records import (
    DIRECTORY_MIGRATING,
    AccessControlEntryRecord,
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    EntityData,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    decode_record,
    encode_record,
)

T1 = uuid.UUID(int=0x1111)
T2 = uuid.UUID(int=0x2222)


def register(broker_id: int, epoch: int, rack: str | None = None) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=broker_id),
        broker_epoch=epoch,
        end_points=(
            BrokerEndpoint(name="PLAINTEXT", host=f"b{broker_id}", port=9092, security_protocol=0),
        ),
        rack=rack,
    )


def partition(index: int, replicas: tuple[int, ...], leader: int) -> PartitionRecord:
    return PartitionRecord(
        partition_id=index,
        topic_id=T1,
        replicas=replicas,
        isr=replicas,
        leader=leader,
        leader_epoch=0,
        partition_epoch=0,
    )


def build() -> MetadataImage:
    image = MetadataImage()
    records = [
        FeatureLevelRecord(name="metadata.version", feature_level=25),
        register(1, 1, "a"),
        register(2, 2, "b"),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=-1),
        TopicRecord(name="orders", topic_id=T1),
        ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms", value="1000"),
        partition(0, (1, 2), 1),
        partition(1, (2, 1), 2),
        ConfigRecord(resource_type=4, resource_name="", name="log.retention.ms", value="5"),
        ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=1000),
    ]
    image.apply_all(records, 0, epoch=3)
    return image


def test_replay_builds_brokers_topics_configs() -> None:
    image = build()
    assert image.last_offset == 9 and image.last_epoch == 3
    assert image.metadata_version == 25
    b1 = image.broker(1)
    assert b1 is not None and not b1.fenced and b1.rack == "a" and b1.epoch == 1
    assert b1.registration_offset == 1
    assert b1.endpoint("PLAINTEXT") == Endpoint("PLAINTEXT", "b1", 9092, 0)
    assert image.broker(2) is not None and image.broker(2).fenced  # type: ignore[union-attr]
    assert [b.broker_id for b in image.live_brokers()] == [1]
    topic = image.topic("orders")
    assert topic is not None and image.topic_by_id(T1) is topic
    assert image.partition("orders", 1) == PartitionState(
        replicas=(2, 1), isr=(2, 1), leader=2, directories=(DIRECTORY_MIGRATING,) * 2
    )
    assert image.topic_configs("orders") == {"retention.ms": "1000"}
    assert image.broker_configs(None) == {"log.retention.ms": "5"}
    assert image.configs_of(ConfigResourceType.BROKER, "1") == {}
    assert image.next_producer_id == 1000


def test_partition_change_merge_follows_kafka() -> None:
    image = build()
    # Only the ISR changes: partition epoch +1, leader epoch unchanged.
    image.apply(PartitionChangeRecord(partition_id=0, topic_id=T1, isr=(1,)), 10)
    p = image.partition("orders", 0)
    assert p is not None
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1,), 1, 0, 1)
    # Leader -1: no leader, leader epoch +1.
    image.apply(PartitionChangeRecord(partition_id=0, topic_id=T1, leader=-1), 11)
    p = image.partition("orders", 0)
    assert p is not None and (p.leader, p.leader_epoch, p.partition_epoch) == (-1, 1, 2)
    # The same leader named again still bumps the leader epoch (Kafka's merge).
    image.apply(PartitionChangeRecord(partition_id=0, topic_id=T1, leader=-1), 12)
    p = image.partition("orders", 0)
    assert p is not None and (p.leader_epoch, p.partition_epoch) == (2, 3)
    # Replicas change: directories follow the replicas; reassignment fields set.
    image.apply(
        PartitionChangeRecord(
            partition_id=0,
            topic_id=T1,
            replicas=(1, 2, 3),
            adding_replicas=(3,),
            leader=1,
            isr=(1,),
        ),
        13,
    )
    p = image.partition("orders", 0)
    assert p is not None
    assert p.replicas == (1, 2, 3) and p.adding_replicas == (3,) and p.is_reassigning
    assert len(p.directories) == 3
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 3, 4)


def test_broker_state_changes() -> None:
    image = build()
    image.apply(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=1), 10)
    assert image.broker(1).fenced  # type: ignore[union-attr]
    image.apply(UnfenceBrokerRecord(id=2, epoch=2), 11)
    assert not image.broker(2).fenced  # type: ignore[union-attr]
    image.apply(FenceBrokerRecord(id=2, epoch=2), 12)
    assert image.broker(2).fenced  # type: ignore[union-attr]
    image.apply(
        BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=2, in_controlled_shutdown=1), 13
    )
    assert image.broker(2).in_controlled_shutdown  # type: ignore[union-attr]
    assert not image.is_active(2)
    with pytest.raises(MetadataImageError):
        image.apply(UnregisterBrokerRecord(broker_id=2, broker_epoch=99), 14)
    image.apply(UnregisterBrokerRecord(broker_id=2, broker_epoch=2), 14)
    assert image.broker(2) is None


def test_remove_topic_drops_its_configs() -> None:
    image = build()
    image.apply(RemoveTopicRecord(topic_id=T1), 10)
    assert image.topic("orders") is None and image.topic_by_id(T1) is None
    assert image.topic_configs("orders") == {}
    assert image.broker_configs(None) == {"log.retention.ms": "5"}


def test_config_null_deletes_and_feature_zero_removes() -> None:
    image = build()
    image.apply(ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms"), 10)
    assert image.topic_configs("orders") == {}
    assert (2, "orders") not in image.configs
    image.apply(FeatureLevelRecord(name="kraft.version", feature_level=1), 11)
    image.apply(FeatureLevelRecord(name="kraft.version", feature_level=0), 12)
    assert image.features == {"metadata.version": 25}


def test_strict_replay() -> None:
    image = build()
    with pytest.raises(MetadataImageError):
        image.apply(PartitionRecord(partition_id=0, topic_id=T2, replicas=(1,), isr=(1,)), 10)
    with pytest.raises(MetadataImageError):
        image.apply(PartitionChangeRecord(partition_id=9, topic_id=T1, leader=1), 10)
    with pytest.raises(MetadataImageError):
        image.apply(TopicRecord(name="orders", topic_id=T2), 10)
    with pytest.raises(MetadataImageError):
        image.apply(BrokerRegistrationChangeRecord(broker_id=7, broker_epoch=1, fenced=1), 10)
    with pytest.raises(MetadataImageError):
        image.apply(ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=5), 10)


def test_to_records_rebuilds_an_equal_image() -> None:
    image = build()
    image.apply_all(
        [
            TopicRecord(name="logs", topic_id=T2),
            PartitionRecord(
                partition_id=0, topic_id=T2, replicas=(2,), isr=(2,), leader=-1, leader_epoch=4
            ),
            PartitionChangeRecord(partition_id=0, topic_id=T1, isr=(1,), leader=1),
            RegisterControllerRecord(controller_id=3000, incarnation_id=uuid.UUID(int=5)),
            AccessControlEntryRecord(
                id=uuid.UUID(int=9),
                resource_type=2,
                resource_name="orders",
                pattern_type=3,
                principal="User:a",
                host="*",
                operation=2,
                permission_type=3,
            ),
            AccessControlEntryRecord(
                id=uuid.UUID(int=10),
                resource_type=2,
                resource_name="x",
                pattern_type=3,
                principal="User:b",
                host="*",
                operation=2,
                permission_type=3,
            ),
            RemoveAccessControlEntryRecord(id=uuid.UUID(int=10)),
            UserScramCredentialRecord(
                name="a", mechanism=1, salt=b"s", stored_key=b"k", server_key=b"v", iterations=4096
            ),
            ClientQuotaRecord(
                entity=(EntityData(entity_type="user", entity_name="a"),),
                key="producer_byte_rate",
                value=10.0,
            ),
            NoOpRecord(),
        ],
        10,
    )
    records = image.to_records()
    assert isinstance(records[0], FeatureLevelRecord)
    # Through bytes too, as a snapshot would hold them.
    records = [decode_record(encode_record(r)) for r in records]
    rebuilt = MetadataImage.from_records(records, image.last_offset, image.last_epoch)
    assert rebuilt == image
    assert rebuilt.topic_by_id(T2) is rebuilt.topic("logs")
    assert rebuilt.to_records() == image.to_records()


def test_copy_is_independent() -> None:
    image = build()
    other = image.copy()
    other.apply(PartitionChangeRecord(partition_id=0, topic_id=T1, leader=-1), 10)
    other.apply(ConfigRecord(resource_type=2, resource_name="orders", name="a", value="b"), 11)
    assert image.partition("orders", 0).leader == 1  # type: ignore[union-attr]
    assert "a" not in image.topic_configs("orders")
    assert other != image
