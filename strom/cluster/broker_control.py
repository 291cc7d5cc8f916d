"""The active controller's brokers, after Kafka's ClusterControlManager and
BrokerHeartbeatManager: registration (incarnations, broker epochs = offset of the
RegisterBrokerRecord, features, new brokers fenced), heartbeats (unfence once caught up
with the registration, controlled shutdown that moves leaders away first), and fencing of
brokers whose session expired (ISR shrinks that never empty the ISR, new leaders from
what remains).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from strom.cluster.controller_api import (
    LONG_MAX,
    MINIMUM_KRAFT_METADATA_VERSION,
    ControllerError,
    ControllerResult,
    HeartbeatReply,
)
from strom.cluster.controller_core import ControllerCore
from strom.cluster.image import (
    BrokerRegistration,
    Endpoint,
    PartitionState,
    TopicImage,
)
from strom.cluster.partition_change import (
    Election,
    PartitionChangeBuilder,
)
from strom.cluster.records import (
    METADATA_VERSION_FEATURE,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    MetadataRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)
from strom.protocol.errors import ErrorCode


@dataclass
class _Session:
    """Kafka's BrokerHeartbeatState: kept by the active controller only, not in the log."""

    last_contact_ms: int
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1


class BrokerControl(ControllerCore):
    """Broker registration, heartbeats, sessions and fencing."""

    _sessions: dict[int, _Session]

    def _start_sessions(self, now_ms: int) -> None:
        # Kafka's activation registers every broker with a fresh session.
        self._sessions = {b: _Session(last_contact_ms=now_ms) for b in self._image.brokers}

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
