"""Cluster metadata of a single node: cluster id, topics, topic ids, partitions, configs.

Owns the durable record of which topics exist (name, UUID topic id, partition
count, config overrides) and of the cluster id, and Kafka's rules for topic
names. It is written atomically (temp file, fsync, rename) on every change, so
a ``kill -9`` leaves either the old or the new picture.

Does not own the partitions' data (``strom.storage``) or the wire protocol.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from strom.storage.durable import write_atomically

log = logging.getLogger(__name__)

METADATA_FILE = "strom-metadata.json"
META_PROPERTIES = "meta.properties"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
PRODUCER_ID_BLOCK = 1000
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class InvalidTopicError(ValueError):
    """A topic name Kafka would refuse."""


class TopicExistsError(ValueError):
    """CreateTopics for a name that is already taken."""


def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 chars of [a-zA-Z0-9._-], not '.' or '..'."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
        )
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def collides(name: str, other: str) -> bool:
    """Kafka refuses topics whose names differ only by '.' versus '_'."""
    return name != other and name.replace(".", "_") == other.replace(".", "_")


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    leader_epoch: int = 0

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


def _new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class MetadataStore:
    """The topics of this node, persisted under the log directory."""

    def __init__(self, log_dir: Path, node_id: int, cluster_id: str | None = None) -> None:
        self.log_dir = log_dir
        self.node_id = node_id
        self.topics: dict[str, TopicMetadata] = {}
        self.by_id: dict[uuid.UUID, TopicMetadata] = {}
        self.broker_overrides: dict[str, str] = {}
        # Producer ids are handed out from a block whose end is persisted first,
        # so an id is never reused after a crash.
        self._next_producer_id = 0
        self._producer_id_block_end = 0
        self.cluster_id = self._load_meta_properties(cluster_id)
        self._load()

    # Persistence -----------------------------------------------------------

    def _load_meta_properties(self, wanted: str | None) -> str:
        path = self.log_dir / META_PROPERTIES
        if path.exists():
            props = dict(
                line.split("=", 1)
                for line in path.read_text().splitlines()
                if "=" in line and not line.startswith("#")
            )
            stored = props.get("cluster.id")
            if stored and wanted and stored != wanted:
                raise ValueError(f"cluster.id {wanted} does not match {stored} stored in {path}")
            if stored:
                return stored
        cluster_id = wanted or _new_cluster_id()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(
            path, f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n".encode()
        )
        return cluster_id

    def _load(self) -> None:
        path = self.log_dir / METADATA_FILE
        if not path.exists():
            return
        data = json.loads(path.read_text())
        for entry in data.get("topics", []):
            topic = TopicMetadata(
                name=entry["name"],
                topic_id=uuid.UUID(entry["id"]),
                partitions=int(entry["partitions"]),
                configs=dict(entry.get("configs", {})),
                leader_epoch=int(entry.get("leader_epoch", 0)),
            )
            self.topics[topic.name] = topic
            self.by_id[topic.topic_id] = topic
        self.broker_overrides = dict(data.get("broker_configs", {}))
        self._next_producer_id = self._producer_id_block_end = int(
            data.get("producer_id_block_end", 0)
        )

    def save(self) -> None:
        data = {
            "version": 1,
            "topics": [
                {
                    "name": t.name,
                    "id": str(t.topic_id),
                    "partitions": t.partitions,
                    "configs": t.configs,
                    "leader_epoch": t.leader_epoch,
                }
                for t in self.topics.values()
            ],
            "broker_configs": self.broker_overrides,
            "producer_id_block_end": self._producer_id_block_end,
        }
        write_atomically(self.log_dir / METADATA_FILE, json.dumps(data, indent=1).encode())

    # Changes ---------------------------------------------------------------

    def check_new_topic(self, name: str) -> None:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        for other in self.topics:
            if collides(name, other):
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicMetadata:
        self.check_new_topic(name)
        topic_id = uuid.uuid4()
        while topic_id in self.by_id or topic_id.int == 0:
            topic_id = uuid.uuid4()
        topic = TopicMetadata(name, topic_id, partitions, dict(configs))
        self.topics[name] = topic
        self.by_id[topic_id] = topic
        self.save()
        return topic

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.topics.pop(name)
        self.by_id.pop(topic.topic_id, None)
        self.save()
        return topic

    def set_partitions(self, name: str, count: int) -> None:
        self.topics[name].partitions = count
        self.save()

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self.save()

    def allocate_producer_id(self) -> int:
        if self._next_producer_id >= self._producer_id_block_end:
            self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK
            self.save()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    def set_broker_overrides(self, configs: dict[str, str]) -> None:
        self.broker_overrides = dict(configs)
        self.save()
