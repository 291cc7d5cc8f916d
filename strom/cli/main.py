"""The ``strom`` command: the broker and the Kafka-style tools, one dispatch point.

``strom broker [server.properties] [--override key=value ...]`` starts one node
as ``kafka-server-start.sh`` does. With no arguments it listens on
127.0.0.1:9092 and keeps its data under ./strom-data. A bad config value is one
line on stderr and exit code 2; SIGTERM and SIGINT shut down cleanly.

The tools (``topics``, ``produce``, ``consume``, ``groups``, ``configs``,
``perf-test``, ``get-offsets``, ``delete-records``, ``reassign-partitions``,
``leader-election``, ``log-dirs``, ``metadata-quorum``, ``cluster``, ``transactions``,
``acls``, ``console``, the web console, ``schema-registry``, ``rest-proxy``, the Kafka
Connect workers ``connect-standalone`` and ``connect-distributed`` and
``connectors``, a client of their REST API, the ksql server ``ksql-server`` and its CLI
``ksql``) live one per module in this package and are
clients only: they talk to any Kafka cluster through confluent-kafka (or raw requests
where it lacks one).
``storage`` (format and inspect the node's directories, like kafka-storage.sh) and
``dump-log`` (decode segment files, like kafka-dump-log.sh) work on the local disk
instead, and ``completion`` prints a bash or zsh completion script. Listings print as
``strom.cli.output`` decides: a table on a terminal, tab-separated lines in a pipe,
JSON with ``--output json``. A tool's wrong argument is one line and exit code 2; an
expected failure (broker unreachable, topic missing...) is one line and exit code 1.
SIGTERM ends a tool as Ctrl-C does.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from strom.cli import output
from strom.cli.common import (
    OneLineArgumentParser,
    ToolError,
    add_override_options,
    describe_error,
    fail,
)

if TYPE_CHECKING:
    from strom.config import BrokerConfig

EXIT_CONFIG = 2
# Each tool's command name and its module in strom.cli, in the order --help lists them.
# Only the module of the command run is imported: a tool starts without the import
# cost of the others (kio schemas, the broker's config and storage).
TOOL_MODULES = {
    "topics": "topics",
    "produce": "produce",
    "consume": "consume",
    "groups": "groups",
    "share-groups": "share_groups",
    "configs": "configs",
    "perf-test": "perf_test",
    "get-offsets": "get_offsets",
    "delete-records": "delete_records",
    "reassign-partitions": "reassign",
    "leader-election": "leader_election",
    "log-dirs": "log_dirs",
    "metadata-quorum": "metadata_quorum",
    "features": "features",
    "cluster": "cluster",
    "transactions": "transactions",
    "acls": "acls",
    "console": "console",
    "schema-registry": "schema_registry",
    "rest-proxy": "rest_proxy",
    "connect-standalone": "connect_standalone",
    "connect-distributed": "connect_distributed",
    "connectors": "connectors",
    "ksql-server": "ksql_server",
    "ksql": "ksql",
    "ksql-migrations": "ksql_migrations",
    "storage": "storage",
    "dump-log": "dump_log",
    "completion": "completion",
}


def _version() -> str:
    """The installed package's version (pyproject.toml), or "unknown" outside an install."""
    try:
        return importlib.metadata.version("strom")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _tools_for(argv: list[str] | None) -> list[str]:
    """The command names whose parsers to build: the one ``argv`` names, or all (for
    ``--help``, ``--version``, a wrong command, ``completion``, or no ``argv``)."""
    if argv is not None:
        command = next((arg for arg in argv if not arg.startswith("-")), None)
        if command in TOOL_MODULES and command != "completion":
            return [command]
        if command == "broker":
            return []
    return list(TOOL_MODULES)


def _parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="strom", description="Strom event streaming platform")
    parser.add_argument("--version", action="version", version=f"strom {_version()}")
    # `strom broker` keeps argparse's own error output; the tools' parsers are one-line.
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=argparse.ArgumentParser
    )
    broker = commands.add_parser("broker", help="run a broker (like kafka-server-start.sh)")
    broker.add_argument("properties", nargs="?", help="server.properties file")
    add_override_options(broker)
    commands._parser_class = OneLineArgumentParser
    for name in _tools_for(argv):
        importlib.import_module(f"strom.cli.{TOOL_MODULES[name]}").add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(argv).parse_args(argv)
    if args.command == "broker":
        return run_broker(args)
    # SIGTERM (kill, timeout, systemd) ends a tool as Ctrl-C does: a consumer commits
    # what it printed and leaves its group instead of dying with exit code 143.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        code: int = args.run(args)
        output.flush(args)
        return code
    except ToolError as exc:
        return fail(f"strom {args.command}", str(exc))
    except KafkaException as exc:  # e.g. a property from a config file librdkafka rejects
        return fail(f"strom {args.command}", describe_error(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `strom ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def run_broker(args: argparse.Namespace) -> int:
    from strom.cli import broker_logging
    from strom.cluster.bootstrap import LegacyMetadataError
    from strom.cluster.meta_properties import MetaPropertiesError
    from strom.config import BrokerConfig, ConfigError
    from strom.storage.errors import LogDirLockedError

    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = BrokerConfig.load(args.properties, args.override)
        config.log_dir  # noqa: B018 - validates log.dirs
    except ConfigError as exc:
        print(f"strom broker: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        broker_logging.configure(
            args.log_level,
            config["log.format"],
            config["log.file"],
            int(config["log.file.max.bytes"]),
            int(config["log.file.backup.count"]),
        )
    except OSError as exc:
        print(f"strom broker: log.file {config['log.file']}: {exc.strerror}", file=sys.stderr)
        return EXIT_CONFIG
    # Work the broker moves off its event loop (down-conversion, the record walk of a big
    # batch) runs in threads that hold the GIL; the loop waits up to a switch interval
    # for it each time it comes back from the network, so CPython's 5 ms would let one
    # such thread slow every client (the convoy effect). 0.5 ms keeps them answered.
    sys.setswitchinterval(0.0005)
    runner: Callable[[Coroutine[Any, Any, int]], int]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    try:
        return runner(_serve(config))
    except (MetaPropertiesError, LegacyMetadataError) as exc:  # another cluster or node; bad file
        print(f"strom broker: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"strom broker: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (OSError, LogDirLockedError) as exc:
        print(f"strom broker: cannot start: {exc}", file=sys.stderr)
        return 1


async def _serve(config: BrokerConfig) -> int:
    from strom.broker.server import Broker

    stop = asyncio.Event()
    services = None
    exit_code = 0
    if config["schema.registry.listener"] or config["rest.proxy.listener"]:
        from strom.services.embedded import EmbeddedServices

        def failed(problem: str) -> None:
            nonlocal exit_code
            print(f"strom broker: {problem}", file=sys.stderr, flush=True)
            exit_code = 1
            stop.set()

        # Built first: their TLS and basic authentication settings are checked before
        # the broker starts (a ConfigError is one line).
        bootstrap = config.embedded_services_bootstrap
        assert bootstrap is not None  # the config's check: a PLAINTEXT client listener
        services = EmbeddedServices(
            bootstrap,
            config["schema.registry.listener"],
            config["rest.proxy.listener"],
            failed,
            config.http_listener_settings("schema.registry."),
            config.http_listener_settings("rest.proxy."),
        )
    broker = Broker(config)
    # Handlers first: a SIGTERM right after the "listening on" line must still stop cleanly.
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    if services is not None:
        services.start()
    await stop.wait()
    if services is not None:
        await services.stop()
    await broker.stop()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
