"""Replica placement for new partitions, in the manner of Kafka's StripedReplicaPlacer.

Owns ``place``: given the usable brokers (id, rack) and a partition count and
replication factor, the replica list of each partition. Brokers are grouped by rack
(no rack is a rack of its own); each partition takes its first replica, the leader,
from the next rack in turn, and its other replicas from the following racks, so a
partition's replicas are on distinct racks while racks remain, and leaders and replicas
spread evenly. Each rack's brokers are sorted and start at a random offset; once every
broker has led one partition, racks and brokers are reshuffled so that the next round
does not repeat the same lists. Deterministic for a given ``random.Random``.

Differs from Kafka: only unfenced brokers that are not shutting down are passed in
(the caller decides), so a replication factor above their count is refused rather than
placed on fenced brokers.

Does not own which brokers are usable or the records that follow (``quorum_controller``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable


class PlacementError(ValueError):
    """The placement cannot be made; the message is Kafka's InvalidReplicationFactor text."""


class _BrokerList:
    def __init__(self) -> None:
        self.brokers: list[int] = []
        self.index = 0
        self.offset = 0
        self.epoch = 0

    def initialize(self, rng: random.Random) -> None:
        if self.brokers:
            self.brokers.sort()
            self.offset = rng.randrange(len(self.brokers))

    def next(self, epoch: int) -> int:
        if not self.brokers:
            return -1
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.index >= len(self.brokers):
            return -1
        broker = self.brokers[(self.index + self.offset) % len(self.brokers)]
        self.index += 1
        return broker


class _RackList:
    def __init__(self, rng: random.Random, brokers: Iterable[tuple[int, str | None]]) -> None:
        self.rng = rng
        self.racks: dict[str | None, _BrokerList] = {}
        for broker_id, rack in brokers:
            self.racks.setdefault(rack, _BrokerList()).brokers.append(broker_id)
        for broker_list in self.racks.values():
            broker_list.initialize(rng)
        # Kafka sorts the rack names with "no rack" first.
        self.names: list[str | None] = sorted(self.racks, key=lambda n: (n is not None, n or ""))
        self.count = sum(len(b.brokers) for b in self.racks.values())
        self.epoch = 0
        self.offset = rng.randrange(len(self.names)) if self.names else 0

    def shuffle(self) -> None:
        self.rng.shuffle(self.names)
        for broker_list in self.racks.values():
            self.rng.shuffle(broker_list.brokers)

    def place(self, replication_factor: int) -> list[int]:
        if self.epoch == self.count and self.count > 1:
            self.shuffle()
            self.epoch = 0
        if self.offset == len(self.names):
            self.offset = 0
        replicas: list[int] = []
        first_rack = self.offset
        while True:
            broker = self.racks[self.names[first_rack]].next(self.epoch)
            if broker >= 0:
                replicas.append(broker)
                break
            first_rack = (first_rack + 1) % len(self.names)
        rack_index = self.offset
        for _ in range(1, replication_factor):
            broker = -1
            while broker < 0:
                if rack_index == first_rack:
                    first_rack = -1
                else:
                    broker = self.racks[self.names[rack_index]].next(self.epoch)
                rack_index = (rack_index + 1) % len(self.names)
            replicas.append(broker)
        self.epoch += 1
        self.offset += 1
        return replicas


def place(
    brokers: Iterable[tuple[int, str | None]],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
) -> list[list[int]]:
    """The replicas of ``num_partitions`` new partitions over ``brokers`` (id, rack)."""
    racks = _RackList(rng, brokers)
    if replication_factor <= 0:
        raise PlacementError(
            f"Invalid replication factor {replication_factor}: "
            "the replication factor must be positive."
        )
    if racks.count == 0:
        raise PlacementError("All brokers are currently fenced.")
    if replication_factor > racks.count:
        raise PlacementError(
            f"The target replication factor of {replication_factor} cannot be reached "
            f"because only {racks.count} broker(s) are registered."
        )
    return [racks.place(replication_factor) for _ in range(num_partitions)]
