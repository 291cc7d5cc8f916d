"""A minimal blocking Kafka protocol client for tests that need exact control of bytes."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.serial import entity_reader

from strom.protocol.framing import codec_for, encode_request


class RawClient:
    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.client_id = "raw-test"
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks += chunk
        return bytes(chunks)

    def is_closed_by_peer(self) -> bool:
        """True when the broker closed this connection (reads EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def request_frame(self, body: Any) -> bytes:
        """The response to ``body`` as its raw frame (correlation id first)."""
        self.correlation += 1
        self.send_bytes(encode_request(self.correlation, self.client_id, body))
        frame = self.read_frame()
        (correlation,) = struct.unpack_from(">i", frame, 0)
        assert correlation == self.correlation
        return frame

    def request(self, body: Any) -> Any:
        frame = self.request_frame(body)
        codec = codec_for(type(body).__api_key__, type(body).__version__)
        offset = 5 if codec.flexible_response_header else 4
        response, _ = entity_reader(codec.response_type)(frame, offset)
        return response
