"""What the HTTP service commands (``console``, ``schema-registry``, ``rest-proxy``)
share: their common options (``--bootstrap-server``, ``--command-config``,
``--listener``), checking them (a bad listener is the usual one-line argument error, a
cluster that refuses every bootstrap address one line and exit code 1), starting the
server, and running until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from strom.cli.common import ToolError, add_bootstrap, client_config, refused_everywhere
from strom.cli.properties_file import add_config_file_option, config_file_properties


def add_service_options(parser: argparse.ArgumentParser, default_listener: str) -> None:
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "client")
    parser.add_argument(
        "--listener",
        default=default_listener,
        metavar="URL",
        help=f"where to serve it, http://HOST:PORT (default {default_listener})",
    )


def service_settings(args: argparse.Namespace) -> tuple[str, int, dict[str, Any]]:
    """(host, port, client settings) of a service command, its options checked."""
    from strom.config import ConfigError, parse_admin_listener

    try:
        host, port = parse_admin_listener(args.listener)
    except ConfigError as exc:
        args.parser.error(str(exc).replace("admin.listeners", "--listener"))
    refused = refused_everywhere(args.bootstrap_server)
    if refused:
        raise ToolError(f"cannot reach {args.bootstrap_server}: {refused}")
    return host, port, client_config(args.bootstrap_server, config_file_properties(args))


async def start_server(server: Any, args: argparse.Namespace) -> None:
    """Start an ``HttpServer``; a port it cannot bind is one line."""
    try:
        await server.start()
    except OSError as exc:
        raise ToolError(f"cannot listen on {args.listener}: {exc.strerror}") from None


async def until_stopped() -> None:
    """Wait for SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
