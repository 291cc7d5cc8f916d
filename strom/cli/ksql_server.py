"""``strom ksql-server``: a ksql server (ksqlDB 0.29's REST API), as ksqlDB's
``ksql-server-start`` starts one.

    strom ksql-server [ksql-server.properties] [--override key=value ...]

The file takes ksqlDB's property names (``strom.ksql.config``): ``listeners``,
``bootstrap.servers``, ``ksql.service.id``, ``ksql.schema.registry.url``,
``ksql.streams.*`` and the Kafka clients' security settings. At start the server
creates its command topic if missing and replays it, so the streams, tables and types
of an earlier run are back. The first line on stdout names the URL served (``Strom ksql
server on URL/ for BOOTSTRAP (...)``); logs go to stderr. Runs until SIGTERM or SIGINT.

A bad file or property is one line and exit code 2; a cluster that cannot be reached, a
command topic that cannot be read or a port that is taken, one line and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from importlib.util import find_spec
from typing import Any

from strom.cli import broker_logging
from strom.cli.common import (
    ToolError,
    add_override_options,
    parse_properties,
    refused_everywhere,
)
from strom.cli.http_service import http_server, until_stopped
from strom.cli.properties_file import PropertiesError, read_properties_file


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "ksql-server", help="run a ksql server (ksqlDB's SQL over streams and REST API)"
    )
    parser.add_argument("properties", nargs="?", metavar="ksql-server.properties")
    add_override_options(parser)
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    from strom.config import ConfigError
    from strom.ksql.config import server_config
    from strom.services.http_security import HttpSecurityError, http_security

    broker_logging.configure(args.log_level)
    props: dict[str, str] = {}
    if args.properties:
        try:
            props = read_properties_file(args.properties)
        except PropertiesError as exc:
            args.parser.error(str(exc))
    props.update(parse_properties(args.parser, args.override, "--override"))
    where = f"{args.properties}: " if args.properties else ""
    try:
        config = server_config(props)
        security = http_security(config.listener, config.listener_security)
    except (ConfigError, HttpSecurityError) as exc:
        args.parser.error(f"{where}{exc}")
    refused = refused_everywhere(config.bootstrap_servers)
    if refused:
        raise ToolError(f"cannot reach {config.bootstrap_servers}: {refused}")
    return asyncio.run(_serve(config, security))


def missing_spark_modules() -> list[str]:
    """The modules persistent queries need (the spark extra's) that are not installed."""
    return [name for name in ("pyspark", "pyarrow", "pandas") if find_spec(name) is None]


async def _serve(config: Any, security: Any) -> int:
    from confluent_kafka import KafkaException

    from strom.ksql.command_topic import CommandTopicError
    from strom.ksql.engine import KsqlEngine
    from strom.ksql.server import KsqlServerApp
    from strom.services.http_security import parse_listener

    engine = KsqlEngine(config)
    try:
        replayed = await asyncio.to_thread(engine.start)
    except (CommandTopicError, KafkaException) as exc:
        raise ToolError(f"cannot start: {exc}") from None
    server = http_server(KsqlServerApp(engine).app, security)
    try:
        port = await server.start()
    except OSError as exc:
        raise ToolError(f"cannot listen on {config.listener}: {exc.strerror}") from None
    url = parse_listener(config.listener).url(port)
    await asyncio.to_thread(engine.join_query_group, url)  # its persistent queries start
    print(
        f"Strom ksql server on {url}/ for {config.bootstrap_servers} "
        f"({replayed} commands replayed from {config.command_topic})",
        flush=True,
    )
    missing = missing_spark_modules()
    if missing:
        logging.getLogger("strom.ksql").warning(
            "%s not installed: persistent queries (CREATE ... AS SELECT, INSERT INTO ... "
            "SELECT) will not start; install Strom's spark extra (pip install 'strom[spark]', "
            "or -e '.[spark]' in a checkout) and Java 17+",
            ", ".join(missing),
        )
    await until_stopped()
    await server.stop()
    await asyncio.to_thread(engine.close)
    print("ksql server stopped", file=sys.stderr)
    return 0
