"""The share-partition state machine (KIP-932): acquisition, locks, acknowledgements,
the delivery count limit, the window and its durable form."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.coordinator.share_partition import (
    AcknowledgeType,
    AcquiredRange,
    RecordState,
    SharePartition,
    StateBatch,
)
from strom.protocol.errors import ErrorCode

ACCEPT = AcknowledgeType.ACCEPT
RELEASE = AcknowledgeType.RELEASE
REJECT = AcknowledgeType.REJECT


def _committed(
    sp: SharePartition, member: str, first: int, last: int, types: list[int], now_ms: int
) -> ErrorCode:
    """Acknowledge, and settle the acknowledgement as its state write committed."""
    error = sp.acknowledge(member, first, last, types, now_ms)
    sp.settle(sp.take_changes(), committed=True)
    return error


def test_two_members_get_distinct_records_and_the_window_moves_on_accept() -> None:
    sp = SharePartition(0, lock_duration_ms=1000)
    first = sp.acquire("a", [(0, 4), (5, 9)], now_ms=0, max_records=5)
    assert first == [AcquiredRange(0, 4, 1)]  # a whole batch, then the limit
    second = sp.acquire("b", [(0, 4), (5, 9)], now_ms=0, max_records=100)
    assert second == [AcquiredRange(5, 9, 1)]
    assert _committed(sp, "b", 5, 9, [ACCEPT], now_ms=1) == ErrorCode.none
    assert sp.start_offset == 0  # 0-4 still acquired by a
    assert _committed(sp, "a", 0, 4, [ACCEPT], now_ms=1) == ErrorCode.none
    assert (sp.start_offset, sp.end_offset, sp.in_flight()) == (10, 10, 0)


def test_only_the_holder_may_acknowledge_and_nothing_applies_on_a_bad_batch() -> None:
    sp = SharePartition(0)
    sp.acquire("a", [(0, 2)], now_ms=0, max_records=10)
    assert _committed(sp, "b", 0, 2, [ACCEPT], now_ms=0) == ErrorCode.invalid_record_state
    assert _committed(sp, "a", 0, 3, [ACCEPT], now_ms=0) == ErrorCode.invalid_record_state
    assert _committed(sp, "a", 0, 2, [ACCEPT, ACCEPT], now_ms=0) == ErrorCode.invalid_request
    assert [sp.state_of(o) for o in range(3)] == [RecordState.ACQUIRED] * 3


def test_release_and_reject_per_record() -> None:
    sp = SharePartition(0)
    sp.acquire("a", [(0, 2)], now_ms=0, max_records=10)
    assert _committed(sp, "a", 0, 2, [RELEASE, REJECT, ACCEPT], now_ms=0) == ErrorCode.none
    assert sp.state_of(0) == RecordState.AVAILABLE
    assert sp.state_of(1) == RecordState.ARCHIVED
    assert sp.next_fetch_offset() == 0
    again = sp.acquire("b", [(0, 2)], now_ms=0, max_records=10)
    assert again == [AcquiredRange(0, 0, 2)]  # only the released one, its second delivery
    assert _committed(sp, "b", 0, 0, [ACCEPT], now_ms=0) == ErrorCode.none
    assert sp.start_offset == 3


def test_an_expired_lock_makes_the_record_available_to_others() -> None:
    sp = SharePartition(0, lock_duration_ms=100)
    sp.acquire("a", [(0, 1)], now_ms=0, max_records=10)
    assert sp.next_deadline() == 100
    assert sp.expire_locks(99) == 0
    assert sp.expire_locks(100) == 2
    assert sp.acquire("b", [(0, 1)], now_ms=100, max_records=10) == [AcquiredRange(0, 1, 2)]
    assert _committed(sp, "a", 0, 1, [ACCEPT], now_ms=101) == ErrorCode.invalid_record_state


def test_renew_extends_the_lock() -> None:
    sp = SharePartition(0, lock_duration_ms=100)
    sp.acquire("a", [(0, 0)], now_ms=0, max_records=10)
    assert _committed(sp, "a", 0, 0, [AcknowledgeType.RENEW], now_ms=90) == ErrorCode.none
    assert sp.expire_locks(150) == 0
    assert sp.holder_of(0) == "a"


def test_the_delivery_count_limit_archives_a_poison_record() -> None:
    sp = SharePartition(0, delivery_limit=3)
    for delivery in range(1, 4):
        got = sp.acquire(f"m{delivery}", [(0, 1)], now_ms=0, max_records=10)
        assert got[0].first_offset == 0 and got[0].delivery_count == delivery
        if delivery == 1:
            assert _committed(sp, "m1", 1, 1, [ACCEPT], now_ms=0) == ErrorCode.none
        assert _committed(sp, f"m{delivery}", 0, 0, [RELEASE], now_ms=0) == ErrorCode.none
    assert sp.state_of(0) is None and sp.start_offset == 2  # archived, the window moved
    assert sp.acquire("m4", [(0, 1)], now_ms=0, max_records=10) == []


def test_the_window_holds_at_most_max_in_flight_records() -> None:
    sp = SharePartition(0, max_in_flight=4)
    got = sp.acquire("a", [(0, 9)], now_ms=0, max_records=100)
    assert got == [AcquiredRange(0, 3, 1)]
    assert not sp.can_acquire_new()
    _committed(sp, "a", 0, 1, [ACCEPT], now_ms=0)
    assert sp.acquire("b", [(4, 9)], now_ms=0, max_records=100) == [AcquiredRange(4, 5, 1)]


def test_offsets_between_batches_are_gaps_and_archived() -> None:
    sp = SharePartition(0)
    got = sp.acquire("a", [(0, 1), (5, 6)], now_ms=0, max_records=100)
    assert got == [AcquiredRange(0, 1, 1), AcquiredRange(5, 6, 1)]
    assert [sp.state_of(o) for o in (2, 3, 4)] == [RecordState.ARCHIVED] * 3
    _committed(sp, "a", 0, 1, [ACCEPT], now_ms=0)
    assert sp.start_offset == 5


def test_a_member_that_goes_releases_what_it_holds() -> None:
    sp = SharePartition(0)
    sp.acquire("a", [(0, 4)], now_ms=0, max_records=100)
    assert sp.release_member("a") == 5
    assert sp.acquire("b", [(0, 4)], now_ms=0, max_records=100) == [AcquiredRange(0, 4, 2)]


def test_the_log_start_moving_drops_what_is_below_it() -> None:
    sp = SharePartition(0)
    sp.acquire("a", [(0, 4)], now_ms=0, max_records=100)
    sp.move_start(3)
    assert (sp.start_offset, sp.end_offset) == (3, 5)
    assert _committed(sp, "a", 3, 4, [ACCEPT], now_ms=0) == ErrorCode.none
    assert sp.start_offset == 5


def test_durable_state_round_trips_and_locks_do_not_survive() -> None:
    sp = SharePartition(10)
    sp.acquire("a", [(10, 15)], now_ms=0, max_records=100)
    _committed(sp, "a", 10, 15, [ACCEPT, RELEASE, REJECT, ACCEPT, ACCEPT, ACCEPT], now_ms=0)
    sp.acquire("a", [(16, 17)], now_ms=0, max_records=100)
    assert sp.start_offset == 11
    batches = sp.durable_state()
    assert batches == [
        StateBatch(11, 11, RecordState.AVAILABLE, 1),
        StateBatch(12, 12, RecordState.ARCHIVED, 1),
        StateBatch(13, 15, RecordState.ACKNOWLEDGED, 1),
        StateBatch(16, 17, RecordState.AVAILABLE, 1),
    ]
    back = SharePartition(0)
    back.restore(sp.start_offset, batches)
    assert (back.start_offset, back.end_offset) == (11, 18)
    assert back.durable_state() == batches
    got = back.acquire("b", [(10, 15), (16, 17)], now_ms=0, max_records=100)
    assert got == [AcquiredRange(11, 11, 2), AcquiredRange(16, 17, 2)]


# Properties -----------------------------------------------------------------------

MEMBERS = ("a", "b", "c")
_op = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 8)),
    st.tuples(
        st.just("ack"),
        st.sampled_from(MEMBERS),
        st.sampled_from([ACCEPT, RELEASE, REJECT, AcknowledgeType.GAP]),
    ),
    st.tuples(st.just("tick"), st.integers(0, 60)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
)
LOG_END = 40
BATCHES = [(o, min(o + 2, LOG_END - 1)) for o in range(0, LOG_END, 3)]


def _batches_from(offset: int) -> list[tuple[int, int]]:
    return [b for b in BATCHES if b[1] >= offset]


@settings(max_examples=150, deadline=None)
@given(st.lists(_op, max_size=60), st.integers(2, 4))
def test_no_record_is_held_twice_accepted_is_final_and_everything_finishes(
    ops: list[tuple], limit: int
) -> None:
    sp = SharePartition(0, lock_duration_ms=50, delivery_limit=limit, max_in_flight=12)
    now = 0
    held: dict[int, str] = {}  # the model: which member holds which offset
    accepted: set[int] = set()
    for op in ops:
        if op[0] == "acquire":
            _, member, count = op
            got = sp.acquire(member, _batches_from(sp.next_fetch_offset()), now, count)
            for r in got:
                for offset in range(r.first_offset, r.last_offset + 1):
                    assert offset not in held, "acquired by two members at once"
                    assert offset not in accepted, "an accepted record delivered again"
                    assert 1 <= r.delivery_count <= limit
                    held[offset] = member
        elif op[0] == "ack":
            _, member, kind = op
            mine = sorted(o for o, m in held.items() if m == member)
            if mine:
                offset = mine[0]
                assert _committed(sp, member, offset, offset, [kind], now) == ErrorCode.none
                del held[offset]
                if kind == ACCEPT:
                    accepted.add(offset)
        elif op[0] == "tick":
            now += op[1]
            sp.expire_locks(now)
            held = {o: m for o, m in held.items() if sp.holder_of(o) == m}
        else:
            sp.release_member(op[1])
            held = {o: m for o, m in held.items() if m != op[1]}
        for offset, member in held.items():
            assert sp.holder_of(offset) == member
        assert sp.in_flight() <= 12
    # Drain: one member accepts whatever it gets, locks expiring in between.
    for _ in range(LOG_END * (limit + 1)):
        now += 100
        sp.expire_locks(now)
        got = sp.acquire("z", _batches_from(sp.next_fetch_offset()), now, 5)
        for r in got:
            for offset in range(r.first_offset, r.last_offset + 1):
                assert offset not in accepted
                _committed(sp, "z", offset, offset, [ACCEPT], now)
                accepted.add(offset)
        if sp.start_offset == LOG_END:
            break
    assert sp.start_offset == sp.end_offset == LOG_END  # each accepted or archived


# __share_group_state records and the share group assignor ---------------------------


def test_share_state_records_round_trip_and_updates_apply_over_the_snapshot() -> None:
    import uuid

    from strom.coordinator.share_state import (
        UPDATE_KEY_TYPE,
        ShareKey,
        ShareState,
        apply_update,
        decode_key,
        decode_snapshot,
        encode_key,
        encode_snapshot,
        encode_update,
    )

    key = ShareKey("group-é", uuid.uuid4(), 7)
    assert decode_key(encode_key(key)) == (0, key)
    assert decode_key(encode_key(key, UPDATE_KEY_TYPE)) == (UPDATE_KEY_TYPE, key)
    state = ShareState(
        100,
        [StateBatch(100, 104, 0, 1), StateBatch(105, 105, 4, 5)],
        snapshot_epoch=3,
        state_epoch=1,
        leader_epoch=2,
        create_timestamp=1234,
    )
    raw = encode_snapshot(state, write_timestamp=5678)
    # int16 version, 3 int32 epochs, 3 int64s, a compact array of 2, empty tags
    assert raw[:2] == b"\x00\x00" and raw[38] == 3 and raw[-1] == 0
    back = decode_snapshot(raw)
    assert back == state
    apply_update(back, encode_update(4, 2, 102, [StateBatch(102, 103, 2, 1)]))
    assert back.start_offset == 102
    assert back.batches == [
        StateBatch(102, 103, 2, 1),
        StateBatch(104, 104, 0, 1),
        StateBatch(105, 105, 4, 5),
    ]


def test_share_assignor_shares_partitions_when_members_outnumber_them() -> None:
    from strom.coordinator.share_group import share_assign

    subs = {m: {"t"} for m in ("m1", "m2", "m3")}
    assert share_assign(subs, {"t": 1}) == {m: {"t": {0}} for m in subs}
    spread = share_assign(subs, {"t": 5})
    assert sorted(p for a in spread.values() for p in a["t"]) == [0, 1, 2, 3, 4]
    assert sorted(len(a["t"]) for a in spread.values()) == [1, 2, 2]
    two = share_assign(subs, {"t": 2})
    assert sorted(p for a in two.values() for p in a["t"]) == [0, 0, 1]


def test_a_failed_state_write_rolls_its_acknowledgements_back() -> None:
    """As Kafka's SharePartition: the records are the member's again, with their lock
    deadline, and are delivered again once it passes; the window waits for the write."""
    sp = SharePartition(0, lock_duration_ms=100, delivery_limit=5)
    sp.acquire("a", [(0, 5)], now_ms=0, max_records=10)
    assert sp.acknowledge("a", 0, 1, [ACCEPT], now_ms=10) == ErrorCode.none
    assert sp.acknowledge("a", 2, 4, [ACCEPT, RELEASE, REJECT], now_ms=10) == ErrorCode.none
    assert sp.state_of(0) == RecordState.ACKNOWLEDGED
    assert sp.start_offset == 0  # not past unsettled acknowledgements
    assert sp.durable_start() == 3  # what the write carries
    assert sp.durable_state()[0] == StateBatch(3, 3, int(RecordState.AVAILABLE), 1)
    changes = sp.take_changes()
    sp.mark_stored()
    assert sp.settle(changes, committed=False)
    assert [sp.holder_of(o) for o in range(6)] == ["a"] * 6
    assert sp.dirty  # the truth is written again
    assert sp.acquire("b", [(0, 5)], now_ms=50, max_records=10) == []
    assert sp.next_deadline() == 100
    assert sp.expire_locks(100) == 6
    assert sp.acquire("b", [(0, 5)], now_ms=100, max_records=10) == [AcquiredRange(0, 5, 2)]


def test_a_committed_write_moves_the_window_and_a_stale_rollback_is_ignored() -> None:
    sp = SharePartition(0, lock_duration_ms=100)
    sp.acquire("a", [(0, 3)], now_ms=0, max_records=10)
    assert sp.acknowledge("a", 0, 1, [RELEASE], now_ms=0) == ErrorCode.none
    first = sp.take_changes()
    assert sp.acquire("b", [(0, 3)], now_ms=1, max_records=10) == [AcquiredRange(0, 1, 2)]
    assert sp.acknowledge("a", 2, 3, [ACCEPT], now_ms=1) == ErrorCode.none
    second = sp.take_changes()
    # The release's write failed, but b holds the records since: they stay b's.
    assert not sp.settle(first, committed=False)
    assert [sp.holder_of(o) for o in range(2)] == ["b", "b"]
    sp.mark_stored()
    assert not sp.settle(second, committed=True)
    assert not sp.dirty  # the write carried the start that the window now reaches
    assert _committed(sp, "b", 0, 1, [ACCEPT], now_ms=2) == ErrorCode.none
    assert (sp.start_offset, sp.in_flight()) == (4, 0)
