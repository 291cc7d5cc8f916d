"""What the quorum controller takes and gives: its config, results, replies and errors.

Owns the plain types of ``strom.cluster.quorum_controller``'s API (``ControllerConfig``,
``ControllerResult``, ``ControllerError`` with its Kafka error code, ``NewTopic``,
AlterPartition's ``AlterPartitionEntry`` and ``IsrMember``, and the per-entry results and
replies), kept apart so that callers and the controller share them without one large
module.

Does not own any behaviour: that is ``quorum_controller``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Generic, TypeVar

from strom.cluster.records import MetadataRecord
from strom.config import BrokerConfig
from strom.protocol.errors import ErrorCode

T = TypeVar("T")

LONG_MAX = 2**63 - 1
# A broker that does not say which metadata.version it supports is taken to support
# only the first KRaft one, as Kafka does (MetadataVersion.MINIMUM_KRAFT_VERSION).
MINIMUM_KRAFT_METADATA_VERSION = 1


class ControllerError(Exception):
    """A request the controller refuses: a Kafka error code and its message."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ControllerResult(Generic[T]):
    """Records to append (as one batch, in this order) and the reply to send."""

    records: tuple[MetadataRecord, ...]
    response: T


@dataclass(frozen=True)
class ControllerConfig:
    cluster_id: str | None = None
    default_replication_factor: int = 1
    num_partitions: int = 1
    broker_session_timeout_ms: int = 9000
    min_insync_replicas: int = 1
    producer_id_block_size: int = 1000
    delete_topic_enable: bool = True
    # The controller's own unclean.leader.election.enable: the default under a topic's and
    # the dynamic broker configs, as Kafka's controller takes its static config.
    unclean_leader_election_enable: bool = False

    @classmethod
    def from_broker_config(
        cls, config: BrokerConfig, cluster_id: str | None = None
    ) -> ControllerConfig:
        return cls(
            cluster_id=cluster_id if cluster_id is not None else config["cluster.id"],
            default_replication_factor=config["default.replication.factor"],
            num_partitions=config["num.partitions"],
            broker_session_timeout_ms=config["broker.session.timeout.ms"],
            min_insync_replicas=config["min.insync.replicas"],
            delete_topic_enable=config["delete.topic.enable"],
            unclean_leader_election_enable=config["unclean.leader.election.enable"],
        )


class ConfigOp(IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ElectionType(IntEnum):
    """ElectLeaders election types."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class NewTopic:
    """One CreateTopics entry. -1 means the broker default; assignments exclude both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class CreateTopicResult:
    name: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeleteTopicResult:
    name: str | None
    topic_id: uuid.UUID | None
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True)
class HeartbeatReply:
    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


@dataclass(frozen=True)
class ElectionResult:
    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True)
class ReassignmentResult:
    """One partition's answer to AlterPartitionReassignments."""

    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True)
class OngoingReassignment:
    """A partition whose replicas are moving (ListPartitionReassignments)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True)
class IsrMember:
    """One member of an ISR a leader asks for, with the broker epoch it knows (KIP-903).

    -1 skips the epoch check (AlterPartition v0-2 carry no epochs)."""

    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True)
class AlterPartitionEntry:
    """One partition of an AlterPartition request.

    ``topic`` is the topic's name (requests v0-1) or its id (v2+)."""

    topic: str | uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[IsrMember, ...]
    leader_recovery_state: int = 0


@dataclass(frozen=True)
class AlterPartitionResult:
    """The answer for one ``AlterPartitionEntry``: an error, or the partition's state
    once the change is made (its current state when nothing had to change)."""

    topic: str | uuid.UUID
    partition: int
    error_code: ErrorCode = ErrorCode.none
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1
    leader_recovery_state: int = 0
