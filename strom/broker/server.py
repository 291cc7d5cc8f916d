"""The node: assembles its parts by role (broker, controller or both), opens its
listeners, runs its background duties and stops in order.

Owns: building each part with the narrow view of the node it needs
(``strom.broker.node``, ``network.router.NodeServices``), the client and controller
listeners (each connection is a ``network.connection.KafkaConnection``), the periodic
flush, checkpoint and log maintenance (retention, producer id expiry, cleaner, delayed
deletes), taking up the replication roles the metadata gives it, and an orderly
shutdown. What a request does is its handler's (``strom.broker.handlers`` and the
other rooms); how bytes become requests is the connection's.
"""

from __future__ import annotations

import asyncio
import base64
import faulthandler
import functools
import gc
import hashlib
import logging
import time
from collections.abc import Callable

from strom.broker.access.authentication import ListenerSecurity, peer_security
from strom.broker.access.client_quotas import ClientQuotas
from strom.broker.access.node_authorizer import node_authorizer
from strom.broker.controller_client.channel import ControllerChannel
from strom.broker.controller_client.lifecycle import BrokerLifecycle
from strom.broker.controller_client.producer_ids import ProducerIdBlocks
from strom.broker.handler_tables import route_tables
from strom.broker.handlers.data.fetch_sessions import FetchSessionCache
from strom.broker.handlers.groups.share_service import ShareService
from strom.broker.metrics import BrokerMetrics, KafkaCollector, readiness
from strom.broker.network.connection import FrameMemory, KafkaConnection
from strom.broker.network.purgatory import Purgatory
from strom.broker.network.router import Route
from strom.broker.replica.group_commit import GroupCommit
from strom.broker.replica.manager import ReplicaManager
from strom.broker.replica.txn_markers import TxnMarkerSender
from strom.broker.replica.txn_verification import TxnVerifier
from strom.cluster.meta_properties import ensure_formatted
from strom.cluster.node_state import NodeState
from strom.config import BrokerConfig, ConfigError, Listener, parse_listener
from strom.controller.quorum import QuorumDriver
from strom.controller.service import ControllerService
from strom.coordinator.coordinator import GroupCoordinator
from strom.coordinator.transactions import TransactionCoordinator
from strom.raft.core import RaftConfig
from strom.security.connection_limits import ConnectionLimits
from strom.services.admin_http import AdminListener
from strom.storage.log_manager import write_checkpoints
from strom.storage.metadata_log import MetadataLogStore

log = logging.getLogger(__name__)

TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a client that has not finished its TLS handshake by then goes


class Broker:
    """One Strom node: its roles (broker, controller or both), storage and network front.

    Every node runs the metadata quorum's Raft core (a voter on controllers, an
    observer on brokers) and replays the committed metadata into its NodeState. A
    controller serves the controller listener and, while it leads the quorum, acts as
    the active controller. A broker registers with the active controller and opens its
    client listeners once the controller has unfenced it (it has caught up with the
    metadata), as Kafka's brokers do. With no quorum configured the node is a quorum
    of one and needs no controller listener (the single-node default).
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.routes, self.controller_routes = route_tables()
        self.is_broker = config.is_broker
        self.is_controller = config.is_controller
        meta = ensure_formatted(
            config, config["cluster.id"], new_cluster_id=agreed_cluster_id(config)
        )
        self._cluster_id: str = meta.cluster_id
        self.state = NodeState(config, hosts_logs=self.is_broker)
        self.purgatory = Purgatory()
        self.authorizer = node_authorizer(config)  # None without authorizer.class.name
        slots = int(config["max.incremental.fetch.session.cache.slots"])
        self.fetch_sessions = FetchSessionCache(slots)  # KIP-227
        self.group_commit = GroupCommit()
        self.voters = config.voter_addresses
        # How this node's own connections reach the controllers and the other brokers.
        controller_names = config.controller_listener_names
        self.controller_security = peer_security(
            config,
            controller_names[0] if controller_names else None,
            "sasl.mechanism.controller.protocol",
        )
        self.inter_broker_security = (
            peer_security(
                config, config.inter_broker_listener_name, "sasl.mechanism.inter.broker.protocol"
            )
            if config.is_broker
            else None
        )
        self.quorum = QuorumDriver(
            self.node_id,
            config.voter_ids,
            self.voters,
            raft_config(config),
            MetadataLogStore(
                config.metadata_log_dir,
                segment_bytes=config["metadata.log.segment.bytes"],
                voters=config.voter_ids,
            ),
            self._cluster_id,
            self.state,
            on_leadership=self._leadership_changed,
            snapshot_every_bytes=config["metadata.log.max.record.bytes.between.snapshots"],
            snapshot_interval_ms=config["metadata.log.max.snapshot.interval.ms"],
            peer_security=self.controller_security,
        )
        self.lifecycle = BrokerLifecycle(self) if self.is_broker else None
        self.controller_service: ControllerService | None = (
            ControllerService(
                config,
                self._cluster_id,
                self.state,
                self.quorum,
                own_incarnation=self.lifecycle.incarnation_id if self.lifecycle else None,
            )
            if self.is_controller
            else None
        )
        self.controller_channel = ControllerChannel(self, self.voters)
        self.producer_ids = ProducerIdBlocks(self)
        self.replicas = ReplicaManager(self)
        self.coordinator = GroupCoordinator(
            self.state, config, self.replicas.append_for_coordinator
        )
        self.state.on_topic_removed = self.coordinator.forget_topic
        self.client_quotas = ClientQuotas(self.state)
        self.share_service = ShareService(self)  # after the coordinator: it sets hooks there
        # Metrics are kept while an admin listener serves them (one None check else).
        self.metrics: BrokerMetrics | None = BrokerMetrics() if config["admin.listeners"] else None
        self.admin = (
            AdminListener(
                config, KafkaCollector(self, self.metrics), functools.partial(readiness, self)
            )
            if self.metrics is not None
            else None
        )
        self.txn_markers = TxnMarkerSender(self)
        self.txn_verifier = TxnVerifier(self)
        self.transactions = TransactionCoordinator(
            self.state,
            config,
            new_producer_id=self.producer_ids.take,
            wait_replicated=self.replicas.wait_for_high_watermark,
            send_markers=self.txn_markers.send,
            append=self.replicas.append_for_coordinator,
        )
        self._replicating = False
        self._metadata_changed = asyncio.Event()
        self.state.on_change = self._on_metadata_change
        self.client_listeners = config.client_listeners if self.is_broker else []
        self.controller_listeners = config.controller_listeners if self.is_controller else []
        self.advertised = [
            listener
            for listener in (parse_listener(spec) for spec in config.advertised_listeners)
            if not config.is_controller_listener(listener.name)
        ]
        self.max_request_size: int = config["socket.request.max.bytes"]
        self.max_unauthenticated_size: int = config["sasl.server.max.receive.size"]
        # Each listener's TLS context and SASL settings; a bad one stops start-up here.
        self.listener_security = {
            listener.name: ListenerSecurity.of(config, listener.name)
            for listener in [*self.client_listeners, *self.controller_listeners]
        }
        self._servers: list[asyncio.AbstractServer] = []
        self.connections: set[KafkaConnection] = set()
        self.connection_limits = ConnectionLimits(config)
        self.frame_memory = FrameMemory(config)
        # Listeners that do not count towards max.connections: the controller's, and the
        # inter-broker one when clients have another (Kafka's protected listener).
        self.uncounted_listeners = set(config.controller_listener_names)
        if config.inter_broker_listener_name and len(config.client_listeners) > 1:
            self.uncounted_listeners.add(config.inter_broker_listener_name)
        self._duties: asyncio.Task[None] | None = None
        self._idle_closer: asyncio.Task[None] | None = None
        self.bound: list[Listener] = []

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def serving_clients(self) -> bool:
        """Whether the client listeners serve (the broker has caught up and is unfenced)."""
        return self._replicating

    def connections_per_listener(self) -> dict[str, int]:
        """Open connections, by the name of the listener they came in on."""
        counts: dict[str, int] = {}
        for connection in list(self.connections):
            name = connection.session.listener
            counts[name] = counts.get(name, 0) + 1
        return counts

    def security_protocol(self, listener_name: str) -> str:
        try:
            return self.config.security_protocol(listener_name)
        except ConfigError:
            return "PLAINTEXT"

    def advertised_client_listeners(self) -> list[Listener]:
        out = []
        for listener in self.advertised:
            port = listener.port
            if port == 0:
                port = next((b.port for b in self.bound if b.name == listener.name), 0)
            out.append(Listener(listener.name, listener.host or "127.0.0.1", port))
        return out

    def advertised_endpoint(self, listener_name: str | None = None) -> tuple[str, int]:
        """Where clients reach this broker on ``listener_name`` (the first advertised
        listener when it is not one of them)."""
        listeners = self.advertised_client_listeners()
        chosen = next((lst for lst in listeners if lst.name == listener_name), listeners[0])
        return chosen.host, chosen.port

    def _on_metadata_change(self) -> None:
        self._metadata_changed.set()
        if self._replicating:
            self.replicas.metadata_changed()

    def _leadership_changed(self, leader_ready: bool) -> None:
        if self.controller_service is not None:
            self.controller_service.leadership_changed(leader_ready)

    async def wait_for_metadata(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``done()`` holds for this node's metadata; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._metadata_changed.clear()
            try:
                await asyncio.wait_for(self._metadata_changed.wait(), remaining)
            except TimeoutError:
                return done()
        return True

    async def _bind(
        self, listeners: list[Listener], routes: dict[int, Route]
    ) -> list[asyncio.AbstractServer]:
        """Bind (not yet accept on) each listener; port 0 becomes the port bound."""
        loop = asyncio.get_running_loop()
        servers: list[asyncio.AbstractServer] = []
        for listener in listeners:
            security = self.listener_security[listener.name]
            tls = security.tls
            server = await loop.create_server(
                lambda security=security: KafkaConnection(self, routes, security),
                host=listener.host or None,
                port=listener.port,
                reuse_address=True,
                backlog=1024,
                start_serving=False,
                # Each handshake moves to the listener's current context (reloaded
                # certificates); one that fails or stalls costs only its connection.
                ssl=tls.serving() if tls is not None else None,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls is not None else None,
            )
            port = server.sockets[0].getsockname()[1]
            self.bound.append(Listener(listener.name, listener.host, port))
            self._servers.append(server)
            servers.append(server)
        return servers

    async def start(self) -> None:
        started = time.monotonic()
        self.state.load()
        for server in await self._bind(self.controller_listeners, self.controller_routes):
            await server.start_serving()
        if self.admin is not None:  # health answers while the node starts
            await self.admin.start()
        clients = await self._bind(self.client_listeners, self.routes)
        self.quorum.start()
        if self.lifecycle is not None:
            # Clients are let in once the controller has unfenced this broker (it has
            # caught up with the metadata), as Kafka's brokers wait to.
            self.lifecycle.start()
            await self.lifecycle.wait_unfenced()
            self.coordinator.start()
            self.transactions.start()
            self.replicas.start()
            self._replicating = True
            for server in clients:
                await server.start_serving()
        self._duties = asyncio.get_running_loop().create_task(self._run_duties())
        self._idle_closer = asyncio.get_running_loop().create_task(self._close_idle_connections())
        # What start-up loaded (modules, kio's schema classes, metadata) lives as long
        # as the broker: frozen, out of the collector's sight, it is not rescanned by
        # every full collection (one took 13.7 ms over 52k objects, a latency spike).
        gc.collect()
        gc.freeze()
        if self.metrics is not None:
            self.metrics.loop_lag.start()  # from here on, what clients would feel
        endpoints = ", ".join(f"{b.name}://{b.host}:{b.port}" for b in self.bound)
        log.info(
            "Strom node %d (%s) started in %.2fs: listening on %s, log dir %s, cluster id %s",
            self.node_id,
            ",".join(sorted(self.config.process_roles)),
            time.monotonic() - started,
            endpoints,
            self.config.log_dir.resolve(),
            self.cluster_id,
        )

    async def stop(self) -> None:
        stopping = time.monotonic()
        log.info("Strom node %d stopping", self.node_id)
        # A stop that hangs says where: every thread's stack goes to stderr after 30 s.
        faulthandler.dump_traceback_later(STOP_STACKS_AFTER_S, exit=False)
        for server in self._servers:
            server.close()
        if self.lifecycle is not None:
            await self.lifecycle.shutdown()
            log.info(
                "controlled shutdown done in %.2fs: closing connections, stopping replication",
                time.monotonic() - stopping,
            )
        for connection in list(self.connections):
            connection.close()
        if self._duties is not None:
            self._duties.cancel()
        if self.metrics is not None:
            self.metrics.loop_lag.stop()
        if self._idle_closer is not None:
            self._idle_closer.cancel()
        await self._servers_closed()
        self.purgatory.wake_all()
        self._replicating = False
        await self.replicas.stop()
        self.coordinator.stop()
        self.transactions.stop()
        self.txn_markers.close()
        self.txn_verifier.close()
        self.group_commit.shutdown()
        if self.controller_service is not None:
            self.controller_service.stop()
        await self.quorum.stop()
        self.controller_channel.close()
        if self.admin is not None:
            await self.admin.stop()
        self.state.shutdown()
        faulthandler.cancel_dump_traceback_later()
        log.info(
            "Strom node %d stopped cleanly in %.2fs", self.node_id, time.monotonic() - stopping
        )

    async def _servers_closed(self, grace_s: float = 5.0) -> None:
        """Wait for the listeners to finish closing: they wait for every connection to
        be gone, and a connection closes only once its unsent responses are written, so
        a peer that stopped reading (paused, or shutting down itself) could hold the
        stop forever. After ``grace_s`` the connections left are aborted."""
        waiting = asyncio.gather(*(server.wait_closed() for server in self._servers))
        try:
            await asyncio.wait_for(asyncio.shield(waiting), grace_s)
            return
        except TimeoutError:
            left = list(self.connections)
            log.info(
                "%d connection(s) still flushing after %.0fs: aborting them", len(left), grace_s
            )
            for connection in left:
                connection.abort()
        try:
            await asyncio.wait_for(waiting, grace_s)
        except TimeoutError:
            log.warning("the listeners did not close within %.0fs more; stopping anyway", grace_s)

    async def _close_idle_connections(self) -> None:
        """connections.max.idle.ms: close a connection that has neither read nor written
        for that long and owes no response (a long poll is not idle), as Kafka's
        selector expires idle channels. -1 keeps them."""
        while True:
            idle_ms = int(self.config["connections.max.idle.ms"])
            await asyncio.sleep(min(max(idle_ms, 1000) / 4000, 30.0))
            if idle_ms < 0:
                continue
            oldest = time.monotonic() - idle_ms / 1000
            for connection in list(self.connections):
                if connection.last_active < oldest and not connection.owed:
                    log.info(
                        "closing connection from %s: idle for more than %d ms",
                        connection.peer,
                        idle_ms,
                    )
                    connection.close()

    async def _run_duties(self) -> None:
        logs = self.state.logs
        loop = asyncio.get_running_loop()

        def move_cleaner_on() -> None:
            try:
                logs.cleaner.maintain()
            except Exception:
                log.exception("log cleaner maintenance failed")

        def wake_cleaner() -> None:  # from the cleaner's threads
            try:
                loop.call_soon_threadsafe(move_cleaner_on)
            except RuntimeError:
                pass  # the loop is closed: shutdown sees the cleaning through

        logs.cleaner.wake = wake_cleaner
        flush_every = self.config["log.flush.scheduler.interval.ms"] / 1000
        tick = min(flush_every, logs.maintenance_interval_ms / 1000)
        checkpoint_every = max(self.config["log.flush.offset.checkpoint.interval.ms"], 1) / 1000
        last_checkpoint = time.monotonic()
        checkpoint_written: asyncio.Future[None] | None = None
        while True:
            await asyncio.sleep(tick)
            try:
                # fsyncs and checkpoint files on the fsync thread, never on the loop
                for due in logs.logs_due_for_flush(int(time.time() * 1000)):
                    self.group_commit.flush_in_background(due)
                logs.maintain()  # retention, producer id expiry, compaction, file deletion
                if checkpoint_written is not None and checkpoint_written.done():
                    written, checkpoint_written = checkpoint_written, None
                    written.result()  # a failed write raises: logged below
                if checkpoint_written is None and (
                    time.monotonic() - last_checkpoint >= checkpoint_every
                ):
                    checkpoint_written = self.group_commit.in_background(
                        functools.partial(write_checkpoints, logs.checkpoint_contents())
                    )
                    last_checkpoint = time.monotonic()
            except Exception:
                log.exception("periodic flush failed")


def raft_config(config: BrokerConfig) -> RaftConfig:
    """The Raft core's timeouts from the ``controller.quorum.*`` properties.

    A leader holds an idle follower's fetch up to 500 ms (Kafka's figure), but never
    more than a quarter of the fetch timeout: a follower whose fetch timeout is near
    or below the hold would otherwise give up on a healthy leader (200 ms: new
    elections several times a second)."""
    fetch_timeout_ms = config["controller.quorum.fetch.timeout.ms"]
    return RaftConfig(
        election_timeout_ms=config["controller.quorum.election.timeout.ms"],
        fetch_timeout_ms=fetch_timeout_ms,
        election_backoff_max_ms=config["controller.quorum.election.backoff.max.ms"],
        request_timeout_ms=config["controller.quorum.request.timeout.ms"],
        fetch_max_wait_ms=max(1, min(500, fetch_timeout_ms // 4)),
    )


def agreed_cluster_id(config: BrokerConfig) -> str | None:
    """The cluster id an unformatted node of a configured quorum takes: one derived from
    the voters, the same on every node started from the same voter list. None when the
    node is alone (it then formats itself with a new random id)."""
    voters = config.quorum_voters
    if not voters:
        return None
    text = ",".join(
        f"{v.node_id}@{v.host}:{v.port}" for v in sorted(voters, key=lambda v: v.node_id)
    )
    digest = hashlib.sha256(text.encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


STOP_STACKS_AFTER_S = 30.0
