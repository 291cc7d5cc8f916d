"""A client of a ksql server's REST API (Strom's or ksqlDB's), for ``strom ksql``.

Owns the HTTP calls: ``POST /ksql`` with the statements, the CLI's properties
(``streamsProperties``) and variables (``sessionVariables``), ``GET /info``, the
lines of a streamed answer (PRINT on ``POST /query``) and rows written through
``POST /inserts-stream``; extra headers (basic authentication) and a TLS context go
with every request. An
error answer (ksqlDB's ``{"@type", "error_code", "message", ...}``) is a
``KsqlServerError`` carrying the body; a server that cannot be reached is a
``KsqlUnreachable``. Blocking (urllib).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

TIMEOUT_S = 120.0
DELIMITED_MEDIA_TYPE = "application/vnd.ksqlapi.delimited.v1"
MEDIA_TYPE = "application/vnd.ksql.v1+json"


class KsqlUnreachable(Exception):
    """The server could not be reached; one line."""


class KsqlServerError(Exception):
    """The server answered with an error; ``body`` is ksqlDB's error object."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(str(body.get("message", f"HTTP {status}")))
        self.status = status
        self.body = body


class KsqlRestClient:
    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = dict(headers or {})
        self.context = context

    def call(self, method: str, path: str, body: Any = None) -> Any:
        with self._open(method, path, body) as response:
            return json.loads(response.read() or b"null")

    def lines(self, path: str, body: Any, accept: str = MEDIA_TYPE) -> Iterator[str]:
        """The lines of a streamed answer (PRINT on ``/query``, a query's rows on
        ``/query-stream`` with ``accept`` its delimited type) as they arrive."""
        with self._open("POST", path, body, accept) as response:
            for line in response:
                yield line.decode("utf-8", errors="replace").rstrip("\n")

    def inserts(self, target: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` written into the stream ``target`` on ``/inserts-stream``: the
        server's acknowledgement of each (``{"status": "ok", "seq": n}`` or its error)."""
        lines = [json.dumps({"target": target, "properties": {}})]
        lines.extend(json.dumps(row) for row in rows)
        data = ("\n".join(lines) + "\n").encode()
        acks: list[dict[str, Any]] = []
        with self._open("POST", "/inserts-stream", data, DELIMITED_MEDIA_TYPE) as response:
            for line in response:
                if line.strip():
                    ack = json.loads(line)
                    acks.append(ack if isinstance(ack, dict) else {"message": str(ack)})
        return acks

    def _open(self, method: str, path: str, body: Any, accept: str = MEDIA_TYPE) -> Any:
        if isinstance(body, bytes):
            data: bytes | None = body
            content_type = DELIMITED_MEDIA_TYPE
        else:
            data = None if body is None else json.dumps(body).encode()
            content_type = MEDIA_TYPE
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={**self.headers, "Content-Type": content_type, "Accept": accept},
        )
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT_S, context=self.context)
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                answer = json.loads(text)
            except ValueError:
                answer = {"message": text.decode(errors="replace") or exc.reason}
            if not isinstance(answer, dict):
                answer = {"message": str(answer)}
            raise KsqlServerError(exc.code, answer) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise KsqlUnreachable(f"cannot reach {self.url}: {reason}") from None

    def ksql(
        self,
        statements: str,
        properties: dict[str, str] | None = None,
        variables: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        body = {
            "ksql": statements,
            "streamsProperties": properties or {},
            "sessionVariables": variables or {},
        }
        answer = self.call("POST", "/ksql", body)
        return answer if isinstance(answer, list) else []

    def info(self) -> dict[str, Any]:
        answer = self.call("GET", "/info")
        return dict(answer.get("KsqlServerInfo", {})) if isinstance(answer, dict) else {}
