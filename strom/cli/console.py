"""``strom console``: the web console, served on localhost for any Kafka-compatible
cluster (it is a client over the wire).

    strom console --bootstrap-server HOST:PORT [--listener http://127.0.0.1:9021]
                  [--command-config FILE] [--sample-interval SECONDS]
                  [--schema-registry-url URL] [--connect-url URL]

Runs until interrupted. A bad listener is the usual one-line argument error; a cluster
that refuses every bootstrap address is one line and exit code 1.
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

DEFAULT_LISTENER = "http://127.0.0.1:9021"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "console", help="serve the web console (brokers, topics, messages, groups)"
    )
    add_service_options(parser, DEFAULT_LISTENER)
    parser.add_argument(
        "--schema-registry-url",
        metavar="URL",
        help="decode values in Confluent's wire format with this schema registry",
    )
    parser.add_argument(
        "--connect-url",
        metavar="URL",
        help="show and manage the connectors of this Kafka Connect worker's REST API",
    )
    parser.add_argument(
        "--sample-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often lag and throughput are sampled for the charts (default 5)",
    )
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    if args.sample_interval <= 0:
        args.parser.error("--sample-interval must be above 0")
    security, settings = service_settings(args)
    return asyncio.run(_serve(args, security, settings))


_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _loopback_hosts(host: str | None, url: str) -> frozenset[str] | None:
    """On a loopback listener (the default), the Host headers a browser on this machine
    sends: any other is a name rebound to 127.0.0.1 by a foreign page (DNS rebinding).
    None (no check) on any other listener."""
    if host not in _LOOPBACK:
        return None
    port = url.rsplit(":", 1)[1]
    return frozenset(f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]"))


async def _serve(args: argparse.Namespace, security: HttpSecurity, settings: dict[str, Any]) -> int:
    from strom.services.console.app import Console
    from strom.services.console.backend import ClusterReader

    reader = ClusterReader(args.bootstrap_server, settings)
    console = Console(
        reader,
        args.sample_interval,
        args.schema_registry_url,
        security.registry_client,
        connect_url=args.connect_url,
    )
    server = http_server(console.app, security)
    url = await start_server(server, args)
    console.allowed_hosts = _loopback_hosts(security.listener.host, url)
    print(f"Strom console on {url}/ for {args.bootstrap_server}", flush=True)
    await until_stopped()
    await server.stop()
    print("console stopped", file=sys.stderr)
    return 0
