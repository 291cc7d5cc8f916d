"""Where a worker keeps connector configs, source offsets and statuses: in memory or a
file (standalone, as Kafka's standalone worker) or in Kafka Connect's three compacted
topics with Kafka Connect's keys and values (distributed), so that a restarted worker
reads back what it had, and a Kafka Connect cluster's topics read the same.

The config topic (one partition; values are JSON as Kafka's internal JsonConverter
writes them without schemas):

- ``connector-<name>``: ``{"properties": {...}}``, null when deleted;
- ``task-<name>-<n>``: ``{"properties": {...}}``, taking effect with the
  ``commit-<name>`` record ``{"tasks": N}`` that follows the N task records;
- ``target-state-<name>``: ``{"state": "STARTED"|"PAUSED", "state.v2": ...}`` (STOPPED
  is ``state.v2``; ``state`` says PAUSED to workers that predate it);
- other keys Kafka writes (``session-key``, ``restart-connector-*``,
  ``logger-cluster-*``, ``tasks-fencing-*``) are read over.

The offsets topic: key ``["<connector>", {partition}]``, value ``{offset}`` or null, both
compact JSON with sorted keys. The status topic: ``status-connector-<name>`` and
``status-task-<name>-<n>`` with ``{"state", "trace", "worker_id", "generation"}``, null
when gone; a connector's active topics (KIP-558) as ``status-topic-<topic>:connector-<name>``
with ``{"topic": {"name", "connector", "task", "discoverTimestamp"}}``, null once reset
(``:`` cannot be in a topic's name, so the first one ends it).

Standalone: configs and statuses in memory (connectors come from the command line's
files each start, as in Kafka), offsets in ``offset.storage.file.filename`` as one JSON
object ``{key JSON: value JSON}`` rewritten atomically (Kafka writes a Java-serialised
map there; the file is not shared between the two).

Does not own what the herder does with them.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.connect.topic_log import TopicLog

log = logging.getLogger(__name__)

STARTED = "STARTED"
PAUSED = "PAUSED"
STOPPED = "STOPPED"
TARGET_STATES = (STARTED, PAUSED, STOPPED)


def compact_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


@dataclass
class ConfigState:
    """A snapshot of the connectors' configs, target states and committed task configs."""

    connectors: dict[str, dict[str, str]] = field(default_factory=dict)
    target_states: dict[str, str] = field(default_factory=dict)
    tasks: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    # The config topic's next offset when the snapshot was taken (0 in memory).
    offset: int = 0

    def copy(self) -> ConfigState:
        return ConfigState(
            {n: dict(c) for n, c in self.connectors.items()},
            dict(self.target_states),
            {n: [dict(t) for t in ts] for n, ts in self.tasks.items()},
            self.offset,
        )

    def target_state(self, name: str) -> str:
        return self.target_states.get(name, STARTED)


class ConfigStore(ABC):
    """Connector configs, task configs and target states; ``on_change`` is called (on
    whatever thread applied it) after each change."""

    def __init__(self) -> None:
        self.state = ConfigState()
        self.lock = threading.RLock()
        self.on_change: Callable[[], None] = lambda: None

    def snapshot(self) -> ConfigState:
        with self.lock:
            return self.state.copy()

    @abstractmethod
    def put_connector_config(
        self, name: str, config: dict[str, str], target_state: str | None
    ) -> None: ...

    @abstractmethod
    def remove_connector_config(self, name: str) -> None: ...

    @abstractmethod
    def put_task_configs(self, name: str, configs: list[dict[str, str]]) -> None: ...

    @abstractmethod
    def put_target_state(self, name: str, state: str) -> None: ...

    def start(self) -> None:  # noqa: B027 - an optional hook
        """Read what there is (a topic to its end)."""

    def refresh(self) -> None:  # noqa: B027 - an optional hook
        """Read what other workers wrote up to now (a topic to its end)."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Release clients."""


class MemoryConfigStore(ConfigStore):
    """Standalone: what this process was given, lost when it ends (as in Kafka)."""

    def _changed(self) -> None:
        self.on_change()

    def put_connector_config(
        self, name: str, config: dict[str, str], target_state: str | None
    ) -> None:
        with self.lock:
            self.state.connectors[name] = dict(config)
            if target_state is not None:
                self.state.target_states[name] = target_state
        self._changed()

    def remove_connector_config(self, name: str) -> None:
        with self.lock:
            self.state.connectors.pop(name, None)
            self.state.target_states.pop(name, None)
            self.state.tasks.pop(name, None)
        self._changed()

    def put_task_configs(self, name: str, configs: list[dict[str, str]]) -> None:
        with self.lock:
            self.state.tasks[name] = [dict(c) for c in configs]
        self._changed()

    def put_target_state(self, name: str, state: str) -> None:
        with self.lock:
            self.state.target_states[name] = state
        self._changed()


class _TopicBacked:
    """A store kept in one of the worker's topics (``self.log``): started and closed
    with it, and read to the end of the topic on ``refresh``."""

    log: TopicLog

    def start(self) -> None:
        self.log.start()

    def refresh(self) -> None:
        self.log.read_to_end()

    def close(self) -> None:
        self.log.close()


CONNECTOR_PREFIX = "connector-"
TASK_PREFIX = "task-"
COMMIT_PREFIX = "commit-"
TARGET_STATE_PREFIX = "target-state-"


class TopicConfigStore(_TopicBacked, ConfigStore):
    """Distributed: the config topic, in Kafka Connect's records."""

    def __init__(self, settings: dict[str, Any], topic: str, replication_factor: int) -> None:
        super().__init__()
        self.deferred_tasks: dict[str, dict[int, dict[str, str]]] = {}
        self.log = TopicLog(
            settings, topic, 1, replication_factor, self._apply, "config.storage.topic"
        )

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        name = key.decode("utf-8", "replace")
        document = json.loads(value) if value is not None else None
        with self.lock:
            self._apply_record(name, document)
        self.on_change()

    def snapshot(self) -> ConfigState:
        state = super().snapshot()
        state.offset = self.log.positions.get(0, 0)
        return state

    def _apply_record(self, key: str, document: Any) -> None:
        state = self.state
        if key.startswith(TARGET_STATE_PREFIX):
            name = key[len(TARGET_STATE_PREFIX) :]
            if document is None:
                state.target_states.pop(name, None)
            else:
                target = document.get("state.v2") or document.get("state")
                if target in TARGET_STATES:
                    state.target_states[name] = target
        elif key.startswith(CONNECTOR_PREFIX):
            name = key[len(CONNECTOR_PREFIX) :]
            if document is None:
                state.connectors.pop(name, None)
                state.tasks.pop(name, None)
                self.deferred_tasks.pop(name, None)
            else:
                state.connectors[name] = dict(document.get("properties") or {})
        elif key.startswith(TASK_PREFIX):
            name, _, number = key[len(TASK_PREFIX) :].rpartition("-")
            if document is not None and number.isdigit():
                properties = dict(document.get("properties") or {})
                self.deferred_tasks.setdefault(name, {})[int(number)] = properties
        elif key.startswith(COMMIT_PREFIX):
            name = key[len(COMMIT_PREFIX) :]
            count = int((document or {}).get("tasks", 0))
            deferred = self.deferred_tasks.pop(name, {})
            if all(n in deferred for n in range(count)):
                state.tasks[name] = [deferred[n] for n in range(count)]
            else:
                log.warning("config topic: commit of %d tasks of %s without them all", count, name)

    def put_connector_config(
        self, name: str, config: dict[str, str], target_state: str | None
    ) -> None:
        records = []
        if target_state is not None:
            records.append(_target_state_record(name, target_state))
        records.append(((CONNECTOR_PREFIX + name).encode(), compact_json({"properties": config})))
        self.log.write(records)

    def remove_connector_config(self, name: str) -> None:
        self.log.write(
            [
                ((CONNECTOR_PREFIX + name).encode(), None),
                ((TARGET_STATE_PREFIX + name).encode(), None),
            ]
        )

    def put_task_configs(self, name: str, configs: list[dict[str, str]]) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (f"{TASK_PREFIX}{name}-{n}".encode(), compact_json({"properties": config}))
            for n, config in enumerate(configs)
        ]
        records.append(((COMMIT_PREFIX + name).encode(), compact_json({"tasks": len(configs)})))
        self.log.write(records)

    def put_target_state(self, name: str, state: str) -> None:
        self.log.write([_target_state_record(name, state)])


def _target_state_record(name: str, state: str) -> tuple[bytes, bytes]:
    legacy = PAUSED if state == STOPPED else state
    return (
        (TARGET_STATE_PREFIX + name).encode(),
        compact_json({"state": legacy, "state.v2": state}),
    )


@dataclass(frozen=True)
class Status:
    """A connector's or task's state as the status topic holds it."""

    state: str
    worker_id: str
    trace: str | None = None
    generation: int = 0

    def document(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "trace": self.trace,
            "worker_id": self.worker_id,
            "generation": self.generation,
        }


@dataclass(frozen=True)
class TopicStatus:
    """A topic a connector's task produced to or consumed from (KIP-558)."""

    topic: str
    connector: str
    task: int
    discover_timestamp: int  # ms since the epoch

    def document(self) -> dict[str, Any]:
        return {
            "topic": {
                "name": self.topic,
                "connector": self.connector,
                "task": self.task,
                "discoverTimestamp": self.discover_timestamp,
            }
        }


CONNECTOR_STATUS_PREFIX = "status-connector-"
TASK_STATUS_PREFIX = "status-task-"
TOPIC_STATUS_PREFIX = "status-topic-"
TOPIC_STATUS_SEPARATOR = ":connector-"


def topic_status_key(connector: str, topic: str) -> str:
    """The status topic's key of a connector's active topic."""
    return f"{TOPIC_STATUS_PREFIX}{topic}{TOPIC_STATUS_SEPARATOR}{connector}"


def _topic_status_names(key: str) -> tuple[str, str] | None:
    """(topic, connector) of a topic status key, None when it is not one."""
    topic, separator, connector = key[len(TOPIC_STATUS_PREFIX) :].partition(":")
    if not topic or not separator or not connector.startswith("connector-"):
        return None
    connector = connector[len("connector-") :]
    return (topic, connector) if connector else None


class StatusStore:
    """Connector and task statuses in memory; ``TopicStatusStore`` also writes them to
    the status topic and reads other workers' there."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connectors: dict[str, Status] = {}
        self.tasks: dict[str, dict[int, Status]] = {}
        self.topics: dict[str, dict[str, TopicStatus]] = {}  # by connector, then topic

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def _set_topic(self, key: str, status: TopicStatus | None) -> None:
        names = _topic_status_names(key)
        if names is None:
            log.warning("status topic: discarding a record with an invalid key %s", key)
            return
        topic, connector = names
        with self.lock:
            if status is None:
                active = self.topics.get(connector)
                if active is not None:
                    active.pop(topic, None)
                    if not active:
                        del self.topics[connector]
            else:
                self.topics.setdefault(connector, {})[topic] = status

    def put_topic(self, status: TopicStatus) -> None:
        self._set_topic(topic_status_key(status.connector, status.topic), status)

    def delete_topic(self, connector: str, topic: str) -> None:
        self._set_topic(topic_status_key(connector, topic), None)

    def topic(self, connector: str, topic: str) -> TopicStatus | None:
        with self.lock:
            return self.topics.get(connector, {}).get(topic)

    def connector_topics(self, connector: str) -> list[TopicStatus]:
        """The connector's active topics, by name."""
        with self.lock:
            active = self.topics.get(connector, {})
            return [active[topic] for topic in sorted(active)]

    def _set(self, key: str, status: Status | None) -> None:
        with self.lock:
            if key.startswith(CONNECTOR_STATUS_PREFIX):
                name = key[len(CONNECTOR_STATUS_PREFIX) :]
                if status is None:
                    self.connectors.pop(name, None)
                else:
                    self.connectors[name] = status
            elif key.startswith(TASK_STATUS_PREFIX):
                name, _, number = key[len(TASK_STATUS_PREFIX) :].rpartition("-")
                if not number.isdigit():
                    return
                tasks = self.tasks.setdefault(name, {})
                if status is None:
                    tasks.pop(int(number), None)
                    if not tasks:
                        self.tasks.pop(name, None)
                else:
                    tasks[int(number)] = status

    def put(self, key: str, status: Status | None) -> None:
        self._set(key, status)

    def put_connector(self, name: str, status: Status | None) -> None:
        self.put(CONNECTOR_STATUS_PREFIX + name, status)

    def put_task(self, name: str, task: int, status: Status | None) -> None:
        self.put(f"{TASK_STATUS_PREFIX}{name}-{task}", status)

    def connector(self, name: str) -> Status | None:
        with self.lock:
            return self.connectors.get(name)

    def task(self, name: str, task: int) -> Status | None:
        with self.lock:
            return self.tasks.get(name, {}).get(task)

    def connector_tasks(self, name: str) -> dict[int, Status]:
        with self.lock:
            return dict(self.tasks.get(name, {}))


class TopicStatusStore(_TopicBacked, StatusStore):
    def __init__(
        self, settings: dict[str, Any], topic: str, partitions: int, replication_factor: int
    ) -> None:
        super().__init__()
        self.log = TopicLog(
            settings, topic, partitions, replication_factor, self._apply, "status.storage.topic"
        )

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        if key.startswith(TOPIC_STATUS_PREFIX.encode()):
            self._apply_topic(key.decode("utf-8", "replace"), value)
            return
        status = None
        if value is not None:
            document = json.loads(value)
            status = Status(
                document["state"],
                document.get("worker_id") or "",
                document.get("trace"),
                int(document.get("generation") or 0),
            )
        self._set(key.decode("utf-8", "replace"), status)

    def _apply_topic(self, key: str, value: bytes | None) -> None:
        status = None
        if value is not None:
            try:
                document = json.loads(value)["topic"]
                status = TopicStatus(
                    str(document["name"]),
                    str(document["connector"]),
                    int(document["task"]),
                    int(document["discoverTimestamp"]),
                )
            except (ValueError, TypeError, KeyError):
                log.warning("status topic: discarding a topic status that cannot be read: %s", key)
                return
        self._set_topic(key, status)

    def put(self, key: str, status: Status | None) -> None:
        self._set(key, status)  # seen at once here; the topic tells the other workers
        value = None if status is None else compact_json(status.document())
        self.log.send(key.encode(), value)

    def put_topic(self, status: TopicStatus) -> None:
        super().put_topic(status)
        key = topic_status_key(status.connector, status.topic)
        self.log.send(key.encode(), compact_json(status.document()))

    def delete_topic(self, connector: str, topic: str) -> None:
        super().delete_topic(connector, topic)
        self.log.send(topic_status_key(connector, topic).encode(), None)


OffsetEntries = dict[bytes, tuple[Any, Any]]  # key JSON -> (partition, offset or None)


def offset_key(connector: str, partition: Any) -> bytes:
    """The offsets topic's key of one source partition of a connector."""
    return compact_json([connector, partition])


class OffsetStore(ABC):
    """Source offsets of every connector, by ``offset_key``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.offsets: dict[bytes, Any] = {}

    def start(self) -> None:  # noqa: B027 - an optional hook
        pass

    def close(self) -> None:  # noqa: B027 - an optional hook
        pass

    def refresh(self) -> None:  # noqa: B027 - an optional hook
        """Read what other workers committed up to now (a topic to its end)."""

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        with self.lock:
            if value is None:
                self.offsets.pop(key, None)
            else:
                self.offsets[key] = json.loads(value)

    def get(self, connector: str, partition: Any) -> Any:
        with self.lock:
            return self.offsets.get(offset_key(connector, partition))

    def connector_offsets(self, connector: str) -> list[tuple[Any, Any]]:
        """(partition, offset) of each source partition the connector has an offset for."""
        found = []
        with self.lock:
            for key, offset in self.offsets.items():
                try:
                    name, partition = json.loads(key)
                except (ValueError, TypeError):
                    continue  # a key another writer spoilt
                if name == connector:
                    found.append((partition, offset))
        return found

    @abstractmethod
    def put(self, connector: str, offsets: Mapping[bytes, tuple[Any, Any]]) -> None:
        """Store offsets (an offset of None removes its partition); durable on return."""

    def note(self, offsets: Mapping[bytes, tuple[Any, Any]]) -> None:
        """Offsets another writer committed to the store's topic (a source task's
        transaction): known here at once, before the reader comes to them."""
        for key, (_, offset) in offsets.items():
            self._apply(key, None if offset is None else compact_json(offset))


class FileOffsetStore(OffsetStore):
    """Standalone: ``offset.storage.file.filename``."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = Path(path)

    def start(self) -> None:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise OSError(f"offset.storage.file.filename {self.path}: cannot read: {exc}") from None
        with self.lock:
            self.offsets = {key.encode(): value for key, value in document.items()}

    def put(self, connector: str, offsets: Mapping[bytes, tuple[Any, Any]]) -> None:
        with self.lock:
            for key, (_, offset) in offsets.items():
                if offset is None:
                    self.offsets.pop(key, None)
                else:
                    self.offsets[key] = offset
            document = {key.decode(): value for key, value in self.offsets.items()}
            # Under the lock: two tasks writing at once would share the temporary file.
            temporary = self.path.with_name(self.path.name + ".tmp")
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(document, handle, separators=(",", ":"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)


class TopicOffsetStore(_TopicBacked, OffsetStore):
    """Distributed: the offsets topic."""

    def __init__(
        self, settings: dict[str, Any], topic: str, partitions: int, replication_factor: int
    ) -> None:
        super().__init__()
        self.log = TopicLog(
            settings, topic, partitions, replication_factor, self._apply, "offset.storage.topic"
        )

    def put(self, connector: str, offsets: Mapping[bytes, tuple[Any, Any]]) -> None:
        for key, (_, offset) in offsets.items():
            self.log.send(key, None if offset is None else compact_json(offset))
        self.log.flush()
        for key, (_, offset) in offsets.items():
            self._apply(key, None if offset is None else compact_json(offset))
