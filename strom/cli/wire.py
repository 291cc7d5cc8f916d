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

For a tool given ``--bootstrap-controller`` (KIP-919), ``active_controller`` finds the
active controller as Kafka's admin client does with ``bootstrap.controllers``: a
DescribeCluster for the controllers asked of the first reachable bootstrap controller
(which needs ALTER on the cluster there), then that node's ApiVersions, so that
``check_served`` can name a request the controllers do not serve (Kafka's serve no
DescribeClientQuotas, for one) instead of sending it to a closed connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32
from kio.static.protocol import RequestPayload

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
RETRY_BACKOFF_S = 0.2
CONTROLLER_ENDPOINTS = 2  # DescribeCluster's endpoint type for the controllers (KIP-919)
T = TypeVar("T")


def error_name(code: ErrorCode) -> str:
    return code.name.upper()


def endpoint(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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


def send(
    bootstrap: str, request: RequestPayload, what: str, security: ClientSecurity | None = None
) -> Any:
    """``request`` to the first reachable of the ``bootstrap`` brokers, its response; a
    connection failure is a ToolError naming ``what`` was being done."""
    return _exchange(bootstrap, what, security, lambda conn: conn.request(request))


def api_versions(
    bootstrap: str, security: ClientSecurity | None = None
) -> dict[int, tuple[int, int]]:
    """The (min, max) version of each API key the first reachable server serves."""
    response = send(bootstrap, ApiVersionsRequest(), "ask for the API versions", security)
    if response.error_code != ErrorCode.none:
        raise ToolError(f"cannot ask for the API versions: {error_name(response.error_code)}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


@dataclass(frozen=True)
class Controller:
    """The active controller a tool given ``--bootstrap-controller`` talks to."""

    address: str
    versions: dict[int, tuple[int, int]]

    def check_served(self, request: RequestPayload) -> None:
        """A ToolError naming the request when this controller does not serve its API."""
        if int(request.__api_key__) not in self.versions:
            name = type(request).__name__.removesuffix("Request")
            raise ToolError(
                f"the controller at {self.address} does not serve {name} (API key "
                f"{request.__api_key__}), nor do Kafka's: ask a broker with --bootstrap-server"
            )


def active_controller(bootstrap: str, security: ClientSecurity | None = None) -> Controller:
    """The active controller named by the first reachable of the ``bootstrap``
    controllers, asked again while an election leaves none."""
    request = DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=i8(CONTROLLER_ENDPOINTS)
    )
    what = f"find the active controller through {bootstrap}"
    for attempt in range(RETRIES):
        if attempt:
            time.sleep(RETRY_BACKOFF_S)
        response = send(bootstrap, request, what, security)
        if response.error_code != ErrorCode.none:
            reason = error_name(response.error_code)
            if response.error_message:
                reason += f": {response.error_message}"
            raise ToolError(f"cannot {what}: {reason}")
        for node in response.brokers:
            if node.broker_id == response.controller_id:
                address = endpoint(node.host, node.port)
                return Controller(address, api_versions(address, security))
    raise ToolError(f"cannot {what}: no controller is active")


def send_for_frame(
    bootstrap: str, request: RequestPayload, what: str, security: ClientSecurity | None = None
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
            response = conn.request(FindCoordinatorRequest(key=group, key_type=i8(0)))
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
        group_id=GroupId(group),
        topics=tuple(
            OffsetDeleteRequestTopic(
                name=TopicName(topic),
                partitions=tuple(
                    OffsetDeleteRequestPartition(partition_index=i32(p)) for p in parts
                ),
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
