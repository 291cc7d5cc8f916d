"""The one way a tool sends a raw Kafka request itself, for what confluent-kafka does not expose.

``send`` takes any request to the first reachable of a comma-separated list of brokers
(the bootstrap servers, which forward admin requests to the controller, or one broker's
own endpoint) over a blocking :class:`strom.wire_client.WireConnection`, and returns
the response decoded by kio; ``send_for_frame`` returns the response frame's bytes for
a caller that must read it itself. confluent-kafka's AdminClient has no OffsetDelete
(librdkafka has it, the Python binding does not), so ``strom groups --delete-offsets``
sends it here: FindCoordinator v1 through the bootstrap brokers, then the request to
the group's coordinator. Over TLS and SASL when the tool's client properties
(``--command-config``) say so (``strom.client_security``); a refused login or an
unreachable broker is a ToolError (one line). Any Kafka broker understands the requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)

from strom.cli.common import CONNECT_TIMEOUT_S, ToolError
from strom.client_security import ClientSecurity
from strom.protocol.errors import ErrorCode
from strom.wire_client import SaslLoginError, WireConnection, parse_address

CLIENT_ID = "strom-tools"
REQUEST_TIMEOUT_S = 15.0
# Errors that mean "ask again, maybe elsewhere": the coordinator is loading or moved.
RETRIABLE = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
}
RETRIES = 10
T = TypeVar("T")


def error_name(code: ErrorCode) -> str:
    return code.name.upper()


def _connect(host: str, port: int, security: ClientSecurity | None) -> WireConnection:
    try:
        return WireConnection(
            host,
            port,
            CLIENT_ID,
            connect_timeout_s=CONNECT_TIMEOUT_S,
            request_timeout_s=REQUEST_TIMEOUT_S,
            security=security,
        )
    except SaslLoginError as exc:
        raise ToolError(str(exc)) from None


def _connect_bootstrap(bootstrap: str, security: ClientSecurity | None) -> WireConnection:
    last: Exception | None = None
    for address in bootstrap.split(","):
        try:
            host, port = parse_address(address)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        try:
            return _connect(host, port, security)
        except OSError as exc:
            last = exc
    raise ToolError(f"cannot reach a broker at {bootstrap}: {last}")


def _exchange(
    bootstrap: str,
    what: str,
    security: ClientSecurity | None,
    call: Callable[[WireConnection], T],
) -> T:
    conn = _connect_bootstrap(bootstrap, security)
    try:
        return call(conn)
    except OSError as exc:
        raise ToolError(f"cannot {what}: {exc}") from None
    finally:
        conn.close()


def send(bootstrap: str, request: Any, what: str, security: ClientSecurity | None = None) -> Any:
    """``request`` to the first reachable of the ``bootstrap`` brokers, its response; a
    connection failure is a ToolError naming ``what`` was being done."""
    return _exchange(bootstrap, what, security, lambda conn: conn.request(request))


def send_for_frame(
    bootstrap: str, request: Any, what: str, security: ClientSecurity | None = None
) -> bytes:
    """As ``send``, but the response frame's bytes (correlation id first), for an answer
    the caller reads itself."""

    def frame(conn: WireConnection) -> bytes:
        conn.send(request)
        data, _ = conn.receive_frame()
        return bytes(data)

    return _exchange(bootstrap, what, security, frame)


def _coordinator(bootstrap: str, group: str, security: ClientSecurity | None) -> WireConnection:
    """A connection to the group's coordinator, found through the bootstrap brokers."""
    for _ in range(RETRIES):
        conn = _connect_bootstrap(bootstrap, security)
        try:
            response = conn.request(FindCoordinatorRequest(key=group, key_type=0))
        except OSError as exc:
            raise ToolError(f"cannot find the coordinator of group {group!r}: {exc}") from None
        finally:
            conn.close()
        if response.error_code == ErrorCode.none:
            try:
                return _connect(response.host, response.port, security)
            except OSError as exc:
                raise ToolError(
                    f"cannot reach the coordinator of group {group!r} at "
                    f"{response.host}:{response.port}: {exc}"
                ) from None
        if response.error_code not in RETRIABLE:
            raise ToolError(
                f"cannot find the coordinator of group {group!r}: {error_name(response.error_code)}"
            )
        time.sleep(0.2)
    raise ToolError(f"no coordinator available for group {group!r}")


def delete_offsets(
    bootstrap: str,
    group: str,
    partitions: dict[str, list[int]],
    security: ClientSecurity | None = None,
) -> dict[tuple[str, int], str | None]:
    """OffsetDelete for ``partitions``: per (topic, partition) None or the error's name.

    A group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP...) is a ToolError.
    """
    request = OffsetDeleteRequest(
        group_id=group,
        topics=tuple(
            OffsetDeleteRequestTopic(
                name=topic,
                partitions=tuple(OffsetDeleteRequestPartition(partition_index=p) for p in parts),
            )
            for topic, parts in partitions.items()
        ),
    )
    for _ in range(RETRIES):
        conn = _coordinator(bootstrap, group, security)
        try:
            response = conn.request(request)
        except OSError as exc:
            raise ToolError(f"cannot delete offsets of group {group!r}: {exc}") from None
        finally:
            conn.close()
        if response.error_code in RETRIABLE:
            time.sleep(0.2)
            continue
        if response.error_code != ErrorCode.none:
            raise ToolError(
                f"cannot delete offsets of group {group!r}: {error_name(response.error_code)}"
            )
        return {
            (topic.name, part.partition_index): None
            if part.error_code == ErrorCode.none
            else error_name(part.error_code)
            for topic in response.topics
            for part in topic.partitions
        }
    raise ToolError(f"cannot delete offsets of group {group!r}: coordinator kept moving")
