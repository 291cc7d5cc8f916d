"""The single-node controller: topic lifecycle and the effective config of each topic.

Owns every change to cluster metadata (create and delete topics, add
partitions, alter topic and broker configs) and keeps the storage in step with
it (a partition log per partition, configs pushed to open logs). The wire
handlers call it; it knows nothing of the protocol.

Does not own: the log format (``strom.storage``), persistence of metadata
(``strom.cluster.metadata``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from strom.cluster.metadata import MetadataStore, TopicMetadata
from strom.config import BrokerConfig, log_config_for, validate_topic_configs
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)


class InvalidPartitionsError(ValueError):
    """A partition count that cannot be used."""


class InvalidReplicationFactorError(ValueError):
    """A replication factor this single node cannot satisfy."""


class Controller:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        log_dir = config.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.metadata = MetadataStore(log_dir, self.node_id, config["cluster.id"])
        for key, value in self.metadata.broker_overrides.items():
            config.set(key, value)
        self.logs = LogManager(
            log_dir,
            log_config_for(config, {}),
            max_open_files=config["max.open.segment.files"],
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
            cleaner_enabled=config["log.cleaner.enable"],
            cleaner_backoff_ms=config["log.cleaner.backoff.ms"],
            # Kafka's dedupe buffer holds 24 bytes per key (hash + offset)
            cleaner_max_map_entries=max(1, config["log.cleaner.dedupe.buffer.size"] // 24),
            cleaner_io_max_bytes_per_second=config["log.cleaner.io.max.bytes.per.second"],
        )
        self._log_configs: dict[str, LogConfig] = {}

    @property
    def cluster_id(self) -> str:
        return self.metadata.cluster_id

    # Start-up and shutdown -------------------------------------------------

    def load(self) -> None:
        self.logs.load(self.log_config)
        for topic in self.metadata.topics.values():
            for partition in range(topic.partitions):
                if self.logs.get(topic.name, partition) is None:
                    self.logs.create(topic.name, partition, self.log_config(topic.name))
        for log_ in list(self.logs.all_logs()):
            topic = self.metadata.topics.get(log_.topic)
            if topic is None or log_.partition >= topic.partitions:
                log.warning(
                    "%s-%d is on disk but not in the metadata; not serving it",
                    log_.topic,
                    log_.partition,
                )

    def shutdown(self) -> None:
        self.logs.shutdown()

    # Reads -----------------------------------------------------------------

    def topic(self, name: str) -> TopicMetadata | None:
        return self.metadata.topics.get(name)

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get(topic, partition)

    def log_config(self, topic: str) -> LogConfig:
        cached = self._log_configs.get(topic)
        if cached is None:
            meta = self.metadata.topics.get(topic)
            cached = log_config_for(self.config, meta.configs if meta else {})
            self._log_configs[topic] = cached
        return cached

    # Changes ---------------------------------------------------------------

    def validate_new_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> tuple[int, dict[str, str]]:
        """Check a CreateTopics entry; returns the partition count and configs to use."""
        self.metadata.check_new_topic(name)
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if partitions <= 0:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if replication_factor <= 0:
            raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
        if replication_factor > 1:
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): "
                "The target replication factor of "
                f"{replication_factor} cannot be reached because only 1 broker(s) are registered."
            )
        validate_topic_configs(configs)
        return partitions, dict(configs)

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> TopicMetadata:
        partitions, clean = self.validate_new_topic(name, partitions, -1, configs or {})
        topic = self.metadata.create_topic(name, partitions, clean)
        self._log_configs.pop(name, None)
        config = self.log_config(name)
        for partition in range(partitions):
            self.logs.create(name, partition, config)
        log.info("created topic %s with %d partition(s)", name, partitions)
        return topic

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.metadata.delete_topic(name)
        self.logs.delete_topic(name)
        self._log_configs.pop(name, None)
        log.info("deleted topic %s", name)
        return topic

    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        topic = self.metadata.topics[name]
        if count < topic.partitions:
            raise InvalidPartitionsError(
                f"Topic currently has {topic.partitions} partitions, which is higher than "
                f"the requested {count}."
            )
        if count == topic.partitions:
            raise InvalidPartitionsError(f"Topic already has {topic.partitions} partitions.")
        if validate_only:
            return
        config = self.log_config(name)
        for partition in range(topic.partitions, count):
            self.logs.create(name, partition, config)
        self.metadata.set_partitions(name, count)

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a topic's overrides (validated) and apply them to its open logs."""
        validate_topic_configs(configs)
        self.metadata.set_topic_configs(name, dict(configs))
        self._apply_configs(name)

    def set_broker_overrides(self, configs: Mapping[str, str]) -> None:
        for key in set(self.metadata.broker_overrides) - set(configs):
            self.config.set(key, None)
        for key, value in configs.items():
            self.config.set(key, value)
        self.metadata.set_broker_overrides(dict(configs))
        for name in list(self.metadata.topics):
            self._apply_configs(name)

    def _apply_configs(self, name: str) -> None:
        self._log_configs.pop(name, None)
        config = self.log_config(name)
        topic = self.metadata.topics[name]
        for partition in range(topic.partitions):
            partition_log = self.logs.get(name, partition)
            if partition_log is not None:
                partition_log.update_config(config)
