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

What it does, in parts of its own (``broker_control``, ``topic_control``,
``replication_control`` on ``controller_core``; configs and producer ids here), after
Kafka's ClusterControlManager, BrokerHeartbeatManager,
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
from collections.abc import Mapping, Sequence

from strom.cluster.bootstrap import bootstrap_records, records_from_legacy
from strom.cluster.broker_control import BrokerControl
from strom.cluster.config_control import apply_config_ops, config_records, current_configs
from strom.cluster.controller_api import (
    LONG_MAX,
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
)
from strom.cluster.image import (
    MetadataImage,
)
from strom.cluster.records import (
    MetadataRecord,
    ProducerIdsRecord,
)
from strom.cluster.replication_control import ReplicationControl
from strom.cluster.topic_control import TopicControl
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


class QuorumController(BrokerControl, TopicControl, ReplicationControl):
    """The active controller over a speculative image (see the module docstring): its
    brokers (``broker_control``), topics (``topic_control``) and replicas
    (``replication_control``) on a shared core (``controller_core``); configs and
    producer id blocks here."""

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
        self._start_sessions(now_ms)

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
