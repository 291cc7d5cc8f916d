"""The web console's HTTP side: routes, forms, and the sampler behind its charts.

Owns the aiohttp application (through the shared stack, ``strom.services.http``): each
page asks ``backend.ClusterReader`` on a worker thread (its calls block) and renders
with ``pages``; forms post, act, and redirect back with a note or the cluster's error.
A background task samples every ``sample_interval_s`` each group's lag and each
topic's end offset into ``history``, for the lag and throughput charts. With a Connect
worker's URL, the Connect page lists its connectors and tasks and pauses, resumes,
restarts or stops them through its REST API (``strom.connect.rest_client``).

Forms are safe from other sites (cross-site request forgery): every form the console
serves carries a token drawn at start (``csrf_token``, a hidden field), and a POST is
served only with that token and, when the browser names the page it came from
(``Origin``, or ``Sec-Fetch-Site``), only from the console's own origin; else 403 and
nothing is done. A page on another origin can neither read the token nor pass the
Origin check. Behind a name other than the one the browser shows (DNS rebinding), the
``Host`` check of ``allowed_hosts`` refuses the request.

Does not own the cluster calls (``backend``), the Connect calls (``rest_client``) or the
HTML (``pages``).
"""

from __future__ import annotations

import asyncio
import datetime
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from aiohttp import web
from aiohttp.typedefs import Handler

from strom.connect.rest_client import ConnectRestClient, ConnectRestError
from strom.services.console import pages
from strom.services.console.backend import ClusterReader, ConsoleError, RegistryDecoder
from strom.services.console.history import History

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_SAMPLED_GROUPS = 100
CSRF_FIELD = "csrf_token"
_POST_FORM = re.compile(r'(<form\b[^>]*\bmethod="post"[^>]*>)')


class Console:
    def __init__(
        self,
        reader: ClusterReader,
        sample_interval_s: float = 5.0,
        schema_registry_url: str | None = None,
        registry_client: dict[str, str] | None = None,
        allowed_hosts: frozenset[str] | None = None,
        connect_url: str | None = None,
    ) -> None:
        self.reader = reader
        self.connect = ConnectRestClient(connect_url) if connect_url else None
        self.csrf_token = secrets.token_urlsafe(32)
        # Host headers served (None: any), e.g. {"127.0.0.1:9021", "localhost:9021"}
        self.allowed_hosts = allowed_hosts
        self.decoder = (
            RegistryDecoder(schema_registry_url, registry_client) if schema_registry_url else None
        )
        self.sample_interval_s = sample_interval_s
        self.history = History()
        self.app = web.Application(middlewares=[self._guard])
        routes = self.app.router
        routes.add_get("/", self.cluster)
        routes.add_get("/topics", self.topics)
        routes.add_post("/topics", self.create_topic)
        routes.add_get("/topics/{name}", self.topic)
        routes.add_post("/topics/{name}/configs", self.alter_topic)
        routes.add_post("/topics/{name}/delete", self.delete_topic)
        routes.add_get("/topics/{name}/messages", self.messages)
        routes.add_get("/groups", self.groups)
        routes.add_get("/groups/{group}", self.group)
        routes.add_get("/share-groups", self.share_groups)
        routes.add_post("/groups/{group}/reset", self.reset_group)
        routes.add_get("/connect", self.connectors)
        routes.add_post("/connect/{name}/{action}", self.connector_action)
        self.app.on_startup.append(self._start_sampler)
        self.app.on_cleanup.append(self._stop_sampler)
        self._sampler: asyncio.Task[None] | None = None

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The Host check on every request; the origin and token checks on every POST."""
        if self.allowed_hosts is not None and request.host not in self.allowed_hosts:
            log.info("refused a request for host %r", request.host)
            return web.Response(status=403, text="unknown host\n")
        if request.method == "POST":
            refusal = await self._cross_site(request)
            if refusal is not None:
                log.info("refused a POST to %s: %s", request.path, refusal)
                return web.Response(status=403, text=refusal + "\n")
        return await handler(request)

    async def _cross_site(self, request: web.Request) -> str | None:
        """Why a POST may have come from another site; None when it did not."""
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            return f"a form from another origin ({origin})"
        if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
            return "a form from another site"
        form = await request.post()
        token = str(form.get(CSRF_FIELD, ""))
        if not hmac.compare_digest(token.encode(), self.csrf_token.encode()):
            return "the form's token is missing or wrong: reload the page"
        return None

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # Sampling -------------------------------------------------------------------------

    async def _start_sampler(self, _app: web.Application) -> None:
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever())

    async def _stop_sampler(self, _app: web.Application) -> None:
        if self._sampler is not None:
            self._sampler.cancel()

    async def _sample_forever(self) -> None:
        while True:
            try:
                await self._call(self.sample)
            except Exception as exc:
                log.info("sampling the cluster failed: %s", exc)
            await asyncio.sleep(self.sample_interval_s)

    def sample(self) -> None:
        values: dict[tuple[str, str], float] = {}
        for topic in self.reader.topics(with_sizes=False):
            values[("end", topic.name)] = float(sum(p.end for p in topic.partitions if p.end >= 0))
        for group in self.reader.groups()[:MAX_SAMPLED_GROUPS]:
            values[("lag", group.group_id)] = float(group.lag)
        self.history.record(time.time(), values)

    # Pages ----------------------------------------------------------------------------

    @staticmethod
    def _flash(request: web.Request) -> tuple[str, str]:
        return request.query.get("note", ""), request.query.get("error", "")

    @staticmethod
    def _back(path: str, note: str = "", error: str = "") -> web.HTTPSeeOther:
        query = {k: v for k, v in (("note", note), ("error", error)) if v}
        return web.HTTPSeeOther(path + ("?" + urlencode(query) if query else ""))

    def _html(self, text: str, status: int = 200) -> web.Response:
        """A page, each of its forms carrying the token that lets it be posted."""
        hidden = f'<input type="hidden" name="{CSRF_FIELD}" value="{self.csrf_token}">'
        text = _POST_FORM.sub(lambda m: m.group(1) + hidden, text)
        return web.Response(text=text, status=status, content_type="text/html")

    async def cluster(self, request: web.Request) -> web.Response:
        try:
            cluster = await self._call(self.reader.cluster)
            topics = await self._call(self.reader.topics, False)
            groups = await self._call(self.reader.group_ids)
        except ConsoleError as exc:
            return self._html(pages.layout("Cluster", "", "/", error=str(exc)), 502)
        return self._html(
            pages.cluster_page(cluster, len(topics), len(groups), self.reader.bootstrap)
        )

    async def topics(self, request: web.Request) -> web.Response:
        note, error = self._flash(request)
        try:
            topics = await self._call(self.reader.topics)
        except ConsoleError as exc:
            return self._html(pages.layout("Topics", "", "/topics", error=str(exc)), 502)
        rates = {t.name: self.history.latest_rate(("end", t.name)) for t in topics}
        return self._html(pages.topics_page(topics, rates, request.query.get("q", ""), note, error))

    async def create_topic(self, request: web.Request) -> web.Response:
        form = await request.post()
        name = str(form.get("name", "")).strip()
        try:
            partitions = int(str(form.get("partitions") or 1))
            # Left empty: the cluster's default.replication.factor (-1, KIP-464).
            replication = int(str(form.get("replication") or -1))
            configs = {}
            for item in str(form.get("configs", "")).split(","):
                if item.strip():
                    key, sep, value = item.partition("=")
                    if not sep:
                        raise ValueError(f"configs are key=value, got {item.strip()!r}")
                    configs[key.strip()] = value.strip()
        except ValueError as exc:
            raise self._back("/topics", error=str(exc)) from None
        if not name:
            raise self._back("/topics", error="a topic needs a name")
        try:
            await self._call(self.reader.create_topic, name, partitions, replication, configs)
        except ConsoleError as exc:
            raise self._back("/topics", error=str(exc)) from None
        raise self._back(f"/topics/{quote(name, safe='')}", note=f"Created topic {name}")

    async def topic(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        note, error = self._flash(request)
        try:
            topic = await self._call(self.reader.topic, name)
        except ConsoleError as exc:
            return self._html(pages.layout(f"Topic {name}", "", "/topics", error=str(exc)), 404)
        rates = self.history.rates(("end", name))
        return self._html(pages.topic_page(topic, rates, note, error))

    async def alter_topic(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        form = await request.post()
        key = str(form.get("key", "")).strip()
        value = str(form.get("value", "")).strip() or None
        here = f"/topics/{quote(name, safe='')}"
        try:
            await self._call(self.reader.alter_topic_config, name, key, value)
        except ConsoleError as exc:
            raise self._back(here, error=str(exc)) from None
        done = f"Set {key}={value}" if value is not None else f"{key} is back to its default"
        raise self._back(here, note=done)

    async def delete_topic(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        form = await request.post()
        here = f"/topics/{quote(name, safe='')}"
        if str(form.get("confirm", "")) != name:
            raise self._back(here, error="type the topic's name to delete it")
        try:
            await self._call(self.reader.delete_topic, name)
        except ConsoleError as exc:
            raise self._back(here, error=str(exc)) from None
        raise self._back("/topics", note=f"Deleted topic {name}")

    async def messages(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        query = dict(request.query)
        try:
            topic = await self._call(self.reader.topic, name)
        except ConsoleError as exc:
            return self._html(pages.layout(f"Topic {name}", "", "/topics", error=str(exc)), 404)
        partitions = [p.partition for p in topic.partitions]
        if not query:
            return self._html(pages.messages_page(name, partitions, query, None, ""))
        try:
            start = query.get("from", "end")
            at = query.get("at", "").strip()
            position = _position(start, at)
            limit = max(1, min(1000, int(query.get("limit") or 50)))
            partition = int(query["partition"]) if query.get("partition") else None
        except ValueError as exc:
            return self._html(pages.messages_page(name, partitions, query, None, str(exc)), 400)
        try:
            found = await self._call(
                self.reader.messages,
                name,
                partition,
                start,
                position,
                limit,
                query.get("key") or None,
                query.get("text") or None,
            )
        except ConsoleError as exc:
            return self._html(pages.messages_page(name, partitions, query, None, str(exc)), 502)
        if query.get("format") == "registry":
            if self.decoder is None:
                error = "start the console with --schema-registry-url to decode with it"
                return self._html(pages.messages_page(name, partitions, query, None, error), 400)
            decoder = self.decoder

            def decode_all() -> None:
                for message in found:
                    message.key = decoder.decode(message.key)
                    message.value = decoder.decode(message.value)

            await self._call(decode_all)
        return self._html(pages.messages_page(name, partitions, query, found, ""))

    async def groups(self, request: web.Request) -> web.Response:
        try:
            groups = await self._call(self.reader.groups)
        except ConsoleError as exc:
            return self._html(pages.groups_page([], str(exc)), 502)
        return self._html(pages.groups_page(groups, ""))

    async def share_groups(self, request: web.Request) -> web.Response:
        try:
            groups = await self._call(self.reader.share_groups)
        except ConsoleError as exc:
            return self._html(pages.share_groups_page([], str(exc)), 502)
        return self._html(pages.share_groups_page(groups, ""))

    async def group(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        note, error = self._flash(request)
        try:
            group = await self._call(self.reader.group, group_id)
        except ConsoleError as exc:
            return self._html(pages.layout(f"Group {group_id}", "", "/groups", error=str(exc)), 404)
        points = self.history.points(("lag", group_id))
        return self._html(pages.group_page(group, points, note, error))

    async def reset_group(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        form = await request.post()
        here = f"/groups/{quote(group_id, safe='')}"
        to = str(form.get("to", "earliest"))
        try:
            value = _position(to, str(form.get("value", "")).strip())
            await self._call(
                self.reader.reset_offsets, group_id, str(form.get("topic", "")), to, value
            )
        except (ConsoleError, ValueError) as exc:
            raise self._back(here, error=str(exc)) from None
        raise self._back(here, note=f"Offsets reset to {to}")

    # Connect --------------------------------------------------------------------------

    async def connectors(self, request: web.Request) -> web.Response:
        note, error = self._flash(request)
        if self.connect is None:
            return self._html(pages.connect_page(None, None, note, error))
        try:
            found = await self._call(self.connect.connectors)
        except ConnectRestError as exc:
            page = pages.connect_page(None, self.connect.url, note, str(exc))
            return self._html(page, 502)
        return self._html(pages.connect_page(found, self.connect.url, note, error))

    async def connector_action(self, request: web.Request) -> web.Response:
        name, action = request.match_info["name"], request.match_info["action"]
        if self.connect is None or action not in pages.CONNECTOR_ACTIONS:
            raise web.HTTPNotFound()
        try:
            await self._call(self.connect.act, name, action)
        except ConnectRestError as exc:
            raise self._back("/connect", error=str(exc)) from None
        raise self._back("/connect", note=f"{action.capitalize()} requested for {name}")


def _position(start: str, at: str) -> int:
    """The offset or time (ms since the epoch, or an ISO date) a form asks for."""
    if start == "offset":
        if not at.lstrip("-").isdigit():
            raise ValueError(f"an offset is a whole number, got {at!r}")
        return int(at)
    if start == "time":
        if at.isdigit():
            return int(at)
        try:
            moment = datetime.datetime.fromisoformat(at)
        except ValueError:
            raise ValueError(
                f"a time is milliseconds since 1970 or an ISO date, got {at!r}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return int(moment.timestamp() * 1000)
    return 0
