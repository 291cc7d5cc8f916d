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
import signal
import sys
from typing import Any

from strom.cli.common import ToolError, add_bootstrap, client_config, refused_everywhere
from strom.cli.properties_file import add_config_file_option, config_file_properties

DEFAULT_LISTENER = "http://127.0.0.1:8082"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("rest-proxy", help="serve Confluent's REST Proxy API (v2 and v3)")
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "client")
    parser.add_argument(
        "--listener",
        default=DEFAULT_LISTENER,
        metavar="URL",
        help=f"where to serve it, http://HOST:PORT (default {DEFAULT_LISTENER})",
    )
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
    from strom.config import ConfigError, parse_admin_listener

    try:
        host, port = parse_admin_listener(args.listener)
    except ConfigError as exc:
        args.parser.error(str(exc).replace("admin.listeners", "--listener"))
    if args.consumer_instance_timeout_ms <= 0:
        args.parser.error("--consumer-instance-timeout-ms must be above 0")
    refused = refused_everywhere(args.bootstrap_server)
    if refused:
        raise ToolError(f"cannot reach {args.bootstrap_server}: {refused}")
    settings = client_config(args.bootstrap_server, config_file_properties(args))
    return asyncio.run(_serve(args, host, port, settings))


async def _serve(args: argparse.Namespace, host: str, port: int, settings: dict) -> int:
    from strom.services.http import HttpServer
    from strom.services.rest_proxy.app import RestProxy

    proxy = RestProxy(settings, args.schema_registry_url, args.consumer_instance_timeout_ms)
    server = HttpServer(proxy.app, host, port)
    try:
        await server.start()
    except OSError as exc:
        raise ToolError(f"cannot listen on {args.listener}: {exc.strerror}") from None
    print(
        f"Strom REST proxy on http://{host}:{server.port}/ for {args.bootstrap_server}", flush=True
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
    print("REST proxy stopped", file=sys.stderr)
    return 0
