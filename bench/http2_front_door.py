"""What HTTP/2 costs the server beside HTTP/1.1 (``strom.services.http2``), and what the
alternative design (each HTTP/2 stream forwarded to the application over a loopback
HTTP/1.1 connection) would add.

An aiohttp application like the ksql server's (a small JSON answer; a streamed answer of
one chunk a row) runs in a child process with HTTP/2 on its listener. The figures are
the server process's CPU time (user + system, from /proc) per request or per row, and
the wall-clock rate, for:

- ``h1``: HTTP/1.1 requests on one keep-alive connection (http.client);
- ``h2``: the same requests as HTTP/2 streams, one after another, on one connection
  (a raw ``h2`` client);
- ``h1 + loopback hop``: HTTP/1.1 requests whose handler asks the same application
  over a loopback HTTP/1.1 connection (aiohttp's client, kept alive): the hop that
  forwarding each stream over loopback would add to every request;
- rows: one streamed answer of many rows, over HTTP/1.1 (chunked) and HTTP/2 (a DATA
  frame a row).

    python bench/http2_front_door.py [--requests 3000] [--rows 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import multiprocessing
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
from aiohttp import ClientSession, web

from strom.services.http import SERVES_HTTP2, HttpServer

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def serve(ports: Any) -> None:
    async def main() -> None:
        session: list[ClientSession] = []

        async def info(request: web.Request) -> web.Response:
            return web.json_response({"KsqlServerInfo": {"version": "0.29.0"}})

        async def hop(request: web.Request) -> web.Response:
            async with session[0].get(f"http://127.0.0.1:{port}/info") as answer:
                return web.json_response(await answer.json())

        async def rows(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse()
            response.enable_chunked_encoding()
            await response.prepare(request)
            for i in range(int(request.query["n"])):
                await response.write(b'[%d, "a row of a push query", 12.5]\n' % i)
            await response.write_eof()
            return response

        app = web.Application()
        app[SERVES_HTTP2] = True
        app.add_routes([web.get("/info", info), web.get("/hop", hop), web.get("/rows", rows)])
        server = HttpServer(app, "127.0.0.1", 0)
        port = await server.start()
        session.append(ClientSession())
        ports.put(port)
        await asyncio.Event().wait()

    asyncio.run(main())


def h1_requests(port: int, path: str, count: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(count):
        connection.request("GET", path)
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 200
    connection.close()


class H2Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.sock.sendall(self.h2.data_to_send())

    def get(self, path: str) -> int:
        """One request, its answer read to the end; the bytes of its body."""
        stream_id = self.h2.get_next_available_stream_id()
        headers = [(":method", "GET"), (":path", path), (":scheme", "http"),
                   (":authority", "127.0.0.1")]  # fmt: skip
        self.h2.send_headers(stream_id, headers, end_stream=True)
        self.sock.sendall(self.h2.data_to_send())
        size = 0
        while True:
            for event in self.h2.receive_data(self.sock.recv(65536)):
                if isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                    size += len(event.data or b"")
                    self.h2.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                    self.sock.sendall(self.h2.data_to_send())
                    return size
            self.sock.sendall(self.h2.data_to_send())


def measure(pid: int, name: str, units: int, unit: str, work: Callable[[], None]) -> None:
    (user, system), wall = cpu_seconds(pid), time.perf_counter()
    work()
    after = cpu_seconds(pid)
    wall = time.perf_counter() - wall
    user, system = (after[0] - user) / units * 1e6, (after[1] - system) / units * 1e6
    print(
        f"{name:<20} {units / wall:>8,.0f} {unit}/s   server CPU {user + system:6.1f} µs/{unit}"
        f" ({user:.1f} user, {system:.1f} system)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rows", type=int, default=50_000)
    args = parser.parse_args()
    ports: Any = multiprocessing.Queue()
    child = multiprocessing.Process(target=serve, args=(ports,), daemon=True)
    child.start()
    port = ports.get(timeout=30)
    pid = child.pid
    assert pid is not None
    n = args.requests
    h1_requests(port, "/info", 200)  # warm both paths
    client = H2Client(port)
    for _ in range(200):
        client.get("/info")
    h1_requests(port, "/hop", 200)
    measure(pid, "h1 GET /info", n, "request", lambda: h1_requests(port, "/info", n))
    measure(pid, "h2 GET /info", n, "request", lambda: [client.get("/info") for _ in range(n)])
    measure(pid, "h1 + loopback hop", n, "request", lambda: h1_requests(port, "/hop", n))
    rows = args.rows
    measure(pid, "h1 streamed rows", rows, "row", lambda: h1_requests(port, f"/rows?n={rows}", 1))
    measure(pid, "h2 streamed rows", rows, "row", lambda: client.get(f"/rows?n={rows}") and None)
    child.terminate()
    child.join(10)


if __name__ == "__main__":
    main()
