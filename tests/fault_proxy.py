"""Fault-injecting TCP proxies for the cluster tests: one in front of each listener.

A ``ProxyHub`` runs an asyncio loop on a thread of its own and owns any number of
``FaultProxy``; each listens on a free port of 127.0.0.1 and forwards every connection
to its target port (the listener of one node). The test advertises the proxy's port in
place of the listener's (``Cluster(front=...)``), so every connection *to* that node
passes through the proxy, and the proxy can cut it off:

- ``refuse()``: every connection through the proxy is reset now and every new one is
  reset as it arrives (a peer that is down, or a firewall rejecting);
- ``stall()``: bytes stop flowing both ways on every connection, new connections are
  held before they reach the node (a partition in which packets are dropped and TCP
  keeps retransmitting); ``heal()`` lets what was held through, as TCP would;
- ``heal()``: forwarding as before.

Only traffic towards the node is affected: the node's own connections to the others
go through *their* proxies, so a cut node can still reach everyone (an asymmetric
partition). The proxy never reads what it forwards and never drops a byte of a
connection it keeps open.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine
from typing import Any

OPEN, REFUSE, STALL = "open", "refuse", "stall"
CHUNK = 65536


class _Connection:
    """One client connection and, once made, its connection to the target."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.closed = False

    def abort(self) -> None:
        self.closed = True
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


class FaultProxy:
    """A proxy in front of ``127.0.0.1:target_port``; control it from any thread."""

    def __init__(self, hub: ProxyHub, target_port: int) -> None:
        self.hub = hub
        self.target_port = target_port
        self.mode = OPEN
        self._flowing = asyncio.Event()  # set unless stalled; made on the hub's loop
        self._flowing.set()
        self._connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == REFUSE:
            writer.transport.abort()
            return
        connection = _Connection(writer)
        self._connections.add(connection)
        try:
            await self._flowing.wait()  # a connection made while stalled waits here
            if connection.closed:
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                return  # the node is down: the client sees its connection closed
            connection.upstream = up_writer
            if connection.closed:
                return
            for sock in (writer, up_writer):
                raw = sock.get_extra_info("socket")
                if raw is not None:
                    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.gather(
                self._pump(connection, reader, up_writer),
                self._pump(connection, up_reader, writer),
            )
        finally:
            connection.abort()
            self._connections.discard(connection)

    async def _pump(
        self, connection: _Connection, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        try:
            while not connection.closed:
                data = await source.read(CHUNK)
                if not data:
                    break
                if not self._flowing.is_set():
                    await self._flowing.wait()
                if connection.closed:
                    break
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            connection.abort()  # one side gone: the whole connection goes

    async def _set(self, mode: str) -> None:
        self.mode = mode
        if mode == REFUSE:
            for connection in list(self._connections):
                connection.abort()
            self._flowing.set()  # let held coroutines see that they are closed
        elif mode == STALL:
            self._flowing.clear()
        else:
            self._flowing.set()

    def refuse(self) -> None:
        self.hub.run(self._set(REFUSE))

    def stall(self) -> None:
        self.hub.run(self._set(STALL))

    def heal(self) -> None:
        self.hub.run(self._set(OPEN))

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.abort()


class ProxyHub:
    """The thread and event loop every proxy of a test runs on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.proxies: list[FaultProxy] = []
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def proxy(self, target_port: int) -> FaultProxy:
        """A new proxy, already listening, in front of ``target_port``."""

        async def make() -> FaultProxy:
            proxy = FaultProxy(self, target_port)
            await proxy._listen()
            return proxy

        proxy = self.run(make())
        self.proxies.append(proxy)
        return proxy

    def close(self) -> None:
        async def shut() -> None:
            for proxy in self.proxies:
                await proxy._close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(shut())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()
