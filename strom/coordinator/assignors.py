"""Server-side partition assignors for KIP-848 consumer groups: uniform and range.

Both take each member's subscribed topics, the partition count of every
subscribed topic, and the current assignment, and return the target
assignment as {member: {topic: {partitions}}}.

- uniform: spreads all subscribed partitions so that member loads differ by at
  most one where the subscriptions allow it, keeping partitions where they are
  whenever that keeps the balance (sticky), as Kafka's UniformAssignor aims to.
- range: per topic, the subscribed members sorted by member id get contiguous
  ranges of partitions, the first ones one more when it does not divide evenly
  (Kafka's RangeAssignor without its co-partitioning stickiness).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

Assignment = dict[str, dict[str, set[int]]]


def _subscribers(
    subscriptions: Mapping[str, set[str]], topics: Mapping[str, int]
) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {topic: [] for topic in topics}
    for member in sorted(subscriptions):
        for topic in subscriptions[member]:
            if topic in found:
                found[topic].append(member)
    return found


def range_assign(
    subscriptions: Mapping[str, set[str]],
    topics: Mapping[str, int],
    current: Mapping[str, Mapping[str, set[int]]],
) -> Assignment:
    result: Assignment = {member: {} for member in subscriptions}
    for topic, members in _subscribers(subscriptions, topics).items():
        if not members:
            continue
        count = topics[topic]
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            if size:
                result[member][topic] = set(range(start, start + size))
            start += size
    return result


def uniform_assign(
    subscriptions: Mapping[str, set[str]],
    topics: Mapping[str, int],
    current: Mapping[str, Mapping[str, set[int]]],
) -> Assignment:
    subscribers = _subscribers(subscriptions, topics)
    partitions = [
        (topic, p) for topic in sorted(topics) if subscribers[topic] for p in range(topics[topic])
    ]
    previous_owner: dict[tuple[str, int], str] = {}
    for member, owned in current.items():
        if member in subscriptions:
            for topic, ps in owned.items():
                for p in ps:
                    previous_owner[(topic, p)] = member
    # A member's fair share: its part of every topic it subscribes to, rounded up.
    fair = {
        member: math.ceil(
            sum(
                (Fraction(topics[t], len(subscribers[t])) for t in subs if subscribers.get(t)),
                Fraction(0),
            )
        )
        for member, subs in subscriptions.items()
    }
    load = dict.fromkeys(subscriptions, 0)
    owner: dict[tuple[str, int], str] = {}
    # Most constrained partitions first, so narrow subscriptions are served.
    ordered = sorted(partitions, key=lambda tp: (len(subscribers[tp[0]]), tp))
    for tp in ordered:
        previous = previous_owner.get(tp)
        if previous is not None and load[previous] < fair[previous]:
            chosen = previous
        else:
            chosen = min(subscribers[tp[0]], key=lambda m: (load[m], m))
        owner[tp] = chosen
        load[chosen] += 1
    # Even out what the first pass left uneven (heterogeneous subscriptions).
    for _ in range(len(partitions)):
        moved = False
        for tp in ordered:
            holder = owner[tp]
            lightest = min(subscribers[tp[0]], key=lambda m: (load[m], m))
            if load[holder] > load[lightest] + 1:
                owner[tp] = lightest
                load[holder] -= 1
                load[lightest] += 1
                moved = True
        if not moved:
            break
    result: Assignment = {member: {} for member in subscriptions}
    for (topic, p), member in owner.items():
        result[member].setdefault(topic, set()).add(p)
    return result


ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}


def assignor_name(configured: str) -> str:
    """Short name of an assignor given as Kafka's class name or as the short name."""
    lowered = configured.rsplit(".", 1)[-1].lower()
    return lowered.removesuffix("assignor")
