"""A blocking Kafka connection for Strom's own clients that speak raw protocol.

Owns the socket side of the few requests Strom's tools send themselves rather than
through confluent-kafka (the CLI's OffsetDelete, the Spark source's fetcher):
``host:port`` bootstrap parsing, one blocking connection that sends kio requests
framed by :mod:`strom.protocol.framing` and reads each response whole into one buffer
it reuses, checks that responses answer requests in order, and decodes them with kio.
Plaintext only. Talks to any Kafka-compatible broker; never imports broker code. What
to send and what an error code means is the caller's.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.serial import entity_reader

from strom.protocol.framing import codec_for, encode_request

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
    ) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        self.sock.settimeout(request_timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if receive_buffer is not None:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            except OSError:
                pass
        self.correlation = 0
        self.in_flight: list[tuple[int, Any]] = []  # (correlation id, request type)
        self.buffer = bytearray(1 << 20)

    def close(self) -> None:
        self.sock.close()

    def send(self, body: Any) -> None:
        self.correlation += 1
        self.sock.sendall(encode_request(self.correlation, self.client_id, body))
        self.in_flight.append((self.correlation, type(body)))

    def receive_frame(self) -> tuple[memoryview, type]:
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

    def request(self, body: Any) -> Any:
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
