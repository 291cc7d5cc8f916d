"""The active controller's logic: admin and broker requests in, metadata records out.

Owns ``QuorumController``, sans-I/O and driven with explicit ``now_ms``: each operation
checks a request against the controller's view of the cluster and returns a
``ControllerResult`` (the records to append to ``__cluster_metadata``, in order and as
one batch, and the reply), or raises ``ControllerError`` carrying a Kafka error code.
As Kafka's QuorumController does, the records are applied at once to a speculative
image (``controller.image``) at the offsets they are expected to take
(``next_offset`` on), so that the next request sees them before they commit; when a
proposal fails or leadership is lost, ``reset(committed_image, ...)`` goes back to what
the log holds. Operations that fail raise before anything is applied; ``validate_only``
applies nothing.

What it does, after Kafka's ClusterControlManager, BrokerHeartbeatManager,
ReplicationControlManager, ConfigurationControlManager and ProducerIdControlManager:
broker registration (incarnations, broker epochs = offset of the RegisterBrokerRecord,
features, new brokers fenced), heartbeats (unfence once caught up with the registration,
controlled shutdown that moves leaders away first), fencing of brokers whose session
expired (ISR shrinks that never empty the ISR, new leaders from what remains), topics
(create with striped rack-aware placement, delete, add partitions), configs of topics and
brokers (AlterConfigs and IncrementalAlterConfigs), producer id blocks, leader
elections, ISR changes asked by partition leaders (AlterPartition), partition
reassignments (AlterPartitionReassignments, ListPartitionReassignments), and the records that
start a cluster or carry over a single node's ``strom-metadata.json``
(``bootstrap_records``, ``records_from_legacy``).

The API's types live in ``controller_api`` and the start-up records in ``bootstrap``;
both are re-exported here.

Does not own: Raft or the log (the caller appends and commits), sockets, clocks, the
records' encoding (``records``), replay (``image``), placement (``placement``), the
election rules (``partition_change``) or the rules of config changes (``config_control``).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from strom.cluster.bootstrap import bootstrap_records, records_from_legacy
from strom.cluster.config_control import apply_config_ops, config_records, current_configs
from strom.cluster.controller_api import (
    LONG_MAX,
    MINIMUM_KRAFT_METADATA_VERSION,
    AlterPartitionEntry,
    AlterPartitionResult,
    ConfigOp,
    ControllerConfig,
    ControllerError,
    ControllerResult,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionResult,
    ElectionType,
    HeartbeatReply,
    IsrMember,
    NewTopic,
    OngoingReassignment,
    ReassignmentResult,
    T,
)
from strom.cluster.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerRegistration,
    ConfigResourceType,
    Endpoint,
    MetadataImage,
    PartitionState,
    TopicImage,
)
from strom.cluster.metadata import InvalidTopicError, collides, validate_topic_name
from strom.cluster.partition_change import (
    LEADER_RECOVERED,
    LEADER_RECOVERING,
    Election,
    PartitionChangeBuilder,
)
from strom.cluster.placement import PlacementError, place
from strom.cluster.records import (
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    METADATA_VERSION_FEATURE,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from strom.config import (
    ConfigError,
    validate_topic_configs,
)
from strom.protocol.errors import ErrorCode

__all__ = [
    "AlterPartitionEntry",
    "AlterPartitionResult",
    "ConfigOp",
    "ControllerConfig",
    "ControllerError",
    "ControllerResult",
    "CreateTopicResult",
    "DeleteTopicResult",
    "ElectionResult",
    "ElectionType",
    "HeartbeatReply",
    "IsrMember",
    "NewTopic",
    "OngoingReassignment",
    "QuorumController",
    "ReassignmentResult",
    "bootstrap_records",
    "records_from_legacy",
]


@dataclass
class _Session:
    """Kafka's BrokerHeartbeatState: kept by the active controller only, not in the log."""

    last_contact_ms: int
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1


class QuorumController:
    """The active controller over a speculative image (see the module docstring)."""

    def __init__(
        self,
        image: MetadataImage,
        config: ControllerConfig,
        *,
        now_ms: int = 0,
        next_offset: int | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.rng = rng or random.Random()
        self._image = image.copy()
        self._next_offset = image.last_offset + 1 if next_offset is None else next_offset
        self._sessions: dict[int, _Session] = {}
        self._start_sessions(now_ms)

    # State -------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        """The speculative image: committed records and those proposed since."""
        return self._image

    @property
    def next_offset(self) -> int:
        """The offset the next record this controller proposes is expected to take."""
        return self._next_offset

    def reset(
        self, committed_image: MetadataImage, *, now_ms: int, next_offset: int | None = None
    ) -> None:
        """Drop what was proposed and not committed (a failed append, lost leadership).

        ``next_offset`` is where the log will take the next record (after a leader's
        control records, say); by default the one after the image's last offset.
        """
        self._image = committed_image.copy()
        self._next_offset = committed_image.last_offset + 1 if next_offset is None else next_offset
        self._start_sessions(now_ms)

    def _start_sessions(self, now_ms: int) -> None:
        # Kafka's activation registers every broker with a fresh session.
        self._sessions = {b: _Session(last_contact_ms=now_ms) for b in self._image.brokers}

    def _emit(self, out: list[MetadataRecord], records: Iterable[MetadataRecord]) -> None:
        for record in records:
            self._image.apply(record, self._next_offset)
            self._next_offset += 1
            out.append(record)

    def _result(self, records: list[MetadataRecord], response: T) -> ControllerResult[T]:
        return ControllerResult(tuple(records), response)

    # Brokers -----------------------------------------------------------------------

    def register_broker(
        self,
        broker_id: int,
        incarnation_id: uuid.UUID,
        *,
        listeners: Sequence[Endpoint],
        now_ms: int,
        cluster_id: str | None = None,
        rack: str | None = None,
        features: Mapping[str, tuple[int, int]] | None = None,
        log_dirs: Sequence[uuid.UUID] = (),
    ) -> ControllerResult[int]:
        """BrokerRegistration: the records and the broker's epoch."""
        expected = self.config.cluster_id
        if expected is not None and cluster_id is not None and cluster_id != expected:
            raise ControllerError(
                ErrorCode.inconsistent_cluster_id,
                f"Expected cluster ID {expected}, but got cluster ID {cluster_id}",
            )
        existing = self._image.brokers.get(broker_id)
        if (
            existing is not None
            and existing.incarnation_id != incarnation_id
            and self._has_valid_session(existing, now_ms)
        ):
            raise ControllerError(
                ErrorCode.duplicate_broker_registration,
                "Another broker is registered with that broker id.",
            )
        declared = dict(features or {})
        checked = dict(declared)
        checked.setdefault(
            METADATA_VERSION_FEATURE,
            (MINIMUM_KRAFT_METADATA_VERSION, MINIMUM_KRAFT_METADATA_VERSION),
        )
        for name, level in sorted(self._image.features.items()):
            low, high = checked.get(name, (0, 0))
            if level != 0 and not low <= level <= high:
                raise ControllerError(
                    ErrorCode.unsupported_version,
                    f"Unable to register because the broker does not support finalized "
                    f"version {level} of {name}. The broker wants a version between "
                    f"{low} and {high}, inclusive.",
                )
        if len(set(log_dirs)) != len(log_dirs):
            raise ControllerError(ErrorCode.invalid_registration, "Duplicate directory ID")
        records: list[MetadataRecord] = []
        same = existing is not None and existing.incarnation_id == incarnation_id
        if existing is not None and not same and not existing.fenced:
            # The old incarnation lost its session without being fenced yet: move its
            # leaderships and ISR places away before the new incarnation appears.
            self._emit(records, self._fence_partition_changes(broker_id))
        record = RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=existing.epoch if same and existing else self._next_offset,
            end_points=tuple(
                BrokerEndpoint(
                    name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                )
                for e in listeners
            ),
            features=tuple(
                BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                for n, (lo, hi) in sorted(checked.items())
            ),
            rack=rack,
            fenced=existing.fenced if same and existing else True,
            in_controlled_shutdown=existing.in_controlled_shutdown if same and existing else False,
            log_dirs=tuple(log_dirs),
        )
        self._emit(records, [record])
        if not same:
            self._sessions[broker_id] = _Session(last_contact_ms=now_ms)
        return self._result(records, record.broker_epoch)

    def end_session(self, broker_id: int) -> None:
        """Forget a broker's session: known to be dead (this very node, restarted), it
        need not wait out its session timeout to register again."""
        self._sessions.pop(broker_id, None)

    def _has_valid_session(self, broker: BrokerRegistration, now_ms: int) -> bool:
        session = self._sessions.get(broker.broker_id)
        if session is None or broker.fenced:
            return False
        return session.last_contact_ms + self.config.broker_session_timeout_ms >= now_ms

    def _check_broker_epoch(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        broker = self._image.brokers.get(broker_id)
        if broker is None:
            raise ControllerError(
                ErrorCode.broker_id_not_registered, f"Broker {broker_id} is not registered."
            )
        if broker.epoch != broker_epoch:
            raise ControllerError(
                ErrorCode.stale_broker_epoch,
                f"Expected broker epoch {broker.epoch}, but got broker epoch {broker_epoch}",
            )
        return broker

    def broker_heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        *,
        now_ms: int,
        want_fence: bool = False,
        want_shutdown: bool = False,
    ) -> ControllerResult[HeartbeatReply]:
        """BrokerHeartbeat, with Kafka's fenced / unfenced / controlled-shutdown states."""
        broker = self._check_broker_epoch(broker_id, broker_epoch)
        session = self._sessions.setdefault(broker_id, _Session(last_contact_ms=now_ms))
        records: list[MetadataRecord] = []
        shutting_down = session.controlled_shutdown_offset >= 0
        fenced = broker.fenced
        in_controlled_shutdown = broker.in_controlled_shutdown
        shut_down_now = False
        if shutting_down:
            if fenced:
                shut_down_now = True
            elif not self._image.partitions_led_by(broker_id) and (
                session.controlled_shutdown_offset <= self._lowest_active_offset()
            ):
                self._emit(records, self._fence(broker_id))
                fenced = shut_down_now = True
        elif fenced:
            if want_shutdown:
                shut_down_now = True
            elif not want_fence and current_metadata_offset >= broker.registration_offset:
                self._emit(records, self._unfence(broker_id))
                fenced = False
        elif want_fence:
            self._emit(records, self._fence(broker_id))
            fenced = True
            shut_down_now = want_shutdown
        elif want_shutdown:
            if self._image.partitions_led_by(broker_id):
                self._emit(records, self._enter_controlled_shutdown(broker_id))
                in_controlled_shutdown = True
                session.controlled_shutdown_offset = self._next_offset - 1
            else:
                self._emit(records, self._fence(broker_id))
                fenced = shut_down_now = True
        session.last_contact_ms = now_ms
        session.metadata_offset = current_metadata_offset
        reply = HeartbeatReply(
            is_caught_up=current_metadata_offset >= broker.registration_offset,
            is_fenced=fenced,
            in_controlled_shutdown=in_controlled_shutdown and not shut_down_now,
            should_shut_down=shut_down_now,
        )
        return self._result(records, reply)

    def _lowest_active_offset(self) -> int:
        offsets = [
            s.metadata_offset
            for b, s in self._sessions.items()
            if self._image.is_active(b) and s.controlled_shutdown_offset < 0
        ]
        return min(offsets, default=LONG_MAX)

    def fence_expired(self, now_ms: int) -> ControllerResult[list[int]]:
        """Fence unfenced brokers whose last heartbeat is older than the session timeout."""
        records: list[MetadataRecord] = []
        fenced: list[int] = []
        timeout = self.config.broker_session_timeout_ms
        for broker_id in sorted(self._sessions):
            broker = self._image.brokers.get(broker_id)
            session = self._sessions[broker_id]
            if broker is None or broker.fenced:
                continue
            if session.last_contact_ms + timeout < now_ms:
                self._emit(records, self._fence(broker_id))
                fenced.append(broker_id)
        return self._result(records, fenced)

    def next_fence_deadline_ms(self) -> int | None:
        """When ``fence_expired`` has something to do next (None: no unfenced broker)."""
        deadlines = [
            s.last_contact_ms + self.config.broker_session_timeout_ms + 1
            for b, s in self._sessions.items()
            if self._image.is_unfenced(b)
        ]
        return min(deadlines, default=None)

    def unregister_broker(self, broker_id: int) -> ControllerResult[None]:
        broker = self._image.brokers.get(broker_id)
        if broker is None:
            raise ControllerError(
                ErrorCode.broker_id_not_registered, f"Broker ID {broker_id} is not registered."
            )
        records: list[MetadataRecord] = []
        self._emit(records, self._fence_partition_changes(broker_id))
        self._emit(
            records, [UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker.epoch)]
        )
        self._sessions.pop(broker_id, None)
        return self._result(records, None)

    def _fence(self, broker_id: int) -> list[MetadataRecord]:
        """Kafka's handleBrokerFenced: ISR and leader changes, then the fence."""
        changes: list[MetadataRecord] = list(self._fence_partition_changes(broker_id))
        broker = self._image.brokers[broker_id]
        if not broker.fenced:
            changes.append(
                BrokerRegistrationChangeRecord(
                    broker_id=broker_id, broker_epoch=broker.epoch, fenced=1
                )
            )
        return changes

    def _fence_partition_changes(self, broker_id: int) -> list[MetadataRecord]:
        def acceptable(replica: int) -> bool:
            return replica != broker_id and self._image.is_active(replica)

        return self._leader_and_isr_updates(
            self._image.partitions_with_isr_member(broker_id), acceptable, remove=broker_id
        )

    def _unfence(self, broker_id: int) -> list[MetadataRecord]:
        """Kafka's handleBrokerUnfenced: the unfence, then leaders for leaderless partitions."""
        broker = self._image.brokers[broker_id]
        records: list[MetadataRecord] = [
            BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=broker.epoch, fenced=-1
            )
        ]

        def acceptable(replica: int) -> bool:
            return replica == broker_id or self._image.is_active(replica)

        records += self._leader_and_isr_updates(self._image.leaderless_partitions(), acceptable)
        return records

    def _enter_controlled_shutdown(self, broker_id: int) -> list[MetadataRecord]:
        broker = self._image.brokers[broker_id]
        records: list[MetadataRecord] = []
        if not broker.in_controlled_shutdown:
            records.append(
                BrokerRegistrationChangeRecord(
                    broker_id=broker_id, broker_epoch=broker.epoch, in_controlled_shutdown=1
                )
            )
        records += self._fence_partition_changes(broker_id)
        return records

    def _leader_and_isr_updates(
        self,
        partitions: Iterable[tuple[TopicImage, int, PartitionState]],
        acceptable: Callable[[int], bool],
        remove: int | None = None,
    ) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        for topic, index, state in partitions:
            builder = PartitionChangeBuilder(
                state, topic.topic_id, index, acceptable, default_dir=self._default_dir
            )
            if self._unclean_allowed(topic.name):
                builder.election = Election.UNCLEAN
            if remove is not None:
                builder.set_target_isr([r for r in state.isr if r != remove])
            record = builder.build()
            if record is not None:
                records.append(record)
        return records

    def _unclean_allowed(self, topic: str) -> bool:
        """unclean.leader.election.enable: the topic's, else the cluster-wide dynamic
        default, else this controller's own static setting."""
        value = self._image.topic_configs(topic).get("unclean.leader.election.enable")
        if value is None:
            value = self._image.broker_configs(None).get("unclean.leader.election.enable")
        if value is None:
            return self.config.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def _default_dir(self, broker_id: int) -> uuid.UUID:
        """Kafka's ClusterControlManager.defaultDir."""
        broker = self._image.brokers.get(broker_id)
        if broker is None:
            return DIRECTORY_UNASSIGNED
        if not broker.log_dirs:
            return DIRECTORY_MIGRATING
        if len(broker.log_dirs) == 1:
            return broker.log_dirs[0]
        return DIRECTORY_UNASSIGNED

    # Topics ------------------------------------------------------------------------

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

    # Configs -----------------------------------------------------------------------

    def alter_configs(
        self,
        resource_type: int,
        resource_name: str,
        configs: Mapping[str, str | None],
        *,
        validate_only: bool = False,
    ) -> ControllerResult[None]:
        """AlterConfigs: the resource's overrides become exactly ``configs``."""
        current = current_configs(self._image, resource_type, resource_name)
        wanted = {k: v for k, v in configs.items() if v is not None}
        return self._write_configs(resource_type, resource_name, current, wanted, validate_only)

    def incremental_alter_configs(
        self,
        resource_type: int,
        resource_name: str,
        changes: Sequence[tuple[str, int, str | None]],
        *,
        validate_only: bool = False,
    ) -> ControllerResult[None]:
        """IncrementalAlterConfigs: (name, ConfigOp, value) applied in order."""
        current = current_configs(self._image, resource_type, resource_name)
        wanted = apply_config_ops(self._image, resource_type, current, changes)
        return self._write_configs(resource_type, resource_name, current, wanted, validate_only)

    def _write_configs(
        self,
        resource_type: int,
        resource_name: str,
        current: dict[str, str],
        wanted: dict[str, str],
        validate_only: bool,
    ) -> ControllerResult[None]:
        changes = config_records(resource_type, resource_name, current, wanted)
        records: list[MetadataRecord] = []
        if not validate_only:
            self._emit(records, changes)
        return self._result(records, None)

    # Producer ids ------------------------------------------------------------------

    def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int
    ) -> ControllerResult[tuple[int, int]]:
        """AllocateProducerIds: (first id, count) of a new block."""
        broker = self._image.brokers.get(broker_id)
        if broker is None or broker.epoch != broker_epoch:
            raise ControllerError(
                ErrorCode.stale_broker_epoch,
                f"Expected broker epoch {broker.epoch if broker else None}, "
                f"but got broker epoch {broker_epoch}",
            )
        size = self.config.producer_id_block_size
        start = max(self._image.next_producer_id, 0)
        if start > LONG_MAX - size:
            raise ControllerError(ErrorCode.unknown_server_error, "Exhausted all producerIds.")
        records: list[MetadataRecord] = []
        self._emit(
            records,
            [
                ProducerIdsRecord(
                    broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=start + size
                )
            ],
        )
        return self._result(records, (start, size))

    # Elections ---------------------------------------------------------------------

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

    # Reassignments (KIP-455) --------------------------------------------------------

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

    # ISR changes -------------------------------------------------------------------

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

    def partition_change(
        self,
        topic: TopicImage,
        index: int,
        *,
        election: Election = Election.ONLINE,
        acceptable: Callable[[int], bool] | None = None,
    ) -> PartitionChangeBuilder:
        """A builder over the speculative state; leaders must be active brokers by default."""
        return PartitionChangeBuilder(
            topic.partitions[index],
            topic.topic_id,
            index,
            acceptable or self._image.is_active,
            election=election,
            default_dir=self._default_dir,
        )

    def propose(self, records: Iterable[MetadataRecord]) -> ControllerResult[None]:
        """Apply records built elsewhere (a PartitionChangeBuilder's) to the speculative image."""
        out: list[MetadataRecord] = []
        self._emit(out, records)
        return self._result(out, None)
