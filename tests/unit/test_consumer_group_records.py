"""KIP-848 records of __consumer_offsets byte for byte, as Kafka's schemas lay them out."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator import consumer_group_records as cgr
from strom.coordinator.consumer_group_records import ConsumerGroupKey
from strom.coordinator.offsets_topic import OffsetsRecordError, decode_key

TOPIC = uuid.UUID(int=1)
OTHER = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def test_group_metadata_key_and_value_bytes() -> None:
    # int16 type 3, int16-length group; value: int16 version 0, int32 epoch, no tags.
    assert cgr.group_metadata_key("g") == bytes.fromhex("0003 0001 67")
    assert cgr.group_metadata_value(5) == bytes.fromhex("0000 00000005 00")
    assert cgr.target_assignment_metadata_key("g") == bytes.fromhex("0006 0001 67")


def test_member_metadata_bytes() -> None:
    assert cgr.member_metadata_key("g", "m") == bytes.fromhex("0005 0001 67 0001 6d")
    value = cgr.MemberMetadata(None, None, "c", "h", ["t"], None, 45000, "uniform")
    assert cgr.member_metadata_value(value) == bytes.fromhex(
        "0000"  # version 0
        "00"  # instance id: null compact string
        "00"  # rack id: null
        "0263"  # client id "c": length + 1, then bytes
        "0268"  # client host "h"
        "02 0274"  # subscribed topic names: one entry, "t"
        "00"  # regex: null
        "0000afc8"  # rebalance timeout 45000
        "08" + b"uniform".hex() + "00"  # server assignor, then no tagged fields
    )


def test_current_assignment_bytes() -> None:
    assert cgr.current_assignment_key("g", "m") == bytes.fromhex("0008 0001 67 0001 6d")
    value = cgr.CurrentAssignment(3, 2, cgr.MEMBER_STABLE, {TOPIC: {1, 0}}, {})
    assert cgr.current_assignment_value(value) == bytes.fromhex(
        "0000"
        "00000003"  # member epoch
        "00000002"  # previous member epoch
        "00"  # state STABLE
        "02"  # assigned: one topic
        "00000000000000000000000000000001"  # topic id
        "03 00000000 00000001"  # partitions 0, 1
        "00"  # the topic's tagged fields
        "01"  # pending revocation: empty
        "00"
    )


def test_round_trips() -> None:
    metadata = cgr.MemberMetadata(
        "static-1", "rack-a", "client", "/127.0.0.1", ["a", "b"], "x.*", 30000, "range"
    )
    assert cgr.decode_member_metadata_value(cgr.member_metadata_value(metadata)) == metadata
    bare = cgr.MemberMetadata(None, None, "", "", [], None, -1, None)
    assert cgr.decode_member_metadata_value(cgr.member_metadata_value(bare)) == bare
    assert cgr.decode_epoch_value(cgr.group_metadata_value(7)) == 7
    assert cgr.decode_epoch_value(cgr.target_assignment_metadata_value(6)) == 6
    target = {TOPIC: {0, 2, 4}, OTHER: {1}}
    assert cgr.decode_target_assignment_member_value(
        cgr.target_assignment_member_value(target)
    ) == (target)
    assert cgr.decode_target_assignment_member_value(cgr.target_assignment_member_value({})) == {}
    current = cgr.CurrentAssignment(
        9, 8, cgr.MEMBER_UNREVOKED_PARTITIONS, {TOPIC: {0}}, {OTHER: {3, 300}}
    )
    assert cgr.decode_current_assignment_value(cgr.current_assignment_value(current)) == current
    keys = {
        cgr.group_metadata_key("g"): ConsumerGroupKey(cgr.GROUP_METADATA, "g"),
        cgr.partition_metadata_key("g"): ConsumerGroupKey(cgr.PARTITION_METADATA, "g"),
        cgr.member_metadata_key("g", "m"): ConsumerGroupKey(cgr.MEMBER_METADATA, "g", "m"),
        cgr.target_assignment_metadata_key("g"): ConsumerGroupKey(
            cgr.TARGET_ASSIGNMENT_METADATA, "g"
        ),
        cgr.target_assignment_member_key("g", "m"): ConsumerGroupKey(
            cgr.TARGET_ASSIGNMENT_MEMBER, "g", "m"
        ),
        cgr.current_assignment_key("g", "m"): ConsumerGroupKey(
            cgr.CURRENT_MEMBER_ASSIGNMENT, "g", "m"
        ),
    }
    for raw, key in keys.items():
        assert cgr.decode_key(raw) == key
        assert decode_key(raw) is None  # the classic decoder leaves them alone


def test_tagged_fields_kafka_may_add_are_skipped() -> None:
    # ConsumerGroupMetadataValue with MetadataHash (tag 0, 8 bytes) as Kafka 4.1 writes it.
    value = bytes.fromhex("0000 00000004 01 00 08 0102030405060708")
    assert cgr.decode_epoch_value(value) == 4
    with pytest.raises(OffsetsRecordError):
        cgr.decode_epoch_value(bytes.fromhex("0001 00000004 00"))


def test_group_tombstones_in_kafka_order() -> None:
    keys = [key for key, value in cgr.group_tombstones("g", ["m"]) if value is None]
    assert [cgr.decode_key(k) for k in keys] == [
        ConsumerGroupKey(cgr.CURRENT_MEMBER_ASSIGNMENT, "g", "m"),
        ConsumerGroupKey(cgr.TARGET_ASSIGNMENT_MEMBER, "g", "m"),
        ConsumerGroupKey(cgr.MEMBER_METADATA, "g", "m"),
        ConsumerGroupKey(cgr.TARGET_ASSIGNMENT_METADATA, "g"),
        ConsumerGroupKey(cgr.PARTITION_METADATA, "g"),
        ConsumerGroupKey(cgr.GROUP_METADATA, "g"),
    ]
