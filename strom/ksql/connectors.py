"""ksqlDB 0.29's connector statements, run on a Kafka Connect cluster's REST API
(``ksql.connect.url``; Strom's ``strom connect-distributed`` / ``connect-standalone``
or Kafka's): CREATE SOURCE | SINK CONNECTOR [IF NOT EXISTS], DROP CONNECTOR [IF EXISTS],
DESCRIBE CONNECTOR, SHOW / LIST [SOURCE | SINK] CONNECTORS and SHOW / LIST CONNECTOR
PLUGINS.

Owns the calls to Connect (aiohttp; each statement's calls on an event loop of their own,
so that the engine's synchronous handlers can make them from their worker thread), as
ksqlDB's DefaultConnectClient makes them: up to three attempts while Connect answers a
5xx or 409 or cannot be reached, each attempt bounded by ``ksql.connect.request.timeout.ms``,
with the basic auth credentials of ``ksql.connect.basic.auth.credentials.file`` when set,
else with the ``Authorization`` header of the request being executed, forwarded
(``FORWARDED_AUTHORIZATION``, set by the server around its statements). And
ksqlDB's answers: the entities (``connector_info``, ``drop_connector``,
``connector_description``, ``connector_list``, ``connector_plugins_list``, a
``warning_entity`` for IF [NOT] EXISTS), the CREATE statement echoed with its values
masked, the config ksqlDB resolves for the JDBC source (its ``key`` property made into
the ValueToKey / ExtractField$Key transforms, one task unless told), and its errors:
Connect's own error answer passed on after ksqlDB's "Failed to ...: " with Connect's
status (``ConnectorError``), a config Connect finds invalid as ksqlDB's "Validation
error: ...".

Does not own parsing, the metastore, or Connect itself (``strom.connect``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import urllib.parse
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from strom.ksql import statements as st
from strom.ksql.config import KsqlServerConfig
from strom.ksql.metastore import DataSource, Metastore

T = TypeVar("T")
MAX_ATTEMPTS = 3
CONNECTOR_CLASS = "connector.class"
JDBC_SOURCE_CLASS = "io.confluent.connect.jdbc.JdbcSourceConnector"
_TRANSFORMS = "org.apache.kafka.connect.transforms."
BAD_REQUEST = 400


# The Authorization header of the /ksql request executing: ksqlDB forwards it to Connect
# when no credentials of its own are configured. Set by the server around a request; a
# context variable, so it reaches the engine's worker thread and no other request.
FORWARDED_AUTHORIZATION: ContextVar[str | None] = ContextVar(
    "forwarded_authorization", default=None
)


class ConnectorError(Exception):
    """A statement refused: the HTTP status and ksqlDB's ``generic_error`` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {
            "@type": "generic_error",
            "error_code": status * 100,
            "message": message,
        }


@dataclass(frozen=True)
class ConnectResponse:
    """One call's answer: the JSON of an expected status, else Connect's error text."""

    status: int
    datum: Any = None
    error: str | None = None


class ConnectClient:
    """The calls ksqlDB makes to Connect's REST API; each a coroutine."""

    def __init__(
        self,
        url: str,
        timeout_ms: int = 5_000,
        credentials_file: str | None = None,
        reload_credentials: bool = False,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout_ms / 1000, sock_read=timeout_ms / 1000
        )
        self.credentials_file = credentials_file
        self.reload_credentials = reload_credentials
        self._auth: tuple[float | None, str | None] | None = None  # (file's mtime, header)

    def authorization(self) -> str | None:
        """The ``Authorization`` header: basic auth from the credentials file (read once,
        or again after it changed when reloading; None when the file cannot be read or
        lacks a username or a password, as ksqlDB, which logs it); without a credentials
        file, the request's own header (``FORWARDED_AUTHORIZATION``) if it had one."""
        path = self.credentials_file
        if path is None:
            return FORWARDED_AUTHORIZATION.get()
        try:
            mtime: float | None = os.stat(path).st_mtime
        except OSError:
            mtime = None
        if self._auth is None or (self.reload_credentials and self._auth[0] != mtime):
            self._auth = (mtime, _basic_auth(path))
        return self._auth[1]

    async def call(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        expected: tuple[int, ...] = (200,),
        body: Any = None,
    ) -> ConnectResponse:
        """Up to three attempts while Connect answers a 5xx or a 409 or cannot be
        reached (2 then 4 ms apart); the last answer, or ``ConnectorError`` when none
        came."""
        headers = {"Accept": "application/json"}
        auth = self.authorization()
        if auth is not None:
            headers["Authorization"] = auth
        answer: ConnectResponse | None = None
        failure: Exception | None = None
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(2**attempt / 1000)
            try:
                answer = await self._once(session, method, path, expected, body, headers)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                failure = exc
                continue
            if answer.status < 500 and answer.status != 409:
                return answer
        if answer is not None:
            return answer
        raise ConnectorError(BAD_REQUEST, _unreachable(self.url, failure))

    async def _once(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        expected: tuple[int, ...],
        body: Any,
        headers: dict[str, str],
    ) -> ConnectResponse:
        async with session.request(
            method, self.url + path, json=body, headers=headers, timeout=self.timeout
        ) as response:
            text = await response.text()
            if response.status not in expected:
                return ConnectResponse(response.status, error=text)
            return ConnectResponse(response.status, json.loads(text) if text.strip() else None)

    def run(self, work: Callable[[aiohttp.ClientSession], Awaitable[T]]) -> T:
        """``work``'s result, its calls made on an event loop of this thread's own."""

        async def session_work() -> T:
            async with aiohttp.ClientSession() as session:
                return await work(session)

        return asyncio.run(session_work())


def _unreachable(url: str, failure: Exception | None) -> str:
    """Why Connect could not be reached, in one line: ``Connect to <url> failed:
    Connection refused`` (the system's words for the socket's error), ``timed out``..."""
    reason = str(failure) or type(failure).__name__
    if isinstance(failure, aiohttp.ClientConnectorError):
        error = failure.os_error
        if isinstance(error, socket.gaierror) or not error.errno:
            reason = error.strerror or str(error)
        else:
            reason = os.strerror(error.errno)
    elif isinstance(failure, TimeoutError):
        reason = "timed out"
    return f"Connect to {url} failed: {' '.join(reason.split())}"


def _basic_auth(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as source:
            text = source.read()
    except OSError:
        return None
    credentials: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, _, value = line.replace(":", "=", 1).partition("=")
        credentials[key.strip()] = value.strip()
    if "username" not in credentials or "password" not in credentials:
        return None
    user_info = f"{credentials['username']}:{credentials['password']}"
    return "Basic " + base64.b64encode(user_info.encode()).decode()


def resolve_config(config: dict[str, str]) -> dict[str, str]:
    """The config ksqlDB sends for a connector class it knows (the JDBC source): its
    ``key`` made into ValueToKey and ExtractField$Key transforms after any others, and
    ``tasks.max`` 1 unless given; any other class's config as written."""
    resolved = dict(config)
    if resolved.get(CONNECTOR_CLASS) != JDBC_SOURCE_CLASS:
        return resolved
    key = resolved.pop("key", None)
    if key is not None:
        ours = "ksqlCreateKey,ksqlExtractString"
        given = resolved.get("transforms")
        resolved["transforms"] = ours if given is None else f"{given},{ours}"
        resolved["transforms.ksqlCreateKey.type"] = _TRANSFORMS + "ValueToKey"
        resolved["transforms.ksqlCreateKey.fields"] = key
        resolved["transforms.ksqlExtractString.type"] = _TRANSFORMS + "ExtractField$Key"
        resolved["transforms.ksqlExtractString.field"] = key
    resolved.setdefault("tasks.max", "1")
    return resolved


def _path(name: str, *rest: str) -> str:
    return "/connectors/" + urllib.parse.quote(name, safe="") + "".join(rest)


def _failed(what: str, response: ConnectResponse) -> ConnectorError:
    return ConnectorError(response.status, f"Failed to {what}: {response.error}")


def _state(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """A connector's or task's state as ksqlDB reads and writes it: state and worker_id
    (its trace is read from ``msg``, which Connect does not send)."""
    if state is None:
        return None
    shown = {"state": state.get("state"), "worker_id": state.get("worker_id")}
    if state.get("msg"):
        shown["trace"] = state["msg"]
    return shown


def _status(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": status.get("name"),
        "connector": _state(status.get("connector")),
        "tasks": [{"id": t.get("id"), **(_state(t) or {})} for t in status.get("tasks") or []],
        "type": status.get("type"),
    }


def _summary(status: dict[str, Any]) -> str:
    """A connector's state as SHOW CONNECTORS gives it: RUNNING (n/m tasks RUNNING), or
    WARNING when it has tasks and none runs; else the connector's own state."""
    state = str((status.get("connector") or {}).get("state"))
    if state != "RUNNING":
        return state
    tasks = status.get("tasks") or []
    running = sum(1 for t in tasks if t.get("state") == "RUNNING")
    shown = "WARNING" if tasks and running == 0 else "RUNNING"
    return f"{shown} ({running}/{len(tasks)} tasks RUNNING)"


def _info(info: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": info.get("name"),
        "config": info.get("config") or {},
        "tasks": [
            {"connector": t.get("connector"), "task": t.get("task")}
            for t in info.get("tasks") or []
        ],
        "type": info.get("type"),
    }


class ConnectorStatements:
    """The connector statements' answers, from Connect and the metastore. Blocking:
    call from a worker thread, not an event loop."""

    def __init__(
        self,
        config: KsqlServerConfig,
        metastore: Metastore,
        describe_source: Callable[[DataSource], dict[str, Any]],
    ) -> None:
        self.client = ConnectClient(
            config.connect_url,
            config.connect_timeout_ms,
            config.connect_credentials_file,
            config.connect_credentials_reload,
        )
        self.metastore = metastore
        self.describe_source = describe_source

    def execute(self, statement: st.Statement, text: str) -> dict[str, Any]:
        """The entity of one connector statement; ``ConnectorError`` when refused."""
        if isinstance(statement, st.CreateConnector):
            return self.client.run(lambda s: self._create(s, statement))
        if isinstance(statement, st.DropConnector):
            return self.client.run(lambda s: self._drop(s, statement, text))
        if isinstance(statement, st.DescribeConnector):
            return self.client.run(lambda s: self._describe(s, statement, text))
        if isinstance(statement, st.ListConnectors):
            return self.client.run(lambda s: self._list(s, statement, text))
        if isinstance(statement, st.ListConnectorPlugins):
            return self.client.run(lambda s: self._plugins(s, text))
        raise TypeError(f"not a connector statement: {type(statement).__name__}")

    async def _exists(self, session: aiohttp.ClientSession, name: str) -> bool:
        """Whether Connect has a connector of that name, in any case."""
        listed = await self.client.call(session, "GET", "/connectors")
        if listed.error is not None:
            raise ConnectorError(
                BAD_REQUEST, f"Failed to check for existing connector: {listed.error}"
            )
        return name.lower() in (str(n).lower() for n in listed.datum or [])

    async def _create(
        self, session: aiohttp.ClientSession, statement: st.CreateConnector
    ) -> dict[str, Any]:
        """As ksqlDB: validated (a connector of that name, without IF NOT EXISTS, is
        refused first; then Connect's complaints about the config), then created, or the
        IF NOT EXISTS warning when the name is taken."""
        text = statement.masked_text + ";"
        exists = f"Connector {statement.name} already exists"
        if not statement.if_not_exists and await self._exists(session, statement.name):
            raise ConnectorError(409, exists)
        config = {**resolve_config(statement.config), "name": statement.name}
        errors = await self._validate(session, config)
        if errors:
            raise ConnectorError(BAD_REQUEST, "Validation error: " + "\n".join(errors))
        if statement.if_not_exists and await self._exists(session, statement.name):
            return {
                "@type": "warning_entity",
                "statementText": text,
                "message": exists,
                "warnings": [],
            }
        body = {"name": statement.name, "config": config}
        created = await self.client.call(session, "POST", "/connectors", (201,), body)
        if created.error is not None:
            raise _failed("create connector", created)
        return {
            "@type": "connector_info",
            "statementText": text,
            "info": _info(created.datum or {}),
            "warnings": [],
        }

    async def _validate(self, session: aiohttp.ClientSession, config: dict[str, str]) -> list[str]:
        """Connect's complaints about the config, one line each (``name - errors``)."""
        plugin = config.get(CONNECTOR_CLASS)
        if plugin is None:
            shown = ", ".join(f"{k}={v}" for k, v in config.items())
            return [f"Connector config {{{shown}}} contains no connector type"]
        if not plugin.strip():
            return ["Connector type cannot be empty"]
        path = "/connector-plugins/" + urllib.parse.quote(plugin, safe="") + "/config/validate"
        answer = await self.client.call(session, "PUT", path, body=config)
        if answer.error is not None:
            return [answer.error]
        complaints = []
        for info in (answer.datum or {}).get("configs") or []:
            value = info.get("value") or {}
            if value.get("errors"):
                complaints.append(f"{value.get('name')} - " + ". ".join(value["errors"]))
        return complaints

    async def _drop(
        self, session: aiohttp.ClientSession, statement: st.DropConnector, text: str
    ) -> dict[str, Any]:
        path = _path(statement.name)
        answer = await self.client.call(session, "DELETE", path, (204, 200))
        if answer.error is not None:
            if statement.if_exists and answer.status == 404:
                return {
                    "@type": "warning_entity",
                    "statementText": text,
                    "message": f"Connector '{statement.name}' does not exist.",
                    "warnings": [],
                }
            raise _failed("drop connector", answer)
        return {
            "@type": "drop_connector",
            "statementText": text,
            "connectorName": statement.name,
            "warnings": [],
        }

    async def _describe(
        self, session: aiohttp.ClientSession, statement: st.DescribeConnector, text: str
    ) -> dict[str, Any]:
        name = statement.name
        status = await self.client.call(session, "GET", _path(name, "/status"))
        if status.error is not None:
            raise _failed("query connector status", status)
        info = await self.client.call(session, "GET", _path(name))
        if info.error is not None:
            raise _failed("describe connector", info)
        config = (info.datum or {}).get("config") or {}
        topics: list[str] = []
        warnings: list[dict[str, str]] = []
        sources: list[dict[str, Any]] = []
        # as ksqlDB: the topics and their streams and tables only of a class it knows
        if config.get(CONNECTOR_CLASS) == JDBC_SOURCE_CLASS:
            active = await self.client.call(session, "GET", _path(name, "/topics"))
            if active.error is None:
                topics = list(((active.datum or {}).get(name) or {}).get("topics") or [])
            elif active.status != 404:  # an older Connect has no /topics: no warning
                warnings.append(
                    {"message": f"Could not list related topics due to error: {active.error}"}
                )
            sources = [
                self.describe_source(source)
                for source in self.metastore.sources.values()
                if source.topic in topics
            ]
        return {
            "@type": "connector_description",
            "statementText": text,
            "connectorClass": config.get(CONNECTOR_CLASS),
            "status": _status(status.datum or {}),
            "sources": sources,
            "topics": topics,
            "warnings": warnings,
        }

    async def _list(
        self, session: aiohttp.ClientSession, statement: st.ListConnectors, text: str
    ) -> dict[str, Any]:
        listed = await self.client.call(session, "GET", "/connectors")
        if listed.error is not None:
            raise _failed("list connectors", listed)
        connectors: list[dict[str, Any]] = []
        warnings: list[dict[str, str]] = []
        for name in listed.datum or []:
            info = await self.client.call(session, "GET", _path(name))
            if info.error is not None:
                if statement.scope == "ALL":
                    connectors.append({"name": name, "type": "unknown"})
                warnings.append({"message": f"Could not describe connector {name}: {info.error}"})
                continue
            described = info.datum or {}
            kind = described.get("type")
            kind = None if kind is None else str(kind).lower()
            if statement.scope != "ALL" and kind != statement.scope.lower():
                continue
            status = await self.client.call(session, "GET", _path(name, "/status"))
            entry: dict[str, Any] = {"name": name}
            if status.error is None:
                entry["type"] = kind
                entry["className"] = (described.get("config") or {}).get(CONNECTOR_CLASS)
                entry["state"] = _summary(status.datum or {})
            connectors.append({k: v for k, v in entry.items() if v is not None})
        return {
            "@type": "connector_list",
            "statementText": text,
            "connectors": connectors,
            "warnings": warnings,
        }

    async def _plugins(self, session: aiohttp.ClientSession, text: str) -> dict[str, Any]:
        plugins = await self.client.call(session, "GET", "/connector-plugins")
        if plugins.error is not None:
            raise _failed("list connector plugins", plugins)
        listed = []
        for plugin in plugins.datum or []:
            shown = {
                "className": plugin.get("class", plugin.get("className")),
                "type": plugin.get("type"),
                "version": plugin.get("version"),
            }
            listed.append({k: v for k, v in shown.items() if v is not None})
        return {
            "@type": "connector_plugins_list",
            "statementText": text,
            "connectorsPlugins": listed,
            "warnings": [],
        }
