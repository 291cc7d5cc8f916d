"""``strom console``: the web console, served on localhost for any Kafka-compatible
cluster (it is a client over the wire).

    strom console --bootstrap-server HOST:PORT [--listener http://127.0.0.1:9021]
                  [--command-config FILE] [--sample-interval SECONDS]
                  [--schema-registry-url URL]

Runs until interrupted. A bad listener is the usual one-line argument error; a cluster
that refuses every bootstrap address is one line and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from strom.cli.common import ToolError, add_bootstrap, client_config, refused_everywhere
from strom.cli.properties_file import add_config_file_option, config_file_properties

DEFAULT_LISTENER = "http://127.0.0.1:9021"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "console", help="serve the web console (brokers, topics, messages, groups)"
    )
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "client")
    parser.add_argument(
        "--listener",
        default=DEFAULT_LISTENER,
        metavar="URL",
        help=f"where to serve it, http://HOST:PORT (default {DEFAULT_LISTENER})",
    )
    parser.add_argument(
        "--schema-registry-url",
        metavar="URL",
        help="decode values in Confluent's wire format with this schema registry",
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
    from strom.config import ConfigError, parse_admin_listener

    try:
        host, port = parse_admin_listener(args.listener)
    except ConfigError as exc:
        args.parser.error(str(exc).replace("admin.listeners", "--listener"))
    if args.sample_interval <= 0:
        args.parser.error("--sample-interval must be above 0")
    refused = refused_everywhere(args.bootstrap_server)
    if refused:
        raise ToolError(f"cannot reach {args.bootstrap_server}: {refused}")
    settings = client_config(args.bootstrap_server, config_file_properties(args))
    return asyncio.run(_serve(args, host, port, settings))


async def _serve(args: argparse.Namespace, host: str, port: int, settings: dict) -> int:
    from strom.services.console.app import serve
    from strom.services.console.backend import ClusterReader

    reader = ClusterReader(args.bootstrap_server, settings)
    try:
        server, _console = await serve(
            reader, host, port, args.sample_interval, args.schema_registry_url
        )
    except OSError as exc:
        raise ToolError(f"cannot listen on {args.listener}: {exc.strerror}") from None
    print(f"Strom console on http://{host}:{server.port}/ for {args.bootstrap_server}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
    print("console stopped", file=sys.stderr)
    return 0
