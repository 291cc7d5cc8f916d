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
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.services.http_security import HttpSecurity

from strom.cli.common import ToolError
from strom.cli.http_service import (
    add_service_options,
    service_settings,
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


async def _serve(args: argparse.Namespace, security: HttpSecurity, settings: dict[str, Any]) -> int:
    from strom.services.schema_registry.service import RegistryService
    from strom.services.schema_registry.store import RegistryError

    service = RegistryService(settings, security)
    try:
        url = await service.start()
    except RegistryError as exc:
        raise ToolError(exc.message) from None
    except OSError as exc:
        raise ToolError(f"cannot listen on {args.listener}: {exc.strerror}") from None
    print(
        f"Strom schema registry on {url}/ for {args.bootstrap_server} "
        f"({service.schema_count} schemas read from {service.schemas_topic})",
        flush=True,
    )
    await until_stopped()
    await service.stop()
    print("schema registry stopped", file=sys.stderr)
    return 0
