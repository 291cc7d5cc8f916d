"""``strom connectors``: a thin client of a Kafka Connect worker's REST API (Strom's or
Kafka's).

    strom connectors [--url URL] list
    strom connectors [--url URL] create FILE          (.json or .properties)
    strom connectors [--url URL] describe NAME
    strom connectors [--url URL] pause|resume|stop|delete NAME
    strom connectors [--url URL] restart NAME [--include-tasks] [--only-failed] [--task N]

``--url`` defaults to $STROM_CONNECT_URL, else http://127.0.0.1:8083. ``list`` prints
each connector with its type, state and task states (``strom.cli.output``: a table, tab
separated lines, or JSON); ``describe`` the connector's status, config and tasks as
JSON. The worker's error (``{"error_code", "message"}``) is one line and exit code 1,
as is a worker that cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.parse
from typing import Any

from strom.cli import output
from strom.cli.common import ToolError
from strom.cli.connect_worker import connector_file
from strom.cli.properties_file import PropertiesError
from strom.connect.rest_client import ConnectRestClient, ConnectRestError

DEFAULT_URL = os.environ.get("STROM_CONNECT_URL") or "http://127.0.0.1:8083"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("connectors", help="manage Kafka Connect connectors (REST API)")
    parser.add_argument(
        "--url", default=DEFAULT_URL, help=f"the Connect worker's REST API (default {DEFAULT_URL})"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="connectors with their states")
    output.add_output_option(listing)
    create = actions.add_parser(
        "create", help="create a connector from a .json or .properties file"
    )
    create.add_argument("file")
    for action in ("describe", "pause", "resume", "stop", "delete"):
        actions.add_parser(action, help=f"{action} a connector").add_argument("name")
    restart = actions.add_parser("restart", help="restart a connector (and its tasks)")
    restart.add_argument("name")
    restart.add_argument("--include-tasks", action="store_true", help="restart its tasks too")
    restart.add_argument("--only-failed", action="store_true", help="only what has failed")
    restart.add_argument("--task", type=int, metavar="N", help="restart this task only")
    parser.set_defaults(run=run, parser=parser)


def call(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """(status, JSON answer or None); ToolError when unreachable or answered with an error."""
    try:
        return ConnectRestClient(url).call(method, path, body)
    except ConnectRestError as exc:
        raise ToolError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    url = args.url
    if args.action == "list":
        try:
            connectors = ConnectRestClient(url).connectors()
        except ConnectRestError as exc:
            raise ToolError(str(exc)) from None
        listing = output.Listing("NAME", "TYPE", "STATE", "TASKS", "WORKER")
        for connector in connectors:
            tasks = " ".join(f"{t.task_id}:{t.state}" for t in connector.tasks)
            listing.add_row(
                connector.name, connector.type, connector.state, tasks or "-", connector.worker_id
            )
        output.show(args, listing)
        return 0
    if args.action == "create":
        try:
            config = connector_file(args.file)
        except PropertiesError as exc:
            args.parser.error(str(exc))
        name = config.get("name")
        if not name:
            args.parser.error(f"{args.file}: the connector has no name")
        _, info = call(url, "POST", "/connectors", {"name": name, "config": config})
        print(f"Created connector {info['name']} ({info.get('type', '?')})")
        return 0
    quoted = "/connectors/" + urllib.parse.quote(args.name, safe="")
    if args.action == "describe":
        _, info = call(url, "GET", quoted)
        _, status = call(url, "GET", quoted + "/status")
        _, tasks = call(url, "GET", quoted + "/tasks")
        print(json.dumps({**info, "status": status, "task_configs": tasks}, indent=2))
        return 0
    if args.action == "restart":
        if args.task is not None:
            call(url, "POST", f"{quoted}/tasks/{args.task}/restart")
            print(f"Restarted task {args.task} of {args.name}")
            return 0
        query = urllib.parse.urlencode(
            {
                "includeTasks": str(args.include_tasks).lower(),
                "onlyFailed": str(args.only_failed).lower(),
            }
        )
        call(url, "POST", f"{quoted}/restart?{query}")
        print(f"Restarting {args.name}")
        return 0
    method, path, done = {
        "pause": ("PUT", "/pause", "Paused"),
        "resume": ("PUT", "/resume", "Resumed"),
        "stop": ("PUT", "/stop", "Stopped"),
        "delete": ("DELETE", "", "Deleted"),
    }[args.action]
    call(url, method, quoted + path)
    print(f"{done} {args.name}")
    return 0
