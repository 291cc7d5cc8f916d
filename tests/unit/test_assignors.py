"""The KIP-848 server-side assignors: complete, balanced, sticky where they should be."""

from __future__ import annotations

import random

import pytest

from strom.coordinator.assignors import assignor_name, range_assign, uniform_assign


def _flatten(assignment: dict[str, dict[str, set[int]]]) -> list[tuple[str, int]]:
    return sorted((t, p) for topics in assignment.values() for t, ps in topics.items() for p in ps)


def test_range_gives_contiguous_ranges_by_member_id() -> None:
    subs = {"b": {"t"}, "a": {"t"}, "c": {"t"}}
    assert range_assign(subs, {"t": 7}, {}) == {
        "a": {"t": {0, 1, 2}},
        "b": {"t": {3, 4}},
        "c": {"t": {5, 6}},
    }


def test_uniform_keeps_what_it_can_when_a_member_joins() -> None:
    before = uniform_assign({"a": {"t"}, "b": {"t"}}, {"t": 6}, {})
    after = uniform_assign({"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": 6}, before)
    assert sorted(len(ps["t"]) for ps in after.values()) == [2, 2, 2]
    kept = sum(len(after[m]["t"] & before[m]["t"]) for m in ("a", "b"))
    assert kept == 4  # only the two partitions the newcomer needs moved


@pytest.mark.parametrize("seed", range(20))
def test_uniform_is_complete_and_balanced(seed: int) -> None:
    rng = random.Random(seed)
    topics = {f"t{i}": rng.randint(1, 12) for i in range(rng.randint(1, 4))}
    members = [f"m{i}" for i in range(rng.randint(1, 7))]
    homogeneous = rng.random() < 0.5
    subs = {
        m: set(topics)
        if homogeneous
        else set(rng.sample(sorted(topics), rng.randint(1, len(topics))))
        for m in members
    }
    result = uniform_assign(subs, topics, {})
    wanted = sorted(
        (t, p) for t in topics if any(t in s for s in subs.values()) for p in range(topics[t])
    )
    assert _flatten(result) == wanted  # every partition once
    for member, assigned in result.items():
        assert set(assigned) <= subs[member]
    if homogeneous:
        loads = [sum(len(ps) for ps in a.values()) for a in result.values()]
        assert max(loads) - min(loads) <= 1


def test_assignor_names_accept_kafka_class_names() -> None:
    assert assignor_name("org.apache.kafka.coordinator.group.assignor.UniformAssignor") == "uniform"
    assert assignor_name("range") == "range"
