"""AlterPartition at the controller: a partition leader's ISR changes, as Kafka decides them."""

from __future__ import annotations

import uuid

import pytest
from test_quorum_controller import (
    check_invariants,
    cluster,
    replayed,
)

from strom.cluster.image import PartitionState
from strom.cluster.partition_change import LEADER_RECOVERED, LEADER_RECOVERING
from strom.cluster.quorum_controller import (
    AlterPartitionEntry,
    AlterPartitionResult,
    ControllerError,
    IsrMember,
    NewTopic,
    QuorumController,
)
from strom.cluster.records import PartitionChangeRecord
from strom.protocol.errors import ErrorCode


def three_replicas() -> QuorumController:
    """Brokers 0-2, topic "t" with one partition on [0, 1, 2], led by 0."""
    qc = cluster(3)
    qc.create_topics([NewTopic("t", assignments={0: [0, 1, 2]})])
    return qc


def state(qc: QuorumController, topic: str = "t", index: int = 0) -> PartitionState:
    p = qc.image.partition(topic, index)
    assert p is not None
    return p


def epoch(qc: QuorumController, broker_id: int) -> int:
    broker = qc.image.broker(broker_id)
    assert broker is not None
    return broker.epoch


def entry(
    qc: QuorumController,
    isr: list[int],
    *,
    topic: str | uuid.UUID | None = None,
    index: int = 0,
    leader_epoch: int | None = None,
    partition_epoch: int | None = None,
    epochs: dict[int, int] | None = None,
    recovery: int = LEADER_RECOVERED,
) -> AlterPartitionEntry:
    """A request for "t"-``index`` (by topic id) as its leader would send it, with overrides."""
    t = qc.image.topic("t")
    assert t is not None
    current = t.partitions.get(index, PartitionState(replicas=(), isr=()))
    return AlterPartitionEntry(
        topic=t.topic_id if topic is None else topic,
        partition=index,
        leader_epoch=current.leader_epoch if leader_epoch is None else leader_epoch,
        partition_epoch=current.partition_epoch if partition_epoch is None else partition_epoch,
        new_isr=tuple(IsrMember(b, (epochs or {}).get(b, -1)) for b in isr),
        leader_recovery_state=recovery,
    )


def alter(
    qc: QuorumController,
    *entries: AlterPartitionEntry,
    broker_id: int = 0,
    version: int = 3,
) -> tuple[tuple, list[AlterPartitionResult]]:
    result = qc.alter_partition(broker_id, epoch(qc, broker_id), list(entries), version=version)
    return result.records, result.response


def one_error(qc: QuorumController, e: AlterPartitionEntry, **kw: int) -> ErrorCode:
    before = qc.next_offset
    records, (result,) = alter(qc, e, **kw)
    assert records == () and qc.next_offset == before
    return result.error_code


def make_recovering(qc: QuorumController) -> None:
    """ "t"-0 as after an unclean election: its leader 0 alone in the ISR, RECOVERING."""
    t = qc.image.topic("t")
    assert t is not None
    record = qc.partition_change(t, 0).set_target_isr([0]).set_target_recovery_state(1).build()
    assert record is not None
    qc.propose([record])
    assert state(qc).leader_recovery_state == LEADER_RECOVERING


def fence(qc: QuorumController, broker_id: int) -> None:
    qc.broker_heartbeat(broker_id, epoch(qc, broker_id), 0, now_ms=1, want_fence=True)
    assert qc.image.broker(broker_id).fenced  # type: ignore[union-attr]


# Happy paths --------------------------------------------------------------------------


def test_shrink_writes_the_isr_and_bumps_only_the_partition_epoch() -> None:
    qc = three_replicas()
    before_image = qc.image.copy()
    before = state(qc)
    records, (result,) = alter(qc, entry(qc, [0, 1]))
    t = qc.image.topic("t")
    assert t is not None
    assert records == (PartitionChangeRecord(partition_id=0, topic_id=t.topic_id, isr=(0, 1)),)
    assert result == AlterPartitionResult(
        t.topic_id,
        0,
        leader_id=0,
        leader_epoch=before.leader_epoch,
        isr=(0, 1),
        partition_epoch=before.partition_epoch + 1,
        leader_recovery_state=LEADER_RECOVERED,
    )
    # The record replayed into the committed image gives the same state.
    image = replayed(qc, before_image, list(records))
    after = image.partition("t", 0)
    assert after is not None
    assert after.isr == (0, 1)
    assert after.partition_epoch == before.partition_epoch + 1
    assert after.leader_epoch == before.leader_epoch and after.leader == 0
    assert image == qc.image
    check_invariants(qc.image)


def test_expand_after_a_shrink() -> None:
    qc = three_replicas()
    alter(qc, entry(qc, [0, 1]))
    shrunk = state(qc)
    records, (result,) = alter(qc, entry(qc, [0, 1, 2], epochs={2: epoch(qc, 2)}))
    assert len(records) == 1 and records[0].isr == (0, 1, 2)
    assert result.error_code == ErrorCode.none
    assert result.isr == (0, 1, 2)
    assert result.partition_epoch == shrunk.partition_epoch + 1
    assert result.leader_epoch == shrunk.leader_epoch
    assert state(qc).isr == (0, 1, 2)


def test_same_isr_answers_the_current_state_without_a_record() -> None:
    qc = three_replicas()
    current = state(qc)
    records, (result,) = alter(qc, entry(qc, [0, 1, 2]))
    assert records == ()
    assert result.error_code == ErrorCode.none
    assert (result.leader_id, result.isr) == (0, (0, 1, 2))
    assert (result.leader_epoch, result.partition_epoch) == (
        current.leader_epoch,
        current.partition_epoch,
    )


def test_by_name_for_old_versions() -> None:
    qc = three_replicas()
    records, (result,) = alter(qc, entry(qc, [0, 2], topic="t"), version=1)
    assert len(records) == 1
    assert result.topic == "t" and result.isr == (0, 2)


def test_several_partitions_answer_in_order_and_write_only_the_valid() -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("t", assignments={0: [0, 1, 2], 1: [0, 1, 2], 2: [1, 0, 2]})])
    records, results = alter(
        qc,
        entry(qc, [0, 1], index=0),
        entry(qc, [0, 1], index=2),  # led by 1, not by the sender
        entry(qc, [0, 2], index=1),
    )
    assert [r.error_code for r in results] == [
        ErrorCode.none,
        ErrorCode.invalid_request,
        ErrorCode.none,
    ]
    assert [r.partition for r in results] == [0, 2, 1]
    assert [r.partition_id for r in records] == [0, 1]


def test_recovering_leader_reports_recovered() -> None:
    qc = three_replicas()
    make_recovering(qc)
    # Still recovering, ISR of the leader alone: nothing to change.
    records, (result,) = alter(qc, entry(qc, [0], recovery=LEADER_RECOVERING))
    assert records == () and result.leader_recovery_state == LEADER_RECOVERING
    # Recovered, and the ISR grows at once.
    records, (result,) = alter(qc, entry(qc, [0, 1], recovery=LEADER_RECOVERED))
    assert len(records) == 1 and records[0].leader_recovery_state == LEADER_RECOVERED
    assert result.leader_recovery_state == LEADER_RECOVERED and result.isr == (0, 1)
    assert state(qc).leader_recovery_state == LEADER_RECOVERED


def reassigning(qc: QuorumController, replicas: list[int], removing: list[int], adding: list[int]):
    t = qc.image.topic("t")
    assert t is not None
    record = (
        qc.partition_change(t, 0)
        .set_target_replicas(replicas)
        .set_target_reassignment(removing, adding)
        .build()
    )
    assert record is not None
    qc.propose([record])


def test_an_isr_that_completes_a_reassignment_changes_the_replicas() -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("t", assignments={0: [0, 1]})])
    reassigning(qc, [0, 1, 2], removing=[1], adding=[2])  # [0, 1] -> [0, 2]
    before = state(qc)
    records, (result,) = alter(qc, entry(qc, [0, 1, 2]))
    assert result.error_code == ErrorCode.none
    after = state(qc)
    assert after.replicas == (0, 2) and after.isr == (0, 2)
    assert after.adding_replicas == () and after.removing_replicas == ()
    assert after.leader == 0 and after.leader_epoch == before.leader_epoch + 1
    assert (result.isr, result.leader_epoch) == ((0, 2), after.leader_epoch)
    assert len(records) == 1
    check_invariants(qc.image)


@pytest.mark.parametrize(
    ("version", "code"), [(3, ErrorCode.new_leader_elected), (1, ErrorCode.fenced_leader_epoch)]
)
def test_completing_a_reassignment_that_moves_the_leader(version: int, code: ErrorCode) -> None:
    qc = cluster(3)
    qc.create_topics([NewTopic("t", assignments={0: [0, 1]})])
    reassigning(qc, [0, 1, 2], removing=[0], adding=[2])  # [0, 1] -> [1, 2]
    topic: str | None = "t" if version < 2 else None
    records, (result,) = alter(qc, entry(qc, [0, 1, 2], topic=topic), version=version)
    # The change is written all the same; the old leader learns to refresh its metadata.
    assert len(records) == 1
    assert result.error_code == code
    after = state(qc)
    assert after.replicas == (1, 2) and after.isr == (1, 2) and after.leader == 1
    check_invariants(qc.image)


# Refusals -----------------------------------------------------------------------------


def test_stale_or_unknown_broker_epoch_refuses_the_whole_request() -> None:
    qc = three_replicas()
    for broker_id, broker_epoch in [(0, epoch(qc, 0) + 1), (0, -1), (9, 0)]:
        with pytest.raises(ControllerError) as exc:
            qc.alter_partition(broker_id, broker_epoch, [entry(qc, [0, 1])])
        assert exc.value.code == ErrorCode.stale_broker_epoch
    assert state(qc).isr == (0, 1, 2)


def test_unknown_topic_and_partition() -> None:
    qc = three_replicas()
    assert one_error(qc, entry(qc, [0], topic=uuid.uuid4())) == ErrorCode.unknown_topic_id
    assert one_error(qc, entry(qc, [0], topic=uuid.UUID(int=0))) == ErrorCode.unknown_topic_id
    assert (
        one_error(qc, entry(qc, [0], topic="nope"), version=1)
        == ErrorCode.unknown_topic_or_partition
    )
    assert one_error(qc, entry(qc, [0], index=7)) == ErrorCode.unknown_topic_or_partition


def test_epoch_checks() -> None:
    qc = three_replicas()
    alter(qc, entry(qc, [0, 1]))  # partition epoch 1
    fence(qc, 0)  # leader moves to 1: leader epoch 1, partition epoch 2
    now = state(qc)
    assert now.leader == 1 and now.leader_epoch == 1 and now.partition_epoch == 2
    # Epochs ahead of the controller's: it is probably behind, not active any more.
    ahead = entry(qc, [1], leader_epoch=now.leader_epoch + 1)
    assert one_error(qc, ahead, broker_id=1) == ErrorCode.not_controller
    ahead = entry(qc, [1], partition_epoch=now.partition_epoch + 1)
    assert one_error(qc, ahead, broker_id=1) == ErrorCode.not_controller
    # The old leader's request, from before its fencing.
    old = entry(qc, [0, 1], leader_epoch=0, partition_epoch=1)
    assert one_error(qc, old) == ErrorCode.fenced_leader_epoch
    # The right epochs from a broker that does not lead the partition.
    assert one_error(qc, entry(qc, [1]), broker_id=2) == ErrorCode.invalid_request
    # The leader, with the current leader epoch and an old partition epoch.
    stale = entry(qc, [1], partition_epoch=now.partition_epoch - 1)
    assert one_error(qc, stale, broker_id=1) == ErrorCode.invalid_update_version


@pytest.mark.parametrize(
    "isr",
    [
        [0, 3],  # not a replica
        [0, 1, 1],  # a duplicate
        [0, -1],  # a negative id
        [1, 2],  # without the leader
        [],  # empty
    ],
)
def test_invalid_isr(isr: list[int]) -> None:
    qc = three_replicas()
    assert one_error(qc, entry(qc, isr)) == ErrorCode.invalid_request


def test_leader_recovery_state_rules() -> None:
    qc = three_replicas()
    # RECOVERED never goes back to RECOVERING.
    assert one_error(qc, entry(qc, [0], recovery=LEADER_RECOVERING)) == ErrorCode.invalid_request
    assert one_error(qc, entry(qc, [0, 1], recovery=7)) == ErrorCode.invalid_request
    make_recovering(qc)
    # A recovering leader cannot have followers in its ISR.
    bigger = entry(qc, [0, 1], recovery=LEADER_RECOVERING)
    assert one_error(qc, bigger) == ErrorCode.invalid_request


def test_expand_refused_for_a_fenced_broker() -> None:
    qc = three_replicas()
    fence(qc, 2)
    assert state(qc).isr == (0, 1)
    assert one_error(qc, entry(qc, [0, 1, 2])) == ErrorCode.ineligible_replica
    assert (
        one_error(qc, entry(qc, [0, 1, 2], topic="t"), version=1)
        == ErrorCode.operation_not_attempted
    )
    assert state(qc).isr == (0, 1)


def test_expand_refused_for_a_broker_in_controlled_shutdown() -> None:
    qc = cluster(3)
    # Broker 2 leads a partition, so that it stays in controlled shutdown for a while.
    qc.create_topics(
        [NewTopic("t", assignments={0: [0, 1, 2]}), NewTopic("u", assignments={0: [2]})]
    )
    reply = qc.broker_heartbeat(2, epoch(qc, 2), qc.next_offset, now_ms=1, want_shutdown=True)
    assert reply.response.in_controlled_shutdown
    assert state(qc).isr == (0, 1)
    assert one_error(qc, entry(qc, [0, 1, 2])) == ErrorCode.ineligible_replica


def test_expand_refused_for_a_broker_epoch_that_is_not_the_registered_one() -> None:
    qc = three_replicas()
    alter(qc, entry(qc, [0, 1]))
    wrong = entry(qc, [0, 1, 2], epochs={2: epoch(qc, 2) + 1})
    assert one_error(qc, wrong) == ErrorCode.ineligible_replica
    right = entry(qc, [0, 1, 2], epochs={0: epoch(qc, 0), 1: epoch(qc, 1), 2: epoch(qc, 2)})
    _records, (result,) = alter(qc, right)
    assert result.error_code == ErrorCode.none and result.isr == (0, 1, 2)


def test_expand_refused_for_an_unregistered_broker() -> None:
    qc = three_replicas()
    qc.unregister_broker(2)
    assert state(qc).isr == (0, 1)
    assert one_error(qc, entry(qc, [0, 1, 2])) == ErrorCode.ineligible_replica
