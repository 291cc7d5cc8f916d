"""A client of a Kafka Connect worker's REST API (Strom's or Kafka's), for the tools that
manage connectors: ``strom connectors`` and the console's Connect page.

Owns the HTTP calls and their errors: a worker's error answer (``{"error_code",
"message"}``) or an unreachable worker is one ``ConnectRestError`` whose text is one
line. Blocking (urllib): callers on an event loop run it on a worker thread.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

TIMEOUT_S = 60.0

# What a connector may be asked to do, as (method, path after /connectors/NAME).
ACTIONS = {
    "pause": ("PUT", "/pause"),
    "resume": ("PUT", "/resume"),
    "stop": ("PUT", "/stop"),
    "restart": ("POST", "/restart?includeTasks=true&onlyFailed=false"),
    "delete": ("DELETE", ""),
}


class ConnectRestError(Exception):
    """A worker that answered with an error, or could not be reached: one line."""


@dataclass
class TaskState:
    task_id: int
    state: str
    worker_id: str
    trace: str | None = None


@dataclass
class ConnectorState:
    """A connector as ``GET /connectors?expand=status&expand=info`` describes it."""

    name: str
    type: str
    state: str
    worker_id: str
    connector_class: str = ""
    trace: str | None = None
    tasks: list[TaskState] = field(default_factory=list)


class ConnectRestClient:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, JSON answer or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                status, text = response.status, response.read()
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                message = json.loads(text)["message"]
            except (ValueError, KeyError, TypeError):
                message = text.decode("utf-8", "replace") or exc.reason
            raise ConnectRestError(f"{method} {path}: {exc.code} {message}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConnectRestError(
                f"cannot reach the Connect worker at {self.url}: {reason}"
            ) from None
        return status, json.loads(text) if text.strip() else None

    def connectors(self) -> list[ConnectorState]:
        """Every connector with its state and its tasks', by name."""
        _, expanded = self.call("GET", "/connectors?expand=status&expand=info")
        found = []
        for name in sorted(expanded):
            status = expanded[name].get("status") or {}
            info = expanded[name].get("info") or {}
            connector = status.get("connector") or {}
            found.append(
                ConnectorState(
                    name=name,
                    type=status.get("type") or info.get("type") or "",
                    state=connector.get("state", ""),
                    worker_id=connector.get("worker_id", ""),
                    connector_class=(info.get("config") or {}).get("connector.class", ""),
                    trace=connector.get("trace"),
                    tasks=[
                        TaskState(t["id"], t["state"], t.get("worker_id", ""), t.get("trace"))
                        for t in status.get("tasks", [])
                    ],
                )
            )
        return found

    def act(self, name: str, action: str) -> None:
        """Pause, resume, stop, restart (with its tasks) or delete a connector."""
        method, path = ACTIONS[action]
        self.call(method, "/connectors/" + urllib.parse.quote(name, safe="") + path)
