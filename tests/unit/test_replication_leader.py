"""The partition leader's replication rules (strom.replication.leader), one fact at a time.

Each test is a case that went wrong in a real cluster or that Kafka's Partition guards
against: a follower joining the ISR while the high watermark runs past it, acks=all
answered after the ISR shrank below min.insync.replicas, a follower under load going in
and out of the ISR, a restarted broker's fetches, settled and unsettled AlterPartitions.
"""

from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.replication.follower import on_diverging_epoch, on_out_of_range
from strom.replication.leader import PartitionLeader, diverging_epoch

LAG_MS = 30_000
EPOCHS = {1: 10, 2: 20, 3: 30}  # broker id -> registered broker epoch


def eligible(broker: int, fetched_epoch: int) -> bool:
    return fetched_epoch < 0 or fetched_epoch == EPOCHS.get(broker)


def leader(isr: tuple[int, ...] = (1, 2, 3), now: int = 0) -> PartitionLeader:
    return PartitionLeader.elected(1, 5, (1, 2, 3), isr, 7, 0, now, LAG_MS)


def fetch(state: PartitionLeader, replica: int, offset: int, leader_end: int, now: int) -> None:
    assert state.follower_fetched(replica, offset, EPOCHS[replica], leader_end, now)


def test_high_watermark_is_the_smallest_log_end_of_the_isr() -> None:
    state = leader()
    assert state.high_watermark(100, 0, eligible) == -1  # followers not heard from yet
    fetch(state, 2, 80, 100, 1)
    fetch(state, 3, 60, 100, 1)
    assert state.high_watermark(100, 1, eligible) == 60


def test_a_joining_follower_holds_the_high_watermark_until_the_change_is_settled() -> None:
    # ISR {1, 2}; 3 is slow and catches up to the high watermark while records keep coming.
    state = leader(isr=(1, 2))
    fetch(state, 2, 100, 100, 10)
    fetch(state, 3, 50, 100, 10)
    assert state.high_watermark(100, 10, eligible) == 100  # 3 is outside the ISR
    fetch(state, 3, 100, 120, 20)  # reached the high watermark, not the log end
    change = state.next_isr_change(120, 100, 20, eligible, 10)
    assert change is not None and change.isr == (1, 2, 3) and change.added == (3,)
    assert change.members == ((1, 10), (2, 20), (3, 30))
    fetch(state, 2, 120, 120, 21)
    # While the AlterPartition is in flight, 3 counts: nothing it lacks is acknowledged.
    assert state.maximal_isr == (1, 2, 3)
    assert state.high_watermark(120, 21, eligible) == 100
    assert state.next_isr_change(120, 100, 21, eligible, 10) is None  # one at a time
    state.answered(change, (1, 2, 3), 8)
    assert state.isr == (1, 2, 3) and state.pending is None and state.partition_epoch == 8


def test_a_refusal_that_was_not_applied_drops_the_change_others_keep_or_retry_it() -> None:
    state = leader(isr=(1, 2))
    fetch(state, 3, 0, 0, 1)
    change = state.next_isr_change(0, 0, 1, eligible, 10)
    assert change is not None
    assert state.refused(change, None) is True  # no answer: send the same request again
    assert state.refused(change, ErrorCode.not_controller) is True
    assert state.refused(change, ErrorCode.invalid_update_version) is False
    assert state.pending is change  # the metadata will tell what happened
    assert state.committed((1, 2, 3), (1, 2, 3), 8)  # it did happen
    assert state.pending is None and state.isr == (1, 2, 3)
    assert not state.committed((1, 2, 3), (1, 2), 7)  # an older state is ignored
    state.committed((1, 2, 3), (1, 2), 9)
    change = state.next_isr_change(0, 0, 2, eligible, 10)
    assert change is not None
    assert state.refused(change, ErrorCode.ineligible_replica) is False
    assert state.pending is None and state.maximal_isr == (1, 2)


def test_acks_all_fails_after_append_when_the_isr_shrank_below_min_insync() -> None:
    state = leader()
    assert state.may_append(2)
    fetch(state, 2, 10, 10, 1)
    fetch(state, 3, 10, 10, 1)
    assert state.acks_outcome(11, 10, 2) is None  # still waiting
    assert state.acks_outcome(10, 10, 2) == ErrorCode.none
    # Both followers stop; the ISR shrinks to the leader; the high watermark then runs.
    change = state.next_isr_change(20, 10, LAG_MS + 10, eligible, 10)
    assert change is not None and change.isr == (1,) and change.removed == (2, 3)
    assert state.high_watermark(20, LAG_MS + 10, eligible) == 10  # the maximal ISR
    state.answered(change, (1,), 8)
    assert state.high_watermark(20, LAG_MS + 10, eligible) == 20
    assert state.acks_outcome(20, 20, 2) == ErrorCode.not_enough_replicas_after_append
    assert not state.may_append(2)
    assert state.acks_outcome(20, 20, 1) == ErrorCode.none


def test_a_follower_under_steady_load_stays_in_sync() -> None:
    # Each fetch reaches the end the leader had at the previous fetch, never the end now.
    state = leader()
    fetch(state, 3, 0, 0, 0)
    end = 0
    for now in range(100, 3 * LAG_MS, 100):
        fetch(state, 3, end, end + 50, now)  # had everything up to the previous end
        fetch(state, 2, end + 50, end + 50, now)
        end += 50
        assert state.next_isr_change(end + 10, end, now, eligible, 10) is None


def test_a_follower_that_falls_behind_leaves_and_rejoins_at_the_high_watermark() -> None:
    state = leader()
    fetch(state, 2, 0, 0, 0)
    fetch(state, 3, 0, 0, 0)
    fetch(state, 2, 500, 500, LAG_MS + 1)
    change = state.next_isr_change(500, 0, LAG_MS + 1, eligible, 10)
    assert change is not None and change.isr == (1, 2)
    state.answered(change, (1, 2), 8)
    # Not caught up and not in the ISR: the high watermark does not wait for it.
    assert state.high_watermark(500, LAG_MS + 1, eligible) == 500
    fetch(state, 3, 400, 500, LAG_MS + 2)
    assert state.next_isr_change(500, 500, LAG_MS + 2, eligible, 10) is None
    fetch(state, 3, 500, 600, LAG_MS + 3)
    change = state.next_isr_change(600, 500, LAG_MS + 3, eligible, 10)
    assert change is not None and change.isr == (1, 2, 3)


def test_a_follower_joins_only_past_the_start_of_the_leader_epoch() -> None:
    state = PartitionLeader.elected(1, 5, (1, 2, 3), (1, 2), 7, 300, 0, LAG_MS)
    fetch(state, 3, 200, 300, 1)
    assert state.next_isr_change(300, 200, 1, eligible, 10) is None
    fetch(state, 3, 300, 300, 2)
    assert state.next_isr_change(300, 200, 2, eligible, 10) is not None


def test_broker_epochs_of_a_restarted_follower() -> None:
    state = leader(isr=(1, 2))
    # 3 restarted: it fetches with epoch 31 while the metadata still says 30.
    assert state.follower_fetched(3, 100, 31, 100, 1)
    assert state.next_isr_change(100, 100, 1, eligible, 10) is None  # not eligible yet
    EPOCHS[3] = 31
    try:
        # A fetch its previous incarnation sent, arriving late, is not progress.
        assert not state.follower_fetched(3, 500, 30, 500, 2)
        assert state.followers[3].log_end_offset == 100
        change = state.next_isr_change(100, 100, 2, eligible, 10)
        assert change is not None and dict(change.members)[3] == 31
    finally:
        EPOCHS[3] = 30


def test_an_unclean_leader_reports_its_recovery_first() -> None:
    state = PartitionLeader.elected(1, 5, (1, 2, 3), (1,), 7, 0, 0, LAG_MS, recovering=True)
    fetch(state, 2, 0, 0, 1)
    change = state.next_isr_change(0, 0, 1, eligible, 10)
    assert change is not None and change.recovered and change.isr == (1,)
    state.answered(change, (1,), 8)
    assert not state.recovering
    change = state.next_isr_change(0, 0, 2, eligible, 10)
    assert change is not None and change.isr == (1, 2) and not change.recovered


def test_truncation_rules() -> None:
    # The leader ends epoch 3 at 120; ours ends it at 150: cut at 120.
    assert on_diverging_epoch(120, (3, 150), 0).offset == 120
    # We end the largest epoch below at 90: cut there (and ask again).
    assert on_diverging_epoch(120, (2, 90), 0).offset == 90
    # Nothing known at or below: the leader's end; never below our log start.
    assert on_diverging_epoch(120, (-1, -1), 0).offset == 120
    assert on_diverging_epoch(120, (3, 150), 130).offset == 130
    assert on_out_of_range(500, 100, 80) == on_out_of_range(500, 100, 80)
    assert on_out_of_range(500, 100, 80).start_over
    cut = on_out_of_range(0, 100, 80)
    assert cut.offset == 80 and not cut.start_over


def test_diverging_epoch_on_the_leader() -> None:
    # The leader's epochs: 1 from 0, 3 from 10, 6 from 25; its log ends at 40.
    starts = [(1, 0), (3, 10), (6, 25)]

    def end_offset_for_epoch(epoch: int) -> tuple[int, int]:
        above = [i for i, (e, _) in enumerate(starts) if e > epoch]
        if epoch == starts[-1][0]:
            return epoch, 40
        if not above:
            return -1, -1
        below = above[0] - 1
        return (starts[below][0], starts[above[0]][1]) if below >= 0 else (epoch, starts[0][1])

    assert diverging_epoch(-1, 100, end_offset_for_epoch) is None  # no epoch: no check
    assert diverging_epoch(6, 40, end_offset_for_epoch) is None  # the same log
    assert diverging_epoch(3, 20, end_offset_for_epoch) is None  # within epoch 3
    assert diverging_epoch(3, 30, end_offset_for_epoch) == (3, 25)  # past its end here
    assert diverging_epoch(4, 30, end_offset_for_epoch) == (3, 25)  # an epoch unknown here
    assert diverging_epoch(7, 50, end_offset_for_epoch) == (-1, -1)  # out of range
