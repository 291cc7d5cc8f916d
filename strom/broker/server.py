"""The broker process: listeners, the per-connection request loop, background duties.

Owns: accepting connections, cutting the byte stream into frames, routing each
request to its handler in arrival order (responses go back in request order, as
Kafka clients require), closing a connection that sends a malformed, oversized
or unknown request (one log line, the broker carries on), the periodic flush,
checkpoint and log maintenance (retention, producer id expiry, cleaner, delayed
deletes), and an orderly shutdown.

A connection handles its requests in order. Most handlers answer at once; a
long-polling fetch, a held JoinGroup or a produce waiting for its fsync returns
an awaitable, and the connection goes on handling later requests (up to
MAX_PIPELINED owed responses) while their responses wait behind it, so replies
always leave in request order. Responses to one read go out in one write.
Reading is paused while the socket's send buffer is full or too many responses
are owed, so a slow client cannot make the broker buffer without bound.

A TLS listener's connections are served once their handshake is done (each takes the
listener's current certificates; ``authentication.ListenerSecurity``); a SASL
connection is served ApiVersions, SaslHandshake and SaslAuthenticate only until it
has authenticated (``authentication.ConnectionSession``), and a request carries the
connection's principal and listener.

Frames of 64 KiB or more are received straight into a buffer of their own (the
connection's previous one when nothing holds a view of it any more); large Produce
frames are kept writable and decoded in place (protocol/produce_view.py), so their
record batches reach the log without a copy.
"""

from __future__ import annotations

import asyncio
import base64
import faulthandler
import functools
import gc
import hashlib
import inspect
import logging
import mmap
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from strom.broker.access.authentication import SASL_HANDSHAKE as SASL_HANDSHAKE_KEY
from strom.broker.access.authentication import ConnectionSession, ListenerSecurity, peer_security
from strom.broker.access.client_quotas import ClientQuotas
from strom.broker.controller.channel import ControllerChannel
from strom.broker.controller.lifecycle import BrokerLifecycle
from strom.broker.controller.producer_ids import ProducerIdBlocks
from strom.broker.controller.quorum import QuorumDriver
from strom.broker.controller.service import ControllerService
from strom.broker.handler_tables import route_tables
from strom.broker.handlers.cluster.api_versions import (
    unsupported_version_answer,
    unsupported_version_response,
)
from strom.broker.handlers.data.fetch_sessions import FetchSessionCache
from strom.broker.metrics import BrokerMetrics, KafkaCollector, readiness
from strom.broker.network.purgatory import Purgatory
from strom.broker.network.router import RequestContext, Route
from strom.broker.replica.group_commit import GroupCommit
from strom.broker.replica.manager import ReplicaManager
from strom.broker.replica.txn_markers import TxnMarkerSender
from strom.broker.replica.txn_verification import TxnVerifier
from strom.cluster.meta_properties import ensure_formatted
from strom.cluster.node_state import NodeState
from strom.config import BrokerConfig, ConfigError, Listener, parse_listener
from strom.coordinator.coordinator import GroupCoordinator
from strom.coordinator.transactions import TransactionCoordinator
from strom.protocol.framing import (
    API_VERSIONS_KEY,
    PRODUCE_KEY,
    FrameError,
    codec_for,
    decode_request,
    encode_response_chunks,
    peek_header,
)
from strom.raft.core import RaftConfig
from strom.security.connection_limits import ConnectionLimits
from strom.security.sasl import SaslAuthenticationFailed
from strom.services.admin_http import AdminListener
from strom.storage.log_manager import write_checkpoints
from strom.storage.metadata_log import MetadataLogStore

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")  # Produce is key 0
# Per connection, for frames smaller than DIRECT_FRAME: a connection starts with
# FIRST_RECEIVE_BUFFER and doubles it, up to RECEIVE_BUFFER, each time a read fills it,
# so a thousand quiet connections do not cost a quarter of a megabyte each.
RECEIVE_BUFFER = 256 * 1024
FIRST_RECEIVE_BUFFER = 8 * 1024
# Produce frames from this size on are decoded in place (records never copied); below
# it kio's native decoder is faster than the copies it makes.
IN_PLACE_PRODUCE = 16 * 1024
DIRECT_FRAME = 64 * 1024
# A connection keeps its last large-frame buffer for the next one up to this size:
# a fresh buffer costs a zero fill and a page fault per 4 KiB as the frame arrives.
SPARE_FRAME_BUFFER = 16 * 1024 * 1024
# A frame above this size is received into an anonymous memory mapping: its pages are
# taken as bytes arrive, so a frame declared and never sent costs no memory (smaller
# ones reuse the connection's spare buffer, whose pages are already there). So is a
# connection's first large frame of any size: until it has sent one whole, a client
# that declares a frame and trickles it (slowloris) holds only what it sent.
MAPPED_FRAME = SPARE_FRAME_BUFFER
# A client that has not finished its TLS handshake by then is disconnected.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


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
        self._connections: set[KafkaConnection] = set()
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
        for connection in list(self._connections):
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
        servers = []
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
        for connection in list(self._connections):
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
            left = list(self._connections)
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
            for connection in list(self._connections):
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
MAX_PIPELINED = 64  # requests handled ahead of an owed response before reading pauses


class _Owed:
    """A response slot in request order: filled when its handler's awaitable is done."""

    __slots__ = ("chunks", "ready")

    def __init__(self) -> None:
        self.chunks: list[bytes | bytearray | memoryview] = []
        self.ready = False


class FrameMemory:
    """queued.max.request.bytes, as Kafka's memory pool: the bytes large request frames
    being received may hold in all. A connection whose next frame does not fit waits,
    its reading paused, until frames in flight release memory (one frame is always let
    in, however large, as Kafka's pool does); -1 bounds nothing."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.held = 0
        self.waiting: list[KafkaConnection] = []

    def take(self, size: int, connection: KafkaConnection) -> bool:
        limit = int(self.config["queued.max.request.bytes"])
        if limit > 0 and self.held and self.held + size > limit:
            if connection not in self.waiting:
                self.waiting.append(connection)
            return False
        self.held += size
        return True

    def give_back(self, size: int) -> None:
        self.held -= size
        waiting, self.waiting = self.waiting, []
        for connection in waiting:
            if not connection.closed:
                connection.resume_after_memory()


class KafkaConnection(asyncio.BufferedProtocol):
    """The request loop of one client connection.

    Bytes are received into ``inbox``; a frame of at least DIRECT_FRAME bytes (a
    produce of big batches) is received straight into a buffer of its own, so its
    records are not copied on the way in.
    """

    def __init__(
        self, broker: Broker, routes: dict[int, Route], security: ListenerSecurity
    ) -> None:
        self.broker = broker
        self.routes = routes  # the table of the listener this connection came in on
        self.session = ConnectionSession(broker, security)
        self.closing = False  # closes once the responses owed are sent (failed SASL)
        self.transport: asyncio.Transport | None = None
        self.inbox = bytearray(FIRST_RECEIVE_BUFFER)
        self.inbox_filled = False  # the last read filled the inbox: offer a bigger one
        self.start = 0  # where the next unread frame begins in ``inbox``
        self.end = 0  # where received bytes end in ``inbox``
        self.direct: bytearray | None = None  # a large frame being received in place
        self.direct_filled = 0
        self.direct_size = 0  # the frame's size; the buffer may be larger (reused)
        self.spare: bytearray | None = None  # the last large-frame buffer, free again
        self.large_frames = 0  # large frames received whole
        self.reading_paused = False
        # Responses owed, in request order; the head may still be pending (a long
        # poll, an fsync). Later requests are handled meanwhile and their responses
        # wait here, so the client sees them in order.
        self.owed: deque[_Owed] = deque()
        self.write_paused = False
        self.muted = False  # a client over its quota: not read until the timer unmutes it
        self.holds = 0  # handlers working off the loop that later requests must wait for
        self.unmute_timer: asyncio.TimerHandle | None = None
        self.closed = False
        self.peer = "?"
        self.ip: str | None = None  # counted in the connection limits until it closes
        self.last_active = time.monotonic()  # bytes last read or written
        self.frame_held = 0  # queued.max.request.bytes taken by the frame being received
        self.counted = True
        # While a batch of received requests is handled, responses gather here and go
        # out in one write: one send() per read, not one per request.
        self.outbox: list[bytes | bytearray | memoryview] | None = None
        self.read_ns = 0  # when the bytes being handled were taken up (metrics on)

    # asyncio callbacks -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        self.broker._connections.add(self)
        broker = self.broker
        self.counted = self.session.security.name not in broker.uncounted_listeners
        self.ip = peer[0] if peer else "?"
        refusal = broker.connection_limits.admit(self.ip, counted=self.counted)
        if refusal is not None:
            self.ip = None  # nothing to release
            log.info("closing connection from %s: %s", self.peer, refusal)
            self.abort()
            return
        try:
            self.session.tls_established(transport.get_extra_info("ssl_object"))
        except ValueError as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.broker._connections.discard(self)
        closing, self.session.on_close = self.session.on_close, {}
        for callback in closing.values():
            try:
                callback()
            except Exception:
                log.exception("a callback of the closed connection from %s failed", self.peer)
        self._release_frame_memory()
        self.direct = None
        if self.ip is not None:
            self.broker.connection_limits.release(self.ip, counted=self.counted)
            self.ip = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.direct is not None:
            return memoryview(self.direct)[self.direct_filled : self.direct_size]
        if self.inbox_filled and len(self.inbox) < RECEIVE_BUFFER:  # a busy connection
            self._grow_inbox(min(2 * len(self.inbox), RECEIVE_BUFFER))
        elif self.end == len(self.inbox):
            self._make_room()
        return memoryview(self.inbox)[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self.direct is None:
            self.inbox_filled = self.end + nbytes == len(self.inbox)
            self.end += nbytes
            self._process()
            return
        self.direct_filled += nbytes
        if self.direct_filled == self.direct_size:
            buffer, self.direct = self.direct, None
            self.large_frames += 1
            self._release_frame_memory()
            frame = memoryview(buffer)[: self.direct_size]
            self._process(frame)  # writable: a produce's records are patched in place
            try:
                frame.release()
            except BufferError:
                return  # something still reads through it: the buffer is not reused
            self._keep_spare(buffer)

    def _release_frame_memory(self) -> None:
        if self.frame_held:
            self.broker.frame_memory.give_back(self.frame_held)
            self.frame_held = 0

    def _keep_spare(self, buffer: bytearray | mmap.mmap) -> None:
        """Keep a large-frame buffer for the next large frame, unless something still
        holds a view of it (a bytearray with views cannot be resized: the test)."""
        if not isinstance(buffer, bytearray) or len(buffer) > SPARE_FRAME_BUFFER:
            return
        try:
            buffer.append(0)
            buffer.pop()
        except BufferError:
            return
        self.spare = buffer

    def _grow_inbox(self, size: int) -> None:
        """A new inbox of ``size`` bytes, the unread bytes moved to its front."""
        unread = self.end - self.start
        inbox = bytearray(size)
        inbox[:unread] = self.inbox[self.start : self.end]
        self.inbox, self.start, self.end = inbox, 0, unread
        self.inbox_filled = False

    def _make_room(self) -> None:
        """Move unread bytes to the front of the inbox (a new, bigger one if full)."""
        if not self.start:  # full of one frame's start: twice the size
            self._grow_inbox(2 * len(self.inbox))
            return
        unread = self.end - self.start  # same-size copy: the transport may still hold a view
        self.inbox[:unread] = self.inbox[self.start : self.end]
        self.start, self.end = 0, unread

    def pause_writing(self) -> None:
        self.write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if not self.closed:
            self._process()

    def resume_after_memory(self) -> None:
        """Frame memory was released: try the frame that waited for it again."""
        asyncio.get_running_loop().call_soon(self._process)

    def _pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None and not self.closed:
            self.reading_paused = True
            self.transport.pause_reading()

    def mute_for(self, seconds: float) -> None:
        """Read nothing more from this client for ``seconds`` (a quota's throttle time,
        KIP-219); responses owed still go out."""
        if seconds <= 0 or self.closed:
            return
        loop = asyncio.get_running_loop()
        if self.unmute_timer is not None:
            if self.unmute_timer.when() >= loop.time() + seconds:
                return
            self.unmute_timer.cancel()
        self.muted = True
        self._pause_reading()
        self.unmute_timer = loop.call_later(seconds, self._unmute)

    def hold(self) -> Callable[[], None]:
        """Handle none of this connection's later requests until the returned function
        is called (once): a request's work goes on off the event loop and its effects
        must come before theirs."""
        self.holds += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.holds -= 1
            if not self.holds and not self.closed:
                asyncio.get_running_loop().call_soon(self._process)

        return release

    def _unmute(self) -> None:
        self.muted, self.unmute_timer = False, None
        if not self.closed:
            self._process()

    # Request loop ----------------------------------------------------------

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once, unsent bytes and all (a stopping node)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self.broker._connections.discard(self)

    def _process(self, frame: bytearray | memoryview | None = None) -> None:
        self.outbox = []
        if self.broker.metrics is not None:  # requests of this read wait from here
            self.read_ns = time.perf_counter_ns()
        try:
            if frame is not None:
                self._handle(frame)
            self._process_frames()
        finally:
            outbox, self.outbox = self.outbox, None
            if outbox and not self.closed and self.transport is not None:
                self.transport.writelines(outbox)
            if self.closing and not self.owed:
                self.close()  # after the last response: the transport sends it first

    def _process_frames(self) -> None:
        while True:
            if self.closed or self.closing:
                return
            if len(self.owed) >= MAX_PIPELINED or self.write_paused or self.muted or self.holds:
                self._pause_reading()  # resumed once responses drain
                return
            if self.direct is not None:
                break  # the rest of a large frame is still on its way
            inbox = self.inbox
            available = self.end - self.start
            if available < 4:
                break
            (size,) = _SIZE.unpack_from(inbox, self.start)
            limit = (
                self.broker.max_request_size
                if self.session.authenticated
                else self.broker.max_unauthenticated_size
            )
            if size < 0 or size > limit:
                log.warning(
                    "closing connection from %s: request size %d is outside 0..%d",
                    self.peer,
                    size,
                    limit,
                )
                self.close()
                return
            begin = self.start + 4
            if available - 4 >= size:
                in_place = size >= IN_PLACE_PRODUCE and _API_KEY.unpack_from(inbox, begin)[0] == 0
                with memoryview(inbox) as view:
                    if in_place:  # a produce: decoded and patched in place, one copy not three
                        frame = bytearray(view[begin : begin + size])
                    else:
                        frame = bytes(view[begin : begin + size])
                self.start = begin + size
                self._handle(frame)
            elif size >= DIRECT_FRAME:
                if not self.broker.frame_memory.take(size, self):
                    self._pause_reading()  # resumed when frames in flight release memory
                    return
                self.frame_held = size
                direct = self.spare
                if direct is None or len(direct) < size:
                    mapped = size > MAPPED_FRAME or not self.large_frames
                    direct = mmap.mmap(-1, size) if mapped else bytearray(size)
                self.spare = None
                with memoryview(inbox) as view:
                    direct[: available - 4] = view[begin : self.end]
                self.direct, self.direct_filled, self.direct_size = direct, available - 4, size
                self.start = self.end = 0
                break
            else:
                break
        if self.start == self.end:
            self.start = self.end = 0
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()

    def _handle(self, frame: bytes | bytearray | memoryview) -> None:
        session = self.session
        if session.raw_tokens:
            self._sasl_token(bytes(frame))
            return
        try:
            api_key, api_version, correlation_id = peek_header(frame)
        except FrameError as exc:
            self._reject(str(exc))
            return
        if not session.authenticated and not session.allows(api_key):
            self._reject(f"API key {api_key} sent before SASL authentication")
            return
        if session.expires_at is not None and session.authenticated and session.expired():
            if api_key != SASL_HANDSHAKE_KEY:  # KIP-368: the session has ended
                log.info(
                    "closing connection from %s: its SASL session ended (API key %d came "
                    "after it, not a re-authentication)",
                    self.peer,
                    api_key,
                )
                self.close()
                return
        route = self.routes.get(api_key)
        if route is None:
            self._reject(f"unknown API key {api_key}")
            return
        if not route.min_version <= api_version <= route.max_version:
            if api_key == API_VERSIONS_KEY:
                self._respond(
                    encode_response_chunks(
                        correlation_id,
                        codec_for(API_VERSIONS_KEY, 0),
                        unsupported_version_response(self.routes),
                    )
                )
            else:
                self._answer_unsupported(frame, api_key, api_version, correlation_id)
            return
        codec = codec_for(api_key, api_version)
        try:
            request = decode_request(frame, codec)
        except FrameError as exc:
            self._reject(str(exc))
            return
        ctx = RequestContext(
            self.broker,
            api_key,
            api_version,
            correlation_id,
            request.client_id,
            codec,
            self.peer,
            self.routes,
            session.principal,
            session.listener,
            session,
            hold_reading=self.hold,
        )
        metrics = self.broker.metrics
        if metrics is not None:
            ctx.started_ns = time.perf_counter_ns()
            ctx.queued_ns = ctx.started_ns - self.read_ns
        try:
            result = self.broker.client_quotas.serve(
                ctx, route.handler, request.body, len(frame), self.mute_for
            )
        except Exception:
            log.exception(
                "closing connection from %s: handler for API key %d failed", self.peer, api_key
            )
            self.close()
            return
        if session.close_after_response:
            self.closing = True
        if inspect.isawaitable(result):
            owed = _Owed()
            self.owed.append(owed)
            asyncio.get_running_loop().create_task(
                self._finish(ctx, result, owed, request.body if metrics is not None else None)
            )
            return
        if metrics is not None:
            metrics.request_done(ctx, request.body, result)
        if result is None:
            return
        self._respond(encode_response_chunks(correlation_id, codec, result))

    def _sasl_token(self, token: bytes) -> None:
        """A token framed bare, after SaslHandshake v0: the answer goes back framed bare;
        a failure closes the connection without one (Kafka's v0 exchange)."""
        try:
            answer = self.session.evaluate(token)
        except SaslAuthenticationFailed:
            # Closed connection.failed.authentication.delay.ms later, reading nothing more.
            delay_ms = int(self.broker.config["connection.failed.authentication.delay.ms"])
            self.muted = True  # never unmuted: nothing more is read or served
            asyncio.get_running_loop().call_later(delay_ms / 1000, self.close)
            return
        self._respond([_SIZE.pack(len(answer)) + answer])

    async def _finish(
        self, ctx: RequestContext, pending: object, owed: _Owed, body: object = None
    ) -> None:
        try:
            response = await pending  # type: ignore[misc]
        except Exception:
            log.exception(
                "closing connection from %s: handler for API key %d failed", self.peer, ctx.api_key
            )
            self.close()
            return
        metrics = self.broker.metrics
        if metrics is not None:
            metrics.request_done(ctx, body, response)
        if self.closed:
            return
        if response is not None:
            owed.chunks = encode_response_chunks(ctx.correlation_id, ctx.codec, response)
        owed.ready = True
        while self.owed and self.owed[0].ready:
            self._send(self.owed.popleft().chunks)
        if self.closing and not self.owed:
            self.close()
            return
        if self.reading_paused and len(self.owed) < MAX_PIPELINED:
            self._process()

    def _answer_unsupported(
        self, frame: bytes | bytearray | memoryview, api_key: int, version: int, correlation: int
    ) -> None:
        """UNSUPPORTED_VERSION for a version this listener does not serve, where that
        version's layout is known and an answer is owed; otherwise the connection closes."""
        reason = f"unsupported version {version} of API key {api_key}"
        try:
            codec = codec_for(api_key, version)
        except RuntimeError:  # kio's KioIndexError: no layout known, nothing to answer in
            self._reject(reason)
            return
        try:
            body: Any = decode_request(bytes(frame), codec).body
        except FrameError:
            body = None
        if api_key == PRODUCE_KEY and getattr(body, "acks", None) == 0:
            self._reject(reason)  # acks=0 is owed no answer
            return
        log.info("answering UNSUPPORTED_VERSION to %s: %s", self.peer, reason)
        response = unsupported_version_answer(api_key, version, body)
        self._respond(encode_response_chunks(correlation, codec, response))

    def _respond(self, chunks: list[bytes | bytearray | memoryview]) -> None:
        """Send a response now, or queue it behind responses still owed."""
        self.last_active = time.monotonic()
        if self.owed:
            owed = _Owed()
            owed.chunks, owed.ready = chunks, True
            self.owed.append(owed)
        else:
            self._send(chunks)

    def _send(self, chunks: list[bytes | bytearray | memoryview]) -> None:
        if self.closed or self.transport is None:
            return
        if self.outbox is not None:
            self.outbox += chunks
        elif len(chunks) == 1:
            self.transport.write(chunks[0])
        else:
            self.transport.writelines(chunks)

    def _reject(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.close()
