"""The schema registry and REST proxy served inside a broker process, for the
single-node default: ``schema.registry.listener=http://HOST:PORT`` and
``rest.proxy.listener=http://HOST:PORT`` in the broker's properties.

They are the same services ``strom schema-registry`` and ``strom rest-proxy`` run, clients
of the broker over its first PLAINTEXT client listener, on the broker's event loop. They
start once the broker serves (a node that has just started may need a few seconds
before it can create ``_schemas``, so the registry retries until a deadline); the REST
proxy finds the embedded registry for Avro records. A service that cannot start is
logged and stops the broker process with an error, as a bad listener would.

Does not own the services themselves or the broker's life (the ``strom broker`` command).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

from strom.services.http import HttpServer
from strom.services.http_security import http_security

log = logging.getLogger(__name__)
START_DEADLINE_S = 120.0
RETRY_S = 1.0


class EmbeddedServices:
    def __init__(
        self,
        bootstrap: str,
        registry_listener: str | None,
        proxy_listener: str | None,
        failed: Callable[[str], None],
    ) -> None:
        """``failed(problem)`` is called once when a service cannot start."""
        self.settings = {"bootstrap.servers": bootstrap, "client.id": "strom-embedded"}
        self.registry_listener = registry_listener
        self.proxy_listener = proxy_listener
        self.failed = failed
        self.registry = None
        self.proxy_server: HttpServer | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start the services in the background."""
        self._task = asyncio.get_running_loop().create_task(self._start())

    async def _start(self) -> None:
        try:
            registry_url = await self._start_registry() if self.registry_listener else None
            if self.proxy_listener:
                await self._start_proxy(registry_url)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure is the broker's one line, never a traceback
            self.failed(str(exc) or type(exc).__name__)

    async def _start_registry(self) -> str:
        from strom.services.schema_registry.service import RegistryService
        from strom.services.schema_registry.store import RegistryError

        assert self.registry_listener is not None
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            self.registry = RegistryService(
                self.settings, http_security(self.registry_listener, {})
            )
            try:
                url = await self.registry.start()
                break
            except RegistryError as exc:  # the node may not take topic creations yet
                await self.registry.stop()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"schema registry cannot start: {exc.message}") from None
                await asyncio.sleep(RETRY_S)
            except OSError as exc:
                await self.registry.stop()
                raise RuntimeError(
                    f"schema.registry.listener: cannot listen on {self.registry_listener}: "
                    f"{exc.strerror}"
                ) from None
        log.info("schema registry on %s/ (%d schemas)", url, self.registry.schema_count)
        return url

    async def _start_proxy(self, registry_url: str | None) -> None:
        from strom.services.rest_proxy.app import RestProxy

        assert self.proxy_listener is not None
        listener = http_security(self.proxy_listener, {}).listener
        proxy = RestProxy(self.settings, registry_url)
        self.proxy_server = HttpServer(proxy.app, listener.host, listener.port)
        try:
            port = await self.proxy_server.start()
        except OSError as exc:
            self.proxy_server = None
            raise RuntimeError(
                f"rest.proxy.listener: cannot listen on {self.proxy_listener}: {exc.strerror}"
            ) from None
        log.info("REST proxy on %s/", listener.url(port))

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.proxy_server is not None:
            await self.proxy_server.stop()
        if self.registry is not None:
            await self.registry.stop()
        # Their Kafka clients go now, not after the broker: a client left behind would
        # log failed reconnections while the broker shuts down.
        self.proxy_server = self.registry = None
        gc.collect()
