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
import socket
import sys
from dataclasses import replace
from typing import Any

from strom.cli.common import ToolError
from strom.cli.http_service import (
    add_service_options,
    http_server,
    service_settings,
    start_server,
    until_stopped,
)

DEFAULT_LISTENER = "http://127.0.0.1:8081"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "schema-registry", help="serve a schema registry (Confluent's API) backed by _schemas"
    )
    add_service_options(parser, DEFAULT_LISTENER)
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    security, settings = service_settings(args)
    return asyncio.run(_serve(args, security, settings))


async def _serve(args: argparse.Namespace, security: Any, settings: dict) -> int:
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
    app = RegistryApp(schemas_log, forwarding_tls=security.forwarding_tls)
    server = http_server(app.app, security)
    url = await start_server(server, args)
    host = security.listener.host
    shown = socket.getfqdn() if host in ("0.0.0.0", "::") else host
    own_url = replace(security.listener, host=shown).url(server.port)
    app.election = Election(settings, schemas_log.topic, own_url)
    with schemas_log.lock:
        count = len(schemas_log.state.schemas)
    print(
        f"Strom schema registry on {url}/ for {args.bootstrap_server} "
        f"({count} schemas read from {schemas_log.topic})",
        flush=True,
    )
    await until_stopped()
    await server.stop()
    await loop.run_in_executor(None, app.election.close)
    await loop.run_in_executor(None, schemas_log.close)
    print("schema registry stopped", file=sys.stderr)
    return 0
