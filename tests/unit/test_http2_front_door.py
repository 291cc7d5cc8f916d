"""HTTP/2 beside HTTP/1.1 on one listener (``strom.services.http2``), served by a small
aiohttp application on a real socket, spoken to by real clients: httpx (HTTP/1.1, and
HTTP/2 with prior knowledge or by ALPN over TLS) and a raw ``h2`` client where a test
needs the frames themselves (windows, resets, broken frames).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import httpx
import hyperframe.frame
import pytest
from aiohttp import web
from tls_certs import make_ca

from strom.services.http import SERVES_HTTP2, HttpServer
from strom.services.http2 import PREFACE


class Served:
    """One application on a plain and a TLS listener, on an event loop of its own."""

    def __init__(self, folder: Path) -> None:
        self.handler_left = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        authority = make_ca(folder)
        issued = authority.issue("server", "/CN=localhost")
        self.ca = str(authority.cert)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(issued.cert, issued.key)
        self.servers = [HttpServer(self._app(), "127.0.0.1", 0, tls) for tls in (None, context)]
        self.port, self.tls_port = [self._run(s.start()) for s in self.servers]
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(30)

    def _app(self) -> web.Application:
        app = web.Application()
        app[SERVES_HTTP2] = True
        app.add_routes(
            [
                web.get("/info", self.info),
                web.route("*", "/lines", self.lines),
                web.post("/until-gone", self.until_gone),
                web.post("/refuse", self.refuse),
            ]
        )
        return app

    async def info(self, request: web.Request) -> web.Response:
        return web.json_response({"peer": request.remote, "host": request.host})

    async def lines(self, request: web.Request) -> web.StreamResponse:
        """``n`` lines, each written (so sent) alone, each naming the body's size."""
        body = await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(int(request.query["n"])):
            await response.write(b"line %d of a body of %d\n" % (i, len(body)))
        await response.write_eof()
        return response

    async def refuse(self, request: web.Request) -> web.Response:
        """An answer before the body is read (as a refused request is)."""
        return web.json_response({"refused": True}, status=400)

    async def until_gone(self, request: web.Request) -> web.StreamResponse:
        """A line whenever the previous one is written, until the client goes."""
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            while True:
                await response.write(b"still here\n")
                await asyncio.sleep(0.01)
        except ConnectionResetError:
            self.handler_left.set()
        return response

    def stop(self) -> None:
        for server in self.servers:
            self._run(server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = Served(tmp_path_factory.mktemp("http2-certs"))
    yield served
    served.stop()


class RawClient:
    """An HTTP/2 client connection over a socket, frames in view (``h2`` client side)."""

    def __init__(self, port: int, window: int | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.h2.initiate_connection()
        if window is not None:
            self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.h2.data_to_send())

    def request(self, method: str, path: str, body: bytes = b"") -> int:
        stream_id = self.h2.get_next_available_stream_id()
        headers = [
            (":method", method), (":path", path), (":scheme", "http"),
            (":authority", "127.0.0.1"),
        ]  # fmt: skip
        self.h2.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self.h2.send_data(stream_id, body, end_stream=True)
        self.flush()
        return stream_id

    def events(self) -> list[h2.events.Event]:
        """What the next bytes from the server are (perhaps nothing yet: part of a
        frame); the server must not have closed the connection."""
        found = self.events_or_closed()
        assert found is not None, "the server closed the connection"
        return found

    def events_or_closed(self) -> list[h2.events.Event] | None:
        """As ``events``, or None once the server closed the connection."""
        data = self.sock.recv(65536)
        if not data:
            return None
        found = self.h2.receive_data(data)
        self.flush()
        return found

    def close(self) -> None:
        self.sock.close()


def test_http1_and_http2_share_the_listener(served: Served) -> None:
    with httpx.Client() as client:
        one = client.get(served.url + "/info")
    with httpx.Client(http1=False, http2=True) as client:
        two = client.get(served.url + "/info")
        three = client.get(served.url + "/info")  # the same connection, a second stream
    assert (one.http_version, two.http_version, three.http_version) == (
        "HTTP/1.1",
        "HTTP/2",
        "HTTP/2",
    )
    assert one.json() == two.json() == {"peer": "127.0.0.1", "host": f"127.0.0.1:{served.port}"}


def test_tls_offers_h2_by_alpn(served: Served) -> None:
    url = f"https://localhost:{served.tls_port}/info"
    with httpx.Client(http2=True, verify=served.ca) as client:
        negotiated = client.get(url)
    with httpx.Client(verify=served.ca) as client:
        plain = client.get(url)
    assert negotiated.http_version == "HTTP/2" and plain.http_version == "HTTP/1.1"
    assert negotiated.json()["peer"] == "127.0.0.1"


def test_bodies_larger_than_the_windows_both_ways(served: Served) -> None:
    body = bytes(range(256)) * 1200  # 300 KiB up, against a 64 KiB window
    with httpx.Client(http1=False, http2=True) as client:
        answer = client.post(served.url + "/lines?n=3000", content=body)  # ~90 KiB down
    assert answer.status_code == 200 and answer.http_version == "HTTP/2"
    assert answer.text.splitlines() == [f"line {i} of a body of {len(body)}" for i in range(3000)]


def test_each_write_is_one_data_frame_and_the_window_is_kept(served: Served) -> None:
    client = RawClient(served.port)
    stream_id = client.request("POST", "/lines?n=50", b"x")
    frames: list[bytes] = []
    ended = False
    while not ended:
        for event in client.events():
            if isinstance(event, h2.events.DataReceived) and event.data:
                frames.append(event.data)
                client.h2.acknowledge_received_data(event.flow_controlled_length, stream_id)
            ended = ended or isinstance(event, h2.events.StreamEnded)
    assert frames == [b"line %d of a body of 1\n" % i for i in range(50)]
    client.close()

    # a window of 100 bytes a stream: the server sends up to it and waits for more room
    # (the client's h2 raises if it is overrun); the rest comes as the window opens
    small = RawClient(served.port, window=100)
    stream_id = small.request("POST", "/lines?n=50", b"x")
    received = b""
    unacknowledged = 0
    ended = False
    while not ended:
        for event in small.events():
            if isinstance(event, h2.events.DataReceived):
                received += event.data or b""
                unacknowledged += event.flow_controlled_length or 0
                assert unacknowledged <= 100
            ended = ended or isinstance(event, h2.events.StreamEnded)
        if unacknowledged == 100:  # the window is spent: open it again
            small.h2.acknowledge_received_data(unacknowledged, stream_id)
            small.flush()
            unacknowledged = 0
    assert received == b"".join(b"line %d of a body of 1\n" % i for i in range(50))
    small.close()


def test_a_reset_stream_is_a_client_gone_to_its_handler(served: Served) -> None:
    served.handler_left.clear()
    client = RawClient(served.port)
    stream_id = client.request("POST", "/until-gone", b"{}")
    while not any(isinstance(e, h2.events.DataReceived) for e in client.events()):
        pass
    client.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    client.flush()
    assert served.handler_left.wait(30)
    # the connection serves on
    again = client.request("GET", "/info")
    answered: dict[str, Any] = {}
    while "body" not in answered:
        for event in client.events():
            if isinstance(event, h2.events.ResponseReceived) and event.stream_id == again:
                answered["status"] = dict(event.headers or [])[b":status"]
            if isinstance(event, h2.events.DataReceived) and event.stream_id == again:
                answered["body"] = json.loads(event.data or b"")
    assert answered == {"status": b"200", "body": {"peer": "127.0.0.1", "host": "127.0.0.1"}}
    client.close()


def test_broken_frames_close_that_connection_only(served: Served) -> None:
    broken = socket.create_connection(("127.0.0.1", served.port), timeout=30)
    # the preface, then a DATA frame on stream 0, which the protocol forbids
    broken.sendall(PREFACE + b"\x00\x00\x04\x00\x00\x00\x00\x00\x00oops")
    received = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        data = broken.recv(65536)
        if not data:
            break
        received += data
    broken.close()
    # the server's SETTINGS, then GOAWAY (type 7) with PROTOCOL_ERROR (1), then the close
    goaway = received.find(b"\x07\x00\x00\x00\x00\x00")
    assert goaway > 0 and received[goaway + 10 : goaway + 14] == b"\x00\x00\x00\x01"
    with httpx.Client(http1=False, http2=True) as client:
        assert client.get(served.url + "/info").status_code == 200
    with httpx.Client() as client:
        assert client.get(served.url + "/info").status_code == 200


def test_a_client_going_away_has_its_open_streams_answered(served: Served) -> None:
    client = RawClient(served.port)
    stream_id = client.h2.get_next_available_stream_id()
    headers = [(":method", "GET"), (":path", "/lines?n=3"), (":scheme", "http"),
               (":authority", "127.0.0.1")]  # fmt: skip
    client.h2.send_headers(stream_id, headers, end_stream=True)
    # GOAWAY in the same packet as the request, framed here: the client's h2 would take
    # no frame after sending one itself, and the answer is what this test reads
    goaway = hyperframe.frame.GoAwayFrame(0)
    goaway.last_stream_id = stream_id
    client.sock.sendall(client.h2.data_to_send() + goaway.serialize())
    body = b""
    ended = closed = False
    while not closed:
        events = client.events_or_closed()
        closed = events is None
        for event in events or []:
            if isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                body += event.data or b""
            ended = ended or isinstance(event, h2.events.StreamEnded)
    assert ended and body == b"".join(b"line %d of a body of 0\n" % i for i in range(3))
    client.close()


def test_a_body_sent_after_the_answer_gives_the_window_back(served: Served) -> None:
    """Bytes of a request body the handler never reads still count against the
    connection's window: unless given back, a few such requests would stop the
    connection's uploads for good."""
    client = RawClient(served.port)
    refused = client.h2.get_next_available_stream_id()
    headers = [(":method", "POST"), (":path", "/refuse"), (":scheme", "http"),
               (":authority", "127.0.0.1")]  # fmt: skip
    client.h2.send_headers(refused, headers)
    client.flush()
    answered = False
    while not answered:
        answered = any(isinstance(e, h2.events.StreamEnded) for e in client.events())
    # the body after the answer, a frame at a time as the window has room: three times
    # the connection's first window
    left = 3 * client.h2.outbound_flow_control_window
    while left:
        room = min(client.h2.local_flow_control_window(refused), left)
        if not room:
            client.events()  # the server's WINDOW_UPDATE; without it this waits (fails)
            continue
        piece = min(room, client.h2.max_outbound_frame_size)
        client.h2.send_data(refused, b"x" * piece)
        client.flush()
        left -= piece
    client.h2.end_stream(refused)
    client.flush()
    body = b"y" * 1000
    while client.h2.outbound_flow_control_window < len(body):
        client.events()  # the last of the window given back
    stream_id = client.request("POST", "/lines?n=1", body)
    received = b""
    ended = False
    while not ended:
        for event in client.events():
            if isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                received += event.data or b""
            ended = ended or (
                isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id
            )
    assert received == b"line 0 of a body of 1000\n"
    client.close()
