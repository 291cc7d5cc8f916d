"""The dispatch points from API key to handler, and the source of ApiVersions.

Handler modules register themselves with ``@handles(api_key, min_version,
max_version)`` for the client listeners and ``@handles_controller(...)`` for the
controller listener (KRaft's quorum RPCs, broker registration and heartbeats, and
admin requests forwarded to the active controller); an API served on both registers
once per table. The advertised version ranges are read from the table of the
listener a request came in on, never from a hand-kept list. A handler takes a
``RequestContext`` and the decoded kio request body and returns the response body, an
awaitable of it (long polls), or None when no response is owed (produce with acks=0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.protocol.framing import MessageCodec
from strom.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from strom.broker.server import Broker

Handler = Callable[["RequestContext", Any], Any | Awaitable[Any] | None]


@dataclass(frozen=True, slots=True)
class Route:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler


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
    broker: Broker
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
    def response_type(self) -> type:
        return self.codec.response_type
