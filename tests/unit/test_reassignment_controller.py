"""Partition reassignment at the controller (KIP-455), driven through the real
QuorumController: the records it writes are replayed, and the states they lead to are
checked against what Kafka's ReplicationControlManager does."""

from __future__ import annotations

from test_alter_partition import alter, entry, state
from test_quorum_controller import check_invariants, cluster, replayed

from strom.cluster.partition_change import Election
from strom.cluster.quorum_controller import NewTopic, QuorumController
from strom.protocol.errors import ErrorCode


def four_brokers() -> QuorumController:
    """Brokers 0-3, topic "t" with one partition on [0, 1, 2], led by 0."""
    qc = cluster(4)
    qc.create_topics([NewTopic("t", assignments={0: [0, 1, 2]})])
    return qc


def reassign(qc: QuorumController, target: list[int] | None, **kw: bool) -> ErrorCode:
    start = qc.image.copy()
    result = qc.alter_partition_reassignments([("t", 0, target)], **kw)
    assert replayed(qc, start, result.records).partition("t", 0) == qc.image.partition("t", 0)
    check_invariants(qc.image)
    return result.response[0].error_code


def test_moving_a_replica_adds_then_removes_once_the_new_one_is_in_sync() -> None:
    qc = four_brokers()
    assert reassign(qc, [1, 2, 3]) == ErrorCode.none
    moving = state(qc)
    assert moving.replicas == (1, 2, 3, 0)
    assert moving.adding_replicas == (3,) and moving.removing_replicas == (0,)
    assert moving.leader == 0  # the old leader leads until the move completes
    listed = qc.list_partition_reassignments()
    assert [(r.topic, r.partition, r.adding, r.removing) for r in listed] == [("t", 0, (3,), (0,))]
    # The leader reports the new replica in sync: the reassignment completes and the
    # leadership leaves the removed replica.
    _, response = alter(qc, entry(qc, [0, 1, 2, 3]))
    done = state(qc)
    assert done.replicas == (1, 2, 3)
    assert done.adding_replicas == () and done.removing_replicas == ()
    assert set(done.isr) == {1, 2, 3}
    assert done.leader in (1, 2, 3)
    assert response[0].error_code == ErrorCode.new_leader_elected or done.leader == 0
    assert qc.list_partition_reassignments() == []


def test_only_removing_replicas_completes_at_once() -> None:
    qc = four_brokers()
    assert reassign(qc, [1, 2]) == ErrorCode.none
    done = state(qc)
    assert done.replicas == (1, 2) and set(done.isr) == {1, 2}
    assert done.leader in (1, 2)
    assert qc.list_partition_reassignments() == []


def test_cancel_reverts_to_the_original_replicas() -> None:
    qc = four_brokers()
    assert reassign(qc, None) == ErrorCode.no_reassignment_in_progress
    assert reassign(qc, [3, 1, 2]) == ErrorCode.none
    assert state(qc).adding_replicas == (3,)
    assert reassign(qc, None) == ErrorCode.none
    back = state(qc)
    # Kafka's revert keeps the moving order less the added replicas.
    assert back.replicas == (1, 2, 0) and back.adding_replicas == ()
    assert back.removing_replicas == () and back.leader == 0


def test_a_new_target_for_a_moving_partition_starts_from_its_original_replicas() -> None:
    qc = four_brokers()
    assert reassign(qc, [1, 2, 3]) == ErrorCode.none
    assert reassign(qc, [0, 1, 3]) == ErrorCode.none
    moving = state(qc)
    assert moving.replicas == (0, 1, 3, 2)
    assert moving.adding_replicas == (3,) and moving.removing_replicas == (2,)


def test_bad_targets_are_refused_and_change_nothing() -> None:
    qc = four_brokers()
    before = state(qc)
    assert reassign(qc, []) == ErrorCode.invalid_replica_assignment
    assert reassign(qc, [1, 1, 2]) == ErrorCode.invalid_replica_assignment
    assert reassign(qc, [1, 2, 9]) == ErrorCode.invalid_replica_assignment
    assert (
        reassign(qc, [1, 2, 3, 0], allow_replication_factor_change=False)
        == ErrorCode.invalid_replication_factor
    )
    result = qc.alter_partition_reassignments([("nope", 0, [1]), ("t", 5, [1])])
    assert [r.error_code for r in result.response] == [ErrorCode.unknown_topic_or_partition] * 2
    assert not result.records
    assert state(qc) == before


def test_imbalanced_partitions_follow_the_per_broker_ratio() -> None:
    qc = cluster(3)
    qc.create_topics(
        [NewTopic(f"t{i}", assignments={0: [0, 1, 2]}) for i in range(10)]
        + [NewTopic("u", assignments={0: [1, 0, 2]})]
    )
    assert qc.imbalanced_partitions(0.1) == []
    # Broker 0 loses the leadership of one of the ten partitions it prefers.
    qc.propose(
        [
            qc.partition_change(qc.image.topic("t3"), 0, election=Election.PREFERRED)
            .set_target_isr([1, 2, 0])
            .set_target_replicas([1, 2, 0])
            .build()
        ]
    )
    qc.propose(
        [qc.partition_change(qc.image.topic("t3"), 0).set_target_replicas([0, 1, 2]).build()]
    )
    assert state(qc, "t3").leader == 1 and state(qc, "t3").replicas == (0, 1, 2)
    assert qc.imbalanced_partitions(0.1) == []  # 1 of 10: not above 10 %
    assert qc.imbalanced_partitions(0.05) == [("t3", 0)]
    result = qc.elect_leaders(qc.imbalanced_partitions(0.05))
    assert [r.error_code for r in result.response] == [ErrorCode.none]
    assert state(qc, "t3").leader == 0
    check_invariants(qc.image)
