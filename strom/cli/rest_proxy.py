"""``strom rest-proxy``: Confluent's REST Proxy API (v2 and v3) for any Kafka-compatible
cluster, a client over the wire.

    strom rest-proxy --bootstrap-server HOST:PORT [--listener http://127.0.0.1:8082]
                     [--schema-registry-url URL] [--command-config FILE]
                     [--consumer-instance-timeout-ms MS]

Runs until interrupted. A bad listener is a one-line argument error; a cluster that
refuses every bootstrap address is one line and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.services.http_security import HttpSecurity

from strom.cli.http_service import (
    add_service_options,
    http_server,
    service_settings,
    start_server,
    until_stopped,
)

DEFAULT_LISTENER = "http://127.0.0.1:8082"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("rest-proxy", help="serve Confluent's REST Proxy API (v2 and v3)")
    add_service_options(parser, DEFAULT_LISTENER)
    parser.add_argument(
        "--schema-registry-url", metavar="URL", help="for Avro records (a schema registry)"
    )
    parser.add_argument(
        "--consumer-instance-timeout-ms",
        type=int,
        default=300_000,
        metavar="MS",
        help="a consumer instance not used this long is closed (default 300000)",
    )
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    if args.consumer_instance_timeout_ms <= 0:
        args.parser.error("--consumer-instance-timeout-ms must be above 0")
    security, settings = service_settings(args)
    return asyncio.run(_serve(args, security, settings))


async def _serve(args: argparse.Namespace, security: HttpSecurity, settings: dict[str, Any]) -> int:
    from strom.services.rest_proxy.app import RestProxy

    proxy = RestProxy(
        settings,
        args.schema_registry_url,
        args.consumer_instance_timeout_ms,
        registry_client=security.registry_client,
    )
    server = http_server(proxy.app, security)
    url = await start_server(server, args)
    print(f"Strom REST proxy on {url}/ for {args.bootstrap_server}", flush=True)
    await until_stopped()
    await server.stop()
    print("REST proxy stopped", file=sys.stderr)
    return 0
