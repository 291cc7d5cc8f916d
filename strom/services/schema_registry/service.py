"""One schema registry instance, started and stopped as a whole: its reader of
``_schemas`` (caught up before it answers), its HTTP server and its part in the primary
election. ``strom schema-registry`` runs one; a broker with ``schema.registry.listener``
runs one inside its own process.

Does not own the API (``app``), the records (``store``, ``log``) or the election's rules
(``strom.group_leader``).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace
from typing import Any

from strom.group_leader import Election
from strom.services.http import HttpServer
from strom.services.http_security import HttpSecurity
from strom.services.schema_registry.app import RegistryApp
from strom.services.schema_registry.log import SchemasLog


class RegistryService:
    def __init__(self, settings: dict[str, Any], security: HttpSecurity) -> None:
        """``settings``: the Kafka client's; ``security``: the listener's."""
        self.settings = settings
        self.security = security
        self.schemas_log: SchemasLog | None = None
        self.app: RegistryApp | None = None
        self.server: HttpServer | None = None
        self.url = ""

    async def start(self) -> str:
        """Read ``_schemas`` to its end, then serve; the URL served. A cluster that
        cannot be read is a ``RegistryError``, a port that cannot be bound an ``OSError``."""
        loop = asyncio.get_running_loop()
        self.schemas_log = await loop.run_in_executor(None, SchemasLog, self.settings)
        await loop.run_in_executor(None, self.schemas_log.catch_up)
        security = self.security
        self.app = RegistryApp(self.schemas_log, forwarding_tls=security.forwarding_tls)
        listener = security.listener
        self.server = HttpServer(
            self.app.app, listener.host, listener.port, security.ssl_context, security.basic_auth
        )
        port = await self.server.start()
        self.url = listener.url(port)
        shown = socket.getfqdn() if listener.host in ("0.0.0.0", "::") else listener.host
        own_url = replace(listener, host=shown).url(port)
        self.app.election = Election(self.settings, self.schemas_log.topic, own_url)
        return self.url

    @property
    def schemas_topic(self) -> str:
        """The topic the schemas are read from (once started)."""
        assert self.schemas_log is not None
        return self.schemas_log.topic

    @property
    def schema_count(self) -> int:
        assert self.schemas_log is not None
        with self.schemas_log.lock:
            return len(self.schemas_log.state.schemas)

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        if self.server is not None:
            await self.server.stop()
        if self.app is not None and self.app.election is not None:
            await loop.run_in_executor(None, self.app.election.close)
        if self.schemas_log is not None:
            await loop.run_in_executor(None, self.schemas_log.close)
