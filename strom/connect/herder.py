"""The herder: what the REST API asks of a Connect worker, and keeping the connectors and
tasks this worker runs in line with the stored configs and target states.

Every change goes through the config store (the config topic in distributed mode) and
comes back to each worker as the store applies it; the herder thread then reconciles:
it starts, reconfigures, pauses, resumes and stops connector instances and tasks (tasks
through the ``runtime.TaskRunner``), asks a running connector for its task configs
(``task_configs(tasks.max)``, written as ``task-*`` and ``commit-*`` records when they
change), and writes statuses (RUNNING, PAUSED, STOPPED, FAILED with the trace,
UNASSIGNED, RESTARTING). Requests run one at a time on the herder thread, as in Kafka's
herders; statuses are read from the status store directly.

Who runs what is the ``membership``'s answer:
- ``SoleMember`` (standalone): this worker is the leader and runs everything;
- ``SharedWork`` (distributed): the workers of one ``group.id`` share the work through
  Kafka's group protocol; the leader writes configs and runs the connector instances,
  and each worker runs the tasks the leader's plan gives it, built from the stored
  configs. Writes reach the leader and a task's restart its worker (the REST layer
  forwards them); a task's status is written by the worker that runs it, and removed
  only once the task is gone from the configs. When the leader's connectors change their
  tasks, it asks for a new plan (``work_changed``).

Active topics (KIP-558, ``topic.tracking.enable``): a task records each topic it
produces to or consumes from, once, in the status store; a worker that stops a deleted
connector or its tasks resets the connector's topics after they have stopped (as
Kafka's distributed herder does, so that no late record writes one back). Both modes.

Errors are ``HerderError``s with Kafka Connect's status codes and messages (404 for an
unknown connector, 409 for an existing one, 400 for a bad config naming its keys).

Does not own HTTP (``rest``), storage (``stores``) or running tasks (``runtime``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.connect import connector_config
from strom.connect.api import ConnectException, Connector, ConnectorContext
from strom.connect.membership import Membership
from strom.connect.plugins import SINK, SOURCE, Plugin, PluginNotFound, Plugins
from strom.connect.rest_client import ConnectRestClient, ConnectRestError
from strom.connect.runtime import FAILED, PAUSED, RUNNING, UNASSIGNED, TaskId, TaskRunner, TaskSpec
from strom.connect.stores import (
    STARTED,
    STOPPED,
    ConfigState,
    ConfigStore,
    OffsetStore,
    Status,
    StatusStore,
    TopicStatus,
    offset_key,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
RESTARTING = "RESTARTING"
TICK_S = 1.0
ADMIN_TIMEOUT_S = 30.0


class HerderError(Exception):
    """A request the herder refuses: Kafka Connect's status code and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class NotLeader(HerderError):
    """A write this worker cannot make: the leader's URL, to forward it to."""

    def __init__(self, leader_url: str | None) -> None:
        super().__init__(409, "Cannot complete request because this worker is not the leader")
        self.leader_url = leader_url


def not_found(message: str) -> HerderError:
    return HerderError(404, message)


def bad_request(message: str) -> HerderError:
    return HerderError(400, message)


@dataclass
class _Running:
    """A connector instance this worker runs (or failed to)."""

    config: dict[str, str]
    plugin: Plugin | None
    instance: Connector | None = None
    failed: bool = False
    needs_task_configs: bool = True
    restart: bool = False


@dataclass
class _Context(ConnectorContext):
    herder: Herder
    name: str
    errors: list[Exception] = field(default_factory=list)

    def request_task_reconfiguration(self) -> None:
        self.herder.request_task_reconfiguration(self.name)

    def raise_error(self, error: Exception) -> None:
        self.herder.fail_connector(self.name, error)


class Herder:
    def __init__(
        self,
        worker_id: str,
        plugins: Plugins,
        config_store: ConfigStore,
        status_store: StatusStore,
        offset_store: OffsetStore,
        membership: Membership,
        admin_settings: dict[str, Any],
        exactly_once_source: bool = False,
        topic_tracking: bool = True,
    ) -> None:
        self.worker_id = worker_id
        self.plugins = plugins
        self.config_store = config_store
        self.status_store = status_store
        self.offset_store = offset_store
        self.membership = membership
        self.admin_settings = admin_settings
        self.exactly_once_source = exactly_once_source
        self.topic_tracking = topic_tracking
        self.runner: TaskRunner | None = None
        self.running: dict[str, _Running] = {}
        self.task_restarts: set[TaskId] = set()
        self.generation_seen = -1
        self._requests: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.Queue()
        )
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="herder")
        config_store.on_change = self._wake.set

    # The herder thread.

    def start(self, runner: TaskRunner) -> None:
        self.runner = runner
        self._thread.start()
        self.membership.start(self._membership_changed)

    def _membership_changed(self) -> None:
        """Reconcile now, and return once this worker runs what the membership says: a
        task given up has stopped before the group may give it to another worker."""
        if self._stopped.is_set():
            return
        try:
            self.submit(self._reconcile).result(timeout=60)
        except Exception as exc:
            log.warning("stopping the work given up failed or took too long: %s", exc)

    def stop(self) -> None:
        """Stop every task and connector this worker runs (committing their offsets)."""
        done = self.submit(self._shutdown)
        try:
            done.result(timeout=60)
        finally:
            self._stopped.set()
            self._wake.set()
            self._thread.join(10)
            self.membership.close()

    def submit(self, request: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``request`` on the herder thread; its result or exception in the future."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._requests.put((request, future))
        self._wake.set()
        return future

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            while True:
                try:
                    request, future = self._requests.get_nowait()
                except queue.Empty:
                    break
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(request())
                except BaseException as exc:  # the caller gets it
                    future.set_exception(exc)
            if self._stopped.is_set():
                return
            try:
                self._reconcile()
            except Exception:
                log.exception("reconciling connectors and tasks failed; trying again")

    def _shutdown(self) -> None:
        assert self.runner is not None
        self._stopped.set()
        self.runner.stop_all()
        for name in list(self.running):
            self._stop_instance(name, UNASSIGNED)

    # Status.

    def _status(self, state: str, trace: str | None = None) -> Status:
        return Status(state, self.worker_id, trace, self.membership.generation)

    def task_state_changed(self, task_id: TaskId, state: str, trace: str | None) -> None:
        """The runner's listener."""
        self.status_store.put_task(task_id[0], task_id[1], self._status(state, trace))

    def record_active_topic(self, task_id: TaskId, topic: str) -> None:
        """The runner's: a task produced to or consumed from ``topic`` (on its thread).
        Written once per connector and topic, as Kafka's WorkerTask does."""
        if not self.topic_tracking or self.status_store.topic(task_id[0], topic) is not None:
            return
        now_ms = int(time.time() * 1000)
        self.status_store.put_topic(TopicStatus(topic, task_id[0], task_id[1], now_ms))

    def request_task_reconfiguration(self, name: str) -> None:
        def mark() -> None:
            if name in self.running:
                self.running[name].needs_task_configs = True

        self.submit(mark)

    def fail_connector(self, name: str, error: Exception) -> None:
        trace = "".join(traceback.format_exception(error))

        def fail() -> None:
            if name in self.running:
                self._stop_instance(name, FAILED, trace)
                self.running[name].failed = True

        self.submit(fail)

    # Reconciling what runs here with the stored state.

    def _reconcile(self) -> None:
        assert self.runner is not None
        holds = self.membership.holds_work()
        leads = holds and self.membership.runs_connectors()
        if holds and self.membership.generation != self.generation_seen:
            # Just given work (a new plan): what the last owners wrote is read first.
            self.config_store.refresh()
            self.offset_store.refresh()
        self.generation_seen = self.membership.generation
        snapshot = self.config_store.snapshot()
        deleted: set[str] = set()
        for name in list(self.running):
            if not leads or name not in snapshot.connectors:
                self._stop_instance(name, UNASSIGNED, remove=name not in snapshot.connectors)
                del self.running[name]
                if name not in snapshot.connectors:
                    deleted.add(name)
        if leads:
            for name, config in snapshot.connectors.items():
                self._reconcile_connector(name, config, snapshot)
            self.membership.work_changed(set(tasks_of(snapshot)))
        deleted |= self._reconcile_tasks(snapshot, holds, leads)
        if self.topic_tracking:
            for name in sorted(deleted):  # now that its connector and tasks have stopped
                self.reset_active_topics(name)

    def _reconcile_connector(
        self, name: str, config: dict[str, str], snapshot: ConfigState
    ) -> None:
        target = snapshot.target_state(name)
        current = self.running.get(name)
        if current is not None and (current.config != config or current.restart):
            self._stop_instance(name, RESTARTING if current.restart else UNASSIGNED)
            current = None
        if target == STOPPED:
            if current is None or current.instance is not None:
                self._stop_instance(name, STOPPED)
                self.running[name] = _Running(config, self._plugin(config), None, False, False)
            if snapshot.tasks.get(name) and self.membership.is_leader():
                self.config_store.put_task_configs(name, [])
            return
        if current is None or (current.instance is None and not current.failed):
            current = self._start_instance(name, config)
            self.running[name] = current
        if current.failed or current.instance is None:
            return
        state = RUNNING if target == STARTED else PAUSED
        status = self.status_store.connector(name)
        if status is None or status.state != state or status.worker_id != self.worker_id:
            self.status_store.put_connector(name, self._status(state))
        if target == STARTED and current.needs_task_configs:
            self._generate_task_configs(name, current, snapshot)

    def _plugin(self, config: dict[str, str]) -> Plugin | None:
        try:
            return self.plugins.connector(config.get("connector.class", ""))
        except PluginNotFound:
            return None

    def _start_instance(self, name: str, config: dict[str, str]) -> _Running:
        plugin = self._plugin(config)
        current = _Running(config, plugin)
        try:
            if plugin is None:
                raise ConnectException(f"Unknown connector class {config.get('connector.class')}")
            instance: Connector = plugin.cls()
            instance.initialize(_Context(self, name))
            instance.start(dict(config))
        except Exception:
            current.failed = True
            log.exception("connector %s failed to start", name)
            self.status_store.put_connector(name, self._status(FAILED, traceback.format_exc()))
            return current
        current.instance = instance
        log.info("connector %s started", name)
        return current

    def _stop_instance(
        self, name: str, state: str, trace: str | None = None, remove: bool = False
    ) -> None:
        current = self.running.get(name)
        if current is not None and current.instance is not None:
            try:
                current.instance.stop()
            except Exception:
                log.exception("stopping connector %s", name)
            current.instance = None
        if remove:
            self.status_store.put_connector(name, None)
        elif state in (FAILED, STOPPED, RESTARTING) or current is not None:
            self.status_store.put_connector(name, self._status(state, trace))

    def _generate_task_configs(self, name: str, current: _Running, snapshot: ConfigState) -> None:
        assert current.instance is not None and current.plugin is not None
        config = current.config
        try:
            tasks_max = int(config.get("tasks.max", "1"))
            generated = current.instance.task_configs(tasks_max)
            enforce = config.get("tasks.max.enforce", "true").strip().lower() != "false"
            if enforce and len(generated) > tasks_max:
                raise ConnectException(
                    f"The connector {name} has generated {len(generated)} tasks, which is "
                    f"greater than {tasks_max}, the maximum number of tasks it is configured "
                    "to create. It can be permitted by reconfiguring the connector with "
                    "'tasks.max.enforce' set to false"
                )
        except Exception:
            current.failed = True
            self._stop_instance(name, FAILED, traceback.format_exc())
            return
        task_class = current.instance.task_class()
        configs = []
        for task in generated:
            full = {**task, "task.class": f"{task_class.__module__}.{task_class.__qualname__}"}
            if current.plugin.kind == SINK:
                for key in ("topics", "topics.regex"):
                    if config.get(key):
                        full[key] = config[key]
            configs.append(full)
        current.needs_task_configs = False
        if configs != snapshot.tasks.get(name) and self.membership.is_leader():
            self.config_store.put_task_configs(name, configs)

    def _reconcile_tasks(self, snapshot: ConfigState, holds: bool, leads: bool) -> set[str]:
        """Run here the tasks the membership gives this worker (none unless it holds
        work); stop the others. A task's status is removed only once the task itself is
        gone from the configs (a task that moved is written by its new worker). The
        deleted connectors whose tasks were stopped here."""
        assert self.runner is not None
        wanted: dict[TaskId, tuple[TaskSpec, str]] = {}
        for name, task_configs in snapshot.tasks.items() if holds else ():
            config = snapshot.connectors.get(name)
            target = snapshot.target_state(name)
            if config is None or target == STOPPED:
                continue
            current = self.running.get(name)
            if current is not None:  # the connector instance runs here
                if current.plugin is None or (current.instance is None and not current.failed):
                    continue
                plugin, task_class, connector_config = (
                    current.plugin,
                    _task_class(current),
                    current.config,
                )
            elif leads:
                continue  # its instance has not started yet
            else:
                found = self._plugin(config)
                if found is None:
                    continue
                plugin, task_class, connector_config = found, _plugin_task_class(found), config
            if task_class is None:
                continue
            for number, task_config in enumerate(task_configs):
                if self.membership.runs_task((name, number)):
                    spec = TaskSpec(
                        (name, number), plugin.kind, task_class, task_config, connector_config
                    )
                    wanted[(name, number)] = (spec, target)
        have = self.runner.tasks()
        stale = [
            task_id
            for task_id, spec in have.items()
            if task_id not in wanted or wanted[task_id][0] != spec or task_id in self.task_restarts
        ]
        existing = set(tasks_of(snapshot))
        deleted = {name for name, _ in stale if name not in snapshot.connectors}
        if stale:
            self.runner.stop(stale)
            for task_id in stale:
                if task_id not in wanted and task_id not in existing:
                    self.status_store.put_task(task_id[0], task_id[1], None)
        self.task_restarts.clear()
        for task_id, (spec, target) in wanted.items():
            if task_id in have and task_id not in stale:
                self.runner.set_target_state(task_id, target)
            else:
                self.runner.start(spec, target)
        for name in snapshot.connectors if leads else ():
            gone = {n for n in self.status_store.connector_tasks(name) if (name, n) not in existing}
            if name in self.running and snapshot.target_state(name) == STOPPED:
                gone = set(self.status_store.connector_tasks(name))
            for number in gone:
                if (name, number) not in have:
                    self.status_store.put_task(name, number, None)
        return deleted

    # What the REST API asks.

    def _require(self, name: str, snapshot: ConfigState | None = None) -> ConfigState:
        snapshot = snapshot or self.config_store.snapshot()
        if name not in snapshot.connectors:
            raise not_found(f"Connector {name} not found")
        return snapshot

    def _require_leader(self) -> None:
        if not self.membership.is_leader():
            raise NotLeader(self.membership.leader_url())

    def connectors(self) -> list[str]:
        return sorted(self.config_store.snapshot().connectors)

    def connector_type(self, config: dict[str, str]) -> str:
        plugin = self._plugin(config)
        return plugin.kind if plugin is not None else "unknown"

    def connector_info(self, name: str) -> dict[str, Any]:
        snapshot = self._require(name)
        config = snapshot.connectors[name]
        return {
            "name": name,
            "config": dict(config),
            "tasks": [
                {"connector": name, "task": n} for n in range(len(snapshot.tasks.get(name, [])))
            ],
            "type": self.connector_type(config),
        }

    def connector_config(self, name: str) -> dict[str, str]:
        return dict(self._require(name).connectors[name])

    def task_configs(self, name: str) -> list[dict[str, Any]]:
        snapshot = self._require(name)
        return [
            {"id": {"connector": name, "task": n}, "config": dict(config)}
            for n, config in enumerate(snapshot.tasks.get(name, []))
        ]

    def validate(self, config: dict[str, str]) -> dict[str, Any]:
        try:
            return connector_config.validate(config, self.plugins, self.exactly_once_source)
        except connector_config.InvalidConnectorConfig as exc:
            raise bad_request(str(exc)) from None

    def put_connector_config(
        self, name: str, config: dict[str, str], initial_state: str | None, allow_replace: bool
    ) -> tuple[bool, dict[str, Any]]:
        """(created, info); on the herder thread."""
        self._require_leader()
        infos = self.validate(config)
        if infos["error_count"]:
            raise bad_request(connector_config.invalid_config_message(infos))
        exists = name in self.config_store.snapshot().connectors
        if exists and not allow_replace:
            raise HerderError(409, f"Connector {name} already exists")
        self.config_store.put_connector_config(
            name, config, None if exists else (initial_state or STARTED)
        )
        return not exists, self.connector_info(name)

    def patch_connector_config(self, name: str, patch: dict[str, str | None]) -> dict[str, Any]:
        self._require_leader()
        config = self.connector_config(name)
        for key, value in patch.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        if config.get("name", name) != name:
            raise bad_request(
                f"Connector name configuration ({config['name']}) doesn't match connector name "
                f"in the URL ({name})"
            )
        return self.put_connector_config(name, config, None, True)[1]

    def delete_connector(self, name: str) -> None:
        self._require_leader()
        self._require(name)
        self.config_store.remove_connector_config(name)

    def _set_target_state(self, name: str, state: str) -> None:
        self._require_leader()
        snapshot = self.config_store.snapshot()
        if name not in snapshot.connectors:
            raise not_found(f"Unknown connector {name}")
        self.config_store.put_target_state(name, state)
        if state == STOPPED and snapshot.tasks.get(name):
            self.config_store.put_task_configs(name, [])

    def pause(self, name: str) -> None:
        self._set_target_state(name, PAUSED)

    def resume(self, name: str) -> None:
        self._set_target_state(name, STARTED)
        self.submit(lambda: self._mark_for_task_configs(name))

    def stop_connector(self, name: str) -> None:
        self._set_target_state(name, STOPPED)

    def _mark_for_task_configs(self, name: str) -> None:
        current = self.running.get(name)
        if current is not None:
            current.needs_task_configs = True

    def connector_status(self, name: str) -> dict[str, Any]:
        status = self.status_store.connector(name)
        snapshot = self.config_store.snapshot()
        if status is None or name not in snapshot.connectors:
            raise not_found(f"No status found for connector {name}")
        tasks = self.status_store.connector_tasks(name)
        return {
            "name": name,
            "connector": _state_json(status),
            "tasks": [{"id": n, **_state_json(tasks[n])} for n in sorted(tasks)],
            "type": self.connector_type(snapshot.connectors[name]),
        }

    def connector_active_topics(self, name: str) -> dict[str, Any]:
        """Kafka's ActiveTopicsInfo keyed by the connector's name (an unknown connector
        has none, as in Kafka)."""
        return {name: {"topics": [t.topic for t in self.status_store.connector_topics(name)]}}

    def reset_active_topics(self, name: str) -> None:
        for status in self.status_store.connector_topics(name):
            self.status_store.delete_topic(status.connector, status.topic)

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        status = self.status_store.task(name, task)
        if status is None:
            raise not_found(f"No status found for task {name}-{task}")
        return {"id": task, **_state_json(status)}

    def restart_connector(self, name: str) -> None:
        """On the herder thread: the connector instance, not its tasks."""
        snapshot = self.config_store.snapshot()
        if name not in snapshot.connectors:
            raise not_found(f"Unknown connector: {name}")
        self._restart_connector_here(name)

    def _restart_connector_here(self, name: str) -> None:
        current = self.running.get(name)
        if current is None:
            if not self.membership.runs_connectors():
                raise NotLeader(self.membership.leader_url())
            return
        current.restart = True
        current.failed = False
        self._wake.set()

    def restart(self, name: str, include_tasks: bool, only_failed: bool) -> dict[str, Any]:
        """On the herder thread: Kafka's restart with includeTasks/onlyFailed; the status
        with what will restart shown RESTARTING."""
        snapshot = self.config_store.snapshot()
        if name not in snapshot.connectors:
            raise not_found(f"Unknown connector: {name}")
        status = self.connector_status(name)
        if not only_failed or status["connector"]["state"] == FAILED:
            self._restart_connector_here(name)
            status["connector"]["state"] = RESTARTING
        if include_tasks:
            for task in status["tasks"]:
                if not only_failed or task["state"] == FAILED:
                    if self.membership.runs_task((name, task["id"])):
                        self.task_restarts.add((name, task["id"]))
                    else:
                        _restart_elsewhere(self.membership.task_owner_url((name, task["id"])),
                                           name, task["id"])  # fmt: skip
                    task["state"] = RESTARTING
        for number in [t["id"] for t in status["tasks"] if t["state"] == RESTARTING]:
            self.status_store.put_task(name, number, self._status(RESTARTING))
        return status

    def restart_task(self, name: str, task: int) -> None:
        snapshot = self.config_store.snapshot()
        if name not in snapshot.connectors:
            raise not_found(f"Unknown connector: {name}")
        if task < 0 or task >= len(snapshot.tasks.get(name, [])):
            raise not_found(f"Unknown task: {name}-{task}")
        if not self.membership.runs_task((name, task)):
            raise NotLeader(self.membership.task_owner_url((name, task)))
        self.task_restarts.add((name, task))
        self._wake.set()

    # Offsets (KIP-875).

    def connector_offsets(self, name: str) -> dict[str, Any]:
        config = self.connector_config(name)
        if self.connector_type(config) == SOURCE:
            self.offset_store.refresh()
            entries = self.offset_store.connector_offsets(name)
            return {"offsets": [{"partition": p, "offset": o} for p, o in entries]}
        group = f"connect-{name}"
        admin = AdminClient(self.admin_settings)
        request = [ConsumerGroupTopicPartitions(group)]
        try:
            result = admin.list_consumer_group_offsets(request, request_timeout=ADMIN_TIMEOUT_S)
            partitions = result[group].result().topic_partitions or []
        except Exception as exc:
            raise HerderError(
                500, f"Failed to retrieve consumer group offsets for sink connector {name}: {exc}"
            ) from None
        return {
            "offsets": [
                {
                    "partition": {"kafka_topic": tp.topic, "kafka_partition": tp.partition},
                    "offset": {"kafka_offset": tp.offset},
                }
                for tp in sorted(partitions, key=lambda tp: (tp.topic, tp.partition))
                if tp.offset >= 0
            ]
        }

    def _require_stopped(self, name: str) -> tuple[dict[str, str], Plugin]:
        self._require_leader()
        snapshot = self._require(name)
        if snapshot.target_state(name) != STOPPED or snapshot.tasks.get(name):
            raise bad_request(
                "Connectors must be in the STOPPED state before their offsets can be modified. "
                "This can be done for the specified connector by issuing a 'PUT' request to the "
                f"'/connectors/{name}/stop' endpoint"
            )
        config = snapshot.connectors[name]
        plugin = self._plugin(config)
        if plugin is None:
            raise bad_request(f"Unknown connector class {config.get('connector.class')}")
        return config, plugin

    def alter_offsets(self, name: str, entries: list[Any]) -> dict[str, str]:
        config, plugin = self._require_stopped(name)
        if not entries:
            raise bad_request(
                "Partitions / offsets need to be provided for an alter offsets request"
            )
        connector: Any = plugin.cls()
        if plugin.kind == SOURCE:
            offsets = _source_offsets(name, entries)
            managed = self._connector_hook(connector, config, offsets)
            self.offset_store.put(name, offsets)
        else:
            sink_offsets = _sink_offsets(entries)
            managed = self._connector_hook(connector, config, sink_offsets)
            self._alter_sink_offsets(name, sink_offsets)
        return _offsets_message("altered", managed)

    def reset_offsets(self, name: str) -> dict[str, str]:
        config, plugin = self._require_stopped(name)
        connector: Any = plugin.cls()
        if plugin.kind == SOURCE:
            offsets = {
                offset_key(name, p): (p, None) for p, _ in self.offset_store.connector_offsets(name)
            }
            managed = self._connector_hook(connector, config, offsets)
            self.offset_store.put(name, offsets)
        else:
            managed = self._connector_hook(connector, config, {})
            group = f"connect-{name}"
            admin = AdminClient(self.admin_settings)
            try:
                admin.delete_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[
                    group
                ].result()
            except Exception as exc:
                if "GROUP_ID_NOT_FOUND" not in str(exc):
                    raise HerderError(
                        500,
                        f"Failed to reset consumer group offsets for sink connector {name}: {exc}",
                    ) from None
        return _offsets_message("reset", managed)

    @staticmethod
    def _connector_hook(connector: Any, config: dict[str, str], offsets: Any) -> bool:
        try:
            return bool(connector.alter_offsets(config, offsets))
        except ConnectException as exc:
            raise bad_request(str(exc)) from None

    def _alter_sink_offsets(self, name: str, offsets: dict[tuple[str, int], int | None]) -> None:
        if any(offset is None for offset in offsets.values()):
            raise bad_request(
                "Resetting one partition of a sink connector (a null offset) is not served by "
                "Strom yet; DELETE /connectors/{name}/offsets resets them all"
            )
        group = f"connect-{name}"
        partitions = [TopicPartition(t, p, o) for (t, p), o in offsets.items() if o is not None]
        admin = AdminClient(self.admin_settings)
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        try:
            admin.alter_consumer_group_offsets(request, request_timeout=ADMIN_TIMEOUT_S)[
                group
            ].result()
        except Exception as exc:
            raise HerderError(
                500, f"Failed to alter consumer group offsets for connector {name}: {exc}"
            ) from None


def _task_class(current: _Running) -> type | None:
    if current.instance is not None:
        return current.instance.task_class()
    if current.plugin is not None:
        return _plugin_task_class(current.plugin)
    return None


def _plugin_task_class(plugin: Plugin) -> type | None:
    """The task class of a connector plugin, from an instance that is not started."""
    try:
        task_class: type = plugin.cls().task_class()
    except Exception:
        return None
    return task_class


def tasks_of(snapshot: ConfigState) -> list[TaskId]:
    """Every task the stored configs define, by connector and number."""
    return [
        (name, number)
        for name, configs in snapshot.tasks.items()
        if name in snapshot.connectors
        for number in range(len(configs))
    ]


def _restart_elsewhere(url: str | None, name: str, task: int) -> None:
    """Ask the worker that runs a task to restart it, in the background (a restart the
    leader is asked for includes tasks that run on other workers)."""
    if url is None:
        log.warning("restart of %s-%d: no worker runs it", name, task)
        return
    path = f"/connectors/{quote(name, safe='')}/tasks/{task}/restart"

    def post() -> None:
        try:
            ConnectRestClient(url).call("POST", path)
        except ConnectRestError as exc:
            log.warning("restart of %s-%d at %s: %s", name, task, url, exc)

    threading.Thread(target=post, daemon=True, name="restart-elsewhere").start()


def _state_json(status: Status) -> dict[str, Any]:
    shown: dict[str, Any] = {"state": status.state, "worker_id": status.worker_id}
    if status.trace:
        shown["trace"] = status.trace
    return shown


def _offsets_message(change: str, managed: bool) -> dict[str, str]:
    if managed:
        return {"message": f"The offsets for this connector have been {change} successfully"}
    return {
        "message": f"The Connect framework-managed offsets for this connector have been {change} "
        "successfully. However, if this connector manages offsets externally, they will need to "
        f"be manually {change} in the system that the connector uses."
    }


def _source_offsets(name: str, entries: list[Any]) -> dict[bytes, tuple[Any, Any]]:
    offsets: dict[bytes, tuple[Any, Any]] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("partition"), dict):
            raise bad_request("Partition objects cannot be null")
        offset = entry.get("offset")
        if offset is not None and not isinstance(offset, dict):
            raise bad_request("Offset objects should either be null or JSON objects")
        offsets[offset_key(name, entry["partition"])] = (entry["partition"], offset)
    return offsets


def _sink_offsets(entries: list[Any]) -> dict[tuple[str, int], int | None]:
    offsets: dict[tuple[str, int], int | None] = {}
    for entry in entries:
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(partition, dict):
            raise bad_request("The partition for a sink connector offset cannot be null or missing")
        topic, number = partition.get("kafka_topic"), partition.get("kafka_partition")
        if not isinstance(topic, str) or not isinstance(number, int) or isinstance(number, bool):
            raise bad_request(
                "The partition for a sink connector offset must contain the keys 'kafka_topic' "
                "(a string) and 'kafka_partition' (an integer)"
            )
        offset = entry.get("offset")
        if offset is None:
            offsets[(topic, number)] = None
            continue
        value = offset.get("kafka_offset") if isinstance(offset, dict) else None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise bad_request(
                "The offset for a sink connector should either be null or contain the key "
                "'kafka_offset' with a non-negative integer"
            )
        offsets[(topic, number)] = value
    return offsets
