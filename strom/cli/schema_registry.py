"""``strom schema-registry``: Confluent's Schema Registry API for any Kafka-compatible
cluster, its schemas kept in the cluster's ``_schemas`` topic (the registry keeps no
state of its own: restart it and it reads them back).

    strom schema-registry --bootstrap-server HOST:PORT [--listener http://127.0.0.1:8081]
                          [--command-config FILE]

Runs until interrupted. A bad listener is a one-line argument error; a cluster that
refuses every bootstrap address is one line and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from typing import Any

from strom.cli.common import ToolError, add_bootstrap, client_config, refused_everywhere
from strom.cli.properties_file import add_config_file_option, config_file_properties

DEFAULT_LISTENER = "http://127.0.0.1:8081"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "schema-registry", help="serve a schema registry (Confluent's API) backed by _schemas"
    )
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "client")
    parser.add_argument(
        "--listener",
        default=DEFAULT_LISTENER,
        metavar="URL",
        help=f"where to serve it, http://HOST:PORT (default {DEFAULT_LISTENER})",
    )
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    from strom.config import ConfigError, parse_admin_listener

    try:
        host, port = parse_admin_listener(args.listener)
    except ConfigError as exc:
        args.parser.error(str(exc).replace("admin.listeners", "--listener"))
    refused = refused_everywhere(args.bootstrap_server)
    if refused:
        raise ToolError(f"cannot reach {args.bootstrap_server}: {refused}")
    settings = client_config(args.bootstrap_server, config_file_properties(args))
    return asyncio.run(_serve(args, host, port, settings))


async def _serve(args: argparse.Namespace, host: str, port: int, settings: dict) -> int:
    from strom.services.http import HttpServer
    from strom.services.schema_registry.app import RegistryApp
    from strom.services.schema_registry.election import Election
    from strom.services.schema_registry.log import SchemasLog
    from strom.services.schema_registry.store import RegistryError

    loop = asyncio.get_running_loop()
    try:
        schemas_log = await loop.run_in_executor(None, SchemasLog, settings)
        await loop.run_in_executor(None, schemas_log.catch_up)
    except RegistryError as exc:
        raise ToolError(exc.message) from None
    app = RegistryApp(schemas_log)
    server = HttpServer(app.app, host, port)
    try:
        await server.start()
    except OSError as exc:
        raise ToolError(f"cannot listen on {args.listener}: {exc.strerror}") from None
    shown = socket.getfqdn() if host in ("0.0.0.0", "::") else host
    app.election = Election(settings, schemas_log.topic, f"http://{shown}:{server.port}")
    with schemas_log.lock:
        count = len(schemas_log.state.schemas)
    print(
        f"Strom schema registry on http://{host}:{server.port}/ for {args.bootstrap_server} "
        f"({count} schemas read from {schemas_log.topic})",
        flush=True,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
    await loop.run_in_executor(None, app.election.close)
    await loop.run_in_executor(None, schemas_log.close)
    print("schema registry stopped", file=sys.stderr)
    return 0
