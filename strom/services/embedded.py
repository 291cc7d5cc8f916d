"""The schema registry and REST proxy served inside a broker process, for the
single-node default: ``schema.registry.listener=http://HOST:PORT`` and
``rest.proxy.listener=http://HOST:PORT`` in the broker's properties.

They are the same services ``strom schema-registry`` and ``strom rest-proxy`` run, clients
of the broker over its first PLAINTEXT client listener, on the broker's event loop. They
start once the broker serves (a node that has just started may need a few seconds
before it can create ``_schemas``, so the registry retries until a deadline); the REST
proxy finds the embedded registry for Avro records. A service that cannot start is
logged and stops the broker process with an error, as a bad listener would.

Each takes the standalone service's TLS and basic authentication settings from the
broker's properties, prefixed ``schema.registry.`` or ``rest.proxy.``
(``schema.registry.authentication.method=BASIC``, ``rest.proxy.ssl.keystore.location``...;
an ``https://`` listener for TLS), and the REST proxy reaches a secured registry with
``rest.proxy.schema.registry.basic.auth.user.info`` and the other ``schema.registry.*``
client settings of the standalone proxy. They are read, users files and keys included,
before the broker starts: a bad one is one ``ConfigError`` line.

Does not own the services themselves or the broker's life (the ``strom broker`` command).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from strom.config import ConfigError
from strom.services.http import HttpServer
from strom.services.http_security import HttpSecurity, HttpSecurityError, http_security

if TYPE_CHECKING:
    from strom.services.schema_registry.service import RegistryService

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
        registry_settings: dict[str, str] | None = None,
        proxy_settings: dict[str, str] | None = None,
    ) -> None:
        """``failed(problem)`` is called once when a service cannot start;
        ``registry_settings`` and ``proxy_settings``: each service's TLS and basic
        authentication settings, named as its --config names them (ConfigError, one line
        naming the broker's property, for one that cannot be used)."""
        self.settings = {"bootstrap.servers": bootstrap, "client.id": "strom-embedded"}
        self.registry_listener = registry_listener
        self.proxy_listener = proxy_listener
        self.registry_security = self._security(
            registry_listener, registry_settings or {}, "schema.registry."
        )
        self.proxy_security = self._security(proxy_listener, proxy_settings or {}, "rest.proxy.")
        self.failed = failed
        self.registry: RegistryService | None = None
        self.proxy_server: HttpServer | None = None
        self._task: asyncio.Task[None] | None = None

    @staticmethod
    def _security(listener: str | None, props: dict[str, str], prefix: str) -> HttpSecurity | None:
        if listener is None:
            return None
        try:
            return http_security(listener, props, prefix)
        except HttpSecurityError as exc:
            raise ConfigError(str(exc)) from None

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

        assert self.registry_listener is not None and self.registry_security is not None
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            self.registry = RegistryService(self.settings, self.registry_security)
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

        assert self.proxy_listener is not None and self.proxy_security is not None
        security = self.proxy_security
        listener = security.listener
        proxy = RestProxy(self.settings, registry_url, registry_client=security.registry_client)
        self.proxy_server = HttpServer(
            proxy.app, listener.host, listener.port, security.ssl_context, security.basic_auth
        )
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
