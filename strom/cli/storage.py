"""``strom storage``: format and inspect a node's directories, like kafka-storage.sh.

``random-uuid`` prints a new cluster id (22 characters of base64url, as Kafka's).
``format -t ID -c server.properties`` writes meta.properties (cluster.id, node.id and a
directory.id of its own) into every log directory and the metadata log directory, and
Strom's bootstrap.json into the latter; ``--ignore-formatted`` leaves directories
already formatted for the same cluster and node as they are, ``--standalone`` records
this controller as the quorum's only initial voter, ``--add-scram
'SCRAM-SHA-256=[name=alice,password=alice-secret]'`` (repeatable) a SCRAM credential the
cluster starts with (salted here; written to the metadata log at first start).
``info -c server.properties`` shows each directory and its meta.properties, and any
problem (exit 1 when there is one).

Unlike the other tools this one works on the local disk, not over the network: it
runs before the node does. Bad properties or arguments: one line, exit 2; a directory
formatted for another cluster or node: one line, exit 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from strom.cli.common import EXIT_ERROR, EXIT_USAGE, ToolError
from strom.cli.scram import ScramSpecError, storage_credential
from strom.cluster.meta_properties import (
    METADATA_VERSION,
    MetaProperties,
    MetaPropertiesError,
    describe_dirs,
    format_dirs,
    random_uuid,
)
from strom.config import BrokerConfig, ConfigError


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "storage",
        help="format or inspect this node's log directories (like kafka-storage.sh)",
        description="Format or inspect this node's log directories.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("random-uuid", help="print a new random cluster id").set_defaults(
        run=run_random_uuid
    )
    fmt = actions.add_parser("format", help="write meta.properties into the node's directories")
    fmt.add_argument("-t", "--cluster-id", required=True, help="the cluster id (random-uuid)")
    _add_config_options(fmt)
    fmt.add_argument(
        "-g",
        "--ignore-formatted",
        action="store_true",
        help="leave directories already formatted for this cluster and node as they are",
    )
    fmt.add_argument(
        "-s",
        "--standalone",
        action="store_true",
        help="this controller is the quorum's only initial voter (dynamic quorum)",
    )
    fmt.add_argument(
        "-S",
        "--add-scram",
        action="append",
        default=[],
        metavar="'MECHANISM=[name=USER,password=SECRET]'",
        help="a SCRAM credential the cluster starts with (repeatable)",
    )
    fmt.set_defaults(run=run_format)
    info = actions.add_parser("info", help="show the node's directories and meta.properties")
    _add_config_options(info)
    info.set_defaults(run=run_info)


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-c", "--config", required=True, metavar="FILE", help="the node's server.properties"
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a property from the file (repeatable)",
    )


def _usage_error(message: str) -> int:
    print(f"strom storage: {message}", file=sys.stderr)
    return EXIT_USAGE


def run_random_uuid(_args: argparse.Namespace) -> int:
    print(random_uuid())
    return 0


def run_format(args: argparse.Namespace) -> int:
    try:
        credentials = [storage_credential(spec) for spec in args.add_scram]
    except ScramSpecError as exc:
        return _usage_error(f"--add-scram: {exc}")
    try:
        config = BrokerConfig.load(args.config, args.override)
        results = format_dirs(
            config,
            args.cluster_id,
            ignore_formatted=args.ignore_formatted,
            standalone=args.standalone,
            scram_credentials=credentials,
        )
    except MetaPropertiesError as exc:
        raise ToolError(str(exc)) from None
    except ConfigError as exc:
        return _usage_error(str(exc))
    except OSError as exc:
        raise ToolError(f"cannot write {exc.filename}: {exc.strerror}") from None
    metadata_dir = config.metadata_log_dir
    written = [r for r in results if r.formatted]
    if not written:
        print("All of the log directories are already formatted.")
    for result in written:
        kind = "metadata" if result.path == metadata_dir else "data"
        print(
            f"Formatting {kind} directory {result.path} with metadata.version "
            f"{METADATA_VERSION} (cluster.id {result.meta.cluster_id}, node.id "
            f"{result.meta.node_id}, directory.id {result.meta.directory_id})."
        )
    return 0


def _render(meta: MetaProperties) -> str:
    fields = {
        "cluster.id": meta.cluster_id,
        "directory.id": meta.directory_id,
        "node.id": meta.node_id,
        "version": meta.version,
    }
    return "{" + ", ".join(f"{k}={v}" for k, v in fields.items() if v is not None) + "}"


def run_info(args: argparse.Namespace) -> int:
    try:
        config = BrokerConfig.load(args.config, args.override)
        states = describe_dirs(config)
    except ConfigError as exc:
        return _usage_error(str(exc))
    problems: list[str] = []
    cluster_ids = {s.meta.cluster_id for s in states if s.meta is not None}
    for state in states:
        label = " (metadata log directory)" if state.is_metadata else ""
        if state.meta is not None:
            print(f"Log directory {state.path}{label}: formatted")
            print(f"  {_render(state.meta)}")
            if state.meta.node_id != config.node_id:
                problems.append(
                    f"{state.path} is formatted for node.id {state.meta.node_id}, but node.id "
                    f"is {config.node_id}"
                )
        elif state.problem is not None:
            print(f"Log directory {state.path}{label}: unreadable")
            problems.append(state.problem)
        else:
            print(f"Log directory {state.path}{label}: not formatted")
            problems.append(f"{state.path} is not formatted.")
    if len(cluster_ids) > 1:
        problems.append(f"the directories disagree on cluster.id: {', '.join(sorted(cluster_ids))}")
    if problems:
        print()
        print("Found problems:")
        for problem in problems:
            print(f"  {problem}")
        return EXIT_ERROR
    return 0
