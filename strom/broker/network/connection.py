"""One client connection: the byte stream cut into frames, each request routed to its
handler in arrival order, responses sent back in request order.

Owns: receiving (frames of 64 KiB or more straight into a buffer of their own, the
connection's previous one when nothing holds a view of it any more; large Produce
frames kept writable and decoded in place by ``protocol/produce_view.py``, so their
record batches reach the log without a copy), ``queued.max.request.bytes``
(``FrameMemory``), closing a connection that sends a malformed, oversized or unknown
request (one log line, the broker carries on), authentication before anything else on
a SASL listener, quotas and muting, and the order of answers.

A connection handles its requests in order. Most handlers answer at once; a
long-polling fetch, a held JoinGroup or a produce waiting for its fsync returns
an awaitable, and the connection goes on handling later requests (up to
MAX_PIPELINED owed responses) while their responses wait behind it, so replies
always leave in request order. Responses to one read go out in one write.
Reading is paused while the socket's send buffer is full or too many responses
are owed, so a slow client cannot make the broker buffer without bound.

A TLS listener's connections are served once their handshake is done (each takes the
listener's current certificates; ``access.authentication.ListenerSecurity``); a SASL
connection is served ApiVersions, SaslHandshake and SaslAuthenticate only until it
has authenticated (``access.authentication.ConnectionSession``), and a request carries
the connection's principal and listener.

The node it serves is seen through ``ServedNode``, never the server.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import mmap
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from strom.broker.access.authentication import SASL_HANDSHAKE as SASL_HANDSHAKE_KEY
from strom.broker.access.authentication import ConnectionSession, ListenerSecurity
from strom.broker.handlers.cluster.api_versions import (
    unsupported_version_answer,
    unsupported_version_response,
)
from strom.broker.network.router import NodeServices, RequestContext, Route
from strom.protocol.framing import (
    API_VERSIONS_KEY,
    PRODUCE_KEY,
    FrameError,
    codec_for,
    decode_request,
    encode_response_chunks,
    peek_header,
)
from strom.security.sasl import SaslAuthenticationFailed

if TYPE_CHECKING:
    from strom.broker.access.client_quotas import ClientQuotas
    from strom.broker.metrics import BrokerMetrics
    from strom.security.connection_limits import ConnectionLimits

log = logging.getLogger(__name__)

MAX_PIPELINED = 64  # requests handled ahead of an owed response before reading pauses


class ServedNode(NodeServices, Protocol):
    """The node as its connections see it: a handler's view, and the connections open,
    their limits, the memory frames in flight may hold, the largest frames, the quotas
    that mute, and the request metrics."""

    @property
    def connections(self) -> set[KafkaConnection]: ...

    @property
    def uncounted_listeners(self) -> set[str]: ...

    @property
    def connection_limits(self) -> ConnectionLimits: ...

    @property
    def frame_memory(self) -> FrameMemory: ...

    @property
    def max_request_size(self) -> int: ...

    @property
    def max_unauthenticated_size(self) -> int: ...

    @property
    def client_quotas(self) -> ClientQuotas: ...

    @property
    def metrics(self) -> BrokerMetrics | None: ...


_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")  # Produce is key 0
# Per connection, for frames smaller than DIRECT_FRAME: a connection starts with
# FIRST_RECEIVE_BUFFER and doubles it, up to RECEIVE_BUFFER, each time a read fills it,
# so a thousand quiet connections do not cost a quarter of a megabyte each.
RECEIVE_BUFFER = 256 * 1024
FIRST_RECEIVE_BUFFER = 8 * 1024
# Produce frames from this size on are decoded in place (records never copied); below
# it kio's native decoder is faster than the copies it makes.
IN_PLACE_PRODUCE = 16 * 1024
DIRECT_FRAME = 64 * 1024
# A connection keeps its last large-frame buffer for the next one up to this size:
# a fresh buffer costs a zero fill and a page fault per 4 KiB as the frame arrives.
SPARE_FRAME_BUFFER = 16 * 1024 * 1024
# A frame above this size is received into an anonymous memory mapping: its pages are
# taken as bytes arrive, so a frame declared and never sent costs no memory (smaller
# ones reuse the connection's spare buffer, whose pages are already there). So is a
# connection's first large frame of any size: until it has sent one whole, a client
# that declares a frame and trickles it (slowloris) holds only what it sent.
MAPPED_FRAME = SPARE_FRAME_BUFFER
# A client that has not finished its TLS handshake by then is disconnected.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class _Owed:
    """A response slot in request order: filled when its handler's awaitable is done."""

    __slots__ = ("chunks", "ready")

    def __init__(self) -> None:
        self.chunks: list[bytes | bytearray | memoryview] = []
        self.ready = False


class FrameMemory:
    """queued.max.request.bytes, as Kafka's memory pool: the bytes large request frames
    being received may hold in all. A connection whose next frame does not fit waits,
    its reading paused, until frames in flight release memory (one frame is always let
    in, however large, as Kafka's pool does); -1 bounds nothing."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.held = 0
        self.waiting: list[KafkaConnection] = []

    def take(self, size: int, connection: KafkaConnection) -> bool:
        limit = int(self.config["queued.max.request.bytes"])
        if limit > 0 and self.held and self.held + size > limit:
            if connection not in self.waiting:
                self.waiting.append(connection)
            return False
        self.held += size
        return True

    def give_back(self, size: int) -> None:
        self.held -= size
        waiting, self.waiting = self.waiting, []
        for connection in waiting:
            if not connection.closed:
                connection.resume_after_memory()


class KafkaConnection(asyncio.BufferedProtocol):
    """The request loop of one client connection.

    Bytes are received into ``inbox``; a frame of at least DIRECT_FRAME bytes (a
    produce of big batches) is received straight into a buffer of its own, so its
    records are not copied on the way in.
    """

    def __init__(
        self, broker: ServedNode, routes: dict[int, Route], security: ListenerSecurity
    ) -> None:
        self.broker = broker
        self.routes = routes  # the table of the listener this connection came in on
        self.session = ConnectionSession(broker, security)
        self.closing = False  # closes once the responses owed are sent (failed SASL)
        self.transport: asyncio.Transport | None = None
        self.inbox = bytearray(FIRST_RECEIVE_BUFFER)
        self.inbox_filled = False  # the last read filled the inbox: offer a bigger one
        self.start = 0  # where the next unread frame begins in ``inbox``
        self.end = 0  # where received bytes end in ``inbox``
        self.direct: bytearray | mmap.mmap | None = None  # a large frame received in place
        self.direct_filled = 0
        self.direct_size = 0  # the frame's size; the buffer may be larger (reused)
        self.spare: bytearray | None = None  # the last large-frame buffer, free again
        self.large_frames = 0  # large frames received whole
        self.reading_paused = False
        # Responses owed, in request order; the head may still be pending (a long
        # poll, an fsync). Later requests are handled meanwhile and their responses
        # wait here, so the client sees them in order.
        self.owed: deque[_Owed] = deque()
        self.write_paused = False
        self.muted = False  # a client over its quota: not read until the timer unmutes it
        self.holds = 0  # handlers working off the loop that later requests must wait for
        self.unmute_timer: asyncio.TimerHandle | None = None
        self.closed = False
        self.peer = "?"
        self.ip: str | None = None  # counted in the connection limits until it closes
        self.last_active = time.monotonic()  # bytes last read or written
        self.frame_held = 0  # queued.max.request.bytes taken by the frame being received
        self.counted = True
        # While a batch of received requests is handled, responses gather here and go
        # out in one write: one send() per read, not one per request.
        self.outbox: list[bytes | bytearray | memoryview] | None = None
        self.read_ns = 0  # when the bytes being handled were taken up (metrics on)

    # asyncio callbacks -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        self.broker.connections.add(self)
        broker = self.broker
        self.counted = self.session.security.name not in broker.uncounted_listeners
        self.ip = peer[0] if peer else "?"
        refusal = broker.connection_limits.admit(self.ip, counted=self.counted)
        if refusal is not None:
            self.ip = None  # nothing to release
            log.info("closing connection from %s: %s", self.peer, refusal)
            self.abort()
            return
        try:
            self.session.tls_established(transport.get_extra_info("ssl_object"))
        except ValueError as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.broker.connections.discard(self)
        closing, self.session.on_close = self.session.on_close, {}
        for callback in closing.values():
            try:
                callback()
            except Exception:
                log.exception("a callback of the closed connection from %s failed", self.peer)
        self._release_frame_memory()
        self.direct = None
        if self.ip is not None:
            self.broker.connection_limits.release(self.ip, counted=self.counted)
            self.ip = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.direct is not None:
            return memoryview(self.direct)[self.direct_filled : self.direct_size]
        if self.inbox_filled and len(self.inbox) < RECEIVE_BUFFER:  # a busy connection
            self._grow_inbox(min(2 * len(self.inbox), RECEIVE_BUFFER))
        elif self.end == len(self.inbox):
            self._make_room()
        return memoryview(self.inbox)[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self.direct is None:
            self.inbox_filled = self.end + nbytes == len(self.inbox)
            self.end += nbytes
            self._process()
            return
        self.direct_filled += nbytes
        if self.direct_filled == self.direct_size:
            buffer, self.direct = self.direct, None
            self.large_frames += 1
            self._release_frame_memory()
            frame = memoryview(buffer)[: self.direct_size]
            self._process(frame)  # writable: a produce's records are patched in place
            try:
                frame.release()
            except BufferError:
                return  # something still reads through it: the buffer is not reused
            self._keep_spare(buffer)

    def _release_frame_memory(self) -> None:
        if self.frame_held:
            self.broker.frame_memory.give_back(self.frame_held)
            self.frame_held = 0

    def _keep_spare(self, buffer: bytearray | mmap.mmap) -> None:
        """Keep a large-frame buffer for the next large frame, unless something still
        holds a view of it (a bytearray with views cannot be resized: the test)."""
        if not isinstance(buffer, bytearray) or len(buffer) > SPARE_FRAME_BUFFER:
            return
        try:
            buffer.append(0)
            buffer.pop()
        except BufferError:
            return
        self.spare = buffer

    def _grow_inbox(self, size: int) -> None:
        """A new inbox of ``size`` bytes, the unread bytes moved to its front."""
        unread = self.end - self.start
        inbox = bytearray(size)
        inbox[:unread] = self.inbox[self.start : self.end]
        self.inbox, self.start, self.end = inbox, 0, unread
        self.inbox_filled = False

    def _make_room(self) -> None:
        """Move unread bytes to the front of the inbox (a new, bigger one if full)."""
        if not self.start:  # full of one frame's start: twice the size
            self._grow_inbox(2 * len(self.inbox))
            return
        unread = self.end - self.start  # same-size copy: the transport may still hold a view
        self.inbox[:unread] = self.inbox[self.start : self.end]
        self.start, self.end = 0, unread

    def pause_writing(self) -> None:
        self.write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if not self.closed:
            self._process()

    def resume_after_memory(self) -> None:
        """Frame memory was released: try the frame that waited for it again."""
        asyncio.get_running_loop().call_soon(self._process)

    def _pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None and not self.closed:
            self.reading_paused = True
            self.transport.pause_reading()

    def mute_for(self, seconds: float) -> None:
        """Read nothing more from this client for ``seconds`` (a quota's throttle time,
        KIP-219); responses owed still go out."""
        if seconds <= 0 or self.closed:
            return
        loop = asyncio.get_running_loop()
        if self.unmute_timer is not None:
            if self.unmute_timer.when() >= loop.time() + seconds:
                return
            self.unmute_timer.cancel()
        self.muted = True
        self._pause_reading()
        self.unmute_timer = loop.call_later(seconds, self._unmute)

    def hold(self) -> Callable[[], None]:
        """Handle none of this connection's later requests until the returned function
        is called (once): a request's work goes on off the event loop and its effects
        must come before theirs."""
        self.holds += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.holds -= 1
            if not self.holds and not self.closed:
                asyncio.get_running_loop().call_soon(self._process)

        return release

    def _unmute(self) -> None:
        self.muted, self.unmute_timer = False, None
        if not self.closed:
            self._process()

    # Request loop ----------------------------------------------------------

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once, unsent bytes and all (a stopping node)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self.broker.connections.discard(self)

    def _process(self, frame: bytearray | memoryview | None = None) -> None:
        self.outbox = []
        if self.broker.metrics is not None:  # requests of this read wait from here
            self.read_ns = time.perf_counter_ns()
        try:
            if frame is not None:
                self._handle(frame)
            self._process_frames()
        finally:
            outbox, self.outbox = self.outbox, None
            if outbox and not self.closed and self.transport is not None:
                self.transport.writelines(outbox)
            if self.closing and not self.owed:
                self.close()  # after the last response: the transport sends it first

    def _process_frames(self) -> None:
        while True:
            if self.closed or self.closing:
                return
            if len(self.owed) >= MAX_PIPELINED or self.write_paused or self.muted or self.holds:
                self._pause_reading()  # resumed once responses drain
                return
            if self.direct is not None:
                break  # the rest of a large frame is still on its way
            inbox = self.inbox
            available = self.end - self.start
            if available < 4:
                break
            (size,) = _SIZE.unpack_from(inbox, self.start)
            limit = (
                self.broker.max_request_size
                if self.session.authenticated
                else self.broker.max_unauthenticated_size
            )
            if size < 0 or size > limit:
                log.warning(
                    "closing connection from %s: request size %d is outside 0..%d",
                    self.peer,
                    size,
                    limit,
                )
                self.close()
                return
            begin = self.start + 4
            if available - 4 >= size:
                in_place = size >= IN_PLACE_PRODUCE and _API_KEY.unpack_from(inbox, begin)[0] == 0
                frame: bytes | bytearray
                with memoryview(inbox) as view:
                    if in_place:  # a produce: decoded and patched in place, one copy not three
                        frame = bytearray(view[begin : begin + size])
                    else:
                        frame = bytes(view[begin : begin + size])
                self.start = begin + size
                self._handle(frame)
            elif size >= DIRECT_FRAME:
                if not self.broker.frame_memory.take(size, self):
                    self._pause_reading()  # resumed when frames in flight release memory
                    return
                self.frame_held = size
                direct: bytearray | mmap.mmap | None = self.spare
                if direct is None or len(direct) < size:
                    mapped = size > MAPPED_FRAME or not self.large_frames
                    direct = mmap.mmap(-1, size) if mapped else bytearray(size)
                self.spare = None
                with memoryview(inbox) as view:
                    direct[: available - 4] = view[begin : self.end]
                self.direct, self.direct_filled, self.direct_size = direct, available - 4, size
                self.start = self.end = 0
                break
            else:
                break
        if self.start == self.end:
            self.start = self.end = 0
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()

    def _handle(self, frame: bytes | bytearray | memoryview) -> None:
        session = self.session
        if session.raw_tokens:
            self._sasl_token(bytes(frame))
            return
        try:
            api_key, api_version, correlation_id = peek_header(frame)
        except FrameError as exc:
            self._reject(str(exc))
            return
        if not session.authenticated and not session.allows(api_key):
            self._reject(f"API key {api_key} sent before SASL authentication")
            return
        if session.expires_at is not None and session.authenticated and session.expired():
            if api_key != SASL_HANDSHAKE_KEY:  # KIP-368: the session has ended
                log.info(
                    "closing connection from %s: its SASL session ended (API key %d came "
                    "after it, not a re-authentication)",
                    self.peer,
                    api_key,
                )
                self.close()
                return
        route = self.routes.get(api_key)
        if route is None:
            self._reject(f"unknown API key {api_key}")
            return
        if not route.min_version <= api_version <= route.max_version:
            if api_key == API_VERSIONS_KEY:
                self._respond(
                    encode_response_chunks(
                        correlation_id,
                        codec_for(API_VERSIONS_KEY, 0),
                        unsupported_version_response(self.routes),
                    )
                )
            else:
                self._answer_unsupported(frame, api_key, api_version, correlation_id)
            return
        codec = codec_for(api_key, api_version)
        try:
            request = decode_request(frame, codec)
        except FrameError as exc:
            self._reject(str(exc))
            return
        ctx = RequestContext(
            self.broker,
            api_key,
            api_version,
            correlation_id,
            request.client_id,
            codec,
            self.peer,
            self.routes,
            session.principal,
            session.listener,
            session,
            hold_reading=self.hold,
        )
        metrics = self.broker.metrics
        if metrics is not None:
            ctx.started_ns = time.perf_counter_ns()
            ctx.queued_ns = ctx.started_ns - self.read_ns
        try:
            result = self.broker.client_quotas.serve(
                ctx, route.handler, request.body, len(frame), self.mute_for
            )
        except Exception:
            log.exception(
                "closing connection from %s: handler for API key %d failed", self.peer, api_key
            )
            self.close()
            return
        if session.close_after_response:
            self.closing = True
        if inspect.isawaitable(result):
            owed = _Owed()
            self.owed.append(owed)
            asyncio.get_running_loop().create_task(
                self._finish(ctx, result, owed, request.body if metrics is not None else None)
            )
            return
        if metrics is not None:
            metrics.request_done(ctx, request.body, result)
        if result is None:
            return
        self._respond(encode_response_chunks(correlation_id, codec, result))

    def _sasl_token(self, token: bytes) -> None:
        """A token framed bare, after SaslHandshake v0: the answer goes back framed bare;
        a failure closes the connection without one (Kafka's v0 exchange)."""
        try:
            answer = self.session.evaluate(token)
        except SaslAuthenticationFailed:
            # Closed connection.failed.authentication.delay.ms later, reading nothing more.
            delay_ms = int(self.broker.config["connection.failed.authentication.delay.ms"])
            self.muted = True  # never unmuted: nothing more is read or served
            asyncio.get_running_loop().call_later(delay_ms / 1000, self.close)
            return
        self._respond([_SIZE.pack(len(answer)) + answer])

    async def _finish(
        self, ctx: RequestContext, pending: object, owed: _Owed, body: object = None
    ) -> None:
        try:
            response = await pending  # type: ignore[misc]
        except Exception:
            log.exception(
                "closing connection from %s: handler for API key %d failed", self.peer, ctx.api_key
            )
            self.close()
            return
        metrics = self.broker.metrics
        if metrics is not None:
            metrics.request_done(ctx, body, response)
        if self.closed:
            return
        if response is not None:
            owed.chunks = encode_response_chunks(ctx.correlation_id, ctx.codec, response)
        owed.ready = True
        while self.owed and self.owed[0].ready:
            self._send(self.owed.popleft().chunks)
        if self.closing and not self.owed:
            self.close()
            return
        if self.reading_paused and len(self.owed) < MAX_PIPELINED:
            self._process()

    def _answer_unsupported(
        self, frame: bytes | bytearray | memoryview, api_key: int, version: int, correlation: int
    ) -> None:
        """UNSUPPORTED_VERSION for a version this listener does not serve, where that
        version's layout is known and an answer is owed; otherwise the connection closes."""
        reason = f"unsupported version {version} of API key {api_key}"
        try:
            codec = codec_for(api_key, version)
        except RuntimeError:  # kio's KioIndexError: no layout known, nothing to answer in
            self._reject(reason)
            return
        try:
            body: Any = decode_request(bytes(frame), codec).body
        except FrameError:
            body = None
        if api_key == PRODUCE_KEY and getattr(body, "acks", None) == 0:
            self._reject(reason)  # acks=0 is owed no answer
            return
        log.info("answering UNSUPPORTED_VERSION to %s: %s", self.peer, reason)
        response = unsupported_version_answer(api_key, version, body)
        self._respond(encode_response_chunks(correlation, codec, response))

    def _respond(self, chunks: list[bytes | bytearray | memoryview]) -> None:
        """Send a response now, or queue it behind responses still owed."""
        self.last_active = time.monotonic()
        if self.owed:
            owed = _Owed()
            owed.chunks, owed.ready = chunks, True
            self.owed.append(owed)
        else:
            self._send(chunks)

    def _send(self, chunks: list[bytes | bytearray | memoryview]) -> None:
        if self.closed or self.transport is None:
            return
        if self.outbox is not None:
            self.outbox += chunks
        elif len(chunks) == 1:
            self.transport.write(chunks[0])
        else:
            self.transport.writelines(chunks)

    def _reject(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.close()
