"""The share group records of __consumer_offsets (Kafka's layouts, keys 9-15) read back
as written, and keys of other kinds left alone."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator import share_group_records as sgr
from strom.coordinator.offsets_topic import OffsetsRecordError
from strom.coordinator.share_group_records import ShareGroupKey

TOPIC = uuid.UUID(int=7)


def test_keys_read_back() -> None:
    for key in (
        ShareGroupKey(sgr.GROUP_METADATA, "g"),
        ShareGroupKey(sgr.TARGET_ASSIGNMENT_METADATA, "g"),
        ShareGroupKey(sgr.MEMBER_METADATA, "g", "m"),
        ShareGroupKey(sgr.TARGET_ASSIGNMENT_MEMBER, "g", "m"),
        ShareGroupKey(sgr.CURRENT_MEMBER_ASSIGNMENT, "g", "m"),
    ):
        assert sgr.decode_key(sgr.key_bytes(key)) == key
    # Version 11's key bytes as Kafka writes them: int16 type, int16-length group id.
    assert sgr.key_bytes(ShareGroupKey(sgr.GROUP_METADATA, "ab")) == b"\x00\x0b\x00\x02ab"
    assert sgr.decode_key(b"\x00\x03\x00\x01g") is None  # a consumer group's


def test_values_read_back() -> None:
    assert sgr.decode_epoch_value(sgr.epoch_value(42)) == 42
    metadata = sgr.MemberMetadata("rack-a", "client", "/10.0.0.1", ["t1", "t2"])
    assert sgr.decode_member_metadata_value(sgr.member_metadata_value(metadata)) == metadata
    partitions = {TOPIC: {0, 2}}
    assert (
        sgr.decode_target_assignment_member_value(sgr.target_assignment_member_value(partitions))
        == partitions
    )
    current = sgr.CurrentAssignment(5, 4, {TOPIC: {1}})
    assert sgr.decode_current_assignment_value(sgr.current_assignment_value(current)) == current


def test_an_unknown_value_version_is_an_error() -> None:
    with pytest.raises(OffsetsRecordError):
        sgr.decode_epoch_value(b"\x00\x01\x00\x00\x00\x01\x00")
