"""The registry's REST API, Confluent's v1: paths, bodies, content type and error
answers (``{"error_code": 40401, "message": "Subject 'x' not found."}``), on the shared
aiohttp stack.

Owns the routes: subjects and their versions, schemas by id (in the context of a
``?subject=``), schema types, contexts, global and per-subject compatibility and
normalisation (``/config``) and mode (``/mode``), compatibility checks, soft and
permanent deletes, references. Reads answer from ``store.RegistryState`` under its
lock; changes run one at a time (plan, write to ``_schemas``, read back) on a worker
thread, since the Kafka client blocks; on a secondary instance (``strom.group_leader``) each
change is forwarded to the primary and answered with the primary's answer, once this
instance has read the change too. The primary makes a change only while it still is the
primary when its turn to write comes, after reading what its predecessor wrote; a change
forwarded to an instance that is not the primary (any more) is refused with 50004 and
sent on to the new one. The election only spares conflicts: which schema an id names is
decided by ``_schemas`` itself (``store``, ``log``). Every failure is an error answer:
malformed JSON (400), an unknown route (404), an oversized body (413), a schema that
does not parse (422, 42201), never a 500 with a traceback.

Does not own the state (``store``), schemas (``schemas``) or Kafka (``log``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from strom.group_leader import Election
from strom.services.schema_registry.log import SchemasLog
from strom.services.schema_registry.schemas import (
    AVRO,
    LEVELS,
    TYPES,
    InvalidSchema,
    Reference,
    incompatibilities,
    normalized,
    parse,
)
from strom.services.schema_registry.store import (
    MODES,
    RegistryError,
    config_key,
    context_of,
    mode_key,
    schema_not_found,
    subject_not_found,
)

log = logging.getLogger(__name__)
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY = 16 * 1024 * 1024
FORWARDED = "X-Strom-Forwarded"  # a change a secondary sent on: never forwarded again
FORWARD_WAIT_S = 15.0  # how long a change looks for a primary that takes it
NOT_PRIMARY = 50004  # Confluent's "unknown leader"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def answer(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type=CONTENT_TYPE)


def error(status: int, code: int, message: str) -> web.Response:
    return answer({"error_code": code, "message": message}, status)


class NotPrimary(RegistryError):
    """A change reached an instance that is not the primary (any more): Confluent's
    50004, on which the instance that forwarded it asks the group again."""

    def __init__(self, url: str) -> None:
        super().__init__(500, NOT_PRIMARY, f"{url} is not the primary: the change was not made")


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as Confluent's error body."""
    try:
        return await handler(request)
    except RegistryError as exc:
        return error(exc.status, exc.code, exc.message)
    except web.HTTPRequestEntityTooLarge:
        return error(413, 413, f"Request body larger than {MAX_BODY} bytes")
    except web.HTTPNotFound:
        return error(404, 404, "HTTP 404 Not Found")
    except web.HTTPMethodNotAllowed:
        return error(405, 405, "HTTP 405 Method Not Allowed")
    except web.HTTPException:
        raise
    except Exception:
        log.exception("schema registry request %s %s failed", request.method, request.path)
        return error(500, 50001, "Error in the backend data store")


def _refused_as_not_primary(status: int, body: bytes) -> bool:
    """Whether an answer is ``NotPrimary``'s."""
    try:
        return status == 500 and json.loads(body).get("error_code") == NOT_PRIMARY
    except (ValueError, AttributeError):
        return False


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise RegistryError(400, 400, "Invalid JSON in the request body") from None
    if not isinstance(body, dict):
        raise RegistryError(400, 400, "The request body must be a JSON object")
    return body


class RegistryApp:
    def __init__(
        self,
        schemas_log: SchemasLog,
        election: Election | None = None,
        forwarding_tls: ssl.SSLContext | None = None,
    ) -> None:
        """``forwarding_tls``: the context to reach an https primary with."""
        self.log = schemas_log
        self.election = election
        self.forwarding_tls = forwarding_tls
        self._read_in_term = 0  # the election's term this instance last read _schemas in
        self.app = web.Application(middlewares=[errors], client_max_size=MAX_BODY)
        r = self.app.router
        r.add_get("/", self.root)
        r.add_get("/subjects", self.subjects)
        r.add_get("/subjects/{subject}/versions", self.versions)
        r.add_post("/subjects/{subject}/versions", self._changing(self.register))
        r.add_get("/subjects/{subject}/versions/{version}", self.version)
        r.add_get("/subjects/{subject}/versions/{version}/schema", self.version_schema)
        r.add_get("/subjects/{subject}/versions/{version}/referencedby", self.referenced_by)
        r.add_delete("/subjects/{subject}/versions/{version}", self._changing(self.delete_version))
        r.add_post("/subjects/{subject}", self.lookup)
        r.add_delete("/subjects/{subject}", self._changing(self.delete_subject))
        r.add_get("/schemas/types", self.types)
        r.add_get("/contexts", self.contexts)
        r.add_get("/schemas/ids/{id}", self.by_id)
        r.add_get("/schemas/ids/{id}/schema", self.by_id_schema)
        r.add_get("/schemas/ids/{id}/subjects", self.id_subjects)
        r.add_get("/schemas/ids/{id}/versions", self.id_versions)
        r.add_get("/config", self.get_config)
        r.add_put("/config", self._changing(self.put_config))
        r.add_get("/config/{subject}", self.get_config)
        r.add_put("/config/{subject}", self._changing(self.put_config))
        r.add_delete("/config/{subject}", self._changing(self.delete_config))
        r.add_get("/mode", self.get_mode)
        r.add_put("/mode", self._changing(self.put_mode))
        r.add_get("/mode/{subject}", self.get_mode)
        r.add_put("/mode/{subject}", self._changing(self.put_mode))
        r.add_delete("/mode/{subject}", self._changing(self.delete_mode))
        r.add_post("/compatibility/subjects/{subject}/versions/{version}", self.compatibility)
        r.add_post("/compatibility/subjects/{subject}/versions", self.compatibility)

    @property
    def state(self) -> Any:
        return self.log.state

    def _changing(self, handle: Handler) -> Handler:
        """The route of a change: ``handle`` runs here when this instance is the primary
        (or there is no election), else the change goes to the primary (``_forwarded``).
        One this instance stopped being primary for before it wrote it (``NotPrimary``)
        goes to the new primary; one a secondary forwarded gets 50004 back, and the
        secondary asks the group again."""

        async def route(request: web.Request) -> web.StreamResponse:
            deadline = time.monotonic() + FORWARD_WAIT_S
            while True:
                if (forwarded := await self._forwarded(request, deadline)) is not None:
                    return forwarded
                try:
                    return await handle(request)
                except NotPrimary:
                    if request.headers.get(FORWARDED) or time.monotonic() > deadline:
                        raise

        return route

    async def _forwarded(self, request: web.Request, deadline: float) -> web.Response | None:
        """The primary's answer to this change when this instance is not the primary;
        None when this instance is to make it. A change forwarded here while this
        instance is not the primary is refused (``NotPrimary``), never made here: the
        instance that sent it asks the group again, until ``deadline``."""
        election = self.election
        if election is None or election.primary:
            return None
        if request.headers.get(FORWARDED):
            raise NotPrimary(election.url)
        loop = asyncio.get_running_loop()
        while True:
            wait_s = max(0.0, deadline - time.monotonic())
            url = await loop.run_in_executor(None, election.primary_url, wait_s)
            if url is None:
                raise RegistryError(
                    500, 50003, "Error while forwarding the request to the leader: no primary"
                )
            if url == election.url:  # named only once this instance holds the partition
                return None
            status, body = await self._forward(request, url)
            if not _refused_as_not_primary(status, body) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)  # the group is moving to another primary
        await loop.run_in_executor(None, self.log.catch_up)  # read it here too
        return web.Response(body=body, status=status, content_type=CONTENT_TYPE)

    async def _forward(self, request: web.Request, url: str) -> tuple[int, bytes]:
        """(status, body) of the primary at ``url`` for this request."""
        body = await request.read()
        headers = {"Content-Type": CONTENT_TYPE, FORWARDED: "1"}
        if "Authorization" in request.headers:  # the primary checks the same credentials
            headers["Authorization"] = request.headers["Authorization"]
        try:
            async with aiohttp.ClientSession() as session:
                async with session.request(
                    request.method,
                    url + request.path_qs,
                    data=body,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=60),
                    # no context of ours: aiohttp's default verification (True)
                    ssl=(self.forwarding_tls if url.startswith("https:") else None) or True,
                ) as response:
                    return response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RegistryError(
                500, 50003, f"Error while forwarding the request to the leader {url}: {exc}"
            ) from None

    async def _change(self, plan: Callable[[], Any]) -> Any:
        """Make the change ``plan`` gives (result, records) through ``SchemasLog.change``,
        on a worker thread; its result. With an election, the change is made only while
        this instance is the primary, checked once it has its turn to write
        (``NotPrimary`` else), and a new primary first reads ``_schemas`` to its end, so
        it plans from every record its predecessor wrote."""

        def run() -> Any:
            election = self.election
            with self.log.write_lock:
                if election is not None:
                    term = election.term
                    if not election.primary:
                        raise NotPrimary(election.url)
                    if term != self._read_in_term:
                        self.log.catch_up()
                        self._read_in_term = term
                return self.log.change(plan)

        return await asyncio.get_running_loop().run_in_executor(None, run)

    # Subjects ----------------------------------------------------------------------------

    async def root(self, request: web.Request) -> web.Response:
        return answer({})

    async def subjects(self, request: web.Request) -> web.Response:
        with self.log.lock:
            names = self.state.subject_names(deleted=_flag(request, "deleted"))
        prefix = request.query.get("subjectPrefix", "")
        return answer([n for n in names if n.startswith(prefix)])

    async def versions(self, request: web.Request) -> web.Response:
        with self.log.lock:
            found = self.state.versions(
                request.match_info["subject"], deleted=_flag(request, "deleted")
            )
        return answer([v.version for v in found])

    def _version_body(self, subject: str, entry: Any) -> dict[str, Any]:
        stored = self.state.stored(subject, entry.schema_id)
        body: dict[str, Any] = {
            "subject": subject,
            "version": entry.version,
            "id": entry.schema_id,
            "schema": stored.text,
        }
        if stored.schema_type != AVRO:
            body["schemaType"] = stored.schema_type
        if stored.references:
            body["references"] = [
                {"name": r.name, "subject": r.subject, "version": r.version}
                for r in stored.references
            ]
        return body

    async def version(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        with self.log.lock:
            entry = self.state.version(
                subject, request.match_info["version"], deleted=_flag(request, "deleted")
            )
            return answer(self._version_body(subject, entry))

    async def version_schema(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        with self.log.lock:
            entry = self.state.version(subject, request.match_info["version"])
            text = self.state.stored(subject, entry.schema_id).text
        return web.Response(text=text, content_type=CONTENT_TYPE)

    async def referenced_by(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        with self.log.lock:
            entry = self.state.version(subject, request.match_info["version"])
            ids = sorted(
                s.schema_id
                for s in self.state.schemas.values()
                if any(r.subject == subject and r.version == entry.version for r in s.references)
            )
        return answer(ids)

    def _parse_body(
        self, body: dict[str, Any], request: web.Request | None = None, subject: str | None = None
    ) -> Any:
        """The schema of a request body, normalised when the request (``normalize=true``)
        or the subject's config asks."""
        parsed = self._parse_schema(body)
        if request is not None:
            with self.log.lock:
                wanted = _flag(request, "normalize") or self.state.normalizes(subject)
            if wanted:
                return normalized(parsed)
        return parsed

    def _parse_schema(self, body: dict[str, Any]) -> Any:
        text = body.get("schema")
        if not isinstance(text, str) or not text.strip():
            raise RegistryError(422, 42201, "Empty schema")
        schema_type = body.get("schemaType") or AVRO
        if schema_type not in TYPES:
            raise RegistryError(422, 42201, f"Invalid schema type {schema_type}")
        try:
            references = [
                Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                for r in body.get("references") or []
            ]
        except (KeyError, TypeError, ValueError):
            raise RegistryError(422, 42201, "Invalid schema references") from None
        with self.log.lock:
            resolved = self.state.resolve(references)
        try:
            return parse(schema_type, text, references, resolved)
        except InvalidSchema as exc:
            raise RegistryError(422, 42201, str(exc)) from None

    async def register(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        body = await _json(request)
        parsed = self._parse_body(body, request, subject)
        wanted_id = body.get("id")
        wanted_version = body.get("version")
        if wanted_id is not None or wanted_version is not None:
            with self.log.lock:
                if self.state.mode(subject) != "IMPORT":
                    raise RegistryError(
                        422, 42205, "Subject is not in import mode: ids and versions are assigned"
                    )

        def plan() -> Any:
            return self.state.plan_register(
                subject,
                parsed,
                int(wanted_id) if wanted_id is not None else None,
                int(wanted_version) if wanted_version is not None else None,
            )

        schema_id = await self._change(plan)
        return answer({"id": schema_id})

    async def lookup(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        body = await _json(request)
        parsed = self._parse_body(body, request, subject)
        with self.log.lock:
            if subject not in self.state.subject_names(deleted=_flag(request, "deleted")):
                raise subject_not_found(subject)
            entry = self.state.find(subject, parsed, deleted=_flag(request, "deleted"))
            if entry is None:
                raise schema_not_found()
            return answer(self._version_body(subject, entry))

    async def delete_version(self, request: web.Request) -> web.Response:
        subject, version = request.match_info["subject"], request.match_info["version"]
        permanent = _flag(request, "permanent")
        number = await self._change(
            lambda: self.state.plan_delete_version(subject, version, permanent)
        )
        return answer(number)

    async def delete_subject(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        permanent = _flag(request, "permanent")
        versions = await self._change(lambda: self.state.plan_delete_subject(subject, permanent))
        return answer(versions)

    # Schemas by id -------------------------------------------------------------------------

    async def types(self, request: web.Request) -> web.Response:
        return answer(list(TYPES))

    def _stored(self, request: web.Request) -> Any:
        """The schema an id names, in the context of the ``subject`` query parameter (the
        default context without one)."""
        try:
            schema_id = int(request.match_info["id"])
        except ValueError:
            raise schema_not_found() from None
        context = context_of(request.query.get("subject"))
        stored = self.state.schemas.get((context, schema_id))
        if stored is None or not any(
            v.schema_id == schema_id
            for subject, vs in self._in_context(context)
            for v in vs.values()
        ):
            raise RegistryError(404, 40403, "Schema not found")
        return stored

    def _in_context(self, context: str) -> list[tuple[str, Any]]:
        """(subject, its versions) of every subject in ``context``."""
        return [(s, vs) for s, vs in self.state.subjects.items() if context_of(s) == context]

    async def contexts(self, request: web.Request) -> web.Response:
        with self.log.lock:
            return answer(self.state.contexts())

    async def by_id(self, request: web.Request) -> web.Response:
        with self.log.lock:
            stored = self._stored(request)
            body: dict[str, Any] = {"schema": stored.text}
            if stored.schema_type != AVRO:
                body["schemaType"] = stored.schema_type
            if stored.references:
                body["references"] = [
                    {"name": r.name, "subject": r.subject, "version": r.version}
                    for r in stored.references
                ]
        return answer(body)

    async def by_id_schema(self, request: web.Request) -> web.Response:
        with self.log.lock:
            stored = self._stored(request)
        return web.Response(text=stored.text, content_type=CONTENT_TYPE)

    async def id_subjects(self, request: web.Request) -> web.Response:
        with self.log.lock:
            stored = self._stored(request)
            deleted = _flag(request, "deleted")
            names = sorted(
                s
                for s, versions in self._in_context(context_of(request.query.get("subject")))
                if any(v.schema_id == stored.schema_id and (deleted or not v.deleted)
                       for v in versions.values())
            )  # fmt: skip
        return answer(names)

    async def id_versions(self, request: web.Request) -> web.Response:
        with self.log.lock:
            stored = self._stored(request)
            deleted = _flag(request, "deleted")
            pairs = sorted(
                (s, v.version)
                for s, versions in self._in_context(context_of(request.query.get("subject")))
                for v in versions.values()
                if v.schema_id == stored.schema_id and (deleted or not v.deleted)
            )
        return answer([{"subject": s, "version": v} for s, v in pairs])

    # Config and mode --------------------------------------------------------------------

    async def get_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        with self.log.lock:
            if subject is not None and subject not in self.state.configs:
                if not _flag(request, "defaultToGlobal"):
                    raise RegistryError(
                        404, 40408, f"Subject '{subject}' does not have subject-level "
                        "compatibility configured"
                    )  # fmt: skip
            level = self.state.level(subject)
            body = {"compatibilityLevel": level}
            if subject in self.state.normalize or subject is None:
                body["normalize"] = self.state.normalizes(subject)
        return answer(body)

    async def put_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        body = await _json(request)
        level = str(body.get("compatibility") or body.get("compatibilityLevel") or "").upper()
        normalize = body.get("normalize")
        if normalize is not None and not isinstance(normalize, bool):
            raise RegistryError(422, 42203, "Invalid normalize value: true or false")
        with self.log.lock:
            if not level and normalize is not None:  # only normalize changes
                level = self.state.level(subject)
            if normalize is None and subject in self.state.normalize:  # kept
                normalize = self.state.normalize[subject]
        if level not in LEVELS:
            raise RegistryError(
                422, 42203, "Invalid compatibility level. Valid values are none, backward, "
                "forward, full, backward_transitive, forward_transitive, and full_transitive"
            )  # fmt: skip
        stored: dict[str, Any] = {"compatibilityLevel": level}
        answered: dict[str, Any] = {"compatibility": level}
        if normalize is not None:
            stored["normalize"] = answered["normalize"] = normalize
        value = json.dumps(stored).encode()
        await self._change(lambda: (None, [(config_key(subject), value)]))
        return answer(answered)

    async def delete_config(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        with self.log.lock:
            if subject not in self.state.configs:
                raise subject_not_found(subject)
            level = self.state.configs[subject]
        await self._change(lambda: (None, [(config_key(subject), None)]))
        return answer({"compatibilityLevel": level})

    async def get_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        with self.log.lock:
            return answer({"mode": self.state.mode(subject)})

    async def put_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        body = await _json(request)
        mode = str(body.get("mode", "")).upper()
        if mode not in MODES:
            raise RegistryError(
                422, 42204, "Invalid mode. Valid values are READWRITE, READONLY and IMPORT"
            )
        value = json.dumps({"mode": mode}).encode()
        await self._change(lambda: (None, [(mode_key(subject), value)]))
        return answer({"mode": mode})

    async def delete_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        with self.log.lock:
            mode = self.state.mode(subject)
        await self._change(lambda: (None, [(mode_key(subject), None)]))
        return answer({"mode": mode})

    async def compatibility(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        version = request.match_info.get("version")
        body = await _json(request)
        parsed = self._parse_body(body)
        with self.log.lock:
            if subject not in self.state.subjects:
                problems: list[str] = []
            else:
                level = self.state.level(subject)
                if version is None:
                    earlier = [self.state.parsed(subject, v.schema_id) for v in
                               self.state.versions(subject)]  # fmt: skip
                    problems = incompatibilities(level, parsed, earlier)
                else:
                    entry = self.state.version(subject, version)
                    problems = incompatibilities(
                        level.removesuffix("_TRANSITIVE"),
                        parsed,
                        [self.state.parsed(subject, entry.schema_id)],
                    )
        result: dict[str, Any] = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            result["messages"] = problems
        return answer(result)
