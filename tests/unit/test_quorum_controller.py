"""The active controller: registration, heartbeats, fencing, topics, configs, elections."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from strom.cluster.image import Endpoint, MetadataImage
from strom.cluster.partition_change import Election, PartitionChangeBuilder
from strom.cluster.quorum_controller import (
    ConfigOp,
    ControllerConfig,
    ControllerError,
    ElectionType,
    NewTopic,
    QuorumController,
    bootstrap_records,
    records_from_legacy,
)
from strom.cluster.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    decode_record,
    encode_record,
)
from strom.protocol.errors import ErrorCode

MV = 25
FEATURES = {"metadata.version": (7, 25)}
LISTENERS = [Endpoint("PLAINTEXT", "localhost", 9092, 0)]
TIMEOUT = 9000


def new_controller(seed: int = 1, **config: object) -> QuorumController:
    image = MetadataImage()
    image.apply_all(bootstrap_records(MV), 0)
    return QuorumController(
        image,
        ControllerConfig(cluster_id="c1", **config),  # type: ignore[arg-type]
        rng=random.Random(seed),
    )


def join(qc: QuorumController, broker_id: int, rack: str | None = None, now_ms: int = 0) -> int:
    """Register a broker and heartbeat it until it is unfenced; its epoch."""
    result = qc.register_broker(
        broker_id,
        uuid.UUID(int=broker_id + 1000),
        listeners=LISTENERS,
        rack=rack,
        features=FEATURES,
        cluster_id="c1",
        now_ms=now_ms,
    )
    epoch = result.response
    reply = qc.broker_heartbeat(broker_id, epoch, qc.next_offset, now_ms=now_ms).response
    assert not reply.is_fenced and reply.is_caught_up
    return epoch


def cluster(n: int, racks: list[str | None] | None = None, seed: int = 1) -> QuorumController:
    qc = new_controller(seed)
    for i in range(n):
        join(qc, i, racks[i] if racks else None)
    return qc


def check_invariants(image: MetadataImage) -> None:
    for _topic, _index, p in image.all_partitions():
        assert len(set(p.replicas)) == len(p.replicas)
        assert set(p.isr) <= set(p.replicas)
        assert p.isr, "the ISR never becomes empty"
        assert len(p.directories) == len(p.replicas)
        if p.leader != -1:
            assert p.leader in p.isr
            assert image.is_unfenced(p.leader)


def replayed(qc: QuorumController, start: MetadataImage, records: list) -> MetadataImage:
    image = start.copy()
    image.apply_all([decode_record(encode_record(r)) for r in records], start.last_offset + 1)
    return image


# Registration and heartbeats -----------------------------------------------------------


def test_register_new_broker_starts_fenced_with_epoch_at_its_offset() -> None:
    qc = new_controller()
    offset = qc.next_offset
    result = qc.register_broker(
        1, uuid.uuid4(), listeners=LISTENERS, rack="r", features=FEATURES, now_ms=0
    )
    assert result.response == offset
    (record,) = result.records
    assert isinstance(record, RegisterBrokerRecord) and record.fenced
    broker = qc.image.broker(1)
    assert broker is not None and broker.fenced and broker.epoch == offset
    assert broker.registration_offset == offset


def test_heartbeat_unfences_once_caught_up() -> None:
    qc = new_controller()
    epoch = qc.register_broker(
        1, uuid.uuid4(), listeners=LISTENERS, features=FEATURES, now_ms=0
    ).response
    behind = qc.broker_heartbeat(1, epoch, epoch - 1, now_ms=10)
    assert behind.records == ()
    assert behind.response.is_fenced and not behind.response.is_caught_up
    caught_up = qc.broker_heartbeat(1, epoch, epoch, now_ms=20)
    assert caught_up.response.is_caught_up and not caught_up.response.is_fenced
    assert caught_up.records == (
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, fenced=-1),
    )
    assert qc.image.is_unfenced(1)
    # want_fence keeps a fenced broker fenced.
    qc2 = new_controller()
    e2 = qc2.register_broker(
        1, uuid.uuid4(), listeners=LISTENERS, features=FEATURES, now_ms=0
    ).response
    assert qc2.broker_heartbeat(1, e2, e2, now_ms=1, want_fence=True).response.is_fenced


def test_heartbeat_errors() -> None:
    qc = cluster(1)
    with pytest.raises(ControllerError) as exc:
        qc.broker_heartbeat(5, 1, 0, now_ms=0)
    assert exc.value.code == ErrorCode.broker_id_not_registered
    with pytest.raises(ControllerError) as exc:
        qc.broker_heartbeat(0, 12345, 0, now_ms=0)
    assert exc.value.code == ErrorCode.stale_broker_epoch


def test_registration_rules() -> None:
    qc = new_controller()
    join(qc, 1, now_ms=0)
    first = qc.image.broker(1)
    assert first is not None
    # A live broker with another incarnation is refused within its session.
    with pytest.raises(ControllerError) as exc:
        qc.register_broker(1, uuid.uuid4(), listeners=LISTENERS, features=FEATURES, now_ms=5000)
    assert exc.value.code == ErrorCode.duplicate_broker_registration
    # The same incarnation amends: same epoch, still unfenced.
    amended = qc.register_broker(
        1, first.incarnation_id, listeners=LISTENERS, rack="x", features=FEATURES, now_ms=5000
    )
    assert amended.response == first.epoch
    assert qc.image.broker(1).rack == "x" and not qc.image.broker(1).fenced  # type: ignore[union-attr]
    # After the session ran out, a new incarnation replaces the old one, fenced, new epoch.
    again = qc.register_broker(
        1, uuid.uuid4(), listeners=LISTENERS, features=FEATURES, now_ms=5000 + TIMEOUT + 1
    )
    assert again.response > first.epoch
    assert qc.image.broker(1).fenced  # type: ignore[union-attr]
    with pytest.raises(ControllerError) as exc:
        qc.register_broker(
            2, uuid.uuid4(), listeners=LISTENERS, features=FEATURES, cluster_id="other", now_ms=0
        )
    assert exc.value.code == ErrorCode.inconsistent_cluster_id
    with pytest.raises(ControllerError) as exc:
        qc.register_broker(2, uuid.uuid4(), listeners=LISTENERS, features={}, now_ms=0)
    assert exc.value.code == ErrorCode.unsupported_version
    assert "metadata.version" in (exc.value.message or "")


def test_reregistration_of_a_live_leader_moves_leadership() -> None:
    qc = cluster(2)
    qc.create_topics([NewTopic("t", 2, 2)])
    leader = qc.image.partition("t", 0).leader  # type: ignore[union-attr]
    result = qc.register_broker(
        leader, uuid.uuid4(), listeners=LISTENERS, features=FEATURES, now_ms=TIMEOUT + 1
    )
    assert isinstance(result.records[-1], RegisterBrokerRecord)
    for _t, _i, p in qc.image.all_partitions():
        assert p.leader != leader
    check_invariants(qc.image)


# Fencing --------------------------------------------------------------------------------


def test_fence_expired_shrinks_isr_and_moves_leaders() -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("t", 6, 3), NewTopic("solo", 3, 1)])
    before = qc.image.copy()
    # Brokers 1 and 2 keep heartbeating; broker 0 goes silent.
    for b in (1, 2):
        qc.broker_heartbeat(b, qc.image.broker(b).epoch, qc.next_offset, now_ms=8000)  # type: ignore[union-attr]
    assert qc.fence_expired(TIMEOUT).response == []
    result = qc.fence_expired(TIMEOUT + 1)
    assert result.response == [0]
    assert isinstance(result.records[-1], BrokerRegistrationChangeRecord)
    assert result.records[-1].fenced == 1
    image = qc.image
    assert image.broker(0).fenced  # type: ignore[union-attr]
    for _t, _i, p in image.all_partitions():
        assert p.leader != 0
    t = image.topic("t")
    assert t is not None
    for index, p in t.partitions.items():
        assert 0 not in p.isr and len(p.isr) == 2
        old = before.partition("t", index)
        assert old is not None
        if old.leader == 0:
            assert p.leader_epoch == old.leader_epoch + 1
    solo = image.topic("solo")
    assert solo is not None
    for p in solo.partitions.values():
        if p.replicas == (0,):
            assert p.isr == (0,) and p.leader == -1  # the ISR never empties
    check_invariants(image)
    assert replayed(qc, before, list(result.records)) == image
    # Coming back: unfencing makes it leader of its leaderless partitions again.
    epoch = image.broker(0).epoch  # type: ignore[union-attr]
    back = qc.broker_heartbeat(0, epoch, qc.next_offset, now_ms=TIMEOUT + 2)
    assert not back.response.is_fenced
    for p in qc.image.topic("solo").partitions.values():  # type: ignore[union-attr]
        if p.replicas == (0,):
            assert p.leader == 0
    check_invariants(qc.image)


def test_controlled_shutdown() -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("t", 3, 3)])
    epoch = qc.image.broker(0).epoch  # type: ignore[union-attr]
    first = qc.broker_heartbeat(0, epoch, qc.next_offset, now_ms=1, want_shutdown=True)
    assert first.response.in_controlled_shutdown and not first.response.should_shut_down
    assert qc.image.partitions_led_by(0) == []
    assert qc.image.broker(0).in_controlled_shutdown  # type: ignore[union-attr]
    # The others have not caught up with the leader moves yet.
    for b in (1, 2):
        qc.broker_heartbeat(b, qc.image.broker(b).epoch, 0, now_ms=2)  # type: ignore[union-attr]
    waiting = qc.broker_heartbeat(0, epoch, qc.next_offset, now_ms=3, want_shutdown=True)
    assert not waiting.response.should_shut_down
    for b in (1, 2):
        qc.broker_heartbeat(b, qc.image.broker(b).epoch, qc.next_offset, now_ms=4)  # type: ignore[union-attr]
    done = qc.broker_heartbeat(0, epoch, qc.next_offset, now_ms=5, want_shutdown=True)
    assert done.response.should_shut_down and done.response.is_fenced
    assert qc.image.broker(0).fenced  # type: ignore[union-attr]
    check_invariants(qc.image)


def test_shutdown_without_leaderships_is_immediate() -> None:
    qc = cluster(2)
    epoch = qc.image.broker(1).epoch  # type: ignore[union-attr]
    reply = qc.broker_heartbeat(1, epoch, qc.next_offset, now_ms=1, want_shutdown=True)
    assert reply.response.should_shut_down and reply.response.is_fenced


def test_unregister_broker() -> None:
    qc = cluster(2)
    qc.create_topics([NewTopic("t", 2, 2)])
    result = qc.unregister_broker(1)
    assert qc.image.broker(1) is None
    for _t, _i, p in qc.image.all_partitions():
        assert p.isr == (0,) and p.leader == 0
    assert any(isinstance(r, PartitionChangeRecord) for r in result.records)
    with pytest.raises(ControllerError) as exc:
        qc.unregister_broker(1)
    assert exc.value.code == ErrorCode.broker_id_not_registered


# Topics ---------------------------------------------------------------------------------


def test_create_topic_records_and_result() -> None:
    qc = cluster(3)
    start = qc.next_offset
    result = qc.create_topics([NewTopic("orders", 2, 3, configs={"retention.ms": "1000"})])
    (res,) = result.response
    assert res.error_code == ErrorCode.none
    assert (res.num_partitions, res.replication_factor) == (2, 3)
    assert res.configs == {"retention.ms": "1000"}
    kinds = [type(r) for r in result.records]
    assert kinds == [TopicRecord, ConfigRecord, PartitionRecord, PartitionRecord]
    assert qc.next_offset == start + 4
    topic = qc.image.topic("orders")
    assert topic is not None and topic.topic_id == res.topic_id
    for p in topic.partitions.values():
        assert p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    assert qc.image.topic_configs("orders") == {"retention.ms": "1000"}


def test_create_topic_defaults_and_validate_only() -> None:
    qc = new_controller(num_partitions=4, default_replication_factor=2)
    join(qc, 0)
    join(qc, 1)
    dry = qc.create_topics([NewTopic("x")], validate_only=True)
    assert dry.records == () and qc.image.topic("x") is None
    assert dry.response[0].num_partitions == 4 and dry.response[0].replication_factor == 2
    qc.create_topics([NewTopic("x")])
    assert len(qc.image.topic("x").partitions) == 4  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        (NewTopic("bad name!"), ErrorCode.invalid_topic_exception, "illegal"),
        (NewTopic(""), ErrorCode.invalid_topic_exception, "empty"),
        (NewTopic("taken"), ErrorCode.topic_already_exists, "Topic 'taken' already exists."),
        (NewTopic("a.b"), ErrorCode.invalid_topic_exception, "collides with existing topic: a_b"),
        (NewTopic("t", 0), ErrorCode.invalid_partitions, "invalid non-positive"),
        (NewTopic("t", 1, 0), ErrorCode.invalid_replication_factor, "larger than 0"),
        (
            NewTopic("t", 1, 4),
            ErrorCode.invalid_replication_factor,
            "Unable to replicate the partition 4 time(s): The target replication factor of 4 "
            "cannot be reached because only 3 broker(s) are registered.",
        ),
        (NewTopic("t", configs={"retention.ms": "x"}), ErrorCode.invalid_config, "retention"),
        (NewTopic("t", configs={"nope": "1"}), ErrorCode.invalid_config, "nope"),
        (NewTopic("t", assignments={0: [0, 0]}), ErrorCode.invalid_replica_assignment, "more"),
        (NewTopic("t", assignments={0: [7]}), ErrorCode.invalid_replica_assignment, "7"),
        (NewTopic("t", assignments={1: [0]}), ErrorCode.invalid_replica_assignment, "0-based"),
        (
            NewTopic("t", assignments={0: [0], 1: [0, 1]}),
            ErrorCode.invalid_replica_assignment,
            "consistent",
        ),
        (NewTopic("t", 2, assignments={0: [0]}), ErrorCode.invalid_request, "numPartitions"),
    ],
)
def test_create_topic_errors(topic: NewTopic, code: ErrorCode, message: str) -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("taken"), NewTopic("a_b")])
    before = qc.next_offset
    result = qc.create_topics([topic, NewTopic("fine")])
    assert result.response[0].error_code == code
    assert message in (result.response[0].error_message or "")
    assert result.response[1].error_code == ErrorCode.none
    assert qc.next_offset == before + 2  # only "fine" was written


def test_create_topics_duplicates_and_collisions_within_a_request() -> None:
    qc = cluster(1)
    result = qc.create_topics([NewTopic("d"), NewTopic("d"), NewTopic("x.y"), NewTopic("x_y")])
    codes = [r.error_code for r in result.response]
    assert codes == [
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
        ErrorCode.none,
        ErrorCode.invalid_topic_exception,
    ]


def test_manual_assignment() -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("m", assignments={0: [2, 1], 1: [0, 2]})])
    m = qc.image.topic("m")
    assert m is not None
    assert m.partitions[0].replicas == (2, 1) and m.partitions[0].leader == 2
    assert m.partitions[1].replicas == (0, 2) and m.partitions[1].leader == 0


def test_spread_over_three_brokers() -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("s", 6, 3)])
    topic = qc.image.topic("s")
    assert topic is not None
    replicas = Counter(b for p in topic.partitions.values() for b in p.replicas)
    leaders = Counter(p.leader for p in topic.partitions.values())
    assert replicas == {0: 6, 1: 6, 2: 6}
    assert leaders == {0: 2, 1: 2, 2: 2}


@pytest.mark.parametrize("seed", range(5))
def test_rack_aware_placement(seed: int) -> None:
    qc = cluster(5, ["a", "a", "b", "b", "c"], seed=seed)
    qc.create_topics([NewTopic("r2", 12, 2), NewTopic("r3", 12, 3)])
    racks = {b.broker_id: b.rack for b in qc.image.brokers.values()}
    for name, rf in (("r2", 2), ("r3", 3)):
        topic = qc.image.topic(name)
        assert topic is not None
        for p in topic.partitions.values():
            assert len({racks[b] for b in p.replicas}) == rf
    # Leaders rotate over racks first (as Kafka's striped placer does), then over the
    # brokers of a rack: every broker leads, and no rack is left far behind.
    leaders = Counter(p.leader for _t, _i, p in qc.image.all_partitions())
    assert set(leaders) == {0, 1, 2, 3, 4}
    by_rack = Counter(racks[b] for b in leaders.elements())
    assert min(by_rack.values()) >= 5


def test_placement_two_racks_of_two() -> None:
    qc = cluster(4, ["a", "a", "b", "b"])
    qc.create_topics([NewTopic("t", 8, 2)])
    racks = {b.broker_id: b.rack for b in qc.image.brokers.values()}
    for _t, _i, p in qc.image.all_partitions():
        assert {racks[b] for b in p.replicas} == {"a", "b"}
    assert Counter(p.leader for _t, _i, p in qc.image.all_partitions()) == {0: 2, 1: 2, 2: 2, 3: 2}


def test_placement_is_deterministic_for_a_seed() -> None:
    def assignment(seed: int) -> list[tuple[int, ...]]:
        qc = cluster(4, seed=seed)
        qc.create_topics([NewTopic("t", 10, 2)])
        return [p.replicas for _t, _i, p in qc.image.all_partitions()]

    assert assignment(7) == assignment(7)


def test_fenced_brokers_are_not_placed_on() -> None:
    qc = cluster(3)
    qc.broker_heartbeat(2, qc.image.broker(2).epoch, 0, now_ms=1, want_fence=True)  # type: ignore[union-attr]
    result = qc.create_topics([NewTopic("t", 3, 3), NewTopic("u", 4, 2)])
    assert result.response[0].error_code == ErrorCode.invalid_replication_factor
    assert "only 2 broker(s)" in (result.response[0].error_message or "")
    for p in qc.image.topic("u").partitions.values():  # type: ignore[union-attr]
        assert 2 not in p.replicas


def test_delete_topics() -> None:
    qc = cluster(1)
    created = qc.create_topics([NewTopic("a", configs={"retention.ms": "5"}), NewTopic("b")])
    b_id = created.response[1].topic_id
    assert b_id is not None
    missing = uuid.uuid4()
    result = qc.delete_topics(["a", "zz"], [b_id, missing])
    codes = [(r.name, r.error_code) for r in result.response]
    assert codes == [
        ("a", ErrorCode.none),
        ("zz", ErrorCode.unknown_topic_or_partition),
        ("b", ErrorCode.none),
        (None, ErrorCode.unknown_topic_id),
    ]
    assert qc.image.topics == {} and qc.image.topic_configs("a") == {}
    disabled = new_controller(delete_topic_enable=False)
    join(disabled, 0)
    disabled.create_topics([NewTopic("a")])
    res = disabled.delete_topics(["a"])
    assert res.response[0].error_code == ErrorCode.topic_deletion_disabled and res.records == ()


def test_create_partitions() -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("t", 2, 2)])
    qc.create_partitions("t", 5)
    topic = qc.image.topic("t")
    assert topic is not None and sorted(topic.partitions) == [0, 1, 2, 3, 4]
    assert all(len(p.replicas) == 2 for p in topic.partitions.values())
    qc.create_partitions("t", 6, [[2, 0]])
    assert topic.partitions[5].replicas == (2, 0)
    dry = qc.create_partitions("t", 7, validate_only=True)
    assert dry.records == () and len(topic.partitions) == 6
    for count, assignments, code in [
        (6, None, ErrorCode.invalid_partitions),
        (3, None, ErrorCode.invalid_partitions),
        (8, [[0, 1]], ErrorCode.invalid_replica_assignment),
        (7, [[0]], ErrorCode.invalid_replica_assignment),
    ]:
        with pytest.raises(ControllerError) as exc:
            qc.create_partitions("t", count, assignments)
        assert exc.value.code == code
    with pytest.raises(ControllerError) as exc:
        qc.create_partitions("nope", 3)
    assert exc.value.code == ErrorCode.unknown_topic_or_partition


# Configs ------------------------------------------------------------------------------


def test_incremental_alter_topic_configs() -> None:
    qc = cluster(1)
    qc.create_topics([NewTopic("t", configs={"retention.ms": "5"})])
    result = qc.incremental_alter_configs(
        2,
        "t",
        [
            ("retention.ms", ConfigOp.DELETE, None),
            ("segment.bytes", ConfigOp.SET, "1048576"),
            ("cleanup.policy", ConfigOp.APPEND, "compact"),
        ],
    )
    assert qc.image.topic_configs("t") == {
        "segment.bytes": "1048576",
        "cleanup.policy": "delete,compact",
    }
    assert ConfigRecord(resource_type=2, resource_name="t", name="retention.ms") in result.records
    qc.incremental_alter_configs(2, "t", [("cleanup.policy", ConfigOp.SUBTRACT, "delete")])
    assert qc.image.topic_configs("t")["cleanup.policy"] == "compact"
    for changes, code in [
        ([("retention.ms", ConfigOp.APPEND, "1")], ErrorCode.invalid_config),
        ([("retention.ms", ConfigOp.SET, "abc")], ErrorCode.invalid_config),
        ([("nope", ConfigOp.SET, "1")], ErrorCode.invalid_config),
        ([("retention.ms", 9, "1")], ErrorCode.invalid_request),
    ]:
        with pytest.raises(ControllerError) as exc:
            qc.incremental_alter_configs(2, "t", changes)
        assert exc.value.code == code
    with pytest.raises(ControllerError) as exc:
        qc.incremental_alter_configs(2, "missing", [])
    assert exc.value.code == ErrorCode.unknown_topic_or_partition
    dry = qc.incremental_alter_configs(
        2, "t", [("retention.ms", ConfigOp.SET, "7")], validate_only=True
    )
    assert dry.records == () and "retention.ms" not in qc.image.topic_configs("t")


def test_alter_configs_replaces_and_broker_configs() -> None:
    qc = cluster(1)
    qc.create_topics([NewTopic("t", configs={"retention.ms": "5", "segment.ms": "100"})])
    qc.alter_configs(2, "t", {"retention.ms": "6"})
    assert qc.image.topic_configs("t") == {"retention.ms": "6"}
    qc.incremental_alter_configs(4, "", [("log.retention.ms", ConfigOp.SET, "1000")])
    qc.incremental_alter_configs(4, "0", [("log.cleanup.policy", ConfigOp.APPEND, "compact")])
    assert qc.image.broker_configs(None) == {"log.retention.ms": "1000"}
    assert qc.image.broker_configs(0) == {"log.cleanup.policy": "delete,compact"}
    for name, key in [("", "listeners"), ("x", "log.retention.ms")]:
        with pytest.raises(ControllerError):
            qc.incremental_alter_configs(4, name, [(key, ConfigOp.SET, "1")])
    with pytest.raises(ControllerError) as exc:
        qc.alter_configs(9, "x", {})
    assert exc.value.code == ErrorCode.invalid_request


# Producer ids, elections -----------------------------------------------------------------


def test_allocate_producer_ids() -> None:
    qc = cluster(2)
    epoch = qc.image.broker(1).epoch  # type: ignore[union-attr]
    first = qc.allocate_producer_ids(1, epoch)
    assert first.response == (0, 1000)
    assert first.records == (
        ProducerIdsRecord(broker_id=1, broker_epoch=epoch, next_producer_id=1000),
    )
    assert qc.allocate_producer_ids(1, epoch).response == (1000, 1000)
    assert qc.image.next_producer_id == 2000
    with pytest.raises(ControllerError) as exc:
        qc.allocate_producer_ids(1, epoch + 100)
    assert exc.value.code == ErrorCode.stale_broker_epoch


def test_preferred_leader_election() -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("t", assignments={0: [0, 1, 2]})])
    assert qc.elect_leaders([("t", 0)]).response[0].error_code == ErrorCode.election_not_needed
    # Fence 0: leadership goes to 1; once back, a preferred election returns it to 0.
    qc.broker_heartbeat(0, qc.image.broker(0).epoch, 0, now_ms=1, want_fence=True)  # type: ignore[union-attr]
    assert qc.image.partition("t", 0).leader == 1  # type: ignore[union-attr]
    qc.broker_heartbeat(0, qc.image.broker(0).epoch, qc.next_offset, now_ms=2)  # type: ignore[union-attr]
    # 0 is unfenced but no longer in the ISR: not available until it rejoins.
    result = qc.elect_leaders([("t", 0)])
    assert result.response[0].error_code == ErrorCode.preferred_leader_not_available
    p = qc.image.partition("t", 0)
    assert p is not None
    builder = qc.partition_change(qc.image.topic("t"), 0).set_target_isr([1, 2, 0])  # type: ignore[arg-type]
    qc.propose([builder.build()])  # type: ignore[list-item]
    result = qc.elect_leaders(None)
    assert result.response[0].error_code == ErrorCode.none
    assert qc.image.partition("t", 0).leader == 0  # type: ignore[union-attr]
    missing = qc.elect_leaders([("nope", 0)])
    assert missing.response[0].error_code == ErrorCode.unknown_topic_or_partition
    check_invariants(qc.image)


def test_unclean_election_when_the_isr_is_gone() -> None:
    qc = cluster(2)
    qc.create_topics([NewTopic("t", assignments={0: [0, 1]})])
    # Only 0 in the ISR, then 0 is fenced: leaderless with ISR [0].
    builder = qc.partition_change(qc.image.topic("t"), 0).set_target_isr([0])  # type: ignore[arg-type]
    qc.propose([builder.build()])  # type: ignore[list-item]
    qc.broker_heartbeat(0, qc.image.broker(0).epoch, 0, now_ms=1, want_fence=True)  # type: ignore[union-attr]
    p = qc.image.partition("t", 0)
    assert p is not None and p.leader == -1 and p.isr == (0,)
    result = qc.elect_leaders([("t", 0)], ElectionType.UNCLEAN)
    assert result.response[0].error_code == ErrorCode.none
    p = qc.image.partition("t", 0)
    assert p is not None and p.leader == 1 and p.isr == (1,) and p.leader_recovery_state == 1


@pytest.mark.parametrize("static", [False, True])
def test_the_controllers_static_unclean_setting_is_the_last_default(static: bool) -> None:
    """unclean.leader.election.enable in the controller's own config applies to a topic
    that sets nothing, with no cluster-wide dynamic value: the out-of-sync replica is
    elected when its only ISR member is fenced, or the partition waits leaderless."""
    qc = new_controller(unclean_leader_election_enable=static)
    for broker_id in (0, 1):
        join(qc, broker_id)
    qc.create_topics([NewTopic("t", assignments={0: [0, 1]})])
    builder = qc.partition_change(qc.image.topic("t"), 0).set_target_isr([0])  # type: ignore[arg-type]
    qc.propose([builder.build()])  # type: ignore[list-item]
    qc.broker_heartbeat(0, qc.image.broker(0).epoch, 0, now_ms=1, want_fence=True)  # type: ignore[union-attr]
    p = qc.image.partition("t", 0)
    assert p is not None
    assert (p.leader, p.isr) == ((1, (1,)) if static else (-1, (0,)))


def test_partition_change_builder_is_minimal() -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("t", assignments={0: [0, 1, 2]})])
    topic = qc.image.topic("t")
    assert topic is not None
    state = topic.partitions[0]
    assert PartitionChangeBuilder(state, topic.topic_id, 0, lambda b: True).build() is None
    shrink = PartitionChangeBuilder(state, topic.topic_id, 0, lambda b: True)
    record = shrink.set_target_isr([0, 1]).build()
    assert record == PartitionChangeRecord(partition_id=0, topic_id=topic.topic_id, isr=(0, 1))
    # Dropping a replica bumps the leader epoch by naming the same leader.
    record = (
        PartitionChangeBuilder(state, topic.topic_id, 0, lambda b: True)
        .set_target_replicas([0, 1])
        .set_target_isr([0, 1])
        .build()
    )
    assert record is not None and record.leader == 0 and record.replicas == (0, 1)
    preferred = PartitionChangeBuilder(
        state, topic.topic_id, 0, lambda b: b != 0, election=Election.PREFERRED
    ).build()
    assert preferred is not None and preferred.leader == 1


# Speculative state, bootstrap, legacy ------------------------------------------------------


def test_reset_drops_uncommitted_records() -> None:
    qc = cluster(1)
    committed = qc.image.copy()
    qc.create_topics([NewTopic("t")])
    assert qc.image.topic("t") is not None
    qc.reset(committed, now_ms=0)
    assert qc.image.topic("t") is None
    assert qc.next_offset == committed.last_offset + 1
    qc.reset(committed, now_ms=0, next_offset=committed.last_offset + 5)
    assert qc.create_topics([NewTopic("t")]).response[0].error_code == ErrorCode.none
    assert qc.image.last_offset == committed.last_offset + 4 + 2


def test_bootstrap_records() -> None:
    records = bootstrap_records(21, {"kraft.version": 1, "metadata.version": 9})
    image = MetadataImage.from_records(records)
    assert image.features == {"metadata.version": 21, "kraft.version": 1}
    assert records[0].name == "metadata.version"  # type: ignore[attr-defined]


def test_records_from_legacy_store() -> None:
    orders_id = uuid.uuid4()
    # strom-metadata.json as the single-node Strom wrote it (a real one is in
    # tests/fixtures/single-node-data).
    legacy = {
        "version": 1,
        "topics": [
            {
                "name": "orders",
                "id": str(orders_id),
                "partitions": 3,
                "configs": {"retention.ms": "1000"},
                "leader_epoch": 4,
            },
            {"name": "logs", "id": str(uuid.uuid4()), "partitions": 1, "configs": {}},
        ],
        "broker_configs": {"log.retention.ms": "99"},
        "producer_id_block_end": 1000,
    }
    for data in (legacy,):
        image = MetadataImage()
        image.apply_all(bootstrap_records(MV), 0)
        image.apply_all(records_from_legacy(data, 3), image.last_offset + 1)
        topic = image.topic("orders")
        assert topic is not None and topic.topic_id == orders_id
        assert sorted(topic.partitions) == [0, 1, 2]
        p = topic.partitions[0]
        assert p.replicas == (3,) and p.isr == (3,) and p.leader == -1 and p.leader_epoch == 4
        assert image.topic_configs("orders") == {"retention.ms": "1000"}
        assert image.broker_configs(3) == {"log.retention.ms": "99"}
        assert image.next_producer_id == 1000
        # The node registers and comes up: leader of everything, epoch moved on.
        qc = QuorumController(image, ControllerConfig(), rng=random.Random(0))
        join(qc, 3)
        for _t, _i, part in qc.image.all_partitions():
            assert part.leader == 3
        assert qc.image.partition("orders", 0).leader_epoch == 5  # type: ignore[union-attr]
        assert qc.allocate_producer_ids(3, qc.image.broker(3).epoch).response[0] == 1000  # type: ignore[union-attr]


# Property: random operation sequences -------------------------------------------------------

rarely = st.sampled_from([False, False, False, True])
create = st.tuples(st.just("create"), st.integers(0, 5), st.integers(1, 4), st.integers(1, 3))
operation = st.one_of(
    create,
    create,
    create,
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.just("grow"), st.integers(0, 5), st.integers(1, 3)),
    st.tuples(st.just("heartbeat"), st.integers(0, 4), rarely, rarely),
    st.tuples(st.just("heartbeat_all"), st.integers(0, 4000)),
    st.tuples(st.just("heartbeat_all"), st.integers(0, 4000)),
    st.tuples(st.just("register"), st.integers(0, 4)),
    st.tuples(st.just("tick"), st.integers(0, 6000)),
    st.tuples(st.just("elect"), st.sampled_from([0, 1])),
    st.tuples(st.just("unregister"), st.integers(0, 4)),
    st.tuples(st.just("pids"), st.integers(0, 4)),
    st.tuples(st.just("config"), st.integers(0, 5), st.sampled_from(["1000", "2000"])),
)


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(operation, min_size=15, max_size=60),
    seed=st.integers(0, 1000),
    brokers=st.integers(1, 5),
    racked=st.booleans(),
)
def test_random_operations_keep_invariants(
    ops: list[tuple], seed: int, brokers: int, racked: bool
) -> None:
    qc = new_controller(seed)
    for b in range(brokers):
        join(qc, b, f"r{b % 2}" if racked else None)
    start = qc.image.copy()
    emitted: list = []
    now = 0
    epochs_seen: dict[tuple[str, int], tuple[int, int]] = {}
    for op in ops:
        kind = op[0]
        try:
            if kind == "create":
                result = qc.create_topics([NewTopic(f"t{op[1]}", op[2], op[3])])
            elif kind == "delete":
                result = qc.delete_topics([f"t{op[1]}"])
            elif kind == "grow":
                topic = qc.image.topic(f"t{op[1]}")
                count = (len(topic.partitions) if topic else 1) + op[2]
                result = qc.create_partitions(f"t{op[1]}", count)
            elif kind == "heartbeat":
                broker = qc.image.broker(op[1])
                epoch = broker.epoch if broker else 0
                result = qc.broker_heartbeat(
                    op[1], epoch, qc.next_offset, now_ms=now, want_fence=op[2], want_shutdown=op[3]
                )
            elif kind == "heartbeat_all":
                now += op[1]
                records: list = []
                for broker in list(qc.image.brokers.values()):
                    beat = qc.broker_heartbeat(
                        broker.broker_id, broker.epoch, qc.next_offset, now_ms=now
                    )
                    records.extend(beat.records)
                emitted.extend(records)
                result = qc.fence_expired(now)
            elif kind == "register":
                result = qc.register_broker(
                    op[1],
                    uuid.UUID(int=now + 1),
                    listeners=LISTENERS,
                    rack=f"r{op[1] % 2}",
                    features=FEATURES,
                    now_ms=now,
                )
            elif kind == "tick":
                now += op[1]
                result = qc.fence_expired(now)
            elif kind == "elect":
                result = qc.elect_leaders(None, op[1])
            elif kind == "unregister":
                result = qc.unregister_broker(op[1])
            elif kind == "pids":
                broker = qc.image.broker(op[1])
                result = qc.allocate_producer_ids(op[1], broker.epoch if broker else -5)
            else:
                result = qc.incremental_alter_configs(
                    2, f"t{op[1]}", [("retention.ms", ConfigOp.SET, op[2])]
                )
        except ControllerError:
            continue
        emitted.extend(result.records)
        check_invariants(qc.image)
        for topic, index, p in qc.image.all_partitions():
            key = (f"{topic.topic_id}", index)
            if key in epochs_seen:
                old_leader_epoch, old_partition_epoch = epochs_seen[key]
                assert p.leader_epoch >= old_leader_epoch
                assert p.partition_epoch >= old_partition_epoch
            epochs_seen[key] = (p.leader_epoch, p.partition_epoch)
    assert qc.next_offset == start.last_offset + 1 + len(emitted)
    assert replayed(qc, start, emitted) == qc.image
    changes = sum(isinstance(r, PartitionChangeRecord) for r in emitted)
    event(f"partition changes: {'none' if not changes else 'some' if changes < 5 else 'many'}")
    event(f"partitions at the end: {min(3, sum(1 for _ in qc.image.all_partitions()))}+")
