"""``strom configs``: describe and change topic and broker configs, like kafka-configs.sh.

``--describe`` lists the configs set dynamically on the entity (a topic's own
overrides, a broker's dynamic configs); ``--all`` lists every config with its
source. ``--alter`` sends one IncrementalAlterConfigs request: ``--add-config
k=v,k2=v2`` sets (a value holding commas goes in brackets, ``k=[a,b]``, as in
kafka-configs.sh) and ``--delete-config k,k2`` removes overrides. Brokers are
named by node id. Client quotas (``--entity-type users|clients``, ``--user``,
``--client``) are ``strom.cli.client_quotas``. Not covered: the cluster-wide broker
default (``--entity-default``; confluent-kafka cannot name an empty resource) and IPs.

With ``--bootstrap-controller``, as kafka-configs.sh takes it (KIP-919), the tool talks
to the active controller at its controller listener (librdkafka cannot, so it sends
DescribeConfigs and IncrementalAlterConfigs itself, over TLS and SASL as
``--command-config`` says): the controller describes topics and its own node's configs
(another broker's is its one-line refusal) and decides the changes; client quotas and
SCRAM credentials are changed there too, but only brokers describe them.
"""

from __future__ import annotations

import argparse
from typing import Any, NamedTuple

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kio.schema.describe_configs.v4 import request as describe_req
from kio.schema.incremental_alter_configs.v1 import request as alter_req
from kio.static.primitive import i8

from strom.cli import client_quotas, scram, wire
from strom.cli.common import (
    ToolError,
    add_bootstrap,
    check_reachable,
    describe_error,
    source_code,
)
from strom.cli.output import Listing, add_output_option, note, show
from strom.cli.properties_file import ClusterAccess, add_config_file_option, cluster_access
from strom.protocol.errors import ErrorCode

REQUEST_TIMEOUT_S = 15.0
OP_SET, OP_DELETE = 0, 1  # IncrementalAlterConfigs' operations
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
    add_bootstrap(parser, controller=True)
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
    access = cluster_access(args)
    if scram.wanted(args, adds, deletes):
        return scram.run(parser, args, access, adds, deletes)
    if client_quotas.wanted(args):
        return client_quotas.run(parser, args, access, adds, deletes)
    if args.entity_type is None:
        parser.error("--entity-type is required")
    if not args.entity_name:
        parser.error("--entity-name is required")
    name = args.entity_name
    if args.entity_type == "brokers" and not name.isdigit():
        raise ToolError(f"--entity-name of a broker is its node id, not {name!r}")
    entity = Entity(ENTITY_TYPES[args.entity_type], name, f"{args.entity_type[:-1]} {name!r}")
    if access.controllers:
        if args.describe:
            return _show(args, entity.label, _describe_at_controller(access, entity))
        _alter_at_controller(access, entity, adds, deletes)
    else:
        admin = AdminClient(access.client_config())
        _check_entity(check_reachable(admin, access.bootstrap), args.entity_type, name)
        if args.describe:
            return _show(args, entity.label, _describe(admin, entity))
        _alter(admin, entity, adds, deletes)
    print(f"Completed updating config for {entity.label}.")
    return 0


class Entity(NamedTuple):
    """The topic or broker a command is about, and how the tool names it."""

    restype: ResourceType
    name: str
    label: str  # topic 'orders', broker '1'


class ConfigRow(NamedTuple):
    """A described config as the tool prints it, whichever way it was asked."""

    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool


def _check_entity(metadata: Any, entity_type: str, name: str) -> None:
    """A topic or broker the cluster does not have (a broker would only time out)."""
    if entity_type == "topics" and name not in metadata.topics:
        raise ToolError(f"topic {name!r} does not exist")
    if entity_type == "brokers" and int(name) not in metadata.brokers:
        known = ", ".join(str(b) for b in sorted(metadata.brokers)) or "none"
        raise ToolError(f"broker {name} is not in the cluster (brokers: {known})")


def _describe(admin: AdminClient, entity: Entity) -> list[ConfigRow]:
    futures = admin.describe_configs(
        [ConfigResource(entity.restype, entity.name)], request_timeout=REQUEST_TIMEOUT_S
    )
    try:
        entries = next(iter(futures.values())).result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as exc:
        raise ToolError(f"cannot describe {entity.label}: {describe_error(exc)}") from None
    return [
        ConfigRow(e.name, e.value, source_code(e.source), e.is_read_only, e.is_sensitive)
        for e in entries.values()
    ]


def _alter(admin: AdminClient, entity: Entity, adds: dict[str, str], deletes: list[str]) -> None:
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in adds.items()
    ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
    resource = ConfigResource(entity.restype, entity.name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
    for future in futures.values():
        try:
            future.result(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise ToolError(f"cannot alter {entity.label}: {describe_error(exc)}") from None


def _check_served(what: str, entity: Entity, result: Any) -> None:
    """The one line for a resource the controller refused."""
    if result.error_code == ErrorCode.none:
        return
    if result.error_code == ErrorCode.unknown_topic_or_partition:
        raise ToolError(f"topic {entity.name!r} does not exist")
    reason = wire.error_name(result.error_code)
    if result.error_message:
        reason += f": {result.error_message}"
    raise ToolError(f"cannot {what} {entity.label}: {reason}")


def _describe_at_controller(access: ClusterAccess, entity: Entity) -> list[ConfigRow]:
    """DescribeConfigs of the active controller (a broker resource must name that node)."""
    request = describe_req.DescribeConfigsRequest(
        resources=(
            describe_req.DescribeConfigsResource(
                resource_type=i8(int(entity.restype.value)),
                resource_name=entity.name,
                configuration_keys=None,
            ),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    (result,) = access.send(request, f"describe {entity.label}").results
    _check_served("describe", entity, result)
    return [
        ConfigRow(e.name, e.value, int(e.config_source), e.read_only, e.is_sensitive)
        for e in result.configs
    ]


def _alter_at_controller(
    access: ClusterAccess, entity: Entity, adds: dict[str, str], deletes: list[str]
) -> None:
    """IncrementalAlterConfigs decided by the active controller itself."""
    changes = [(k, OP_SET, v) for k, v in adds.items()] + [(k, OP_DELETE, None) for k in deletes]
    request = alter_req.IncrementalAlterConfigsRequest(
        resources=(
            alter_req.AlterConfigsResource(
                resource_type=i8(int(entity.restype.value)),
                resource_name=entity.name,
                configs=tuple(
                    alter_req.AlterableConfig(name=k, config_operation=i8(op), value=v)
                    for k, op, v in changes
                ),
            ),
        ),
        validate_only=False,
    )
    (result,) = access.send(request, f"alter {entity.label}").responses
    _check_served("alter", entity, result)


def _show(args: argparse.Namespace, label: str, configs: list[ConfigRow]) -> int:
    """The dynamic configs (all with ``--all``) as kafka-configs.sh lists them."""
    kind = "All" if args.all else "Dynamic"
    rows = sorted(c for c in configs if args.all or c.source in DYNAMIC_SOURCES)
    table = Listing("Name", "Value", "Source", "Read-only", "Sensitive")
    for row in rows:
        value = "(sensitive)" if row.sensitive else ("null" if row.value is None else row.value)
        table.add_row(
            row.name,
            value,
            _source_name(row.source),
            str(row.read_only).lower(),
            str(row.sensitive).lower(),
        )
    if rows:
        note(args, f"{kind} configs for {label}")
        show(args, table)
    else:
        note(args, f"{kind} configs for {label}: none")
    return 0
