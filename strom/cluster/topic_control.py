"""The active controller's topics, after Kafka's ReplicationControlManager: create them
(names, configs, striped rack-aware placement or the assignment asked for), delete them,
add partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from strom.cluster.controller_api import (
    ControllerError,
    ControllerResult,
    CreateTopicResult,
    DeleteTopicResult,
    NewTopic,
)
from strom.cluster.controller_core import ControllerCore
from strom.cluster.image import (
    ConfigResourceType,
    TopicImage,
)
from strom.cluster.metadata import InvalidTopicError, collides, validate_topic_name
from strom.cluster.placement import PlacementError, place
from strom.cluster.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from strom.config import (
    ConfigError,
    validate_topic_configs,
)
from strom.protocol.errors import ErrorCode


class TopicControl(ControllerCore):
    """CreateTopics, DeleteTopics and CreatePartitions."""

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> ControllerResult[list[CreateTopicResult]]:
        """CreateTopics: one result per entry, in order; records only for successes."""
        counts: dict[str, int] = {}
        for topic in topics:
            counts[topic.name] = counts.get(topic.name, 0) + 1
        records: list[MetadataRecord] = []
        results: list[CreateTopicResult] = []
        planned: list[str] = []
        for topic in topics:
            if counts[topic.name] > 1:
                results.append(
                    CreateTopicResult(
                        topic.name, ErrorCode.invalid_request, "Duplicate topic name."
                    )
                )
                continue
            try:
                topic_records, result = self._plan_topic(topic, planned)
            except ControllerError as exc:
                results.append(CreateTopicResult(topic.name, exc.code, exc.message))
                continue
            planned.append(topic.name)
            results.append(result)
            if not validate_only:
                self._emit(records, topic_records)
        return self._result(records, results)

    def _plan_topic(
        self, topic: NewTopic, planned: Sequence[str]
    ) -> tuple[list[MetadataRecord], CreateTopicResult]:
        name = topic.name
        try:
            validate_topic_name(name)
        except InvalidTopicError as exc:
            raise ControllerError(ErrorCode.invalid_topic_exception, str(exc)) from None
        if name in self._image.topics:
            raise ControllerError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        for other in [*self._image.topics, *planned]:
            if collides(name, other):
                raise ControllerError(
                    ErrorCode.invalid_topic_exception,
                    f"Topic '{name}' collides with existing topic: {other}",
                )
        configs = self._check_new_topic_configs(topic.configs)
        if topic.assignments:
            if topic.replication_factor != -1:
                raise ControllerError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but replication "
                    "factor was not set to -1.",
                )
            if topic.num_partitions != -1:
                raise ControllerError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but numPartitions "
                    "was not set to -1.",
                )
            assignments = self._check_assignments(topic.assignments, None, 0)
        else:
            rf = topic.replication_factor
            if rf < -1 or rf == 0:
                raise ControllerError(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            count = topic.num_partitions
            if count < -1 or count == 0:
                raise ControllerError(
                    ErrorCode.invalid_partitions,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            if count == -1:
                count = self.config.num_partitions
            if rf == -1:
                rf = self.config.default_replication_factor
            assignments = self._place(count, rf)
        topic_id = self._new_topic_id()
        records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
        records += [
            ConfigRecord(
                resource_type=int(ConfigResourceType.TOPIC), resource_name=name, name=k, value=v
            )
            for k, v in sorted(configs.items())
        ]
        for index, replicas in enumerate(assignments):
            records.append(self._new_partition(topic_id, index, replicas))
        result = CreateTopicResult(
            name,
            topic_id=topic_id,
            num_partitions=len(assignments),
            replication_factor=len(assignments[0]),
            configs=configs,
        )
        return records, result

    def _check_new_topic_configs(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        try:
            validate_topic_configs(configs)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
        return {k: v for k, v in configs.items() if v is not None}

    def _new_topic_id(self) -> uuid.UUID:
        while True:
            topic_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
            if topic_id not in self._image.topics_by_id:
                return topic_id

    def _usable_brokers(self) -> list[tuple[int, str | None]]:
        return [(b.broker_id, b.rack) for b in self._image.brokers.values() if b.active]

    def _place(self, count: int, replication_factor: int) -> list[list[int]]:
        try:
            return place(self._usable_brokers(), count, replication_factor, self.rng)
        except PlacementError as exc:
            raise ControllerError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {replication_factor} time(s): {exc}",
            ) from None

    def _check_assignments(
        self, assignments: Mapping[int, Sequence[int]], rf: int | None, first: int
    ) -> list[list[int]]:
        """Kafka's validateManualPartitionAssignment for partitions first, first+1, ..."""
        out: list[list[int]] = []
        for offset in range(len(assignments)):
            index = first + offset
            if index not in assignments:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "partitions should be a consecutive 0-based integer sequence",
                )
            replicas = list(assignments[index])
            if not replicas:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "The manual partition assignment includes an empty replica list.",
                )
            for broker_id in sorted(replicas):
                if broker_id not in self._image.brokers:
                    raise ControllerError(
                        ErrorCode.invalid_replica_assignment,
                        f"The manual partition assignment includes broker {broker_id}, but no "
                        "such broker is registered.",
                    )
            if len(set(replicas)) != len(replicas):
                dup = next(b for b in replicas if replicas.count(b) > 1)
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes the broker {dup} more than once.",
                )
            if rf is not None and len(replicas) != rf:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes a partition with "
                    f"{len(replicas)} replica(s), but this is not consistent with previous "
                    f"partitions, which have {rf} replica(s).",
                )
            rf = len(replicas)
            if not any(self._image.is_active(b) for b in replicas):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"All brokers specified in the manual partition assignment for partition "
                    f"{index} are fenced or in controlled shutdown.",
                )
            out.append(replicas)
        return out

    def _new_partition(
        self, topic_id: uuid.UUID, index: int, replicas: Sequence[int]
    ) -> PartitionRecord:
        isr = tuple(b for b in replicas if self._image.is_active(b))
        if not isr:
            raise ControllerError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {len(replicas)} time(s): All brokers "
                "are currently fenced or in controlled shutdown.",
            )
        return PartitionRecord(
            partition_id=index,
            topic_id=topic_id,
            replicas=tuple(replicas),
            isr=isr,
            leader=isr[0],
            leader_epoch=0,
            partition_epoch=0,
            directories=tuple(self._default_dir(b) for b in replicas),
        )

    def _resolve(self, name: str) -> TopicImage:
        topic = self._image.topics.get(name)
        if topic is None:
            raise ControllerError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        return topic

    def delete_topics(
        self, names: Sequence[str] = (), ids: Sequence[uuid.UUID] = ()
    ) -> ControllerResult[list[DeleteTopicResult]]:
        """DeleteTopics by name and by id: one result per entry (names first)."""
        records: list[MetadataRecord] = []
        results: list[DeleteTopicResult] = []
        wanted: list[tuple[str | None, uuid.UUID | None, TopicImage | None]] = []
        wanted += [(n, None, self._image.topics.get(n)) for n in names]
        wanted += [(None, i, self._image.topics_by_id.get(i)) for i in ids]
        removed: set[uuid.UUID] = set()
        for name, topic_id, topic in wanted:
            if topic is None:
                code = (
                    ErrorCode.unknown_topic_id
                    if name is None
                    else ErrorCode.unknown_topic_or_partition
                )
                message = (
                    "This server does not host this topic ID."
                    if name is None
                    else "This server does not host this topic-partition."
                )
                results.append(DeleteTopicResult(name, topic_id, code, message))
                continue
            if not self.config.delete_topic_enable:
                results.append(
                    DeleteTopicResult(
                        topic.name,
                        topic.topic_id,
                        ErrorCode.topic_deletion_disabled,
                        "Topic deletion is disabled.",
                    )
                )
                continue
            if topic.topic_id not in removed:
                removed.add(topic.topic_id)
                self._emit(records, [RemoveTopicRecord(topic_id=topic.topic_id)])
            results.append(DeleteTopicResult(topic.name, topic.topic_id))
        return self._result(records, results)

    def create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> ControllerResult[None]:
        """CreatePartitions for one topic: grow it to ``count`` partitions."""
        topic = self._resolve(name)
        current = len(topic.partitions)
        if count == current:
            raise ControllerError(
                ErrorCode.invalid_partitions, f"Topic already has {current} partition(s)."
            )
        if count < current:
            raise ControllerError(
                ErrorCode.invalid_partitions,
                f"The topic {name} currently has {current} partition(s); {count} would not "
                "be an increase.",
            )
        additional = count - current
        rf = len(topic.partitions[0].replicas) if 0 in topic.partitions else 1
        if assignments is not None:
            if len(assignments) != additional:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(assignments)} assignment(s) were specified.",
                )
            placed = self._check_assignments(
                {current + i: a for i, a in enumerate(assignments)}, rf, current
            )
        else:
            placed = self._place(additional, rf)
        new = [self._new_partition(topic.topic_id, current + i, r) for i, r in enumerate(placed)]
        records: list[MetadataRecord] = []
        if not validate_only:
            self._emit(records, new)
        return self._result(records, None)
