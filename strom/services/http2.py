"""HTTP/2 beside HTTP/1.1 on one listener of an aiohttp application, as ksqlDB serves
both on one port: cleartext with prior knowledge, and over TLS with ALPN ``h2``.

Owns the listening socket's protocol (``Http2Site``): each new connection's first bytes
are looked at; the HTTP/2 connection preface (``PRI * HTTP/2.0``) makes it an HTTP/2
connection (``h2``, a sans-I/O protocol library, frames it), anything else is handed to
aiohttp as its own HTTP/1.1 connection and never looked at again. With TLS the context
offers ``h2`` and ``http/1.1`` by ALPN; a client that picked ``h2`` sends the preface.

Each HTTP/2 stream is served by the same aiohttp application, in process: the stream is
given to one of aiohttp's own request handlers as its connection (``_StreamTransport``),
its request written to it as HTTP/1.1 (``Connection: close``) and the HTTP/1.1 response
that handler writes read back into HEADERS and DATA frames. One DATA frame is sent for
each chunk a handler writes (a streamed query's row is one frame, as it comes), split
only by the peer's flow-control window and frame size; a stream whose window is spent
pauses its handler's writes (aiohttp's drain) until WINDOW_UPDATE. A request body is
acknowledged (its window opened again) as aiohttp reads it. A stream the client resets
is a connection lost to its handler (a push query ends there). A frame that breaks the
protocol closes that one connection with GOAWAY and one log line. A client's GOAWAY
(without an error) has the streams it opened before it answered, then the connection
closes; so does the server's, sent when the site stops. h2 sends nothing once it has
sent or received a GOAWAY, so those are framed and read here, beside it.

Chosen over forwarding each stream to the application over a loopback HTTP/1.1
connection: no second socket or port per stream, and the handlers see the client's own
peer address and TLS; the cost is the HTTP/1.1 head written and parsed once a request,
in memory.

Does not own any route, TLS settings or authentication (the application's middlewares
run for HTTP/2 streams as for HTTP/1.1 requests); no server push, no trailers from the
application, no HTTP/1.1 ``Upgrade: h2c``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import hyperframe.frame
from aiohttp import web

log = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# What a stream's handler may have written and the peer's window not yet taken before its
# writes wait (aiohttp drains above 64 KiB of its own): then until half of it is sent.
_WRITE_HIGH = 256 * 1024
_WRITE_LOW = _WRITE_HIGH // 2
# Headers of one HTTP/1.1 connection that HTTP/2 forbids (RFC 9113 8.2.2).
# A connection that has not said which protocol it speaks after this long is closed
# (aiohttp's keep-alive time, after which it closes a connection that sent no request).
_FIRST_BYTES_TIMEOUT = 75.0
_GOAWAY = 0x7  # the frame type
_LINGER = 5.0  # how long a connection closed on our side waits for the client to close
_CONNECTION_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
ProtocolFactory = Callable[[], asyncio.Protocol]


class Http2Site(web.TCPSite):
    """aiohttp's TCP site whose connections may speak HTTP/2 (see the module's text).
    aiohttp closes its own connections when the runner is cleaned up; the HTTP/2
    connections are closed here when the site stops (GOAWAY, then the socket)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.http2_connections: set[_Http2Connection] = set()

    async def stop(self) -> None:
        for connection in list(self.http2_connections):
            connection.go_away(tell_client=True)
        await super().stop()

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registered with the runner, as TCPSite's start does
        handlers = self._runner.server
        assert handlers is not None
        if self._ssl_context is not None:
            self._ssl_context.set_alpn_protocols(["h2", "http/1.1"])
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _FrontDoor(handlers, self.http2_connections),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


class _FrontDoor(asyncio.Protocol):
    """A new connection until its first bytes say which protocol it speaks."""

    def __init__(self, handlers: ProtocolFactory, live: set[_Http2Connection]) -> None:
        self._handlers = handlers
        self._live = live
        self._transport: asyncio.Transport | None = None
        self._seen = b""
        self._silence: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        # as aiohttp closes a connection that sends no request in its keep-alive time
        self._silence = asyncio.get_running_loop().call_later(_FIRST_BYTES_TIMEOUT, transport.close)

    def data_received(self, data: bytes) -> None:
        self._seen += data
        transport = self._transport
        assert transport is not None
        if self._seen.startswith(PREFACE):
            protocol: asyncio.Protocol = _Http2Connection(self._handlers, transport, self._live)
        elif PREFACE.startswith(self._seen):
            return  # the preface so far: wait for the rest of it
        else:
            protocol = self._handlers()
        if self._silence is not None:
            self._silence.cancel()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(self._seen)

    def eof_received(self) -> bool | None:
        return None  # closed before it said anything: nothing to serve

    def connection_lost(self, exc: Exception | None) -> None:
        if self._silence is not None:
            self._silence.cancel()


class _Http2Connection(asyncio.Protocol):
    """One HTTP/2 connection: frames in and out through ``h2``, each stream served by an
    aiohttp request handler of its own."""

    def __init__(
        self,
        handlers: ProtocolFactory,
        transport: asyncio.Transport,
        live: set[_Http2Connection],
    ) -> None:
        self.handlers = handlers
        self.transport = transport
        self.live = live
        live.add(self)
        self.going_away = False  # GOAWAY sent or received: closed once its streams are done
        self.inbound = bytearray()  # bytes of a frame not yet whole
        self.client_goaway: str | None = None  # "done", or "error" (its error code)
        self.linger: asyncio.TimerHandle | None = None
        self.preface_left = len(PREFACE)
        # What comes in is checked (a name or value h2 refuses never reaches aiohttp's
        # HTTP/1.1 parser); what goes out is aiohttp's answer, its values already checked
        # there and its names made lower-case here: h2 need not go over them again.
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=False,
                header_encoding=None,
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
            )
        )
        self.streams: dict[int, _StreamTransport] = {}
        self.writing_paused = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = self.transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # as aiohttp does for its connections: a small frame is not held back for
            # the peer's acknowledgement of the one before
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.h2.initiate_connection()
        self.send_pending()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            events = self.h2.receive_data(self._without_goaway(data))
        except h2.exceptions.ProtocolError as exc:
            peer = self.transport.get_extra_info("peername")
            log.warning("HTTP/2 connection from %s closed: %s", peer, exc)
            self.send_pending()  # h2 has written its GOAWAY
            self.close()
            return
        for event in events:
            self._handle(event)
        self.send_pending()
        if self.client_goaway == "error":
            self.close()
        elif self.client_goaway == "done":
            self.go_away()  # once the streams it opened before are answered

    def _without_goaway(self, data: bytes) -> bytes:
        """The bytes for h2, a client's GOAWAY taken out of them: h2 sends nothing more
        once it has one, but the streams the client opened before it are still to be
        answered (RFC 9113 6.8). A GOAWAY with an error code closes the connection."""
        self.inbound += data
        passed = bytearray()
        if self.preface_left:
            taken = self.inbound[: self.preface_left]
            passed += taken
            self.preface_left -= len(taken)
            self.inbound = self.inbound[len(taken) :]
        while len(self.inbound) >= 9:
            length = int.from_bytes(self.inbound[:3], "big")
            if length > self.h2.max_inbound_frame_size:
                passed += self.inbound  # h2 refuses it from its header alone
                self.inbound = bytearray()
                break
            if len(self.inbound) < 9 + length:
                break
            frame = self.inbound[: 9 + length]
            self.inbound = self.inbound[9 + length :]
            if frame[3] != _GOAWAY:
                passed += frame
            elif int.from_bytes(frame[13:17], "big"):
                self.client_goaway = "error"  # something went wrong: no more answers
            elif self.client_goaway is None:
                self.client_goaway = "done"
        return bytes(passed)

    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            assert event.stream_id is not None and event.headers is not None
            stream = _StreamTransport(self, event.stream_id)
            self.streams[event.stream_id] = stream
            stream.start(event.headers, event.stream_ended is not None)
        elif isinstance(event, h2.events.DataReceived):
            assert event.stream_id is not None and event.data is not None
            found = self.streams.get(event.stream_id)
            if found is None:  # a stream already answered and closed: its bytes are void
                self.h2.acknowledge_received_data(
                    event.flow_controlled_length or 0, event.stream_id
                )
            else:
                found.body(event.data, event.flow_controlled_length or 0)
            if event.stream_ended is not None and found is not None:
                found.body_end()
        elif isinstance(event, h2.events.StreamEnded):
            ended = self.streams.get(event.stream_id or 0)
            if ended is not None and not ended.request_ended:
                ended.body_end()
        elif isinstance(event, h2.events.StreamReset):
            reset = self.streams.pop(event.stream_id or 0, None)
            if reset is not None:
                reset.lost(ConnectionResetError("stream reset by the client"))
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            stream_id = getattr(event, "stream_id", 0)
            targets = list(self.streams.values()) if not stream_id else []
            if stream_id and stream_id in self.streams:
                targets = [self.streams[stream_id]]
            for stream in targets:
                stream.flush()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.close()  # not a client's GOAWAY (taken out before h2): h2's own end

    def send_pending(self) -> None:
        pending = self.h2.data_to_send()
        if pending and not self.transport.is_closing():
            self.transport.write(pending)

    def finished(self, stream_id: int) -> None:
        self.streams.pop(stream_id, None)
        if self.going_away and not self.streams and not self.closed:
            self.close()

    def go_away(self, tell_client: bool = False) -> None:
        """No new streams; closed once the open ones are done. ``tell_client`` (the
        server stops): a GOAWAY naming the last stream taken, framed here, as h2 would
        send nothing more after its own."""
        if self.closed or self.going_away:
            return
        self.going_away = True
        if tell_client:
            goaway = hyperframe.frame.GoAwayFrame(0)
            goaway.last_stream_id = self.h2.highest_inbound_stream_id
            self.send_pending()
            self.transport.write(goaway.serialize())
        if not self.streams:
            self.close()

    def close(self) -> None:
        """GOAWAY if h2 can still send one, then the socket; every open stream is lost."""
        if self.closed:
            return
        self.closed = True
        self.live.discard(self)
        try:
            self.h2.close_connection()
        except h2.exceptions.ProtocolError:
            pass  # h2 has closed the connection itself (and written its GOAWAY)
        self.send_pending()
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            stream.lost(ConnectionResetError("connection closed"))
        if self.transport.can_write_eof():
            # our side ends; the socket is closed when the client closes its side, or
            # after a while: closed at once, bytes the client was still sending (its
            # acknowledgements) would be answered with a reset, which can cost the
            # client the answers it had not read yet
            self.transport.write_eof()
            self.linger = asyncio.get_running_loop().call_later(_LINGER, self.transport.close)
        else:
            self.transport.close()

    def eof_received(self) -> bool | None:
        return None  # the client's side ended: the transport closes

    def pause_writing(self) -> None:
        self.writing_paused = True
        for stream in list(self.streams.values()):
            stream.update_writing()

    def resume_writing(self) -> None:
        self.writing_paused = False
        for stream in list(self.streams.values()):
            stream.update_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.live.discard(self)
        if self.linger is not None:
            self.linger.cancel()
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            stream.lost(exc or ConnectionResetError("connection closed"))


class _StreamTransport(asyncio.Transport):
    """One HTTP/2 stream as the connection of one aiohttp request handler: the request
    written to it as HTTP/1.1, the HTTP/1.1 response it writes read into frames."""

    def __init__(self, connection: _Http2Connection, stream_id: int) -> None:
        super().__init__()
        self.connection = connection
        self.h2 = connection.h2
        self.stream_id = stream_id
        self.protocol: asyncio.Protocol = connection.handlers()
        self.request_ended = False
        self.chunked_body = False
        self.reading_paused = False
        self.unacknowledged = 0
        self.closing = False
        self.lost_told = False
        self.handler_paused = False
        self.response = _ResponseReader()
        self.outgoing: deque[bytes] = deque()
        self.outgoing_size = 0
        self.ended = False  # END_STREAM queued (sent once ``outgoing`` is)
        self.finished = False  # END_STREAM or RST_STREAM sent

    # -- the request, in ------------------------------------------------------------

    def start(self, headers: list[tuple[bytes, bytes]], ended: bool) -> None:
        fields = {name: value for name, value in headers if name.startswith(b":")}
        lines = [b"%s %s HTTP/1.1" % (fields.get(b":method", b"GET"), fields.get(b":path", b"/"))]
        named = [(n, v) for n, v in headers if not n.startswith(b":")]
        if b":authority" in fields and not any(n == b"host" for n, _ in named):
            lines.append(b"host: " + fields[b":authority"])
        lines += [n + b": " + v for n, v in named if n not in _CONNECTION_HEADERS]
        has_length = any(n == b"content-length" for n, _ in named)
        if ended and not has_length and fields.get(b":method") not in (b"GET", b"HEAD"):
            lines.append(b"content-length: 0")
        elif not ended and not has_length:
            lines.append(b"transfer-encoding: chunked")
            self.chunked_body = True
        lines.append(b"connection: close")
        self.response.head_request = fields.get(b":method") == b"HEAD"
        self.request_ended = ended
        self.protocol.connection_made(self)
        self.protocol.data_received(b"\r\n".join(lines) + b"\r\n\r\n")

    def body(self, data: bytes, flow_controlled: int) -> None:
        if data and not self.closing:
            if self.chunked_body:
                data = b"%x\r\n%s\r\n" % (len(data), data)
            self.protocol.data_received(data)
        self.unacknowledged += flow_controlled
        if not self.reading_paused or self.closing:
            self._acknowledge()

    def body_end(self) -> None:
        self.request_ended = True
        if self.chunked_body and not self.closing:
            self.protocol.data_received(b"0\r\n\r\n")
        if self.finished:
            self.connection.finished(self.stream_id)

    def _acknowledge(self) -> None:
        """The window taken by the body so far given back: the stream's while it is
        open, the connection's always (a body sent on after the answer, or never read,
        would otherwise narrow the connection's window for good)."""
        if self.unacknowledged and not self.connection.closed:
            self.h2.acknowledge_received_data(self.unacknowledged, self.stream_id)
            self.unacknowledged = 0
            self.connection.send_pending()

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False
        self._acknowledge()

    def is_reading(self) -> bool:
        return not self.reading_paused

    # -- the response, out ----------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.finished:
            return
        for kind, value in self.response.feed(bytes(data)):
            if kind == "headers":
                assert isinstance(value, list)
                self.h2.send_headers(self.stream_id, value, end_stream=False)
            elif kind == "data":
                assert isinstance(value, bytes)
                self.outgoing.append(value)
                self.outgoing_size += len(value)
            else:
                self.ended = True
        self.flush()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def flush(self) -> None:
        """Queued DATA sent as far as the stream's and connection's windows allow."""
        if self.finished:
            return
        while self.outgoing:
            window = min(
                self.h2.local_flow_control_window(self.stream_id), self.h2.max_outbound_frame_size
            )
            if window <= 0:
                break
            piece = self.outgoing.popleft()
            if len(piece) > window:
                self.outgoing.appendleft(piece[window:])
                piece = piece[:window]
            self.outgoing_size -= len(piece)
            last = self.ended and not self.outgoing
            self.h2.send_data(self.stream_id, piece, end_stream=last)
            if last:
                self._finish()
        if self.ended and not self.outgoing and not self.finished:
            self.h2.end_stream(self.stream_id)
            self._finish()
        self.connection.send_pending()
        self.update_writing()

    def update_writing(self) -> None:
        """The handler's writes paused while much is queued or the socket is full."""
        full = self.connection.writing_paused or self.outgoing_size > _WRITE_HIGH
        if full and not self.handler_paused:
            self.handler_paused = True
            self.protocol.pause_writing()
        elif self.handler_paused and not self.connection.writing_paused:
            if self.outgoing_size <= _WRITE_LOW or self.finished:
                self.handler_paused = False
                self.protocol.resume_writing()

    def _finish(self) -> None:
        self.finished = True
        if self.request_ended or self.closing:
            self.connection.finished(self.stream_id)

    def get_write_buffer_size(self) -> int:
        return self.outgoing_size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return _WRITE_LOW, _WRITE_HIGH

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass  # the stream's limits are the module's

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        pass

    # -- the stream's end -------------------------------------------------------------

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        """The handler is done (``Connection: close``): what it wrote still goes out;
        a response it left unfinished resets the stream."""
        if self.closing:
            return
        self.closing = True
        self._acknowledge()  # what the handler left unread
        if self.response.reads_to_close and not self.ended:
            self.ended = True
            self.flush()
        if not self.ended:
            self._reset(h2.errors.ErrorCodes.INTERNAL_ERROR)
        elif self.finished:
            self.connection.finished(self.stream_id)
        self._tell_lost(None)

    def abort(self) -> None:
        self.closing = True
        self._reset(h2.errors.ErrorCodes.INTERNAL_ERROR)
        self._tell_lost(None)

    def _reset(self, code: h2.errors.ErrorCodes) -> None:
        if not self.finished and not self.connection.closed:
            try:
                self.h2.reset_stream(self.stream_id, code)
            except h2.exceptions.StreamClosedError:
                pass
            self.connection.send_pending()
        self.finished = True
        self.outgoing.clear()
        self.outgoing_size = 0
        self.connection.finished(self.stream_id)

    def lost(self, exc: Exception) -> None:
        """The client reset the stream or the connection went."""
        self.closing = True
        self.finished = True
        self.outgoing.clear()
        self._acknowledge()
        self._tell_lost(exc)

    def _tell_lost(self, exc: Exception | None) -> None:
        if not self.lost_told:
            self.lost_told = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, exc)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return default  # the connection's socket is not this stream's to tune
        return self.connection.transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.protocol


class _ResponseReader:
    """An HTTP/1.1 response, as an aiohttp handler writes it, read incrementally into
    ("headers", [...]), ("data", bytes) (one a chunk) and ("end", None)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.state = "head"
        self.remaining = 0
        self.head_request = False

    @property
    def reads_to_close(self) -> bool:
        """A body with neither a length nor chunks: it ends when the handler closes."""
        return self.state == "close"

    def feed(self, data: bytes) -> list[tuple[str, list[tuple[bytes, bytes]] | bytes | None]]:
        self.buffer += data
        out: list[tuple[str, list[tuple[bytes, bytes]] | bytes | None]] = []
        while self.buffer and self.state != "done":
            if self.state == "head":
                if not self._head(out):
                    break
            elif self.state == "chunked":
                if not self._chunk(out):
                    break
            elif self.state == "length":
                piece = self.buffer[: self.remaining]
                self.buffer = self.buffer[len(piece) :]
                self.remaining -= len(piece)
                out.append(("data", piece))
                if not self.remaining:
                    out.append(("end", None))
                    self.state = "done"
            elif self.state == "close":
                out.append(("data", self.buffer))
                self.buffer = b""
        return out

    def _head(self, out: list[tuple[str, list[tuple[bytes, bytes]] | bytes | None]]) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        status_line, *lines = self.buffer[:end].split(b"\r\n")
        self.buffer = self.buffer[end + 4 :]
        status = int(status_line.split(b" ", 2)[1])
        headers: list[tuple[bytes, bytes]] = [(b":status", b"%d" % status)]
        length: int | None = None
        chunked = False
        for line in lines:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip()
            if name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            if name in _CONNECTION_HEADERS:
                continue
            if name == b"content-length":
                length = int(value)
            headers.append((name, value))
        out.append(("headers", headers))
        if status < 200:
            return True  # informational: the final head follows
        if self.head_request or status in (204, 304) or length == 0:
            out.append(("end", None))
            self.state = "done"
        elif chunked:
            self.state = "chunked"
        elif length is not None:
            self.state, self.remaining = "length", length
        else:
            self.state = "close"
        return True

    def _chunk(self, out: list[tuple[str, list[tuple[bytes, bytes]] | bytes | None]]) -> bool:
        line_end = self.buffer.find(b"\r\n")
        if line_end < 0:
            return False
        size = int(self.buffer[:line_end].split(b";")[0], 16)
        if size == 0:
            trailer_end = self.buffer.find(b"\r\n\r\n", line_end)
            if trailer_end < 0 and self.buffer[line_end : line_end + 4] != b"\r\n\r\n":
                return False
            out.append(("end", None))
            self.state = "done"
            self.buffer = b""
            return True
        start = line_end + 2
        if len(self.buffer) < start + size + 2:
            return False
        out.append(("data", self.buffer[start : start + size]))
        self.buffer = self.buffer[start + size + 2 :]
        return True
