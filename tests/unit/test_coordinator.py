"""The group coordinator on real storage, without a broker: replay, expiry, hashing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from metadata_node import MetadataNode

from strom.config import BrokerConfig
from strom.coordinator.coordinator import GroupCoordinator, OffsetToCommit
from strom.coordinator.offsets_topic import (
    OFFSETS_TOPIC,
    GroupRecord,
    MemberRecord,
    decode_group_value,
    group_value,
    java_string_hash,
    partition_for,
)
from strom.protocol.errors import ErrorCode


def test_group_partition_follows_java_string_hash() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogates


def test_group_metadata_value_round_trips() -> None:
    record = GroupRecord(
        "consumer",
        4,
        "range",
        "m1",
        1234,
        [
            MemberRecord("m1", "static-1", "client", "/127.0.0.1", 30000, 10000, b"sub", b"asg"),
            MemberRecord("m2", None, "client", "/127.0.0.1", 30000, 10000, b"", b""),
        ],
    )
    assert decode_group_value(group_value(record)) == record


def _coordinator(log_dir: Path, log: list[bytes]) -> tuple[MetadataNode, GroupCoordinator]:
    config = BrokerConfig(
        {
            "log.dirs": str(log_dir),
            "offsets.topic.num.partitions": "4",
            "offsets.retention.minutes": "1",
        }
    )
    metadata = MetadataNode(config, log)
    coordinator = GroupCoordinator(metadata.state, config)
    if metadata.topic(OFFSETS_TOPIC) is None:
        wanted = coordinator.offsets_topic_request(live_brokers=1)
        metadata.create_topic(OFFSETS_TOPIC, wanted.partitions, wanted.configs)
    return metadata, coordinator


def test_offsets_replay_after_restart_and_expire_for_empty_groups(tmp_path: Path) -> None:
    log: list[bytes] = []

    async def first_life() -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        controller.create_topic("t", 2)
        commits = [OffsetToCommit("t", 0, 5, 1, "m"), OffsetToCommit("t", 1, 9, -1, None)]
        assert coordinator.validate_commit("g", -1, "", None) == ErrorCode.none
        assert coordinator.commit_offsets("g", commits) == [ErrorCode.none, ErrorCode.none]
        coordinator.commit_offsets("g", [OffsetToCommit("t", 1, 10, -1, None)])
        coordinator.commit_offsets("other", [OffsetToCommit("t", 0, 1, -1, None)])
        assert coordinator.delete_group("other") == ErrorCode.none
        coordinator.stop()
        controller.shutdown()

    async def second_life() -> int:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        committed = coordinator.committed("g")
        assert {tp: (v.offset, v.leader_epoch, v.metadata) for tp, v in committed.items()} == {
            ("t", 0): (5, 1, "m"),
            ("t", 1): (10, -1, ""),
        }
        assert "other" not in coordinator.groups
        assert controller.topic(OFFSETS_TOPIC).configs["cleanup.policy"] == "compact"
        assert coordinator.expire_offsets(coordinator.now_ms()) == 0
        expired = coordinator.expire_offsets(coordinator.now_ms() + 61_000)
        assert "g" not in coordinator.groups
        coordinator.stop()
        controller.shutdown()
        return expired

    asyncio.run(first_life())
    assert asyncio.run(second_life()) == 2

    async def third_life() -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        assert coordinator.committed("g") == {}
        coordinator.stop()
        controller.shutdown()

    asyncio.run(third_life())


def test_retention_time_of_a_commit_is_its_expiry_across_a_restart(tmp_path: Path) -> None:
    """OffsetCommit v2-4's retention time: stored as Kafka stores it (value version 1)
    and honoured instead of offsets.retention.minutes (1 minute here)."""
    log: list[bytes] = []

    async def first_life() -> int:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        controller.create_topic("t", 2)
        coordinator.commit_offsets(
            "g",
            [
                OffsetToCommit("t", 0, 5, -1, "kept", retention_ms=10 * 60_000),
                OffsetToCommit("t", 1, 7, -1, "short", retention_ms=1_000),
            ],
        )
        now = coordinator.now_ms()
        coordinator.stop()
        controller.shutdown()
        return now

    async def second_life(committed_at: int) -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        stored = coordinator.committed("g")
        assert stored[("t", 0)].expire_timestamp == stored[("t", 0)].commit_timestamp + 600_000
        assert stored[("t", 0)].metadata == "kept"
        assert coordinator.expire_offsets(committed_at + 2_000) == 1  # only the 1 s one
        assert set(coordinator.committed("g")) == {("t", 0)}
        # Past the default minute it stays: its own ten minutes apply.
        assert coordinator.expire_offsets(committed_at + 5 * 60_000) == 0
        assert coordinator.expire_offsets(committed_at + 11 * 60_000) == 1
        coordinator.stop()
        controller.shutdown()

    committed_at = asyncio.run(first_life())
    asyncio.run(second_life(committed_at))


def test_offsets_of_a_deleted_topic_are_forgotten(tmp_path: Path) -> None:
    log: list[bytes] = []

    async def scenario() -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        controller.create_topic("gone", 1)
        controller.create_topic("kept", 1)
        coordinator.commit_offsets(
            "g", [OffsetToCommit("gone", 0, 5, -1, None), OffsetToCommit("kept", 0, 6, -1, None)]
        )
        controller.delete_topic("gone")
        coordinator.forget_topic("gone")
        assert list(coordinator.committed("g")) == [("kept", 0)]
        coordinator.stop()
        controller.shutdown()
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        assert list(coordinator.committed("g")) == [("kept", 0)]
        coordinator.stop()
        controller.shutdown()

    asyncio.run(scenario())
