"""What one node knows and holds: the committed metadata image and its partition logs.

Owns, on every node, the replay of the committed metadata log (records and snapshots
handed in by the quorum driver) into a ``MetadataImage``, and keeping local storage in
step with it: a partition log for every replica assigned to this node, created when
its PartitionRecord commits, deleted with its topic, its configs pushed to the open
logs when a ConfigRecord changes them, and dynamic broker configs applied to this
node's config. The wire handlers read topics, partitions, leaders and brokers from
here (``topics``, ``by_id``: a ``TopicView`` per topic, rebuilt when a record touches
it); every change goes through the active controller and comes back as records.

Snapshots of the image are the records that rebuild it (``MetadataImage.to_records``),
each prefixed by its length.

Does not own the log format (``strom.storage``), the metadata records' encoding
(``strom.cluster.records``), the controller's decisions (``quorum_controller``) or
the network.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from strom.cluster import records as mr
from strom.cluster.image import (
    NO_LEADER,
    BrokerRegistration,
    ConfigResourceType,
    MetadataImage,
    PartitionState,
    TopicImage,
)
from strom.cluster.metadata import INTERNAL_TOPICS
from strom.config import BrokerConfig, log_config_for
from strom.raft.messages import Batch, Snapshot
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
_TOPIC = int(ConfigResourceType.TOPIC)
_BROKER = int(ConfigResourceType.BROKER)


@dataclass
class TopicView:
    """A topic as the wire handlers read it: name, id, partitions, configs."""

    name: str
    topic_id: uuid.UUID
    states: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.states)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def leader_of(self, partition: int) -> int:
        state = self.states.get(partition)
        return state.leader if state is not None else NO_LEADER

    def leader_epoch_of(self, partition: int) -> int:
        state = self.states.get(partition)
        return state.leader_epoch if state is not None else -1


def encode_snapshot(records: Iterable[bytes]) -> bytes:
    out = bytearray()
    for record in records:
        out += _LENGTH.pack(len(record))
        out += record
    return bytes(out)


def decode_snapshot(data: bytes) -> list[bytes]:
    out = []
    position = 0
    while position + 4 <= len(data):
        (size,) = _LENGTH.unpack_from(data, position)
        position += 4
        out.append(data[position : position + size])
        position += size
    return out


class NodeState:
    """The metadata listener of the quorum driver, and the handlers' view of the cluster."""

    def __init__(self, config: BrokerConfig, *, hosts_logs: bool = True) -> None:
        self.config = config
        self.node_id = config.node_id
        self.hosts_logs = hosts_logs  # False on a controller-only node
        self.image = MetadataImage()
        self.topics: dict[str, TopicView] = {}
        # Moves whenever a topic appears or goes: what a topic regex matched is stale then.
        self.topics_version = 0
        self.by_id: dict[uuid.UUID, TopicView] = {}
        self.broker_overrides: dict[str, str] = {}
        log_dir = config.log_dir
        if hosts_logs:
            log_dir.mkdir(parents=True, exist_ok=True)
        self.logs = LogManager(
            log_dir,
            log_config_for(config, {}),
            max_open_files=config["max.open.segment.files"],
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
            # Read at each use: a dynamic broker config, set on ``config`` when it changes.
            producer_id_expiration_ms=lambda: config["producer.id.expiration.ms"],
            producer_id_expiration_check_interval_ms=config[
                "producer.id.expiration.check.interval.ms"
            ],
            cleaner_enabled=config["log.cleaner.enable"] and hosts_logs,
            cleaner_backoff_ms=config["log.cleaner.backoff.ms"],
            # Kafka's dedupe buffer holds 24 bytes per key (hash + offset), filled up to
            # its load factor in one cleaning
            cleaner_max_map_entries=max(
                1,
                int(
                    config["log.cleaner.dedupe.buffer.size"]
                    // 24
                    * config["log.cleaner.io.buffer.load.factor"]
                ),
            ),
            cleaner_io_max_bytes_per_second=config["log.cleaner.io.max.bytes.per.second"],
        )
        self._log_configs: dict[str, LogConfig] = {}
        self._applied_broker_keys: set[str] = set()
        # Told of a deleted topic (the group coordinator drops its offsets).
        self.on_topic_removed: Callable[[str], None] | None = None
        # Told after every applied batch or snapshot (waiters for a change to show).
        self.on_change: Callable[[], None] | None = None
        # Partition leaders elected (a new leader in a PartitionChangeRecord), and of
        # those the unclean ones (the leader starts recovering, KIP-704), since start.
        self.leader_elections = 0
        self.unclean_leader_elections = 0

    @property
    def metadata(self) -> NodeState:  # the name the handlers grew up with
        return self

    @property
    def log_dir(self) -> Path:
        return self.config.log_dir

    # Start-up and shutdown -------------------------------------------------------

    def load(self) -> None:
        """Open the partition logs on disk (served once the metadata names them)."""
        if self.hosts_logs:
            self.logs.load(self.log_config)

    def shutdown(self) -> None:
        self.logs.shutdown()

    # The quorum driver's listener --------------------------------------------------

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        offset = snapshot.snapshot_id.end_offset - 1
        self.image = MetadataImage.from_records(
            (mr.decode_record(value) for value in decode_snapshot(snapshot.data)),
            offset,
            snapshot.snapshot_id.epoch,
        )
        gone = set(self.topics) - set(self.image.topics)
        self.topics.clear()
        self.topics_version += 1
        self.by_id.clear()
        self._log_configs.clear()
        for name in gone:
            self._topic_removed(name)
        self._apply_broker_configs()
        for name in self.image.topics:
            self._refresh_topic(name, configs_changed=True)
        if self.on_change is not None:
            self.on_change()

    def apply_batch(self, batch: Batch) -> None:
        if batch.control:
            return
        # Topics touched by the batch -> whether their configs changed: each view is
        # rebuilt once per batch, not once per record (a topic of 1,000 partitions).
        touched: dict[str, bool] = {}
        for index, value in enumerate(batch.records):
            record = mr.decode_record(value)
            self._apply(record, batch.base_offset + index, batch.epoch, touched)
        for name, configs_changed in touched.items():
            if name in self.image.topics:
                self._refresh_topic(name, configs_changed=configs_changed)
        if self.on_change is not None:
            self.on_change()

    def snapshot_data(self) -> bytes:
        return encode_snapshot(mr.encode_record(r) for r in self.image.to_records())

    # Replay ----------------------------------------------------------------------------

    def _apply(
        self, record: mr.MetadataRecord, offset: int, epoch: int, touched: dict[str, bool]
    ) -> None:
        removed = None
        if isinstance(record, mr.RemoveTopicRecord):
            removed = self.image.topic_name(record.topic_id)
        self.image.apply(record, offset, epoch)
        if isinstance(record, mr.TopicRecord):
            touched.setdefault(record.name, False)
        elif isinstance(record, mr.PartitionRecord | mr.PartitionChangeRecord):
            if isinstance(record, mr.PartitionChangeRecord) and record.leader >= 0:
                self.leader_elections += 1
                if getattr(record, "leader_recovery_state", -1) == 1:
                    self.unclean_leader_elections += 1
            name = self.image.topic_name(record.topic_id)
            if name is not None:
                touched.setdefault(name, False)
        elif removed is not None:
            touched.pop(removed, None)
            self._topic_removed(removed)
        elif isinstance(record, mr.ConfigRecord):
            if record.resource_type == _TOPIC:
                self._log_configs.pop(record.resource_name, None)
                if record.resource_name in self.image.topics:
                    touched[record.resource_name] = True
            elif record.resource_type == _BROKER and record.resource_name in (
                "",
                str(self.node_id),
            ):
                self._apply_broker_configs()

    def _topic_removed(self, name: str) -> None:
        self.topics_version += 1
        view = self.topics.pop(name, None)
        if view is not None:
            self.by_id.pop(view.topic_id, None)
        self._log_configs.pop(name, None)
        if self.hosts_logs:
            self.logs.delete_topic(name)
        log.info("deleted topic %s", name)
        if self.on_topic_removed is not None:
            self.on_topic_removed(name)

    def _refresh_topic(self, name: str, *, configs_changed: bool = False) -> None:
        topic: TopicImage = self.image.topics[name]
        view = TopicView(
            name, topic.topic_id, dict(topic.partitions), self.image.topic_configs(name)
        )
        old = self.topics.get(name)
        if old is None or old.topic_id != topic.topic_id:
            self.topics_version += 1
        if old is not None and old.topic_id != topic.topic_id:
            self.by_id.pop(old.topic_id, None)
        self.topics[name] = view
        self.by_id[topic.topic_id] = view
        if not self.hosts_logs:
            return
        for index, state in topic.partitions.items():
            if (
                self.node_id in state.replicas
                and self.logs.verified_topic_id(name, index) != topic.topic_id
            ):
                self.logs.create_for_topic(name, index, topic.topic_id, self.log_config(name))
        if configs_changed:
            config = self.log_config(name)
            for index in topic.partitions:
                partition_log = self.logs.get(name, index)
                if partition_log is not None:
                    partition_log.update_config(config)

    def _apply_broker_configs(self) -> None:
        merged = self.image.broker_configs(None)
        merged.update(self.image.broker_configs(self.node_id))
        for key in self._applied_broker_keys - set(merged):
            self.config.set(key, None)
        for key, value in merged.items():
            self.config.set(key, value)
        self._applied_broker_keys = set(merged)
        self.broker_overrides = merged
        self._log_configs.clear()
        if not self.hosts_logs:
            return
        for name, topic in self.image.topics.items():
            config = self.log_config(name)
            for index in topic.partitions:
                partition_log = self.logs.get(name, index)
                if partition_log is not None:
                    partition_log.update_config(config)

    # Reads -------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicView | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicView | None:
        return self.by_id.get(topic_id)

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The local log of a replica this node hosts (leader or not)."""
        return self.logs.get(topic, partition)

    def leads(self, topic: str, partition: int) -> bool:
        view = self.topics.get(topic)
        return view is not None and view.leader_of(partition) == self.node_id

    def live_brokers(self) -> list[BrokerRegistration]:
        return self.image.live_brokers()

    def log_config(self, topic: str) -> LogConfig:
        cached = self._log_configs.get(topic)
        if cached is None:
            cached = log_config_for(self.config, self.image.topic_configs(topic))
            self._log_configs[topic] = cached
        return cached
