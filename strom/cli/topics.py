"""``strom topics``: create, list, describe, alter and delete topics, like kafka-topics.sh.

Everything goes through confluent-kafka's AdminClient (CreateTopics, Metadata,
DescribeConfigs, CreatePartitions, DeleteTopics), so it works against any Kafka
cluster. ``--describe`` prints per topic its id, partition count, replication
factor, the configs set on the topic itself (what differs from the broker's
defaults) and a table of the partitions' leader, replicas and ISR (in the form
``strom.cli.output`` chooses: table, tab-separated lines or JSON). ``--list``
prints one name a line, as kafka-topics.sh, unless ``--output`` is given; both take
``--include REGEX`` (whole names) and ``--exclude-internal``.
``--alter`` only adds partitions; config changes go through ``strom configs``.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from strom.cli.common import (
    CONNECT_TIMEOUT_S,
    ToolError,
    add_bootstrap,
    check_reachable,
    client_config,
    describe_error,
    error_code,
    parse_properties,
    source_code,
    wire_int,
)
from strom.cli.output import Listing, add_output_option, note, show
from strom.cli.properties_file import add_config_file_option, config_file_properties

REQUEST_TIMEOUT_S = 15.0
# Kafka's internal topics (the cluster metadata log is not listed by brokers).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "topics",
        help="create, list, describe, alter, delete topics (like kafka-topics.sh)",
        description="Create, list, describe, alter and delete topics.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create a topic")
    action.add_argument("--list", action="store_true", help="list topic names")
    action.add_argument(
        "--describe", action="store_true", help="describe a topic (all topics without --topic)"
    )
    action.add_argument("--alter", action="store_true", help="add partitions to a topic")
    action.add_argument("--delete", action="store_true", help="delete a topic")
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "admin client")
    parser.add_argument("--topic", help="topic name")
    parser.add_argument(
        "--include",
        metavar="REGEX",
        help="with --list/--describe: only topics whose whole name matches",
    )
    parser.add_argument(
        "--exclude-internal",
        action="store_true",
        help=f"with --list/--describe: leave out {', '.join(sorted(INTERNAL_TOPICS))}",
    )
    parser.add_argument(
        "--partitions", type=wire_int("int32"), help="partition count (create, alter)"
    )
    parser.add_argument(
        "--replication-factor",
        type=wire_int("int16"),
        help="replication factor (create; default: the broker's)",
    )
    parser.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="topic config for --create (repeatable)",
    )
    parser.add_argument(
        "--if-not-exists", action="store_true", help="with --create: do nothing if the topic exists"
    )
    parser.add_argument(
        "--if-exists",
        action="store_true",
        help="with --describe/--alter/--delete: do nothing if the topic is missing",
    )
    add_output_option(parser)
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    configs = parse_properties(parser, args.config, "--config")
    if (args.create or args.alter or args.delete) and not args.topic:
        parser.error("--topic is required")
    if args.config and not args.create:
        parser.error("--config is only for --create; change configs with strom configs --alter")
    if args.alter and args.partitions is None:
        parser.error("--alter needs --partitions")
    if args.if_not_exists and not args.create:
        parser.error("--if-not-exists goes with --create")
    if args.if_exists and not (args.describe or args.alter or args.delete):
        parser.error("--if-exists goes with --describe, --alter or --delete")
    if (args.include is not None or args.exclude_internal) and not (args.list or args.describe):
        parser.error("--include and --exclude-internal go with --list or --describe")
    if args.include is not None and args.topic:
        parser.error("use either --topic or --include")
    try:
        include = re.compile(args.include) if args.include is not None else None
    except re.error as exc:
        parser.error(f"--include is not a regular expression: {exc}")
    for name in ("partitions", "replication_factor"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")

    admin = AdminClient(client_config(args.bootstrap_server, config_file_properties(args)))
    metadata = check_reachable(admin, args.bootstrap_server)
    exists = args.topic in metadata.topics if args.topic else True
    if args.create:
        return _create(admin, args, configs, exists)
    listed = sorted(
        name
        for name in metadata.topics
        if not (args.exclude_internal and name in INTERNAL_TOPICS)
        and (include is None or include.fullmatch(name))
    )
    if args.list:
        listing = Listing("Topic")
        for name in listed:
            listing.add_row(name)
        if args.output is None:  # Kafka's form: one name a line
            print("\n".join(row[0] for row in listing.rows))
        else:
            show(args, listing)
        return 0
    if args.topic and not exists:
        if args.if_exists:
            return 0
        raise ToolError(_absent(admin, args.topic))
    if args.describe:
        names = [args.topic] if args.topic else listed
        return _describe(admin, names, args)
    if args.alter:
        current = len(metadata.topics[args.topic].partitions)
        return _alter(admin, args.topic, args.partitions, current)
    return _delete(admin, args.topic)


def _wait(future: Any, what: str, tolerate: int | None = None) -> bool:
    """Wait for one admin future; False if it failed with ``tolerate``."""
    try:
        future.result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as exc:
        if tolerate is not None and error_code(exc) == tolerate:
            return False
        raise ToolError(f"{what}: {describe_error(exc)}") from None
    return True


def _absent(admin: AdminClient, name: str) -> str:
    """Why a topic the cluster listing lacks is not there: missing, or hidden from this
    principal (a listing leaves out the topics it may not describe; asked by name, the
    broker says TOPIC_AUTHORIZATION_FAILED)."""
    # DescribeTopics, not a Metadata request naming it: that would create the topic on a
    # broker with auto.create.topics.enable.
    (future,) = admin.describe_topics(
        TopicCollection([name]), request_timeout=CONNECT_TIMEOUT_S
    ).values()
    try:
        future.result()
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return f"not authorized to describe topic {name!r} (TOPIC_AUTHORIZATION_FAILED)"
    return f"topic {name!r} does not exist"


def _create(
    admin: AdminClient, args: argparse.Namespace, configs: dict[str, str], exists: bool
) -> int:
    if exists and args.if_not_exists:
        return 0
    topic = NewTopic(
        args.topic,
        num_partitions=args.partitions if args.partitions is not None else -1,
        replication_factor=args.replication_factor if args.replication_factor is not None else -1,
        config=configs,
    )
    futures = admin.create_topics([topic], request_timeout=REQUEST_TIMEOUT_S)
    tolerate = KafkaError.TOPIC_ALREADY_EXISTS if args.if_not_exists else None
    if _wait(futures[args.topic], f"cannot create topic {args.topic!r}", tolerate):
        print(f"Created topic {args.topic}.")
    return 0


def _alter(admin: AdminClient, topic: str, partitions: int, current: int) -> int:
    if partitions <= current:
        raise ToolError(
            f"topic {topic!r} has {current} partitions; --partitions must be more than that"
        )
    futures = admin.create_partitions(
        [NewPartitions(topic, partitions)], request_timeout=REQUEST_TIMEOUT_S
    )
    _wait(futures[topic], f"cannot add partitions to {topic!r}")
    print(f"Topic {topic} now has {partitions} partitions.")
    return 0


def _delete(admin: AdminClient, topic: str) -> int:
    futures = admin.delete_topics([topic], request_timeout=REQUEST_TIMEOUT_S)
    _wait(futures[topic], f"cannot delete topic {topic!r}")
    print(f"Deleted topic {topic}.")
    return 0


def _topic_overrides(admin: AdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    """The configs set on each topic itself (source DYNAMIC_TOPIC_CONFIG)."""
    if not names:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    result: dict[str, dict[str, str]] = {}
    for resource, future in admin.describe_configs(
        resources, request_timeout=REQUEST_TIMEOUT_S
    ).items():
        try:
            entries = future.result(timeout=REQUEST_TIMEOUT_S)
        except KafkaException:
            continue
        result[resource.name] = {
            key: entry.value
            for key, entry in sorted(entries.items())
            if source_code(entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            and entry.value is not None
        }
    return result


def _describe(admin: AdminClient, names: list[str], args: argparse.Namespace) -> int:
    futures = admin.describe_topics(TopicCollection(names), request_timeout=REQUEST_TIMEOUT_S)
    overrides = _topic_overrides(admin, names)
    for name in names:
        try:
            desc = futures[name].result(timeout=REQUEST_TIMEOUT_S + CONNECT_TIMEOUT_S)
        except KafkaException as exc:
            raise ToolError(f"cannot describe topic {name!r}: {describe_error(exc)}") from None
        partitions = sorted(desc.partitions, key=lambda p: p.id)
        replication = max((len(p.replicas) for p in partitions), default=0)
        configs = ",".join(f"{k}={v}" for k, v in overrides.get(name, {}).items())
        note(
            args,
            f"Topic: {name}  TopicId: {desc.topic_id}  PartitionCount: {len(partitions)}  "
            f"ReplicationFactor: {replication}",
        )
        note(args, f"Configs: {configs or '(defaults)'}")
        listing = Listing("Partition", "Leader", "Replicas", "Isr", numeric=["Partition", "Leader"])
        for p in partitions:
            listing.add_row(
                p.id,
                p.leader.id if p.leader is not None else "none",
                ",".join(str(n.id) for n in p.replicas),
                ",".join(str(n.id) for n in p.isr),
            )
        context = {
            "Topic": name,
            "TopicId": str(desc.topic_id),
            "PartitionCount": len(partitions),
            "ReplicationFactor": replication,
            "Configs": overrides.get(name, {}),
        }
        show(args, listing, context)
    return 0
