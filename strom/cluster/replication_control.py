"""The active controller's replicas, after Kafka's ReplicationControlManager: leader
elections (ElectLeaders, the preferred replica's imbalance), ISR changes asked by
partition leaders (AlterPartition) and partition reassignments
(AlterPartitionReassignments, ListPartitionReassignments).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from strom.cluster.controller_api import (
    AlterPartitionEntry,
    AlterPartitionResult,
    ControllerError,
    ControllerResult,
    ElectionResult,
    ElectionType,
    IsrMember,
    OngoingReassignment,
    ReassignmentResult,
)
from strom.cluster.controller_core import ControllerCore
from strom.cluster.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    PartitionState,
)
from strom.cluster.partition_change import (
    LEADER_RECOVERED,
    LEADER_RECOVERING,
    Election,
)
from strom.cluster.records import (
    MetadataRecord,
    PartitionChangeRecord,
)
from strom.protocol.errors import ErrorCode


class ReplicationControl(ControllerCore):
    """Elections, AlterPartition and reassignments."""

    def elect_leaders(
        self,
        partitions: Sequence[tuple[str, int]] | None,
        election_type: int = ElectionType.PREFERRED,
    ) -> ControllerResult[list[ElectionResult]]:
        """ElectLeaders; ``None`` means every partition (Kafka's null topic list)."""
        records: list[MetadataRecord] = []
        results: list[ElectionResult] = []
        if partitions is None:
            partitions = [(t.name, i) for t, i, _ in self._image.all_partitions()]
        for name, index in partitions:
            topic = self._image.topics.get(name)
            state = topic.partitions.get(index) if topic else None
            if topic is None or state is None:
                results.append(
                    ElectionResult(
                        name,
                        index,
                        ErrorCode.unknown_topic_or_partition,
                        "This server does not host this topic-partition.",
                    )
                )
                continue
            preferred = election_type == ElectionType.PREFERRED
            if preferred and state.leader == state.preferred_leader:
                results.append(ElectionResult(name, index, ErrorCode.election_not_needed))
                continue
            if not preferred and state.leader != NO_LEADER:
                results.append(ElectionResult(name, index, ErrorCode.election_not_needed))
                continue
            record = self.partition_change(
                topic,
                index,
                election=Election.PREFERRED if preferred else Election.UNCLEAN,
            ).build()
            if record is None:
                code = (
                    ErrorCode.preferred_leader_not_available
                    if preferred
                    else ErrorCode.eligible_leaders_not_available
                )
                results.append(ElectionResult(name, index, code))
                continue
            self._emit(records, [record])
            results.append(ElectionResult(name, index))
        return self._result(records, results)

    def imbalanced_partitions(self, max_ratio: float) -> list[tuple[str, int]]:
        """Partitions to give back to their preferred (first) replica, as Kafka's
        auto.leader.rebalance does: for each broker, the partitions it prefers but does
        not lead, when they are more than ``max_ratio`` of those it prefers; only those
        whose preferred replica is in the ISR and may lead."""
        preferred: dict[int, int] = {}
        elsewhere: dict[int, list[tuple[str, int]]] = {}
        for topic, index, state in self._image.all_partitions():
            if not state.replicas:
                continue
            first = state.replicas[0]
            preferred[first] = preferred.get(first, 0) + 1
            if state.leader != first and first in state.isr and self._image.is_active(first):
                elsewhere.setdefault(first, []).append((topic.name, index))
        chosen: list[tuple[str, int]] = []
        for broker_id, partitions in sorted(elsewhere.items()):
            if len(partitions) / preferred[broker_id] > max_ratio:
                chosen += partitions
        return chosen

    def alter_partition_reassignments(
        self,
        wanted: Sequence[tuple[str, int, Sequence[int] | None]],
        *,
        allow_replication_factor_change: bool = True,
    ) -> ControllerResult[list[ReassignmentResult]]:
        """Start (target replicas) or cancel (None) the reassignment of each partition.

        As Kafka's ReplicationControlManager: the partition's replicas become the target
        followed by the current ones leaving, with the leaving ones listed as removing and
        the new ones as adding; the leader's AlterPartition completes it once every adding
        replica has joined the ISR (at once when nothing is added). A new target for a
        partition already moving starts over from its original replicas. Cancelling
        reverts to the original replicas.
        """
        records: list[MetadataRecord] = []
        results: list[ReassignmentResult] = []
        for name, index, target in wanted:
            try:
                record = self._reassign(name, index, target, allow_replication_factor_change)
            except ControllerError as exc:
                results.append(ReassignmentResult(name, index, exc.code, str(exc)))
                continue
            if record is not None:
                self._emit(records, [record])
            results.append(ReassignmentResult(name, index))
        return self._result(records, results)

    def _reassign(
        self, name: str, index: int, target: Sequence[int] | None, allow_rf_change: bool
    ) -> PartitionChangeRecord | None:
        topic = self._image.topics.get(name)
        state = topic.partitions.get(index) if topic is not None else None
        if topic is None or state is None:
            raise ControllerError(
                ErrorCode.unknown_topic_or_partition, f"Partition {name}-{index} does not exist."
            )
        moving = bool(state.adding_replicas or state.removing_replicas)
        original = [r for r in state.replicas if r not in state.adding_replicas]
        if target is None:
            if not moving:
                raise ControllerError(
                    ErrorCode.no_reassignment_in_progress,
                    f"No reassignment of {name}-{index} is in progress.",
                )
            isr = [r for r in state.isr if r in original]
            builder = self.partition_change(topic, index)
            builder.set_target_replicas(original).set_target_reassignment([], [])
            if isr:
                builder.set_target_isr(isr)
            return builder.build()
        target = list(target)
        if not target:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment, "The replica list must not be empty."
            )
        if len(set(target)) != len(target):
            raise ControllerError(
                ErrorCode.invalid_replica_assignment, f"Duplicate replicas in {target}."
            )
        unknown = [b for b in target if b not in self._image.brokers]
        if unknown:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment, f"Unknown broker(s) {unknown} in {target}."
            )
        if not allow_rf_change and len(target) != len(original):
            raise ControllerError(
                ErrorCode.invalid_replication_factor,
                f"The replication factor of {name}-{index} would change from "
                f"{len(original)} to {len(target)}.",
            )
        adding = [r for r in target if r not in original]
        removing = [r for r in original if r not in target]
        merged = target + removing
        builder = self.partition_change(topic, index)
        builder.set_target_replicas(merged).set_target_reassignment(removing, adding)
        if moving:
            isr = [r for r in state.isr if r in merged]
            if isr:
                builder.set_target_isr(isr)
        return builder.build()

    def list_partition_reassignments(
        self, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[OngoingReassignment]:
        """The partitions whose reassignment is under way (all, or among ``partitions``)."""
        if partitions is None:
            candidates = [(t.name, i, s) for t, i, s in self._image.all_partitions()]
        else:
            candidates = []
            for name, index in partitions:
                topic = self._image.topics.get(name)
                state = topic.partitions.get(index) if topic is not None else None
                if state is not None:
                    candidates.append((name, index, state))
        return [
            OngoingReassignment(
                name, index, state.replicas, state.adding_replicas, state.removing_replicas
            )
            for name, index, state in candidates
            if state.adding_replicas or state.removing_replicas
        ]

    def alter_partition(
        self,
        broker_id: int,
        broker_epoch: int,
        partitions: Sequence[AlterPartitionEntry],
        *,
        version: int = 3,
    ) -> ControllerResult[list[AlterPartitionResult]]:
        """AlterPartition (KIP-497) from a partition leader: one result per entry, in order.

        As Kafka's ReplicationControlManager.alterPartition: a sender whose broker epoch is
        not the registered one is refused as a whole (STALE_BROKER_EPOCH); each entry is
        checked on its own (``_alter_partition_error``) and, when valid, its new ISR and
        leader recovery state go through the PartitionChangeBuilder (partition epoch + 1, a
        reassignment completed when its adding replicas are all in the ISR). A success
        answers the partition's state after the change, or as it stands when nothing had
        to change. ``version`` is the request's: below 2 the answers are the older
        protocol's (UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED,
        FENCED_LEADER_EPOCH for UNKNOWN_TOPIC_ID, INELIGIBLE_REPLICA, NEW_LEADER_ELECTED).
        """
        broker = self._image.brokers.get(broker_id)
        if broker is None:
            raise ControllerError(
                ErrorCode.stale_broker_epoch,
                f"No broker registration found for broker id {broker_id}",
            )
        if broker.epoch != broker_epoch:
            raise ControllerError(
                ErrorCode.stale_broker_epoch,
                f"Expected broker epoch {broker.epoch}, but got broker epoch {broker_epoch}",
            )
        records: list[MetadataRecord] = []
        results = [self._alter_one_partition(broker_id, e, version, records) for e in partitions]
        return self._result(records, results)

    def _alter_one_partition(
        self,
        broker_id: int,
        entry: AlterPartitionEntry,
        version: int,
        records: list[MetadataRecord],
    ) -> AlterPartitionResult:
        if isinstance(entry.topic, uuid.UUID):
            topic = self._image.topics_by_id.get(entry.topic)
        else:
            topic = self._image.topics.get(entry.topic)
        if topic is None:
            code = (
                ErrorCode.unknown_topic_id if version > 1 else ErrorCode.unknown_topic_or_partition
            )
            return AlterPartitionResult(entry.topic, entry.partition, code)
        state = topic.partitions.get(entry.partition)
        error = self._alter_partition_error(broker_id, state, entry, version)
        if state is None or error != ErrorCode.none:
            return AlterPartitionResult(entry.topic, entry.partition, error)
        election = Election.UNCLEAN if self._unclean_allowed(topic.name) else Election.ONLINE
        record = (
            self.partition_change(topic, entry.partition, election=election)
            .set_target_isr([m.broker_id for m in entry.new_isr])
            .set_target_recovery_state(entry.leader_recovery_state)
            .build()
        )
        if record is not None:
            self._emit(records, [record])
            state = self._image.topics_by_id[topic.topic_id].partitions[entry.partition]
            if record.leader not in (broker_id, NO_LEADER_CHANGE):
                # Completing a reassignment moved the leadership away from the sender: the
                # change is made, and the sender learns it must refresh its metadata.
                code = (
                    ErrorCode.new_leader_elected if version > 1 else ErrorCode.fenced_leader_epoch
                )
                return AlterPartitionResult(entry.topic, entry.partition, code)
        return AlterPartitionResult(
            entry.topic,
            entry.partition,
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            isr=state.isr,
            partition_epoch=state.partition_epoch,
            leader_recovery_state=state.leader_recovery_state,
        )

    def _alter_partition_error(
        self,
        broker_id: int,
        state: PartitionState | None,
        entry: AlterPartitionEntry,
        version: int,
    ) -> ErrorCode:
        """Kafka's validateAlterPartitionData, in its order.

        Every member of the new ISR, not only those it adds, must be eligible (Kafka's
        ineligibleReplicasForIsr). A leader recovery state other than 0 or 1 is
        INVALID_REQUEST here, where Kafka fails the whole request.
        """
        if state is None:
            return ErrorCode.unknown_topic_or_partition
        # Epochs ahead of ours: this controller is likely behind, no longer active.
        if entry.leader_epoch > state.leader_epoch or entry.partition_epoch > state.partition_epoch:
            return ErrorCode.not_controller
        if entry.leader_epoch < state.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if broker_id != state.leader:
            return ErrorCode.invalid_request
        if entry.partition_epoch < state.partition_epoch:
            return ErrorCode.invalid_update_version
        isr = [m.broker_id for m in entry.new_isr]
        if any(r < 0 or r not in state.replicas for r in isr) or len(set(isr)) != len(isr):
            return ErrorCode.invalid_request
        if state.leader not in isr:
            return ErrorCode.invalid_request
        recovery = entry.leader_recovery_state
        if recovery not in (LEADER_RECOVERED, LEADER_RECOVERING):
            return ErrorCode.invalid_request
        if recovery == LEADER_RECOVERING and len(isr) > 1:
            return ErrorCode.invalid_request
        if state.leader_recovery_state == LEADER_RECOVERED and recovery == LEADER_RECOVERING:
            return ErrorCode.invalid_request
        if any(not self._eligible_isr_member(m) for m in entry.new_isr):
            return (
                ErrorCode.ineligible_replica if version > 1 else ErrorCode.operation_not_attempted
            )
        return ErrorCode.none

    def _eligible_isr_member(self, member: IsrMember) -> bool:
        """Registered, unfenced, not shutting down, and (when given) of the same epoch."""
        broker = self._image.brokers.get(member.broker_id)
        if broker is None or broker.in_controlled_shutdown or broker.fenced:
            return False
        return member.broker_epoch == -1 or member.broker_epoch == broker.epoch
