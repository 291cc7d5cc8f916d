"""Asyncio connections from this node to other nodes: the client side of inter-node RPCs.

Owns one pipelined connection per remote address (Raft's Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch and FetchSnapshot between controllers; BrokerRegistration,
BrokerHeartbeat and forwarded admin requests from brokers to the active controller):
connecting lazily, sending kio requests framed by :mod:`strom.protocol.framing`,
matching each response to its request by correlation id, timing requests out, and
reconnecting after a failure. A failed or timed-out request raises ``PeerError``;
the caller decides whether to retry (the Raft core retries by itself). When the
listener reached is TLS or SASL (``PeerSecurity``), each connection does the TLS
handshake and then the SASL exchange (SaslHandshake v1 and SaslAuthenticate, PLAIN or
SCRAM) before its first request, as a Kafka broker's own clients do.

Does not own what to send or what an answer means.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.serial import entity_reader
from kio.static.protocol import RequestPayload, ResponsePayload

from strom.protocol.errors import ErrorCode
from strom.protocol.framing import codec_for, encode_request
from strom.security.sasl import (
    PLAIN,
    SCRAM_MECHANISMS,
    SaslAuthenticationFailed,
    ScramClient,
    plain_client_token,
)

log = logging.getLogger(__name__)

_Response = TypeVar("_Response", bound=ResponsePayload)

_SIZE = struct.Struct(">i")
CONNECT_TIMEOUT_S = 2.0


class PeerError(ConnectionError):
    """A request to another node that got no answer (refused, closed, timed out)."""


@dataclass(frozen=True)
class PeerSecurity:
    """How this node's connections to a listener of other nodes authenticate: TLS with
    this context (None: none), then SASL with this mechanism and login (None: none)."""

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = ""


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    body: RequestPayload,
    response_type: type[_Response],
    client_id: str,
) -> _Response:
    """One request and its response (``response_type``, the class of ``body``'s version)
    on a connection nothing else uses yet."""
    writer.write(encode_request(0, client_id, body))
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    frame = await reader.readexactly(size)
    codec = codec_for(type(body).__api_key__, type(body).__version__)
    start = 5 if codec.flexible_response_header else 4
    response, _ = entity_reader(response_type)(memoryview(frame), start)
    return response


async def authenticate(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    security: PeerSecurity,
    client_id: str,
) -> None:
    """The SASL exchange; SaslAuthenticationFailed with the server's reason on refusal."""
    mechanism = security.sasl_mechanism
    assert mechanism is not None
    handshake = await _exchange(
        reader, writer, SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse, client_id
    )
    if handshake.error_code != ErrorCode.none:
        raise SaslAuthenticationFailed(
            f"{mechanism} is not enabled there (enabled: {', '.join(handshake.mechanisms)})"
        )

    async def send(token: bytes) -> bytes:
        response = await _exchange(
            reader,
            writer,
            SaslAuthenticateRequest(auth_bytes=token),
            SaslAuthenticateResponse,
            client_id,
        )
        if response.error_code != ErrorCode.none:
            raise SaslAuthenticationFailed(response.error_message or str(response.error_code))
        return bytes(response.auth_bytes)

    if mechanism == PLAIN:
        await send(plain_client_token(security.username, security.password))
        return
    scram = ScramClient(SCRAM_MECHANISMS[mechanism], security.username, security.password)
    server_first = await send(scram.first())
    scram.verify(await send(scram.final(server_first)))


class PeerConnection:
    """One connection to ``host:port``; requests may be in flight together."""

    def __init__(
        self, host: str, port: int, client_id: str, security: PeerSecurity | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.security = security or PeerSecurity()
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._correlation = 0
        # The response's class is chosen at run time from its request's key and version:
        # the callers, who know what they sent, read it.
        self._pending: dict[int, tuple[asyncio.Future[Any], type[RequestPayload]]] = {}
        self.closed = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def request(self, body: RequestPayload, timeout_s: float) -> Any:
        """Send ``body`` and wait for its decoded response; PeerError on failure."""
        if self.closed:
            raise PeerError(f"connection to {self.address} is closed")
        try:
            await asyncio.wait_for(self._connect(), CONNECT_TIMEOUT_S)
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            raise PeerError(f"cannot connect to {self.address}: {exc or 'timed out'}") from None
        except SaslAuthenticationFailed as exc:
            raise PeerError(f"authentication to {self.address} failed: {exc}") from None
        if self._writer is None or self._writer.is_closing():  # lost while we waited
            raise PeerError(f"connection to {self.address} lost")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation] = (future, type(body))
        try:
            self._writer.write(encode_request(correlation, self.client_id, body))
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise PeerError(f"request to {self.address} timed out after {timeout_s:g}s") from None
        finally:
            self._pending.pop(correlation, None)

    async def _connect(self) -> None:
        if self._writer is not None and not self._writer.is_closing():
            return
        if self._connecting is not None:
            await asyncio.shield(self._connecting)
            return
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_future()
        try:
            tls = self.security.ssl_context
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=tls, server_hostname=self.host if tls else None
            )
            if self.security.sasl_mechanism is not None:
                try:
                    await authenticate(reader, writer, self.security, self.client_id)
                except BaseException:
                    writer.close()
                    raise
            self._writer = writer
            self._reader_task = loop.create_task(self._read_responses(reader))
            self._connecting.set_result(None)
        except BaseException as exc:
            self._connecting.set_exception(exc)
            self._connecting.exception()  # retrieved: no "never retrieved" warning
            raise
        finally:
            self._connecting = None

    async def _read_responses(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                (correlation,) = _SIZE.unpack_from(frame, 0)
                entry = self._pending.get(correlation)
                if entry is None:
                    continue  # its waiter timed out
                future, request_type = entry
                codec = codec_for(request_type.__api_key__, request_type.__version__)
                start = 5 if codec.flexible_response_header else 4
                try:
                    response, _ = entity_reader(codec.response_type)(memoryview(frame), start)
                except Exception as exc:
                    if not future.done():
                        future.set_exception(PeerError(f"bad response from {self.address}: {exc}"))
                    continue
                if not future.done():
                    future.set_result(response)
        except (asyncio.IncompleteReadError, OSError) as exc:
            self._fail(f"connection to {self.address} lost: {exc}")
        except asyncio.CancelledError:
            self._fail(f"connection to {self.address} closed")
            raise

    def _fail(self, reason: str) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        for future, _ in list(self._pending.values()):
            if not future.done():
                future.set_exception(PeerError(reason))
        self._pending.clear()

    def close(self) -> None:
        self.closed = True
        if self._reader_task is not None:
            self._reader_task.cancel()
        self._fail(f"connection to {self.address} closed")


class PeerPool:
    """A connection per remote address, made on first use."""

    def __init__(self, client_id: str, security: PeerSecurity | None = None) -> None:
        self.client_id = client_id
        self.security = security
        self._connections: dict[tuple[str, int], PeerConnection] = {}

    async def request(self, host: str, port: int, body: RequestPayload, timeout_s: float) -> Any:
        connection = self._connections.get((host, port))
        if connection is None:
            connection = PeerConnection(host, port, self.client_id, self.security)
            self._connections[(host, port)] = connection
        return await connection.request(body, timeout_s)

    def close(self) -> None:
        for connection in self._connections.values():
            with contextlib.suppress(Exception):
                connection.close()
        self._connections.clear()
