"""Kafka Connect 4.x's REST API over the herder, with its paths, bodies, status codes and
error JSON ``{"error_code": N, "message": "..."}``.

- ``GET /`` (version, commit, kafka_cluster_id), ``GET /health``;
- ``GET /connectors`` (``?expand=status``, ``?expand=info``, both), ``POST /connectors``
  (``{"name", "config", "initial_state"}``: 201 and the connector's info);
- ``GET|DELETE /connectors/{name}`` (200, 204), ``GET|PUT|PATCH .../config`` (PUT: 201
  when created, else 200), ``GET .../status``, ``GET .../tasks``,
  ``GET .../tasks/{id}/status``;
- ``POST .../restart`` (204; with ``includeTasks`` or ``onlyFailed``, 202 and the status
  with what restarts shown RESTARTING), ``POST .../tasks/{id}/restart`` (204),
  ``PUT .../pause`` and ``.../resume`` (202), ``PUT .../stop`` (204);
- ``GET|PATCH|DELETE .../offsets`` (KIP-875; altering and resetting need the connector
  STOPPED, else 400 with Kafka's message);
- ``GET .../topics`` (``{"<name>": {"topics": [...]}}``) and ``PUT .../topics/reset``
  (202), KIP-558's active topics: 403 "Topic tracking is disabled." without
  ``topic.tracking.enable``, and a reset 403 "Topic tracking reset is disabled." without
  ``topic.tracking.allow.reset``;
- ``GET /connector-plugins`` (``?connectorsOnly=false`` adds the converters, transforms
  and predicates),
  ``GET /connector-plugins/{plugin}/config``,
  ``PUT /connector-plugins/{plugin}/config/validate`` (Kafka's ConfigInfos, every error);
- ``GET /admin/loggers``, ``GET|PUT /admin/loggers/{name}`` (log4j's level names mapped
  onto Python's logging; ``?scope=cluster`` sets this worker's level only, for now).

404 for an unknown connector, task, plugin or path, 405 for a wrong method, 409 for an
existing connector, 400 for bad JSON or a bad config (naming the key), never a
traceback. Config values given as JSON numbers or booleans are taken as their text, as
Kafka's Jackson does. A write that reaches a worker that is not the leader is forwarded
to the leader, as Kafka's workers do.

Does not own what the requests do (``herder``) or serving HTTP (``strom.services.http``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from strom.connect.api import strom_version
from strom.connect.connector_config import connector_def
from strom.connect.herder import Herder, HerderError, NotLeader
from strom.connect.plugins import Plugins
from strom.connect.stores import PAUSED, STARTED, STOPPED

log = logging.getLogger(__name__)
# The Kafka Connect REST API Strom serves; GET / says it as "version", Strom's own
# version as "commit".
KAFKA_CONNECT_VERSION = "4.0.0"
FORWARDED = "X-Strom-Connect-Forwarded"
REBALANCE_WAIT_S = 20.0  # how long a write waits for the group to have a leader again
INITIAL_STATES = {"RUNNING": STARTED, "PAUSED": PAUSED, "STOPPED": STOPPED}
LOG4J_LEVELS = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
HEALTHY = {
    "status": "healthy",
    "message": "Worker has completed startup and is ready to handle requests.",
}
STARTING = {"status": "starting", "message": "Worker is still starting up."}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error_code": status, "message": message}, status=status)


def _text(value: Any) -> str | None:
    """A config value as Kafka's Jackson reads it into a String."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        raise HerderError(400, "Configuration values must be strings, numbers or booleans")
    return str(value)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").strip().lower() == "true"


class ConnectRest:
    """The aiohttp application of one worker."""

    def __init__(
        self,
        plugins: Plugins,
        cluster_id: str | None,
        topic_tracking: bool = True,
        topic_tracking_reset: bool = True,
    ) -> None:
        self.plugins = plugins
        self.cluster_id = cluster_id
        self.topic_tracking = topic_tracking
        self.topic_tracking_reset = topic_tracking_reset
        self.herder: Herder | None = None  # set once the worker has started
        self.forwarding_tls: Any = None
        self.logger_changes: dict[str, int] = {}
        self.app = web.Application(middlewares=[self._errors])
        r = self.app.router
        r.add_get("/", self.root)
        r.add_get("/health", self.health)
        r.add_get("/connectors", self.list_connectors)
        r.add_post("/connectors", self.create_connector)
        r.add_get("/connectors/{name}", self.get_connector)
        r.add_delete("/connectors/{name}", self.delete_connector)
        r.add_get("/connectors/{name}/config", self.get_config)
        r.add_put("/connectors/{name}/config", self.put_config)
        r.add_patch("/connectors/{name}/config", self.patch_config)
        r.add_get("/connectors/{name}/status", self.get_status)
        r.add_get("/connectors/{name}/tasks", self.get_tasks)
        r.add_get("/connectors/{name}/tasks/{task}/status", self.get_task_status)
        r.add_post("/connectors/{name}/tasks/{task}/restart", self.restart_task)
        r.add_post("/connectors/{name}/restart", self.restart)
        r.add_put("/connectors/{name}/pause", self.pause)
        r.add_put("/connectors/{name}/resume", self.resume)
        r.add_put("/connectors/{name}/stop", self.stop)
        r.add_get("/connectors/{name}/offsets", self.get_offsets)
        r.add_patch("/connectors/{name}/offsets", self.alter_offsets)
        r.add_delete("/connectors/{name}/offsets", self.reset_offsets)
        r.add_get("/connectors/{name}/topics", self.get_topics)
        r.add_put("/connectors/{name}/topics/reset", self.reset_topics)
        r.add_get("/connector-plugins", self.list_plugins)
        r.add_get("/connector-plugins/{plugin}/config", self.plugin_config)
        r.add_put("/connector-plugins/{plugin}/config/validate", self.validate)
        r.add_get("/admin/loggers", self.list_loggers)
        r.add_get("/admin/loggers/{logger}", self.get_logger)
        r.add_put("/admin/loggers/{logger}", self.set_logger)

    # Plumbing.

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            try:
                return await handler(request)
            except NotLeader as exc:
                if exc.leader_url is not None or not await self._await_leader():
                    raise
                return await handler(request)  # a rebalance ended meanwhile: once more
        except NotLeader as exc:
            return await self._forward(request, exc)
        except HerderError as exc:
            return error(exc.status, exc.message)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error(exc.status, f"HTTP {exc.status} {exc.reason}")
        except Exception as exc:
            log.exception("REST request %s %s failed", request.method, request.path)
            return error(500, str(exc) or type(exc).__name__)

    async def _await_leader(self) -> bool:
        """Whether a leader became known within REBALANCE_WAIT_S (the group was between
        two plans: no worker leads while it rebalances)."""
        assert self.herder is not None
        membership = self.herder.membership
        wait = membership.wait_for_leader
        return (
            await asyncio.get_running_loop().run_in_executor(None, wait, REBALANCE_WAIT_S)
            is not None
        )

    async def _forward(self, request: web.Request, refused: NotLeader) -> web.Response:
        """The answer of the worker a request belongs to: the leader's to a write, the
        worker's that runs a task to that task's restart."""
        assert self.herder is not None
        membership = self.herder.membership
        leader = refused.leader_url or await asyncio.get_running_loop().run_in_executor(
            None, membership.leader_url
        )
        if request.headers.get(FORWARDED) or leader is None:
            return error(409, refused.message + ("" if leader else " and no leader is known"))
        try:
            async with aiohttp.ClientSession() as session:
                async with session.request(
                    request.method,
                    leader + request.path_qs,
                    data=await request.read(),
                    headers={"Content-Type": "application/json", FORWARDED: "1"},
                    timeout=aiohttp.ClientTimeout(total=90),
                    ssl=self.forwarding_tls or True,
                ) as answer:
                    return web.Response(
                        body=await answer.read(),
                        status=answer.status,
                        content_type="application/json",
                    )
        except (aiohttp.ClientError, TimeoutError) as exc:
            return error(
                409, f"Cannot complete request: forwarding to the leader {leader} failed: {exc}"
            )

    def _herder(self) -> Herder:
        if self.herder is None:
            raise HerderError(503, "Worker is still starting up.")
        return self.herder

    async def _on_herder(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` on the herder thread (where changes are made, one at a time)."""
        return await asyncio.wrap_future(self._herder().submit(call))

    async def _blocking(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` (a blocking read) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, call)

    @staticmethod
    async def _json(request: web.Request) -> Any:
        text = await request.text()
        try:
            return json.loads(text) if text.strip() else None
        except ValueError as exc:
            raise HerderError(400, f"Request body is not valid JSON: {exc}") from None

    async def _config_body(self, request: web.Request) -> dict[str, str]:
        body = await self._json(request)
        if not isinstance(body, dict):
            raise HerderError(400, "Request body must be a JSON object of connector settings")
        return self._config(body)

    @staticmethod
    def _config(body: dict[str, Any]) -> dict[str, str]:
        texts = {str(key): _text(value) for key, value in body.items()}
        nulls = sorted(key for key, value in texts.items() if value is None)
        if nulls:
            raise HerderError(
                400,
                f"Connector configuration is invalid and contains the following {len(nulls)} "
                "error(s):\n"
                + "\n".join(
                    f"{key}: Null value can not be supplied as the configuration value."
                    for key in nulls
                ),
            )
        return {key: value for key, value in texts.items() if value is not None}

    @staticmethod
    def _name_matches(name: str, config: dict[str, str]) -> None:
        included = config.get("name")
        if included is not None and included != name:
            raise HerderError(
                400,
                f"Connector name configuration ({included}) doesn't match connector name in "
                f"the URL ({name})",
            )
        config["name"] = name

    @staticmethod
    def _task(request: web.Request) -> int:
        text = request.match_info["task"]
        if not text.lstrip("-").isdigit():
            raise web.HTTPNotFound()
        return int(text)

    # Root.

    async def root(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "version": KAFKA_CONNECT_VERSION,
                "commit": f"strom-{strom_version()}",
                "kafka_cluster_id": self.cluster_id,
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        if self.herder is None:
            return web.json_response(STARTING, status=503)
        return web.json_response(HEALTHY)

    # Connectors.

    async def list_connectors(self, request: web.Request) -> web.Response:
        herder = self._herder()
        expansions = request.query.getall("expand", [])
        names = herder.connectors()
        if not expansions:
            return web.json_response(names)
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            expanded: dict[str, Any] = {}
            try:
                for expansion in expansions:
                    if expansion == "status":
                        expanded["status"] = herder.connector_status(name)
                    elif expansion == "info":
                        expanded["info"] = herder.connector_info(name)
            except HerderError:
                continue  # deleted meanwhile, or no status yet: left out, as Kafka does
            out[name] = expanded
        return web.json_response(out)

    async def create_connector(self, request: web.Request) -> web.Response:
        herder = self._herder()
        body = await self._json(request)
        if not isinstance(body, dict):
            raise HerderError(400, "Request body must be a JSON object with name and config")
        name = str(body.get("name") or "").strip()
        if not isinstance(body.get("config"), dict):
            raise HerderError(400, 'Connector config must be given as a JSON object: "config"')
        config = self._config(body["config"])
        self._name_matches(name, config)
        state = body.get("initial_state")
        if state is not None and str(state).upper() not in INITIAL_STATES:
            raise HerderError(
                400, f"Unknown initial state: {state} (expected RUNNING, PAUSED or STOPPED)"
            )
        initial = INITIAL_STATES[str(state).upper()] if state is not None else None
        _, info = await self._on_herder(
            lambda: herder.put_connector_config(name, config, initial, allow_replace=False)
        )
        return web.json_response(info, status=201, headers={"Location": f"/connectors/{name}"})

    async def get_connector(self, request: web.Request) -> web.Response:
        return web.json_response(self._herder().connector_info(request.match_info["name"]))

    async def delete_connector(self, request: web.Request) -> web.Response:
        herder = self._herder()
        name = request.match_info["name"]
        await self._on_herder(lambda: herder.delete_connector(name))
        return web.Response(status=204)

    async def get_config(self, request: web.Request) -> web.Response:
        return web.json_response(self._herder().connector_config(request.match_info["name"]))

    async def put_config(self, request: web.Request) -> web.Response:
        herder = self._herder()
        name = request.match_info["name"]
        config = await self._config_body(request)
        self._name_matches(name, config)
        created, info = await self._on_herder(
            lambda: herder.put_connector_config(name, config, None, allow_replace=True)
        )
        if created:
            return web.json_response(info, status=201, headers={"Location": f"/connectors/{name}"})
        return web.json_response(info)

    async def patch_config(self, request: web.Request) -> web.Response:
        herder = self._herder()
        name = request.match_info["name"]
        body = await self._json(request)
        if not isinstance(body, dict):
            raise HerderError(400, "Request body must be a JSON object of connector settings")
        patch = {str(key): _text(value) for key, value in body.items()}
        info = await self._on_herder(lambda: herder.patch_connector_config(name, patch))
        return web.json_response(info)

    async def get_status(self, request: web.Request) -> web.Response:
        return web.json_response(self._herder().connector_status(request.match_info["name"]))

    async def get_tasks(self, request: web.Request) -> web.Response:
        return web.json_response(self._herder().task_configs(request.match_info["name"]))

    async def get_task_status(self, request: web.Request) -> web.Response:
        task = self._task(request)
        return web.json_response(self._herder().task_status(request.match_info["name"], task))

    async def restart(self, request: web.Request) -> web.Response:
        herder = self._herder()
        name = request.match_info["name"]
        include_tasks, only_failed = _flag(request, "includeTasks"), _flag(request, "onlyFailed")
        if not include_tasks and not only_failed:
            await self._on_herder(lambda: herder.restart_connector(name))
            return web.Response(status=204)
        status = await self._on_herder(lambda: herder.restart(name, include_tasks, only_failed))
        return web.json_response(status, status=202)

    async def restart_task(self, request: web.Request) -> web.Response:
        herder = self._herder()
        name, task = request.match_info["name"], self._task(request)
        await self._on_herder(lambda: herder.restart_task(name, task))
        return web.Response(status=204)

    async def pause(self, request: web.Request) -> web.Response:
        return await self._target_state(request, Herder.pause, 202)

    async def resume(self, request: web.Request) -> web.Response:
        return await self._target_state(request, Herder.resume, 202)

    async def stop(self, request: web.Request) -> web.Response:
        return await self._target_state(request, Herder.stop_connector, 204)

    async def _target_state(
        self, request: web.Request, change: Callable[[Herder, str], None], status: int
    ) -> web.Response:
        herder = self._herder()
        name = request.match_info["name"]
        await self._on_herder(lambda: change(herder, name))
        return web.Response(status=status)

    # Offsets.

    async def get_offsets(self, request: web.Request) -> web.Response:
        herder = self._herder()
        name = request.match_info["name"]
        return web.json_response(await self._blocking(lambda: herder.connector_offsets(name)))

    async def alter_offsets(self, request: web.Request) -> web.Response:
        herder = self._herder()
        name = request.match_info["name"]
        body = await self._json(request)
        entries = body.get("offsets") if isinstance(body, dict) else None
        if not isinstance(entries, list) or not entries:
            raise HerderError(
                400, "Partitions / offsets need to be provided for an alter offsets request"
            )
        message = await self._on_herder(lambda: herder.alter_offsets(name, entries))
        return web.json_response(message)

    async def reset_offsets(self, request: web.Request) -> web.Response:
        herder = self._herder()
        name = request.match_info["name"]
        return web.json_response(await self._on_herder(lambda: herder.reset_offsets(name)))

    # Active topics (KIP-558).

    def _require_topic_tracking(self) -> None:
        if not self.topic_tracking:
            raise HerderError(403, "Topic tracking is disabled.")

    async def get_topics(self, request: web.Request) -> web.Response:
        self._require_topic_tracking()
        name = request.match_info["name"]
        return web.json_response(self._herder().connector_active_topics(name))

    async def reset_topics(self, request: web.Request) -> web.Response:
        self._require_topic_tracking()
        if not self.topic_tracking_reset:
            raise HerderError(403, "Topic tracking reset is disabled.")
        name = request.match_info["name"]
        herder = self._herder()
        await self._blocking(lambda: herder.reset_active_topics(name))
        return web.Response(status=202)

    # Plugins.

    async def list_plugins(self, request: web.Request) -> web.Response:
        connectors_only = request.query.get("connectorsOnly", "true").strip().lower() != "false"
        return web.json_response(self.plugins.listing(connectors_only))

    async def plugin_config(self, request: web.Request) -> web.Response:
        name = request.match_info["plugin"]
        kinds = ("source", "sink", "converter", "transformation", "predicate")
        plugin = self.plugins.find(name, kinds)
        if plugin is None:
            raise HerderError(404, f"Unknown plugin {name}.")
        keys = dict(plugin.config_def().keys)
        if plugin.kind in ("source", "sink"):
            for key_name, key in connector_def(plugin).keys.items():
                keys.setdefault(key_name, key)
        return web.json_response([key.info() for key in keys.values()])

    async def validate(self, request: web.Request) -> web.Response:
        herder = self._herder()
        plugin = request.match_info["plugin"]
        config = await self._config_body(request)
        included = config.get("connector.class")
        if included is not None and not _normalized(included).endswith(_normalized(plugin)):
            raise HerderError(
                400, f"Included connector type {included} does not match request type {plugin}"
            )
        return web.json_response(await self._blocking(lambda: herder.validate(config)))

    # Loggers.

    def _level(self, logger: logging.Logger) -> dict[str, Any]:
        level = logger.getEffectiveLevel()
        name = next((n for n, v in LOG4J_LEVELS.items() if v == level), logging.getLevelName(level))
        changed = self.logger_changes.get(logger.name if logger is not logging.root else "root")
        return {"level": name, "last_modified": changed}

    async def list_loggers(self, request: web.Request) -> web.Response:
        loggers: dict[str, Any] = {"root": self._level(logging.root)}
        for name, logger in sorted(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
                loggers[name] = self._level(logger)
        return web.json_response(loggers)

    async def get_logger(self, request: web.Request) -> web.Response:
        name = request.match_info["logger"]
        if name.lower() == "root":
            return web.json_response(self._level(logging.root))
        if name not in logging.root.manager.loggerDict:
            raise HerderError(404, f"Logger {name} not found.")
        return web.json_response(self._level(logging.getLogger(name)))

    async def set_logger(self, request: web.Request) -> web.Response:
        namespace = request.match_info["logger"]
        body = await self._json(request)
        level_name = body.get("level") if isinstance(body, dict) else None
        if level_name is None:
            raise HerderError(400, "Desired 'level' parameter was not specified in request.")
        level = LOG4J_LEVELS.get(str(level_name).upper())
        if level is None:
            raise HerderError(404, f"invalid log level '{level_name}'.")
        now = int(time.time() * 1000)
        if namespace.lower() == "root":
            targets = ["root"]
            logging.root.setLevel(level)
        else:
            targets = sorted(
                name
                for name in logging.root.manager.loggerDict
                if name == namespace or name.startswith(namespace + ".")
            ) or [namespace]
            for name in targets:
                logging.getLogger(name).setLevel(level)
        for name in targets:
            self.logger_changes[name] = now
        if request.query.get("scope", "worker").strip().lower() == "cluster":
            return web.Response(status=204)
        return web.json_response(targets)


def _normalized(plugin: str) -> str:
    """Kafka's plugin name for matching: a trailing ``Connector`` dropped."""
    suffix = "Connector"
    return (
        plugin[: -len(suffix)] if plugin.endswith(suffix) and len(plugin) > len(suffix) else plugin
    )
