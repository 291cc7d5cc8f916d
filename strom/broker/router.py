"""The one dispatch point from API key to handler, and the source of ApiVersions.

Handler modules register themselves with ``@handles(api_key, min_version,
max_version)``; the advertised version ranges are read from this registry, never
from a hand-kept list. A handler takes a ``RequestContext`` and the decoded kio
request body and returns the response body, an awaitable of it (long polls), or
None when no response is owed (produce with acks=0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.protocol.framing import MessageCodec

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


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        if api_key in ROUTES:
            raise RuntimeError(f"API key {api_key} registered twice")
        ROUTES[api_key] = Route(api_key, min_version, max_version, handler)
        return handler

    return register


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    codec: MessageCodec
    peer: str

    @property
    def response_type(self) -> type:
        return self.codec.response_type


def load_handlers() -> dict[int, Route]:
    """Import every handler module so that their routes are registered."""
    from strom.broker import (  # noqa: F401
        admin_topics,
        api_versions,
        configs,
        consumer_groups,
        describe_cluster,
        fetch,
        groups,
        init_producer_id,
        list_offsets,
        metadata,
        offsets,
        produce,
    )

    return ROUTES
