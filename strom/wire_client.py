"""A blocking Kafka connection for Strom's own clients that speak raw protocol.

Owns the socket side of the few requests Strom's tools send themselves rather than
through confluent-kafka (the CLI's OffsetDelete, the Spark source's fetcher):
``host:port`` bootstrap parsing, one blocking connection that sends kio requests
framed by :mod:`strom.protocol.framing` and reads each response whole into one buffer
it reuses, checks that responses answer requests in order, and decodes them with kio.
With a ``client_security.ClientSecurity`` it speaks TLS and authenticates with SASL
(PLAIN, SCRAM-SHA-256/512: SaslHandshake v1, then SaslAuthenticate v2) before the first
request; a refused login is ``SaslLoginError``. Talks to any Kafka-compatible broker;
never imports broker code. What to send and what an error code means is the caller's.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader
from kio.static.protocol import RequestPayload

from strom.client_security import ClientSecurity
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import codec_for, encode_request
from strom.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512, ScramClient, plain_client_token

_SIZE = struct.Struct(">i")


def parse_address(address: str) -> tuple[str, int]:
    """(host, port) from ``host:port`` (``[v6]:port`` too); ValueError if malformed."""
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad bootstrap address {address.strip()!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def split_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` as (host, port) pairs; ValueError if one is malformed."""
    return [parse_address(address) for address in servers.split(",")]


class SaslLoginError(ConnectionError):
    """The broker refused this client's SASL login (or its mechanism)."""


class WireConnection:
    """One blocking socket; requests go out whole, responses are read into one buffer.

    Several requests may be in flight; ``receive`` answers them in order. A response
    whose correlation id is not the next request's raises ``mismatch_error``.
    """

    mismatch_error: type[Exception] = ConnectionError

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        *,
        connect_timeout_s: float,
        request_timeout_s: float,
        receive_buffer: int | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        if security is not None and security.tls:
            try:
                assert security.context is not None  # built with the settings
                self.sock = security.context.wrap_socket(self.sock, server_hostname=host)
            except BaseException:
                self.sock.close()
                raise
        self.sock.settimeout(request_timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if receive_buffer is not None:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            except OSError:
                pass
        self.correlation = 0
        # (correlation id, request type)
        self.in_flight: list[tuple[int, type[RequestPayload]]] = []
        self.buffer = bytearray(1 << 20)
        if security is not None and security.sasl:
            try:
                self._login(security)
            except BaseException:
                self.sock.close()
                raise

    def _login(self, security: ClientSecurity) -> None:
        handshake = self.request(SaslHandshakeRequest(mechanism=security.mechanism))
        if handshake.error_code != ErrorCode.none:
            offered = ", ".join(handshake.mechanisms)
            raise SaslLoginError(
                f"{self.address} does not take SASL {security.mechanism} (it takes {offered})"
            )
        user, password = security.username or "", security.password or ""
        if security.mechanism == "PLAIN":
            self._authenticate(plain_client_token(user, password))
            return
        scram = SCRAM_SHA_512 if security.mechanism == "SCRAM-SHA-512" else SCRAM_SHA_256
        client = ScramClient(scram, user, password)
        server_first = self._authenticate(client.first())
        server_final = self._authenticate(client.final(server_first))
        client.verify(server_final)

    def _authenticate(self, token: bytes) -> bytes:
        answer = self.request(SaslAuthenticateRequest(auth_bytes=token))
        if answer.error_code != ErrorCode.none:
            raise SaslLoginError(
                f"SASL login to {self.address} refused: {answer.error_message or answer.error_code}"
            )
        return bytes(answer.auth_bytes)

    def close(self) -> None:
        self.sock.close()

    def send(self, body: RequestPayload) -> None:
        self.correlation += 1
        self.sock.sendall(encode_request(self.correlation, self.client_id, body))
        self.in_flight.append((self.correlation, type(body)))

    def receive_frame(self) -> tuple[memoryview, type[RequestPayload]]:
        """The next response frame (correlation id first) and the type of its request.

        The frame lies in a buffer this connection reuses: it is valid until the next
        receive, so that reading never allocates (and page-faults) a new buffer.
        """
        correlation, request_type = self.in_flight.pop(0)
        (size,) = _SIZE.unpack(self._read(4))
        frame = self._read(size)
        (got,) = _SIZE.unpack_from(frame, 0)
        if got != correlation:
            raise self.mismatch_error(
                f"response {got} from {self.address} does not match request {correlation}"
            )
        return frame, request_type

    def receive(self) -> Any:
        """The next response, decoded by kio."""
        frame, request_type = self.receive_frame()
        codec = codec_for(request_type.__api_key__, request_type.__version__)
        start = 5 if codec.flexible_response_header else 4
        response, _ = entity_reader(codec.response_type)(frame.toreadonly(), start)
        return response

    def request(self, body: RequestPayload) -> Any:
        self.send(body)
        return self.receive()

    def _read(self, n: int) -> memoryview:
        if len(self.buffer) < n:
            self.buffer = bytearray(max(n, 2 * len(self.buffer)))
        view = memoryview(self.buffer)[:n]
        got = 0
        while got < n:
            chunk = self.sock.recv_into(view[got:], n - got)
            if not chunk:
                raise ConnectionError(f"connection to {self.address} closed by the broker")
            got += chunk
        return view
