"""What the HTTP service commands (``console``, ``schema-registry``, ``rest-proxy``)
share: their common options (``--bootstrap-server``, ``--command-config`` for the Kafka
client, ``--listener`` and ``--config`` for the service's own TLS and basic auth
settings), checking them (a bad listener or setting is the usual one-line argument
error, a cluster that refuses every bootstrap address one line and exit code 1),
starting the server, and running until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when a service starts, not for every strom command
    from aiohttp import web

    from strom.services.http import HttpServer
    from strom.services.http_security import HttpSecurity

from strom.cli.common import ToolError, add_bootstrap, client_config, refused_everywhere
from strom.cli.properties_file import (
    PropertiesError,
    add_config_file_option,
    config_file_properties,
    read_properties_file,
)


def add_service_options(parser: argparse.ArgumentParser, default_listener: str) -> None:
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "client")
    parser.add_argument(
        "--listener",
        default=default_listener,
        metavar="URL",
        help=f"where to serve it, http://HOST:PORT or https://HOST:PORT "
        f"(default {default_listener})",
    )
    parser.add_argument(
        "--config",
        dest="service_config",
        metavar="FILE",
        help="properties file of the service's own settings: TLS (ssl.*) for an https "
        "listener, basic authentication (authentication.*), schema.registry.* client settings",
    )


def service_settings(args: argparse.Namespace) -> tuple[HttpSecurity, dict[str, Any]]:
    """(``http_security.HttpSecurity``, Kafka client settings) of a service command, its
    options checked."""
    from strom.services.http_security import HttpSecurityError, http_security

    props: dict[str, str] = {}
    if args.service_config:
        try:
            props = read_properties_file(args.service_config)
        except PropertiesError as exc:
            args.parser.error(f"--config: {exc}")
    try:
        security = http_security(args.listener, props)
    except HttpSecurityError as exc:
        option = "--config" if args.service_config else "--listener"
        args.parser.error(f"{option}: {exc}")
    refused = refused_everywhere(args.bootstrap_server)
    if refused:
        raise ToolError(f"cannot reach {args.bootstrap_server}: {refused}")
    return security, client_config(args.bootstrap_server, config_file_properties(args))


def http_server(app: web.Application, security: HttpSecurity) -> HttpServer:
    """The ``HttpServer`` of a service's aiohttp application, with its TLS and basic auth."""
    from strom.services.http import HttpServer

    listener = security.listener
    return HttpServer(app, listener.host, listener.port, security.ssl_context, security.basic_auth)


async def start_server(server: HttpServer, args: argparse.Namespace) -> str:
    """Start an ``HttpServer``; the URL it serves. A port it cannot bind is one line."""
    from strom.services.http_security import parse_listener

    try:
        port = await server.start()
    except OSError as exc:
        raise ToolError(f"cannot listen on {args.listener}: {exc.strerror}") from None
    return parse_listener(args.listener).url(port)


async def until_stopped() -> None:
    """Wait for SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
