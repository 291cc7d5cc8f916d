"""The group coordinator on real storage, without a broker: replay, expiry, hashing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from metadata_node import MetadataNode

from strom.config import BrokerConfig
from strom.coordinator.consumer_group import HeartbeatRequest
from strom.coordinator.consumer_group_records import partition_metadata_key
from strom.coordinator.coordinator import GroupCoordinator, OffsetToCommit
from strom.coordinator.internal_log import replay_records
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


def _coordinator(
    log_dir: Path, log: list[bytes], extra: dict[str, str] | None = None
) -> tuple[MetadataNode, GroupCoordinator]:
    config = BrokerConfig(
        {
            "log.dirs": str(log_dir),
            "offsets.topic.num.partitions": "4",
            "offsets.retention.minutes": "1",
            **(extra or {}),
        }
    )
    metadata = MetadataNode(config, log)
    coordinator = GroupCoordinator(metadata.state, config, metadata.append_here)
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


def test_commit_timestamp_of_offset_commit_v1_is_the_commit_time(tmp_path: Path) -> None:
    """OffsetCommit v1's per-partition commit timestamp is stored as the commit time
    (Kafka's coordinator does the same), so the default retention counts from it."""
    log: list[bytes] = []

    async def run() -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        controller.create_topic("t", 2)
        now = coordinator.now_ms()
        coordinator.commit_offsets(
            "g",
            [
                OffsetToCommit("t", 0, 5, -1, None, commit_timestamp_ms=now - 30_000),
                OffsetToCommit("t", 1, 7, -1, None),
            ],
        )
        stored = coordinator.committed("g")
        assert stored[("t", 0)].commit_timestamp == now - 30_000
        assert stored[("t", 1)].commit_timestamp >= now
        # offsets.retention.minutes is 1 here: the back-dated one expires first.
        assert coordinator.expire_offsets(now + 45_000) == 1
        assert set(coordinator.committed("g")) == {("t", 1)}
        coordinator.stop()
        controller.shutdown()

    asyncio.run(run())


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


def _heartbeat(
    member_id: str, epoch: int, owned: dict | None = None, topics: list[str] | None = None
) -> HeartbeatRequest:
    return HeartbeatRequest(
        member_id=member_id,
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=topics,
        subscribed_topic_regex=None,
        server_assignor=None,
        owned=owned,
        client_id="client",
        client_host="/127.0.0.1",
    )


def _offsets_records(controller: MetadataNode) -> list[tuple[bytes, bytes | None]]:
    return [
        (record.key, record.value)
        for partition in range(4)
        for _, record in replay_records(controller.state, OFFSETS_TOPIC, partition)
        if record.key is not None
    ]


def test_kip848_group_survives_a_restart_and_writes_only_changes(tmp_path: Path) -> None:
    """A KIP-848 group's epoch, members, target and current assignments come back from
    __consumer_offsets; a heartbeat that changes nothing writes nothing; a member that
    leaves leaves tombstones, and a deleted group leaves none of its records live."""
    log: list[bytes] = []

    async def first_life() -> tuple[dict, int]:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        controller.create_topic("t", 4)
        topic_id = controller.state.topic("t").topic_id
        group = coordinator.consumer_group("g", create=True)
        a = group.heartbeat(_heartbeat("a", 0, {}, ["t"]))
        b = group.heartbeat(_heartbeat("b", 0, {}, ["t"]))
        # "a" gives up what "b" is to get, then both reach the group epoch.
        a = group.heartbeat(_heartbeat("a", a.member_epoch, a.assignment))
        a = group.heartbeat(_heartbeat("a", a.member_epoch, a.assignment or {}))
        b = group.heartbeat(_heartbeat("b", b.member_epoch, {}))
        assert group.state_name == "Stable", group.state_name
        epoch = group.group_epoch
        assert epoch == group.assignment_epoch == a.member_epoch == b.member_epoch
        written = len(_offsets_records(controller))
        group.heartbeat(_heartbeat("a", epoch, None))
        group.heartbeat(_heartbeat("b", epoch, None))
        assert len(_offsets_records(controller)) == written  # nothing changed
        # A ConsumerGroupPartitionMetadata record, as Kafka before 4.1 writes them (one
        # topic: id, name, partition count): read past on load.
        partition_metadata = (
            bytes.fromhex("0000 02") + topic_id.bytes + bytes.fromhex("02 74 00000004 00 00")
        )
        coordinator._append("g", [(partition_metadata_key("g"), partition_metadata)])
        state = {
            mid: (m.epoch, m.previous_epoch, m.assigned, group.target[mid])
            for mid, m in group.members.items()
        }
        assert set().union(*(s[2][topic_id] for s in state.values())) == {0, 1, 2, 3}
        coordinator.stop()
        controller.shutdown()
        return state, epoch

    async def second_life(before: dict, epoch: int) -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        group = coordinator.consumer_group("g", create=False)
        assert group is not None
        assert (group.group_epoch, group.assignment_epoch) == (epoch, epoch)
        assert group.state_name == "Stable"
        after = {
            mid: (m.epoch, m.previous_epoch, m.assigned, group.target[mid])
            for mid, m in group.members.items()
        }
        assert after == before
        assert group.members["a"].client_host == "/127.0.0.1"
        assert group.members["a"].subscribed_topic_names == ["t"]
        assert all(m.session_timer is not None for m in group.members.values())
        # The members carry on with their epochs: no fencing, no new assignment.
        result = group.heartbeat(_heartbeat("a", epoch, None))
        assert (result.error, result.member_epoch) == (ErrorCode.none, epoch)
        assert result.assignment is None
        assert group.group_epoch == epoch
        # Both leave: the group is stored empty at a new epoch.
        group.heartbeat(_heartbeat("a", -1))
        group.heartbeat(_heartbeat("b", -1))
        assert group.is_empty() and group.group_epoch == epoch + 2
        coordinator.stop()
        controller.shutdown()

    async def third_life(epoch: int) -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        group = coordinator.consumer_group("g", create=False)
        assert group is not None and group.is_empty()
        assert (group.group_epoch, group.state_name) == (epoch + 2, "Empty")
        assert coordinator.delete_group("g") == ErrorCode.none
        coordinator.stop()
        controller.shutdown()

    async def fourth_life() -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        assert not coordinator.group_exists("g")
        live: dict[bytes, bytes | None] = {}
        for key, value in _offsets_records(controller):
            live[key] = value
        assert [k for k, v in live.items() if v is not None] == []
        coordinator.stop()
        controller.shutdown()

    before, epoch = asyncio.run(first_life())
    asyncio.run(second_life(before, epoch))
    asyncio.run(third_life(epoch))
    asyncio.run(fourth_life())


def test_kip848_expired_member_and_a_group_turned_classic_leave_tombstones(tmp_path: Path) -> None:
    log: list[bytes] = []

    async def first_life() -> None:
        fast = {"group.consumer.session.timeout.ms": "50"}
        controller, coordinator = _coordinator(tmp_path, log, fast)
        coordinator.start()
        controller.create_topic("t", 2)
        group = coordinator.consumer_group("g", create=True)
        group.heartbeat(_heartbeat("a", 0, {}, ["t"]))
        # no more heartbeats: the session ends (50 ms; a loaded machine may take longer)
        deadline = asyncio.get_running_loop().time() + 30
        while not group.is_empty():
            assert asyncio.get_running_loop().time() < deadline, "the session never ended"
            await asyncio.sleep(0.01)
        coordinator.stop()
        controller.shutdown()

    async def second_life() -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        group = coordinator.consumer_group("g", create=False)
        assert group is not None and group.is_empty()
        assert group.group_epoch == 3  # joined, its topic seen, removed
        assert coordinator.classic_group("g", create=True) is not None
        coordinator.stop()
        controller.shutdown()

    async def third_life() -> None:
        controller, coordinator = _coordinator(tmp_path, log)
        coordinator.start()
        assert not coordinator.group_exists("g")
        live: dict[bytes, bytes | None] = dict(_offsets_records(controller))
        assert [k for k, v in live.items() if v is not None] == []
        coordinator.stop()
        controller.shutdown()

    asyncio.run(first_life())
    asyncio.run(second_life())
    asyncio.run(third_life())
