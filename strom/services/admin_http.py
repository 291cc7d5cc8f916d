"""The node's HTTP admin listener (``admin.listeners=http://HOST:PORT``, or
``https://HOST:PORT``): metrics and health.

Serves, on the broker's own event loop through the shared HTTP stack
(``strom.services.http``), with the HTTP services' TLS and basic authentication settings
prefixed ``admin.`` (``admin.ssl.keystore.location``..., read by
``strom.services.http_security``; a bad one stops start-up in one line):
- ``GET /metrics``: the Prometheus text format (``prometheus_client``), Kafka's metric
  names from ``metrics.KafkaCollector`` plus the process's own (CPU, memory, open
  files) and Python's (garbage collection); with ``admin.authentication.method=BASIC``
  only for a user of ``admin.authentication.users.file`` holding one of
  ``admin.authentication.roles`` (401 with a challenge, 403 without a role), as the
  HTTP services check it: the metrics name every topic and group;
- ``GET /health/live``: 200 while the node's event loop answers;
- ``GET /health/ready``: 200 once the node does its part, 503 until then, with a JSON
  body naming each check: a controller knows the quorum's leader; a broker is registered
  and unfenced (it has caught up with the metadata), serves its client listeners, and
  has taken up the leadership of every partition the metadata gives it.

Does not own what the metrics count or what readiness checks: the node hands its
collector and its readiness check in (``strom.broker.metrics``); it never reads the
node itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from strom.config import BrokerConfig, ConfigError
from strom.services.http import HttpServer
from strom.services.http_security import HttpSecurity, HttpSecurityError, http_security

log = logging.getLogger(__name__)


def listener_security(config: BrokerConfig) -> list[HttpSecurity]:
    """Each admin listener's TLS context and basic authentication, from the ``admin.``
    settings; ConfigError (one line) for one that cannot be used. The ``admin.ssl.*``
    settings serve the https listeners (an http one beside them goes without)."""
    specs = config["admin.listeners"]
    props = config.http_listener_settings("admin.")
    secure = [spec.strip().lower().startswith("https://") for spec in specs]
    plain = {key: value for key, value in props.items() if not key.startswith("ssl.")}
    try:
        return [
            http_security(spec, props if https or not any(secure) else plain, "admin.")
            for spec, https in zip(specs, secure, strict=True)
        ]
    except HttpSecurityError as exc:
        raise ConfigError(str(exc)) from None


class AdminListener:
    """The HTTP admin listeners of one node."""

    def __init__(
        self,
        config: BrokerConfig,
        collector: Collector,
        readiness: Callable[[], tuple[bool, dict[str, Any]]],
    ) -> None:
        self.node_id = config.node_id
        self.readiness = readiness
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        security = listener_security(config)
        # /metrics only: the health checks stay open for probes.
        self.basic_auth = security[0].basic_auth if security else None
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health/live", self._live)
        app.router.add_get("/health/ready", self._ready)
        self.urls = [s.listener for s in security]
        self.servers = [
            HttpServer(app, s.listener.host, s.listener.port, s.ssl_context) for s in security
        ]

    async def start(self) -> list[int]:
        ports = [await server.start() for server in self.servers]
        for url, port in zip(self.urls, ports, strict=True):
            log.info("admin listener on %s (/metrics, /health)", url.url(port))
        return ports

    async def stop(self) -> None:
        for server in self.servers:
            await server.stop()

    async def _index(self, request: web.Request) -> web.Response:
        return web.Response(text="Strom admin listener: /metrics /health/live /health/ready\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.basic_auth is not None:
            status = self.basic_auth.check(request.headers.get("Authorization"))
            if status != 200:
                challenge = f'Basic realm="{self.basic_auth.realm}"'
                return web.Response(
                    text="Unauthorized\n" if status == 401 else "Forbidden\n",
                    status=status,
                    headers={"WWW-Authenticate": challenge} if status == 401 else None,
                )
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _live(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "live", "node_id": self.node_id})

    async def _ready(self, request: web.Request) -> web.Response:
        ready, checks = self.readiness()
        body = {"status": "ready" if ready else "not ready", "node_id": self.node_id}
        return web.Response(
            text=json.dumps({**body, "checks": checks}),
            status=200 if ready else 503,
            content_type="application/json",
        )
