"""The dispatch points from API key to handler, and the source of ApiVersions.

Handler modules register themselves with ``@handles(api_key, min_version,
max_version)`` for the client listeners and ``@handles_controller(...)`` for the
controller listener (KRaft's quorum RPCs, broker registration and heartbeats, and
admin requests forwarded to the active controller); an API served on both registers
once per table. The advertised version ranges are read from the table of the
listener a request came in on, never from a hand-kept list. A handler takes a
``RequestContext`` and the decoded kio request body and returns the response body, an
awaitable of it (long polls), or None when no response is owed (produce with acks=0).

A handler sees the node through ``NodeServices``: what it may touch (the metadata, the
coordinators, the replica manager, the controller channel...), never the server that
assembles them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from strom.broker.node import ControllerCalls, LocalNode, ReplicationCounters
from strom.protocol.framing import MessageCodec
from strom.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from strom.broker.controller_client.producer_ids import ProducerIdBlocks
    from strom.broker.handlers.data.fetch_sessions import FetchSessionCache
    from strom.broker.handlers.groups.share_service import ShareService
    from strom.broker.replica.group_commit import GroupCommit
    from strom.broker.replica.manager import ReplicaManager
    from strom.broker.replica.txn_verification import TxnVerifier
    from strom.controller.service import ControllerService

Handler = Callable[["RequestContext", Any], Any | Awaitable[Any] | None]


@dataclass(frozen=True, slots=True)
class Route:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler


class ControllerClient(ControllerCalls, Protocol):
    """The channel to the active controller, as a handler uses it: a client's request
    forwarded as it is, its answer returned."""

    async def forward(self, ctx: RequestContext | None, request: Any) -> Any: ...


class HandlerMetrics(ReplicationCounters, Protocol):
    """What handlers count for ``/metrics`` beside the replica manager's counters and the
    request timings the server keeps."""

    cold_reads: int
    cold_read_bytes: int
    failed_authentications: int


class MutationQuotas(Protocol):
    """The controller mutation quota (KIP-599) a topic-changing request is admitted by."""

    def admit_mutation(self, ctx: RequestContext, partitions: int, strict: bool) -> bool: ...


class NodeServices(LocalNode, Protocol):
    """What a handler may touch of the node it runs on."""

    @property
    def controller_channel(self) -> ControllerClient: ...

    @property
    def controller_service(self) -> ControllerService | None: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def group_commit(self) -> GroupCommit: ...

    @property
    def txn_verifier(self) -> TxnVerifier: ...

    @property
    def producer_ids(self) -> ProducerIdBlocks: ...

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...

    @property
    def client_quotas(self) -> MutationQuotas: ...

    @property
    def metrics(self) -> HandlerMetrics | None: ...

    @property
    def routes(self) -> dict[int, Route]: ...

    @property
    def voters(self) -> dict[int, tuple[str, int]]: ...

    @property
    def share_service(self) -> ShareService: ...


ROUTES: dict[int, Route] = {}
CONTROLLER_ROUTES: dict[int, Route] = {}


def _registrar(
    table: dict[int, Route], api_key: int, min_version: int, max_version: int
) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        if api_key in table:
            raise RuntimeError(f"API key {api_key} registered twice")
        table[api_key] = Route(api_key, min_version, max_version, handler)
        return handler

    return register


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    """Serve ``api_key`` on the client listeners."""
    return _registrar(ROUTES, api_key, min_version, max_version)


def handles_controller(
    api_key: int, min_version: int, max_version: int
) -> Callable[[Handler], Handler]:
    """Serve ``api_key`` on the controller listener."""
    return _registrar(CONTROLLER_ROUTES, api_key, min_version, max_version)


@dataclass(slots=True)
class RequestContext:
    broker: NodeServices
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    codec: MessageCodec
    peer: str
    routes: dict[int, Route]
    # Who sent it: the connection's authenticated principal (ANONYMOUS until TLS client
    # authentication or SASL says otherwise) and the listener it came in on.
    principal: KafkaPrincipal = ANONYMOUS
    listener: str = ""
    # The connection's authentication state (authentication.ConnectionSession); None for
    # requests made inside the node.
    session: Any = None
    # A throttle a handler asks for itself (the controller mutation quota), in ms: the
    # response carries it and the connection is muted for it with the other quotas'.
    throttle_ms: int = 0
    # When the request's handling began (time.perf_counter_ns), with metrics on.
    started_ns: int = 0
    # How long it waited behind the requests read with it before its handling began.
    queued_ns: int = 0
    # Holds back the connection's later requests until the function it returns is
    # called: for a handler whose work continues off the event loop and must keep its
    # place in the connection's order. None for requests made inside the node.
    hold_reading: Callable[[], Callable[[], None]] | None = None

    @property
    def client_host(self) -> str:
        """The peer's address without its port, as ACLs name hosts."""
        return self.peer.rsplit(":", 1)[0]

    @property
    def response_type(self) -> type[Any]:
        """The response class of the request's version. A handler names it as its API's
        union once (``response_type: type[response_types.EndTxn] = ctx.response_type``),
        so that what it builds with ``framing.build`` is typed. The type checker does not
        see which API key ``@handles`` gives a handler: tests/unit/test_handler_types.py
        checks that the unions it names are that API's."""
        return self.codec.response_type
