"""Kafka metadata records: bytes computed by hand from Kafka's JSON definitions, round trips."""

from __future__ import annotations

import uuid
from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.cluster.records import (
    DIRECTORY_LOST,
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    RECORD_TYPES,
    ZERO_UUID,
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ControllerEndpoint,
    ControllerFeature,
    EndTransactionRecord,
    EntityData,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    MetadataRecordError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    decode_record,
    decode_record_versioned,
    encode_record,
)

TOPIC_ID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
TOPIC_ID_BYTES = bytes(range(16))


def i32(value: int) -> bytes:
    return value.to_bytes(4, "big", signed=True)


def i64(value: int) -> bytes:
    return value.to_bytes(8, "big", signed=True)


def test_topic_record_bytes() -> None:
    record = TopicRecord(name="foo", topic_id=TOPIC_ID)
    expected = (
        b"\x01"  # frame version
        b"\x02"  # api key 2
        b"\x00"  # version 0
        + b"\x04foo"  # compact string: length + 1
        + TOPIC_ID_BYTES
        + b"\x00"  # no tagged fields
    )
    assert encode_record(record) == expected
    assert decode_record(expected) == record


def test_partition_record_bytes_v2() -> None:
    record = PartitionRecord(
        partition_id=1,
        topic_id=TOPIC_ID,
        replicas=(1, 2, 3),
        isr=(1, 2),
        leader=1,
        leader_epoch=5,
        partition_epoch=7,
        directories=(DIRECTORY_MIGRATING, DIRECTORY_UNASSIGNED, DIRECTORY_LOST),
    )
    expected = (
        b"\x01\x03\x02"
        + i32(1)
        + TOPIC_ID_BYTES
        + b"\x04"  # replicas: compact array of 3
        + i32(1)
        + i32(2)
        + i32(3)
        + b"\x03"  # isr: 2
        + i32(1)
        + i32(2)
        + b"\x01"  # removing replicas: empty
        + b"\x01"  # adding replicas: empty
        + i32(1)  # leader
        + i32(5)  # leader epoch
        + i32(7)  # partition epoch
        + b"\x04"  # directories: 3 uuids
        + bytes(16)
        + (1).to_bytes(16, "big")
        + (2).to_bytes(16, "big")
        + b"\x00"  # LeaderRecoveryState 0 and null ELRs are defaults: no tags
    )
    assert encode_record(record) == expected
    assert decode_record_versioned(expected) == (record, 2)


def test_partition_record_bytes_v0_and_tagged_fields() -> None:
    record = PartitionRecord(
        partition_id=0,
        topic_id=TOPIC_ID,
        replicas=(4,),
        isr=(4,),
        leader=4,
        leader_recovery_state=1,
        leader_epoch=0,
        partition_epoch=0,
    )
    expected = (
        b"\x01\x03\x00"
        + i32(0)
        + TOPIC_ID_BYTES
        + b"\x02"
        + i32(4)
        + b"\x02"
        + i32(4)
        + b"\x01\x01"
        + i32(4)
        + i32(0)
        + i32(0)
        + b"\x01"  # one tagged field
        + b"\x00\x01\x01"  # tag 0 (LeaderRecoveryState), size 1, value 1
    )
    assert encode_record(record, 0) == expected
    assert decode_record_versioned(expected) == (record, 0)

    with_elr = PartitionRecord(
        partition_id=0,
        topic_id=TOPIC_ID,
        replicas=(4,),
        isr=(4,),
        leader=4,
        leader_epoch=0,
        partition_epoch=0,
        directories=(DIRECTORY_UNASSIGNED,),
        eligible_leader_replicas=(2,),
    )
    data = encode_record(with_elr)
    assert data.endswith(b"\x01" + b"\x01\x05\x02" + i32(2))  # tag 1, size 5, [2]
    assert decode_record(data) == with_elr
    with pytest.raises(MetadataRecordError):
        encode_record(with_elr, 1)  # ELR exists from v2 on


def test_partition_change_record_bytes() -> None:
    record = PartitionChangeRecord(partition_id=2, topic_id=TOPIC_ID, isr=(1,), leader=3)
    expected = (
        b"\x01\x05\x02"
        + i32(2)
        + TOPIC_ID_BYTES
        + b"\x02"  # two tagged fields
        + b"\x00\x05\x02"
        + i32(1)  # tag 0 Isr, 5 bytes, [1]
        + b"\x01\x04"
        + i32(3)  # tag 1 Leader
    )
    assert encode_record(record) == expected
    assert decode_record(expected) == record
    # Nothing changed: only the keys, every tagged field at its default (-2 leader, nulls).
    empty = PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID)
    assert encode_record(empty, 0) == b"\x01\x05\x00" + i32(0) + TOPIC_ID_BYTES + b"\x00"
    # An empty ISR is not a null ISR.
    cleared = PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=())
    assert decode_record(encode_record(cleared)).isr == ()


def test_register_broker_record_bytes_v3() -> None:
    incarnation = uuid.UUID(int=7)
    record = RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=incarnation,
        broker_epoch=10,
        end_points=(BrokerEndpoint(name="PL", host="h", port=9092, security_protocol=0),),
        features=(BrokerFeature(name="m", min_supported_version=1, max_supported_version=25),),
        rack=None,
        fenced=True,
    )
    expected = (
        b"\x01\x00\x03"
        + i32(1)
        + b"\x00"  # IsMigratingZkBroker
        + incarnation.bytes
        + i64(10)
        + b"\x02"  # one endpoint
        + b"\x03PL\x02h"
        + (9092).to_bytes(2, "big")
        + b"\x00\x00"  # security protocol int16
        + b"\x00"  # endpoint tagged fields
        + b"\x02\x02m\x00\x01\x00\x19\x00"  # one feature
        + b"\x00"  # null rack
        + b"\x01"  # fenced
        + b"\x00"  # in controlled shutdown
        + b"\x00"  # LogDirs empty: no tags
    )
    assert encode_record(record) == expected
    assert decode_record(expected) == record
    # v0 has neither IsMigratingZkBroker nor InControlledShutdown.
    v0 = encode_record(record, 0)
    assert v0 == b"\x01\x00\x00" + expected[3:7] + expected[8:-3] + b"\x01\x00"
    assert decode_record(v0) == record


def test_broker_registration_change_writes_lowest_version() -> None:
    fence = BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=1)
    assert encode_record(fence) == b"\x01\x11\x00" + i32(1) + i64(5) + b"\x01\x00\x01\x01"
    shutdown = BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, in_controlled_shutdown=1)
    assert encode_record(shutdown)[2] == 1
    with pytest.raises(MetadataRecordError):
        encode_record(shutdown, 0)


EXAMPLES: list[MetadataRecord] = [
    RegisterBrokerRecord(
        broker_id=3,
        incarnation_id=uuid.uuid4(),
        broker_epoch=42,
        end_points=(
            BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9092, security_protocol=0),
            BrokerEndpoint(name="SSL", host="example.org", port=65535, security_protocol=1),
        ),
        features=(
            BrokerFeature(
                name="metadata.version", min_supported_version=7, max_supported_version=25
            ),
        ),
        rack="rack-a",
        fenced=False,
        in_controlled_shutdown=True,
        log_dirs=(uuid.uuid4(), uuid.uuid4()),
    ),
    UnregisterBrokerRecord(broker_id=3, broker_epoch=42),
    TopicRecord(name="orders", topic_id=uuid.uuid4()),
    PartitionRecord(
        partition_id=4,
        topic_id=uuid.uuid4(),
        replicas=(1, 2, 3),
        isr=(1, 3),
        removing_replicas=(2,),
        adding_replicas=(3,),
        leader=3,
        leader_epoch=9,
        partition_epoch=12,
        directories=(ZERO_UUID, DIRECTORY_UNASSIGNED, uuid.uuid4()),
        eligible_leader_replicas=(2,),
        last_known_elr=(),
    ),
    ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms", value="1000"),
    ConfigRecord(resource_type=4, resource_name="", name="log.retention.ms", value=None),
    PartitionChangeRecord(
        partition_id=1,
        topic_id=uuid.uuid4(),
        isr=(1, 2),
        leader=-1,
        replicas=(1, 2),
        removing_replicas=(),
        adding_replicas=(),
        leader_recovery_state=1,
        eligible_leader_replicas=(3,),
        last_known_elr=(4,),
        directories=(DIRECTORY_LOST, ZERO_UUID),
    ),
    FenceBrokerRecord(id=1, epoch=7),
    UnfenceBrokerRecord(id=1, epoch=7),
    RemoveTopicRecord(topic_id=uuid.uuid4()),
    UserScramCredentialRecord(
        name="alice",
        mechanism=1,
        salt=b"salt",
        stored_key=b"\x00" * 32,
        server_key=b"k",
        iterations=4096,
    ),
    FeatureLevelRecord(name="metadata.version", feature_level=25),
    ClientQuotaRecord(
        entity=(
            EntityData(entity_type="user", entity_name=None),
            EntityData(entity_type="client-id", entity_name="app"),
        ),
        key="producer_byte_rate",
        value=1048576.0,
        remove=True,
    ),
    ProducerIdsRecord(broker_id=1, broker_epoch=12, next_producer_id=2000),
    BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=3, fenced=-1, in_controlled_shutdown=1, log_dirs=(uuid.uuid4(),)
    ),
    AccessControlEntryRecord(
        id=uuid.uuid4(),
        resource_type=2,
        resource_name="orders",
        pattern_type=3,
        principal="User:alice",
        host="*",
        operation=3,
        permission_type=3,
    ),
    RemoveAccessControlEntryRecord(id=uuid.uuid4()),
    NoOpRecord(),
    RemoveUserScramCredentialRecord(name="alice", mechanism=1),
    BeginTransactionRecord(name="migration"),
    BeginTransactionRecord(),
    EndTransactionRecord(),
    AbortTransactionRecord(reason="gone"),
    RegisterControllerRecord(
        controller_id=3000,
        incarnation_id=uuid.uuid4(),
        zk_migration_ready=False,
        end_points=(
            ControllerEndpoint(name="CONTROLLER", host="c", port=9093, security_protocol=0),
        ),
        features=(
            ControllerFeature(
                name="kraft.version", min_supported_version=0, max_supported_version=1
            ),
        ),
    ),
]


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: type(r).__name__)
def test_round_trip_every_type(record: MetadataRecord) -> None:
    data = encode_record(record)
    assert data[:2] == bytes([1, record.API_KEY])
    back, version = decode_record_versioned(data)
    assert back == record
    assert version == record.write_version()


def test_every_record_type_has_an_example() -> None:
    assert {type(r) for r in EXAMPLES} == set(RECORD_TYPES.values())


@pytest.mark.parametrize(
    "record",
    [r for r in EXAMPLES if r.MAX_VERSION > 0],
    ids=lambda r: type(r).__name__,
)
def test_every_version_round_trips_what_it_holds(record: MetadataRecord) -> None:
    for version in range(record.MAX_VERSION + 1):
        try:
            data = encode_record(record, version)
        except MetadataRecordError:
            # Strip what this version cannot hold, then it must encode.
            defaults = {
                f.name: f.default
                for f in fields(record)
                if "versions" in f.metadata and f.metadata["versions"][0] > version
            }
            record_v = type(record)(**{**_values(record), **defaults})
            data = encode_record(record_v, version)
        else:
            record_v = record
        assert decode_record_versioned(data) == (record_v, version)


def _values(record: MetadataRecord) -> dict[str, object]:
    return {f.name: getattr(record, f.name) for f in fields(record)}


def test_bad_input() -> None:
    good = encode_record(TopicRecord(name="a", topic_id=TOPIC_ID))
    with pytest.raises(MetadataRecordError, match="frame"):
        decode_record(b"\x02" + good[1:])
    with pytest.raises(MetadataRecordError, match="unknown metadata record type"):
        decode_record(b"\x01\x63\x00")
    with pytest.raises(MetadataRecordError, match="newer"):
        decode_record(b"\x01\x02\x05" + good[3:])
    with pytest.raises(MetadataRecordError, match="after the end"):
        decode_record(good + b"\x00")
    with pytest.raises(MetadataRecordError):
        decode_record(good[:-5])
    with pytest.raises(MetadataRecordError):
        encode_record(TopicRecord(name="a", topic_id=TOPIC_ID), 1)


ids = st.lists(st.integers(min_value=-1, max_value=2**31 - 1), max_size=6).map(tuple)
maybe_ids = st.none() | ids


@given(
    partition=st.integers(min_value=0, max_value=2**31 - 1),
    isr=maybe_ids,
    leader=st.integers(min_value=-2, max_value=2**31 - 1),
    replicas=maybe_ids,
    removing=maybe_ids,
    adding=maybe_ids,
    recovery=st.sampled_from([-1, 0, 1]),
    topic=st.uuids(),
)
def test_partition_change_round_trip(
    partition: int,
    isr: tuple[int, ...] | None,
    leader: int,
    replicas: tuple[int, ...] | None,
    removing: tuple[int, ...] | None,
    adding: tuple[int, ...] | None,
    recovery: int,
    topic: uuid.UUID,
) -> None:
    record = PartitionChangeRecord(
        partition_id=partition,
        topic_id=topic,
        isr=isr,
        leader=leader,
        replicas=replicas,
        removing_replicas=removing,
        adding_replicas=adding,
        leader_recovery_state=recovery,
    )
    for version in range(3):
        assert decode_record_versioned(encode_record(record, version)) == (record, version)


@given(
    name=st.text(min_size=0, max_size=300),
    value=st.none() | st.text(max_size=50),
    resource_type=st.sampled_from([2, 4]),
)
def test_config_record_round_trip(name: str, value: str | None, resource_type: int) -> None:
    record = ConfigRecord(resource_type=resource_type, resource_name="r", name=name, value=value)
    assert decode_record(encode_record(record)) == record
