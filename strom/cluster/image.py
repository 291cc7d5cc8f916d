"""The metadata image: what every node knows of the cluster, replayed from ``__cluster_metadata``.

Owns ``MetadataImage``, the state built by applying Kafka's metadata records in log
order (``apply(record, offset)``): finalized features (metadata.version), broker and
controller registrations (incarnation, broker epoch, endpoints, rack, fenced, controlled
shutdown), topics by name and by id with their partitions (replicas, ISR, leader, leader
and partition epochs, reassignment state, log directories), config overrides per
resource (TOPIC 2 and BROKER 4; broker "" is the cluster-wide default), the producer id
block, ACLs, SCRAM credentials, client quotas, and the offset and epoch of the last
record applied. ``to_records()`` gives the records that rebuild an equal image (what a
snapshot holds), and the read helpers answer Metadata, DescribeCluster and
DescribeConfigs.

A PartitionChangeRecord is merged as Kafka's ``PartitionRegistration.merge`` does: null
fields are unchanged, leader -2 is unchanged, -1 is no leader, any leader field bumps the
leader epoch, every change bumps the partition epoch. Fencing a broker changes its
registration only: the controller writes the ISR and leader changes as their own records.
Replaying is strict: a record naming a topic, partition or broker the image does not
hold raises ``MetadataImageError``, as Kafka's replay does.

Does not own: the records' bytes (``strom.cluster.records``), which records to write
(``strom.cluster.quorum_controller``), the log or snapshots on disk (``strom.storage``).
Metadata transactions (Begin/End/AbortTransactionRecord) are buffered by whoever reads
the log; here they are no-ops.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any

from strom.cluster.records import (
    DIRECTORY_MIGRATING,
    METADATA_VERSION_FEATURE,
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ControllerEndpoint,
    ControllerFeature,
    EndTransactionRecord,
    EntityData,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)

NO_LEADER = -1
NO_LEADER_CHANGE = -2


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type ids for the resources the image keeps configs of."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32


# Kafka's SecurityProtocol ids, as RegisterBrokerRecord carries them.
SECURITY_PROTOCOL_IDS: dict[str, int] = {
    "PLAINTEXT": 0,
    "SSL": 1,
    "SASL_PLAINTEXT": 2,
    "SASL_SSL": 3,
}
SECURITY_PROTOCOL_NAMES: dict[int, str] = {v: k for k, v in SECURITY_PROTOCOL_IDS.items()}


class MetadataImageError(RuntimeError):
    """A record that does not fit the image it is applied to (the log is inconsistent)."""


@dataclass(frozen=True)
class Endpoint:
    """One listener of a broker or controller."""

    name: str
    host: str
    port: int
    security_protocol: int = 0

    @property
    def security_protocol_name(self) -> str:
        return SECURITY_PROTOCOL_NAMES.get(self.security_protocol, str(self.security_protocol))


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: uuid.UUID
    epoch: int
    endpoints: tuple[Endpoint, ...] = ()
    # feature name -> (min supported, max supported)
    features: tuple[tuple[str, int, int], ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()
    # The offset the RegisterBrokerRecord was applied at (a snapshot's offset when it
    # came from one); the controller's catch-up rule reads it. Not part of equality.
    registration_offset: int = field(default=-1, compare=False)

    @property
    def active(self) -> bool:
        """Kafka's isActive: registered, unfenced, not in controlled shutdown."""
        return not self.fenced and not self.in_controlled_shutdown

    def endpoint(self, listener_name: str) -> Endpoint | None:
        for endpoint in self.endpoints:
            if endpoint.name == listener_name:
                return endpoint
        return None

    def supported(self, feature: str) -> tuple[int, int] | None:
        for name, low, high in self.features:
            if name == feature:
                return low, high
        return None

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(
            broker_id=self.broker_id,
            incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch,
            end_points=tuple(
                BrokerEndpoint(
                    name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                )
                for e in self.endpoints
            ),
            features=tuple(
                BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                for n, lo, hi in self.features
            ),
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
            log_dirs=self.log_dirs,
        )


@dataclass(frozen=True)
class ControllerRegistration:
    controller_id: int
    incarnation_id: uuid.UUID
    endpoints: tuple[Endpoint, ...] = ()
    features: tuple[tuple[str, int, int], ...] = ()
    zk_migration_ready: bool = False


@dataclass(frozen=True)
class PartitionState:
    """One partition as the metadata log describes it (Kafka's PartitionRegistration)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    directories: tuple[uuid.UUID, ...] = ()
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionState:
        return cls(
            replicas=tuple(record.replicas),
            isr=tuple(record.isr),
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            removing_replicas=tuple(record.removing_replicas),
            adding_replicas=tuple(record.adding_replicas),
            leader_recovery_state=record.leader_recovery_state,
            directories=_directories(record.directories, len(record.replicas)),
            elr=record.eligible_leader_replicas,
            last_known_elr=record.last_known_elr,
        )

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRecord:
        return PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=self.replicas,
            isr=self.isr,
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader=self.leader,
            leader_recovery_state=self.leader_recovery_state,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            directories=self.directories,
            eligible_leader_replicas=self.elr,
            last_known_elr=self.last_known_elr,
        )

    def merge(self, change: PartitionChangeRecord) -> PartitionState:
        """Kafka's PartitionRegistration.merge."""
        replicas = self.replicas if change.replicas is None else tuple(change.replicas)
        if change.directories is not None:
            directories = _directories(change.directories, len(replicas))
        elif replicas != self.replicas:
            old = dict(zip(self.replicas, self.directories, strict=False))
            directories = tuple(old.get(r, DIRECTORY_MIGRATING) for r in replicas)
        else:
            directories = self.directories
        if change.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        recovery = self.leader_recovery_state
        if change.leader_recovery_state != -1:
            recovery = change.leader_recovery_state
        return PartitionState(
            replicas=replicas,
            isr=self.isr if change.isr is None else tuple(change.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=self.removing_replicas
            if change.removing_replicas is None
            else tuple(change.removing_replicas),
            adding_replicas=self.adding_replicas
            if change.adding_replicas is None
            else tuple(change.adding_replicas),
            leader_recovery_state=recovery,
            directories=directories,
            elr=self.elr
            if change.eligible_leader_replicas is None
            else change.eligible_leader_replicas,
            last_known_elr=self.last_known_elr
            if change.last_known_elr is None
            else change.last_known_elr,
        )

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)


def _directories(directories: Iterable[uuid.UUID], replicas: int) -> tuple[uuid.UUID, ...]:
    # Kafka's defaultToMigrating: a record without directories means every replica's
    # directory is yet to be known.
    found = tuple(directories)
    return found if found else (DIRECTORY_MIGRATING,) * replicas


@dataclass
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState] = field(default_factory=dict)

    def copy(self) -> TopicImage:
        return TopicImage(self.name, self.topic_id, dict(self.partitions))


QuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass
class MetadataImage:
    """The cluster as of ``last_offset``; mutable, ``copy()`` for a separate one."""

    features: dict[str, int] = field(default_factory=dict)
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    controllers: dict[int, ControllerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicImage] = field(default_factory=dict, compare=False)
    # (ConfigResourceType, resource name) -> config name -> value
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    # The first producer id of the next block to hand out (-1: none handed out yet).
    next_producer_id: int = -1
    acls: dict[uuid.UUID, AccessControlEntryRecord] = field(default_factory=dict)
    # Bumped by every ACL change: an authorizer built from ``acls`` knows when to catch up.
    acl_version: int = field(default=0, compare=False)
    scram_credentials: dict[tuple[str, int], UserScramCredentialRecord] = field(
        default_factory=dict
    )
    client_quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    last_offset: int = -1
    last_epoch: int = -1

    # Building ----------------------------------------------------------------------

    @classmethod
    def from_records(
        cls, records: Iterable[MetadataRecord], offset: int = -1, epoch: int = -1
    ) -> MetadataImage:
        """An image from records that all carry one offset (a snapshot's)."""
        image = cls()
        for record in records:
            image.apply(record, offset, epoch)
        image.last_offset, image.last_epoch = offset, epoch
        return image

    def copy(self) -> MetadataImage:
        topics = {name: topic.copy() for name, topic in self.topics.items()}
        return MetadataImage(
            features=dict(self.features),
            brokers=dict(self.brokers),
            controllers=dict(self.controllers),
            topics=topics,
            topics_by_id={t.topic_id: t for t in topics.values()},
            configs={key: dict(values) for key, values in self.configs.items()},
            next_producer_id=self.next_producer_id,
            acls=dict(self.acls),
            acl_version=self.acl_version,
            scram_credentials=dict(self.scram_credentials),
            client_quotas={key: dict(values) for key, values in self.client_quotas.items()},
            last_offset=self.last_offset,
            last_epoch=self.last_epoch,
        )

    def apply(self, record: MetadataRecord, offset: int, epoch: int | None = None) -> None:
        """Replay one record read at ``offset`` (in leader epoch ``epoch`` if known)."""
        handler = _APPLY.get(type(record))
        if handler is None:
            raise MetadataImageError(f"cannot apply {type(record).__name__}")
        handler(self, record, offset)
        self.last_offset = offset
        if epoch is not None:
            self.last_epoch = epoch

    def apply_all(
        self, records: Iterable[MetadataRecord], base_offset: int, epoch: int | None = None
    ) -> int:
        """Replay records at consecutive offsets from ``base_offset``; the next offset."""
        offset = base_offset
        for record in records:
            self.apply(record, offset, epoch)
            offset += 1
        return offset

    # Replay, one method per record type ------------------------------------------------

    def _register_broker(self, record: RegisterBrokerRecord, offset: int) -> None:
        self.brokers[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            epoch=record.broker_epoch,
            endpoints=tuple(
                Endpoint(e.name, e.host, e.port, e.security_protocol) for e in record.end_points
            ),
            features=tuple(
                (f.name, f.min_supported_version, f.max_supported_version) for f in record.features
            ),
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            log_dirs=tuple(record.log_dirs),
            registration_offset=offset,
        )

    def _broker_at_epoch(self, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise MetadataImageError(f"{what}: broker {broker_id} is not registered")
        if broker.epoch != epoch:
            raise MetadataImageError(
                f"{what}: broker {broker_id} has epoch {broker.epoch}, the record {epoch}"
            )
        return broker

    def _unregister_broker(self, record: UnregisterBrokerRecord, offset: int) -> None:
        self._broker_at_epoch(record.broker_id, record.broker_epoch, "UnregisterBrokerRecord")
        del self.brokers[record.broker_id]

    def _fence_broker(self, record: FenceBrokerRecord, offset: int) -> None:
        broker = self._broker_at_epoch(record.id, record.epoch, "FenceBrokerRecord")
        self.brokers[record.id] = replace(broker, fenced=True)

    def _unfence_broker(self, record: UnfenceBrokerRecord, offset: int) -> None:
        broker = self._broker_at_epoch(record.id, record.epoch, "UnfenceBrokerRecord")
        self.brokers[record.id] = replace(broker, fenced=False)

    def _broker_change(self, record: BrokerRegistrationChangeRecord, offset: int) -> None:
        broker = self._broker_at_epoch(
            record.broker_id, record.broker_epoch, "BrokerRegistrationChangeRecord"
        )
        if record.fenced not in (-1, 0, 1) or record.in_controlled_shutdown not in (0, 1):
            raise MetadataImageError(f"bad BrokerRegistrationChangeRecord {record}")
        changes: dict[str, Any] = {}
        if record.fenced:
            changes["fenced"] = record.fenced == 1
        if record.in_controlled_shutdown:
            changes["in_controlled_shutdown"] = True
        if record.log_dirs:
            changes["log_dirs"] = tuple(record.log_dirs)
        self.brokers[record.broker_id] = replace(broker, **changes)

    def _register_controller(self, record: RegisterControllerRecord, offset: int) -> None:
        self.controllers[record.controller_id] = ControllerRegistration(
            controller_id=record.controller_id,
            incarnation_id=record.incarnation_id,
            endpoints=tuple(
                Endpoint(e.name, e.host, e.port, e.security_protocol) for e in record.end_points
            ),
            features=tuple(
                (f.name, f.min_supported_version, f.max_supported_version) for f in record.features
            ),
            zk_migration_ready=record.zk_migration_ready,
        )

    def _topic(self, record: TopicRecord, offset: int) -> None:
        if record.name in self.topics or record.topic_id in self.topics_by_id:
            raise MetadataImageError(f"TopicRecord for existing topic {record.name}")
        topic = TopicImage(record.name, record.topic_id)
        self.topics[record.name] = topic
        self.topics_by_id[record.topic_id] = topic

    def _topic_of(self, topic_id: uuid.UUID, what: str) -> TopicImage:
        topic = self.topics_by_id.get(topic_id)
        if topic is None:
            raise MetadataImageError(f"{what} for unknown topic id {topic_id}")
        return topic

    def _partition(self, record: PartitionRecord, offset: int) -> None:
        topic = self._topic_of(record.topic_id, "PartitionRecord")
        topic.partitions[record.partition_id] = PartitionState.from_record(record)

    def _partition_change(self, record: PartitionChangeRecord, offset: int) -> None:
        topic = self._topic_of(record.topic_id, "PartitionChangeRecord")
        current = topic.partitions.get(record.partition_id)
        if current is None:
            raise MetadataImageError(
                f"PartitionChangeRecord for unknown partition {topic.name}-{record.partition_id}"
            )
        topic.partitions[record.partition_id] = current.merge(record)

    def _remove_topic(self, record: RemoveTopicRecord, offset: int) -> None:
        topic = self._topic_of(record.topic_id, "RemoveTopicRecord")
        del self.topics_by_id[topic.topic_id]
        del self.topics[topic.name]
        self.configs.pop((ConfigResourceType.TOPIC, topic.name), None)

    def _config(self, record: ConfigRecord, offset: int) -> None:
        key = (record.resource_type, record.resource_name)
        values = self.configs.setdefault(key, {})
        if record.value is None:
            values.pop(record.name, None)
        else:
            values[record.name] = record.value
        if not values:
            del self.configs[key]

    def _feature_level(self, record: FeatureLevelRecord, offset: int) -> None:
        if record.feature_level == 0:
            self.features.pop(record.name, None)
        else:
            self.features[record.name] = record.feature_level

    def _producer_ids(self, record: ProducerIdsRecord, offset: int) -> None:
        if record.next_producer_id < self.next_producer_id:
            raise MetadataImageError(
                f"ProducerIdsRecord moves the next producer id back from "
                f"{self.next_producer_id} to {record.next_producer_id}"
            )
        self.next_producer_id = record.next_producer_id

    def _acl(self, record: AccessControlEntryRecord, offset: int) -> None:
        self.acls[record.id] = record
        self.acl_version += 1

    def _remove_acl(self, record: RemoveAccessControlEntryRecord, offset: int) -> None:
        if self.acls.pop(record.id, None) is None:
            raise MetadataImageError(f"RemoveAccessControlEntryRecord for unknown ACL {record.id}")
        self.acl_version += 1

    def _scram(self, record: UserScramCredentialRecord, offset: int) -> None:
        self.scram_credentials[(record.name, record.mechanism)] = record

    def _remove_scram(self, record: RemoveUserScramCredentialRecord, offset: int) -> None:
        self.scram_credentials.pop((record.name, record.mechanism), None)

    def _client_quota(self, record: ClientQuotaRecord, offset: int) -> None:
        entity: QuotaEntity = tuple(
            sorted(
                ((e.entity_type, e.entity_name) for e in record.entity),
                key=lambda te: (te[0], te[1] is None, te[1] or ""),
            )
        )
        values = self.client_quotas.setdefault(entity, {})
        if record.remove:
            values.pop(record.key, None)
        else:
            values[record.key] = record.value
        if not values:
            del self.client_quotas[entity]

    def _nothing(self, record: MetadataRecord, offset: int) -> None:
        return None

    # Snapshot ------------------------------------------------------------------------

    def to_records(self) -> list[MetadataRecord]:
        """Records that rebuild this image, in the order Kafka writes a snapshot."""
        out: list[MetadataRecord] = []
        names = sorted(self.features, key=lambda n: (n != METADATA_VERSION_FEATURE, n))
        out += [FeatureLevelRecord(name=n, feature_level=self.features[n]) for n in names]
        out += [self.brokers[b].to_record() for b in sorted(self.brokers)]
        for controller_id in sorted(self.controllers):
            c = self.controllers[controller_id]
            out.append(
                RegisterControllerRecord(
                    controller_id=c.controller_id,
                    incarnation_id=c.incarnation_id,
                    zk_migration_ready=c.zk_migration_ready,
                    end_points=tuple(
                        ControllerEndpoint(
                            name=e.name,
                            host=e.host,
                            port=e.port,
                            security_protocol=e.security_protocol,
                        )
                        for e in c.endpoints
                    ),
                    features=tuple(
                        ControllerFeature(
                            name=n, min_supported_version=lo, max_supported_version=hi
                        )
                        for n, lo, hi in c.features
                    ),
                )
            )
        for name in sorted(self.topics):
            topic = self.topics[name]
            out.append(TopicRecord(name=topic.name, topic_id=topic.topic_id))
            for index in sorted(topic.partitions):
                out.append(topic.partitions[index].to_record(topic.topic_id, index))
        for (resource_type, resource_name), values in sorted(self.configs.items()):
            for key in sorted(values):
                out.append(
                    ConfigRecord(
                        resource_type=resource_type,
                        resource_name=resource_name,
                        name=key,
                        value=values[key],
                    )
                )
        for entity, quotas in sorted(self.client_quotas.items(), key=lambda kv: repr(kv[0])):
            for key in sorted(quotas):
                out.append(
                    ClientQuotaRecord(
                        entity=tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity),
                        key=key,
                        value=quotas[key],
                    )
                )
        if self.next_producer_id >= 0:
            out.append(
                ProducerIdsRecord(
                    broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id
                )
            )
        out += [self.acls[i] for i in sorted(self.acls)]
        out += [self.scram_credentials[k] for k in sorted(self.scram_credentials)]
        return out

    # Reads ---------------------------------------------------------------------------

    @property
    def metadata_version(self) -> int:
        return self.features.get(METADATA_VERSION_FEATURE, 0)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def live_brokers(self) -> list[BrokerRegistration]:
        """Unfenced brokers by id: those a Metadata response lists."""
        return [self.brokers[b] for b in sorted(self.brokers) if not self.brokers[b].fenced]

    def is_unfenced(self, broker_id: int) -> bool:
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced

    def is_active(self, broker_id: int) -> bool:
        """Unfenced and not in controlled shutdown: may lead and be placed on."""
        broker = self.brokers.get(broker_id)
        return broker is not None and broker.active

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.topics_by_id.get(topic_id)
        return topic.name if topic else None

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        found = self.topics.get(topic)
        return found.partitions.get(partition) if found else None

    def all_partitions(self) -> Iterator[tuple[TopicImage, int, PartitionState]]:
        for name in sorted(self.topics):
            topic = self.topics[name]
            for index in sorted(topic.partitions):
                yield topic, index, topic.partitions[index]

    def partitions_led_by(self, broker_id: int) -> list[tuple[TopicImage, int, PartitionState]]:
        return [p for p in self.all_partitions() if p[2].leader == broker_id]

    def partitions_with_isr_member(
        self, broker_id: int
    ) -> list[tuple[TopicImage, int, PartitionState]]:
        return [p for p in self.all_partitions() if broker_id in p[2].isr]

    def leaderless_partitions(self) -> list[tuple[TopicImage, int, PartitionState]]:
        return [p for p in self.all_partitions() if p[2].leader == NO_LEADER]

    def configs_of(self, resource_type: int, name: str) -> dict[str, str]:
        """The overrides set on a resource (a copy; empty when there are none)."""
        return dict(self.configs.get((int(resource_type), name), {}))

    def topic_configs(self, name: str) -> dict[str, str]:
        return self.configs_of(ConfigResourceType.TOPIC, name)

    def group_configs(self, group_id: str) -> dict[str, str]:
        """The configs set on a group (GROUP resource, KIP-848's group configs)."""
        return self.configs_of(ConfigResourceType.GROUP, group_id)

    def broker_configs(self, broker_id: int | None) -> dict[str, str]:
        """Dynamic overrides of one broker, or of the cluster default (``None``)."""
        return self.configs_of(
            ConfigResourceType.BROKER, "" if broker_id is None else str(broker_id)
        )


_APPLY: dict[type[MetadataRecord], Callable[[MetadataImage, Any, int], None]] = {
    RegisterBrokerRecord: MetadataImage._register_broker,
    UnregisterBrokerRecord: MetadataImage._unregister_broker,
    FenceBrokerRecord: MetadataImage._fence_broker,
    UnfenceBrokerRecord: MetadataImage._unfence_broker,
    BrokerRegistrationChangeRecord: MetadataImage._broker_change,
    RegisterControllerRecord: MetadataImage._register_controller,
    TopicRecord: MetadataImage._topic,
    PartitionRecord: MetadataImage._partition,
    PartitionChangeRecord: MetadataImage._partition_change,
    RemoveTopicRecord: MetadataImage._remove_topic,
    ConfigRecord: MetadataImage._config,
    FeatureLevelRecord: MetadataImage._feature_level,
    ProducerIdsRecord: MetadataImage._producer_ids,
    AccessControlEntryRecord: MetadataImage._acl,
    RemoveAccessControlEntryRecord: MetadataImage._remove_acl,
    UserScramCredentialRecord: MetadataImage._scram,
    RemoveUserScramCredentialRecord: MetadataImage._remove_scram,
    ClientQuotaRecord: MetadataImage._client_quota,
    NoOpRecord: MetadataImage._nothing,
    BeginTransactionRecord: MetadataImage._nothing,
    EndTransactionRecord: MetadataImage._nothing,
    AbortTransactionRecord: MetadataImage._nothing,
}
