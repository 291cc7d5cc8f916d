"""``strom configs``: describe and change topic and broker configs, like kafka-configs.sh.

``--describe`` lists the configs set dynamically on the entity (a topic's own
overrides, a broker's dynamic configs); ``--all`` lists every config with its
source. ``--alter`` sends one IncrementalAlterConfigs request: ``--add-config
k=v,k2=v2`` sets (a value holding commas goes in brackets, ``k=[a,b]``, as in
kafka-configs.sh) and ``--delete-config k,k2`` removes overrides. Brokers are
named by node id. Client quotas (``--entity-type users|clients``, ``--user``,
``--client``) are ``strom.cli.client_quotas``. Not covered: the cluster-wide broker
default (``--entity-default``; confluent-kafka cannot name an empty resource) and IPs.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from strom.cli import client_quotas, scram
from strom.cli.common import (
    ToolError,
    add_bootstrap,
    check_reachable,
    client_config,
    describe_error,
    source_code,
)
from strom.cli.output import Listing, add_output_option, note, show
from strom.cli.properties_file import add_config_file_option, config_file_properties

REQUEST_TIMEOUT_S = 15.0
ENTITY_TYPES = {"topics": ResourceType.TOPIC, "brokers": ResourceType.BROKER}
DYNAMIC_SOURCES = {
    ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "configs",
        help="describe or change topic and broker configs (like kafka-configs.sh)",
        description="Describe or change topic and broker configs.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show configs")
    action.add_argument("--alter", action="store_true", help="change configs")
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "admin client")
    parser.add_argument(
        "--entity-type", choices=sorted([*ENTITY_TYPES, *client_quotas.ENTITY_TYPES])
    )
    parser.add_argument("--entity-name", help="topic name or broker id")
    parser.add_argument(
        "--all",
        action="store_true",
        help="with --describe: every config, not only the dynamic ones",
    )
    parser.add_argument(
        "--add-config",
        metavar="K=V,K2=V2",
        help="configs to set; a value with commas goes in brackets: k=[a,b]",
    )
    parser.add_argument("--delete-config", metavar="K,K2", help="configs to remove")
    client_quotas.add_arguments(parser)
    add_output_option(parser)
    parser.set_defaults(run=run, parser=parser)


def split_top_level(text: str) -> list[str]:
    """Split on commas outside square brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_add_config(parser: argparse.ArgumentParser, text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in split_top_level(text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--add-config expects k=v[,k2=v2], got {item!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        result[key.strip()] = value
    return result


# Sources confluent-kafka's ConfigSource enum lacks, by Kafka's numbering.
_MORE_SOURCES = {6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG"}


def _source_name(source: Any) -> str:
    if isinstance(source, ConfigSource):
        return source.name
    code = source_code(source)
    try:
        return ConfigSource(code).name
    except ValueError:
        return _MORE_SOURCES.get(code, f"SOURCE_{code}")


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    if args.describe and (args.add_config or args.delete_config):
        parser.error("--add-config and --delete-config go with --alter")
    if args.alter and not (args.add_config or args.delete_config):
        parser.error("--alter needs --add-config or --delete-config")
    if args.all and not args.describe:
        parser.error("--all goes with --describe")
    adds = parse_add_config(parser, args.add_config) if args.add_config else {}
    deletes = split_top_level(args.delete_config) if args.delete_config else []
    both = sorted(set(adds) & set(deletes))
    if both:
        parser.error(f"{both[0]!r} is both added and deleted")
    if scram.wanted(args, adds, deletes):
        return scram.run(parser, args, adds, deletes)
    if client_quotas.wanted(args):
        return client_quotas.run(parser, args, adds, deletes)
    if args.entity_type is None:
        parser.error("--entity-type is required")
    if not args.entity_name:
        parser.error("--entity-name is required")
    name = args.entity_name

    admin = AdminClient(client_config(args.bootstrap_server, config_file_properties(args)))
    metadata = check_reachable(admin, args.bootstrap_server)
    if args.entity_type == "topics" and name not in metadata.topics:
        raise ToolError(f"topic {name!r} does not exist")
    if args.entity_type == "brokers":
        # A broker the cluster does not have would only time out after 15 s.
        if not name.isdigit():
            raise ToolError(f"--entity-name of a broker is its node id, not {name!r}")
        if int(name) not in metadata.brokers:
            known = ", ".join(str(b) for b in sorted(metadata.brokers)) or "none"
            raise ToolError(f"broker {name} is not in the cluster (brokers: {known})")
    restype = ENTITY_TYPES[args.entity_type]
    label = f"{args.entity_type[:-1]} {name!r}"
    if args.describe:
        return _describe(admin, restype, name, label, args)
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in adds.items()
    ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
    resource = ConfigResource(restype, name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
    for future in futures.values():
        try:
            future.result(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise ToolError(f"cannot alter {label}: {describe_error(exc)}") from None
    print(f"Completed updating config for {label}.")
    return 0


def _describe(
    admin: AdminClient, restype: ResourceType, name: str, label: str, args: argparse.Namespace
) -> int:
    show_all = args.all
    futures = admin.describe_configs(
        [ConfigResource(restype, name)], request_timeout=REQUEST_TIMEOUT_S
    )
    try:
        entries = next(iter(futures.values())).result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as exc:
        raise ToolError(f"cannot describe {label}: {describe_error(exc)}") from None
    rows = [
        entry
        for _key, entry in sorted(entries.items())
        if show_all or source_code(entry.source) in DYNAMIC_SOURCES
    ]
    kind = "All" if show_all else "Dynamic"
    table = Listing("Name", "Value", "Source", "Read-only", "Sensitive")
    for entry in rows:
        value = (
            "(sensitive)"
            if entry.is_sensitive
            else ("null" if entry.value is None else entry.value)
        )
        table.add_row(
            entry.name,
            value,
            _source_name(entry.source),
            str(entry.is_read_only).lower(),
            str(entry.is_sensitive).lower(),
        )
    if rows:
        note(args, f"{kind} configs for {label}")
        show(args, table)
    else:
        note(args, f"{kind} configs for {label}: none")
    return 0
