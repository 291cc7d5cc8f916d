"""Leader election and the minimal PartitionChangeRecord, as Kafka's PartitionChangeBuilder.

Owns ``PartitionChangeBuilder``: from a partition's current state, the target ISR,
replicas and reassignment lists a caller wants, and which brokers may lead, it elects a
leader and returns the smallest ``PartitionChangeRecord`` that gets there (``None`` when
nothing changes). Elections:

- ``PREFERRED``: the first replica if it is in the ISR and may lead; else the current
  leader if it still may; else the first other replica in the ISR that may.
- ``ONLINE`` (Kafka's default): the current leader if it is still in the ISR and may
  lead; else the first replica, in replica order, that is in the ISR and may lead.
- ``UNCLEAN``: as ONLINE, then any replica that may lead, with the ISR forced to that
  one replica and the leader recovery state RECOVERING.

No leader found gives -1. The ISR is never emptied (eligible leader replicas, KIP-966,
are not implemented): a target ISR that would be empty leaves the ISR as it was, so the
last replica stays in it and the partition goes leaderless. Leaving replicas out of the
replica list bumps the leader epoch (the leader field is set), and a reassignment whose
adding replicas have all joined the ISR completes (replicas and ISR lose the removing
ones).

Does not own: which partitions to change or when (``quorum_controller``), replaying the
record (``image.PartitionState.merge``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from enum import Enum

from strom.cluster.image import NO_LEADER, NO_LEADER_CHANGE, PartitionState
from strom.cluster.records import DIRECTORY_MIGRATING, PartitionChangeRecord

LEADER_RECOVERED = 0
LEADER_RECOVERING = 1


class Election(Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


class PartitionChangeBuilder:
    def __init__(
        self,
        partition: PartitionState,
        topic_id: uuid.UUID,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        *,
        election: Election = Election.ONLINE,
        default_dir: Callable[[int], uuid.UUID] | None = None,
    ) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.election = election
        self.default_dir = default_dir or (lambda _broker: DIRECTORY_MIGRATING)
        self.target_isr: list[int] = list(partition.isr)
        self.target_replicas: list[int] = list(partition.replicas)
        self.target_removing: list[int] = list(partition.removing_replicas)
        self.target_adding: list[int] = list(partition.adding_replicas)
        self.target_recovery_state = partition.leader_recovery_state

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self.target_isr = list(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self.target_replicas = list(replicas)
        return self

    def set_target_reassignment(
        self, removing: Sequence[int], adding: Sequence[int]
    ) -> PartitionChangeBuilder:
        self.target_removing = list(removing)
        self.target_adding = list(adding)
        return self

    def set_target_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self.target_recovery_state = state
        return self

    # Election ------------------------------------------------------------------------

    def _valid_leader(self, replica: int) -> bool:
        return replica in self.target_isr and self.is_acceptable_leader(replica)

    def elect(self) -> tuple[int, bool]:
        """(leader, unclean) for the targets as they stand."""
        current = self.partition.leader
        if self.election is Election.PREFERRED:
            if self.target_replicas and self._valid_leader(self.target_replicas[0]):
                return self.target_replicas[0], False
            if self._valid_leader(current):
                return current, False
            for replica in self.target_replicas[1:]:
                if self._valid_leader(replica):
                    return replica, False
            return NO_LEADER, False
        if self._valid_leader(current):
            return current, False
        for replica in self.target_replicas:
            if self._valid_leader(replica):
                return replica, False
        if self.election is Election.UNCLEAN:
            for replica in self.target_replicas:
                if self.is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    # Building ------------------------------------------------------------------------

    def _complete_reassignment(self) -> None:
        if not (self.target_removing or self.target_adding):
            return
        if any(r not in self.target_isr for r in self.target_adding):
            return
        isr = [r for r in self.target_isr if r not in self.target_removing]
        if not isr:
            return
        self.target_isr = isr
        self.target_replicas = [r for r in self.target_replicas if r not in self.target_removing]
        self.target_removing = []
        self.target_adding = []

    def build(self) -> PartitionChangeRecord | None:
        """The record that reaches the targets, or None when it would change nothing."""
        part = self.partition
        self._complete_reassignment()
        leader = NO_LEADER_CHANGE
        isr: tuple[int, ...] | None = None
        recovery = -1
        new_leader, unclean = self.elect()
        if new_leader != part.leader:
            leader = new_leader
            if unclean:
                isr = (new_leader,)
                if part.leader_recovery_state != LEADER_RECOVERING:
                    recovery = LEADER_RECOVERING
        if leader == NO_LEADER_CHANGE and any(r not in self.target_replicas for r in part.replicas):
            leader = part.leader  # a replica leaves: bump the leader epoch
        if isr is None and self.target_isr and tuple(self.target_isr) != part.isr:
            isr = tuple(self.target_isr)
        replicas: tuple[int, ...] | None = None
        directories: tuple[uuid.UUID, ...] | None = None
        if tuple(self.target_replicas) != part.replicas:
            replicas = tuple(self.target_replicas)
            old = dict(zip(part.replicas, part.directories, strict=False))
            directories = tuple(old.get(r) or self.default_dir(r) for r in replicas)
        removing = None
        if tuple(self.target_removing) != part.removing_replicas:
            removing = tuple(self.target_removing)
        adding = None
        if tuple(self.target_adding) != part.adding_replicas:
            adding = tuple(self.target_adding)
        if recovery == -1 and self.target_recovery_state != part.leader_recovery_state:
            recovery = self.target_recovery_state
        record = PartitionChangeRecord(
            partition_id=self.partition_id,
            topic_id=self.topic_id,
            isr=isr,
            leader=leader,
            replicas=replicas,
            removing_replicas=removing,
            adding_replicas=adding,
            leader_recovery_state=recovery,
            directories=directories,
        )
        if (
            isr is None
            and leader == NO_LEADER_CHANGE
            and replicas is None
            and removing is None
            and adding is None
            and recovery == -1
        ):
            return None
        return record
