"""The one HTTP stack of every Strom HTTP surface: aiohttp's server, run on the event
loop of whoever serves (the broker's admin listener, and the services).

Owns starting and stopping an aiohttp application on a host and port
(``HttpServer``), with TLS and basic authentication when given (their settings are
``http_security``'s), reporting the port bound (port 0 picks a free one), and its
access log staying out of the broker's log unless debugging. An application that sets
``app[SERVES_HTTP2]`` is served over HTTP/2 too, on the same listener
(``strom.services.http2``).

Chosen because it serves asyncio natively (the broker's own loop, uvloop included, with
no thread and no second server process), is a long-stable, widely used library, and
carries the client side too for the services that need one.

Does not own any route: each surface builds its own ``aiohttp.web.Application``.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

# An application that also serves HTTP/2 on its listener (``strom.services.http2``) says so
# with ``app[SERVES_HTTP2] = True``.
SERVES_HTTP2 = web.AppKey("serves_http2", bool)


class HttpServer:
    """An aiohttp application served on one host and port."""

    def __init__(
        self,
        app: web.Application,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        basic_auth: Any = None,
    ) -> None:
        """``basic_auth``: an ``http_security.BasicAuth`` every request must pass."""
        self.app = app
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        if basic_auth is not None:
            app.middlewares.insert(0, basic_auth.middleware())
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Bind and serve; the port bound (the one asked for, or a free one for 0)."""
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site_class = web.TCPSite
        if self.app.get(SERVES_HTTP2):
            from strom.services.http2 import Http2Site

            site_class = Http2Site
        site = site_class(
            self._runner, self.host, self.port, reuse_address=True, ssl_context=self.ssl_context
        )
        await site.start()
        # the event loop's server (asyncio's or uvloop's): its socket names the port bound
        sockets = getattr(site._server, "sockets", None)
        if sockets:
            self.port = sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
