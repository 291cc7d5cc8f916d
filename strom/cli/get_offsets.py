"""``strom get-offsets``: the offsets of topic partitions at a time, as kafka-get-offsets.sh.

``--topic`` is a regular expression matched against the whole topic name (default: every
topic), ``--partitions`` a comma-separated list of partition ids (default: all), or
``--topic-partitions`` Kafka's rule list ``REGEX[:N | :N-M | :N- | :-M],...``. ``--time``
is ``-1``/``latest`` (the log end offset, the default), ``-2``/``earliest`` (the log start
offset), ``-3``/``max-timestamp`` (the offset of the record with the largest timestamp) or
a timestamp in ms (the first offset whose timestamp is at least that). Prints
``topic:partition:offset`` lines sorted as Kafka sorts them; a partition without an answer
(a timestamp later than every record) prints nothing, a partition whose leader answers
an error is skipped with a line on stderr. Internal topics are included unless
``--exclude-internal-topics``. Uses ListOffsets through confluent-kafka's AdminClient.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from strom.cli.common import (
    CONNECT_TIMEOUT_S,
    ToolError,
    add_bootstrap,
    check_reachable,
    client_config,
    describe_error,
)
from strom.cli.properties_file import add_config_file_option, config_file_properties

REQUEST_TIMEOUT_S = 15.0
NAMED_TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}
_RULE = re.compile(r"\A([^:]*)(?::(?:(\d+)|(\d*)-(\d*)))?\Z")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "get-offsets",
        help="offsets of topic partitions at a time (like kafka-get-offsets.sh)",
        description="Print topic:partition:offset for the partitions matched, at --time.",
    )
    add_bootstrap(parser)
    parser.add_argument("--topic", help="regular expression for the topic names (default: all)")
    parser.add_argument("--partitions", help="comma-separated partition ids (default: all)")
    parser.add_argument(
        "--topic-partitions",
        metavar="RULES",
        help="REGEX[:N|:N-M|:N-|:-M],... (not with --topic or --partitions)",
    )
    parser.add_argument(
        "--time",
        default="latest",
        help="-1 or latest (default), -2 or earliest, -3 or max-timestamp, or a timestamp in ms",
    )
    parser.add_argument(
        "--exclude-internal-topics", action="store_true", help="leave out internal topics"
    )
    add_config_file_option(parser, "--command-config", "admin client")
    parser.set_defaults(run=run, parser=parser)


def parse_time(text: str) -> OffsetSpec:
    """Kafka's --time values; a ValueError for anything else."""
    value = NAMED_TIMES.get(text.strip().lower())
    if value is None:
        value = int(text)  # ValueError for a malformed time
    spec: OffsetSpec  # confluent-kafka leaves its constructors unannotated
    if value == -1:
        spec = OffsetSpec.latest()
    elif value == -2:
        spec = OffsetSpec.earliest()
    elif value == -3:
        spec = OffsetSpec.max_timestamp()
    elif value < 0:
        raise ValueError(f"unsupported time {value}")
    else:
        spec = OffsetSpec.for_timestamp(value)
    return spec


class PartitionRule:
    """A topic regex (matched against the whole name) and a partition test."""

    def __init__(self, topic: str, partitions: set[int] | None, low: int = 0, high: int = -1):
        self.topic = re.compile(topic)
        self.partitions = partitions
        self.low, self.high = low, high

    def allows_topic(self, name: str) -> bool:
        return self.topic.fullmatch(name) is not None

    def allows(self, name: str, partition: int) -> bool:
        if not self.allows_topic(name):
            return False
        if self.partitions is not None:
            return not self.partitions or partition in self.partitions
        return partition >= self.low and (self.high < 0 or partition < self.high)


def parse_rules(text: str) -> list[PartitionRule]:
    """``--topic-partitions``: ``REGEX:N`` one partition, ``REGEX:N-M`` N up to M (excluded),
    ``REGEX:N-`` from N, ``REGEX:-M`` below M; an empty REGEX is every topic."""
    rules = []
    for spec in text.split(","):
        match = _RULE.match(spec.strip())
        if match is None or not spec.strip():
            raise ValueError(f"invalid rule {spec!r}")
        topic, single, low, high = match.groups()
        topic = topic or ".*"
        try:
            re.compile(topic)
        except re.error as exc:
            raise ValueError(f"{topic!r} is not a regular expression: {exc}") from None
        if single is not None:
            rules.append(PartitionRule(topic, {int(single)}))
        else:
            rules.append(PartitionRule(topic, None, int(low or 0), int(high) if high else -1))
    return rules


def _rules(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[PartitionRule]:
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            parser.error("--topic-partitions cannot be used with --topic or --partitions")
        try:
            return parse_rules(args.topic_partitions)
        except ValueError as exc:
            parser.error(f"--topic-partitions: {exc}")
    try:
        partitions = {int(p) for p in args.partitions.split(",")} if args.partitions else set()
    except ValueError:
        parser.error(
            f"--partitions expects a comma-separated list of partition ids, got {args.partitions!r}"
        )
    try:
        return [PartitionRule(args.topic if args.topic is not None else ".*", partitions)]
    except re.error as exc:
        parser.error(f"--topic is not a regular expression: {exc}")


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    try:
        spec = parse_time(args.time)
    except ValueError:
        parser.error(
            f"malformed --time {args.time!r}: use -1 or latest, -2 or earliest, "
            "-3 or max-timestamp, or a timestamp in ms"
        )
    rules = _rules(parser, args)
    extra = config_file_properties(args)
    admin = AdminClient(client_config(args.bootstrap_server, extra))
    metadata = check_reachable(admin, args.bootstrap_server)
    wanted = [
        TopicPartition(name, partition)
        for name, topic in metadata.topics.items()
        if not (args.exclude_internal_topics and name.startswith("__"))
        for partition in topic.partitions
        if any(rule.allows(name, partition) for rule in rules)
    ]
    if not wanted:
        raise ToolError("could not match any topic-partitions with the specified filters")
    futures = admin.list_offsets({tp: spec for tp in wanted}, request_timeout=REQUEST_TIMEOUT_S)
    found: dict[str, str] = {}
    for tp, future in futures.items():
        name = f"{tp.topic}-{tp.partition}"
        try:
            info = future.result(timeout=REQUEST_TIMEOUT_S + CONNECT_TIMEOUT_S)
        except KafkaException as exc:
            print(
                f"strom get-offsets: skipped {name}: {describe_error(exc)}",
                file=sys.stderr,
            )
            continue
        if info.offset >= 0:
            found[name] = f"{tp.topic}:{tp.partition}:{info.offset}"
    for name in sorted(found):  # Kafka sorts by "topic-partition" text
        print(found[name])
    return 0
