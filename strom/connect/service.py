"""One Connect worker, started and stopped as a whole: its stores (read to their end
before it answers), its REST server, its herder and its task runner.

Standalone: configs and statuses in memory, offsets in ``offset.storage.file.filename``,
the connectors of the command line's files created (or updated) at start; a bad one
stops the start with Kafka's message. Distributed: the three topics, and the group's
leader election. Stopping stops every task, committing its offsets, before the clients
close, so a worker stopped and started again resumes exactly where it stopped.

Does not own the command line (``strom.cli.connect_worker``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from confluent_kafka.admin import AdminClient

from strom.client_security import ClientSecurity
from strom.config import ConfigError
from strom.connect.herder import Herder, HerderError, tasks_of
from strom.connect.membership import Membership, SharedWork, SoleMember
from strom.connect.plugins import Plugins
from strom.connect.rest import ConnectRest
from strom.connect.runtime import InWorkerRunner
from strom.connect.spark_runner import RunnerByTask, SparkRunner
from strom.connect.stores import (
    ConfigStore,
    FileOffsetStore,
    MemoryConfigStore,
    OffsetStore,
    StatusStore,
    TopicConfigStore,
    TopicOffsetStore,
    TopicStatusStore,
)
from strom.connect.topic_log import TopicLogError
from strom.connect.worker_config import DISTRIBUTED, WorkerConfig
from strom.services.http import HttpServer
from strom.services.http_security import HttpSecurityError, http_security

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0
LEADER_WAIT_S = 30.0
GROUP_TIMEOUTS = ("session.timeout.ms", "heartbeat.interval.ms", "rebalance.timeout.ms")


class WorkerStartError(Exception):
    """The worker cannot start; one line for the user."""


class ConnectWorker:
    def __init__(
        self, config: WorkerConfig, connector_configs: list[dict[str, str]] | None = None
    ) -> None:
        """``connector_configs``: a standalone worker's connectors from its command line."""
        self.config = config
        self.connector_configs = connector_configs or []
        self.plugins = Plugins.builtin()
        self.admin_settings = config.client_settings("admin")
        self.config_store: ConfigStore
        self.status_store: StatusStore
        self.offset_store: OffsetStore
        if config.mode == DISTRIBUTED:
            self.config_store = TopicConfigStore(
                config.client_settings("admin"),
                config["config.storage.topic"],
                config["config.storage.replication.factor"],
            )
            self.offset_store = TopicOffsetStore(
                config.client_settings("admin"),
                config["offset.storage.topic"],
                config["offset.storage.partitions"],
                config["offset.storage.replication.factor"],
            )
            self.status_store = TopicStatusStore(
                config.client_settings("admin"),
                config["status.storage.topic"],
                config["status.storage.partitions"],
                config["status.storage.replication.factor"],
            )
        else:
            self.config_store = MemoryConfigStore()
            self.offset_store = FileOffsetStore(config["offset.storage.file.filename"])
            self.status_store = StatusStore()
        self.rest = ConnectRest(
            self.plugins,
            None,
            config["topic.tracking.enable"],
            config["topic.tracking.allow.reset"],
        )
        self.server: HttpServer | None = None
        self.herder: Herder | None = None
        self.url = ""

    def _client_security(self) -> ClientSecurity:
        """How the worker's own group requests reach the brokers: the admin client's
        security settings (a bad one was refused when the settings were read)."""
        try:
            return ClientSecurity.from_properties(self.admin_settings)
        except ValueError as exc:
            raise WorkerStartError(str(exc)) from None

    def _security(self) -> Any:
        listener = self.config["listeners"][0]
        try:
            return http_security(listener, self.config.https_settings(), "listeners.https.")
        except HttpSecurityError as exc:
            raise ConfigError(str(exc)) from None

    def _start_stores(self) -> str | None:
        """Read the stores (blocking); the Kafka cluster's id."""
        admin = AdminClient(self.admin_settings)
        try:
            cluster_id: str | None = (
                admin.describe_cluster(request_timeout=TIMEOUT_S).result().cluster_id
            )
        except Exception as exc:
            raise WorkerStartError(
                f"cannot reach the Kafka cluster at {','.join(self.config['bootstrap.servers'])}: "
                f"{exc}"
            ) from None
        try:
            for store in (self.config_store, self.offset_store, self.status_store):
                store.start()
        except (TopicLogError, OSError) as exc:
            raise WorkerStartError(str(exc)) from None
        return cluster_id

    async def start(self) -> str:
        """Read the stores, serve the REST API, start the herder; the URL served."""
        security = self._security()
        loop = asyncio.get_running_loop()
        self.rest.cluster_id = await loop.run_in_executor(None, self._start_stores)
        self.rest.forwarding_tls = security.forwarding_tls
        listener = security.listener
        self.server = HttpServer(self.rest.app, listener.host, listener.port, security.ssl_context)
        try:
            port = await self.server.start()
        except OSError as exc:
            raise WorkerStartError(
                f"cannot listen on {self.config['listeners'][0]}: {exc.strerror}"
            ) from None
        self.url = listener.url(port)
        advertised = self.config.advertised_url(port)
        worker_id = advertised.split("://", 1)[1]
        membership: Membership
        if self.config.mode == DISTRIBUTED:
            config_store = self.config_store
            membership = SharedWork(
                self.admin_settings["bootstrap.servers"],
                self.config["group.id"],
                advertised,
                self._client_security(),
                lambda: tasks_of(config_store.snapshot()),
                {
                    key: self.config[key]
                    for key in (
                        "session.timeout.ms",
                        "heartbeat.interval.ms",
                        "rebalance.timeout.ms",
                    )
                },
            )
        else:
            membership = SoleMember(advertised)
        herder = Herder(
            worker_id,
            self.plugins,
            self.config_store,
            self.status_store,
            self.offset_store,
            membership,
            self.admin_settings,
            exactly_once_source=self.config.exactly_once_source,
            topic_tracking=self.config["topic.tracking.enable"],
        )
        in_worker = InWorkerRunner(
            self.config,
            self.plugins,
            self.offset_store,
            herder.task_state_changed,
            herder.record_active_topic,
        )
        on_spark = SparkRunner(
            self.config,
            self.plugins,
            self.offset_store,
            herder.task_state_changed,
            herder.record_active_topic,
        )
        herder.start(RunnerByTask(in_worker, on_spark))
        self.herder = herder
        if await loop.run_in_executor(None, membership.wait_for_leader, LEADER_WAIT_S) is None:
            log.warning(
                "no leader of group %s yet; writes are refused until there is one",
                self.config["group.id"],
            )
        for connector in self.connector_configs:
            await self._create(herder, connector)
        self.rest.herder = herder
        return self.url

    async def _create(self, herder: Herder, config: dict[str, str]) -> None:
        name = config.get("name", "")
        future = herder.submit(lambda: herder.put_connector_config(name, config, None, True))
        try:
            await asyncio.wrap_future(future)
        except HerderError as exc:
            raise WorkerStartError(
                f"Failed to create connector for {name or config}: {exc.message}"
            ) from None

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        if self.server is not None:
            await self.server.stop()
        if self.herder is not None:
            await loop.run_in_executor(None, self.herder.stop)
        for store in (self.config_store, self.offset_store, self.status_store):
            await loop.run_in_executor(None, store.close)
