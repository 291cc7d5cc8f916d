"""ksqlDB 0.29's REST API on the project's HTTP stack (aiohttp, ``strom.services.http``):

- ``GET /info``: ``{"KsqlServerInfo": {version, kafkaClusterId, ksqlServiceId,
  serverStatus}}`` (``GET /`` redirects there); ``GET /chc/ready`` and ``/chc/live``:
  ``{}``;
- ``GET /healthcheck``: ``{"isHealthy", "details": {metastore, kafka, commandRunner}}``
  (kafka: the cluster answered a metadata request now);
- ``GET /status`` and ``GET /status/{type}/{entity}/{action}``: the command statuses;
- ``POST /ksql``: ``{"ksql", "streamsProperties", "sessionVariables"}`` executed by
  ``strom.ksql.engine`` (on a worker thread; the engine runs one at a time), answered with the
  list of entities or ksqlDB's error body;
- ``POST /query``: PRINT (``strom.ksql.print_topic``), the records as chunked text
  lines until LIMIT or the client leaves; push queries (there and on ``POST
  /query-stream``) streamed as their rows come (``strom.ksql.push_queries``, on a worker
  thread; the query ends at LIMIT, when the client goes, or at ``POST /close-query``),
  pull queries answered at once, in the shapes of ``_RowWriter``;
- ``POST /inserts-stream``: rows streamed into a stream or table, each acknowledged as
  it is written (``strom.ksql.inserts``);
- ``GET /ws/query``: the websocket query endpoint (SELECT and PRINT), in the messages
  and close codes of ksqlDB's;
- ``GET /v1/metadata``, ``/v1/metadata/id`` (``ServerMetadata``, ``ServerClusterId``)
  and ``GET /is_valid_property/{property}`` (the request properties' denylist);
- ``GET /clusterStatus`` and ``POST /heartbeat`` with ``ksql.heartbeat.enable``, from
  the service id's query group (``strom.ksql.ownership``); without it, and ``POST
  /lag`` always, 404 without a body, as ksqlDB's without heartbeats and lag reporting.

HTTP/1.1 and HTTP/2 (cleartext with prior knowledge, or TLS with ALPN ``h2``) are served on
the one listener, as ksqlDB serves them (``strom.services.http2``).

Responses are ``application/vnd.ksql.v1+json`` when the client accepts it, else
``application/json``. A body that is not JSON is ksqlDB's ``generic_error`` 40000; an
unexpected failure is a 500 ``generic_error`` 50000 (logged), never a traceback to the
client.

Does not own statements, the metastore or the listener's security
(``strom.services.http_security``).
"""

from __future__ import annotations

import asyncio
import base64
import decimal
import json
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from strom.ksql import expressions as ex
from strom.ksql.connectors import FORWARDED_AUTHORIZATION
from strom.ksql.engine import (
    ERROR_BAD_STATEMENT,
    ERROR_SERVER,
    KsqlEngine,
    KsqlRequestError,
    statement_error,
)
from strom.ksql.inserts import insertable, json_values
from strom.ksql.metastore import KsqlStatementError
from strom.ksql.ownership import slot_of
from strom.ksql.parser import KsqlSyntaxError, parse_statement, split_statements
from strom.ksql.planner import QueryPlan
from strom.ksql.print_topic import print_records
from strom.ksql.push_queries import TombstoneRow
from strom.ksql.statements import PrintTopic, Query
from strom.ksql.values import format_date, format_time, format_timestamp
from strom.services.http import SERVES_HTTP2

log = logging.getLogger(__name__)
KSQL_VERSION = "0.29.0"
KSQL_MEDIA_TYPE = "application/vnd.ksql.v1+json"
DELIMITED_MEDIA_TYPE = "application/vnd.ksqlapi.delimited.v1"
ERROR_BAD_REQUEST = 40000
ERROR_NOT_FOUND = 40400
HEARTBEAT_ENABLE = "ksql.heartbeat.enable"
OVERRIDES_DENYLIST = "ksql.properties.overrides.denylist"
# the websocket close codes ksqlDB's /ws/query ends with
WS_NORMAL_CLOSURE = 1000
WS_INVALID_MESSAGE_TYPE = 1003  # a request or statement refused
WS_INTERNAL_ERROR = 1011  # the query failed while it ran
WS_REASON_BYTES = 123  # the longest close reason a frame carries
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _generic_error(code: int, message: str) -> dict[str, Any]:
    return {"@type": "generic_error", "error_code": code, "message": message}


class KsqlServerApp:
    """The aiohttp application of one ksql server."""

    def __init__(self, engine: KsqlEngine) -> None:
        self.engine = engine
        self.app = web.Application(middlewares=[self._errors])
        self.app[SERVES_HTTP2] = True  # as ksqlDB: HTTP/1.1 and HTTP/2 on the one listener
        self.app.add_routes(
            [
                web.get("/", self.root),
                web.get("/chc/ready", self.container_health),
                web.get("/chc/live", self.container_health),
                web.get("/info", self.info),
                web.get("/healthcheck", self.healthcheck),
                web.get("/status", self.statuses),
                web.get("/status/{type}/{entity}/{action}", self.status),
                web.post("/ksql", self.ksql),
                web.post("/query", self.query),
                web.post("/query-stream", self.query),
                web.post("/close-query", self.close_query),
                web.post("/inserts-stream", self.inserts_stream),
                web.get("/ws/query", self.ws_query),
                web.get("/v1/metadata", self.server_metadata),
                web.get("/v1/metadata/id", self.server_cluster_id),
                web.get("/is_valid_property/{property}", self.is_valid_property),
                web.get("/clusterStatus", self.cluster_status),
                web.post("/heartbeat", self.heartbeat),
                web.post("/lag", self.lag),
            ]
        )

    @staticmethod
    def _content_type(request: web.Request) -> str:
        accept = request.headers.get("Accept", "")
        return KSQL_MEDIA_TYPE if KSQL_MEDIA_TYPE in accept else "application/json"

    def _reply(self, request: web.Request, body: Any, status: int = 200) -> web.Response:
        return web.Response(
            status=status,
            text=json.dumps(body),
            content_type=self._content_type(request),
            charset="utf-8",
        )

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status == 404:
                return self._reply(request, _generic_error(ERROR_NOT_FOUND, exc.reason), 404)
            if exc.status == 405:
                return self._reply(request, _generic_error(40500, exc.reason), 405)
            raise
        except Exception:
            log.exception("request %s %s failed", request.method, request.path)
            return self._reply(request, _generic_error(ERROR_SERVER, "Internal server error"), 500)

    async def root(self, request: web.Request) -> web.Response:
        """As ksqlDB's: a temporary redirect to ``/info``."""
        return web.Response(status=307, headers={"Location": "/info"})

    async def container_health(self, request: web.Request) -> web.Response:
        """ksqlDB's container health checks (``/chc/ready``, ``/chc/live``): ``{}``."""
        return web.Response(text="{}", content_type="application/json")

    async def info(self, request: web.Request) -> web.Response:
        return self._reply(
            request,
            {
                "KsqlServerInfo": {
                    "version": KSQL_VERSION,
                    "kafkaClusterId": self.engine.cluster_id,
                    "ksqlServiceId": self.engine.config.service_id,
                    "serverStatus": "RUNNING",
                }
            },
        )

    async def healthcheck(self, request: web.Request) -> web.Response:
        def kafka_answers() -> bool:
            try:
                self.engine.admin.list_topics(timeout=5)
            except Exception:
                return False
            return True

        kafka = await asyncio.to_thread(kafka_answers)
        details = {
            "metastore": {"isHealthy": True},
            "kafka": {"isHealthy": kafka},
            "commandRunner": {"isHealthy": True},
        }
        return self._reply(request, {"isHealthy": kafka, "details": details}, 200 if kafka else 503)

    async def server_metadata(self, request: web.Request) -> web.Response:
        """ksqlDB's ``ServerMetadata``: the version and the cluster ids."""
        return self._reply(request, {"version": KSQL_VERSION, "clusterId": self._cluster_id()})

    async def server_cluster_id(self, request: web.Request) -> web.Response:
        return self._reply(request, self._cluster_id())

    def _cluster_id(self) -> dict[str, Any]:
        """ksqlDB's ``ServerClusterId``: an empty id, the Kafka cluster's and the service's."""
        clusters = {
            "kafka-cluster": self.engine.cluster_id,
            "ksql-cluster": self.engine.config.service_id,
        }
        return {"id": "", "scope": {"path": [], "clusters": clusters}}

    async def is_valid_property(self, request: web.Request) -> web.Response:
        """``true``, or ksqlDB's refusal of a property a request may not set."""
        refused = self._denied_overrides([request.match_info["property"]])
        if refused is not None:
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, refused), 400)
        return self._reply(request, True)

    def _denied_overrides(self, names: Sequence[str]) -> str | None:
        """ksqlDB's refusal of request properties among ``ksql.properties.overrides.denylist``
        and ``ksql.service.id`` (in the list's order), None when there are none."""
        listed = self.engine.config.properties.get(OVERRIDES_DENYLIST, "").split(",")
        denylist = dict.fromkeys([*(n.strip() for n in listed if n.strip()), "ksql.service.id"])
        denied = [name for name in denylist if name in names]
        if not denied:
            return None
        return (
            "One or more properties overrides set locally are prohibited by the KSQL server "
            f"(use UNSET to reset their default value): [{', '.join(denied)}]"
        )

    def _enabled(self, name: str) -> bool:
        return self.engine.config.properties.get(name, "false").strip().lower() == "true"

    async def cluster_status(self, request: web.Request) -> web.Response:
        """With ``ksql.heartbeat.enable`` (default false; without it ksqlDB answers 404
        with no body), ksqlDB's ``ClusterStatusResponse`` from the service id's query
        group (``strom.ksql.ownership``): its members are the servers alive, each with
        the persistent queries of its slots and their source partitions; no state store
        names or lags (Spark's state is not Kafka Streams' stores, nor is lag reported)."""
        if not self._enabled(HEARTBEAT_ENABLE):
            return web.Response(status=404, content_type="application/json")
        status = await asyncio.to_thread(self._cluster_status)
        return self._reply(request, {"clusterStatus": status})

    def _cluster_status(self) -> dict[str, Any]:
        engine = self.engine
        owners = engine.ownership.owners() if engine.ownership is not None else {}
        hosts: dict[str, dict[str, Any]] = {engine.queries.host: {}}
        for url in sorted(set(owners.values())):
            hosts.setdefault(url, {})
        running = sorted(engine.queries.queries.values(), key=lambda q: q.query_id)
        partitions: dict[str, list[int]] = {}
        for query in running:
            owner = owners.get(slot_of(query.query_id))
            if query.query_type != "PERSISTENT" or owner is None:
                continue
            active = []
            for topic in dict.fromkeys(s.topic for s in query.plan.sources):
                if topic not in partitions:
                    try:
                        partitions[topic] = engine.partitions(topic)
                    except Exception as exc:  # a source's topic gone: its partitions unknown
                        log.warning("cluster status: partitions of %s: %s", topic, exc)
                        partitions[topic] = []
                active += [{"topic": topic, "partition": p} for p in partitions[topic]]
            hosts[owner][query.query_id] = {
                "activeStores": [],
                "activePartitions": active,
                "standByStores": [],
                "standByPartitions": [],
            }
        now = int(time.time() * 1000)
        return {
            _host_and_port(url): {
                "hostAlive": True,
                "lastStatusUpdateMs": now,
                "activeStandbyPerQuery": queries,
                "hostStoreLags": {"stateStoreLags": {}, "updateTimeMs": 0},
            }
            for url, queries in hosts.items()
        }

    async def heartbeat(self, request: web.Request) -> web.Response:
        """With ``ksql.heartbeat.enable``, ksqlDB's ``{"isOk": true}`` for a heartbeat
        message (``{"hostInfo", "timestamp"}``); whether a server is alive is its
        membership of the query group. Without it, 404 with no body, as ksqlDB's."""
        if not self._enabled(HEARTBEAT_ENABLE):
            return web.Response(status=404, content_type="application/json")
        try:
            body = await self._body(request)
        except _BadRequest as exc:
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, str(exc)), 400)
        if not isinstance(body.get("hostInfo"), str | dict) or not isinstance(
            body.get("timestamp"), int
        ):
            message = "A heartbeat has a hostInfo and a timestamp"
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, message), 400)
        return self._reply(request, {"isOk": True})

    async def lag(self, request: web.Request) -> web.Response:
        """ksqlDB answers 404 with no body without its lag reporting agent
        (``ksql.lag.reporting.enable``, default false); Strom has none."""
        return web.Response(status=404, content_type="application/json")

    async def statuses(self, request: web.Request) -> web.Response:
        statuses = {cid: s["status"] for cid, s in self.engine.statuses.items()}
        return self._reply(request, {"commandStatuses": statuses})

    async def status(self, request: web.Request) -> web.Response:
        info = request.match_info
        command_id = f"{info['type'].lower()}/{info['entity']}/{info['action'].lower()}"
        found = self.engine.status(command_id)
        if found is None:
            return self._reply(request, _generic_error(ERROR_NOT_FOUND, "Command not found"), 404)
        return self._reply(request, found)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError as exc:
            raise _BadRequest(f"Error parsing request body: {exc}") from None
        if not isinstance(body, dict):
            raise _BadRequest("The request body must be a JSON object")
        return body

    async def ksql(self, request: web.Request) -> web.Response:
        try:
            body = await self._body(request)
        except _BadRequest as exc:
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, str(exc)), 400)
        text = body.get("ksql")
        if not isinstance(text, str):
            return self._reply(
                request, _generic_error(ERROR_BAD_REQUEST, '"ksql" field must be populated'), 400
            )
        properties = body.get("streamsProperties") or {}
        variables = body.get("sessionVariables") or {}
        if not isinstance(properties, dict) or not isinstance(variables, dict):
            return self._reply(
                request,
                _generic_error(
                    ERROR_BAD_REQUEST, "streamsProperties and sessionVariables must be objects"
                ),
                400,
            )
        refused = self._denied_overrides(list(properties))
        if refused is not None:
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, refused), 400)
        # the request's credentials go on to Connect with the connector statements
        forwarded = FORWARDED_AUTHORIZATION.set(request.headers.get("Authorization"))
        try:
            entities = await asyncio.to_thread(self.engine.execute, text, properties, variables)
        except KsqlRequestError as exc:
            return self._reply(request, exc.body, exc.status)
        finally:
            FORWARDED_AUTHORIZATION.reset(forwarded)
        return self._reply(request, entities)

    async def query(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._body(request)
        except _BadRequest as exc:
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, str(exc)), 400)
        text = str(body.get("sql") or body.get("ksql") or "")
        pieces = split_statements(text)
        if len(pieces) != 1:
            message = f"Expected exactly one statement, got {len(pieces)}"
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, message), 400)
        statement_text = pieces[0] + ";"
        try:
            statement = parse_statement(pieces[0])
        except KsqlSyntaxError as exc:
            return self._reply(request, statement_error(str(exc), statement_text, []), 400)
        overrides = body.get("streamsProperties")
        if request.path == "/query" and isinstance(overrides, dict):  # not /query-stream's
            refused = self._denied_overrides(list(overrides))
            if refused is not None:
                return self._reply(request, _generic_error(ERROR_BAD_REQUEST, refused), 400)
        if isinstance(statement, PrintTopic) and request.path == "/query":
            return await self._print(request, statement)
        if not isinstance(statement, Query):
            message = (
                "The following statement types should be issued to the websocket endpoint "
                "'/query' or '/query-stream':\n\t* PRINT\n\t* SELECT"
            )
            return self._reply(request, statement_error(message, statement_text, []), 400)
        properties = body.get("properties") or body.get("streamsProperties") or {}
        if not isinstance(properties, dict):
            properties = {}
        try:
            plan, rows, push, partitions = await self._start_query(
                statement, statement_text, properties
            )
        except KsqlStatementError as exc:
            return self._reply(request, statement_error(str(exc), statement_text, []), 400)
        names = [p.name for p in plan.projection]
        types = [p.type for p in plan.projection]
        query_id = push.query_id if push is not None else f"query_{uuid.uuid4().int % 10**13}"
        keys = pull_key_columns(plan, statement.is_pull)
        accept = request.headers.get("Accept", "")
        writer = _RowWriter(request.path, accept, query_id, names, types, keys)
        response = web.StreamResponse(headers={"Content-Type": writer.content_type})
        response.enable_chunked_encoding()
        await response.prepare(request)
        # ksqlDB's pull query on a table ends its /query answer without a final message
        bare = push is None and writer.old and plan.source.kind == "TABLE"
        await response.write(writer.header(closing=bare and not rows))
        if push is None:
            for index, row in enumerate(rows):
                await response.write(writer.row(row, closing=bare and index == len(rows) - 1))
            final = pull_final_message(plan, len(rows))
            await response.write(writer.close() if bare else writer.end(final))
            await response.write_eof()
            return response
        await self._stream_push(request, response, writer, push, partitions)
        return response

    async def _stream_push(
        self,
        request: web.Request,
        response: web.StreamResponse,
        writer: _RowWriter,
        push: Any,
        partitions: list[int],
    ) -> None:
        """A push query's rows as they come, until LIMIT, TERMINATE or the client goes."""
        loop = asyncio.get_running_loop()
        rows: asyncio.Queue[list[Any] | None] = asyncio.Queue()
        outcome: dict[str, Any] = {}

        def emit(row: list[Any]) -> None:
            loop.call_soon_threadsafe(rows.put_nowait, row)

        def run() -> None:
            try:
                outcome["limit"] = push.run(emit, partitions)
            except Exception as exc:  # the cluster failed mid-way: the client is told
                log.warning("push query %s failed: %s", push.query_id, exc)
                outcome["error"] = str(exc)
            finally:
                loop.call_soon_threadsafe(rows.put_nowait, None)

        runner = loop.run_in_executor(None, run)
        client_left = False
        try:
            while True:
                try:
                    row = await asyncio.wait_for(rows.get(), 1.0)
                except TimeoutError:
                    transport = request.transport
                    if transport is None or transport.is_closing():
                        client_left = True
                        break
                    continue
                if row is None:
                    break
                written = writer.row(row)
                if written:  # b"" (a dropped tombstone) would end a chunked answer
                    await response.write(written)
        except ConnectionResetError:
            client_left = True  # returned, the answer is ended quietly (raised, a traceback)
        finally:
            push.stopped.set()
            await runner
            # gone from the list of queries before the client sees the end of its answer
            self.engine.end_transient(push.query_id)
        if client_left:
            return
        final = "Limit Reached" if outcome.get("limit") else outcome.get("error")
        try:
            await response.write(writer.end(final))
            await response.write_eof()
        except ConnectionResetError:
            pass

    async def ws_query(self, request: web.Request) -> web.StreamResponse:
        """ksqlDB's websocket query endpoint: the ``request`` parameter's JSON ``{"ksql",
        "streamsProperties"}`` (and an optional ``version``, 1). A query's schema goes
        first (a list of ``FieldInfo``), then each row as ``{"row": {"columns"}}``; PRINT
        sends each record's line as a JSON string. The end of a pull query, a push
        query's LIMIT or TERMINATE, and PRINT's LIMIT send ``{"error": "done"}`` and close
        (1000, ``done``); a refused request or statement closes with 1003, a query that
        fails while it runs with 1011, after ``{"error": message}`` (the close reason
        being the message, cut to 123 bytes). The client closing ends the query."""
        ws = web.WebSocketResponse()
        if not ws.can_prepare(request).ok:
            message = "/ws/query takes a websocket upgrade request"
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, message), 400)
        await ws.prepare(request)
        try:
            statement, statement_text, properties = self._ws_request(request.query)
        except _BadRequest as exc:
            await _ws_close(ws, WS_INVALID_MESSAGE_TYPE, str(exc))
            return ws
        if isinstance(statement, PrintTopic):
            await self._ws_print(ws, statement)
        elif isinstance(statement, Query):
            await self._ws_select(ws, statement, statement_text, properties)
        else:
            message = f"Unexpected statement type {statement_text}"
            await _ws_close(ws, WS_INVALID_MESSAGE_TYPE, message)
        return ws

    def _ws_request(self, params: Any) -> tuple[Any, str, dict[str, Any]]:
        """The statement of a /ws/query request, its text and its properties, or
        ``_BadRequest`` with ksqlDB's words."""
        version = params.get("version")
        if version is not None and not (version.isdigit() and int(version) == 1):
            raise _BadRequest(f"Received invalid api version: {version}")
        raw = params.get("request")
        if not raw:
            raise _BadRequest("Error parsing request: missing request parameter")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise _BadRequest(f"Error parsing request: {exc}") from None
        if not isinstance(body, dict):
            raise _BadRequest("Error parsing request: the request must be a JSON object")
        text = body.get("ksql")
        if not isinstance(text, str) or not text:
            raise _BadRequest('Error parsing request: "ksql" field of "request" must be populated')
        properties = body.get("streamsProperties") or {}
        if not isinstance(properties, dict):
            raise _BadRequest("Error parsing request: streamsProperties must be an object")
        refused = self._denied_overrides(list(properties))
        if refused is not None:
            raise _BadRequest(f"Error parsing request: {refused}")
        pieces = split_statements(text)
        if len(pieces) != 1:
            raise _BadRequest(
                "Error parsing query: Expected exactly one KSQL statement; "
                f"found {len(pieces)} instead"
            )
        try:
            statement = parse_statement(pieces[0])
        except KsqlSyntaxError as exc:
            raise _BadRequest(f"Error parsing query: {exc}") from None
        return statement, pieces[0] + ";", properties

    async def _start_query(
        self, statement: Query, statement_text: str, properties: dict[str, Any]
    ) -> tuple[Any, Any, Any, Any]:
        """A SELECT's plan and, for a pull query, its rows, or, for a push query, the
        running query with its start fixed (the ends of the partitions it reads, taken
        before the caller writes its header: a record written after that is read) and
        those partitions."""
        plan = await asyncio.to_thread(self.engine.transient_plan, statement, statement_text)
        if statement.is_pull:
            rows = await asyncio.to_thread(self.engine.pull_query, plan, properties)
            return plan, rows, None, None
        partitions = await asyncio.to_thread(self.engine.partitions, plan.source.topic)
        push = await asyncio.to_thread(self.engine.push_query, plan, statement_text, properties)
        try:
            await asyncio.to_thread(push.take_position, partitions)
        except BaseException:
            self.engine.end_transient(push.query_id)
            raise
        return plan, None, push, partitions

    async def _ws_select(
        self,
        ws: web.WebSocketResponse,
        statement: Query,
        statement_text: str,
        properties: dict[str, Any],
    ) -> None:
        try:
            plan, rows, push, partitions = await self._start_query(
                statement, statement_text, properties
            )
        except KsqlStatementError as exc:
            await _ws_close(ws, WS_INVALID_MESSAGE_TYPE, str(exc))
            return
        except Exception as exc:  # the cluster failed: refused as ksqlDB refuses any error
            log.warning("websocket query %s failed: %s", statement_text, exc)
            await _ws_close(ws, WS_INVALID_MESSAGE_TYPE, str(exc) or type(exc).__name__)
            return
        sql_types = [p.type for p in plan.projection]
        keys: set[str] = set()
        if statement.is_pull and plan.source.kind == "TABLE":  # a pull query's marks them
            keys = {c.name for c in plan.source.columns if c.namespace == "KEY"}
            if plan.source.window_type is not None:
                keys |= {"WINDOWSTART", "WINDOWEND"}
        schema = []
        for column in plan.projection:
            field_info: dict[str, Any] = {"name": column.name, "schema": column.type.schema_json()}
            expression = column.expression
            if isinstance(expression, ex.ColumnReference) and expression.name in keys:
                field_info["type"] = "KEY"
            schema.append(field_info)

        def row_message(values: list[Any]) -> str:
            columns = [rest_json_value(v, t) for v, t in zip(values, sql_types, strict=False)]
            return _ws_json({"row": {"columns": columns}})

        try:
            await ws.send_str(_ws_json(schema))
        except ConnectionResetError:
            if push is not None:
                self.engine.end_transient(push.query_id)
            return
        if push is None:

            def send_rows(emit: Callable[[str], None]) -> None:
                for row in rows:
                    emit(row_message(row))

            await _ws_pump(ws, send_rows, lambda: None)
            return
        try:
            await _ws_pump(
                ws,
                lambda emit: push.run(
                    lambda row: None if isinstance(row, TombstoneRow) else emit(row_message(row)),
                    partitions,
                ),
                push.stopped.set,
            )
        finally:
            self.engine.end_transient(push.query_id)

    async def _ws_print(self, ws: web.WebSocketResponse, statement: PrintTopic) -> None:
        try:
            metadata = await asyncio.to_thread(self.engine.admin.list_topics, timeout=30)
        except Exception as exc:  # the cluster failed: refused as ksqlDB refuses any error
            log.warning("websocket PRINT %s failed: %s", statement.topic, exc)
            await _ws_close(ws, WS_INVALID_MESSAGE_TYPE, str(exc) or type(exc).__name__)
            return
        topic = metadata.topics.get(statement.topic)
        if topic is None or topic.error is not None:
            message = (
                "Topic does not exist, or KSQL does not have permission to list the topic: "
                + statement.topic
            )
            await _ws_close(ws, WS_INVALID_MESSAGE_TYPE, message)
            return
        stopped = threading.Event()
        registry = self.engine.registry if self.engine.config.schema_registry_url else None

        def print_lines(emit: Callable[[str], None]) -> None:
            failures: list[str] = []
            print_records(
                self.engine.config.client_config(),
                statement,
                sorted(topic.partitions),
                lambda line: emit(_ws_json(line)) if line else None,
                stopped,
                registry,
                format_lines=False,
                failed=failures.append,
            )
            if failures:
                raise _QueryFailed(failures[0])

        await _ws_pump(ws, print_lines, stopped.set)

    async def close_query(self, request: web.Request) -> web.Response:
        """``{"queryId": ...}``: the push query ends."""
        try:
            body = await self._body(request)
        except _BadRequest as exc:
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, str(exc)), 400)
        query_id = str(body.get("queryId") or "")
        found = self.engine.queries.queries.get(query_id)
        if found is None or found.stop is None:
            message = f"No query with id {query_id}"
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, message), 400)
        found.stop()
        return self._reply(request, {})

    async def _print(self, request: web.Request, statement: PrintTopic) -> web.StreamResponse:
        """PRINT: the topic's records as lines, until LIMIT or the client leaves."""
        admin = self.engine.admin
        metadata = await asyncio.to_thread(admin.list_topics, timeout=30)
        topic = metadata.topics.get(statement.topic)
        if topic is None or topic.error is not None:
            alternatives = sorted(
                n for n in metadata.topics if n.lower() == statement.topic.lower()
            )
            suggestion = "".join(f"\n\tprint {name};" for name in alternatives)
            message = (
                f"Could not find topic '{statement.topic}', or the KSQL user does not have "
                "permissions to list the topic. Topic names are case-sensitive."
                + (f"\nDid you mean:{suggestion}" if suggestion else "")
            )
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, message), 400)
        response = web.StreamResponse(headers={"Content-Type": self._content_type(request)})
        response.enable_chunked_encoding()
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        stopped = threading.Event()

        def emit(line: str) -> None:
            loop.call_soon_threadsafe(lines.put_nowait, line)

        def run() -> None:
            try:
                print_records(
                    self.engine.config.client_config(),
                    statement,
                    sorted(topic.partitions),
                    emit,
                    stopped,
                    self.engine.registry if self.engine.config.schema_registry_url else None,
                )
            except Exception as exc:  # the cluster failed mid-way: the client is told
                log.warning("PRINT %s failed: %s", statement.topic, exc)
                emit(str(exc))
            finally:
                loop.call_soon_threadsafe(lines.put_nowait, None)

        reader = loop.run_in_executor(None, run)
        try:
            while (line := await lines.get()) is not None:
                await response.write((line + "\n").encode())
        except (ConnectionResetError, asyncio.CancelledError):
            stopped.set()
            raise
        finally:
            stopped.set()
            await reader
        await response.write_eof()
        return response

    async def inserts_stream(self, request: web.Request) -> web.StreamResponse:
        """Rows into a stream: a first JSON line ``{"target", "properties"}``, then one
        JSON object a line, each acknowledged with ``{"status": "ok", "seq": n}`` (or
        its error) as it is written; a JSON array of them for ``application/json``."""
        try:
            args = json.loads(await request.content.readline() or b"null")
        except ValueError:
            args = None
        target = args.get("target") if isinstance(args, dict) else None
        if not isinstance(target, str) or not target:
            message = 'The first line must be a JSON object with a "target"'
            return self._reply(request, _generic_error(ERROR_BAD_REQUEST, message), 400)
        quoted = len(target) > 1 and target[0] == target[-1] == "`"
        name = target[1:-1] if quoted else target.upper()
        try:
            source = insertable(self.engine.metastore, name)
        except KsqlStatementError as exc:
            return self._reply(request, _generic_error(ERROR_BAD_STATEMENT, str(exc)), 400)
        as_array = request.headers.get("Content-Type", "").startswith("application/json")
        content_type = "application/json" if as_array else DELIMITED_MEDIA_TYPE
        response = web.StreamResponse(headers={"Content-Type": content_type})
        response.enable_chunked_encoding()
        await response.prepare(request)
        separator = b"[" if as_array else b""
        sequence = 0
        async for raw in request.content:
            if not raw.strip():
                continue
            answer: dict[str, Any] = {"status": "ok", "seq": sequence}
            stop = False
            try:
                row = json.loads(raw)
            except ValueError:
                row, stop = None, True
                answer = _insert_error(
                    sequence, ERROR_BAD_REQUEST, "Invalid JSON in inserts stream"
                )
            if row is not None:
                try:
                    values = json_values(source, row)
                    await asyncio.to_thread(self.engine.rows.write, source, values)
                except KsqlStatementError as exc:
                    answer = _insert_error(sequence, ERROR_BAD_STATEMENT, str(exc))
            await response.write(separator + json.dumps(answer).encode() + b"\n")
            separator = b"," if as_array else b""
            sequence += 1
            if stop:
                break
        await response.write(b"[]" if as_array and sequence == 0 else b"]" if as_array else b"")
        await response.write_eof()
        return response


def rest_json_value(value: Any, sql_type: ex.SqlType | None) -> Any:
    """A row's value as ksqlDB's REST API writes it: DECIMAL a number, BYTES base64,
    TIMESTAMP ``yyyy-MM-dd'T'HH:mm:ss.SSS`` (UTC), DATE ``yyyy-MM-dd``, TIME as Java's
    ``LocalTime`` of the whole seconds, inside arrays, maps and structs too."""
    if value is None:
        return None
    if isinstance(sql_type, ex.PrimitiveType) and type(value) is int:
        if sql_type.name == "TIMESTAMP":
            return format_timestamp(value)
        if sql_type.name == "DATE":
            return format_date(value)
        if sql_type.name == "TIME":
            return format_time(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list):
        element = sql_type.element if isinstance(sql_type, ex.ArrayType) else None
        return [rest_json_value(v, element) for v in value]
    if isinstance(value, dict):
        if isinstance(sql_type, ex.StructType):
            fields = {f.name: f.type for f in sql_type.fields}
            return {str(k): rest_json_value(v, fields.get(str(k))) for k, v in value.items()}
        member = sql_type.value if isinstance(sql_type, ex.MapType) else None
        return {str(k): rest_json_value(v, member) for k, v in value.items()}
    return value


class _RowWriter:
    """A query's answer in the shape its endpoint and Accept header ask for:

    - ``/query-stream``, delimited (``application/vnd.ksqlapi.delimited.v1``, the
      default): a header object line ``{"queryId", "columnNames", "columnTypes"}``, then
      one JSON array a row;
    - ``/query-stream`` with ``application/json``: one JSON array of the same;
    - ``/query`` (ksqlDB's older shape): ``[{"header": {"queryId", "schema"}},
      {"row": {"columns": [...]}}, ..., {"finalMessage": "Limit Reached"}]``; the
      schema marks the ``keys`` columns ``KEY`` (a pull query's on a table, as ksqlDB's
      logical schema of it), and a pull query on a table has no final message (ksqlDB
      buffers its last row instead): its header or last row is written ``closing``,
      then ``close()``.
    """

    def __init__(
        self,
        path: str,
        accept: str,
        query_id: str,
        names: list[str],
        sql_types: Sequence[ex.SqlType | None],
        keys: frozenset[str] = frozenset(),
    ) -> None:
        self.old = path == "/query"
        self.keys = keys
        self.as_array = not self.old and "application/json" in accept
        self.query_id = query_id
        self.names = names
        self.sql_types = sql_types
        self.types = [str(t) for t in sql_types]
        if self.old:
            self.content_type = KSQL_MEDIA_TYPE if KSQL_MEDIA_TYPE in accept else "application/json"
        else:
            self.content_type = "application/json" if self.as_array else DELIMITED_MEDIA_TYPE

    def header(self, closing: bool = False) -> bytes:
        if self.old:
            schema = ", ".join(
                f"`{n}` {t}{' KEY' if n in self.keys else ''}"
                for n, t in zip(self.names, self.types, strict=True)
            )
            old_head = {"header": {"queryId": self.query_id, "schema": schema}}
            return b"[" + json.dumps(old_head).encode() + (b"" if closing else b",\n")
        head = {"queryId": self.query_id, "columnNames": self.names, "columnTypes": self.types}
        return (b"[" if self.as_array else b"") + json.dumps(head).encode() + b"\n"

    def row(self, values: list[Any], closing: bool = False) -> bytes:
        """A row's bytes; a table's tombstone (``TombstoneRow``) is ``"tombstone": true``
        on ``/query`` and nothing (b"") on ``/query-stream``, as ksqlDB's writers."""
        columns = [rest_json_value(v, t) for v, t in zip(values, self.sql_types, strict=False)]
        if self.old:
            row: dict[str, Any] = {"columns": columns}
            if isinstance(values, TombstoneRow):
                row["tombstone"] = True
            return json.dumps({"row": row}).encode() + (b"" if closing else b",\n")
        if isinstance(values, TombstoneRow):
            return b""
        return (b"," if self.as_array else b"") + json.dumps(columns).encode() + b"\n"

    def end(self, final: str | None) -> bytes:
        if self.old:
            last: dict[str, Any] = {"finalMessage": final or "Query Completed"}
            return json.dumps(last).encode() + b"]\n"
        return b"]" if self.as_array else b""

    def close(self) -> bytes:
        """The end of a ``/query`` answer without a final message."""
        return b"]\n"


def pull_final_message(plan: QueryPlan, row_count: int) -> str | None:
    """The final message of a pull query's ``/query`` answer on a stream: ``Limit
    Reached`` when its LIMIT cut the rows, as ksqlDB's; else None (``Query Completed``)."""
    if plan.limit is not None and row_count >= plan.limit:
        return "Limit Reached"
    return None


def pull_key_columns(plan: QueryPlan, is_pull: bool) -> frozenset[str]:
    """The columns of a query's answer that ksqlDB's logical schema of it marks KEY: a
    pull query's on a table, those named (by their alias) as a key column of the table,
    or WINDOWSTART and WINDOWEND; none for another query (ksqlDB's push queries give
    their key columns as values)."""
    if not is_pull or plan.source.kind != "TABLE":
        return frozenset()
    keys = {c.name for c in plan.source.columns if c.namespace == "KEY"}
    keys |= {"WINDOWSTART", "WINDOWEND"}
    return frozenset(p.name for p in plan.projection if p.name in keys)


def _host_and_port(url: str) -> str:
    """``host:port`` of a server's URL, as ksqlDB's ``KsqlHostInfoEntity`` is written."""
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.hostname}:{parsed.port}" if parsed.hostname else url


def _ws_json(value: Any) -> str:
    """JSON as ksqlDB's websocket messages are written: compact, UTF-8 as it is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def ws_close_reason(message: str) -> str:
    """A close reason of at most 123 bytes: a longer message is cut as ksqlDB cuts it (to
    120 characters, then two at a time until 120 bytes) and ends ``...``."""
    if len(message.encode()) <= WS_REASON_BYTES:
        return message
    cut = message[: WS_REASON_BYTES - 3]
    while len(cut.encode()) > WS_REASON_BYTES - 3:
        cut = cut[:-2]
    return cut + "..."


async def _ws_close(ws: web.WebSocketResponse, code: int, message: str) -> None:
    """ksqlDB's end of a websocket query: ``{"error": message}``, then the close frame."""
    try:
        await ws.send_str(_ws_json({"error": message}))
    except ConnectionResetError:
        return  # the client has gone
    await ws.close(code=code, message=ws_close_reason(message).encode())


async def _ws_pump(
    ws: web.WebSocketResponse,
    work: Callable[[Callable[[str], None]], None],
    stop: Callable[[], None],
) -> None:
    """Runs ``work`` on a worker thread, sending each message it emits, until it returns
    (``done``), fails (1011 with its message) or the client closes (``stop`` is called
    and ``work`` awaited in every case)."""
    loop = asyncio.get_running_loop()
    messages: asyncio.Queue[str | None] = asyncio.Queue()
    failures: list[str] = []

    def emit(text: str) -> None:
        loop.call_soon_threadsafe(messages.put_nowait, text)

    def run() -> None:
        try:
            work(emit)
        except Exception as exc:  # the cluster failed mid-way: the client is told
            log.warning("websocket query failed: %s", exc)
            failures.append(str(exc).strip() or f"KSQL exception: {type(exc).__name__}")
        finally:
            loop.call_soon_threadsafe(messages.put_nowait, None)

    runner = loop.run_in_executor(None, run)
    closed = asyncio.ensure_future(_ws_closed(ws))  # the client sends nothing but its close
    client_left = False
    try:
        while True:
            if closed.done():
                client_left = True
                break
            following = asyncio.ensure_future(messages.get())
            await asyncio.wait({following, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                following.cancel()
                client_left = True
                break
            text = following.result()
            if text is None:
                break
            await ws.send_str(text)
    except ConnectionResetError:
        client_left = True
    finally:
        stop()
        await runner
    if not client_left:
        if failures:
            await _ws_close(ws, WS_INTERNAL_ERROR, failures[0])
        else:
            await _ws_close(ws, WS_NORMAL_CLOSURE, "done")
    await closed


async def _ws_closed(ws: web.WebSocketResponse) -> None:
    async for _message in ws:
        pass


def _insert_error(sequence: int, code: int, message: str) -> dict[str, Any]:
    return {"status": "error", "seq": sequence, "error_code": code, "message": message}


class _BadRequest(Exception):
    pass


class _QueryFailed(Exception):
    pass
