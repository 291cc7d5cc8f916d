"""Kafka request/response framing on top of kio's generated message types.

Owns: splitting a byte stream into size-prefixed frames, decoding a request
header and body for an (api key, version) pair (kio's types, or for the old
versions kio lacks those of legacy_versions.py), encoding a response with the
right header version, and ``build`` which constructs a kio message of any
version from a superset of field values. Sans-I/O: no sockets here.

Header versions follow Kafka: a request with a flexible body has request header
v2 (tagged fields), otherwise v1; a flexible response has response header v1,
except ApiVersions, whose response header is always v0 so that clients can read
it before they know the broker's versions.
"""

from __future__ import annotations

import io
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, TypeVar

from kio.serial import entity_reader, entity_writer
from kio.serial.readers import Reader
from kio.static.protocol import RequestHeader, RequestPayload, ResponsePayload

from strom.protocol.encoder import Writer, message_writer
from strom.protocol.legacy_versions import request_schema, response_schema
from strom.protocol.produce_view import ProduceRequestView, produce_reader

API_VERSIONS_KEY = 18
PRODUCE_KEY = 0

_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")

_Message = TypeVar("_Message")


class FrameError(ValueError):
    """A frame that cannot be decoded; the connection that sent it is closed."""


@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size: int


@dataclass(frozen=True, slots=True)
class MessageCodec:
    """Everything needed to decode one request version and encode its response."""

    request_type: type[RequestPayload]
    response_type: type[ResponsePayload]
    read_header: Reader[RequestHeader]
    read_body: Reader[RequestPayload]
    write_body: Writer
    flexible_response_header: bool
    # Reads the body from a writable frame, leaving large fields in place (Produce).
    read_body_in_place: Callable[[memoryview, int], tuple[ProduceRequestView, int]] | None = None


@cache
def codec_for(api_key: int, api_version: int) -> MessageCodec:
    request_type = request_schema(api_key, api_version)
    response_type = response_schema(api_key, api_version)
    return MessageCodec(
        request_type=request_type,
        response_type=response_type,
        read_header=entity_reader(request_type.__header_schema__),
        read_body=entity_reader(request_type),
        write_body=message_writer(response_type),
        flexible_response_header=bool(response_type.__flexible__) and api_key != API_VERSIONS_KEY,
        read_body_in_place=produce_reader(api_version) if api_key == PRODUCE_KEY else None,
    )


def peek_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id) from the fixed start of a request."""
    if len(frame) < 8:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a header")
    return _KEY_VERSION_CORRELATION.unpack_from(frame, 0)


def decode_request(frame: bytes | bytearray | memoryview, codec: MessageCodec) -> Request:
    """Decode header and body; any failure is a FrameError.

    A writable ``frame`` (bytearray, or a memoryview of one) is decoded in place where
    the codec can (Produce: the records stay views into it); kio reads the rest
    through a read-only view, which is what it accepts."""
    body: RequestPayload | ProduceRequestView
    try:
        if isinstance(frame, bytes) or (isinstance(frame, memoryview) and frame.readonly):
            header, header_size = codec.read_header(frame, 0)
            body, body_size = codec.read_body(frame, header_size)
        else:
            view = memoryview(frame)
            header, header_size = codec.read_header(view.toreadonly(), 0)
            if codec.read_body_in_place is not None:
                body, body_size = codec.read_body_in_place(view, header_size)
            else:
                body, body_size = codec.read_body(view.toreadonly(), header_size)
    except Exception as exc:  # kio raises several types for malformed input
        raise FrameError(f"malformed request: {type(exc).__name__}: {exc}") from None
    return Request(
        header.request_api_key,
        header.request_api_version,
        header.correlation_id,
        header.client_id,
        body,
        len(frame),
    )


class _FrameChunks:
    """A write target for kio that keeps large values (record bytes) by reference.

    kio writes a message field by field; small fields are gathered into a bytearray
    and every value of at least ``BY_REFERENCE`` bytes becomes its own chunk, so the
    records of a fetch response go to the socket as they were read from the segment,
    never copied into one big frame.
    """

    __slots__ = ("chunks", "small", "size")

    BY_REFERENCE = 16384

    def __init__(self) -> None:
        self.small = bytearray(4)  # the frame size, patched when the frame is complete
        self.chunks: list[bytes | bytearray | memoryview] = [self.small]
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        n = len(data)
        if n >= self.BY_REFERENCE:
            self.chunks.append(data)
            self.small = bytearray()
            self.chunks.append(self.small)
        else:
            self.small += data
        self.size += n
        return n


def encode_response_chunks(
    correlation_id: int, codec: MessageCodec, response: Any
) -> list[bytes | bytearray | memoryview]:
    """A whole response frame (size, header, body) as buffers to send in order.

    Large values such as record bytes are referenced, not copied (see _FrameChunks).
    """
    out = _FrameChunks()
    out.write(_SIZE.pack(correlation_id))
    if codec.flexible_response_header:
        out.write(b"\x00")  # no tagged fields
    codec.write_body(out, response)
    first = out.chunks[0]
    assert isinstance(first, bytearray)
    _SIZE.pack_into(first, 0, out.size)
    return [chunk for chunk in out.chunks if len(chunk)]


def encode_request(correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """A whole request frame (used by tests and tools that speak raw protocol)."""
    request_type = type(body)
    header_type = request_type.__header_schema__
    values: dict[str, Any] = {
        "request_api_key": request_type.__api_key__,
        "request_api_version": request_type.__version__,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    header = header_type(**{f.name: values[f.name] for f in fields(header_type)})
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    entity_writer(header_type)(out, header)
    entity_writer(request_type)(out, body)
    frame = out.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    del frame
    return out.getvalue()


@cache
def _field_names(message_type: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(message_type))


def build(message_type: type[_Message], **values: Any) -> _Message:
    """Construct ``message_type`` from ``values``, dropping fields this version lacks.

    Handlers describe a response once, with every field any version has; this
    keeps only what the requested version defines. Typed as what it is handed: a
    union of an API's versions (``response_types``) gives that union, a class named at
    run time (``nested``) gives Any. The values are not checked by the type checker
    (they are a superset of any one version's fields); those the handlers give are
    checked by tests/unit/test_handler_types.py.
    """
    names = _field_names(message_type)  # type: ignore[arg-type]  # (a class is hashable)
    return message_type(**{k: v for k, v in values.items() if k in names})


def has_field(message_type: type, name: str) -> bool:
    return name in _field_names(message_type)


def nested(message_type: type, name: str) -> type[Any]:
    """A nested message class (e.g. a response's topic entry) of the same version."""
    found = getattr(sys.modules[message_type.__module__], name)
    if not isinstance(found, type):
        raise TypeError(f"{message_type.__module__}.{name} is not a message class")
    return found


def nested_if_any(message_type: type, name: str) -> type[Any] | None:
    """Like ``nested`` for a class that older versions of the message lack."""
    return getattr(sys.modules[message_type.__module__], name, None)
