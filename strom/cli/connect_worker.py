"""What ``strom connect-standalone`` and ``strom connect-distributed`` share (each
command has its module, ``connect_standalone`` and ``connect_distributed``): a Kafka
Connect worker, as Kafka's ``connect-standalone.sh`` and ``connect-distributed.sh`` start
one.

    strom connect-standalone WORKER.properties [CONNECTOR.properties|CONNECTOR.json ...]
    strom connect-distributed WORKER.properties

The worker file takes Kafka Connect's worker properties (``strom.connect.worker_config``);
``--override key=value`` changes one. A standalone connector file is a ``.properties``
file of the connector's settings or a JSON file (the settings, or ``{"name", "config"}``
as POST /connectors takes them), as Kafka's. The first line on stdout names the URL
served (``Strom Connect worker (MODE) on URL/ for BOOTSTRAP``); logs go to stderr. Runs
until SIGTERM or SIGINT, then stops every task, committing its offsets.

A bad file, property or connector is one line and exit code 2 (a setting) or 1 (the
cluster cannot be reached, a connector cannot be created, the port is taken).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from strom.cli import broker_logging
from strom.cli.common import ToolError, parse_properties
from strom.cli.http_service import until_stopped
from strom.cli.properties_file import PropertiesError, read_properties_file

COMMANDS = {
    "connect-standalone": "run a standalone Kafka Connect worker (like connect-standalone.sh)",
    "connect-distributed": "run a distributed Kafka Connect worker (like connect-distributed.sh)",
}


def add_worker_parser(commands: Any, command: str) -> None:
    """The parser of ``command`` (one of ``COMMANDS``); each has its own small module
    (``connect_standalone``, ``connect_distributed``), as every command does."""
    parser = commands.add_parser(command, help=COMMANDS[command])
    parser.add_argument("worker_properties", metavar="WORKER.properties")
    if command == "connect-standalone":
        parser.add_argument(
            "connector_files",
            nargs="*",
            metavar="CONNECTOR",
            help="connector .properties or .json files",
        )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a worker property from the file (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    parser.set_defaults(run=run, parser=parser, mode=command.split("-", 1)[1])


def connector_file(path: str) -> dict[str, str]:
    """A standalone connector's settings from a .properties or JSON file."""
    if not path.endswith(".json"):
        return read_properties_file(path)
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except OSError as exc:
        raise PropertiesError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise PropertiesError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise PropertiesError(f"{path}: expected a JSON object")
    if isinstance(document.get("config"), dict):
        config = dict(document["config"])
        if "name" in document:
            config.setdefault("name", document["name"])
        document = config
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in document.items()}


def run(args: argparse.Namespace) -> int:
    from strom.config import ConfigError
    from strom.connect.worker_config import WorkerConfig

    broker_logging.configure(args.log_level)  # stderr, in the broker's text form
    try:
        props = read_properties_file(args.worker_properties)
        connectors = [connector_file(path) for path in getattr(args, "connector_files", [])]
    except PropertiesError as exc:
        args.parser.error(str(exc))
    props.update(parse_properties(args.parser, args.override, "--override"))
    try:
        config = WorkerConfig(props, args.mode)
    except ConfigError as exc:
        args.parser.error(f"{args.worker_properties}: {exc}")
    return asyncio.run(_serve(config, connectors))


async def _serve(config: Any, connectors: list[dict[str, str]]) -> int:
    from strom.config import ConfigError
    from strom.connect.service import ConnectWorker, WorkerStartError

    worker = ConnectWorker(config, connectors)
    try:
        url = await worker.start()
    except (WorkerStartError, ConfigError) as exc:
        await worker.stop()
        raise ToolError(str(exc)) from None
    bootstrap = ",".join(config["bootstrap.servers"])
    print(f"Strom Connect worker ({config.mode}) on {url}/ for {bootstrap}", flush=True)
    await until_stopped()
    await worker.stop()
    print("Connect worker stopped", file=sys.stderr)
    return 0
